// The Unix sockets between the ranks of a node, between forked processes: descriptors passed
// with SCM_RIGHTS (memfd_create standing in for a GPU allocation's handle) map the same memory in
// every process; a rank that never arrives or goes away is named, within the timeout or at once;
// a stray connection cannot take a rank's place.

#include "mk/runtime/memory/NodeSockets.h"

#include "../ChildProcess.h"

#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace mkc;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using mkc::test::exitStatus;
using mkc::test::spawn;

namespace {

using Clock = std::chrono::steady_clock;

/// A token no other test, run or concurrent job uses.
std::string uniqueToken() {
  static std::atomic<int> counter{0};
  return "node-sockets-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(Clock::now().time_since_epoch().count());
}

/// Runs `body`, which must throw an error whose message contains `expected`: for child processes,
/// where Catch2's assertions do not reach the report.
void requireFailure(const std::function<void()> &body, const std::string &expected) {
  try {
    body();
  } catch (const std::exception &error) {
    if (std::string(error.what()).find(expected) != std::string::npos)
      return;
    throw std::runtime_error("expected an error naming \"" + expected + "\", got: " + error.what());
  }
  throw std::runtime_error("expected an error naming \"" + expected + "\", got none");
}

void check(bool condition, const std::string &what) {
  if (!condition)
    throw std::runtime_error(what);
}

/// Connects to local rank `rank`'s socket as its peers do, retrying until it listens (10 s).
UniqueFd connectWhenListening(const std::string &token, int rank) {
  const std::string name = NodeSockets::socketName(token, rank);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  for (const Clock::time_point deadline = Clock::now() + 10s;; std::this_thread::sleep_for(5ms)) {
    check(Clock::now() < deadline, "local rank " + std::to_string(rank) + " never listened");
    UniqueFd socket(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (::connect(socket.get(), reinterpret_cast<const sockaddr *>(&address), length) == 0)
      return socket;
  }
}

/// Shared memory, mapped in this process, whose descriptor stands in for a GPU allocation's.
class SharedWords {
public:
  static constexpr std::size_t kBytes = 4096;

  SharedWords() : fd_(::memfd_create("node-sockets-test", MFD_CLOEXEC)) {
    check(fd_ && ::ftruncate(fd_.get(), kBytes) == 0, "memfd_create");
    map();
  }
  explicit SharedWords(UniqueFd fd) : fd_(std::move(fd)) { map(); }
  ~SharedWords() { ::munmap(words_, kBytes); }
  SharedWords(const SharedWords &) = delete;
  SharedWords &operator=(const SharedWords &) = delete;

  int fd() const { return fd_.get(); }
  volatile std::uint32_t &operator[](std::size_t i) { return words_[i]; }

private:
  void map() {
    void *address = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_.get(), 0);
    check(address != MAP_FAILED, "mmap");
    words_ = static_cast<std::uint32_t *>(address);
  }

  UniqueFd fd_;
  std::uint32_t *words_ = nullptr;
};

/// Each rank's part of the sharing test: word 0 of its memory holds 1000 + its rank; it checks
/// every peer's word 0 through the descriptor it received, writes 2000 + its rank into word
/// 1 + its rank of every peer's memory, and after a barrier finds the peers' marks in its own.
void shareMemory(int rank, int world, const std::string &token) {
  NodeSockets node(rank, world, token, 10s);
  SharedWords own;
  own[0] = 1000 + rank;
  std::vector<PeerFd> shared = node.exchangeFds(own.fd(), SharedWords::kBytes);
  check(shared.size() == static_cast<std::size_t>(world) && !shared[rank].fd,
        "one entry per rank, none with this rank's own descriptor");
  std::vector<std::unique_ptr<SharedWords>> peers(world);
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank)
      continue;
    check(shared[peer].bytes == SharedWords::kBytes, "the size sent with the descriptor");
    peers[peer] = std::make_unique<SharedWords>(std::move(shared[peer].fd));
    check((*peers[peer])[0] == 1000u + peer,
          "rank " + std::to_string(rank) + " reads rank " + std::to_string(peer) + "'s word");
    (*peers[peer])[1 + rank] = 2000 + rank;
  }
  node.barrier();
  for (int peer = 0; peer < world; ++peer)
    if (peer != rank)
      check(own[1 + peer] == 2000u + peer,
            "rank " + std::to_string(rank) + " sees rank " + std::to_string(peer) + "'s write");
  node.barrier();
}

} // namespace

TEST_CASE("descriptors passed between processes map the same memory", "[node-sockets]") {
  const std::string token = uniqueToken();
  constexpr int world = 3;
  std::vector<pid_t> children;
  for (int rank = 1; rank < world; ++rank)
    children.push_back(spawn([&, rank] { shareMemory(rank, world, token); }));
  REQUIRE_NOTHROW(shareMemory(0, world, token));
  for (pid_t child : children)
    CHECK(exitStatus(child) == 0);
}

TEST_CASE("a single rank needs no peers", "[node-sockets]") {
  NodeSockets node(0, 1, uniqueToken(), 1s);
  SharedWords own;
  std::vector<PeerFd> shared = node.exchangeFds(own.fd(), SharedWords::kBytes);
  REQUIRE(shared.size() == 1);
  CHECK(shared[0].bytes == SharedWords::kBytes);
  CHECK(!shared[0].fd);
  node.barrier();
}

TEST_CASE("a rank that never arrives is named within the timeout", "[node-sockets]") {
  const std::string token = uniqueToken();
  constexpr auto timeout = 300ms;

  SECTION("a higher rank never connects") {
    // Rank 1 arrives; rank 2 never does. Both ranks that wait name rank 2, and only rank 2.
    const pid_t rank1 = spawn([&] {
      requireFailure([&] { NodeSockets(1, 3, token, timeout); }, "local rank 2 did not connect");
    });
    const Clock::time_point start = Clock::now();
    REQUIRE_THROWS_WITH(NodeSockets(0, 3, token, timeout),
                        Contains("local rank 2 did not connect") && !Contains("local rank 1") &&
                            Contains("within 300 ms"));
    const auto elapsed = Clock::now() - start;
    CHECK(elapsed >= timeout);
    CHECK(elapsed < timeout + 1s);
    CHECK(exitStatus(rank1) == 0);
  }

  SECTION("a lower rank never listens") {
    const Clock::time_point start = Clock::now();
    REQUIRE_THROWS_WITH(
        NodeSockets(1, 2, token, timeout),
        Contains("local rank 0 did not listen on @" + NodeSockets::socketName(token, 0)));
    const auto elapsed = Clock::now() - start;
    CHECK(elapsed >= timeout);
    CHECK(elapsed < timeout + 1s);
  }
}

TEST_CASE("a rank that goes away is named at once", "[node-sockets]") {
  const std::string token = uniqueToken();
  constexpr auto timeout = 20s; // far beyond the test's limit: the error must not wait for it

  SECTION("during the descriptor exchange") {
    const pid_t rank1 = spawn([&] { NodeSockets(1, 2, token, timeout); });
    NodeSockets node(0, 2, token, timeout);
    SharedWords own;
    const Clock::time_point start = Clock::now();
    REQUIRE_THROWS_WITH(node.exchangeFds(own.fd(), SharedWords::kBytes),
                        Contains("local rank 1 closed its socket (it exited or failed) during "
                                 "the file-descriptor exchange"));
    CHECK(Clock::now() - start < 5s);
    CHECK(exitStatus(rank1) == 0);
  }

  SECTION("between barriers") {
    const pid_t rank1 = spawn([&] {
      NodeSockets node(1, 2, token, timeout);
      node.barrier();
    });
    NodeSockets node(0, 2, token, timeout);
    node.barrier();
    const Clock::time_point start = Clock::now();
    REQUIRE_THROWS_WITH(node.barrier(),
                        Contains("local rank 1 closed its socket") && Contains("during barrier 2"));
    CHECK(Clock::now() - start < 5s);
    CHECK(exitStatus(rank1) == 0);
  }
}

TEST_CASE("a connection that is not a rank of the node is dropped", "[node-sockets]") {
  const std::string token = uniqueToken();
  const pid_t rank0 = spawn([&] {
    NodeSockets node(0, 2, token, 10s);
    node.barrier();
  });
  // A stray process connects to rank 0 first, says something that is not an introduction and
  // goes away; rank 1 arrives only then.
  const pid_t stray = spawn([&] {
    const UniqueFd socket = connectWhenListening(token, 0);
    check(::send(socket.get(), "hello", 5, 0) == 5, "send");
  });
  REQUIRE(exitStatus(stray) == 0);
  NodeSockets node(1, 2, token, 10s);
  REQUIRE_NOTHROW(node.barrier());
  CHECK(exitStatus(rank0) == 0);
}

TEST_CASE("ranks told different node sizes say so", "[node-sockets]") {
  const std::string token = uniqueToken();
  const pid_t rank1 = spawn([&] {
    requireFailure([&] { NodeSockets(1, 3, token, 500ms); }, "local rank 2 did not connect");
  });
  REQUIRE_THROWS_WITH(NodeSockets(0, 2, token, 5s),
                      Contains("local rank 1 was told the node has 3 ranks, local rank 0 that "
                               "it has 2"));
  CHECK(exitStatus(rank1) == 0);
}

TEST_CASE("two processes cannot claim one local rank", "[node-sockets]") {
  const std::string token = uniqueToken();
  const pid_t first = spawn([&] {
    requireFailure([&] { NodeSockets(0, 2, token, 1s); }, "local rank 1 did not connect");
  });
  // Once the first claimant listens (a connection that says nothing is dropped), claim it again.
  REQUIRE_NOTHROW(connectWhenListening(token, 0));
  REQUIRE_THROWS_WITH(NodeSockets(0, 2, token, 1s),
                      Contains("@" + NodeSockets::socketName(token, 0) + " is taken"));
  CHECK(exitStatus(first) == 0);
}

TEST_CASE("a local rank outside the node is refused", "[node-sockets]") {
  CHECK_THROWS_AS(NodeSockets(2, 2, uniqueToken(), 1s), std::invalid_argument);
  CHECK_THROWS_AS(NodeSockets(0, 0, uniqueToken(), 1s), std::invalid_argument);
}
