//===- mk/runtime/support/UniqueFd.h - a file descriptor that closes itself ---*- C++ -*-===//
//
// Sockets and the descriptors of exported GPU memory are owned the same way everywhere in the
// runtime: moved, never copied, closed when their owner goes.
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_SUPPORT_UNIQUEFD_H
#define MK_RUNTIME_SUPPORT_UNIQUEFD_H

#include <unistd.h>

#include <utility>

namespace mkc {

class UniqueFd {
public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd &&other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd &operator=(UniqueFd &&other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~UniqueFd() { reset(); }
  UniqueFd(const UniqueFd &) = delete;
  UniqueFd &operator=(const UniqueFd &) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  /// Gives the descriptor up, to a caller that closes it itself (and checks what close says).
  int release() { return std::exchange(fd_, -1); }

private:
  void reset() {
    if (fd_ >= 0)
      ::close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
};

} // namespace mkc

#endif // MK_RUNTIME_SUPPORT_UNIQUEFD_H
