//===- Nvrtc.h - CUDA C++ compilation with NVRTC ------------------*- C++ -*-===//
//
// Compiles generated CUDA C++ to PTX and cubins with NVRTC, without a GPU, each compile in a
// forked child process (mk/Target/ChildProcess.h), so that a crash inside NVRTC fails the
// compile rather than the process. Used by the mkc tool and by the runtime's JIT. Plain C++: no
// MLIR types, so that anything can link it.
//
//===----------------------------------------------------------------------===//

#ifndef MK_TARGET_NVRTC_H
#define MK_TARGET_NVRTC_H

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mkc::nvrtc {

/// A header NVRTC finds by `name` without touching the file system.
struct Header {
  std::string name;
  std::string_view contents;
};

struct Options {
  /// `sm_90a` produces a cubin (and PTX); `compute_90a` produces PTX only.
  std::string arch = "sm_90a";
  /// Searched for CUDA's own headers (cuda_bf16.h, ...); defaults to cudaIncludeDirs().
  std::vector<std::string> includeDirs = cudaIncludeDirs();
  /// Passed to NVRTC as they are.
  std::vector<std::string> extraOptions;
  /// Ask ptxas for its per-kernel report (registers, spills), parsed into Result::kernels.
  bool ptxasReport = true;

  /// $MKC_CUDA_INCLUDE (a colon-separated list) if set, else CUDA's include/ and include/cccl
  /// under $CUDA_HOME or /usr/local/cuda.
  static std::vector<std::string> cudaIncludeDirs();
};

/// What ptxas reports for one kernel.
struct KernelResources {
  std::string name;
  int registers = 0;
  int stackFrameBytes = 0;
  int spillStoreBytes = 0;
  int spillLoadBytes = 0;
};

struct Result {
  bool ok = false;
  /// NVRTC's log, with each diagnostic followed by the source line it points at.
  std::string log;
  std::string ptx;
  std::string cubin; // binary; empty for a compute_XX target
  std::vector<KernelResources> kernels;
  double seconds = 0;
};

/// The flags compile() passes to NVRTC for `options`.
std::vector<std::string> flags(const Options &options);

/// Compiles `source`, named `fileName` in diagnostics, with in-memory `headers`, in a child
/// process: one that crashes is replaced by another, three times at most, and then the Result
/// fails with a log that says so. Where no child can be started, compiles in this process.
Result compile(std::string_view source, std::string_view fileName, const Options &options,
               std::span<const Header> headers = {});

/// NVRTC's version, e.g. "13.0".
std::string version();

/// Parses the `ptxas info` lines of a log produced with `-Xptxas -v`.
std::vector<KernelResources> parsePtxasReport(std::string_view log);

/// Follows each `FILE(LINE): ...` diagnostic of `log` about `fileName` with that line of `source`.
std::string annotateLog(std::string_view log, std::string_view source, std::string_view fileName);

} // namespace mkc::nvrtc

#endif // MK_TARGET_NVRTC_H
