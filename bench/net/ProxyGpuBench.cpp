//===- ProxyGpuBench.cpp - the proxy fed by a kernel: enqueue -> post latency, commands/s ---===//
//
// A kernel pushes commands into the runtime's CommandQueue with mk::proxy_push; one Proxy
// thread takes them and posts them to a sink network, which takes every write at once and
// completes it at the next poll, so that what is measured is the queue and the proxy, not a
// wire. The sink notes when it was handed each put and counts them into host memory the kernel
// can read.
//
//   latency  put i is pushed once put i-1 has been posted (an empty ring, an idle proxy). Two
//            figures: enqueue -> post on the GPU's global timer, the post's host time mapped onto
//            it by a clock calibration (uncertainty: half the best probe round trip, printed);
//            and enqueue -> the kernel sees the post, on the GPU's clock alone (an upper bound,
//            no calibration: it adds one host -> GPU visibility delay).
//   rate     --ctas CTAs push --commands puts in all as fast as the ring takes them; commands
//            per second from the first post to the last, and writes per Transport::post call.
//
//   build/bench/net/mkc-proxy-gpu-bench [--samples N] [--commands N] [--ctas N] [--cpu C]
//
// Needs a GPU: without a driver it prints "SKIP: ..." and exits 0.
//
//===----------------------------------------------------------------------===//

#include "Options.h"
#include "TestKernels.h"

#include "mk/abi.h"
#include "mk/runtime/driver/CudaDriver.h"
#include "mk/runtime/net/Proxy.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace mkc;
using namespace mkc::net;
using Clock = std::chrono::steady_clock;

namespace {

#define CU(call) MK_CU_CHECK(cuda::Driver::get(), call)

constexpr std::size_t kPutBytes = 64;         // the kernels' puts (comm.cu, bench_put)
constexpr std::size_t kHeapBytes = 256 << 20; // room for 4M distinct puts

std::int64_t hostNanoseconds(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

/// Takes every write at once and completes it at the next poll. For each put (64 bytes from the
/// heap, the only device region) it notes the host time of the post, by put number, and counts
/// posts into `posted` (host memory the kernel polls).
class SinkTransport final : public Transport {
public:
  SinkTransport(std::size_t puts, std::uint32_t *posted) : postedAt_(puts), posted_(posted) {}

  std::string describe() const override { return "sink (every write completes at once)"; }
  Capabilities capabilities() const override {
    Capabilities caps;
    caps.deviceMemory = caps.orderedWrites = caps.immediateData = true;
    caps.maxWriteBytes = std::size_t(1) << 30;
    caps.maxInFlight = 1 << 16;
    return caps;
  }
  Region registerMemory(void *base, std::size_t bytes, MemoryKind kind) override {
    Region region{regions_++, {reinterpret_cast<std::uint64_t>(base), 0, bytes}};
    if (kind == MemoryKind::Device)
      heapRegion_ = region.id;
    return region;
  }
  std::vector<std::byte> address() override { return {}; }
  void connect(int, const std::vector<std::vector<std::byte>> &) override {}

  std::size_t post(std::span<const Write> writes) override {
    const std::int64_t now = hostNanoseconds(Clock::now());
    for (const Write &write : writes) {
      if (write.localRegion == heapRegion_ && write.rowBytes == kPutBytes) {
        const std::size_t put = write.localOffset / kPutBytes;
        if (put < postedAt_.size())
          postedAt_[put] = now;
        __atomic_store_n(posted_, __atomic_load_n(posted_, __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
      }
      done_.push_back({Event::Kind::Completed, write.context, write.peer, 0, {}});
    }
    return writes.size();
  }
  std::size_t poll(std::vector<Event> &events) override {
    const std::size_t count = done_.size();
    events.insert(events.end(), std::make_move_iterator(done_.begin()),
                  std::make_move_iterator(done_.end()));
    done_.clear();
    return count;
  }

  /// Host nanoseconds (steady clock) of put i's post.
  const std::vector<std::int64_t> &postedAt() const { return postedAt_; }

private:
  int regions_ = 0;
  int heapRegion_ = -1;
  std::vector<std::int64_t> postedAt_;
  std::uint32_t *posted_;
  std::vector<Event> done_;
};

class Module {
public:
  Module() {
    const nvrtc::Result result = test::compileKernels("comm.cu");
    if (!result.ok)
      throw std::runtime_error("NVRTC failed on comm.cu:\n" + result.log);
    CU(cuModuleLoadData(&module_, result.cubin.data()));
  }
  ~Module() { cuda::Driver::get().cuModuleUnload(module_); }
  template <typename... Args> void launch(const char *kernel, unsigned ctas, Args... args) const {
    CUfunction function;
    CU(cuModuleGetFunction(&function, module_, kernel));
    void *params[] = {static_cast<void *>(&args)...};
    CU(cuLaunchKernel(function, ctas, 1, 1, MK_TEAM_THREADS, 1, 1, 0, nullptr, params, nullptr));
  }

private:
  CUmodule module_ = nullptr;
};

/// The GPU clock minus the host's steady clock, in ns, and its uncertainty (half the round trip
/// of the best of `rounds` probes): the host raises `go`, the kernel stamps its clock and answers.
struct ClockOffset {
  std::int64_t offset = 0;
  std::int64_t uncertainty = std::numeric_limits<std::int64_t>::max();
};

ClockOffset calibrate(const Module &module, LocalMemory &memory, int rounds) {
  SharedMemory words = memory.allocateShared(2 * sizeof(std::uint32_t));
  SharedMemory stamps = memory.allocateShared(rounds * sizeof(std::uint64_t));
  auto *go = static_cast<std::uint32_t *>(words.host);
  module.launch("clock_probe", 1, words.device, words.device + sizeof(std::uint32_t), rounds,
                stamps.device);
  ClockOffset best;
  for (int i = 0; i < rounds; ++i) {
    const auto sent = Clock::now();
    __atomic_store_n(go, std::uint32_t(i + 1), __ATOMIC_RELEASE);
    while (__atomic_load_n(go + 1, __ATOMIC_ACQUIRE) != std::uint32_t(i + 1)) {
    }
    const auto answered = Clock::now();
    const auto gpu = static_cast<std::int64_t>(
        __atomic_load_n(static_cast<std::uint64_t *>(stamps.host) + i, __ATOMIC_ACQUIRE));
    const std::int64_t halfTrip = (hostNanoseconds(answered) - hostNanoseconds(sent)) / 2;
    if (halfTrip < best.uncertainty)
      best = {gpu - (hostNanoseconds(sent) + halfTrip), halfTrip};
  }
  CU(cuCtxSynchronize());
  return best;
}

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, std::size_t(p * values.size()))];
}

struct Settings {
  long samples = 20000;
  long commands = 2000000;
  long ctas = 16;
  int cpu = -1;
};

/// A proxy for node 0 of a two-node rail whose other node is the sink.
struct Bench {
  Bench(LocalMemory &memory, CUdeviceptr heap, std::size_t puts, const Settings &settings)
      : posted(memory.allocateShared(sizeof(std::uint32_t))),
        sink(puts, static_cast<std::uint32_t *>(posted.host)) {
    Rail rail;
    rail.nodes = 2;
    rail.allGather = [](std::span<const std::byte> blob) {
      return std::vector<std::vector<std::byte>>(2, {blob.begin(), blob.end()});
    };
    ProxyOptions options;
    if (settings.cpu >= 0)
      options.cpus = {settings.cpu};
    proxy.emplace(sink, memory, HeapBlock{heap, kHeapBytes, MemoryKind::Device}, rail, options);
    proxy->start();
  }
  SharedMemory posted;
  SinkTransport sink;
  std::optional<Proxy> proxy;
};

void run(const Settings &settings) {
  const cuda::Driver &cu = cuda::Driver::get();
  cuda::PrimaryContext context(cu);
  char name[256] = {};
  CU(cuDeviceGetName(name, sizeof name, context.device()));
  std::unique_ptr<LocalMemory> memory = makeCudaMemory(cu, context.context());
  CUdeviceptr heap = 0;
  CU(cuMemAlloc(&heap, kHeapBytes));
  const Module module;
  fmt::print("proxy fed by a kernel on {}; the network is a sink; proxy thread on {}\n", name,
             settings.cpu >= 0 ? fmt::format("CPU {}", settings.cpu) : "any CPU");

  const ClockOffset clock = calibrate(module, *memory, 2000);
  {
    Bench bench(*memory, heap, settings.samples, settings);
    SharedMemory stamps = memory->allocateShared(2 * settings.samples * sizeof(std::uint64_t));
    module.launch("proxy_enqueue_latency", 1, bench.proxy->queue().deviceView(),
                  bench.posted.device, int(settings.samples), stamps.device);
    CU(cuCtxSynchronize());
    bench.proxy->check();
    const auto *gpu = static_cast<const std::uint64_t *>(stamps.host);
    std::vector<double> toPost, toSeen;
    for (long i = 0; i < settings.samples; ++i) {
      const std::int64_t enqueued = static_cast<std::int64_t>(gpu[2 * i]);
      toPost.push_back((bench.sink.postedAt()[i] + clock.offset - enqueued) / 1e3);
      toSeen.push_back((static_cast<std::int64_t>(gpu[2 * i + 1]) - enqueued) / 1e3);
    }
    fmt::print("latency, {} puts one at a time (us):\n", settings.samples);
    fmt::print(
        "  enqueue -> post           p50 {:7.2f}  p99 {:7.2f}  (clock calibration +- {:.2f})\n",
        percentile(toPost, 0.5), percentile(toPost, 0.99), clock.uncertainty / 1e3);
    fmt::print("  enqueue -> post seen (GPU) p50 {:7.2f}  p99 {:7.2f}  (one clock, upper bound)\n",
               percentile(toSeen, 0.5), percentile(toSeen, 0.99));
  }
  {
    const long perCta = settings.commands / settings.ctas;
    const long total = perCta * settings.ctas;
    Bench bench(*memory, heap, total, settings);
    const ProxyStatistics before = bench.proxy->statistics();
    module.launch("proxy_enqueue_rate", unsigned(settings.ctas), bench.proxy->queue().deviceView(),
                  int(perCta));
    CU(cuCtxSynchronize());
    if (!bench.proxy->drain(std::chrono::seconds(30)))
      throw std::runtime_error("the proxy did not finish: " +
                               bench.proxy->error().value_or("timed out"));
    const ProxyStatistics after = bench.proxy->statistics();
    const auto [first, last] =
        std::minmax_element(bench.sink.postedAt().begin(), bench.sink.postedAt().end());
    const double seconds = (*last - *first) / 1e9;
    fmt::print("rate, {} puts from {} CTAs: {:.2f} M commands/s, {:.1f} writes per post\n", total,
               settings.ctas, total / seconds / 1e6,
               double(after.writes - before.writes) /
                   std::max<std::uint64_t>(after.posts - before.posts, 1));
  }
  CU(cuMemFree(heap));
}

} // namespace

int main(int argc, char **argv) {
  Settings settings;
  const bool understood =
      mkc::bench::parseOptions(argc, argv, [&](std::string_view option, long value) {
        if (option == "--samples" && value > 0)
          settings.samples = value;
        else if (option == "--commands" && value > 0 && value <= long(kHeapBytes / kPutBytes))
          settings.commands = value;
        else if (option == "--ctas" && value > 0)
          settings.ctas = value;
        else if (option == "--cpu" && value >= 0)
          settings.cpu = int(value);
        else
          return false;
        return true;
      });
  if (!understood) {
    fmt::print(stderr,
               "usage: mkc-proxy-gpu-bench [--samples N] [--commands N<={}] [--ctas N] "
               "[--cpu C]\n",
               kHeapBytes / kPutBytes);
    return 2;
  }
  const cuda::Driver &cu = cuda::Driver::get();
  if (!cu.available()) {
    fmt::print("SKIP: {}\n", cu.unavailableReason());
    return 0;
  }
  try {
    run(settings);
  } catch (const std::exception &error) {
    fmt::print(stderr, "mkc-proxy-gpu-bench: {}\n", error.what());
    return 1;
  }
  return 0;
}
