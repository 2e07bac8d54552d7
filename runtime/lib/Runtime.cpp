//===- Runtime.cpp - the runtime an application embeds ----------------------===//

#include "mk/runtime/Runtime.h"
#include "mk/runtime/TensorMap.h"
#include "mk/runtime/net/Proxy.h"

#include "mk/runtime/Log.h"
#include "mk/support/BoundedInt.h"
#include "mk/support/ByteCodec.h"

#include "mk/abi.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

namespace mkc {

namespace {

std::size_t parseSize(const std::string &variable, const std::string &text) {
  const std::string_view digits(text.data(),
                                std::min(text.find_first_not_of("0123456789"), text.size()));
  const std::string_view suffix = std::string_view(text).substr(digits.size());
  int shift = suffix.empty()  ? 0
              : suffix == "K" ? 10
              : suffix == "M" ? 20
              : suffix == "G" ? 30
                              : -1;
  const std::optional<std::int64_t> value =
      shift < 0 ? std::nullopt : parseBoundedInt(digits, 1, INT64_MAX >> shift);
  if (!value)
    throw RuntimeError(fmt::format("{}={} is not a positive count (digits, optionally followed by "
                                   "K, M or G)",
                                   variable, text));
  return static_cast<std::size_t>(*value) << shift;
}

/// `blob` split at its NUL bytes.
std::vector<std::string> fields(const std::vector<std::byte> &blob) {
  std::vector<std::string> result(1);
  for (std::byte b : blob) {
    if (b == std::byte(0))
      result.emplace_back();
    else
      result.back().push_back(static_cast<char>(b));
  }
  return result;
}

std::vector<std::byte> blobOf(const std::vector<std::string> &fields) {
  std::vector<std::byte> blob;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (i)
      blob.push_back(std::byte(0));
    for (char c : fields[i])
      blob.push_back(static_cast<std::byte>(c));
  }
  return blob;
}

/// Every rank's `request` (fields naming what each asks for) and `failure` (empty if its part
/// went well), compared: the same message on every rank if one failed or asked for something
/// else than rank 0, naming it; none if all agree. `names` label the request's fields.
std::optional<std::string> agree(ProcessGroup &group, const std::string &what,
                                 const std::vector<std::string> &names,
                                 std::vector<std::string> request, const std::string &failure) {
  request.push_back(failure);
  std::vector<std::vector<std::byte>> blobs = group.store().allGather(blobOf(request));
  std::vector<std::vector<std::string>> answers;
  for (const auto &blob : blobs)
    answers.push_back(fields(blob));
  for (int rank = 0; rank < group.worldSize(); ++rank) {
    if (answers[rank].size() != request.size())
      return fmt::format("{}: rank {} sent a malformed answer", what, rank);
    if (const std::string &error = answers[rank].back(); !error.empty())
      return rank == group.rank() ? fmt::format("{}: {}", what, error)
                                  : fmt::format("{} failed on rank {}: {}", what, rank, error);
  }
  for (int rank = 1; rank < group.worldSize(); ++rank)
    for (std::size_t field = 0; field < names.size(); ++field)
      if (answers[rank][field] != answers[0][field])
        return fmt::format("{}: rank {} asks for {} \"{}\", rank 0 for \"{}\": every rank must "
                           "make the same collective calls",
                           what, rank, names[field], answers[rank][field], answers[0][field]);
  return std::nullopt;
}

int deviceAttribute(const cuda::Driver &cu, CUdevice device, CUdevice_attribute attribute) {
  int value = 0;
  MK_CU_CHECK(cu, cuDeviceGetAttribute(&value, attribute, device));
  return value;
}

/// The driver, if it works: a rank without one has nothing to say but that.
const cuda::Driver &availableDriver() {
  const cuda::Driver &cu = cuda::Driver::get();
  if (!cu.available())
    throw NoDeviceError("no usable CUDA driver: " + cu.unavailableReason());
  return cu;
}

/// The launcher's job, once the driver is known to work.
LaunchEnvironment detectWithDriver() {
  availableDriver();
  return detectLaunchEnvironment();
}

/// The CPUs of the GPU's NUMA node, from sysfs ("0-15,32-47"): where its proxy thread polls.
/// Empty when the kernel does not say.
std::vector<int> cpusNear(std::string busId) {
  std::transform(busId.begin(), busId.end(), busId.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  std::ifstream file("/sys/bus/pci/devices/" + busId + "/local_cpulist");
  std::string list;
  std::vector<int> cpus;
  if (!std::getline(file, list))
    return cpus;
  std::istringstream ranges(list);
  for (std::string range; std::getline(ranges, range, ',');) {
    int first = 0, last = 0;
    const char *end = range.data() + range.size();
    auto [dash, error] = std::from_chars(range.data(), end, first);
    last = first;
    if (error == std::errc() && dash != end && *dash == '-')
      std::from_chars(dash + 1, end, last);
    for (int cpu = first; cpu <= last; ++cpu)
      cpus.push_back(cpu);
  }
  return cpus;
}

/// The CUDA device of a rank: the one it chose, else its local rank's; with `share` (ranks taking
/// turns on fewer GPUs) either modulo the GPUs this process sees.
int rankDevice(const cuda::Driver &cu, const ProcessGroup &group, std::optional<int> chosen,
               bool share) {
  int devices = 0;
  MK_CU_CHECK(cu, cuDeviceGetCount(&devices));
  if (share)
    return (chosen ? *chosen : group.localRank()) % devices;
  if (chosen)
    return *chosen;
  if (devices == 1)
    return 0; // the launcher gave each rank its own GPU (CUDA_VISIBLE_DEVICES)
  if (group.localRank() >= devices)
    throw NoDeviceError(fmt::format("local rank {} has no GPU of its own: this process sees {} "
                                    "GPUs; set MKC_DEVICE or CUDA_VISIBLE_DEVICES",
                                    group.localRank(), devices));
  return group.localRank();
}

/// The launch of a persistent kernel: its grid of MK_CTA_THREADS-thread CTAs on `stream`.
CUlaunchConfig persistentLaunch(const LaunchParameters &launch, CUstream stream = nullptr) {
  CUlaunchConfig config{};
  config.gridDimX = static_cast<unsigned>(launch.grid);
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = MK_CTA_THREADS;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = static_cast<unsigned>(launch.dynamicSmemBytes);
  config.hStream = stream;
  return config;
}

} // namespace

RuntimeOptions RuntimeOptions::fromEnvironment(const Environment &environment) {
  RuntimeOptions options;
  auto variable = [&](const char *name) -> const std::string * {
    auto found = environment.find(name);
    return found == environment.end() ? nullptr : &found->second;
  };
  if (const std::string *value = variable("MKC_SYMMETRIC_BYTES"))
    options.symmetricBytes = parseSize("MKC_SYMMETRIC_BYTES", *value);
  if (const std::string *value = variable("MKC_FLAG_WORDS"))
    options.flagWords = parseSize("MKC_FLAG_WORDS", *value);
  if (const std::string *value = variable("MKC_NET"))
    options.network = *value;
  for (auto [name, timeout] : {std::pair{"MKC_NET_TIMEOUT", &options.networkTimeout},
                               std::pair{"MKC_WAIT_TIMEOUT", &options.waitTimeout}})
    if (const std::string *value = variable(name)) {
      const std::optional<std::int64_t> seconds = parseBoundedInt(*value, 1, INT_MAX);
      if (!seconds)
        throw RuntimeError(fmt::format("{}={} is not a positive number of seconds", name, *value));
      *timeout = std::chrono::seconds(*seconds);
    }
  for (auto [name, key] :
       {std::pair{"MKC_NET_PROVIDER", "provider"}, std::pair{"MKC_NET_ADDRESS", "address"},
        std::pair{"MKC_NET_DEVICE", "device"},
        std::pair{"MKC_NET_BANDWIDTH_GBPS", "bandwidth_gbps"},
        std::pair{"MKC_NET_LATENCY_US", "latency_us"}, std::pair{"MKC_NET_REORDER", "reorder"},
        std::pair{"MKC_NET_COPY_STREAMS", "copy_streams"}})
    if (const std::string *value = variable(name))
      options.networkConfig[key] = *value;
  if (const std::string *value = variable("MKC_DEVICE")) {
    const std::optional<std::int64_t> device = parseBoundedInt(*value, 0, INT_MAX);
    if (!device)
      throw RuntimeError("MKC_DEVICE=" + *value + " is not a device ordinal");
    options.device = static_cast<int>(*device);
  }
  if (const std::string *value = variable("MKC_SHARE_GPU")) {
    if (*value != "0" && *value != "1")
      throw RuntimeError("MKC_SHARE_GPU=" + *value + " is not 0 or 1");
    options.shareGpu = *value == "1";
  }
  return options;
}

//===----------------------------------------------------------------------===//
// Runtime
//===----------------------------------------------------------------------===//

struct Runtime::State {
  State(const LaunchEnvironment &launch, const RuntimeOptions &options);
  ~State();

  const cuda::Driver &driver = availableDriver(); // before joining the job
  // Members are destroyed in reverse: the heap (closed in ~State), then the JIT's modules, the
  // context, and last the process group, whose store the others no longer need.
  ProcessGroup group;
  int device;
  cuda::PrimaryContext context;
  int smCount;
  std::string arch;
  std::string busId;                ///< the GPU's PCI address, e.g. 0000:00:06.0
  std::vector<int> ranksSharingGpu; ///< the other ranks of the node on it (MKC_SHARE_GPU=1)
  /// How this GPU's kernels' waits give up (mk_wait_watch in mk/abi.h): the watch every loaded
  /// module gets, the word it raises (device memory) and where it describes the first failure
  /// (mapped host memory, read here without a driver call).
  mk_wait_watch watch{};
  CUdeviceptr gaveUp = 0;
  mk_wait_failure *waitFailure = nullptr;
  void watchWaits(CUmodule module) const;
  /// Each op's flag words, by name, to say whose wait gave up.
  struct FlagRange {
    std::string op;
    const mk_u32 *first;
    mk_u32 words;
  };
  std::vector<FlagRange> opFlags;
  mutable std::mutex opFlagsMutex; // compiles may run beside launches on other threads
  /// Throws, saying why, once this rank's launches cannot be trusted: the proxy stopped, or a
  /// kernel's wait gave up.
  void check() const;
  Jit jit;
  std::optional<SymmetricHeap> heap;
  /// Jobs across nodes: the transport to this rank's rail and the proxy that drives it.
  std::unique_ptr<net::LocalMemory> proxyMemory;
  std::unique_ptr<net::Transport> transport;
  std::unique_ptr<net::Proxy> proxy;

  void connectRail(const RuntimeOptions &options);

  /// Launches across nodes queued on the GPU, as events recorded after them. Their number is
  /// bounded: a host thread blocked in a launch because the driver's queue is full stalls the
  /// driver calls of the proxy's thread, which the queued kernels wait for.
  static constexpr std::size_t kMaxQueuedLaunches = 32;
  std::mutex queuedMutex;
  std::optional<cuda::EventQueue> queuedLaunches; // jobs across nodes
  /// Since when the oldest queued launch has been the oldest: the watchdog's clock.
  std::chrono::steady_clock::time_point oldestSince;
  std::chrono::milliseconds launchTimeout{0};
  void awaitLaunchRoom();
  void recordLaunch(CUstream stream);
  /// Forgets the queued launches that have finished; the lock must be held.
  void retireFinishedLaunches();
  /// Throws if the oldest queued launch has been running longer than the timeout.
  void watchLaunches();
};

Runtime::State::State(const LaunchEnvironment &launch, const RuntimeOptions &options)
    : group(launch), device(rankDevice(driver, group, options.device, options.shareGpu)),
      context(driver, device),
      smCount(deviceAttribute(driver, context.device(), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)),
      jit(options.cacheDirectory) {
  int major =
      deviceAttribute(driver, context.device(), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  int minor =
      deviceAttribute(driver, context.device(), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  // Hopper's wgmma and TMA, and their successors, exist only in the arch-specific targets.
  arch = fmt::format("sm_{}{}{}", major, minor, major >= 9 ? "a" : "");

  // Two ranks of a node on one GPU wait for each other's persistent kernel, which only the GPU's
  // time-slicing between their contexts lets run: a test set-up, never a job's.
  char pciBusId[32] = {};
  MK_CU_CHECK(driver, cuDeviceGetPCIBusId(pciBusId, sizeof pciBusId, context.device()));
  busId = pciBusId;
  std::string topology = fmt::format("{}x{}", group.nodeCount(), group.localWorldSize());
  std::vector<std::byte> mine = blobOf({topology, busId});
  std::vector<std::vector<std::byte>> everyone = group.store().allGather(mine);
  for (int peer : group.nodeRanks()) {
    std::vector<std::string> theirs = fields(everyone[peer]);
    if (peer == group.rank() || theirs[1] != busId)
      continue;
    if (!options.shareGpu)
      throw RuntimeError(fmt::format("ranks {} and {} both use the GPU at {}: give each rank of a "
                                     "node its own GPU (MKC_DEVICE, CUDA_VISIBLE_DEVICES), or, "
                                     "to test on fewer GPUs, let them take turns "
                                     "(MKC_SHARE_GPU=1)",
                                     std::min(peer, group.rank()), std::max(peer, group.rank()),
                                     busId));
    ranksSharingGpu.push_back(peer);
  }
  for (int rank = 0; rank < group.worldSize(); ++rank)
    if (fields(everyone[rank])[0] != topology)
      throw RuntimeError(fmt::format("rank {} sees the job as {} (nodes x ranks per node), rank {} "
                                     "as {}: every node needs as many ranks",
                                     rank, fields(everyone[rank])[0], group.rank(), topology));

  NodePlace place;
  place.localRank = group.localRank();
  place.localWorldSize = group.localWorldSize();
  place.device = device;
  place.jobToken = launch.rendezvous.jobToken + "/node" + std::to_string(group.nodeIndex());
  place.timeout = launch.rendezvous.timeout;
  heap.emplace(place, options.symmetricBytes, options.flagWords);
  {
    cuda::ContextScope scope(driver, context.context());
    void *failure = nullptr;
    MK_CU_CHECK(driver, cuMemHostAlloc(&failure, sizeof(mk_wait_failure),
                                       CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    waitFailure = static_cast<mk_wait_failure *>(failure);
    *waitFailure = {};
    CUdeviceptr failureOnDevice = 0;
    MK_CU_CHECK(driver, cuMemHostGetDevicePointer(&failureOnDevice, failure, 0));
    MK_CU_CHECK(driver, cuMemAlloc(&gaveUp, sizeof(mk_u32)));
    MK_CU_CHECK(driver, cuMemsetD32(gaveUp, 0, 1));
    watch.timeout_ns = static_cast<mk_u64>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(options.waitTimeout).count());
    watch.gave_up = reinterpret_cast<mk_u32 *>(gaveUp);
    watch.failure = reinterpret_cast<mk_wait_failure *>(failureOnDevice);
  }
  if (group.nodeCount() > 1)
    connectRail(options);
  log::info("runtime: rank {} of {} (node {} of {}, local rank {} of {}) on GPU {} ({}, {}, {} "
            "SMs); {} MiB of symmetric memory",
            group.rank(), group.worldSize(), group.nodeIndex(), group.nodeCount(),
            group.localRank(), group.localWorldSize(), device, busId, arch, smCount,
            heap->capacity() >> 20);
}

void Runtime::State::connectRail(const RuntimeOptions &options) {
  proxyMemory = net::makeCudaMemory(driver, context.context());
  queuedLaunches.emplace(driver);
  net::TransportConfig config(options.networkConfig.begin(), options.networkConfig.end());
  config["nodes"] = std::to_string(group.nodeCount());
  net::GpuPlace gpu;
  gpu.driver = &driver;
  gpu.context = context.context();
  gpu.device = context.device();
  gpu.token = fmt::format("{}/rail{}", group.launch().rendezvous.jobToken, group.localRank());
  gpu.timeout = group.launch().rendezvous.timeout;
  transport = net::makeTransport(options.network, config, &gpu);
  net::Rail rail;
  rail.node = group.nodeIndex();
  rail.nodes = group.nodeCount();
  // The store gathers from every rank; the rail is the ranks of this local rank, by node.
  rail.allGather = [this](std::span<const std::byte> blob) {
    const std::vector<std::byte> tagged = ByteWriter()
                                              .put<std::int32_t>(group.nodeIndex())
                                              .put<std::int32_t>(group.localRank())
                                              .bytes(blob)
                                              .take();
    std::vector<std::vector<std::byte>> rail(group.nodeCount());
    for (const std::vector<std::byte> &theirs : group.store().allGather(tagged)) {
      ByteReader<RuntimeError> reader(theirs, "a rank's rail blob");
      const auto node = reader.get<std::int32_t>();
      const auto localRank = reader.get<std::int32_t>();
      const std::span<const std::byte> rest = reader.rest();
      if (localRank == group.localRank())
        rail.at(node).assign(rest.begin(), rest.end());
    }
    return rail;
  };
  const auto [base, bytes] = heap->localBlock();
  net::ProxyOptions proxyOptions;
  proxyOptions.timeout = launchTimeout = options.networkTimeout;
  proxyOptions.cpus = cpusNear(busId);
  proxyOptions.watch = [this] { watchLaunches(); };
  proxy = std::make_unique<net::Proxy>(*transport, *proxyMemory,
                                       net::HeapBlock{base, bytes, net::MemoryKind::Device}, rail,
                                       proxyOptions);
  proxy->start();
}

void Runtime::State::awaitLaunchRoom() {
  std::unique_lock lock(queuedMutex);
  for (retireFinishedLaunches(); queuedLaunches->size() >= kMaxQueuedLaunches;
       retireFinishedLaunches()) {
    proxy->check(); // a failed network stops the kernels' waits; say why rather than wait
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    lock.lock();
  }
}

void Runtime::State::retireFinishedLaunches() {
  if (queuedLaunches->retire())
    oldestSince = std::chrono::steady_clock::now();
}

void Runtime::State::watchLaunches() {
  // Never wait for the launching thread here: it may be blocked in the driver, waiting for the
  // very kernels this thread's transfers finish.
  std::unique_lock lock(queuedMutex, std::try_to_lock);
  if (!lock)
    return;
  cuda::ContextScope scope(driver, context.context());
  retireFinishedLaunches();
  const auto waited = std::chrono::steady_clock::now() - oldestSince;
  if (queuedLaunches->size() && waited > launchTimeout)
    throw net::NetworkError(fmt::format(
        "runtime: a launch across nodes has not finished within {} s with no transfer failing: "
        "another node's rank died or stopped launching (this is node {} of {}; MKC_NET_TIMEOUT "
        "sets the limit)",
        std::chrono::duration_cast<std::chrono::seconds>(launchTimeout).count(), group.nodeIndex(),
        group.nodeCount()));
}

void Runtime::State::watchWaits(CUmodule module) const {
  CUdeviceptr address = 0;
  std::size_t bytes = 0;
  MK_CU_CHECK(driver, cuModuleGetGlobal(&address, &bytes, module, "mk_watch"));
  if (bytes != sizeof watch)
    throw JitError(
        fmt::format("the module's mk_watch has {} bytes, mk_wait_watch {}", bytes, sizeof watch));
  MK_CU_CHECK(driver, cuMemcpyHtoD(address, &watch, sizeof watch));
}

void Runtime::State::recordLaunch(CUstream stream) {
  std::lock_guard lock(queuedMutex);
  if (!queuedLaunches->size())
    oldestSince = std::chrono::steady_clock::now();
  queuedLaunches->record(stream);
}

Runtime::State::~State() {
  proxy.reset(); // before the heap it reads goes
  try {
    cuda::ContextScope scope(driver, context.context());
    queuedLaunches.reset();
    heap->close();
    if (gaveUp)
      driver.cuMemFree(gaveUp);
    if (waitFailure)
      driver.cuMemFreeHost(waitFailure);
  } catch (const std::exception &error) {
    log::error("runtime: closing the symmetric heap: {}", error.what());
  }
}

Runtime::Runtime(const RuntimeOptions &options) : Runtime(detectWithDriver(), options) {}

Runtime::Runtime(const LaunchEnvironment &launch, const RuntimeOptions &options)
    : state_(std::make_shared<State>(launch, options)) {}

Runtime::~Runtime() = default;

ProcessGroup &Runtime::communicator() { return state_->group; }
int Runtime::rank() const { return state_->group.rank(); }
int Runtime::worldSize() const { return state_->group.worldSize(); }
int Runtime::device() const { return state_->device; }
CUcontext Runtime::context() const { return state_->context.context(); }
net::ProxyStatistics Runtime::networkStatistics() const {
  return state_->proxy ? state_->proxy->statistics() : net::ProxyStatistics{};
}
void Runtime::barrier() { state_->group.store().barrier(); }

void Runtime::check() const { state_->check(); }

SymmetricBuffer Runtime::allocate(std::size_t bytes) {
  State &state = *state_;
  if (auto error = agree(state.group, "allocate", {"bytes"}, {std::to_string(bytes)},
                         bytes ? "" : "cannot allocate 0 bytes"))
    throw RuntimeError(*error);
  cuda::ContextScope scope(state.driver, state.context.context());
  return state.heap->allocate(bytes);
}

//===----------------------------------------------------------------------===//
// FusedOp
//===----------------------------------------------------------------------===//

struct FusedOp::State {
  ~State();

  std::shared_ptr<Runtime::State> runtime;
  std::shared_ptr<const LoadedKernel> kernel;
  std::string name;
  std::vector<Argument> arguments;
  /// The launch's parameter with everything but the arguments filled in.
  mk_kernel_args parameter{};
  /// The launch's epoch (mk_kernel_args::epoch), and buffers of this rank only.
  CUdeviceptr epoch = 0;
  std::vector<CUdeviceptr> privateBuffers;
  /// The copies this GPU's copy engines make beside each launch (mk.engine_copy), on a stream of
  /// the op's that forks from the caller's before the kernel and joins it before the epoch moves.
  std::vector<mk_engine_copy> copies;
  CUstream copyStream = nullptr;
  CUevent copiesMayStart = nullptr, copiesDone = nullptr;

  /// The arguments of the last launch and their references: launches usually repeat them, and
  /// then skip the driver queries that check them.
  mutable std::mutex checkedMutex;
  mutable std::vector<void *> checkedPointers;
  mutable std::vector<mk_tensor_ref> checkedReferences;
  /// The tensor maps over them (and the op's buffers).
  mutable std::vector<mk_tensor_map> checkedMaps;

  mk_tensor_ref reference(int index, void *pointer) const;
};

void Runtime::State::check() const {
  if (proxy)
    proxy->check();
  if (!reinterpret_cast<volatile const mk_wait_failure *>(waitFailure)->failed)
    return;
  const mk_wait_failure failure = *waitFailure;
  const auto *flag = reinterpret_cast<const mk_u32 *>(failure.flag);
  std::string which = fmt::format("the flag at {:#x}", failure.flag);
  std::lock_guard lock(opFlagsMutex);
  for (const FlagRange &range : opFlags)
    if (flag >= range.first && flag < range.first + range.words)
      which = fmt::format("flag word {} of {}", flag - range.first, range.op);
  std::vector<int> others;
  for (int rank : group.nodeRanks())
    if (rank != group.rank())
      others.push_back(rank);
  const std::string suspects = others.size() == 1
                                   ? fmt::format("rank {}", others[0])
                                   : fmt::format("one of ranks {}", fmt::join(others, ", "));
  throw RuntimeError(fmt::format(
      "rank {} (GPU {} of node {}): a kernel gave up after waiting {} s for {} to count {}; it "
      "counted {}. A rank of this node ({}) died, stopped launching or is stuck. The results of "
      "that launch are wrong, and this runtime launches nothing more (MKC_WAIT_TIMEOUT sets the "
      "limit)",
      group.rank(), group.localRank(), group.nodeIndex(), watch.timeout_ns / 1'000'000'000, which,
      failure.target, failure.seen, suspects));
}

FusedOp::State::~State() {
  const cuda::Driver &cu = runtime->driver;
  try {
    cuda::ContextScope scope(cu, runtime->context.context());
    for (CUdeviceptr buffer : privateBuffers)
      cu.cuMemFree(buffer);
    if (epoch)
      cu.cuMemFree(epoch);
    for (CUevent event : {copiesMayStart, copiesDone})
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
  const cuda::Driver &cu = runtime.driver;
  ProcessGroup &group = runtime.group;
  JitOptions options;
  options.pipeline.topology = fmt::format("{}x{}", group.nodeCount(), group.localWorldSize());
  options.pipeline.rank = group.rank();
  options.pipeline.shapes = shapes;
  options.pipeline.smCount = runtime.smCount;
  options.nvrtc.arch = runtime.arch;

  cuda::ContextScope scope(cu, runtime.context.context());
  std::shared_ptr<const LoadedKernel> kernel;
  TileProgram program;
  std::string failure;
  try {
    setCompilerOptions(options, compilerOptions);
    program = read();
    std::shared_ptr<const CompiledKernel> compiled = runtime.jit.compile(program, options);
    kernel = runtime.jit.load(*compiled);
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
  } catch (const std::exception &error) {
    failure = error.what();
  }
  if (auto error = agree(
          group, "compiling " + name, {"the program", "shapes", "the compiler options"},
          {program.text, fmt::format("{}", fmt::join(shapes, ",")), compilerOptions}, failure))
    throw JitError(*error);

  auto op = std::make_shared<FusedOp::State>();
  op->runtime = state_;
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
    group.store().barrier();
    parameter.net_flags = static_cast<mk_u32 *>(netFlags.local);
    parameter.queue = runtime.proxy->queue().deviceView();
  }
  MK_CU_CHECK(cu, cuMemAlloc(&op->epoch, sizeof(mk_u32)));
  MK_CU_CHECK(cu, cuMemsetD32(op->epoch, 1, 1)); // the first launch's epoch
  parameter.epoch = reinterpret_cast<const mk_u32 *>(op->epoch);
  parameter.nodes = static_cast<mk_u32>(group.nodeCount());
  parameter.flag_words = static_cast<mk_u32>(std::max(launch.flagWords, 1));
  parameter.node = static_cast<mk_u32>(group.nodeIndex());
  parameter.gpu = static_cast<mk_u32>(group.localRank());
  parameter.abi_version = MK_ABI_VERSION;
  std::copy_if(launch.engineCopies.begin(), launch.engineCopies.end(),
               std::back_inserter(op->copies),
               [&](const mk_engine_copy &copy) { return copy.from_gpu == parameter.gpu; });
  if (!op->copies.empty()) {
    MK_CU_CHECK(cu, cuStreamCreate(&op->copyStream, CU_STREAM_NON_BLOCKING));
    MK_CU_CHECK(cu, cuEventCreate(&op->copiesMayStart, CU_EVENT_DISABLE_TIMING));
    MK_CU_CHECK(cu, cuEventCreate(&op->copiesDone, CU_EVENT_DISABLE_TIMING));
  }
  return FusedOp(std::move(op));
}

const std::string &FusedOp::name() const { return state_->name; }
const std::vector<Argument> &FusedOp::arguments() const { return state_->arguments; }
const LoadedKernel &FusedOp::kernel() const { return *state_->kernel; }

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
                                      op.epoch, sizeof(mk_u32), op.copyStream));
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
  cuda::ContextScope scope(cu, op.runtime->context.context());
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
  MK_CU_CHECK(cu, cuLaunchKernelEx(&config, op.kernel->function(), kernelParameters, nullptr));
  if (op.copyStream) {
    enqueueEngineCopies(op, parameter);
    MK_CU_CHECK(cu, cuEventRecord(op.copiesDone, op.copyStream));
    MK_CU_CHECK(cu, cuStreamWaitEvent(stream, op.copiesDone, 0));
  }
  CUdeviceptr epoch = op.epoch;
  void *advanceParameters[] = {&epoch};
  MK_CU_CHECK(cu, cuLaunchKernel(op.kernel->advanceEpoch(), 1, 1, 1, 1, 1, 1, 0, stream,
                                 advanceParameters, nullptr));
  if (counted)
    op.runtime->recordLaunch(stream);
}

} // namespace mkc
