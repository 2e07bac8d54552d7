//===- Proxy.cpp - the host thread that carries kernels' commands over the network ---===//
//
// The protocols are described in mk/runtime/net/Proxy.h; the engine that carries them out, on
// the proxy's thread alone, is in net/proxy/. Here: the choice of protocol, the thread, and what
// the rest of the process sees of it through atomics (statistics, idle, stop) and the error slot.
//
//===----------------------------------------------------------------------===//

#include "mk/runtime/net/Proxy.h"

#include "mk/runtime/support/Log.h"
#include "net/proxy/Engine.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstring>

namespace mkc::net {

namespace {

using Clock = std::chrono::steady_clock;

void pinThread(const std::vector<int> &cpus) {
  if (cpus.empty())
    return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus)
    CPU_SET(cpu, &set);
  if (int error = pthread_setaffinity_np(pthread_self(), sizeof set, &set))
    log::warning("proxy: cannot pin to CPUs {}: {}", fmt::join(cpus, ","), std::strerror(error));
}

} // namespace

//===----------------------------------------------------------------------===//
// Proxy
//===----------------------------------------------------------------------===//

Proxy::Proxy(Transport &transport, LocalMemory &memory, const HeapBlock &heap, const Rail &rail,
             const ProxyOptions &options)
    : transport_(transport), memory_(memory), options_(options) {
  if (rail.nodes < 1 || rail.node < 0 || rail.node >= rail.nodes)
    throw NetworkError(
        fmt::format("proxy: node {} of {} is not a place on a rail", rail.node, rail.nodes));
  checkSlotOptions(rail, options);
  const Capabilities caps = transport.capabilities();
  const bool canRegisterHeap = heap.kind == MemoryKind::Host || caps.deviceMemory;
  switch (options.protocol) {
  case ProxyOptions::Protocol::Automatic:
    staged_ = !canRegisterHeap;
    break;
  case ProxyOptions::Protocol::Direct:
    if (!canRegisterHeap)
      throw NetworkError(fmt::format("proxy: {} cannot register GPU memory, which the direct "
                                     "protocol needs",
                                     transport.describe()));
    staged_ = false;
    break;
  case ProxyOptions::Protocol::Staged:
    staged_ = true;
    break;
  }
  if (staged_ && !caps.immediateData)
    throw NetworkError(fmt::format("proxy: {} has no immediate data, which the staged protocol "
                                   "needs",
                                   transport.describe()));
  options_.maxInFlight = std::max<std::uint32_t>(
      1, std::min<std::uint64_t>(options.maxInFlight,
                                 caps.maxInFlight ? caps.maxInFlight : options.maxInFlight));
  queue_ = std::make_unique<CommandQueue>(memory, options.queueCapacity, options.stagingBytes,
                                          heap.base);
  engine_ = staged_ ? makeStagedEngine(transport, memory, *queue_, heap, rail, options_)
                    : makeDirectEngine(transport, memory, *queue_, heap, rail, options_);
  log::info("proxy: node {} of {}: {}", rail.node, rail.nodes, describe());
}

Proxy::~Proxy() { stop(); }

std::string Proxy::describe() const {
  return fmt::format("{}, {} protocol, {} commands in the queue, {} writes in flight at most",
                     transport_.describe(), staged_ ? "staged" : "direct", options_.queueCapacity,
                     options_.maxInFlight);
}

void Proxy::start() {
  if (!thread_.joinable())
    thread_ = std::thread([this] { run(); });
}

void Proxy::stop() {
  if (thread_.joinable()) {
    stopping_ = true;
    thread_.join();
    const ProxyStatistics done = statistics();
    log::info("proxy: stopped after {} commands, {} writes in {} posts, {:.1f} MiB of payload",
              done.commands, done.writes, done.posts, done.bytes / 1048576.0);
  }
  if (queue_)
    queue_->abort(MK_QUEUE_STOPPED);
}

void Proxy::run() {
  pinThread(options_.cpus);
  std::uint64_t rounds = 0;
  try {
    memory_.bindToThisThread();
    while (!stopping_.load(std::memory_order_relaxed)) {
      const bool progress = engine_->step();
      idle_.store(!progress && engine_->idle(), std::memory_order_release);
      // Deadlines are checked every few thousand rounds: a scan of the writes in flight.
      if (++rounds % 4096 == 0) {
        engine_->checkDeadlines();
        if (options_.watch)
          options_.watch();
      }
    }
  } catch (const std::exception &failure) {
    // The queue stops first: whoever sees the error must also see the GPU told.
    queue_->abort(MK_QUEUE_FAILED);
    {
      std::lock_guard lock(errorMutex_);
      error_ = failure.what();
    }
    log::error("{}", failure.what());
  }
  idle_.store(true, std::memory_order_release);
}

std::optional<std::string> Proxy::error() const {
  std::lock_guard lock(errorMutex_);
  return error_;
}

void Proxy::check() const {
  if (std::optional<std::string> message = error())
    throw NetworkError(*message);
}

bool Proxy::drain(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const mk_command_queue &host = queue_->hostView();
  while (Clock::now() < deadline) {
    if (error())
      return false;
    const std::uint64_t published =
        host.head ? __atomic_load_n(&host.head[MK_QUEUE_NEXT_TICKET], __ATOMIC_ACQUIRE) : 0;
    if (__atomic_load_n(host.tail, __ATOMIC_ACQUIRE) >= published &&
        idle_.load(std::memory_order_acquire))
      return true;
    std::this_thread::yield();
  }
  return false;
}

ProxyStatistics Proxy::statistics() const {
  return {engine_->commands.load(), engine_->writes.load(), engine_->posts.load(),
          engine_->bytes.load()};
}

} // namespace mkc::net
