//===- ProxyBench.cpp - the proxy's command rate and intake latency, without a GPU ---===//
//
// Two forked processes act as two nodes (their rail meets through the runtime's TcpStore on
// 127.0.0.1); in each, a host thread plays the kernels, pushing commands into the real ring with
// mk/queue.h's protocol. For each provider and protocol:
//
//   rate     node 0 pushes --commands put-with-signal commands of --bytes each (0: signals) as
//            fast as the ring takes them; the time runs until node 1 has counted every arrival.
//            Commands per second of the one proxy thread, and how many writes each post carried.
//   latency  node 0 pushes one command at a time into an empty ring and spins until the proxy
//            has taken it (its tail passes the ticket): enqueue -> consumed, p50 and p99, on the
//            host clock. On a GPU the enqueue is a kernel's; that needs the GPU machine.
//
//   build/bench/net/mkc-proxy-bench [--commands N] [--bytes B] [--samples N]
//
//===----------------------------------------------------------------------===//

#include "Options.h"

#include "mk/runtime/bootstrap/Bootstrap.h"
#include "mk/runtime/net/Proxy.h"

#include <fmt/format.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace mkc;
using namespace mkc::net;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kHeapBytes = 64 << 20;
constexpr std::uint64_t kDataOffset = 1 << 20; // flags [2][1024] before it
constexpr std::uint64_t kSignalWord = 0;

struct Settings {
  long commands = 200000;
  long bytes = 64;
  long samples = 20000;
};

/// A port nobody listens on now, for the rendezvous.
std::uint16_t freePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<sockaddr *>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&address), &length) != 0)
    throw std::runtime_error("no free port on 127.0.0.1");
  ::close(fd);
  return ntohs(address.sin_port);
}

struct Result {
  double seconds = 0;
  ProxyStatistics statistics;
  double p50 = 0, p99 = 0; // microseconds
};

/// One node's part; node 0 returns what it measured.
Result runNode(int node, const Rendezvous &rendezvous, const std::string &provider,
               ProxyOptions::Protocol protocol, const Settings &settings) {
  TcpStore store(node, 2, rendezvous);
  Rail rail;
  rail.node = node;
  rail.nodes = 2;
  rail.allGather = [&store](std::span<const std::byte> blob) { return store.allGather(blob); };
  std::unique_ptr<LocalMemory> memory = makeHostMemory();
  std::vector<std::uint8_t> heap(kHeapBytes);
  std::unique_ptr<Transport> transport =
      makeFabricTransport({{"provider", provider}, {"address", "127.0.0.1"}});
  ProxyOptions options;
  options.protocol = protocol;
  Proxy proxy(*transport, *memory,
              HeapBlock{reinterpret_cast<std::uint64_t>(heap.data()), kHeapBytes, MemoryKind::Host},
              rail, options);
  proxy.start();
  const auto *flag = reinterpret_cast<const std::uint32_t *>(heap.data()) + 1024 * (1 - node);
  auto counted = [&] { return __atomic_load_n(flag + kSignalWord, __ATOMIC_ACQUIRE); };

  mk_command put{};
  put.op = settings.bytes ? MK_CMD_PUT_SIGNAL : MK_CMD_SIGNAL;
  put.dst_node = static_cast<std::uint32_t>(1 - node);
  put.rows = 1;
  put.row_bytes = static_cast<std::uint32_t>(settings.bytes);
  put.signal_offset = (std::uint64_t(node) * 1024 + kSignalWord) * sizeof(std::uint32_t);
  const mk_command_queue &queue = proxy.queue().hostView();
  auto push = [&](long i) {
    const std::uint64_t places = (kHeapBytes - kDataOffset) / std::max<long>(settings.bytes, 1);
    put.src_offset = put.dst_offset = kDataOffset + std::uint64_t(i) % places * settings.bytes;
    if (pushCommand(queue, put, std::chrono::seconds(60)) != PushResult::Pushed)
      throw std::runtime_error("push failed: " + proxy.error().value_or("ring stayed full"));
  };

  Result result;
  store.barrier();
  if (node == 0) {
    const auto start = Clock::now();
    for (long i = 0; i < settings.commands; ++i)
      push(i);
    store.barrier(); // node 1 has counted every arrival
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    result.statistics = proxy.statistics();
    std::vector<double> latencies;
    for (long i = 0; i < settings.samples; ++i) {
      const std::uint64_t ticket =
          __atomic_load_n(&queue.head[MK_QUEUE_NEXT_TICKET], __ATOMIC_ACQUIRE);
      const auto pushed = Clock::now();
      push(i);
      while (__atomic_load_n(queue.tail, __ATOMIC_ACQUIRE) <= ticket)
        std::this_thread::yield();
      latencies.push_back(std::chrono::duration<double, std::micro>(Clock::now() - pushed).count());
    }
    std::sort(latencies.begin(), latencies.end());
    result.p50 = latencies[latencies.size() / 2];
    result.p99 = latencies[latencies.size() * 99 / 100];
    store.barrier();
  } else {
    // Sleeping, not spinning: on a small machine the proxies need the cores.
    while (counted() < static_cast<std::uint32_t>(settings.commands)) {
      proxy.check();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    store.barrier();
    while (counted() < static_cast<std::uint32_t>(settings.commands + settings.samples)) {
      proxy.check();
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    store.barrier();
  }
  proxy.check();
  return result;
}

} // namespace

int main(int argc, char **argv) {
  Settings settings;
  const bool understood =
      mkc::bench::parseOptions(argc, argv, [&](std::string_view option, long value) {
        if (option == "--commands" && value > 0)
          settings.commands = value;
        else if (option == "--bytes" && value >= 0)
          settings.bytes = value;
        else if (option == "--samples" && value > 0)
          settings.samples = value;
        else
          return false;
        return true;
      });
  if (!understood) {
    fmt::print(stderr, "usage: mkc-proxy-bench [--commands N] [--bytes B] [--samples N]\n");
    return 2;
  }
  fmt::print("proxy over loopback, host producer: {} commands of {} bytes, {} latency samples\n",
             settings.commands, settings.bytes, settings.samples);
  fmt::print("{:<6} {:<8} {:>12} {:>12} {:>12} {:>10} {:>10}\n", "", "", "commands/s",
             "writes/post", "MB/s", "p50 us", "p99 us");
  for (const char *provider : {"tcp", "shm"})
    for (auto protocol : {ProxyOptions::Protocol::Direct, ProxyOptions::Protocol::Staged}) {
      Rendezvous rendezvous;
      rendezvous.address = "127.0.0.1";
      rendezvous.port = freePort();
      rendezvous.jobToken = fmt::format("proxy-bench-{}", ::getpid());
      std::fflush(nullptr);
      const pid_t child = ::fork();
      if (child == 0) {
        int status = 0;
        try {
          runNode(1, rendezvous, provider, protocol, settings);
        } catch (const std::exception &error) {
          fmt::print(stderr, "node 1: {}\n", error.what());
          status = 1;
        }
        std::fflush(nullptr);
        ::_exit(status);
      }
      try {
        const Result r = runNode(0, rendezvous, provider, protocol, settings);
        const bool staged = protocol == ProxyOptions::Protocol::Staged;
        fmt::print("{:<6} {:<8} {:>12.0f} {:>12.2f} {:>12.1f} {:>10.2f} {:>10.2f}\n", provider,
                   staged ? "staged" : "direct", settings.commands / r.seconds,
                   double(r.statistics.writes) / std::max<std::uint64_t>(r.statistics.posts, 1),
                   settings.commands * double(settings.bytes) / r.seconds / 1e6, r.p50, r.p99);
      } catch (const std::exception &error) {
        fmt::print(stderr, "node 0 ({}): {}\n", provider, error.what());
        ::kill(child, SIGKILL);
      }
      int status = 0;
      ::waitpid(child, &status, 0);
    }
  return 0;
}
