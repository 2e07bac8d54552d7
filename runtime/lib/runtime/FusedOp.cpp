//===- runtime/FusedOp.cpp - a compiled op's arguments checked and its launches ---===//
//
// A launch checks its arguments (symmetric memory where peers write, else memory of this rank's
// GPU within its allocation) unless they repeat the last launch's, builds the tensor maps over
// them, and launches the persistent kernel cooperatively, with the copies of the GPU's copy
// engines beside it (and then the epoch advanced: other kernels advance it themselves).
//
//===----------------------------------------------------------------------===//

#include "runtime/RuntimeState.h"

#include "mk/runtime/driver/TensorMap.h"
#include "mk/runtime/support/Log.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ranges>
#include <sstream>

#include <unistd.h>

namespace mkc {

CUlaunchConfig persistentLaunch(const LaunchParameters &launch, CUstream stream) {
  CUlaunchConfig config{};
  config.gridDimX = static_cast<unsigned>(launch.grid);
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = MK_CTA_THREADS;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = static_cast<unsigned>(launch.dynamicSmemBytes);
  config.hStream = stream;
  return config;
}

FusedOp::State::~State() {
  const cuda::Driver &cu = runtime->driver;
  try {
    cuda::ContextScope scope(cu, runtime->context.context());
    for (CUdeviceptr buffer : privateBuffers)
      cu.cuMemFree(buffer);
    for (CUdeviceptr buffer : {launches, counters})
      if (buffer)
        cu.cuMemFree(buffer);
    if (report)
      cu.cuMemFreeHost(report);
    for (CUevent event : {copiesMayStart, copiesDone, control.start, control.end})
      if (event)
        cu.cuEventDestroy(event);
    if (copyStream)
      cu.cuStreamDestroy(copyStream);
  } catch (const std::exception &error) {
    log::error("runtime: freeing the buffers of {}: {}", name, error.what());
  }
}

mk_tensor_ref FusedOp::State::reference(int index, void *pointer) const {
  const Argument &argument = arguments[index];
  auto describe = [&] {
    return fmt::format("argument {} of {} ({}[{}], {} bytes on this rank)", index, name,
                       argument.type.element, fmt::join(argument.type.extents, ","),
                       argument.bytes);
  };
  // An empty shard (of an extent smaller than the ranks) is never read or written.
  if (!argument.bytes)
    return mk_tensor_ref{pointer, {}};
  if (!pointer)
    throw RuntimeError(describe() + " is null");
  if (argument.symmetric) {
    std::optional<SymmetricBuffer> buffer = runtime->heap->find(pointer, argument.bytes);
    if (!buffer)
      throw RuntimeError(describe() + " must lie in symmetric memory, where peers write it: "
                                      "allocate it from the runtime (Runtime::allocate, "
                                      "mkc_symmetric_alloc, mkc.Runtime.empty)");
    return tensorRef(*buffer);
  }
  const cuda::Driver &cu = runtime->driver;
  const auto address = reinterpret_cast<CUdeviceptr>(pointer);
  int ordinal = -1;
  if (CUresult result =
          cu.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address);
      result != CUDA_SUCCESS)
    throw RuntimeError(describe() + " is not memory the CUDA driver knows: " + cu.describe(result));
  if (ordinal != runtime->device)
    throw RuntimeError(fmt::format("{} is memory of GPU {}; this rank runs on GPU {}", describe(),
                                   ordinal, runtime->device));
  // Allocations of the VMM API (PyTorch's expandable segments) have no range to check.
  CUdeviceptr start = 0;
  std::size_t size = 0;
  if (cu.cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, address) ==
          CUDA_SUCCESS &&
      cu.cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, address) == CUDA_SUCCESS &&
      size && address + argument.bytes > start + size)
    throw RuntimeError(fmt::format("{} overruns its allocation, which ends {} bytes after it",
                                   describe(), start + size - address));
  mk_tensor_ref ref{};
  ref.local = pointer;
  return ref;
}

void FusedOp::State::checkRouting() const {
  auto *routing = reinterpret_cast<volatile mk_routing_report *>(&report->routing);
  if (!routing->invalid)
    return;
  const mk_routing_report seen = const_cast<const mk_routing_report &>(report->routing);
  routing->invalid = 0;
  throw RuntimeError(fmt::format(
      "{}: a launch routed choice {} of token {} (of rank {}'s tokens) to expert {}, outside [0, "
      "{}); that copy went to no expert, so the token's result lacks it. The expert indices must "
      "lie in [0, E)",
      name, seen.invalid_choice, seen.invalid_token, runtime->group.rank(), seen.invalid_expert,
      kernel->launch().routedExperts));
}

const std::string &FusedOp::name() const { return state_->name; }
const std::vector<Argument> &FusedOp::arguments() const { return state_->arguments; }
const LoadedKernel &FusedOp::kernel() const { return *state_->kernel; }

void FusedOp::State::takeSplit(const mlir::mk::SmSplit &chosen) {
  split = chosen;
  mk_u32 first = 0;
  for (std::size_t i = 0; i < split.roles.size(); ++i) {
    roles[i] = {first, static_cast<mk_u32>(split.roles[i].ctas)};
    first += roles[i].ctas;
  }
}

/// The controller's answer as the file keeps it: each role's CTAs, in the kernel's order.
static std::string countsOf(const mlir::mk::SmSplit &split) {
  return fmt::format("{}", fmt::join(split.roles | std::views::transform(
                                                       [](const auto &role) { return role.ctas; }),
                                     ","));
}

void FusedOp::State::startControl(const std::string &key) {
  if (!runtime->smController || split.roles.size() < 2)
    return;
  std::string gpu = runtime->gpuName;
  std::ranges::replace_if(
      gpu, [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  control.answer = runtime->jit.cacheDirectory() / key / ("sm-split-" + gpu);
  // Every rank proposes what its cache keeps; where all keep the same split, it is taken.
  std::string kept;
  if (std::ifstream in(control.answer); in)
    std::getline(in, kept);
  std::vector<std::vector<std::byte>> all = runtime->group.store().allGather(blobOf({kept}));
  const bool agreed = !kept.empty() && std::ranges::all_of(all, [&](const auto &blob) {
    return fields(blob) == std::vector<std::string>{kept};
  });
  if (agreed) {
    mlir::mk::SmSplit answer = kernel->launch().smSplit;
    std::istringstream counts(kept);
    for (auto &role : answer.roles) {
      std::string count;
      std::getline(counts, count, ',');
      role.ctas = std::atoll(count.c_str());
    }
    if (!answer.checkLaunch(kernel->launch().smSplit, clusterWidth)) {
      takeSplit(answer);
      log::debug("{}: SM split {}, the controller's from {}", name, answer.str(),
                 control.answer.string());
      return;
    }
  }
  const cuda::Driver &cu = runtime->driver;
  MK_CU_CHECK(cu, cuEventCreate(&control.start, CU_EVENT_DEFAULT));
  MK_CU_CHECK(cu, cuEventCreate(&control.end, CU_EVENT_DEFAULT));
  control.search = std::make_unique<SplitSearch>(split, clusterWidth, kernel->launch().poolRole);
  control.searching = !control.search->done();
}

bool FusedOp::State::stepControl(CUstream stream) {
  const cuda::Driver &cu = runtime->driver;
  // A graph being captured replays whatever split it captures: the search waits for an eager
  // launch.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  MK_CU_CHECK(cu, cuStreamIsCapturing(stream, &capture));
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return false;
  SplitSearch &search = *control.search;
  if (control.timing) {
    MK_CU_CHECK(cu, cuEventSynchronize(control.end));
    float ms = 0;
    MK_CU_CHECK(cu, cuEventElapsedTime(&ms, control.start, control.end));
    // The slowest rank's time judges: every rank takes the same step.
    double slowest = 0;
    for (const auto &blob : runtime->group.store().allGather(blobOf({fmt::format("{}", ms)})))
      slowest = std::max(slowest, std::atof(fields(blob).at(0).c_str()));
    search.measured(slowest);
    control.timing = false;
  }
  const mlir::mk::SmSplit &next = search.done() ? search.best() : search.current();
  if (next != split) {
    std::lock_guard lock(checkedMutex);
    takeSplit(next);
    log::debug("{}: SM split {} ({})", name, next.str(),
               search.done() ? "the controller's answer" : "timed by the controller");
  }
  if (!search.done()) {
    control.timing = true;
    return true;
  }
  log::debug("{}: SM split settled at {} ({:.3f} ms a launch, slowest rank), kept in {}", name,
             search.best().str(), search.bestTime().value_or(0), control.answer.string());
  // Written whole under this process's name (every rank of a node writes one), then renamed: a
  // reader sees an answer or none.
  std::error_code ignored;
  std::filesystem::create_directories(control.answer.parent_path(), ignored);
  const std::filesystem::path partial =
      fmt::format("{}.partial-{}", control.answer.string(), ::getpid());
  if (std::ofstream(partial) << countsOf(search.best()) << "\n")
    std::filesystem::rename(partial, control.answer, ignored);
  control.search.reset();
  control.searching = false;
  return false;
}

mlir::mk::SmSplit FusedOp::smSplit() const {
  std::lock_guard lock(state_->checkedMutex);
  return state_->split;
}

void FusedOp::setSmSplit(const mlir::mk::SmSplit &split) {
  State &op = *state_;
  std::optional<std::string> wrong =
      split.checkLaunch(op.kernel->launch().smSplit, op.clusterWidth);
  if (std::optional<std::string> error =
          agree(op.runtime->group, fmt::format("setting the SM split of {}", op.name), {"split"},
                {split.str()}, wrong.value_or("")))
    throw RuntimeError(*error);
  // The caller's split stands: the controller stops.
  std::lock_guard control(op.control.mutex);
  op.control.search.reset();
  op.control.searching = false;
  std::lock_guard lock(op.checkedMutex);
  op.takeSplit(split);
}

RoutingReport FusedOp::routing() const {
  const State &op = *state_;
  if (!op.kernel->launch().routedExperts)
    throw RuntimeError(op.name + " routes no tokens to experts (it has no mk.dispatch)");
  op.checkRouting();
  mk_op_counters counters{};
  {
    const cuda::Driver &cu = op.runtime->driver;
    cuda::ContextScope scope(cu, op.runtime->context.context());
    MK_CU_CHECK(cu, cuMemcpyDtoH(&counters, op.counters, sizeof(counters)));
  }
  const auto &routing = *reinterpret_cast<volatile const mk_routing_report *>(&op.report->routing);
  // The count is written before the epoch: read it after, and again if a launch wrote between.
  for (;;) {
    const mk_u32 epoch = routing.epoch;
    std::atomic_thread_fence(std::memory_order_acquire);
    const mk_u32 dropped = routing.dropped;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (routing.epoch == epoch)
      return {epoch, dropped, counters.nvlink_bytes};
  }
}

namespace {

/// Queues the op's copies on its copy stream, in order: each waits until its flag holds the
/// count the kernel raises it to, copies its rows into the other GPU's mapping, sets the flag
/// to signal on both GPUs to the epoch (a copy of the epoch word, so that a captured graph
/// replays with the epoch of each replay), and clears the flag it waited for, which the next
/// launch's kernel, ordered after this stream, counts up from zero again.
void enqueueEngineCopies(const FusedOp::State &op, const mk_kernel_args &parameter) {
  const cuda::Driver &cu = op.runtime->driver;
  auto word = [](const mk_u32 *flags, mk_u32 index) {
    return reinterpret_cast<CUdeviceptr>(flags + index);
  };
  // The clearing of one copy's flag and the wait of the next go in one batch.
  std::vector<CUstreamBatchMemOpParams> ops;
  for (const mk_engine_copy &copy : op.copies) {
    const mk_tensor_ref &tensor = parameter.tensors[copy.tensor];
    ops.push_back(cuda::waitValueAtLeast(word(parameter.flags, copy.wait_flag), copy.wait_count));
    cuda::batchMemOps(cu, op.copyStream, ops);
    CUDA_MEMCPY2D region{};
    region.srcMemoryType = region.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    region.srcDevice = reinterpret_cast<CUdeviceptr>(tensor.local) + copy.offset;
    region.dstDevice = reinterpret_cast<CUdeviceptr>(tensor.peer[copy.to_gpu]) + copy.offset;
    region.srcPitch = region.dstPitch = copy.pitch;
    region.WidthInBytes = copy.width;
    region.Height = copy.height;
    MK_CU_CHECK(cu, cuMemcpy2DAsync(&region, op.copyStream));
    // A copy, not a stream write of a value, so that CUDA graph replays raise fresh epochs;
    // only to the other GPU, where it is a copy engine's (within a GPU, the SMs').
    MK_CU_CHECK(cu, cuMemcpyDtoDAsync(word(parameter.flags_peer[copy.to_gpu], copy.signal_flag),
                                      op.launches + offsetof(mk_launch_count, epoch),
                                      sizeof(mk_u32), op.copyStream));
    ops.assign({cuda::writeValue(word(parameter.flags, copy.wait_flag), mk_u32(0))});
  }
  cuda::batchMemOps(cu, op.copyStream, ops);
}

} // namespace

void FusedOp::launch(CUstream stream, std::span<void *const> pointers) const {
  const State &op = *state_;
  const cuda::Driver &cu = op.runtime->driver;
  if (pointers.size() != op.arguments.size())
    throw RuntimeError(fmt::format("{} takes {} arguments, not {}", op.name, op.arguments.size(),
                                   pointers.size()));
  // A proxy that failed, or a wait that gave up, has stopped kernels' waits: say why instead of
  // launching.
  op.runtime->check();
  op.checkRouting();
  cuda::ContextScope scope(cu, op.runtime->context.context());
  // While the controller searches, its step before the launch (which may change the split),
  // and the launch timed.
  State &controlled = *state_;
  std::unique_lock control(controlled.control.mutex, std::defer_lock);
  bool timed = false;
  if (controlled.control.searching.load(std::memory_order_acquire)) {
    control.lock();
    timed = controlled.control.search && controlled.stepControl(stream);
  }
  mk_kernel_args parameter = op.parameter;
  {
    std::lock_guard lock(op.checkedMutex);
    if (!std::equal(pointers.begin(), pointers.end(), op.checkedPointers.begin(),
                    op.checkedPointers.end())) {
      std::vector<mk_tensor_ref> references;
      for (std::size_t i = 0; i < pointers.size(); ++i)
        references.push_back(op.reference(static_cast<int>(i), pointers[i]));
      std::copy(references.begin(), references.end(), parameter.tensors);
      std::vector<mk_tensor_map> maps;
      for (const mk_tensor_map_spec &spec : op.kernel->launch().tensorMaps) {
        const mk_tensor_ref &tensor = parameter.tensors[spec.tensor];
        const void *base = spec.gpu == MK_MAP_LOCAL ? tensor.local : tensor.peer[spec.gpu];
        maps.push_back(encodeTensorMap(cu, spec, base));
      }
      op.checkedPointers.assign(pointers.begin(), pointers.end());
      op.checkedReferences = std::move(references);
      op.checkedMaps = std::move(maps);
    }
    std::copy(op.checkedReferences.begin(), op.checkedReferences.end(), parameter.tensors);
    std::copy(op.checkedMaps.begin(), op.checkedMaps.end(), parameter.maps);
    std::copy(std::begin(op.roles), std::end(op.roles), parameter.roles);
  }

  const LaunchParameters &launch = op.kernel->launch();
  // Cooperative: the driver refuses the launch unless every CTA is resident at once, which the
  // CTAs' waits on each other need.
  CUlaunchAttribute cooperative{};
  cooperative.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  cooperative.value.cooperative = 1;
  CUlaunchConfig config = persistentLaunch(launch, stream);
  config.attrs = &cooperative;
  config.numAttrs = 1;
  void *kernelParameters[] = {&parameter};
  // Launches across nodes are counted as they queue; a graph being captured queues nothing now.
  bool counted = false;
  if (op.runtime->proxy) {
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    MK_CU_CHECK(cu, cuStreamIsCapturing(stream, &capture));
    counted = capture == CU_STREAM_CAPTURE_STATUS_NONE;
  }
  if (counted)
    op.runtime->awaitLaunchRoom();
  if (op.copyStream) {
    MK_CU_CHECK(cu, cuEventRecord(op.copiesMayStart, stream));
    MK_CU_CHECK(cu, cuStreamWaitEvent(op.copyStream, op.copiesMayStart, 0));
  }
  if (timed)
    MK_CU_CHECK(cu, cuEventRecord(op.control.start, stream));
  MK_CU_CHECK(cu, cuLaunchKernelEx(&config, op.kernel->function(), kernelParameters, nullptr));
  if (timed)
    MK_CU_CHECK(cu, cuEventRecord(op.control.end, stream));
  if (op.copyStream) {
    enqueueEngineCopies(op, parameter);
    MK_CU_CHECK(cu, cuEventRecord(op.copiesDone, op.copyStream));
    MK_CU_CHECK(cu, cuStreamWaitEvent(stream, op.copiesDone, 0));
    CUdeviceptr launches = op.launches;
    void *advanceParameters[] = {&launches};
    MK_CU_CHECK(cu, cuLaunchKernel(op.kernel->advanceEpoch(), 1, 1, 1, 1, 1, 1, 0, stream,
                                   advanceParameters, nullptr));
  }
  if (counted)
    op.runtime->recordLaunch(stream);
}

} // namespace mkc
