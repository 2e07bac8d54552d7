//===- runtime/Rail.cpp - jobs across nodes: the rail, the proxy and the launch watchdog ---===//
//
// With more than one node, each rank drives its rail (the ranks of its local rank, one per node)
// through a transport (MKC_NET) and a proxy thread. Launches across nodes are counted as they
// queue: their number is bounded, and the proxy's thread raises an error when the oldest has not
// finished within MKC_NET_TIMEOUT with no transfer failing.
//
//===----------------------------------------------------------------------===//

#include "runtime/RuntimeState.h"

#include "mk/Support/ByteCodec.h"

#include <fmt/format.h>

#include <thread>

namespace mkc {

void Runtime::State::connectRail(const RuntimeOptions &options) {
  proxyMemory = net::makeCudaMemory(driver, context.context());
  queuedLaunches.emplace(driver);
  net::TransportConfig config(options.networkConfig.begin(), options.networkConfig.end());
  config["nodes"] = std::to_string(group.nodeCount());
  net::GpuPlace gpu;
  gpu.driver = &driver;
  gpu.context = context.context();
  gpu.device = context.device();
  gpu.token = fmt::format("{}/rail{}", group.launch().rendezvous.jobToken, group.localRank());
  gpu.timeout = group.launch().rendezvous.timeout;
  transport = net::makeTransport(options.network, config, &gpu);
  net::Rail rail;
  rail.node = group.nodeIndex();
  rail.nodes = group.nodeCount();
  // The store gathers from every rank; the rail is the ranks of this local rank, by node.
  rail.allGather = [this](std::span<const std::byte> blob) {
    const std::vector<std::byte> tagged = ByteWriter()
                                              .put<std::int32_t>(group.nodeIndex())
                                              .put<std::int32_t>(group.localRank())
                                              .bytes(blob)
                                              .take();
    std::vector<std::vector<std::byte>> rail(group.nodeCount());
    for (const std::vector<std::byte> &theirs : group.store().allGather(tagged)) {
      ByteReader<RuntimeError> reader(theirs, "a rank's rail blob");
      const auto node = reader.get<std::int32_t>();
      const auto localRank = reader.get<std::int32_t>();
      const std::span<const std::byte> rest = reader.rest();
      if (localRank == group.localRank())
        rail.at(node).assign(rest.begin(), rest.end());
    }
    return rail;
  };
  const auto [base, bytes] = heap->localBlock();
  net::ProxyOptions proxyOptions;
  proxyOptions.timeout = launchTimeout = options.networkTimeout;
  proxyOptions.cpus = cpusNear(busId);
  proxyOptions.watch = [this] { watchLaunches(); };
  proxy = std::make_unique<net::Proxy>(*transport, *proxyMemory,
                                       net::HeapBlock{base, bytes, net::MemoryKind::Device}, rail,
                                       proxyOptions);
  proxy->start();
}

void Runtime::State::awaitLaunchRoom() {
  std::unique_lock lock(queuedMutex);
  for (retireFinishedLaunches(); queuedLaunches->size() >= kMaxQueuedLaunches;
       retireFinishedLaunches()) {
    proxy->check(); // a failed network stops the kernels' waits; say why rather than wait
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    lock.lock();
  }
}

void Runtime::State::retireFinishedLaunches() {
  if (queuedLaunches->retire())
    oldestSince = std::chrono::steady_clock::now();
}

void Runtime::State::watchLaunches() {
  // Never wait for the launching thread here: it may be blocked in the driver, waiting for the
  // very kernels this thread's transfers finish.
  std::unique_lock lock(queuedMutex, std::try_to_lock);
  if (!lock)
    return;
  cuda::ContextScope scope(driver, context.context());
  // The launching thread may be capturing a graph meanwhile; the queue holds only launches made
  // before (a captured launch is not queued).
  cuda::RelaxedCaptureScope relaxed(driver);
  retireFinishedLaunches();
  const auto waited = std::chrono::steady_clock::now() - oldestSince;
  if (queuedLaunches->size() && waited > launchTimeout)
    throw net::NetworkError(fmt::format(
        "runtime: a launch across nodes has not finished within {} s with no transfer failing: "
        "another node's rank died or stopped launching (this is node {} of {}; MKC_NET_TIMEOUT "
        "sets the limit)",
        std::chrono::duration_cast<std::chrono::seconds>(launchTimeout).count(), group.nodeIndex(),
        group.nodeCount()));
}

void Runtime::State::recordLaunch(CUstream stream) {
  std::lock_guard lock(queuedMutex);
  if (!queuedLaunches->size())
    oldestSince = std::chrono::steady_clock::now();
  queuedLaunches->record(stream);
}

} // namespace mkc
