//===- runtime/Compile.cpp - Runtime::compile: a tile program into a FusedOp ---===//
//
// Compiling is collective: each rank compiles the program for its place in the job (topology,
// rank, SM count, arch), loads the kernel and checks that it fits the GPU; then every rank learns
// whether all did, with the same program, shapes and options (Agreement.cpp), before any binds
// the op's symmetric buffers and flags.
//
//===----------------------------------------------------------------------===//

#include "runtime/RuntimeState.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iterator>

namespace mkc {

namespace {

/// The kernel of `program` compiled, loaded with the rank's wait watch, and checked to fit this
/// GPU: every CTA resident at once (in whole clusters), and copy engines only on a GPU of its own;
/// `key` is its cache key.
std::shared_ptr<const LoadedKernel> loadResident(Runtime::State &runtime,
                                                 const TileProgram &program,
                                                 const JitOptions &options, std::string &key) {
  const cuda::Driver &cu = runtime.driver;
  std::shared_ptr<const CompiledKernel> compiled = runtime.jit.compile(program, options);
  std::shared_ptr<const LoadedKernel> kernel = runtime.jit.load(*compiled);
  key = compiled->source.key;
  runtime.watchWaits(kernel->module());
  const LaunchParameters &launch = kernel->launch();
  int perSm = 0;
  MK_CU_CHECK(cu, cuOccupancyMaxActiveBlocksPerMultiprocessor(
                      &perSm, kernel->function(), MK_CTA_THREADS, launch.dynamicSmemBytes));
  if (perSm * runtime.smCount < launch.grid)
    throw RuntimeError(fmt::format("{} needs its {} CTAs resident at once; this GPU holds {} ({} "
                                   "per SM)",
                                   compiled->source.kernel, launch.grid, perSm * runtime.smCount,
                                   perSm));
  // Clusters go whole to one GPC each, which may leave SMs idle.
  int clusterWidth = 0;
  MK_CU_CHECK(cu, cuFuncGetAttribute(&clusterWidth, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH,
                                     kernel->function()));
  if (clusterWidth > 1) {
    const CUlaunchConfig config = persistentLaunch(launch);
    int clusters = 0;
    MK_CU_CHECK(cu, cuOccupancyMaxActiveClusters(&clusters, kernel->function(), &config));
    if (clusters * clusterWidth < launch.grid)
      throw RuntimeError(fmt::format(
          "{} needs its {} CTAs resident at once, in clusters of {}; this GPU holds {} such "
          "clusters (mkc --gemm-cluster=1 compiles it without)",
          compiled->source.kernel, launch.grid, clusterWidth, clusters));
  }
  // The copies would wait for the kernel that waits for them.
  if (!launch.engineCopies.empty() && !runtime.ranksSharingGpu.empty())
    throw RuntimeError(fmt::format(
        "{} has copy engines move its all-reduce (all-reduce-copy-engine), but this rank's GPU "
        "is also rank {}'s (MKC_SHARE_GPU=1): the driver makes a copy within one GPU on its "
        "SMs, which the kernel holds while it waits for the copy; give each rank of the node "
        "its own GPU, or compile without all-reduce-copy-engine",
        compiled->source.kernel, fmt::join(runtime.ranksSharingGpu, ", ")));
  return kernel;
}

/// The op of a loaded kernel (cache key `key`): its arguments, the buffers and flags it keeps
/// (symmetric ones in the same order on every rank, hence collective), its epoch, its copy
/// engines' stream and its SM split (the controller's, collective too, unless the caller chose
/// the split: `controlled` false).
std::shared_ptr<FusedOp::State> bindOp(const std::shared_ptr<Runtime::State> &state,
                                       std::shared_ptr<const LoadedKernel> kernel,
                                       const std::string &key, bool controlled) {
  Runtime::State &runtime = *state;
  const cuda::Driver &cu = runtime.driver;
  ProcessGroup &group = runtime.group;
  auto op = std::make_shared<FusedOp::State>();
  op->runtime = state;
  op->kernel = kernel;
  op->name = kernel->name();
  const LaunchParameters &launch = kernel->launch();
  for (int i = 0; i < launch.arguments; ++i)
    op->arguments.push_back({launch.argumentTypes[i],
                             static_cast<std::size_t>(launch.tensorBytes[i]),
                             bool(launch.symmetricTensors >> i & 1)});
  // The buffers the program keeps: symmetric ones in the same order on every rank.
  mk_kernel_args &parameter = op->parameter;
  for (std::size_t i = launch.arguments; i < launch.tensorBytes.size(); ++i) {
    const auto bytes = static_cast<std::size_t>(launch.tensorBytes[i]);
    if (launch.symmetricTensors >> i & 1) {
      parameter.tensors[i] = tensorRef(runtime.heap->allocate(bytes));
    } else {
      CUdeviceptr buffer;
      MK_CU_CHECK(cu, cuMemAlloc(&buffer, bytes));
      op->privateBuffers.push_back(buffer);
      parameter.tensors[i].local = reinterpret_cast<void *>(buffer);
    }
  }
  bindFlags(parameter, runtime.heap->allocateFlags(std::max(launch.flagWords, 1)));
  {
    std::lock_guard lock(runtime.opFlagsMutex);
    runtime.opFlags.push_back(
        {op->name, parameter.flags, static_cast<mk_u32>(std::max(launch.flagWords, 1))});
  }
  if (runtime.proxy) {
    // Other nodes count their arrivals here, [nodes][flag words]; zero before any can come.
    const std::size_t words = std::size_t(group.nodeCount()) * std::max(launch.flagWords, 1);
    SymmetricBuffer netFlags = runtime.heap->allocate(words * sizeof(mk_u32));
    MK_CU_CHECK(cu, cuMemsetD32(reinterpret_cast<CUdeviceptr>(netFlags.local), 0, words));
    MK_CU_CHECK(cu, cuCtxSynchronize()); // the memset may still be queued when it returns
    group.store().barrier();
    parameter.net_flags = static_cast<mk_u32 *>(netFlags.local);
    parameter.queue = runtime.proxy->queue().deviceView();
  }
  const mk_launch_count first{1, 0};
  MK_CU_CHECK(cu, cuMemAlloc(&op->launches, sizeof first));
  MK_CU_CHECK(cu, cuMemcpyHtoD(op->launches, &first, sizeof first));
  parameter.launches = reinterpret_cast<mk_launch_count *>(op->launches);
  void *report = nullptr;
  MK_CU_CHECK(cu, cuMemHostAlloc(&report, sizeof(mk_op_report), CU_MEMHOSTALLOC_DEVICEMAP));
  op->report = static_cast<mk_op_report *>(report);
  *op->report = {};
  CUdeviceptr reportOnDevice = 0;
  MK_CU_CHECK(cu, cuMemHostGetDevicePointer(&reportOnDevice, report, 0));
  parameter.report = reinterpret_cast<mk_op_report *>(reportOnDevice);
  MK_CU_CHECK(cu, cuMemAlloc(&op->counters, sizeof(mk_op_counters)));
  MK_CU_CHECK(cu, cuMemsetD8(op->counters, 0, sizeof(mk_op_counters)));
  // The first epoch and the zeroed counters (and the module's mk_watch) have landed before any
  // launch: a memset, or a copy from pageable memory, may still be queued when the call returns,
  // and a launch on a non-blocking stream is not ordered after them.
  MK_CU_CHECK(cu, cuCtxSynchronize());
  parameter.counters = reinterpret_cast<mk_op_counters *>(op->counters);
  parameter.nodes = static_cast<mk_u32>(group.nodeCount());
  parameter.flag_words = static_cast<mk_u32>(std::max(launch.flagWords, 1));
  parameter.node = static_cast<mk_u32>(group.nodeIndex());
  parameter.gpu = static_cast<mk_u32>(group.localRank());
  parameter.abi_version = MK_ABI_VERSION;
  MK_CU_CHECK(cu, cuFuncGetAttribute(&op->clusterWidth, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH,
                                     kernel->function()));
  op->clusterWidth = std::max(op->clusterWidth, 1);
  op->takeSplit(launch.smSplit);
  if (controlled)
    op->startControl(key);
  std::copy_if(launch.engineCopies.begin(), launch.engineCopies.end(),
               std::back_inserter(op->copies),
               [&](const mk_engine_copy &copy) { return copy.from_gpu == parameter.gpu; });
  if (!op->copies.empty()) {
    MK_CU_CHECK(cu, cuStreamCreate(&op->copyStream, CU_STREAM_NON_BLOCKING));
    MK_CU_CHECK(cu, cuEventCreate(&op->copiesMayStart, CU_EVENT_DISABLE_TIMING));
    MK_CU_CHECK(cu, cuEventCreate(&op->copiesDone, CU_EVENT_DISABLE_TIMING));
  }
  return op;
}

} // namespace

FusedOp Runtime::compile(const TileProgram &program, const std::vector<std::string> &shapes,
                         const std::string &options) {
  return compile([&] { return program; }, program.name, shapes, options);
}

FusedOp Runtime::compileFile(const std::filesystem::path &path,
                             const std::vector<std::string> &shapes, const std::string &options) {
  return compile([&] { return TileProgram::fromFile(path); }, path.string(), shapes, options);
}

FusedOp Runtime::compile(const std::function<TileProgram()> &read, const std::string &name,
                         const std::vector<std::string> &shapes,
                         const std::string &compilerOptions) {
  State &runtime = *state_;
  ProcessGroup &group = runtime.group;
  JitOptions options;
  options.pipeline.topology = fmt::format("{}x{}", group.nodeCount(), group.localWorldSize());
  options.pipeline.rank = group.rank();
  options.pipeline.shapes = shapes;
  options.pipeline.smCount = runtime.smCount;
  options.pipeline.gpuSmCount = runtime.gpuSmCount;
  options.nvrtc.arch = runtime.arch;
  options.nvrtc.extraOptions = runtime.nvrtcOptions;

  cuda::ContextScope scope(runtime.driver, runtime.context.context());
  std::shared_ptr<const LoadedKernel> kernel;
  TileProgram program;
  std::string failure, key;
  try {
    setCompilerOptions(options, compilerOptions);
    // Ranks at once on one GPU: a grid of clusters did not fit beside another where one of
    // single CTAs did (GpuPlace.cpp).
    if (runtime.ranksAtOnce && !options.pipeline.gemmCluster)
      options.pipeline.gemmCluster = 1;
    program = read();
    kernel = loadResident(runtime, program, options, key);
  } catch (const std::exception &error) {
    failure = error.what();
  }
  if (auto error = agree(
          group, "compiling " + name, {"the program", "shapes", "the compiler options"},
          {program.text, fmt::format("{}", fmt::join(shapes, ",")), compilerOptions}, failure))
    throw JitError(*error);
  return FusedOp(bindOp(state_, std::move(kernel), key, options.pipeline.smSplit.empty()));
}

} // namespace mkc
