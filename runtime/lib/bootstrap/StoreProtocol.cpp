//===- bootstrap/StoreProtocol.cpp - the store's wire protocol, deadlines and sockets ---===//
//
// The messages of bootstrap/StoreProtocol.h built with the byte codec (little-endian integers),
// waits on deadlines with poll(), and the sockets: resolved with getaddrinfo (IPv4 or IPv6),
// non-blocking, with Nagle off.
//
//===----------------------------------------------------------------------===//

#include "bootstrap/StoreProtocol.h"

#include <fmt/format.h>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <system_error>

namespace mkc::bootstrap {

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string formatDuration(Timeout timeout) {
  return fmt::format("{:g} s", static_cast<double>(timeout.count()) / 1000);
}

Deadline deadlineAfter(Timeout timeout) {
  return Clock::now() + std::clamp(timeout, Timeout::zero(), kLongestTimeout);
}

int millisecondsUntil(Deadline deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, INT_MAX));
}

std::string_view nameOf(Operation operation) {
  return operation == Operation::Barrier ? "barrier" : "allGather";
}

std::string errorText(int error) { return std::system_category().message(error); }

[[noreturn]] void throwErrno(std::string_view what) {
  throw BootstrapError(fmt::format("{}: {}", what, errorText(errno)));
}

ByteWriter frameHeader(FrameType type, std::uint64_t sequence, std::uint64_t payloadBytes) {
  ByteWriter encoder;
  encoder.put<std::uint32_t>(static_cast<std::uint32_t>(type))
      .put<std::uint64_t>(sequence)
      .put<std::uint64_t>(payloadBytes);
  return encoder;
}

Bytes reply(Admission admission, std::string_view reason) {
  reason = reason.substr(0, kMaxReasonBytes);
  return ByteWriter()
      .text(kMagic)
      .put<std::uint32_t>(kProtocolVersion)
      .put<std::uint32_t>(static_cast<std::uint32_t>(admission))
      .put<std::uint32_t>(static_cast<std::uint32_t>(reason.size()))
      .text(reason)
      .take();
}

void setNoDelay(int socket) {
  int on = 1; // the protocol's messages are small and each waits for an answer
  ::setsockopt(socket, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

bool waitUntilReady(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    int ready = ::poll(&entry, 1, millisecondsUntil(deadline));
    if (ready > 0)
      return true;
    if (ready < 0 && errno != EINTR)
      throwErrno("poll");
    if (ready == 0 && Clock::now() >= deadline)
      return false;
  }
}

Io sendAll(int fd, std::span<const std::byte> data, Deadline deadline) {
  while (!data.empty()) {
    ssize_t sent = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (sent > 0) {
      data = data.subspan(static_cast<std::size_t>(sent));
    } else if (sent < 0 && errno == EINTR) {
      continue;
    } else if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitUntilReady(fd, POLLOUT, deadline))
        return Io::TimedOut;
    } else {
      return Io::Closed;
    }
  }
  return Io::Done;
}

Io receiveExact(int fd, std::span<std::byte> into, Deadline deadline) {
  while (!into.empty()) {
    ssize_t received = ::recv(fd, into.data(), into.size(), 0);
    if (received > 0) {
      into = into.subspan(static_cast<std::size_t>(received));
    } else if (received < 0 && errno == EINTR) {
      continue;
    } else if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitUntilReady(fd, POLLIN, deadline))
        return Io::TimedOut;
    } else {
      return Io::Closed;
    }
  }
  return Io::Done;
}

namespace {

struct AddressListDeleter {
  void operator()(addrinfo *list) const { ::freeaddrinfo(list); }
};
using AddressList = std::unique_ptr<addrinfo, AddressListDeleter>;

/// The addresses of `host` for a TCP socket at `port`, or null with `problem` saying why not.
AddressList resolve(const std::string &host, std::uint16_t port, std::string &problem) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo *list = nullptr;
  if (int status = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list)) {
    problem = fmt::format("cannot resolve {}: {}", host,
                          status == EAI_SYSTEM ? errorText(errno) : ::gai_strerror(status));
    return nullptr;
  }
  return AddressList(list);
}

} // namespace

std::string peerName(const sockaddr_storage &address, socklen_t length) {
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr *>(&address), length, host, sizeof host,
                    service, sizeof service, NI_NUMERICHOST | NI_NUMERICSERV))
    return "an unknown peer";
  return address.ss_family == AF_INET6 ? fmt::format("[{}]:{}", host, service)
                                       : fmt::format("{}:{}", host, service);
}

UniqueFd listenAt(const Rendezvous &rendezvous) {
  std::string problem;
  AddressList addresses = resolve(rendezvous.address, rendezvous.port, problem);
  if (!addresses)
    throw BootstrapError(fmt::format("rank 0 cannot listen for the store: {}", problem));
  int error = 0;
  for (const addrinfo *address = addresses.get(); address; address = address->ai_next) {
    UniqueFd socket(::socket(address->ai_family,
                             address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                             address->ai_protocol));
    if (!socket) {
      error = errno;
      continue;
    }
    int on = 1; // a restarted job may listen while its predecessor's connections linger
    ::setsockopt(socket.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(socket.get(), address->ai_addr, address->ai_addrlen) == 0 &&
        ::listen(socket.get(), SOMAXCONN) == 0)
      return socket;
    error = errno;
  }
  std::string_view hint = error == EADDRINUSE      ? " (another process holds the port: set "
                                                     "MKC_MASTER_PORT to a free one)"
                          : error == EADDRNOTAVAIL ? " (not an address of this host: rank 0 must "
                                                     "run where the master address points)"
                                                   : "";
  throw BootstrapError(fmt::format("rank 0 cannot listen for the store at {}:{}: {}{}",
                                   rendezvous.address, rendezvous.port, errorText(error), hint));
}

/// One attempt at each of the master's addresses: a connected socket, or null with `problem`
/// saying why none answered.
UniqueFd connectOnce(const Rendezvous &rendezvous, Deadline deadline, std::string &problem) {
  AddressList addresses = resolve(rendezvous.address, rendezvous.port, problem);
  for (const addrinfo *address = addresses.get(); address; address = address->ai_next) {
    UniqueFd socket(::socket(address->ai_family,
                             address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                             address->ai_protocol));
    if (!socket) {
      problem = errorText(errno);
      continue;
    }
    // A non-blocking connect, or one interrupted by a signal, completes in the background.
    if (::connect(socket.get(), address->ai_addr, address->ai_addrlen) != 0) {
      if (errno != EINPROGRESS && errno != EINTR) {
        problem = errorText(errno);
        continue;
      }
      if (!waitUntilReady(socket.get(), POLLOUT, deadline)) {
        problem = "connecting timed out";
        continue;
      }
      int error = 0;
      socklen_t length = sizeof error;
      ::getsockopt(socket.get(), SOL_SOCKET, SO_ERROR, &error, &length);
      if (error) {
        problem = errorText(error);
        continue;
      }
    }
    setNoDelay(socket.get());
    return socket;
  }
  return UniqueFd();
}

} // namespace mkc::bootstrap
