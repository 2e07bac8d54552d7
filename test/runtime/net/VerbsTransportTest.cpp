// The verbs transport. Without an RDMA device (this machine has none) it refuses to start, saying
// so. Its translation of writes into work requests is checked without one: rows, splits at the
// message size, gathers, the immediate in network byte order on the last request only, which
// requests are signaled, and writes outside their regions. With a device (a cluster node), two
// endpoints on it write to each other and to themselves, and a bad remote key fails the write.

#include "mk/runtime/net/Transport.h"
#include "mk/runtime/net/transport/verbs/VerbsWorkRequests.h"

#include <catch2/catch.hpp>

#include <infiniband/verbs.h>

#include <endian.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

using namespace mkc::net;
using namespace mkc::net::verbs;
using Catch::Matchers::Contains;

namespace {

constexpr std::uint64_t kTicket = 0x123456789;

const LocalRegion kLocal{0x10000, 0x1234, 1 << 20, false};
const RemoteRegion kRemote{0x7f0000000000, 0xabcd, 1 << 20};

WorkRequestLimits limits(std::uint32_t maxSge = 1, std::uint64_t maxMessageBytes = 1 << 30,
                         std::uint32_t signalInterval = 128, std::uint32_t maxInlineBytes = 0) {
  return {maxSge, maxMessageBytes, signalInterval, maxInlineBytes};
}

/// `rows` rows of `rowBytes` to node 1, with pitches apart from the row size.
Write rowsWrite(std::uint32_t rows, std::uint64_t rowBytes, std::uint64_t localPitch,
                std::uint64_t remotePitch) {
  Write write;
  write.localRegion = 0;
  write.localOffset = 32;
  write.peer = 1;
  write.remote = kRemote;
  write.remoteOffset = 512;
  write.rowBytes = rowBytes;
  write.rows = rows;
  write.localPitch = localPitch;
  write.remotePitch = remotePitch;
  write.context = 42;
  return write;
}

/// Checks what every chain must be: requests linked in order, entries within their requests.
void requireChained(WorkRequests &chain) {
  REQUIRE_FALSE(chain.requests.empty());
  REQUIRE(chain.first() == &chain.requests[0]);
  for (std::size_t index = 0; index + 1 < chain.requests.size(); ++index)
    REQUIRE(chain.requests[index].next == &chain.requests[index + 1]);
  REQUIRE(chain.requests.back().next == nullptr);
  int entries = 0;
  for (const ibv_send_wr &request : chain.requests) {
    if (request.num_sge > 0)
      REQUIRE(request.sg_list == &chain.entries[static_cast<std::size_t>(entries)]);
    entries += request.num_sge;
  }
  REQUIRE(entries == static_cast<int>(chain.entries.size()));
}

std::vector<RequestKind> kinds(const WorkRequests &chain) {
  std::vector<RequestKind> result;
  for (const ibv_send_wr &request : chain.requests) {
    REQUIRE(requestTag(request.wr_id) == kTicket);
    const RequestKind kind = requestKind(request.wr_id);
    REQUIRE(((request.send_flags & IBV_SEND_SIGNALED) != 0) == (kind != RequestKind::Unsignaled));
    result.push_back(kind);
  }
  return result;
}

std::uint64_t requestBytes(const ibv_send_wr &request) {
  std::uint64_t bytes = 0;
  for (int entry = 0; entry < request.num_sge; ++entry)
    bytes += request.sg_list[entry].length;
  return bytes;
}

bool hasRdmaDevice() {
  int count = 0;
  ibv_device **list = ibv_get_device_list(&count);
  if (!list)
    return false;
  ibv_free_device_list(list);
  return count > 0;
}

} // namespace

TEST_CASE("verbs: without an RDMA device, makeVerbsTransport says so") {
  if (hasRdmaDevice()) {
    WARN("this machine has an RDMA device; the endpoint tests below use it");
    return;
  }
  REQUIRE_THROWS_AS(makeVerbsTransport({{"nodes", "2"}}), NetworkError);
  REQUIRE_THROWS_WITH(makeVerbsTransport({{"nodes", "2"}}),
                      Contains("verbs: no RDMA device (ibv_get_device_list"));
  // The device is looked for first: its absence is what matters, whatever the configuration.
  REQUIRE_THROWS_WITH(makeVerbsTransport({}), Contains("no RDMA device"));
}

TEST_CASE("verbs: one row is one signaled RDMA write") {
  const Write write = rowsWrite(1, 4096, 0, 0);
  WorkRequests chain = translateWrite(write, kLocal, limits(), kTicket);
  requireChained(chain);
  REQUIRE(chain.requests.size() == 1);
  const ibv_send_wr &request = chain.requests[0];
  REQUIRE(request.opcode == IBV_WR_RDMA_WRITE);
  REQUIRE(request.send_flags == IBV_SEND_SIGNALED);
  REQUIRE(request.wr_id == requestId(kTicket, RequestKind::Final));
  REQUIRE(request.wr.rdma.remote_addr == kRemote.address + 512);
  REQUIRE(request.wr.rdma.rkey == kRemote.key);
  REQUIRE(request.num_sge == 1);
  REQUIRE(request.sg_list[0].addr == kLocal.address + 32);
  REQUIRE(request.sg_list[0].length == 4096);
  REQUIRE(request.sg_list[0].lkey == kLocal.lkey);
}

TEST_CASE("verbs: rows with pitches are a request each, chained, only the last signaled") {
  const Write write = rowsWrite(3, 64, 128, 256);
  WorkRequests chain = translateWrite(write, kLocal, limits(), kTicket);
  requireChained(chain);
  REQUIRE(chain.requests.size() == 3);
  for (std::size_t row = 0; row < 3; ++row) {
    const ibv_send_wr &request = chain.requests[row];
    REQUIRE(request.opcode == IBV_WR_RDMA_WRITE);
    REQUIRE(request.wr.rdma.remote_addr == kRemote.address + 512 + row * 256);
    REQUIRE(request.wr.rdma.rkey == kRemote.key);
    REQUIRE(request.num_sge == 1);
    REQUIRE(request.sg_list[0].addr == kLocal.address + 32 + row * 128);
    REQUIRE(request.sg_list[0].length == 64);
    REQUIRE(request.sg_list[0].lkey == kLocal.lkey);
  }
  REQUIRE(kinds(chain) ==
          std::vector{RequestKind::Unsignaled, RequestKind::Unsignaled, RequestKind::Final});
}

TEST_CASE("verbs: the immediate goes on the last request only, in network byte order") {
  Write write = rowsWrite(3, 64, 128, 256);
  write.immediate = 0x01020304;
  WorkRequests chain = translateWrite(write, kLocal, limits(), kTicket);
  requireChained(chain);
  REQUIRE(chain.requests.size() == 3);
  REQUIRE(chain.requests[0].opcode == IBV_WR_RDMA_WRITE);
  REQUIRE(chain.requests[1].opcode == IBV_WR_RDMA_WRITE);
  const ibv_send_wr &last = chain.requests[2];
  REQUIRE(last.opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
  REQUIRE(last.send_flags & IBV_SEND_SIGNALED);
  unsigned char bytes[4];
  std::memcpy(bytes, &last.imm_data, sizeof bytes);
  REQUIRE(bytes[0] == 0x01);
  REQUIRE(bytes[1] == 0x02);
  REQUIRE(bytes[2] == 0x03);
  REQUIRE(bytes[3] == 0x04);
  REQUIRE(be32toh(last.imm_data) == 0x01020304);
}

TEST_CASE("verbs: long chains are signaled every interval, the last request as the write's") {
  const Write write = rowsWrite(10, 64, 128, 256);
  WorkRequests chain = translateWrite(write, kLocal, limits(1, 1 << 30, 4), kTicket);
  requireChained(chain);
  using K = RequestKind;
  REQUIRE(kinds(chain) == std::vector{K::Unsignaled, K::Unsignaled, K::Unsignaled, K::Intermediate,
                                      K::Unsignaled, K::Unsignaled, K::Unsignaled, K::Intermediate,
                                      K::Unsignaled, K::Final});
  // A chain of exactly the interval needs no intermediate.
  WorkRequests four =
      translateWrite(rowsWrite(4, 64, 128, 256), kLocal, limits(1, 1 << 30, 4), kTicket);
  REQUIRE(kinds(four) == std::vector{K::Unsignaled, K::Unsignaled, K::Unsignaled, K::Final});
}

TEST_CASE("verbs: a row longer than the largest message is split") {
  const Write write = rowsWrite(2, 10, 100, 200);
  WorkRequests chain = translateWrite(write, kLocal, limits(1, 4), kTicket);
  requireChained(chain);
  REQUIRE(chain.requests.size() == 6);
  const std::uint64_t offsets[] = {0, 4, 8};
  const std::uint32_t lengths[] = {4, 4, 2};
  for (std::size_t row = 0; row < 2; ++row)
    for (std::size_t piece = 0; piece < 3; ++piece) {
      const ibv_send_wr &request = chain.requests[row * 3 + piece];
      REQUIRE(request.wr.rdma.remote_addr == kRemote.address + 512 + row * 200 + offsets[piece]);
      REQUIRE(request.num_sge == 1);
      REQUIRE(request.sg_list[0].addr == kLocal.address + 32 + row * 100 + offsets[piece]);
      REQUIRE(request.sg_list[0].length == lengths[piece]);
    }
  REQUIRE(kinds(chain).back() == RequestKind::Final);
}

TEST_CASE("verbs: rows contiguous at both ends share requests, up to the message size") {
  const Write write = rowsWrite(4, 64, 64, 64);
  WorkRequests whole = translateWrite(write, kLocal, limits(), kTicket);
  requireChained(whole);
  REQUIRE(whole.requests.size() == 1);
  REQUIRE(whole.requests[0].num_sge == 1);
  REQUIRE(whole.requests[0].sg_list[0].addr == kLocal.address + 32);
  REQUIRE(whole.requests[0].sg_list[0].length == 256);

  WorkRequests split = translateWrite(write, kLocal, limits(1, 100), kTicket);
  requireChained(split);
  REQUIRE(split.requests.size() == 3);
  const std::uint64_t starts[] = {0, 100, 200};
  const std::uint64_t sizes[] = {100, 100, 56};
  for (std::size_t index = 0; index < 3; ++index) {
    const ibv_send_wr &request = split.requests[index];
    REQUIRE(request.wr.rdma.remote_addr == kRemote.address + 512 + starts[index]);
    REQUIRE(request.num_sge == 1);
    REQUIRE(request.sg_list[0].addr == kLocal.address + 32 + starts[index]);
    REQUIRE(request.sg_list[0].length == sizes[index]);
  }
}

TEST_CASE("verbs: rows contiguous only at the peer are gathered, up to max_send_sge entries") {
  const Write write = rowsWrite(5, 64, 128, 64);
  WorkRequests chain = translateWrite(write, kLocal, limits(2), kTicket);
  requireChained(chain);
  REQUIRE(chain.requests.size() == 3);
  const int entries[] = {2, 2, 1};
  std::size_t row = 0;
  for (std::size_t index = 0; index < 3; ++index) {
    const ibv_send_wr &request = chain.requests[index];
    REQUIRE(request.wr.rdma.remote_addr == kRemote.address + 512 + row * 64);
    REQUIRE(request.num_sge == entries[index]);
    for (int entry = 0; entry < request.num_sge; ++entry, ++row) {
      REQUIRE(request.sg_list[entry].addr == kLocal.address + 32 + row * 128);
      REQUIRE(request.sg_list[entry].length == 64);
      REQUIRE(request.sg_list[entry].lkey == kLocal.lkey);
    }
    REQUIRE(requestBytes(request) == static_cast<std::uint64_t>(entries[index]) * 64);
  }
  REQUIRE(row == 5);
}

TEST_CASE("verbs: a write with nothing to carry is one empty request with its immediate") {
  Write write = rowsWrite(1, 0, 0, 0);
  write.immediate = 7;
  WorkRequests chain = translateWrite(write, kLocal, limits(), kTicket);
  requireChained(chain);
  REQUIRE(chain.requests.size() == 1);
  const ibv_send_wr &request = chain.requests[0];
  REQUIRE(request.num_sge == 0);
  REQUIRE(request.sg_list == nullptr);
  REQUIRE(request.opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
  REQUIRE(be32toh(request.imm_data) == 7);
  REQUIRE(request.wr_id == requestId(kTicket, RequestKind::Final));
  REQUIRE(request.send_flags == IBV_SEND_SIGNALED);
}

TEST_CASE("verbs: small writes from host memory go inline, never from GPU memory") {
  LocalRegion host = kLocal;
  host.hostMemory = true;
  const WorkRequestLimits inlineLimits = limits(1, 1 << 30, 128, 64);
  WorkRequests small = translateWrite(rowsWrite(1, 16, 0, 0), host, inlineLimits, kTicket);
  REQUIRE(small.requests[0].send_flags == (IBV_SEND_SIGNALED | IBV_SEND_INLINE));
  WorkRequests large = translateWrite(rowsWrite(1, 65, 0, 0), host, inlineLimits, kTicket);
  REQUIRE(large.requests[0].send_flags == IBV_SEND_SIGNALED);
  // The CPU copies inline bytes at post time, and cannot read GPU memory.
  WorkRequests device = translateWrite(rowsWrite(1, 16, 0, 0), kLocal, inlineLimits, kTicket);
  REQUIRE(device.requests[0].send_flags == IBV_SEND_SIGNALED);
}

TEST_CASE("verbs: writes outside their regions are refused, naming the write") {
  // Exactly to the end fits.
  Write fits = rowsWrite(2, 256, 512, 1024);
  fits.remoteOffset = kRemote.bytes - 1024 - 256;
  REQUIRE_NOTHROW(translateWrite(fits, kLocal, limits(), kTicket));

  Write remote = fits;
  remote.remoteOffset += 1;
  REQUIRE_THROWS_AS(translateWrite(remote, kLocal, limits(), kTicket), NetworkError);
  REQUIRE_THROWS_WITH(translateWrite(remote, kLocal, limits(), kTicket),
                      Contains("verbs: write to node 1 (context 42)") &&
                          Contains("end at byte 1048577 of the remote region, which has "
                                   "1048576 bytes"));

  Write local = rowsWrite(3, 64, 1 << 20, 64);
  REQUIRE_THROWS_WITH(translateWrite(local, kLocal, limits(), kTicket),
                      Contains("of the local region"));

  Write wrapping = rowsWrite(5, 64, 64, std::numeric_limits<std::uint64_t>::max() / 2);
  REQUIRE_THROWS_WITH(translateWrite(wrapping, kLocal, limits(), kTicket),
                      Contains("beyond 2^64 bytes into the remote region"));

  Write empty = rowsWrite(1, 0, 0, 0);
  empty.remoteOffset = kRemote.bytes + 1;
  REQUIRE_THROWS_WITH(translateWrite(empty, kLocal, limits(), kTicket), Contains("remote region"));

  Write wideKey = rowsWrite(1, 64, 0, 0);
  wideKey.remote.key = std::uint64_t{1} << 33;
  REQUIRE_THROWS_WITH(translateWrite(wideKey, kLocal, limits(), kTicket),
                      Contains("is not a verbs rkey"));
}

namespace {

using Clock = std::chrono::steady_clock;

/// Polls both transports until `done` holds, for at most ten seconds; the events are kept.
template <typename Done>
void pollUntil(Transport &a, std::vector<Event> &eventsA, Transport &b, std::vector<Event> &eventsB,
               Done done) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!done()) {
    REQUIRE(Clock::now() < deadline);
    a.poll(eventsA);
    b.poll(eventsB);
  }
}

bool has(const std::vector<Event> &events, Event::Kind kind, int peer, std::uint64_t context,
         std::uint32_t immediate = 0) {
  for (const Event &event : events)
    if (event.kind == kind && event.peer == peer &&
        (kind == Event::Kind::Arrived ? event.immediate == immediate : event.context == context))
      return true;
  return false;
}

/// Two endpoints of a two-node rail on this machine's first active device, connected.
struct Pair {
  std::unique_ptr<Transport> a = makeVerbsTransport({{"nodes", "2"}});
  std::unique_ptr<Transport> b = makeVerbsTransport({{"nodes", "2"}});

  void connect() {
    const std::vector<std::vector<std::byte>> addresses = {a->address(), b->address()};
    a->connect(0, addresses);
    b->connect(1, addresses);
  }
};

} // namespace

TEST_CASE("verbs: two endpoints on one device write to each other and to themselves") {
  if (!hasRdmaDevice()) {
    WARN("no RDMA device here: the endpoint test needs one");
    return;
  }
  constexpr std::size_t kBytes = 1 << 20;
  // Declared before the endpoints: registered memory outlives its registration.
  std::vector<std::uint8_t> source(kBytes), target(kBytes, 0), own(kBytes, 0);
  std::iota(source.begin(), source.end(), std::uint8_t{1});
  Pair pair;
  REQUIRE_THAT(pair.a->describe(), Contains("verbs ("));
  const Capabilities capabilities = pair.a->capabilities();
  REQUIRE(capabilities.orderedWrites);
  REQUIRE(capabilities.immediateData);
  REQUIRE(capabilities.maxInFlight >= 16);
  const Region from = pair.a->registerMemory(source.data(), kBytes, MemoryKind::Host);
  const Region ownTo = pair.a->registerMemory(own.data(), kBytes, MemoryKind::Host);
  const Region to = pair.b->registerMemory(target.data(), kBytes, MemoryKind::Host);
  pair.connect();

  // Rows of 3000 bytes 4096 apart, to node 1 with an immediate and to node 0 itself.
  Write rows;
  rows.localRegion = from.id;
  rows.localOffset = 100;
  rows.peer = 1;
  rows.remote = to.remote;
  rows.remoteOffset = 8;
  rows.rowBytes = 3000;
  rows.rows = 64;
  rows.localPitch = 4096;
  rows.remotePitch = 4096;
  rows.immediate = 0xabcdef01;
  rows.context = 99;
  Write self = rows;
  self.peer = 0;
  self.remote = ownTo.remote;
  self.immediate = 5;
  self.context = 100;
  const Write writes[] = {rows, self};
  REQUIRE(pair.a->post(writes) == 2);

  std::vector<Event> eventsA, eventsB;
  pollUntil(*pair.a, eventsA, *pair.b, eventsB, [&] {
    return has(eventsA, Event::Kind::Completed, 1, 99) &&
           has(eventsA, Event::Kind::Completed, 0, 100) &&
           has(eventsA, Event::Kind::Arrived, 0, 0, 5) &&
           has(eventsB, Event::Kind::Arrived, 0, 0, 0xabcdef01);
  });
  for (std::size_t row = 0; row < 64; ++row) {
    REQUIRE(std::memcmp(target.data() + 8 + row * 4096, source.data() + 100 + row * 4096, 3000) ==
            0);
    REQUIRE(std::memcmp(own.data() + 8 + row * 4096, source.data() + 100 + row * 4096, 3000) == 0);
  }
  REQUIRE(target[7] == 0);
  REQUIRE(target[8 + 3000] == 0);
}

TEST_CASE("verbs: a write with a bad remote key fails, naming the node") {
  if (!hasRdmaDevice()) {
    WARN("no RDMA device here: the endpoint test needs one");
    return;
  }
  constexpr std::size_t kBytes = 1 << 16;
  std::vector<std::uint8_t> source(kBytes, 1), target(kBytes, 0);
  Pair pair;
  const Region from = pair.a->registerMemory(source.data(), kBytes, MemoryKind::Host);
  const Region to = pair.b->registerMemory(target.data(), kBytes, MemoryKind::Host);
  pair.connect();

  Write write;
  write.localRegion = from.id;
  write.peer = 1;
  write.remote = to.remote;
  write.remote.key ^= 0xffff00;
  write.rowBytes = 4096;
  write.context = 7;
  REQUIRE(pair.a->post({&write, 1}) == 1);
  std::vector<Event> eventsA, eventsB;
  pollUntil(*pair.a, eventsA, *pair.b, eventsB,
            [&] { return has(eventsA, Event::Kind::Failed, 1, 7); });
  for (const Event &event : eventsA)
    if (event.kind == Event::Kind::Failed)
      REQUIRE_THAT(event.error, Contains("verbs: write to node 1 failed"));
  REQUIRE_THROWS_WITH(pair.a->post({&write, 1}), Contains("its queue pair failed"));
}
