//===- ChildProcess.h - forked children for the runtime's multi-process tests ---*- C++ -*-===//
//
// Ranks of a test run as forked processes; Catch2's assertions do not reach the report from a
// child, so a child says why it failed on stderr and in its exit status.
//
//===----------------------------------------------------------------------===//

#ifndef MK_TEST_RUNTIME_CHILDPROCESS_H
#define MK_TEST_RUNTIME_CHILDPROCESS_H

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <stdexcept>

namespace mkc::test {

/// Runs `body` in a child process, which exits 0 if it returns and 1, saying why, if it throws.
inline pid_t spawn(const std::function<void()> &body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int status = 0;
    try {
      body();
    } catch (const std::exception &error) {
      std::fprintf(stderr, "child %d: %s\n", ::getpid(), error.what());
      status = 1;
    }
    std::fflush(nullptr);
    ::_exit(status);
  }
  REQUIRE(pid > 0);
  return pid;
}

/// The exit status of child `pid`, or 128 plus the signal that ended it.
inline int exitStatus(pid_t pid) {
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace mkc::test

#endif // MK_TEST_RUNTIME_CHILDPROCESS_H
