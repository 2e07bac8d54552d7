//===- mk/runtime/Runtime.h - the runtime an application embeds ---*- C++ -*-===//
//
// One Runtime per process, that is per rank. It joins the job's process group from what the
// launcher set (torchrun, srun, mpirun, mkc-launch: mk/runtime/bootstrap/Bootstrap.h), takes its
// GPU's primary context (the one PyTorch and every other CUDA runtime user of the process shares),
// creates the node's symmetric heap and owns the JIT. A FusedOp is a tile program compiled for
// this job's topology and this rank, with the buffers and flags it keeps, launched on a caller's
// stream.
//
//   mkc::Runtime runtime;
//   mkc::FusedOp op = runtime.compile(mkc::TileProgram::fromFile("lib/gemm_allreduce.mlir"),
//                                     {"M=8192", "N=8192", "K=8192"});
//   mkc::SymmetricBuffer c = runtime.allocate(op.arguments()[2].bytes);
//   op.launch(stream, {a, b, c.local});   // a, b: device memory of this rank's GPU
//
// Collective calls, which every rank makes in the same order: the constructor, allocate(),
// compile() and barrier(); the runtime's state is torn down (collectively) when the Runtime and
// every FusedOp it made are gone. Launches of one op follow each other on one stream on every
// rank; an op's flags count launches (epochs), so a captured CUDA graph of launches replays too.
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_RUNTIME_H
#define MK_RUNTIME_RUNTIME_H

#include "mk/runtime/bootstrap/Bootstrap.h"
#include "mk/runtime/jit/Jit.h"
#include "mk/runtime/memory/SymmetricMemory.h"
#include "mk/runtime/net/Proxy.h"

#include <cuda.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace mkc {

/// A call the runtime refuses: a wrong argument, a tensor of the wrong kind, ranks that disagree.
class RuntimeError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The job failed around this rank: a kernel's wait for another rank gave up (MKC_WAIT_TIMEOUT).
/// The results of that launch are wrong and the runtime launches nothing more. (A network that
/// failed is a net::NetworkError.)
class JobError : public RuntimeError {
public:
  using RuntimeError::RuntimeError;
};

/// No usable CUDA driver or GPU for this rank.
class NoDeviceError : public RuntimeError {
public:
  using RuntimeError::RuntimeError;
};

struct RuntimeOptions {
  /// Bytes of symmetric memory per rank, taken from the GPU up front.
  std::size_t symmetricBytes = std::size_t(1) << 30;
  /// Flag words per rank, shared out among the ops.
  std::size_t flagWords = std::size_t(1) << 20;
  /// The CUDA device of this rank; unset: the local rank, or 0 if the process sees one GPU.
  std::optional<int> device;
  /// Whether ranks may take turns on fewer GPUs than there are ranks (MKC_SHARE_GPU=1): the
  /// device (chosen, or the local rank's) is taken modulo the GPUs this process sees. The ranks'
  /// persistent kernels then wait on each other across contexts, which the GPU time-slices:
  /// correct, but slow. For testing multi-GPU programs on a machine with one GPU. Under MPS they
  /// run at once instead, each grid leaving part of its share free (docs/notes/controller.md v3).
  bool shareGpu = false;
  /// Whether the SM-partition controller chooses each op's split from its first launches' times
  /// and keeps the answer beside the JIT's cache (MKC_SM_CONTROLLER=on|off). Unset: on, except
  /// where ranks take turns on a GPU, whose times are each other's time slices.
  std::optional<bool> smController;
  /// The JIT's on-disk cache: $MKC_CACHE_DIR, else under $XDG_CACHE_HOME or ~/.cache.
  std::filesystem::path cacheDirectory = Jit::defaultCacheDirectory();
  /// Jobs across nodes: the network backend ("fabric", "verbs" or "emulated") and its settings
  /// (mk/runtime/net/Transport.h), from MKC_NET and MKC_NET_PROVIDER, MKC_NET_ADDRESS,
  /// MKC_NET_DEVICE, MKC_NET_BANDWIDTH_GBPS, MKC_NET_LATENCY_US, MKC_NET_REORDER.
  std::string network = "fabric";
  std::map<std::string, std::string, std::less<>> networkConfig;
  /// How long a transfer, or a launch across nodes, may take before the network is declared
  /// broken (MKC_NET_TIMEOUT, seconds).
  std::chrono::milliseconds networkTimeout = std::chrono::seconds(30);
  /// How long a kernel's wait for a flag may take before it gives up, the launch's results are
  /// wrong and the runtime refuses further launches, naming the wait (MKC_WAIT_TIMEOUT, seconds):
  /// what catches a rank of the node that died or stopped launching. Long, as a rank's host may
  /// legitimately fall that far behind its peers'.
  std::chrono::milliseconds waitTimeout = std::chrono::minutes(10);
  /// For debugging, options NVRTC gets in every JIT compile beside the JIT's own
  /// (MKC_NVRTC_OPTIONS, separated by spaces): `-lineinfo` (compute-sanitizer then names source
  /// lines), `-DMK_WATCH_BARRIERS=SECONDS` (a kernel's wait on a shared-memory barrier that has
  /// not completed within SECONDS prints where it is and traps, instead of hanging). Part of the
  /// JIT cache's key, as every NVRTC option is.
  std::vector<std::string> nvrtcOptions;

  /// The defaults, overridden by MKC_SYMMETRIC_BYTES (bytes, or with a K, M or G suffix),
  /// MKC_FLAG_WORDS, MKC_DEVICE, MKC_SHARE_GPU, MKC_WAIT_TIMEOUT, MKC_NVRTC_OPTIONS and the MKC_NET
  /// variables;
  /// throws RuntimeError naming a malformed variable.
  static RuntimeOptions fromEnvironment(const Environment &environment = processEnvironment());
};

/// What a fused op takes: each argument as this rank holds it.
struct Argument {
  TensorType type;
  std::size_t bytes = 0;
  /// Written by peers or read by the network: it must lie in symmetric memory.
  bool symmetric = false;
};

/// What a launch's routing of tokens to experts (mk.dispatch) reported for this rank's tokens.
struct RoutingReport {
  /// The launch it is of: 1 for the op's first, 0 before any has routed.
  std::uint32_t launch = 0;
  /// Copies of this rank's tokens (token x top-k choice) that went past their expert's capacity
  /// C and were dropped: their tokens' results lack those experts.
  std::uint32_t dropped = 0;
  /// Bytes of routed rows and of their results this rank stored on other GPUs of its node, over
  /// every launch so far (what crosses nodes, Runtime::networkStatistics counts).
  std::uint64_t nvlinkBytes = 0;
};

class FusedOp;

class Runtime {
public:
  /// Joins the job the launcher describes (detectLaunchEnvironment) on the options' GPU.
  explicit Runtime(const RuntimeOptions &options = RuntimeOptions::fromEnvironment());
  Runtime(const LaunchEnvironment &launch, const RuntimeOptions &options);
  ~Runtime();
  Runtime(const Runtime &) = delete;
  Runtime &operator=(const Runtime &) = delete;

  ProcessGroup &communicator();
  int rank() const;
  int worldSize() const;
  int device() const;
  CUcontext context() const;

  /// `bytes` of symmetric memory, at the same offset on every rank. Collective; every rank must
  /// ask for the same size, or all throw.
  SymmetricBuffer allocate(std::size_t bytes);

  /// `program` specialised for `shapes` ("M=8192"...), this job's topology (nodes x GPUs per
  /// node) and this rank, compiled through the JIT and loaded, with the buffers and flags it
  /// keeps allocated. `options` overrides the compiler's choices ("sm-split=compute=120,...;
  /// gemm-stages=3": mlir::mk::parsePipelineOptions). Collective; if it fails on any rank, or
  /// ranks ask for different things, every rank throws the same JitError, naming the rank.
  FusedOp compile(const TileProgram &program, const std::vector<std::string> &shapes,
                  const std::string &options = "");
  /// The same for the program in the file at `path`; a rank that cannot read it fails them all.
  FusedOp compileFile(const std::filesystem::path &path, const std::vector<std::string> &shapes,
                      const std::string &options = "");

  /// Returns once every rank has called it as often as this one (host side only).
  void barrier();

  /// Throws RuntimeError, saying why, once the launches of this rank can no longer be trusted: a
  /// kernel's wait gave up (MKC_WAIT_TIMEOUT) or the network proxy stopped; results since are
  /// wrong. No driver call: after synchronising a launch's stream, it vouches for its results.
  void check() const;

  /// What this rank's network proxy carried to other nodes since the runtime started: writes,
  /// and their payload bytes, flags left out. Zeros on one node, where there is no proxy.
  net::ProxyStatistics networkStatistics() const;

  struct State;

private:
  FusedOp compile(const std::function<TileProgram()> &read, const std::string &name,
                  const std::vector<std::string> &shapes, const std::string &options);

  std::shared_ptr<State> state_;
};

class FusedOp {
public:
  const std::string &name() const;
  const std::vector<Argument> &arguments() const;
  /// The loaded kernel, with its launch parameters.
  const LoadedKernel &kernel() const;

  /// Enqueues the op on `stream` (a stream of this rank's context, or null for the legacy
  /// default stream) with `arguments` (device addresses on this rank's GPU, one per argument).
  /// Throws RuntimeError, naming the argument, when one is missing, not memory of this GPU or
  /// outside the symmetric heap where it must be inside.
  void launch(CUstream stream, std::span<void *const> arguments) const;

  /// The CTAs its launches give each role, in the manifest's order (mk_kernel_args' roles): the
  /// compiler's split (kernel().launch().smSplit), then the SM controller's as it times the first
  /// launches of an op whose split the caller did not choose (RuntimeOptions::smController), or
  /// setSmSplit's, which stops the controller.
  mlir::mk::SmSplit smSplit() const;
  /// Launches from now on give the roles `split`'s CTAs, the same kernel running them: the
  /// kernel's roles in its order, its grid in all, one CTA or more each, multiples of its cluster
  /// (mlir::mk::SmSplit::checkLaunch). Collective, between launches: every rank throws the same
  /// RuntimeError, naming the rule or the rank, if the split breaks one or ranks ask for
  /// different ones (a role's per-CTA arrivals count its CTAs on every rank).
  void setSmSplit(const mlir::mk::SmSplit &split);

  /// The routing report of the op's latest launch to have routed (read it once the launch's
  /// stream has synchronised). Throws RuntimeError when the op routes no tokens, or naming the
  /// token, choice and index when a launch routed a copy to an expert out of range (reported
  /// once; launch() reports it too).
  RoutingReport routing() const;

  struct State;
  explicit FusedOp(std::shared_ptr<State> state) : state_(std::move(state)) {}

private:
  std::shared_ptr<State> state_;
};

} // namespace mkc

#endif // MK_RUNTIME_RUNTIME_H
