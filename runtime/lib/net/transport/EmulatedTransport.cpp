//===- EmulatedTransport.cpp - a NIC model for nodes that share one host ---===//
//
// The ranks of a rail run on one host, each with its own GPU, and "send" by copying into each
// other's GPU memory: every registered GPU region is exported as a file descriptor, passed over
// NodeSockets and mapped by the other ranks (VMM), and a write is a batch of copy-engine copies on
// this transport's stream. What makes it a NIC is the model: a write leaves no earlier than the
// link is free and lands `bytes / bandwidth` later plus the latency; it is issued to the GPU only
// then, so the peer never sees data (or a flag) before a real NIC would have delivered it. With
// "reorder", each write lands after a random extra delay of up to twice the latency, so that
// writes pass each other as on an unordered fabric. The copy engines move data far faster than
// the modelled link, so the model, not the copies, sets the pace.
//
// Writes that are due are issued together, per poll: contiguous blocks in one cuMemcpyBatchAsync,
// strided ones in one cuMemcpy3DBatchAsync (a copy per block, not per row: a copy per row made
// 8192^3 take ~270 ms a launch), and small values from host memory (the proxy's flag counts) as
// stream memory operations, which cost no copy. Batches take "copy_streams" streams in turn, so
// that several copy engines work at once; a store of the batch's number into pinned memory after
// it tells the proxy's thread it finished without a driver call. Nothing orders the copies of a
// batch, or batches of different streams, so the transport promises no order (the proxy fences its
// flags).
//
//===----------------------------------------------------------------------===//

#include "mk/runtime/net/Transport.h"

#include "mk/runtime/memory/NodeSockets.h"
#include "mk/runtime/memory/VirtualMemory.h"
#include "mk/runtime/support/Log.h"

#include "mk/Support/BoundedNumber.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>

namespace mkc::net {

namespace {

using Clock = std::chrono::steady_clock;

/// Writes posted and not yet complete, at most.
constexpr std::size_t kMaxInFlight = 4096;

/// Remote keys of regions peers cannot write (host memory is not shared between ranks here).
constexpr std::uint64_t kHostRegionKey = ~std::uint64_t(0);

template <typename T> T load(const void *at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

double number(const TransportConfig &config, std::string_view key, double fallback) {
  auto found = config.find(key);
  if (found == config.end())
    return fallback;
  std::optional<double> value =
      parseBoundedReal(found->second, 0, std::numeric_limits<double>::max());
  if (!value)
    throw NetworkError(
        fmt::format("emulated: {}={} is not a non-negative number", key, found->second));
  return *value;
}

class EmulatedTransport final : public Transport {
public:
  EmulatedTransport(const TransportConfig &config, const GpuPlace &gpu)
      : gpu_(gpu), cu_(*gpu.driver), bytesPerSecond_(number(config, "bandwidth_gbps", 50) * 1e9),
        latency_(std::chrono::duration<double, std::micro>(number(config, "latency_us", 3))),
        reorder_(number(config, "reorder", 0) != 0) {
    if (bytesPerSecond_ <= 0)
      throw NetworkError("emulated: bandwidth_gbps must be positive");
    cuda::ContextScope scope(cu_, gpu_.context);
    const double streams = number(config, "copy_streams", 4);
    if (streams < 1 || streams > 64 || streams != std::floor(streams))
      throw NetworkError(
          fmt::format("emulated: copy_streams={} is not a count from 1 to 64", streams));
    while (lanes_.size() < streams) {
      Lane &lane = lanes_.emplace_back();
      MK_CU_CHECK(cu_, cuStreamCreate(&lane.stream, CU_STREAM_NON_BLOCKING));
      lane.done.emplace(cu_);
    }
  }

  ~EmulatedTransport() override {
    log::info("{}: {} writes issued in {} batches, {:.1f} ms in the driver issuing them",
              describe(), writesIssued_, batches_,
              std::chrono::duration<double, std::milli>(inDriver_).count());
    cuda::ContextScope scope(cu_, gpu_.context);
    for (Lane &lane : lanes_) {
      cu_.cuStreamSynchronize(lane.stream);
      lane.done.reset(); // its memory, while the context is current
      cu_.cuStreamDestroy(lane.stream);
    }
  }

  std::string describe() const override {
    return fmt::format("emulated NIC ({:g} GB/s, {:g} us{})", bytesPerSecond_ / 1e9,
                       latency_.count(), reorder_ ? ", reordering" : "");
  }

  Capabilities capabilities() const override {
    Capabilities caps;
    caps.deviceMemory = true;
    caps.orderedWrites = false; // the copies of a batch land in any order
    caps.immediateData = false;
    caps.maxWriteBytes = std::size_t(1) << 40;
    caps.maxInFlight = kMaxInFlight;
    return caps;
  }

  Region registerMemory(void *base, std::size_t bytes, MemoryKind kind) override {
    Region region;
    region.id = static_cast<int>(local_.size());
    LocalRegion local{reinterpret_cast<std::uint64_t>(base), bytes, kind, {}};
    region.remote.bytes = bytes;
    if (kind == MemoryKind::Device) {
      cuda::ContextScope scope(cu_, gpu_.context);
      local.exported = cuda::PhysicalMemory::mappedAt(cu_, local.base).exportFd();
      region.remote.key = static_cast<std::uint64_t>(deviceRegions_++);
    } else {
      region.remote.key = kHostRegionKey;
    }
    local_.push_back(std::move(local));
    return region;
  }

  std::vector<std::byte> address() override { return {}; }

  void connect(int self, const std::vector<std::vector<std::byte>> &addresses) override {
    self_ = self;
    const int nodes = static_cast<int>(addresses.size());
    cuda::ContextScope scope(cu_, gpu_.context);
    NodeSockets rail(self, nodes, gpu_.token, gpu_.timeout);
    peers_.resize(nodes);
    for (const LocalRegion &local : local_) {
      if (local.kind != MemoryKind::Device)
        continue;
      std::vector<PeerFd> fds = rail.exchangeFds(local.exported->get(), local.bytes);
      for (int node = 0; node < nodes; ++node) {
        if (node == self)
          continue;
        auto mapped = std::make_unique<PeerRegion>(cu_, fds[node]);
        const std::string what = fmt::format("emulated: cuMemSetAccess(node {}'s memory)", node);
        cuda::grantAccess(cu_, mapped->range.base(), fds[node].bytes, gpu_.device, what.c_str());
        peers_[node].push_back(std::move(mapped));
      }
    }
    rail.barrier();
  }

  std::size_t post(std::span<const Write> writes) override {
    std::size_t taken = 0;
    const auto now = Clock::now();
    for (const Write &write : writes) {
      if (pending_.size() + inFlight_ >= kMaxInFlight)
        break;
      check(write);
      const double bytes = double(write.rowBytes) * write.rows;
      const auto onWire = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(bytes / bytesPerSecond_));
      linkFree_ = std::max(linkFree_, now) + onWire;
      auto due = linkFree_ + std::chrono::duration_cast<Clock::duration>(latency_);
      if (reorder_)
        due += std::chrono::duration_cast<Clock::duration>(
            latency_ * std::uniform_real_distribution<double>(0, 2)(random_));
      pending_.emplace(due, write);
      ++taken;
    }
    return taken;
  }

  std::size_t poll(std::vector<Event> &events) override {
    const std::size_t before = events.size();
    issueDue();
    // A batch whose copies fail never completes: the proxy's timeout names the write.
    for (Lane &lane : lanes_) {
      const std::uint64_t done = lane.done->done();
      for (; !lane.issued.empty() && lane.issued.front().first <= done; lane.issued.pop_front()) {
        for (const auto &[context, peer] : lane.issued.front().second) {
          Event event;
          event.context = context;
          event.peer = peer;
          events.push_back(std::move(event));
        }
        inFlight_ -= lane.issued.front().second.size();
      }
    }
    return events.size() - before;
  }

private:
  struct LocalRegion {
    std::uint64_t base;
    std::size_t bytes;
    MemoryKind kind;
    std::optional<UniqueFd> exported; // Device: what the peers map
  };
  /// A peer's GPU region, mapped here.
  struct PeerRegion {
    PeerRegion(const cuda::Driver &cu, const PeerFd &fd)
        : memory(cu, fd.fd), range(cu, fd.bytes, 0), mapping(cu, range.base(), fd.bytes, memory),
          bytes(fd.bytes) {}
    cuda::PhysicalMemory memory;
    cuda::AddressRange range;
    cuda::Mapping mapping;
    std::size_t bytes;
  };
  using Batch = std::vector<std::pair<std::uint64_t, int>>; // the writes' contexts and peers

  void check(const Write &write) const {
    auto extent = [&](std::uint64_t pitch) {
      return write.rows ? (write.rows - 1ull) * pitch + write.rowBytes : 0;
    };
    if (write.localRegion < 0 || write.localRegion >= static_cast<int>(local_.size()) ||
        write.localOffset + extent(write.localPitch) > local_[write.localRegion].bytes)
      throw NetworkError(fmt::format("emulated: a write to node {} reads outside local region {}",
                                     write.peer, write.localRegion));
    if (write.peer < 0 || write.peer >= static_cast<int>(peers_.size()) || write.peer == self_)
      throw NetworkError(fmt::format("emulated: node {} is not a peer", write.peer));
    const auto &regions = peers_[write.peer];
    if (write.remote.key >= regions.size())
      throw NetworkError(fmt::format("emulated: a write to node {} has remote key {:#x}, which "
                                     "names none of its GPU regions",
                                     write.peer, write.remote.key));
    if (write.remoteOffset + extent(write.remotePitch) > regions[write.remote.key]->bytes)
      throw NetworkError(fmt::format("emulated: a write to node {} overruns its region {} ({} "
                                     "bytes)",
                                     write.peer, write.remote.key,
                                     regions[write.remote.key]->bytes));
  }

  /// Issues every write whose modelled arrival has come, in at most three driver calls:
  /// contiguous blocks as one batch of copies, strided ones as another, then small values from
  /// host memory (flag counts) as stream memory operations with the lane's mark after them.
  void issueDue() {
    const auto now = Clock::now();
    if (pending_.empty() || pending_.begin()->first > now)
      return;
    values_.clear();
    blocks_.clear();
    strided_.clear();
    Batch batch;
    for (auto it = pending_.begin(); it != pending_.end() && it->first <= now;) {
      const Write &w = it->second;
      const LocalRegion &local = local_[w.localRegion];
      const CUdeviceptr src = local.base + w.localOffset;
      const CUdeviceptr dst = peers_[w.peer][w.remote.key]->range.base() + w.remoteOffset;
      if (w.rows == 1 && local.kind == MemoryKind::Host &&
          (w.rowBytes == sizeof(std::uint32_t) || w.rowBytes == sizeof(std::uint64_t))) {
        // Read now: the proxy leaves a value untouched until its write completes.
        const auto *value = reinterpret_cast<const void *>(src);
        values_.push_back(w.rowBytes == sizeof(std::uint32_t)
                              ? cuda::writeValue(dst, load<std::uint32_t>(value))
                              : cuda::writeValue(dst, load<std::uint64_t>(value)));
      } else if (w.rows == 1 && w.rowBytes) {
        blocks_.add(dst, src, w.rowBytes);
      } else if (w.rows && w.rowBytes) {
        strided_.push_back(
            cuda::pitchedCopy(dst, w.remotePitch, src, w.localPitch, w.rowBytes, w.rows));
      }
      batch.emplace_back(w.context, w.peer);
      it = pending_.erase(it);
    }
    // The caller has the context current (GpuPlace): no push and pop around the calls.
    // Batches take the lanes in turn: each stream feeds a copy engine of its own.
    const auto entered = Clock::now();
    Lane &lane = lanes_[batches_ % lanes_.size()];
    if (!blocks_.sizes.empty()) {
      CUmemcpyAttributes attributes{};
      attributes.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
      std::size_t attributesFrom = 0;
      MK_CU_CHECK(cu_, cuMemcpyBatchAsync(blocks_.dsts.data(), blocks_.srcs.data(),
                                          blocks_.sizes.data(), blocks_.sizes.size(), &attributes,
                                          &attributesFrom, 1, lane.stream));
    }
    if (!strided_.empty())
      MK_CU_CHECK(cu_, cuMemcpy3DBatchAsync(strided_.size(), strided_.data(), 0, lane.stream));
    const std::uint64_t mark = lane.done->mark(values_);
    cuda::batchMemOps(cu_, lane.stream, values_);
    inFlight_ += batch.size();
    writesIssued_ += batch.size();
    ++batches_;
    lane.issued.emplace_back(mark, std::move(batch));
    inDriver_ += Clock::now() - entered;
  }

  /// The arrays of a cuMemcpyBatchAsync.
  struct Blocks {
    std::vector<CUdeviceptr> dsts, srcs;
    std::vector<std::size_t> sizes;
    void add(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes) {
      dsts.push_back(dst);
      srcs.push_back(src);
      sizes.push_back(bytes);
    }
    void clear() {
      dsts.clear();
      srcs.clear();
      sizes.clear();
    }
  };

  GpuPlace gpu_;
  const cuda::Driver &cu_;
  double bytesPerSecond_;
  std::chrono::duration<double, std::micro> latency_;
  bool reorder_;
  std::mt19937_64 random_{0x6e6963};
  int self_ = -1;
  int deviceRegions_ = 0;
  std::vector<LocalRegion> local_;
  std::vector<std::vector<std::unique_ptr<PeerRegion>>> peers_; // [node][device region]
  Clock::time_point linkFree_{};
  std::multimap<Clock::time_point, Write> pending_; // by modelled arrival
  // issueDue()'s, kept for their capacity.
  std::vector<CUstreamBatchMemOpParams> values_;
  Blocks blocks_;
  std::vector<CUDA_MEMCPY3D_BATCH_OP> strided_;
  Clock::duration inDriver_{}; // issueDue()'s driver calls
  /// A stream of copies, and its batches with their marks, oldest first.
  struct Lane {
    CUstream stream = nullptr;
    std::optional<cuda::StreamCounter> done;
    std::deque<std::pair<std::uint64_t, Batch>> issued;
  };
  std::deque<Lane> lanes_; // a deque: a lane does not move
  std::size_t inFlight_ = 0;
  std::uint64_t writesIssued_ = 0, batches_ = 0;
};

} // namespace

std::unique_ptr<Transport> makeEmulatedTransport(const TransportConfig &config,
                                                 const GpuPlace &gpu) {
  if (!gpu.driver || !gpu.driver->available())
    throw NetworkError("emulated: no usable CUDA driver");
  return std::make_unique<EmulatedTransport>(config, gpu);
}

} // namespace mkc::net
