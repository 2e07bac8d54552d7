//===- ChildProcess.cpp - work in a forked child, whose crash is an answer ------===//

#include "mk/Target/ChildProcess.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace mkc {
namespace {

/// Writes all of `bytes` to `fd`; false if the pipe broke.
bool writeAll(int fd, const void *bytes, std::size_t size) {
  const char *at = static_cast<const char *>(bytes);
  while (size > 0) {
    const ssize_t written = ::write(fd, at, size);
    if (written < 0 && errno == EINTR)
      continue;
    if (written <= 0)
      return false;
    at += written;
    size -= static_cast<std::size_t>(written);
  }
  return true;
}

[[noreturn]] void childMain(int fd, const std::function<std::string()> &work) {
  std::string output;
  try {
    output = work();
  } catch (...) {
    ::_exit(1);
  }
  // Length first: the parent takes the output as returned only when all of it arrived, which
  // also holds where SIGCHLD is ignored and waitpid cannot say how the child ended.
  const std::uint64_t size = output.size();
  const bool sent = writeAll(fd, &size, sizeof size) && writeAll(fd, output.data(), output.size());
  ::_exit(sent ? 0 : 2);
}

std::string describeEnd(int status) {
  char text[96];
  if (WIFSIGNALED(status))
    std::snprintf(text, sizeof text, "signal %d (%s)", WTERMSIG(status),
                  ::strsignal(WTERMSIG(status)));
  else
    std::snprintf(text, sizeof text, "exit status %d", WEXITSTATUS(status));
  return text;
}

} // namespace

ChildOutcome runInChild(const std::function<std::string()> &work) {
  ChildOutcome outcome;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    outcome.reason = std::string("pipe: ") + std::strerror(errno);
    return outcome;
  }
  // Unflushed stdio buffers would otherwise be written twice, once by the child.
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    outcome.reason = std::string("fork: ") + std::strerror(errno);
    ::close(fds[0]);
    ::close(fds[1]);
    return outcome;
  }
  if (pid == 0) {
    ::close(fds[0]);
    childMain(fds[1], work);
  }
  ::close(fds[1]);
  std::string received;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fds[0], buffer, sizeof buffer);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      break;
    received.append(buffer, static_cast<std::size_t>(got));
  }
  ::close(fds[0]);
  int status = 0;
  pid_t reaped;
  do
    reaped = ::waitpid(pid, &status, 0);
  while (reaped < 0 && errno == EINTR);

  std::uint64_t size = 0;
  if (received.size() >= sizeof size) {
    std::memcpy(&size, received.data(), sizeof size);
    if (received.size() - sizeof size == size) {
      outcome.status = ChildOutcome::Status::Returned;
      outcome.output = received.substr(sizeof size);
      return outcome;
    }
  }
  outcome.status = ChildOutcome::Status::Died;
  outcome.reason =
      reaped == pid ? describeEnd(status) : "an end waitpid cannot see (SIGCHLD ignored)";
  return outcome;
}

} // namespace mkc
