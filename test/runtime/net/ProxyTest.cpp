// The proxy between two forked processes acting as two nodes, over libfabric's tcp and shm
// providers on loopback, with a host thread in each playing the GPU: it pushes commands into the
// real ring (mk/queue.h's protocol) and checks what the other node's puts left in its heap.
// Covered: every byte of puts of every shape (strided rows, rows split across slots, staging
// sources), flags seen only after their data, sources never read once the tail has passed their
// command, both protocols, a ring of a few slots wrapping
// hundreds of times under back-pressure, the two rails of a 2 x 2 job side by side, a peer dying
// mid-transfer, a bad remote key and bad commands, each an error naming the node within a
// bounded time.

#include "mk/runtime/net/Proxy.h"

#include "../ChildProcess.h"

#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace mkc::net;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;
using mkc::test::exitStatus;
using mkc::test::spawn;

namespace {

using Clock = std::chrono::steady_clock;

// The heap of each node: net flags [2 nodes][kWords], then the source area, then destinations.
constexpr std::size_t kWords = 1024;
constexpr std::size_t kSourceOffset = 64 << 10;
constexpr std::size_t kSourceBytes = 1 << 20;
constexpr std::size_t kDestinationOffset = kSourceOffset + kSourceBytes;
constexpr std::size_t kHeapBytes = 32 << 20;
constexpr std::size_t kStagingBytes = 256 << 10;
constexpr std::uint8_t kPoison = 0xa5;
constexpr std::uint32_t kDoneWord = kWords - 1;

[[noreturn]] void fail(const std::string &what) { throw std::runtime_error(what); }

void sendAll(int fd, const void *data, std::size_t bytes) {
  const auto *at = static_cast<const char *>(data);
  while (bytes) {
    const ssize_t sent = ::send(fd, at, bytes, MSG_NOSIGNAL);
    if (sent <= 0)
      fail("rail: send failed");
    at += sent;
    bytes -= static_cast<std::size_t>(sent);
  }
}

void receiveAll(int fd, void *data, std::size_t bytes) {
  auto *at = static_cast<char *>(data);
  while (bytes) {
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, 10000) != 1)
      fail("rail: the other node sent nothing within 10 s");
    const ssize_t got = ::recv(fd, at, bytes, 0);
    if (got <= 0)
      fail("rail: the other node went away");
    at += got;
    bytes -= static_cast<std::size_t>(got);
  }
}

/// A two-node rail over a socket pair; `tamper` may change what arrives from the other node.
Rail railOver(int fd, int node, std::function<void(std::vector<std::byte> &)> tamper = nullptr) {
  Rail rail;
  rail.node = node;
  rail.nodes = 2;
  rail.allGather = [fd, node, tamper](std::span<const std::byte> mine) {
    const std::uint64_t size = mine.size();
    sendAll(fd, &size, sizeof size);
    sendAll(fd, mine.data(), mine.size());
    std::uint64_t theirSize = 0;
    receiveAll(fd, &theirSize, sizeof theirSize);
    std::vector<std::byte> theirs(theirSize);
    receiveAll(fd, theirs.data(), theirs.size());
    if (tamper)
      tamper(theirs);
    std::vector<std::vector<std::byte>> all(2);
    all[node].assign(mine.begin(), mine.end());
    all[1 - node] = std::move(theirs);
    return all;
  };
  return rail;
}

/// What one test runs on each node.
struct Setup {
  std::string provider = "tcp";
  ProxyOptions::Protocol protocol = ProxyOptions::Protocol::Direct;
  ProxyOptions options;
};

/// One node: a heap of host memory, a fabric transport and a proxy.
struct Node {
  Node(const Setup &setup, const Rail &rail)
      : memory(makeHostMemory()),
        heap(static_cast<std::uint8_t *>(std::aligned_alloc(4096, kHeapBytes))),
        transport(makeFabricTransport({{"provider", setup.provider}, {"address", "127.0.0.1"}})) {
    std::memset(heap, 0, kDestinationOffset);
    std::memset(heap + kDestinationOffset, kPoison, kHeapBytes - kDestinationOffset);
    ProxyOptions options = setup.options;
    options.protocol = setup.protocol;
    options.stagingBytes = kStagingBytes;
    proxy = std::make_unique<Proxy>(
        *transport, *memory,
        HeapBlock{reinterpret_cast<std::uint64_t>(heap), kHeapBytes, MemoryKind::Host}, rail,
        options);
  }
  ~Node() {
    proxy.reset();
    std::free(heap);
  }

  /// The count node `sender` has delivered on flag `word`.
  std::uint32_t flag(int sender, std::uint32_t word) const {
    return __atomic_load_n(reinterpret_cast<const std::uint32_t *>(heap) + sender * kWords + word,
                           __ATOMIC_ACQUIRE);
  }
  /// Heap offset of the word node `sender` counts `word` on here (net_flags[sender][word]).
  static std::uint64_t signalOffset(int sender, std::uint32_t word) {
    return (sender * kWords + word) * sizeof(std::uint32_t);
  }

  void push(const mk_command &command) {
    if (pushCommand(proxy->queue().hostView(), command, 20s) != PushResult::Pushed)
      fail("a push did not go through: " + proxy->error().value_or("the ring stayed full"));
  }

  std::unique_ptr<LocalMemory> memory;
  std::uint8_t *heap;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Proxy> proxy;
};

/// The bytes of node `node`'s source area and staging area: the same on both sides.
std::vector<std::uint8_t> sourceBytes(int node, std::size_t bytes, unsigned salt) {
  std::mt19937 random(1234u + 7u * node + salt);
  std::vector<std::uint8_t> data(bytes);
  for (auto &b : data)
    b = static_cast<std::uint8_t>(random());
  return data;
}

/// The puts node `sender` makes on `rail`, each signalling its own flag word: random shapes,
/// destinations apart from each other so that every byte has one writer.
std::vector<mk_command> putsOf(int sender, int count, std::size_t maxRowBytes,
                               std::uint32_t maxRows = 12, unsigned rail = 0) {
  std::mt19937 random(99u + sender + 101u * rail);
  auto uniform = [&](std::uint64_t low, std::uint64_t high) {
    return std::uniform_int_distribution<std::uint64_t>(low, high)(random);
  };
  std::vector<mk_command> puts;
  std::uint64_t destination = kDestinationOffset;
  for (int k = 0; k < count; ++k) {
    mk_command c{};
    c.op = MK_CMD_PUT_SIGNAL;
    c.view = uniform(0, 3) == 0 ? MK_VIEW_STAGING : MK_VIEW_HEAP;
    c.dst_node = static_cast<std::uint32_t>(1 - sender);
    c.rows = static_cast<std::uint32_t>(uniform(1, maxRows));
    c.row_bytes = static_cast<std::uint32_t>(uniform(1, maxRowBytes));
    c.src_pitch = static_cast<std::uint32_t>(c.row_bytes + uniform(0, 64));
    c.dst_pitch = static_cast<std::uint32_t>(c.row_bytes + uniform(0, 64));
    const std::uint64_t sourceExtent = (c.rows - 1ull) * c.src_pitch + c.row_bytes;
    const std::uint64_t area = c.view == MK_VIEW_STAGING ? kStagingBytes : kSourceBytes;
    c.src_offset =
        (c.view == MK_VIEW_STAGING ? 0 : kSourceOffset) + uniform(0, area - sourceExtent);
    c.dst_offset = destination + uniform(0, 32);
    destination = c.dst_offset + (c.rows - 1ull) * c.dst_pitch + c.row_bytes;
    c.signal_offset = Node::signalOffset(sender, static_cast<std::uint32_t>(k));
    puts.push_back(c);
  }
  if (destination > kHeapBytes)
    fail("the test's puts do not fit the heap");
  return puts;
}

/// Where put `c` reads its bytes on its sender, as an index into that sender's area copy.
const std::uint8_t *sourceOf(const mk_command &c, const std::vector<std::uint8_t> &heapSource,
                             const std::vector<std::uint8_t> &staging) {
  return c.view == MK_VIEW_STAGING ? staging.data() + c.src_offset
                                   : heapSource.data() + (c.src_offset - kSourceOffset);
}

/// Both nodes push `count` puts to each other and a final signal, then check every byte they
/// received: each put once its flag is up, everything once the final signal (which follows all
/// puts) is up; bytes no put wrote keep their poison. Each rail's bytes and puts are its own.
void exchange(const Setup &setup, int fd, int node, int count, std::size_t maxRowBytes,
              std::uint32_t maxRows = 12, unsigned rail = 0) {
  Node self(setup, railOver(fd, node));
  std::vector<std::uint8_t> mySource = sourceBytes(node, kSourceBytes, 2 * rail);
  std::vector<std::uint8_t> myStaging = sourceBytes(node, kStagingBytes, 2 * rail + 1);
  std::memcpy(self.heap + kSourceOffset, mySource.data(), kSourceBytes);
  std::memcpy(self.proxy->queue().hostView().staging, myStaging.data(), kStagingBytes);

  const int other = 1 - node;
  std::vector<mk_command> mine = putsOf(node, count, maxRowBytes, maxRows, rail);
  std::vector<mk_command> theirs = putsOf(other, count, maxRowBytes, maxRows, rail);
  std::vector<std::uint8_t> theirSource = sourceBytes(other, kSourceBytes, 2 * rail);
  std::vector<std::uint8_t> theirStaging = sourceBytes(other, kStagingBytes, 2 * rail + 1);

  // Back-pressure: with the proxy not yet running, a push beyond the ring's capacity waits.
  const std::uint32_t capacity = self.proxy->queue().hostView().capacity;
  std::size_t next = 0;
  for (; next < capacity && next < mine.size(); ++next)
    self.push(mine[next]);
  std::atomic<bool> pushed{false};
  std::thread extra([&] {
    self.push(mine[next]);
    pushed = true;
  });
  std::this_thread::sleep_for(100ms);
  const bool waited = !pushed;
  self.proxy->start();
  extra.join();
  if (!waited)
    fail("a push into a full ring did not wait");
  for (++next; next < mine.size(); ++next)
    self.push(mine[next]);
  mk_command done{};
  done.op = MK_CMD_SIGNAL;
  done.dst_node = static_cast<std::uint32_t>(other);
  done.signal_offset = Node::signalOffset(node, kDoneWord);
  self.push(done);
  // Once the tail has passed every command, the proxy reads none of their sources: as a launch's
  // next inputs would, new bytes there must not reach the other node.
  const mk_command_queue &queue = self.proxy->queue().hostView();
  const std::uint64_t pushedAll = mine.size() + 1;
  for (const auto until = Clock::now() + 30s;
       __atomic_load_n(queue.tail, __ATOMIC_ACQUIRE) < pushedAll;)
    if (Clock::now() > until)
      fail("the proxy was not done with its commands within 30 s: " +
           self.proxy->error().value_or("no proxy error"));
  std::memset(self.heap + kSourceOffset, ~kPoison, kSourceBytes);
  std::memset(queue.staging, ~kPoison, kStagingBytes);

  std::vector<bool> written(kHeapBytes, false);
  const auto deadline = Clock::now() + 30s;
  for (int k = 0; k < count; ++k) {
    while (self.flag(other, k) == 0) {
      if (Clock::now() > deadline)
        fail("put " + std::to_string(k) + " of node " + std::to_string(other) +
             " never signalled: " + self.proxy->error().value_or("no proxy error"));
      std::this_thread::yield();
    }
    const mk_command &c = theirs[k];
    const std::uint8_t *expected = sourceOf(c, theirSource, theirStaging);
    for (std::uint32_t row = 0; row < c.rows; ++row) {
      const std::uint8_t *got = self.heap + c.dst_offset + std::uint64_t(row) * c.dst_pitch;
      if (std::memcmp(got, expected + std::uint64_t(row) * c.src_pitch, c.row_bytes) != 0)
        fail("put " + std::to_string(k) + " row " + std::to_string(row) +
             " was signalled before its bytes were in place, or they are wrong");
      std::fill_n(written.begin() + static_cast<std::ptrdiff_t>(c.dst_offset + row * c.dst_pitch),
                  c.row_bytes, true);
    }
    if (self.flag(other, k) != 1)
      fail("put " + std::to_string(k) + "'s flag counts " + std::to_string(self.flag(other, k)));
  }
  while (self.flag(other, kDoneWord) == 0)
    if (Clock::now() > deadline)
      fail("the final signal never arrived");
  for (std::size_t at = kDestinationOffset; at < kHeapBytes; ++at)
    if (!written[at] && self.heap[at] != kPoison)
      fail("byte " + std::to_string(at) + " was written by no put, yet changed");
  if (!self.proxy->drain(20s))
    fail("the proxy did not drain: " + self.proxy->error().value_or("no error"));
  self.proxy->check();
  // Stay until the other node is done too: its last credits and completions need this proxy.
  char byte = 0;
  sendAll(fd, &byte, 1);
  receiveAll(fd, &byte, 1);
}

/// Runs `nodeBody(fd, node)` on node 0 here and node 1 in a child; returns the child's status.
int runTwoNodes(const std::function<void(int, int)> &nodeBody) {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  const pid_t child = spawn([&] {
    ::close(fds[0]);
    nodeBody(fds[1], 1);
  });
  ::close(fds[1]);
  try {
    nodeBody(fds[0], 0);
  } catch (...) {
    ::close(fds[0]);
    ::kill(child, SIGKILL);
    exitStatus(child);
    throw;
  }
  ::close(fds[0]);
  return exitStatus(child);
}

Setup setupFor(const std::string &provider, ProxyOptions::Protocol protocol) {
  Setup setup;
  setup.provider = provider;
  setup.protocol = protocol;
  setup.options.queueCapacity = 8; // hundreds of laps
  setup.options.slotBytes = 4096;  // staged: puts split into several slots
  setup.options.slotsPerPeer = 4;
  setup.options.maxInFlight = 16;
  setup.options.timeout = 10s;
  return setup;
}

} // namespace

TEST_CASE("proxy: every byte of puts in both directions, flags after data", "[proxy]") {
  for (const char *provider : {"tcp", "shm"})
    for (auto protocol : {ProxyOptions::Protocol::Direct, ProxyOptions::Protocol::Staged}) {
      const bool staged = protocol == ProxyOptions::Protocol::Staged;
      INFO(provider << (staged ? ", staged" : ", direct"));
      const Setup setup = setupFor(provider, protocol);
      // Rows up to 6000 bytes: a staged slot's payload (4032 bytes) holds several rows or part
      // of one.
      CHECK(runTwoNodes([&](int fd, int node) { exchange(setup, fd, node, 400, 6000); }) == 0);
    }
}

TEST_CASE("proxy: tile-sized puts through slots of the default size", "[proxy]") {
  for (auto protocol : {ProxyOptions::Protocol::Direct, ProxyOptions::Protocol::Staged}) {
    INFO((protocol == ProxyOptions::Protocol::Staged ? "staged" : "direct"));
    Setup setup;
    setup.protocol = protocol;
    setup.options.timeout = 10s;
    setup.options.queueCapacity = 64;
    // Up to 64 rows of up to 1 KiB, as a bf16 tile's are 128 rows of 512 bytes: puts of tens
    // of KiB, which libfabric's tcp provider moves with its rendezvous protocol, not eagerly.
    const auto start = Clock::now();
    CHECK(runTwoNodes([&](int fd, int node) { exchange(setup, fd, node, 300, 1024, 64); }) == 0);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    WARN("300 puts each way in " << seconds << " s");
    CHECK(seconds < 20);
  }
}

TEST_CASE("proxy: the two rails of a 2 x 2 job run side by side, each between its own pair",
          "[proxy]") {
  // GPU g of each node exchanges with GPU g of the other (rail g): four processes, two proxies
  // per node over tcp at once, each checking every byte against what its own rail's peer sent.
  for (auto protocol : {ProxyOptions::Protocol::Direct, ProxyOptions::Protocol::Staged}) {
    INFO((protocol == ProxyOptions::Protocol::Staged ? "staged" : "direct"));
    const Setup setup = setupFor("tcp", protocol);
    const auto rail = [&](unsigned g) {
      return runTwoNodes([&](int fd, int node) { exchange(setup, fd, node, 200, 6000, 12, g); });
    };
    const pid_t second = spawn([&] {
      if (int status = rail(1); status != 0)
        throw std::runtime_error("rail 1's node 1 exited with " + std::to_string(status));
    });
    CHECK(rail(0) == 0);
    CHECK(exitStatus(second) == 0);
  }
}

TEST_CASE("proxy: a node that dies mid-transfer is named within the timeout", "[proxy]") {
  for (auto protocol : {ProxyOptions::Protocol::Direct, ProxyOptions::Protocol::Staged}) {
    INFO((protocol == ProxyOptions::Protocol::Staged ? "staged" : "direct"));
    Setup setup = setupFor("tcp", protocol);
    setup.options.timeout = 2s;
    const int status = runTwoNodes([&](int fd, int node) {
      Node self(setup, railOver(fd, node));
      if (node == 1) {
        self.proxy->start();
        ::raise(SIGKILL); // dies with its connections open, mid-stream for node 0
      }
      self.proxy->start();
      const auto start = Clock::now();
      std::vector<mk_command> puts = putsOf(0, 300, 6000);
      for (std::size_t k = 0;; k = (k + 1) % puts.size()) {
        PushResult result = pushCommand(self.proxy->queue().hostView(), puts[k], 20s);
        if (result == PushResult::Aborted)
          break;
        REQUIRE(result == PushResult::Pushed);
        REQUIRE(Clock::now() - start < 15s);
      }
      const std::string error = self.proxy->error().value_or("");
      INFO(error);
      CHECK_THAT(error, Contains("node 1"));
      CHECK(self.proxy->queue().abortReason() == MK_QUEUE_FAILED);
      CHECK(Clock::now() - start < 15s);
      CHECK_THROWS_AS(self.proxy->check(), NetworkError);
    });
    CHECK(status == 128 + SIGKILL);
  }
}

TEST_CASE("proxy: a write with a bad remote key is an error naming the node", "[proxy]") {
  Setup setup = setupFor("tcp", ProxyOptions::Protocol::Direct);
  setup.options.timeout = 2s;
  const int status = runTwoNodes([&](int fd, int node) {
    // Node 0 gets node 1's heap key wrong (the first region of the endpoint it receives).
    std::function<void(std::vector<std::byte> &)> tamper = [](std::vector<std::byte> &blob) {
      constexpr std::size_t kHeapKey = 16; // EndpointBlob: staged, padding, heap {address, key}
      if (blob.empty())                    // the rail's barrier after connecting
        return;
      for (std::size_t i = 0; i < 8; ++i)
        blob[kHeapKey + i] ^= std::byte(0x5a);
    };
    Node self(setup, railOver(fd, node, node == 0 ? tamper : nullptr));
    self.proxy->start();
    if (node == 0) {
      mk_command put = putsOf(0, 1, 100)[0];
      put.view = MK_VIEW_HEAP;
      put.src_offset = kSourceOffset;
      self.push(put);
      const auto start = Clock::now();
      while (!self.proxy->error() && Clock::now() - start < 10s)
        std::this_thread::sleep_for(1ms);
      const std::string error = self.proxy->error().value_or("no error");
      INFO(error);
      CHECK_THAT(error, Contains("node 1"));
      CHECK(self.proxy->queue().abortReason() == MK_QUEUE_FAILED);
    }
    char byte = 0; // node 1 polls (and so makes progress) until node 0 has its answer
    sendAll(fd, &byte, 1);
    receiveAll(fd, &byte, 1);
  });
  CHECK(status == 0);
}

TEST_CASE("proxy: bad commands stop it with a message and MK_QUEUE_BAD_COMMAND", "[proxy]") {
  struct Case {
    const char *what;
    std::function<void(mk_command &)> spoil;
    const char *expected;
  };
  const std::vector<Case> cases = {
      {"unknown op", [](mk_command &c) { c.op = 42; }, "unknown op"},
      {"to itself", [](mk_command &c) { c.dst_node = 0; }, "not another node"},
      {"past the heap", [](mk_command &c) { c.dst_offset = kHeapBytes - 8; }, "overruns the heap"},
      {"past the staging area",
       [](mk_command &c) {
         c.view = MK_VIEW_STAGING;
         c.src_offset = kStagingBytes;
       },
       "overruns the staging area"},
      {"misaligned signal", [](mk_command &c) { c.signal_offset = 2; }, "not a word"},
  };
  for (const Case &test : cases) {
    INFO(test.what);
    Setup setup = setupFor("tcp", ProxyOptions::Protocol::Direct);
    const int status = runTwoNodes([&](int fd, int node) {
      Node self(setup, railOver(fd, node));
      self.proxy->start();
      if (node == 0) {
        mk_command put = putsOf(0, 1, 100)[0];
        put.view = MK_VIEW_HEAP;
        put.src_offset = kSourceOffset;
        test.spoil(put);
        self.push(put);
        const auto start = Clock::now();
        while (!self.proxy->error() && Clock::now() - start < 10s)
          std::this_thread::sleep_for(1ms);
        CHECK_THAT(self.proxy->error().value_or("no error"), Contains(test.expected));
        CHECK(self.proxy->queue().abortReason() == MK_QUEUE_BAD_COMMAND);
      }
      char byte = 0;
      sendAll(fd, &byte, 1);
      receiveAll(fd, &byte, 1);
    });
    CHECK(status == 0);
  }
}

TEST_CASE("proxy: what its owner's watch throws stops it like a network error", "[proxy]") {
  const int status = runTwoNodes([&](int fd, int node) {
    Setup setup = setupFor("tcp", ProxyOptions::Protocol::Direct);
    if (node == 0)
      setup.options.watch = [] { throw NetworkError("runtime: a launch has not finished"); };
    Node self(setup, railOver(fd, node));
    self.proxy->start();
    if (node == 0) {
      const auto start = Clock::now();
      while (!self.proxy->error() && Clock::now() - start < 10s)
        std::this_thread::sleep_for(1ms);
      CHECK(self.proxy->error().value_or("no error") == "runtime: a launch has not finished");
      CHECK(self.proxy->queue().abortReason() == MK_QUEUE_FAILED);
      CHECK_THROWS_WITH(self.proxy->check(), "runtime: a launch has not finished");
    }
    char byte = 0;
    sendAll(fd, &byte, 1);
    receiveAll(fd, &byte, 1);
  });
  CHECK(status == 0);
}
