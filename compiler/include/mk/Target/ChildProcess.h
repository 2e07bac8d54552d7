//===- ChildProcess.h - work in a forked child, whose crash is an answer ---*- C++ -*-===//
//
// NVRTC runs compilers inside the calling process, and they can crash (NVRTC 13.0 does, now and
// then, on some large kernels). The JIT runs in an application's process, an inference server's,
// which such a crash must not take down: the compile runs in a forked child instead, and a crash
// there is reported like any failed compile. Plain C++ and POSIX, so that anything can link it.
//
//===----------------------------------------------------------------------===//

#ifndef MK_TARGET_CHILDPROCESS_H
#define MK_TARGET_CHILDPROCESS_H

#include <functional>
#include <string>

namespace mkc {

struct ChildOutcome {
  enum class Status {
    Returned,   ///< the child's work returned `output`
    Died,       ///< the child ended without returning: `reason` says how
    Unavailable ///< no child could be started: `reason` says why; nothing ran
  };
  Status status = Status::Unavailable;
  std::string output;
  /// "signal 11 (Segmentation fault)", "exit status 1", or why fork() or pipe() failed.
  std::string reason;
};

/// Runs `work` in a forked child of this process and returns what it returned. The child has
/// only the calling thread, so `work` must not need the others, nor locks they may hold (the
/// CUDA driver, for one); it ends with _exit, running no destructors or atexit handlers of the
/// parent's. A `work` that throws ends the child with exit status 1.
ChildOutcome runInChild(const std::function<std::string()> &work);

} // namespace mkc

#endif // MK_TARGET_CHILDPROCESS_H
