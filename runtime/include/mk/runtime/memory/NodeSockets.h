//===- mk/runtime/memory/NodeSockets.h - Unix sockets between the ranks of a node ---*- C++ -*-===//
//
// The ranks of a node hand each other file descriptors (the POSIX handles of their symmetric
// memory), which only a Unix domain socket can carry (SCM_RIGHTS). Each rank listens on an
// abstract-namespace name derived from the job token and its local rank, connects to every lower
// rank and accepts every higher one, so that each pair of ranks ends up sharing one socket. Every
// wait is bounded by the timeout, and an error names the local rank that did not show up or went
// away, never a hang.
//
//   mkc::NodeSockets node(localRank, localWorldSize, jobToken, std::chrono::seconds(60));
//   std::vector<mkc::PeerFd> fds = node.exchangeFds(fd, bytes);  // fds[r]: local rank r's
//   node.barrier();
//
// Abstract names belong to the network namespace, so the node's ranks must share one. Any process
// there can connect to them: connections from another user or that do not introduce themselves
// as a rank of the node are dropped.
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_MEMORY_NODESOCKETS_H
#define MK_RUNTIME_MEMORY_NODESOCKETS_H

#include "mk/runtime/support/UniqueFd.h"

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mkc {

/// What a rank sent in NodeSockets::exchangeFds: its descriptor and the size of what it refers to.
struct PeerFd {
  UniqueFd fd;
  std::uint64_t bytes = 0;
};

/// One connected socket to every other rank of this node.
class NodeSockets {
public:
  /// Meets the other `localWorldSize - 1` ranks of the node; throws if one has not arrived within
  /// `timeout`, naming it. The listening socket is closed once every higher rank has connected.
  NodeSockets(int localRank, int localWorldSize, std::string_view jobToken,
              std::chrono::milliseconds timeout);

  /// Sends `fd` and `bytes` to every other rank and returns what each sent, indexed by local rank;
  /// this rank's entry holds `bytes` and no descriptor. Every rank must call it at the same point.
  std::vector<PeerFd> exchangeFds(int fd, std::uint64_t bytes);

  /// Returns once every rank of the node has called barrier() as often as this one.
  void barrier();

  int localRank() const { return localRank_; }
  int localWorldSize() const { return static_cast<int>(peers_.size()); }

  /// The abstract socket name local rank `localRank` of the job listens on (without the leading
  /// NUL byte); a hash of the token keeps it short whatever the token.
  static std::string socketName(std::string_view jobToken, int localRank);

private:
  void acceptHigherRanks(int listener, const std::string &name,
                         std::chrono::steady_clock::time_point deadline);

  int localRank_;
  std::chrono::milliseconds timeout_;
  std::vector<UniqueFd> peers_; // by local rank; this rank's entry is empty
  std::uint64_t barriers_ = 0;
};

} // namespace mkc

#endif // MK_RUNTIME_MEMORY_NODESOCKETS_H
