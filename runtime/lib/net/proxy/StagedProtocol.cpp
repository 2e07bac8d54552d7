//===- net/proxy/StagedProtocol.cpp - puts packed into host slots, unpacked at the peer ---===//
//
// The staged protocol of mk/runtime/net/Proxy.h, for transports that cannot register GPU memory
// (tcp, shm): the proxy packs the rows of the puts waiting for a node from the heap into a send
// slot of pinned host memory and writes the slot, with immediate data (sender node, slot), into
// the slot the destination keeps for this node. The destination's proxy unpacks each piece into
// its heap in the order the sender sent its slots, stores each flag count after its data, and
// once the unpack completed returns the slot with a credit write. Credits bound what a sender
// has in flight per destination.
//
//===----------------------------------------------------------------------===//

#include "net/proxy/Engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <unordered_map>

namespace mkc::net {

namespace {

/// The first bytes of a staged slot, written by the sender: its place in the sender's sequence
/// and how many pieces it carries; their headers follow, then their payloads.
struct SlotHeader {
  std::uint64_t sequence; ///< transfers from the sender to this node, counted from 0
  std::uint32_t pieces;
  std::uint32_t reserved[13];
};
static_assert(sizeof(SlotHeader) == 64, "piece headers start at a 64-byte boundary");

/// One piece of a slot: where its payload lies in the slot and goes in the heap, and the flag.
struct PieceHeader {
  std::uint64_t dstOffset;
  std::uint64_t signalOffset; ///< MK_NO_SIGNAL for none
  std::uint32_t rows;
  std::uint32_t rowBytes;
  std::uint32_t dstPitch;
  std::uint32_t payloadAt; ///< from the slot's start
};
static_assert(sizeof(PieceHeader) == 32, "piece header layout");

/// A slot carries the pieces of several puts (to one node) in one write: fewer, larger writes.
constexpr std::uint32_t kPiecesPerSlot = 30;
constexpr std::size_t kSlotHeaderBytes = sizeof(SlotHeader) + kPiecesPerSlot * sizeof(PieceHeader);
static_assert(kSlotHeaderBytes == 1024, "payloads start at a 1 KiB boundary");
constexpr std::uint64_t kPayloadAlignment = 64;

/// Immediate data of a staged write: the sender and the slot it wrote.
constexpr std::uint32_t kSlotBits = 16;
std::uint32_t slotImmediate(int sender, std::uint32_t slot) {
  return std::uint32_t(sender) << kSlotBits | slot;
}

/// One piece of a put that fits one slot.
struct Piece {
  std::uint64_t src, dst; // source address, destination heap offset
  std::uint32_t rows;
  std::uint64_t rowBytes;
  std::uint64_t srcPitch, dstPitch;
};

/// Splits a put into pieces of at most `capacity` payload bytes: whole rows when a row fits,
/// else parts of one row.
std::vector<Piece> split(std::uint64_t src, std::uint64_t dst, const mk_command &command,
                         std::uint64_t capacity) {
  std::vector<Piece> pieces;
  const std::uint64_t rowBytes = command.row_bytes;
  if (rowBytes <= capacity) {
    const std::uint32_t perPiece = static_cast<std::uint32_t>(capacity / rowBytes);
    for (std::uint32_t row = 0; row < command.rows; row += perPiece)
      pieces.push_back({src + std::uint64_t(row) * command.src_pitch,
                        dst + std::uint64_t(row) * command.dst_pitch,
                        std::min(perPiece, command.rows - row), rowBytes, command.src_pitch,
                        command.dst_pitch});
  } else {
    for (std::uint32_t row = 0; row < command.rows; ++row)
      for (std::uint64_t at = 0; at < rowBytes; at += capacity)
        pieces.push_back({src + row * std::uint64_t(command.src_pitch) + at,
                          dst + row * std::uint64_t(command.dst_pitch) + at, 1,
                          std::min(capacity, rowBytes - at), 0, 0});
  }
  return pieces;
}

class StagedEngine final : public ProxyEngine {
public:
  StagedEngine(Transport &transport, LocalMemory &memory, CommandQueue &queue,
               const HeapBlock &heap, const Rail &rail, const ProxyOptions &options);

private:
  struct Peer {
    RemoteRegion inbox, credits;
    // Sending: transfers (slots) sent, and pieces waiting for a slot or a credit.
    std::uint64_t slotsSent = 0;
    struct Pending {
      Piece piece;
      std::uint64_t signalOffset;
      std::uint64_t source = 0; // with a payload: the ticket of the command it reads
    };
    std::deque<Pending> backlog;
    // Receiving: arrivals by sequence until their turn, slots being unpacked, credits.
    std::uint64_t nextSequence = 0;
    std::map<std::uint64_t, std::uint32_t> arrived; // sequence -> slot
    std::deque<std::uint64_t> unpacking;            // local tokens, in sequence order
    std::uint64_t slotsFreed = 0;                   // credits owed to the peer
    std::uint64_t creditsPosted = 0;                // the last credit value written
    bool creditInFlight = false;
    std::unordered_map<std::uint64_t, std::uint32_t> received; // its count per flag word
    Clock::time_point lastProgress = Clock::now();
  };
  struct Packing {
    int peer;
    int sendSlot;
    std::uint64_t bytes; // header and payload
    std::uint32_t inboxSlot;
    std::uint64_t token;
    std::vector<std::uint64_t> sources; // the commands its payloads were copied from
  };

  void put(int node, const mk_command &command, bool signal) override;
  void signal(int node, const mk_command &command) override;
  bool advance() override;
  std::size_t held() const override { return backlogged_; }
  bool sending() const override;
  bool receiving() const override;
  void arrived(std::uint32_t immediate) override;
  void completed(const InFlight &entry) override;
  void checkPeers(Clock::time_point now) const override;

  /// The credits node `peer` has returned: slots of ours it has unpacked.
  std::uint64_t nodeCreditsTo(int peer) const;
  void queuePieces(int node, std::uint64_t src, const mk_command &command, bool signal);
  bool packPieces();
  bool postPacked();
  void unpack(int sender, std::uint32_t slot, Peer &p);
  bool returnCredits();

  Region sendRegion_, inboxRegion_, creditRegion_;
  SharedMemory send_, inbox_, credits_;
  std::vector<int> freeSendSlots_;
  std::uint64_t slotPayload_;
  std::vector<Peer> peers_;
  std::deque<Packing> packing_;
  std::size_t backlogged_ = 0; // pieces in the peers' backlogs
};

StagedEngine::StagedEngine(Transport &transport, LocalMemory &memory, CommandQueue &queue,
                           const HeapBlock &heap, const Rail &rail, const ProxyOptions &options)
    : ProxyEngine(transport, memory, queue, heap, rail, options),
      slotPayload_(options.slotBytes - kSlotHeaderBytes), peers_(rail.nodes) {
  const std::size_t sendSlots = std::size_t(options.slotsPerPeer) * std::max(rail.nodes - 1, 1);
  send_ = memory.allocateShared(sendSlots * options.slotBytes);
  sendRegion_ =
      transport.registerMemory(send_.host, sendSlots * options.slotBytes, MemoryKind::Host);
  for (int slot = static_cast<int>(sendSlots) - 1; slot >= 0; --slot)
    freeSendSlots_.push_back(slot);
  const std::size_t inboxBytes = std::size_t(rail.nodes) * options.slotsPerPeer * options.slotBytes;
  inbox_ = memory.allocateShared(inboxBytes);
  inboxRegion_ = transport.registerMemory(inbox_.host, inboxBytes, MemoryKind::Host);
  credits_ = memory.allocateShared(rail.nodes * sizeof(std::uint64_t));
  creditRegion_ =
      transport.registerMemory(credits_.host, rail.nodes * sizeof(std::uint64_t), MemoryKind::Host);
  Endpoint mine;
  mine.staged = 1;
  mine.inbox = inboxRegion_.remote;
  mine.credits = creditRegion_.remote;
  const std::vector<Endpoint> endpoints = meet(mine);
  for (int node = 0; node < rail.nodes; ++node) {
    peers_[node].inbox = endpoints[node].inbox;
    peers_[node].credits = endpoints[node].credits;
  }
}

std::uint64_t StagedEngine::nodeCreditsTo(int node) const {
  return __atomic_load_n(static_cast<const std::uint64_t *>(credits_.host) + node,
                         __ATOMIC_ACQUIRE);
}

bool StagedEngine::sending() const {
  for (int node = 0; node < rail_.nodes; ++node) {
    const Peer &p = peers_[node];
    if (!p.backlog.empty() || nodeCreditsTo(node) != p.slotsSent)
      return true;
  }
  return !packing_.empty();
}

bool StagedEngine::receiving() const {
  for (const Peer &p : peers_)
    if (!p.unpacking.empty() || !p.arrived.empty() || p.creditsPosted != p.slotsFreed)
      return true;
  return false;
}

bool StagedEngine::advance() {
  bool progress = packPieces();
  memory_.flush(); // this round's unpacking (from the events polled) and packing
  progress |= postPacked();
  progress |= returnCredits();
  return progress;
}

void StagedEngine::put(int node, const mk_command &c, bool signal) {
  if ((c.rows && c.row_bytes) || signal)
    queuePieces(node, sourceAddress(c), c, signal);
}

void StagedEngine::signal(int node, const mk_command &c) { queuePieces(node, 0, c, true); }

void StagedEngine::queuePieces(int node, std::uint64_t src, const mk_command &c, bool signal) {
  Peer &p = peers_[node];
  const std::uint64_t signalOffset = signal ? c.signal_offset : MK_NO_SIGNAL;
  const bool empty =
      c.op == MK_CMD_SIGNAL || c.op == MK_CMD_BARRIER || c.rows == 0 || c.row_bytes == 0;
  if (empty) {
    p.backlog.push_back({Piece{}, signalOffset});
    ++backlogged_;
    return;
  }
  std::vector<Piece> pieces = split(src, c.dst_offset, c, slotPayload_);
  for (std::size_t i = 0; i < pieces.size(); ++i)
    p.backlog.push_back(
        {pieces[i], i + 1 == pieces.size() ? signalOffset : MK_NO_SIGNAL, holdSource()});
  backlogged_ += pieces.size();
  bytes += std::uint64_t(c.rows) * c.row_bytes;
}

bool StagedEngine::packPieces() {
  bool progress = false;
  for (int node = 0; node < rail_.nodes; ++node) {
    Peer &p = peers_[node];
    while (!p.backlog.empty() && !freeSendSlots_.empty() &&
           p.slotsSent - nodeCreditsTo(node) < options_.slotsPerPeer) {
      const int sendSlot = freeSendSlots_.back();
      freeSendSlots_.pop_back();
      const std::size_t slotAt = std::size_t(sendSlot) * options_.slotBytes;
      auto *slot = static_cast<unsigned char *>(send_.host) + slotAt;
      SlotHeader header{};
      header.sequence = p.slotsSent;
      Packing packing{node,
                      sendSlot,
                      kSlotHeaderBytes,
                      static_cast<std::uint32_t>(p.slotsSent % options_.slotsPerPeer),
                      0,
                      {}};
      // As many waiting pieces as fit (the first always does: split() sized it).
      while (!p.backlog.empty() && header.pieces < kPiecesPerSlot) {
        const auto [piece, signalOffset, source] = p.backlog.front();
        const std::uint64_t payload = piece.rows * piece.rowBytes;
        const std::uint64_t at =
            (packing.bytes + kPayloadAlignment - 1) / kPayloadAlignment * kPayloadAlignment;
        if (header.pieces && at + payload > options_.slotBytes)
          break;
        p.backlog.pop_front();
        --backlogged_;
        const PieceHeader described{piece.dst,
                                    signalOffset,
                                    piece.rows,
                                    static_cast<std::uint32_t>(piece.rowBytes),
                                    static_cast<std::uint32_t>(piece.dstPitch),
                                    static_cast<std::uint32_t>(at)};
        std::memcpy(slot + sizeof header + header.pieces * sizeof described, &described,
                    sizeof described);
        ++header.pieces;
        // Rows travel packed; the receiver spreads them to the piece's pitch.
        if (payload) {
          packing.token = memory_.copy(send_.device + slotAt + at, piece.rowBytes, piece.src,
                                       piece.srcPitch, piece.rowBytes, piece.rows);
          packing.bytes = at + payload;
          packing.sources.push_back(source);
        }
      }
      std::memcpy(slot, &header, sizeof header);
      ++p.slotsSent;
      packing_.push_back(packing);
      progress = true;
    }
  }
  return progress;
}

bool StagedEngine::postPacked() {
  bool progress = false;
  while (!packing_.empty() &&
         (packing_.front().token == 0 || memory_.complete(packing_.front().token))) {
    const Packing packing = std::move(packing_.front());
    packing_.pop_front();
    // Its payloads are in the slot: their sources may change.
    for (std::uint64_t source : packing.sources)
      queue_.release(source);
    Write write;
    write.localRegion = sendRegion_.id;
    write.localOffset = std::uint64_t(packing.sendSlot) * options_.slotBytes;
    write.peer = packing.peer;
    write.remote = peers_[packing.peer].inbox;
    write.remoteOffset = (std::uint64_t(rail_.node) * options_.slotsPerPeer + packing.inboxSlot) *
                         options_.slotBytes;
    write.rowBytes = packing.bytes;
    write.immediate = slotImmediate(rail_.node, packing.inboxSlot);
    enqueue(write, Purpose::Slot, -1, packing.sendSlot);
    progress = true;
  }
  return progress;
}

void StagedEngine::arrived(std::uint32_t immediate) {
  const int sender = static_cast<int>(immediate >> kSlotBits);
  const std::uint32_t slot = immediate & ((1u << kSlotBits) - 1);
  if (sender >= rail_.nodes || sender == rail_.node || slot >= options_.slotsPerPeer)
    throw NetworkError(
        fmt::format("proxy: an arrival names node {} slot {}, which do not exist", sender, slot));
  Peer &p = peers_[sender];
  p.lastProgress = Clock::now();
  const auto *base = static_cast<const unsigned char *>(inbox_.host) +
                     (std::size_t(sender) * options_.slotsPerPeer + slot) * options_.slotBytes;
  SlotHeader header;
  std::memcpy(&header, base, sizeof header);
  p.arrived.emplace(header.sequence, slot);
  // Transfers take effect in the order they were sent: an earlier one may arrive later.
  while (!p.arrived.empty() && p.arrived.begin()->first == p.nextSequence) {
    const std::uint32_t turn = p.arrived.begin()->second;
    p.arrived.erase(p.arrived.begin());
    ++p.nextSequence;
    unpack(sender, turn, p);
  }
}

void StagedEngine::unpack(int sender, std::uint32_t slot, Peer &p) {
  const std::uint64_t at =
      (std::size_t(sender) * options_.slotsPerPeer + slot) * options_.slotBytes;
  const auto *arrival = static_cast<const unsigned char *>(inbox_.host) + at;
  SlotHeader header;
  std::memcpy(&header, arrival, sizeof header);
  if (header.pieces > kPiecesPerSlot)
    throw NetworkError(fmt::format("proxy: node {} sent a slot of {} pieces; a slot holds {}",
                                   sender, header.pieces, kPiecesPerSlot));
  std::uint64_t token = 0;
  for (std::uint32_t i = 0; i < header.pieces; ++i) {
    PieceHeader piece;
    std::memcpy(&piece, arrival + sizeof header + i * sizeof piece, sizeof piece);
    // The sender's heap checks its own commands; the receiver checks what lands in its heap.
    const std::uint64_t payload = std::uint64_t(piece.rows) * piece.rowBytes;
    const std::uint64_t extent =
        piece.rows ? (piece.rows - 1ull) * piece.dstPitch + piece.rowBytes : 0;
    if (payload &&
        (piece.dstOffset + extent > heap_.bytes || piece.payloadAt + payload > options_.slotBytes ||
         piece.payloadAt < kSlotHeaderBytes))
      throw NetworkError(fmt::format("proxy: node {} sent {} bytes for heap offset {} (pitch "
                                     "{}), past the heap ({} bytes) or its slot",
                                     sender, payload, piece.dstOffset, piece.dstPitch,
                                     heap_.bytes));
    if (piece.signalOffset != MK_NO_SIGNAL &&
        (piece.signalOffset % 4 || piece.signalOffset + 4 > heap_.bytes))
      throw NetworkError(fmt::format("proxy: node {} signals heap offset {}, not a word of the "
                                     "heap",
                                     sender, piece.signalOffset));
    if (payload)
      token = memory_.copy(heap_.base + piece.dstOffset, piece.dstPitch,
                           inbox_.device + at + piece.payloadAt, piece.rowBytes, piece.rowBytes,
                           piece.rows);
    if (piece.signalOffset != MK_NO_SIGNAL)
      token = memory_.store(heap_.base + piece.signalOffset, ++p.received[piece.signalOffset]);
  }
  p.unpacking.push_back(token);
}

bool StagedEngine::returnCredits() {
  bool progress = false;
  for (int node = 0; node < rail_.nodes; ++node) {
    Peer &p = peers_[node];
    while (!p.unpacking.empty() &&
           (p.unpacking.front() == 0 || memory_.complete(p.unpacking.front()))) {
      p.unpacking.pop_front();
      ++p.slotsFreed;
      progress = true;
    }
    // One credit write per peer at a time: a later value must not be overtaken by an earlier.
    if (p.creditsPosted != p.slotsFreed && !p.creditInFlight && valueSlotFree()) {
      p.creditsPosted = p.slotsFreed;
      p.creditInFlight = true;
      const int slot = takeValueSlot(p.slotsFreed);
      Write write;
      write.localRegion = valueRegion_.id;
      write.localOffset = slot * sizeof(std::uint64_t);
      write.peer = node;
      write.remote = p.credits;
      write.remoteOffset = std::uint64_t(rail_.node) * sizeof(std::uint64_t);
      write.rowBytes = sizeof(std::uint64_t);
      enqueue(write, Purpose::Credit, slot);
      progress = true;
    }
  }
  return progress;
}

void StagedEngine::completed(const InFlight &entry) {
  Peer &p = peers_[entry.peer];
  p.lastProgress = Clock::now();
  if (entry.purpose == Purpose::Slot)
    freeSendSlots_.push_back(static_cast<int>(entry.tag));
  if (entry.purpose == Purpose::Credit)
    p.creditInFlight = false;
}

void StagedEngine::checkPeers(Clock::time_point now) const {
  for (int node = 0; node < rail_.nodes; ++node) {
    const Peer &p = peers_[node];
    const bool waiting = nodeCreditsTo(node) != p.slotsSent;
    if (waiting && now - p.lastProgress > options_.timeout)
      throw NetworkError(fmt::format("proxy: node {} has not taken in what it was sent for {} "
                                     "ms: its proxy is stuck or dead ({})",
                                     node, options_.timeout.count(), transport_.describe()));
  }
}

} // namespace

std::unique_ptr<ProxyEngine> makeStagedEngine(Transport &transport, LocalMemory &memory,
                                              CommandQueue &queue, const HeapBlock &heap,
                                              const Rail &rail, const ProxyOptions &options) {
  return std::make_unique<StagedEngine>(transport, memory, queue, heap, rail, options);
}

void checkSlotOptions(const Rail &rail, const ProxyOptions &options) {
  if (rail.nodes >= (1 << (32 - kSlotBits)) || options.slotsPerPeer > (1u << kSlotBits))
    throw NetworkError(fmt::format("proxy: {} nodes or {} slots per node is more than the "
                                   "immediate data can name",
                                   rail.nodes, options.slotsPerPeer));
  if (options.slotBytes <= kSlotHeaderBytes || options.slotBytes % kPayloadAlignment)
    throw NetworkError(fmt::format("proxy: a slot of {} bytes does not hold its {} bytes of "
                                   "headers and a payload (a multiple of {} bytes is needed)",
                                   options.slotBytes, kSlotHeaderBytes, kPayloadAlignment));
}

} // namespace mkc::net
