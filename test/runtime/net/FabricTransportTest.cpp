// The libfabric transport between two forked processes over loopback, with the providers that
// work here (tcp and shm): writes of every size and shape land exactly where they should, before
// the arrival that announces them; a full endpoint takes fewer writes; a bad remote key and a dead
// peer are reported, or, where the provider cannot tell, never passed off as completed; providers
// without a device fail cleanly, and so do writes the transport can never carry out.

#include "mk/runtime/net/Transport.h"

#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace mkc::net;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kChildTimeout = 20s; // what a child waits for at most, on each side
constexpr std::byte kPoison{0xa5};  // destination bytes no write may touch

TransportConfig loopback(const std::string &provider) {
  return {{"provider", provider}, {"address", "127.0.0.1"}};
}

void check(bool condition, const std::string &what) {
  if (!condition)
    throw std::runtime_error(what);
}

/// Both processes busy-poll, on a machine with few cores that builds share. shm's processes take
/// each other's spinlocks, and a holder preempted by a spinner makes it crawl (tens of writes a
/// second): back off when there was nothing to do.
void idle() { std::this_thread::sleep_for(20us); }

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Runs `body` in a child process, which exits with what `body` returns, or 1, saying why, if it
/// throws.
pid_t spawn(const std::function<int()> &body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int status = 1;
    try {
      status = body();
    } catch (const std::exception &error) {
      std::fprintf(stderr, "child %d: %s\n", ::getpid(), error.what());
    }
    std::fflush(nullptr);
    ::_exit(status);
  }
  REQUIRE(pid > 0);
  return pid;
}

/// The exit status of child `pid` (128 plus the signal that ended it); a child still running
/// after `timeout` is killed and reported as -1.
int exitStatus(pid_t pid, std::chrono::seconds timeout = 40s) {
  const Clock::time_point deadline = Clock::now() + timeout;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(5ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// shm keeps an endpoint's memory in /dev/shm/PID:...; a killed process leaves it behind.
void removeShmRegions(std::initializer_list<pid_t> pids) {
  std::error_code error;
  for (const auto &entry : std::filesystem::directory_iterator("/dev/shm", error))
    for (const pid_t pid : pids)
      if (entry.path().filename().string().starts_with(std::to_string(pid) + ":"))
        std::filesystem::remove(entry.path(), error);
}

/// One end of the socketpair the two processes swap endpoints and regions over.
class Channel {
public:
  explicit Channel(int fd) : fd_(fd) {}

  void send(const void *data, std::size_t bytes) const {
    const auto length = static_cast<std::uint64_t>(bytes);
    check(::send(fd_, &length, sizeof length, MSG_NOSIGNAL) == sizeof length &&
              ::send(fd_, data, bytes, MSG_NOSIGNAL) == static_cast<ssize_t>(bytes),
          "send over the channel");
  }
  void send(const std::vector<std::byte> &blob) const { send(blob.data(), blob.size()); }
  void send(const std::string &text) const { send(text.data(), text.size()); }

  /// Whether a message waits (or the peer went away).
  bool readable() const {
    pollfd entry{fd_, POLLIN, 0};
    return ::poll(&entry, 1, 0) > 0;
  }

  std::vector<std::byte> receive() const {
    std::uint64_t length = 0;
    readExactly(&length, sizeof length);
    std::vector<std::byte> blob(length);
    readExactly(blob.data(), blob.size());
    return blob;
  }
  std::string receiveText() const {
    const std::vector<std::byte> blob = receive();
    return std::string(reinterpret_cast<const char *>(blob.data()), blob.size());
  }
  RemoteRegion receiveRegion() const {
    const std::vector<std::byte> blob = receive();
    check(blob.size() == sizeof(RemoteRegion), "a region over the channel");
    RemoteRegion region;
    std::memcpy(&region, blob.data(), sizeof region);
    return region;
  }

private:
  void readExactly(void *data, std::size_t bytes) const {
    const Clock::time_point deadline = Clock::now() + kChildTimeout;
    auto *cursor = static_cast<char *>(data);
    while (bytes > 0) {
      check(Clock::now() < deadline, "the peer sent nothing over the channel within 20 s");
      pollfd entry{fd_, POLLIN, 0};
      if (::poll(&entry, 1, 10) <= 0)
        continue;
      const ssize_t got = ::recv(fd_, cursor, bytes, 0);
      check(got > 0, "the peer closed the channel");
      cursor += got;
      bytes -= static_cast<std::size_t>(got);
    }
  }

  int fd_;
};

struct SocketPair {
  int fds[2] = {-1, -1};
  SocketPair() { REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0); }
  ~SocketPair() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
};

/// Node 0 and node 1 connected: each sends its address, then takes the other's.
void connectPair(Transport &transport, int self, const Channel &channel) {
  channel.send(transport.address());
  std::vector<std::vector<std::byte>> addresses(2);
  addresses[self] = transport.address();
  addresses[1 - self] = channel.receive();
  transport.connect(self, addresses);
}

/// Node 1's side of the tests without data checks: a destination of `bytes`, connected, its
/// region sent; then polls until node 0 says it is done. No write of node 0 may arrive.
int passiveReceiver(const std::string &provider, std::size_t bytes, const Channel &channel) {
  auto transport = makeFabricTransport(loopback(provider));
  std::vector<std::byte> destination(bytes);
  const Region region =
      transport->registerMemory(destination.data(), destination.size(), MemoryKind::Host);
  connectPair(*transport, 1, channel);
  channel.send(&region.remote, sizeof region.remote);
  std::vector<Event> events;
  const Clock::time_point deadline = Clock::now() + kChildTimeout;
  while (!channel.readable()) {
    check(Clock::now() < deadline, "node 1: node 0 was not done within 20 s");
    events.clear();
    transport->poll(events);
    check(events.empty(), "node 1: an event for a write that must not land");
    idle();
  }
  return 0;
}

/// Where the writes of a test go: write i reads `local*` of node 0's source region and lands at
/// `remote*` of node 1's destination region, announced by immediate data i.
struct Plan {
  std::vector<Write> writes;
  std::size_t sourceBytes = 0;
  std::size_t destinationBytes = 0;
};

/// The source region's contents: a function of the offset, so that both processes know them.
void fillSource(std::vector<std::byte> &source) {
  std::uint64_t state = 0;
  for (std::size_t i = 0; i < source.size(); i += 8) {
    // splitmix64
    std::uint64_t z = (state += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    z ^= z >> 31;
    std::memcpy(source.data() + i, &z, std::min<std::size_t>(8, source.size() - i));
  }
}

Write planned(std::size_t index) {
  Write write;
  write.localRegion = 0;
  write.peer = 1;
  write.immediate = static_cast<std::uint32_t>(index);
  write.context = 1000 + index;
  return write;
}

/// `count` writes: most one row of 1 B .. 1 MiB (sizes spread evenly on a log scale), every
/// fourth 2..16 rows of up to 64 KiB with pitches larger than the rows. Poisoned gaps separate
/// the destinations of writes and of rows.
Plan randomPlan(std::size_t count, std::uint32_t seed) {
  std::mt19937_64 random(seed);
  const auto logUniform = [&](double largest) {
    const double exponent = std::uniform_real_distribution<double>(0, std::log(largest))(random);
    return std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::exp(exponent)));
  };
  const auto between = [&](std::uint64_t low, std::uint64_t high) {
    return std::uniform_int_distribution<std::uint64_t>(low, high)(random);
  };
  Plan plan;
  for (std::size_t i = 0; i < count; ++i) {
    Write write = planned(i);
    if (i % 4 == 0) {
      write.rows = static_cast<std::uint32_t>(between(2, 16));
      write.rowBytes = logUniform(64 << 10);
      write.localPitch = write.rowBytes + between(0, 64);
      write.remotePitch = write.rowBytes + between(1, 64);
    } else {
      write.rowBytes = logUniform(1 << 20);
    }
    write.localOffset = plan.sourceBytes;
    write.remoteOffset = plan.destinationBytes + between(1, 64);
    plan.sourceBytes = write.localOffset + (write.rows - 1) * write.localPitch + write.rowBytes;
    plan.destinationBytes =
        write.remoteOffset + (write.rows - 1) * write.remotePitch + write.rowBytes;
    plan.writes.push_back(write);
  }
  plan.destinationBytes += 64;
  return plan;
}

/// `count` single-row writes of `bytes` each, back to back.
Plan uniformPlan(std::size_t count, std::uint64_t bytes) {
  Plan plan;
  for (std::size_t i = 0; i < count; ++i) {
    Write write = planned(i);
    write.rowBytes = bytes;
    write.localOffset = write.remoteOffset = i * bytes;
    plan.writes.push_back(write);
  }
  plan.sourceBytes = plan.destinationBytes = count * bytes;
  return plan;
}

/// Applies `copy(destinationOffset, sourceOffset, bytes)` to every row of `write`.
void forEachRow(const Write &write,
                const std::function<void(std::uint64_t, std::uint64_t, std::uint64_t)> &copy) {
  for (std::uint64_t row = 0; row < write.rows; ++row)
    copy(write.remoteOffset + row * write.remotePitch, write.localOffset + row * write.localPitch,
         write.rowBytes);
}

bool inPlace(const Write &write, const std::vector<std::byte> &source,
             const std::vector<std::byte> &destination) {
  bool same = true;
  forEachRow(write, [&](std::uint64_t to, std::uint64_t from, std::uint64_t bytes) {
    same = same && !std::memcmp(destination.data() + to, source.data() + from, bytes);
  });
  return same;
}

/// Node 0: posts every write of `plan` (the remote region from node 1), polling as it goes,
/// until all completed, never more than maxInFlight in flight; then tells node 1 so. Returns what
/// the first post that took any writes took.
std::size_t sendPlan(const std::string &provider, Plan plan, const Channel &channel) {
  auto transport = makeFabricTransport(loopback(provider));
  std::vector<std::byte> source(plan.sourceBytes);
  fillSource(source);
  const Region region = transport->registerMemory(source.data(), source.size(), MemoryKind::Host);
  check(region.id == 0, "the first region is region 0");
  connectPair(*transport, 0, channel);
  const RemoteRegion remote = channel.receiveRegion();
  for (Write &write : plan.writes)
    write.remote = remote;

  const std::size_t maxInFlight = transport->capabilities().maxInFlight;
  const std::size_t count = plan.writes.size();
  std::vector<bool> completed(count);
  std::size_t posted = 0, done = 0, firstTaken = 0;
  std::vector<Event> events;
  const Clock::time_point deadline = Clock::now() + kChildTimeout;
  while (done < count) {
    check(Clock::now() < deadline, "node 0: not done within 20 s: posted " +
                                       std::to_string(posted) + ", " + std::to_string(done) +
                                       " completed");
    std::size_t taken = 0;
    if (posted < count) {
      taken = transport->post(std::span(plan.writes).subspan(posted));
      if (firstTaken == 0)
        firstTaken = taken;
      posted += taken;
      check(posted - done <= maxInFlight, "no more than maxInFlight writes in flight");
    }
    events.clear();
    transport->poll(events);
    if (taken == 0 && events.empty())
      idle();
    for (const Event &event : events) {
      check(event.kind == Event::Kind::Completed,
            "node 0: an event other than Completed: " + event.error);
      check(event.context >= 1000 && event.context < 1000 + count &&
                !completed[event.context - 1000],
            "node 0: one completion per write, with its context");
      check(event.peer == 1, "node 0: completions name the peer written");
      completed[event.context - 1000] = true;
      ++done;
    }
  }
  channel.send(std::string("done"));
  return firstTaken;
}

/// Node 1: registers a poisoned destination for `plan`, checks at each arrival that its write is
/// in place, keeps the endpoint progressing until node 0 is done, then checks every byte: the
/// writes' and the poison around them.
int receivePlan(const std::string &provider, const Plan &plan, const Channel &channel) {
  auto transport = makeFabricTransport(loopback(provider));
  std::vector<std::byte> source(plan.sourceBytes);
  fillSource(source);
  std::vector<std::byte> destination(plan.destinationBytes, kPoison);
  const Region region =
      transport->registerMemory(destination.data(), destination.size(), MemoryKind::Host);
  connectPair(*transport, 1, channel);
  channel.send(&region.remote, sizeof region.remote);

  const std::size_t count = plan.writes.size();
  std::vector<bool> arrived(count);
  std::size_t arrivals = 0;
  std::vector<Event> events;
  const auto receiveEvents = [&] {
    events.clear();
    transport->poll(events);
    if (events.empty())
      idle();
    for (const Event &event : events) {
      check(event.kind == Event::Kind::Arrived, "node 1: an event other than Arrived");
      const std::uint32_t i = event.immediate;
      check(i < count && !arrived[i], "node 1: one arrival per write, with its immediate data");
      check(inPlace(plan.writes[i], source, destination),
            "node 1: write " + std::to_string(i) + " (" + std::to_string(plan.writes[i].rows) +
                " rows) is not in place when it arrives");
      arrived[i] = true;
      ++arrivals;
    }
  };
  const Clock::time_point deadline = Clock::now() + kChildTimeout;
  // Node 0's completions need this side's progress: keep polling until it is done.
  while (!channel.readable()) {
    check(Clock::now() < deadline, "node 1: node 0 was not done within 20 s");
    receiveEvents();
  }
  check(channel.receiveText() == "done", "node 0 says it is done");
  // Node 0 saw every write complete, so each has arrived; their events may still be queued.
  while (arrivals < count) {
    check(Clock::now() < deadline, "node 1: " + std::to_string(arrivals) + " of " +
                                       std::to_string(count) + " writes arrived within 20 s");
    receiveEvents();
  }

  std::vector<std::byte> expected(plan.destinationBytes, kPoison);
  for (const Write &write : plan.writes)
    forEachRow(write, [&](std::uint64_t to, std::uint64_t from, std::uint64_t bytes) {
      std::memcpy(expected.data() + to, source.data() + from, bytes);
    });
  const auto mismatch = std::mismatch(expected.begin(), expected.end(), destination.begin());
  check(mismatch.first == expected.end(),
        "node 1: byte " + std::to_string(mismatch.first - expected.begin()) +
            " of the destination differs (the poison is where no write goes)");
  return 0;
}

/// Runs `sender` (node 0) and `receiver` (node 1) in two processes; both must succeed.
void runPair(const std::function<int(const Channel &)> &sender,
             const std::function<int(const Channel &)> &receiver) {
  SocketPair pair;
  const pid_t node1 = spawn([&] { return receiver(Channel(pair.fds[1])); });
  const pid_t node0 = spawn([&] { return sender(Channel(pair.fds[0])); });
  CHECK(exitStatus(node0) == 0);
  CHECK(exitStatus(node1) == 0);
  removeShmRegions({node0, node1});
}

} // namespace

TEST_CASE("fabric: writes of every size and shape land in place before their arrival", "[fabric]") {
  const std::string provider = GENERATE("tcp", "shm");
  INFO("provider " << provider);
  const Plan plan = randomPlan(2000, 42);
  runPair(
      [&](const Channel &channel) {
        sendPlan(provider, plan, channel);
        return 0;
      },
      [&](const Channel &channel) { return receivePlan(provider, plan, channel); });
}

TEST_CASE("fabric: a full endpoint takes fewer writes, and the rest after polling", "[fabric]") {
  const std::string provider = GENERATE("tcp", "shm");
  INFO("provider " << provider);
  const std::size_t maxInFlight =
      makeFabricTransport(loopback(provider))->capabilities().maxInFlight;
  const Plan plan = uniformPlan(3 * maxInFlight, 256);
  runPair(
      [&](const Channel &channel) {
        const std::size_t firstTaken = sendPlan(provider, plan, channel);
        check(firstTaken > 0 && firstTaken <= maxInFlight,
              "the first post took " + std::to_string(firstTaken) + " of " +
                  std::to_string(plan.writes.size()) + " writes");
        return 0;
      },
      [&](const Channel &channel) { return receivePlan(provider, plan, channel); });
}

TEST_CASE("fabric: a write with a bad remote key fails, naming the peer, or never completes",
          "[fabric]") {
  // tcp fails the write within milliseconds. shm drops it at the target without an answer: it
  // never completes, and must not be reported as completed either.
  const std::string provider = GENERATE("tcp", "shm");
  INFO("provider " << provider);
  const auto sender = [&](const Channel &channel) {
    auto transport = makeFabricTransport(loopback(provider));
    std::vector<std::byte> source(4096);
    transport->registerMemory(source.data(), source.size(), MemoryKind::Host);
    connectPair(*transport, 0, channel);
    Write write = planned(7);
    write.remote = channel.receiveRegion();
    write.remote.key ^= 0x5a5a5a5a;
    write.rowBytes = 64;
    const Clock::time_point start = Clock::now();
    std::optional<std::string> failure;
    try {
      while (transport->post(std::span(&write, 1)) == 0) {
        check(Clock::now() - start < 10s, "the write was not taken within 10 s");
        idle();
      }
      std::vector<Event> events;
      while (!failure && Clock::now() - start < (provider == "tcp" ? 10s : 2s)) {
        events.clear();
        transport->poll(events);
        if (events.empty())
          idle();
        for (const Event &event : events) {
          check(event.kind == Event::Kind::Failed, "a write with a bad key completed");
          check(event.context == write.context && event.peer == 1,
                "the failure names the write and the peer");
          failure = event.error;
        }
      }
    } catch (const NetworkError &error) {
      failure = error.what();
    }
    if (failure) {
      std::fprintf(stderr, "%s: bad key reported after %.3f s: %s\n", provider.c_str(),
                   secondsSince(start), failure->c_str());
      check(failure->find("node 1") != std::string::npos, "the failure names node 1");
    } else {
      check(provider == "shm", provider + " never reported the bad key");
      std::fprintf(stderr, "%s: the bad key is not reported (the write never completes)\n",
                   provider.c_str());
    }
    channel.send(std::string("done"));
    return 0;
  };
  runPair(sender, [&](const Channel &channel) { return passiveReceiver(provider, 4096, channel); });
}

TEST_CASE("fabric: a peer killed mid-transfer fails the writes in flight, or they never complete",
          "[fabric]") {
  // tcp fails every write in flight once the connection drops. A dead shm peer never answers:
  // its writes never complete, and the provider refuses new ones. Worse, a peer killed while it
  // holds the spinlock of its shm region (it does while it copies data in) leaves every writer
  // spinning in fi_write forever: the sender is then killed after 6 s, with a warning.
  const std::string provider = GENERATE("tcp", "shm");
  INFO("provider " << provider);
  constexpr std::size_t kSlots = 32;
  constexpr std::uint64_t kWriteBytes = 1 << 20;
  SocketPair pair;
  const pid_t node1 = spawn([&] {
    const Channel channel(pair.fds[1]);
    auto transport = makeFabricTransport(loopback(provider));
    std::vector<std::byte> destination(kSlots * kWriteBytes);
    const Region region =
        transport->registerMemory(destination.data(), destination.size(), MemoryKind::Host);
    connectPair(*transport, 1, channel);
    channel.send(&region.remote, sizeof region.remote);
    // Progress until killed.
    std::vector<Event> events;
    for (const Clock::time_point deadline = Clock::now() + kChildTimeout;
         Clock::now() < deadline;) {
      events.clear();
      transport->poll(events);
      if (events.empty())
        idle();
    }
    return 1;
  });
  const pid_t node0 = spawn([&] {
    const Channel channel(pair.fds[0]);
    auto transport = makeFabricTransport(loopback(provider));
    std::vector<std::byte> source(kSlots * kWriteBytes);
    transport->registerMemory(source.data(), source.size(), MemoryKind::Host);
    connectPair(*transport, 0, channel);
    const RemoteRegion remote = channel.receiveRegion();
    std::vector<Write> writes(4096);
    for (std::size_t i = 0; i < writes.size(); ++i) {
      writes[i] = planned(i);
      writes[i].immediate.reset();
      writes[i].remote = remote;
      writes[i].rowBytes = kWriteBytes;
      writes[i].localOffset = writes[i].remoteOffset = (i % kSlots) * kWriteBytes;
    }
    std::size_t posted = 0, completed = 0;
    std::optional<Clock::time_point> killed;
    std::optional<std::string> failure;
    std::vector<Event> events;
    const Clock::time_point start = Clock::now();
    try {
      while (!failure && (!killed || Clock::now() - *killed < (provider == "tcp" ? 10s : 2s))) {
        check(Clock::now() - start < kChildTimeout, "node 1 was not killed within 20 s");
        std::size_t taken = 0;
        if (posted < writes.size())
          taken = transport->post(std::span(writes).subspan(posted));
        posted += taken;
        events.clear();
        transport->poll(events);
        if (taken == 0 && events.empty())
          idle();
        for (const Event &event : events) {
          if (event.kind == Event::Kind::Failed) {
            check(event.peer == 1, "the failure names the peer");
            failure = event.error;
            break;
          }
          ++completed;
        }
        // Once the stream runs, kill the peer.
        if (!killed && completed >= 50) {
          check(::kill(node1, SIGKILL) == 0, "kill node 1");
          killed = Clock::now();
        }
      }
    } catch (const NetworkError &error) {
      failure = error.what();
    }
    check(killed.has_value(), "node 1 was killed");
    if (failure) {
      std::fprintf(stderr, "%s: peer death reported after %.3f s: %s\n", provider.c_str(),
                   secondsSince(*killed), failure->c_str());
      check(failure->find("node 1") != std::string::npos, "the failure names node 1");
    } else {
      check(provider == "shm", provider + " never reported the dead peer");
      std::fprintf(stderr,
                   "%s: the dead peer is not reported (%zu writes taken, %zu completed, later "
                   "ones refused)\n",
                   provider.c_str(), posted, completed);
    }
    const Clock::time_point closing = Clock::now();
    transport.reset();
    check(Clock::now() - closing < 5s, "closing the endpoint took over 5 s");
    return 0;
  });
  const int node0Status = exitStatus(node0, provider == "shm" ? 6s : 40s);
  if (provider == "shm" && node0Status == -1)
    WARN("shm: the writer hung in fi_write on the dead peer's lock (libfabric 1.17)");
  else
    CHECK(node0Status == 0);
  CHECK(exitStatus(node1) == 128 + SIGKILL);
  removeShmRegions({node0, node1});
}

TEST_CASE("fabric: providers without a device fail cleanly", "[fabric]") {
  for (const std::string provider : {"verbs", "efa"}) {
    INFO("provider " << provider);
    REQUIRE_THROWS_MATCHES(
        makeFabricTransport({{"provider", provider}}), NetworkError,
        Catch::Matchers::Message("fabric (" + provider +
                                 "): the provider lists no device here (fi_getinfo: No data "
                                 "available)"));
  }
  REQUIRE_THROWS_WITH(makeFabricTransport({{"provider", "psm3"}}),
                      Contains("unknown provider \"psm3\""));
}

TEST_CASE("fabric: what tcp offers, and writes it can never carry out", "[fabric]") {
  auto transport = makeFabricTransport(loopback("tcp"));
  CHECK(transport->describe() == "fabric (tcp;ofi_rxm, delivery complete)");
  const Capabilities capabilities = transport->capabilities();
  CHECK_FALSE(capabilities.deviceMemory);
  CHECK_FALSE(capabilities.orderedWrites);
  CHECK(capabilities.immediateData);
  CHECK(capabilities.maxWriteBytes >= (1u << 30));
  CHECK(capabilities.maxInFlight > 0);

  std::vector<std::byte> memory(4096);
  REQUIRE_THROWS_WITH(transport->registerMemory(memory.data(), memory.size(), MemoryKind::Device),
                      Contains("fabric (tcp): this provider cannot register GPU memory"));
  const Region region = transport->registerMemory(memory.data(), memory.size(), MemoryKind::Host);

  Write write;
  write.localRegion = region.id;
  write.peer = 1;
  write.remote = region.remote;
  write.rowBytes = 64;
  REQUIRE_THROWS_WITH(transport->post(std::span(&write, 1)), Contains("not connected"));
  // Node 1 is this endpoint again: an address like any other, never written.
  transport->connect(0, {transport->address(), transport->address()});

  SECTION("a row beyond the local region") {
    write.localOffset = 4090;
    REQUIRE_THROWS_WITH(transport->post(std::span(&write, 1)),
                        Contains("write to node 1") && Contains("overrun local region 0"));
  }
  SECTION("rows beyond the remote region") {
    write.rows = 3;
    write.remotePitch = 2048;
    REQUIRE_THROWS_WITH(transport->post(std::span(&write, 1)),
                        Contains("write to node 1") && Contains("overrun the remote region"));
  }
  SECTION("a region never registered") {
    write.localRegion = 1;
    REQUIRE_THROWS_WITH(transport->post(std::span(&write, 1)), Contains("no local region 1"));
  }
  SECTION("a node that is not a peer") {
    write.peer = 0;
    REQUIRE_THROWS_WITH(transport->post(std::span(&write, 1)),
                        Contains("write to node 0: no such peer"));
  }
}
