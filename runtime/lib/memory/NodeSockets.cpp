//===- NodeSockets.cpp - Unix sockets between the ranks of a node ------------===//

#include "mk/runtime/memory/NodeSockets.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace mkc {

namespace {

using Clock = std::chrono::steady_clock;

// The protocol's magic and version: anything else on the socket is not one of the node's ranks.
constexpr std::uint32_t kProtocol = 0x6d6b6e01;

enum class Kind : std::uint32_t { Introduction = 1, Fd = 2, Barrier = 3 };

// Every message has this size: SOCK_SEQPACKET keeps message boundaries, so there is no framing.
struct Message {
  std::uint32_t protocol;
  Kind kind;
  std::uint32_t sender;   // its local rank
  std::uint32_t reserved; // the padding, spelled out so that every byte sent is initialised
  std::uint64_t value;    // Introduction: the local world size; Fd: the bytes; Barrier: its number
};

Message makeMessage(Kind kind, int sender, std::uint64_t value) {
  return {kProtocol, kind, static_cast<std::uint32_t>(sender), 0, value};
}

const char *describe(Kind kind) {
  switch (kind) {
  case Kind::Introduction:
    return "an introduction";
  case Kind::Fd:
    return "a file descriptor";
  case Kind::Barrier:
    return "a barrier";
  }
  return "a message of unknown kind";
}

std::string rankName(int rank) { return "local rank " + std::to_string(rank); }

std::string within(std::chrono::milliseconds timeout) {
  return "within " + std::to_string(timeout.count()) + " ms";
}

[[noreturn]] void throwErrno(const std::string &what) {
  throw std::system_error(errno, std::generic_category(), what);
}

int millisecondsUntil(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<decltype(left)>(left, 0, std::numeric_limits<int>::max()));
}

/// Waits until `socket` has something to read (a message, a connection, a hang-up); false when
/// `deadline` passes first.
bool waitReadable(int socket, Clock::time_point deadline) {
  for (;;) {
    pollfd entry{socket, POLLIN, 0};
    const int ready = ::poll(&entry, 1, millisecondsUntil(deadline));
    if (ready >= 0)
      return ready > 0;
    if (errno != EINTR)
      throwErrno("poll");
  }
}

struct AbstractAddress {
  sockaddr_un address{};
  socklen_t length = 0;
};

AbstractAddress abstractAddress(const std::string &name) {
  AbstractAddress result;
  result.address.sun_family = AF_UNIX;
  // A leading NUL byte puts the name in the abstract namespace: no file to clean up, and the name
  // disappears with the socket, even when its process is killed.
  std::memcpy(result.address.sun_path + 1, name.data(), name.size());
  result.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return result;
}

UniqueFd seqpacketSocket() {
  UniqueFd socket(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!socket)
    throwErrno("socket(AF_UNIX, SOCK_SEQPACKET)");
  return socket;
}

UniqueFd listenOn(const std::string &name) {
  UniqueFd socket = seqpacketSocket();
  const AbstractAddress address = abstractAddress(name);
  if (::bind(socket.get(), reinterpret_cast<const sockaddr *>(&address.address), address.length)) {
    if (errno == EADDRINUSE)
      throw std::runtime_error("@" + name + " is taken: another process on this node is the same " +
                               "local rank of a job with the same token");
    throwErrno("bind(@" + name + ")");
  }
  if (::listen(socket.get(), SOMAXCONN))
    throwErrno("listen(@" + name + ")");
  return socket;
}

/// Connects to `peer`'s socket, retrying until it listens or `deadline` passes.
UniqueFd connectTo(int peer, const std::string &name, Clock::time_point deadline,
                   std::chrono::milliseconds timeout) {
  const AbstractAddress address = abstractAddress(name);
  for (;;) {
    UniqueFd socket = seqpacketSocket();
    if (!::connect(socket.get(), reinterpret_cast<const sockaddr *>(&address.address),
                   address.length))
      return socket;
    // ECONNREFUSED: nobody listens on the name yet; EAGAIN: its backlog is full.
    if (errno != ECONNREFUSED && errno != EAGAIN)
      throwErrno("connect(@" + name + ")");
    if (Clock::now() >= deadline)
      throw std::runtime_error(rankName(peer) + " did not listen on @" + name + " " +
                               within(timeout));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

/// Sends `message`, and `fd` unless it is -1, without blocking: messages are small and a rank is
/// at most one exchange ahead of another, so a full socket buffer means the peer stopped reading.
void sendTo(int socket, int peer, Message message, int fd, const std::string &during) {
  iovec data{&message, sizeof message};
  msghdr header{};
  header.msg_iov = &data;
  header.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    header.msg_control = control;
    header.msg_controllen = sizeof control;
    cmsghdr *rights = CMSG_FIRSTHDR(&header);
    rights->cmsg_level = SOL_SOCKET;
    rights->cmsg_type = SCM_RIGHTS;
    rights->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(rights), &fd, sizeof fd);
  }
  ssize_t sent;
  do
    sent = ::sendmsg(socket, &header, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (sent < 0 && errno == EINTR);
  if (sent == static_cast<ssize_t>(sizeof message))
    return;
  if (sent < 0 && (errno == EPIPE || errno == ECONNRESET))
    throw std::runtime_error(rankName(peer) + " closed its socket (it exited or failed) during " +
                             during);
  if (sent < 0 && errno == EAGAIN)
    throw std::runtime_error(rankName(peer) + " stopped reading its socket during " + during);
  throwErrno("sendmsg to " + rankName(peer) + " during " + during);
}

/// Reads one message that is ready on `socket`, and the descriptor it carries into `passed`.
/// Returns what recvmsg returns (0: the peer closed its end); `wellFormed` says whether the
/// message is one of ours, whole.
ssize_t receiveReady(int socket, Message &message, UniqueFd &passed, bool &wellFormed) {
  iovec data{&message, sizeof message};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr header{};
  header.msg_iov = &data;
  header.msg_iovlen = 1;
  header.msg_control = control;
  header.msg_controllen = sizeof control;
  ssize_t received;
  do
    received = ::recvmsg(socket, &header, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  while (received < 0 && errno == EINTR);
  // Own any descriptor at once, so that none leaks whatever the message turns out to be.
  if (received >= 0)
    for (cmsghdr *c = CMSG_FIRSTHDR(&header); c; c = CMSG_NXTHDR(&header, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
        passed = UniqueFd(fd);
      }
  wellFormed = received == static_cast<ssize_t>(sizeof message) &&
               !(header.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) && message.protocol == kProtocol;
  return received;
}

/// Receives the next message from `peer`, which must be of kind `expected`; a descriptor it
/// carries goes to `passed`, which only a message of kind Fd may carry.
Message receiveFrom(int socket, int peer, Kind expected, Clock::time_point deadline,
                    std::chrono::milliseconds timeout, UniqueFd *passed,
                    const std::string &during) {
  if (!waitReadable(socket, deadline))
    throw std::runtime_error(rankName(peer) + " sent nothing " + within(timeout) + " during " +
                             during);
  Message message{};
  UniqueFd fd;
  bool wellFormed = false;
  const ssize_t received = receiveReady(socket, message, fd, wellFormed);
  if (received == 0 || (received < 0 && errno == ECONNRESET))
    throw std::runtime_error(rankName(peer) + " closed its socket (it exited or failed) during " +
                             during);
  if (received < 0)
    throwErrno("recvmsg from " + rankName(peer) + " during " + during);
  if (!wellFormed || message.sender != static_cast<std::uint32_t>(peer))
    throw std::runtime_error(rankName(peer) + " sent a malformed message during " + during);
  if (message.kind != expected)
    throw std::runtime_error(rankName(peer) + " is out of step: it sent " + describe(message.kind) +
                             " during " + during);
  if (fd && !passed)
    throw std::runtime_error(rankName(peer) + " sent a file descriptor during " + during);
  if (passed)
    *passed = std::move(fd);
  return message;
}

bool fromThisUser(int socket) {
  ucred credentials{};
  socklen_t length = sizeof credentials;
  return !::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &credentials, &length) &&
         credentials.uid == ::geteuid();
}

// FNV-1a: the same on every rank whatever its standard library, unlike std::hash.
std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text)
    hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

} // namespace

std::string NodeSockets::socketName(std::string_view jobToken, int localRank) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a(jobToken)));
  return std::string("mkc-") + hash + "-" + std::to_string(localRank);
}

NodeSockets::NodeSockets(int localRank, int localWorldSize, std::string_view jobToken,
                         std::chrono::milliseconds timeout)
    : localRank_(localRank), timeout_(timeout) {
  if (localWorldSize < 1 || localRank < 0 || localRank >= localWorldSize)
    throw std::invalid_argument("node sockets: local rank " + std::to_string(localRank) + " of " +
                                std::to_string(localWorldSize) + " ranks");
  peers_.resize(localWorldSize);
  const Clock::time_point deadline = Clock::now() + timeout;
  // Listen before connecting: a higher rank may already be trying to connect. The highest rank
  // listens too, so that two processes claiming one local rank fail at once (EADDRINUSE).
  const std::string name = socketName(jobToken, localRank);
  const UniqueFd listener = listenOn(name);
  // A lower rank's connection waits in its backlog until it accepts: no rank waits on another here.
  for (int peer = 0; peer < localRank; ++peer) {
    peers_[peer] = connectTo(peer, socketName(jobToken, peer), deadline, timeout);
    sendTo(peers_[peer].get(), peer, makeMessage(Kind::Introduction, localRank, localWorldSize), -1,
           "the introduction");
  }
  acceptHigherRanks(listener.get(), name, deadline);
}

void NodeSockets::acceptHigherRanks(int listener, const std::string &name,
                                    Clock::time_point deadline) {
  const int localWorldSize = static_cast<int>(peers_.size());
  const auto missing = [&] {
    std::vector<int> ranks;
    for (int peer = localRank_ + 1; peer < localWorldSize; ++peer)
      if (!peers_[peer])
        ranks.push_back(peer);
    return ranks;
  };
  for (std::vector<int> absent = missing(); !absent.empty(); absent = missing()) {
    if (!waitReadable(listener, deadline)) {
      std::string names = absent.size() == 1 ? "local rank " : "local ranks ";
      for (std::size_t i = 0; i < absent.size(); ++i)
        names += (i ? ", " : "") + std::to_string(absent[i]);
      throw std::runtime_error(names + " did not connect to @" + name + " " + within(timeout_));
    }
    UniqueFd socket(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
    if (!socket) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      throwErrno("accept(@" + name + ")");
    }
    // A connection from another user, or one that does not introduce itself as a rank still
    // missing, is dropped: it cannot take a rank's place.
    if (!fromThisUser(socket.get()) || !waitReadable(socket.get(), deadline))
      continue;
    Message introduction{};
    UniqueFd passed;
    bool wellFormed = false;
    if (receiveReady(socket.get(), introduction, passed, wellFormed) <= 0 || !wellFormed ||
        introduction.kind != Kind::Introduction || passed)
      continue;
    const int peer = static_cast<int>(introduction.sender);
    if (peer <= localRank_ || peer >= localWorldSize || peers_[peer])
      continue;
    if (introduction.value != static_cast<std::uint64_t>(localWorldSize))
      throw std::runtime_error(
          rankName(peer) + " was told the node has " + std::to_string(introduction.value) +
          " ranks, " + rankName(localRank_) + " that it has " + std::to_string(localWorldSize));
    peers_[peer] = std::move(socket);
  }
}

std::vector<PeerFd> NodeSockets::exchangeFds(int fd, std::uint64_t bytes) {
  const Clock::time_point deadline = Clock::now() + timeout_;
  const std::string during = "the file-descriptor exchange";
  const int localWorldSize = static_cast<int>(peers_.size());
  for (int peer = 0; peer < localWorldSize; ++peer)
    if (peer != localRank_)
      sendTo(peers_[peer].get(), peer, makeMessage(Kind::Fd, localRank_, bytes), fd, during);
  std::vector<PeerFd> shared(localWorldSize);
  shared[localRank_].bytes = bytes;
  for (int peer = 0; peer < localWorldSize; ++peer) {
    if (peer == localRank_)
      continue;
    const Message incoming = receiveFrom(peers_[peer].get(), peer, Kind::Fd, deadline, timeout_,
                                         &shared[peer].fd, during);
    if (!shared[peer].fd)
      throw std::runtime_error(rankName(peer) + " sent no file descriptor during " + during);
    shared[peer].bytes = incoming.value;
  }
  return shared;
}

void NodeSockets::barrier() {
  const Clock::time_point deadline = Clock::now() + timeout_;
  const std::uint64_t number = ++barriers_;
  const std::string during = "barrier " + std::to_string(number);
  const int localWorldSize = static_cast<int>(peers_.size());
  for (int peer = 0; peer < localWorldSize; ++peer)
    if (peer != localRank_)
      sendTo(peers_[peer].get(), peer, makeMessage(Kind::Barrier, localRank_, number), -1, during);
  for (int peer = 0; peer < localWorldSize; ++peer) {
    if (peer == localRank_)
      continue;
    const Message incoming =
        receiveFrom(peers_[peer].get(), peer, Kind::Barrier, deadline, timeout_, nullptr, during);
    if (incoming.value != number)
      throw std::runtime_error(rankName(peer) + " is out of step: it is at barrier " +
                               std::to_string(incoming.value) + ", " + rankName(localRank_) +
                               " at " + std::to_string(number));
  }
}

} // namespace mkc
