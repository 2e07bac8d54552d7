//===- net/proxy/DirectProtocol.cpp - puts written heap to heap, flags after their data ---===//
//
// The direct protocol of mk/runtime/net/Proxy.h, for transports that register the heap's memory:
// a put is one write from this heap (or the queue's staging area) into the destination's heap;
// a signal is a write of this node's count for the flag word, read from a slot of the value ring.
// On an ordered transport a signal follows its puts on the wire; on an unordered one it waits
// until every earlier put to that node has completed and no earlier count for its word is still
// on its way.
//
//===----------------------------------------------------------------------===//

#include "net/proxy/Engine.h"

#include <fmt/format.h>

#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace mkc::net {

namespace {

class DirectEngine final : public ProxyEngine {
public:
  DirectEngine(Transport &transport, LocalMemory &memory, CommandQueue &queue,
               const HeapBlock &heap, const Rail &rail, const ProxyOptions &options);

private:
  struct Peer {
    RemoteRegion heap;
    // Data writes to the peer, numbered in posting order: queued, posted, and not yet complete.
    std::uint64_t dataQueued = 0;
    std::uint64_t dataPosted = 0;
    // Data writes before `dataCompleteBelow` are complete; dataCompletedFrom[i]: whether data
    // write dataCompleteBelow + i is (a window, not a set: completions come nearly in order).
    std::uint64_t dataCompleteBelow = 0;
    std::deque<bool> dataCompletedFrom;
    // Signals waiting for the data writes before them (their count) to complete.
    std::deque<std::pair<std::uint64_t, std::uint64_t>> signals; // {fence, signal offset}
    std::unordered_map<std::uint64_t, std::uint32_t> signalled;  // our count per flag word
    std::unordered_set<std::uint64_t> flagsInFlight;             // words with a count on its way
  };

  void put(int node, const mk_command &command, bool signal) override;
  void signal(int node, const mk_command &command) override;
  bool advance() override { return sendSignals(); }
  std::size_t held() const override { return 0; }
  bool sending() const override;
  bool receiving() const override { return false; }
  void arrived(std::uint32_t immediate) override;
  void posted(const InFlight &entry) override;
  void completed(const InFlight &entry) override;

  void queueSignal(int node, std::uint64_t signalOffset);
  bool sendSignals();

  Region heapRegion_, stagingRegion_;
  std::vector<Peer> peers_;
};

DirectEngine::DirectEngine(Transport &transport, LocalMemory &memory, CommandQueue &queue,
                           const HeapBlock &heap, const Rail &rail, const ProxyOptions &options)
    : ProxyEngine(transport, memory, queue, heap, rail, options), peers_(rail.nodes) {
  heapRegion_ =
      transport.registerMemory(reinterpret_cast<void *>(heap.base), heap.bytes, heap.kind);
  if (queue.deviceView().staging_bytes)
    stagingRegion_ = transport.registerMemory(reinterpret_cast<void *>(queue.stagingAddress()),
                                              queue.deviceView().staging_bytes, MemoryKind::Host);
  Endpoint mine;
  mine.heap = heapRegion_.remote;
  const std::vector<Endpoint> endpoints = meet(mine);
  for (int node = 0; node < rail.nodes; ++node)
    peers_[node].heap = endpoints[node].heap;
}

void DirectEngine::put(int node, const mk_command &c, bool signal) {
  if (c.rows && c.row_bytes) {
    const bool fromStaging = c.view == MK_VIEW_STAGING;
    Peer &p = peers_[node];
    Write write;
    write.localRegion = fromStaging ? stagingRegion_.id : heapRegion_.id;
    write.localOffset = sourceAddress(c) - (fromStaging ? queue_.stagingAddress() : heap_.base);
    write.peer = node;
    write.remote = p.heap;
    write.remoteOffset = c.dst_offset;
    write.rowBytes = c.row_bytes;
    write.rows = c.rows;
    write.localPitch = c.src_pitch;
    write.remotePitch = c.dst_pitch;
    bytes += std::uint64_t(c.rows) * c.row_bytes;
    enqueue(write, Purpose::Data, -1, p.dataQueued++);
  }
  if (signal)
    queueSignal(node, c.signal_offset);
}

void DirectEngine::signal(int node, const mk_command &c) { queueSignal(node, c.signal_offset); }

void DirectEngine::queueSignal(int node, std::uint64_t signalOffset) {
  Peer &p = peers_[node];
  p.signals.emplace_back(p.dataQueued, signalOffset);
}

bool DirectEngine::sendSignals() {
  bool progress = false;
  for (int node = 0; node < rail_.nodes; ++node) {
    Peer &p = peers_[node];
    while (!p.signals.empty()) {
      const auto [fence, offset] = p.signals.front();
      // Data writes before the signal: posted and, unless the transport keeps order, complete
      // (not earlier flags: waiting for each flag's round trip would serialize the tiles). A
      // count for the same word must not be overtaken: counts are absolute, a late one would
      // take a newer one back.
      const bool unordered = !caps_.orderedWrites;
      if (p.dataPosted < fence ||
          (unordered && (p.dataCompleteBelow < fence || p.flagsInFlight.contains(offset))) ||
          !valueSlotFree())
        break;
      p.signals.pop_front();
      p.flagsInFlight.insert(offset);
      const int slot = takeValueSlot(++p.signalled[offset]);
      Write write;
      write.localRegion = valueRegion_.id;
      write.localOffset = slot * sizeof(std::uint64_t);
      write.peer = node;
      write.remote = p.heap;
      write.remoteOffset = offset;
      write.rowBytes = sizeof(std::uint32_t);
      enqueue(write, Purpose::Flag, slot, offset);
      progress = true;
    }
  }
  return progress;
}

bool DirectEngine::sending() const {
  for (const Peer &p : peers_)
    if (!p.signals.empty())
      return true;
  return false;
}

void DirectEngine::arrived(std::uint32_t immediate) {
  throw NetworkError(fmt::format("proxy: an arrival (immediate data {}) for the direct protocol, "
                                 "whose writes carry none",
                                 immediate));
}

void DirectEngine::posted(const InFlight &entry) {
  if (entry.purpose != Purpose::Data)
    return;
  Peer &p = peers_[entry.peer];
  ++p.dataPosted;
  p.dataCompletedFrom.push_back(false); // data writes to a peer are posted in their order
}

void DirectEngine::completed(const InFlight &entry) {
  Peer &p = peers_[entry.peer];
  if (entry.purpose == Purpose::Data) {
    p.dataCompletedFrom[entry.tag - p.dataCompleteBelow] = true;
    while (!p.dataCompletedFrom.empty() && p.dataCompletedFrom.front()) {
      p.dataCompletedFrom.pop_front();
      ++p.dataCompleteBelow;
    }
  }
  if (entry.purpose == Purpose::Flag)
    p.flagsInFlight.erase(entry.tag);
}

} // namespace

std::unique_ptr<ProxyEngine> makeDirectEngine(Transport &transport, LocalMemory &memory,
                                              CommandQueue &queue, const HeapBlock &heap,
                                              const Rail &rail, const ProxyOptions &options) {
  return std::make_unique<DirectEngine>(transport, memory, queue, heap, rail, options);
}

} // namespace mkc::net
