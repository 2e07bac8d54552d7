//===- runtime/RuntimeState.h - the state behind Runtime and FusedOp -*- C++ -*-===//
//
// Internal to MkRuntime: Runtime::State and FusedOp::State of mk/runtime/Runtime.h, shared by the
// files that divide the runtime by concern:
//
// - Options.cpp: RuntimeOptions from MKC_* variables;
// - Agreement.cpp: the check that every rank asked for the same collective call;
// - GpuPlace.cpp: the rank's GPU, its neighbouring CPUs, and GPUs shared between ranks;
// - Runtime.cpp: the state's construction in named steps, its teardown, Runtime's calls;
// - WaitWatch.cpp: the watchdog of kernels' waits (mk_wait_watch) and check();
// - Rail.cpp: jobs across nodes: the transport, the proxy, and the watchdog of queued launches;
// - Compile.cpp: Runtime::compile: the kernel compiled, loaded and checked, its op bound;
// - FusedOp.cpp: an op's arguments checked and its launches.
//
//   auto state = std::make_shared<Runtime::State>(launch, options);  // Runtime.cpp
//   state->check();                                                 // before each launch
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_LIB_RUNTIME_RUNTIMESTATE_H
#define MK_RUNTIME_LIB_RUNTIME_RUNTIMESTATE_H

#include "mk/runtime/Runtime.h"

#include "mk/abi.h"
#include "runtime/SplitSearch.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mkc {

/// Strings as one blob for the store, and back (Agreement.cpp).
std::vector<std::byte> blobOf(const std::vector<std::string> &fields);
std::vector<std::string> fields(std::span<const std::byte> blob);
/// Every rank's `request` and `failure` compared (Agreement.cpp): the same message on every rank
/// if one failed or asked for something else than rank 0; none if all agree.
std::optional<std::string> agree(ProcessGroup &group, const std::string &what,
                                 const std::vector<std::string> &names,
                                 std::vector<std::string> request, const std::string &failure);

/// The driver, if it works: a rank without one has nothing to say but that (GpuPlace.cpp).
const cuda::Driver &availableDriver();
/// The launcher's job, once the driver is known to work.
LaunchEnvironment detectWithDriver();
int deviceAttribute(const cuda::Driver &cu, CUdevice device, CUdevice_attribute attribute);
/// The SMs the current context may use: fewer than the device's under MPS with
/// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (its execution affinity), where a persistent grid of every
/// SM would never be resident at once.
int contextSmCount(const cuda::Driver &cu, CUdevice device);
/// The CUDA device of a rank: the one it chose, else its local rank's; with `share` (ranks taking
/// turns on fewer GPUs) either modulo the GPUs this process sees.
int rankDevice(const cuda::Driver &cu, const ProcessGroup &group, std::optional<int> chosen,
               bool share);
/// The CPUs of the GPU's NUMA node, from sysfs ("0-15,32-47"): where its proxy thread polls.
/// Empty when the kernel does not say.
std::vector<int> cpusNear(std::string busId);

/// The launch of a persistent kernel: its grid of MK_CTA_THREADS-thread CTAs on `stream`
/// (FusedOp.cpp).
CUlaunchConfig persistentLaunch(const LaunchParameters &launch, CUstream stream = nullptr);

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
  int gpuSmCount; ///< the whole GPU's, of which smCount may be a share (MPS)
  std::string arch;
  std::vector<std::string> nvrtcOptions; ///< MKC_NVRTC_OPTIONS
  std::string busId;                     ///< the GPU's PCI address, e.g. 0000:00:06.0
  std::vector<int> ranksSharingGpu;      ///< the other ranks of the node on it (MKC_SHARE_GPU=1)
  bool ranksAtOnce = false;              ///< they run at once (MPS), not in turns
  bool smController = false;             ///< MKC_SM_CONTROLLER, or where times mean something
  std::string gpuName;                   ///< cuDeviceGetName's, for the controller's answers
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

  /// The steps of construction: the GPU's place checked against the other ranks' (GpuPlace.cpp),
  /// the kernels' wait watch set up (WaitWatch.cpp), the rail connected for jobs across nodes
  /// (Rail.cpp).
  void checkPlacement(const RuntimeOptions &options);
  void armWaitWatch(const RuntimeOptions &options);
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

struct FusedOp::State {
  ~State();

  std::shared_ptr<Runtime::State> runtime;
  std::shared_ptr<const LoadedKernel> kernel;
  std::string name;
  std::vector<Argument> arguments;
  /// The launch's parameter with everything but the arguments filled in.
  mk_kernel_args parameter{};
  /// The op's launch count (mk_kernel_args::launches), and buffers of this rank only.
  CUdeviceptr launches = 0;
  std::vector<CUdeviceptr> privateBuffers;
  /// What the launches report (mk_kernel_args::report), in mapped host memory, and count
  /// (mk_kernel_args::counters), in device memory.
  mk_op_report *report = nullptr;
  CUdeviceptr counters = 0;
  /// The copies this GPU's copy engines make beside each launch (mk.engine_copy), on a stream of
  /// the op's that forks from the caller's before the kernel and joins it before the epoch moves.
  std::vector<mk_engine_copy> copies;
  CUstream copyStream = nullptr;
  CUevent copiesMayStart = nullptr, copiesDone = nullptr;

  /// The CTAs of the engine's clusters (1 or 2), of which a split's counts are multiples.
  int clusterWidth = 1;
  /// The split the launches take (mk_kernel_args' roles), and the same as ranges; under
  /// checkedMutex.
  mlir::mk::SmSplit split;
  mk_role_range roles[MK_MAX_ROLES] = {};
  void takeSplit(const mlir::mk::SmSplit &split);
  /// The SM-partition controller (SplitSearch.h): its search while it runs, the launch it times
  /// (CUDA events around the kernel) and the file beside the JIT's cache entry that keeps its
  /// answer for the next process.
  struct Control {
    std::mutex mutex;
    std::atomic<bool> searching{false};
    std::unique_ptr<SplitSearch> search;
    CUevent start = nullptr, end = nullptr;
    bool timing = false;
    std::filesystem::path answer;
  } control;
  /// Starts the controller (MKC_SM_CONTROLLER) for the kernel of cache key `key` where it has
  /// roles to split, or takes the answer the cache keeps, where every rank's is the same.
  /// Collective.
  void startControl(const std::string &key);
  /// The controller's step before a launch on `stream`: the last timed launch's slowest time
  /// (gathered from every rank, so that all take the same step), then the split of this launch.
  /// Whether to time it. Under control.mutex.
  bool stepControl(CUstream stream);

  /// The arguments of the last launch and their references: launches usually repeat them, and
  /// then skip the driver queries that check them.
  mutable std::mutex checkedMutex;
  mutable std::vector<void *> checkedPointers;
  mutable std::vector<mk_tensor_ref> checkedReferences;
  /// The tensor maps over them (and the op's buffers).
  mutable std::vector<mk_tensor_map> checkedMaps;

  mk_tensor_ref reference(int index, void *pointer) const;
  /// Throws RuntimeError, once, where a launch routed a copy to an expert out of range.
  void checkRouting() const;
};

} // namespace mkc

#endif // MK_RUNTIME_LIB_RUNTIME_RUNTIMESTATE_H
