//===- mk/runtime/jit/Jit.h - tile programs compiled and loaded at run time -*- C++ -*-===//
//
// A tile program becomes a kernel ready to launch in four steps:
//   1. the compiler's pipeline (mk/Pipeline.h) specializes it and prints CUDA C++;
//   2. a SHA-256 of that source and of everything else NVRTC's output depends on (NVRTC's
//      version, its flags, the CUDA headers' version, the device library, MK_ABI_VERSION, the
//      cache format) is the cubin's key;
//   3. the cubin is looked up in this process's memory, then in the on-disk cache, and only on a
//      miss compiled by NVRTC and stored;
//   4. the cubin is loaded into the current context and its launch parameters are read back from
//      the module (`<kernel>_grid`, ...), so the cache stays a pure source -> cubin map.
//
//   mkc::Jit jit;  // cache: $MKC_CACHE_DIR, else $XDG_CACHE_HOME/mkc, else ~/.cache/mkc
//   mkc::JitOptions options;
//   options.pipeline.topology = "1x2";
//   options.pipeline.shapes = {"M=8192", "N=8192", "K=8192"};
//   auto compiled = jit.compile(mkc::TileProgram::fromFile("lib/gemm_allreduce.mlir"), options);
//   auto kernel = jit.load(*compiled);  // needs a current context (mkc::cuda::PrimaryContext)
//   cu.cuLaunchKernel(kernel->function(), kernel->launch().grid, 1, 1, MK_CTA_THREADS, 1, 1,
//                     kernel->launch().dynamicSmemBytes, stream, params, nullptr);
//
// On disk, one directory per key, written into a fresh temporary directory of the cache, synced,
// then renamed into place, so that every rank of a node can share the cache: a reader sees a
// whole entry or none, and when several processes store the same key the first rename wins and
// the others use its entry.
//
//   <cache>/<key>/cubin      header (magic, format, key, payload size, payload SHA-256), cubin
//   <cache>/<key>/kernel.cu  the generated source, for inspection
//   <cache>/<key>/nvrtc.log  NVRTC's log, for inspection
//
// An entry whose header or checksum does not match is logged, removed and rebuilt. Failing to
// read or write the cache is a warning: the JIT then works from memory alone.
//
// Compile, cache and load times are logged at debug level (MKC_LOG_LEVEL=debug).
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_JIT_H
#define MK_RUNTIME_JIT_H

#include "mk/PipelineOptions.h"
#include "mk/Target/Nvrtc.h"
#include "mk/abi.h"
#include "mk/runtime/driver/CudaDriver.h"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mkc {

/// A tile program that cannot be compiled or loaded, with the reason: the compiler's located
/// diagnostics, NVRTC's log, or a mismatch between the kernel and this runtime.
class JitError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The text of an MLIR module holding one mk.program, and the name diagnostics give it.
struct TileProgram {
  std::string text;
  std::string name;

  /// Reads the program at `path`; throws JitError when it cannot be read.
  static TileProgram fromFile(const std::filesystem::path &path);
};

/// What a tile program is compiled for.
struct JitOptions {
  /// Topology, rank, shape bindings, SM split.
  mlir::mk::PipelineOptions pipeline;
  /// The architecture (an `sm_XX`: the JIT needs a cubin) and NVRTC's other options.
  nvrtc::Options nvrtc;
};

/// Sets the compiler options `text` names (";"-separated NAME=VALUE with mkc's flag names:
/// mlir::mk::parsePipelineOptions) in `options`; throws JitError naming what is wrong.
void setCompilerOptions(JitOptions &options, const std::string &text);

/// A tile program lowered to CUDA C++, and the key its cubin is cached under.
struct KernelSource {
  /// The program's name: the kernel's, and the prefix of its launch parameters in the module.
  std::string kernel;
  std::string cuda;
  /// SHA-256 in hex of the source and of everything else NVRTC's output depends on.
  std::string key;
};

/// Runs the compiler's passes on `program` and prints the kernel; no NVRTC, no cache. Throws
/// JitError with the compiler's diagnostics when the program is invalid for `options`.
KernelSource generateKernel(const TileProgram &program, const JitOptions &options);

struct CompiledKernel {
  KernelSource source;
  std::string cubin;
};

/// A tensor as one rank holds it: element type (`bf16`, `f16`, `f32`, as MLIR spells it) and
/// extents, row-major and dense.
struct TensorType {
  std::string element;
  std::vector<long long> extents;
};

/// How a kernel is launched, as its module says.
struct LaunchParameters {
  /// CTAs of the persistent grid; each has MK_CTA_THREADS threads.
  int grid = 0;
  /// Words of the flag region (mk_kernel_args::flags) the kernel signals and waits on.
  int flagWords = 0;
  /// Dynamic shared memory per CTA, already allowed with cuFuncSetAttribute.
  int dynamicSmemBytes = 0;
  /// The program's arguments: the first of mk_kernel_args::tensors; the others are buffers the
  /// program keeps, which the runtime allocates.
  int arguments = 0;
  /// Bytes each tensor takes on one rank, arguments first.
  std::vector<long long> tensorBytes;
  /// Bit i: tensor i is written by peers or read by the network, so it must be symmetric.
  unsigned symmetricTensors = 0;
  /// What each argument must be.
  std::vector<TensorType> argumentTypes;
  /// The TMA tensor maps the kernel takes (mk_kernel_args::maps), built at launch.
  std::vector<mk_tensor_map_spec> tensorMaps;
  /// The grid's CTAs per role, as the compiler chose them, and which role is the pool, if any.
  mlir::mk::SmSplit smSplit;
  std::optional<std::size_t> poolRole;
  /// The copies copy engines make beside the kernel, in the order each GPU issues its own.
  std::vector<mk_engine_copy> engineCopies;
  /// The experts the kernel routes tokens to (mk.dispatch), reporting on it; 0: it routes none.
  int routedExperts = 0;
};

/// The launch parameters of `kernel` from the bytes of its module's `<kernel>_manifest` (mk/abi.h's
/// mk_kernel_manifest and its engine copies), checked against mk/abi.h's bounds; throws JitError
/// when the kernel was generated for another MK_ABI_VERSION or the manifest is malformed.
LaunchParameters decodeManifest(const std::string &kernel, std::string_view bytes);

/// A cubin loaded into a context as a module, with its kernel and launch parameters; unloaded
/// when destroyed.
class LoadedKernel {
public:
  /// Loads `cubin` into the current context and reads `kernel`'s launch parameters from it.
  /// Throws JitError when the kernel was generated for another MK_ABI_VERSION or needs more
  /// shared memory than the device has, and cuda::Error when a driver call fails.
  LoadedKernel(const cuda::Driver &driver, const std::string &cubin, const std::string &kernel);
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel &) = delete;
  LoadedKernel &operator=(const LoadedKernel &) = delete;

  const std::string &name() const { return name_; }
  CUcontext context() const { return context_; }
  CUmodule module() const { return module_; }
  CUfunction function() const { return function_; }
  /// `<kernel>_advance_epoch(mk_launch_count *)`, run with one thread after each launch's copies
  /// for copy engines; null for a kernel without them, which moves its epoch on itself.
  CUfunction advanceEpoch() const { return advanceEpoch_; }
  const LaunchParameters &launch() const { return launch_; }

private:
  const cuda::Driver &driver_;
  std::string name_;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
  CUfunction advanceEpoch_ = nullptr;
  LaunchParameters launch_;
};

/// What a Jit did, since it was made.
struct JitStats {
  /// Cubins compiled by NVRTC.
  uint64_t nvrtcCompiles = 0;
  /// Cubins read from the on-disk cache.
  uint64_t diskHits = 0;
  /// compile() calls answered from this process's memory.
  uint64_t memoryHits = 0;
  /// On-disk entries found corrupt or truncated, removed and rebuilt.
  uint64_t corruptEntries = 0;
  /// Modules loaded into a context (load() calls not answered from memory).
  uint64_t modulesLoaded = 0;
};

/// Compiles tile programs to cubins through an on-disk cache and loads them; thread-safe. Keeps
/// every cubin and module it made for its lifetime, so one per process is the intended use.
class Jit {
public:
  explicit Jit(std::filesystem::path cacheDirectory = defaultCacheDirectory());

  /// $MKC_CACHE_DIR if set, else $XDG_CACHE_HOME/mkc if that is absolute, else ~/.cache/mkc.
  static std::filesystem::path defaultCacheDirectory();
  const std::filesystem::path &cacheDirectory() const { return cacheDirectory_; }

  /// The cubin of `program` for `options`, from memory, from disk, or compiled by NVRTC. Threads
  /// asking for the same key wait for one compilation. Throws JitError.
  std::shared_ptr<const CompiledKernel> compile(const TileProgram &program,
                                                const JitOptions &options);

  /// `kernel` loaded into the current context, once per context.
  std::shared_ptr<const LoadedKernel> load(const CompiledKernel &kernel);

  JitStats stats() const;

private:
  /// The cubin of `source`, from disk or compiled by NVRTC and stored.
  std::shared_ptr<const CompiledKernel> build(KernelSource source, const nvrtc::Options &options);

  std::filesystem::path cacheDirectory_;
  std::mutex mutex_;
  /// By key; a future while one thread builds it.
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const CompiledKernel>>>
      compiled_;
  /// By key and context id (cuCtxGetId: unlike the handle, never reused for another context).
  std::map<std::pair<std::string, unsigned long long>, std::shared_ptr<const LoadedKernel>> loaded_;
  std::atomic<uint64_t> nvrtcCompiles_ = 0, diskHits_ = 0, memoryHits_ = 0, corruptEntries_ = 0,
                        modulesLoaded_ = 0;
};

} // namespace mkc

#endif // MK_RUNTIME_JIT_H
