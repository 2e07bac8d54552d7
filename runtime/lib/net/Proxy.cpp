//===- Proxy.cpp - the host thread that carries kernels' commands over the network ---===//
//
// The protocols are described in mk/runtime/net/Proxy.h. The engine runs on the proxy's thread
// alone; the rest of the process talks to it through atomics (statistics, idle, stop) and the
// error slot.
//
//===----------------------------------------------------------------------===//

#include "mk/runtime/net/Proxy.h"

#include "mk/runtime/Log.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace mkc::net {

namespace {

using Clock = std::chrono::steady_clock;

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

/// What the nodes exchange: the protocol, the regions peers write into, the endpoint.
struct EndpointBlob {
  std::uint32_t staged = 0;
  RemoteRegion heap, inbox, credits;
};

std::vector<std::byte> encode(const EndpointBlob &blob, const std::vector<std::byte> &address) {
  std::vector<std::byte> bytes(sizeof blob);
  std::memcpy(bytes.data(), &blob, sizeof blob);
  bytes.insert(bytes.end(), address.begin(), address.end());
  return bytes;
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
// Engine: the proxy thread's state
//===----------------------------------------------------------------------===//

class Proxy::Engine {
public:
  Engine(Transport &transport, LocalMemory &memory, CommandQueue &queue, const HeapBlock &heap,
         const Rail &rail, const ProxyOptions &options, bool staged);

  /// One round: take commands, post, poll, deliver; returns whether anything happened.
  bool step();
  /// Nothing taken and not yet finished.
  bool idle() const;
  /// Throws NetworkError if a write or a peer's slots are overdue.
  void checkDeadlines();

  std::atomic<std::uint64_t> commands{0}, writes{0}, posts{0}, bytes{0};

private:
  enum class Purpose : std::uint8_t { Data, Flag, Credit, Slot };
  struct InFlight {
    Purpose purpose;
    int peer;
    std::uint64_t sequence; // Data: the write's number among the data writes to its peer
    int valueSlot = -1;     // Flag, Credit
    int sendSlot = -1;      // Slot
    std::uint64_t flagWord; // Flag: the heap offset it counts on
    bool posted = false;
    Clock::time_point postedAt;
  };
  struct Peer {
    RemoteRegion heap, inbox, credits;
    std::size_t incomplete = 0; // writes of any purpose posted and not complete
    // Data writes to the peer, numbered in posting order: queued, posted, and not yet complete.
    std::uint64_t dataQueued = 0;
    std::uint64_t dataPosted = 0;
    // Data writes before `dataCompleteBelow` are complete; dataCompletedFrom[i]: whether data
    // write dataCompleteBelow + i is (a window, not a set: completions come nearly in order).
    std::uint64_t dataCompleteBelow = 0;
    std::deque<bool> dataCompletedFrom;
    // Direct: signals waiting for the data writes before them (their count) to complete.
    std::deque<std::pair<std::uint64_t, std::uint64_t>> signals; // {fence, signal offset}
    std::unordered_map<std::uint64_t, std::uint32_t> signalled;  // our count per flag word
    std::unordered_set<std::uint64_t> flagsInFlight;             // words with a count on its way
    // Staged, sending: transfers (slots) sent, and pieces waiting for a slot or a credit.
    std::uint64_t slotsSent = 0;
    struct Pending {
      Piece piece;
      std::uint64_t signalOffset;
    };
    std::deque<Pending> backlog;
    // Staged, receiving: arrivals by sequence until their turn, slots being unpacked, credits.
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
  };

  std::uint64_t nodeCreditsTo(int peer) const;
  bool intake();
  void execute(const mk_command &command);
  void validate(const mk_command &command) const;
  void validateRange(const mk_command &command,
                     const std::function<void(const std::string &)> &bad) const;
  std::uint64_t sourceAddress(const mk_command &command) const;
  /// Whether anything this proxy sent is not yet complete at its destination (writes posted,
  /// queued or being packed, signals waiting, slots not yet credited back).
  bool sending() const;

  void postData(int peer, std::uint64_t src, bool fromStaging, const mk_command &command);
  void queueSignal(int peer, std::uint64_t signalOffset);
  void queuePieces(int peer, std::uint64_t src, const mk_command &command, bool signal);
  bool sendSignals();
  bool packPieces();
  bool postPacked();
  bool returnCredits();
  bool drainPosts();
  bool pollEvents();
  void arrived(std::uint32_t immediate);

  int takeValueSlot(std::uint64_t value);
  void enqueue(Write write, Purpose purpose, int valueSlot = -1, int sendSlot = -1,
               std::uint64_t flagWord = 0);
  Peer &peer(int node) { return peers_[node]; }

  Transport &transport_;
  LocalMemory &memory_;
  CommandQueue &queue_;
  HeapBlock heap_;
  Rail rail_;
  ProxyOptions options_;
  Capabilities caps_;
  bool staged_;

  Region heapRegion_, valueRegion_, stagingRegion_, sendRegion_, inboxRegion_, creditRegion_;
  SharedMemory values_, send_, inbox_, credits_;
  std::uint32_t valueSlots_;
  std::vector<int> freeValueSlots_, freeSendSlots_;
  std::uint64_t slotPayload_;

  std::vector<Peer> peers_;
  std::vector<InFlight> inFlight_; // by context
  std::vector<std::uint64_t> freeContexts_;
  std::size_t writesInFlight_ = 0;
  std::deque<Write> toPost_;
  std::vector<Write> batch_;                  // drainPosts()'s, kept for its capacity
  Clock::time_point lastPost_ = Clock::now(); // when the transport last took a write
  std::deque<Packing> packing_;
  std::size_t backlogged_ = 0;      // pieces in the peers' backlogs
  bool fencing_ = false;            // a fence holds later commands back
  std::deque<mk_command> barriers_; // barrier signals waiting for their fence
  std::vector<Event> events_;
};

Proxy::Engine::Engine(Transport &transport, LocalMemory &memory, CommandQueue &queue,
                      const HeapBlock &heap, const Rail &rail, const ProxyOptions &options,
                      bool staged)
    : transport_(transport), memory_(memory), queue_(queue), heap_(heap), rail_(rail),
      options_(options), caps_(transport.capabilities()), staged_(staged), peers_(rail.nodes) {
  // Values that flag and credit writes read: each stays untouched until its write completes.
  valueSlots_ = 2 * options.maxInFlight;
  values_ = memory.allocateShared(valueSlots_ * sizeof(std::uint64_t));
  valueRegion_ =
      transport.registerMemory(values_.host, valueSlots_ * sizeof(std::uint64_t), MemoryKind::Host);
  for (int slot = static_cast<int>(valueSlots_) - 1; slot >= 0; --slot)
    freeValueSlots_.push_back(slot);

  EndpointBlob mine;
  mine.staged = staged;
  if (staged) {
    slotPayload_ = options.slotBytes - kSlotHeaderBytes;
    const std::size_t sendSlots = std::size_t(options.slotsPerPeer) * std::max(rail.nodes - 1, 1);
    send_ = memory.allocateShared(sendSlots * options.slotBytes);
    sendRegion_ =
        transport.registerMemory(send_.host, sendSlots * options.slotBytes, MemoryKind::Host);
    for (int slot = static_cast<int>(sendSlots) - 1; slot >= 0; --slot)
      freeSendSlots_.push_back(slot);
    const std::size_t inboxBytes =
        std::size_t(rail.nodes) * options.slotsPerPeer * options.slotBytes;
    inbox_ = memory.allocateShared(inboxBytes);
    inboxRegion_ = transport.registerMemory(inbox_.host, inboxBytes, MemoryKind::Host);
    credits_ = memory.allocateShared(rail.nodes * sizeof(std::uint64_t));
    creditRegion_ = transport.registerMemory(credits_.host, rail.nodes * sizeof(std::uint64_t),
                                             MemoryKind::Host);
    mine.inbox = inboxRegion_.remote;
    mine.credits = creditRegion_.remote;
  } else {
    heapRegion_ =
        transport.registerMemory(reinterpret_cast<void *>(heap.base), heap.bytes, heap.kind);
    if (queue.deviceView().staging_bytes)
      stagingRegion_ = transport.registerMemory(reinterpret_cast<void *>(queue.stagingAddress()),
                                                queue.deviceView().staging_bytes, MemoryKind::Host);
    mine.heap = heapRegion_.remote;
  }

  // Meet the rail: every node's regions and endpoint, then connect.
  std::vector<std::vector<std::byte>> blobs = rail.allGather(encode(mine, transport.address()));
  std::vector<std::vector<std::byte>> addresses(rail.nodes);
  for (int node = 0; node < rail.nodes; ++node) {
    EndpointBlob theirs;
    if (blobs[node].size() < sizeof theirs)
      throw NetworkError(fmt::format("proxy: node {} sent a malformed endpoint", node));
    std::memcpy(&theirs, blobs[node].data(), sizeof theirs);
    if (theirs.staged != mine.staged)
      throw NetworkError(fmt::format("proxy: node {} runs the {} protocol, node {} the {} one: "
                                     "every node needs the same transport and memory",
                                     node, theirs.staged ? "staged" : "direct", rail.node,
                                     staged ? "staged" : "direct"));
    peers_[node].heap = theirs.heap;
    peers_[node].inbox = theirs.inbox;
    peers_[node].credits = theirs.credits;
    addresses[node].assign(blobs[node].begin() + sizeof theirs, blobs[node].end());
  }
  transport.connect(rail.node, addresses);
  // Nobody writes before every node is connected: a peer still connecting would refuse it.
  rail.allGather({});
}

bool Proxy::Engine::idle() const {
  if (fencing_ || !barriers_.empty() || sending())
    return false;
  for (const Peer &p : peers_)
    if (!p.unpacking.empty() || !p.arrived.empty() || p.creditsPosted != p.slotsFreed)
      return false;
  return true;
}

std::uint64_t Proxy::Engine::nodeCreditsTo(int node) const {
  if (!staged_)
    return 0;
  return __atomic_load_n(static_cast<const std::uint64_t *>(credits_.host) + node,
                         __ATOMIC_ACQUIRE);
}

bool Proxy::Engine::sending() const {
  for (int node = 0; node < rail_.nodes; ++node) {
    const Peer &p = peers_[node];
    if (p.incomplete || !p.signals.empty() || !p.backlog.empty() ||
        nodeCreditsTo(node) != p.slotsSent)
      return true;
  }
  return !toPost_.empty() || !packing_.empty();
}

bool Proxy::Engine::step() {
  bool progress = false;
  progress |= pollEvents();
  progress |= intake();
  if (staged_) {
    progress |= packPieces();
    memory_.flush(); // this round's unpacking (from pollEvents) and packing
    progress |= postPacked();
    progress |= returnCredits();
  } else {
    progress |= sendSignals();
  }
  progress |= drainPosts();
  return progress;
}

bool Proxy::Engine::intake() {
  bool progress = false;
  while (true) {
    if (fencing_) {
      if (sending())
        return progress;
      fencing_ = false;
      // A barrier's signals go out once its fence has cleared.
      while (!barriers_.empty()) {
        const mk_command barrier = barriers_.front();
        barriers_.pop_front();
        for (int node = 0; node < rail_.nodes; ++node)
          if (node != rail_.node) {
            if (staged_)
              queuePieces(node, 0, barrier, true);
            else
              queueSignal(node, barrier.signal_offset);
          }
      }
    }
    // Bound the work taken in: what waits to be posted stays below the writes in flight.
    if (writesInFlight_ + toPost_.size() + backlogged_ >= options_.maxInFlight)
      return progress;
    std::optional<mk_command> command = queue_.next();
    if (!command)
      return progress;
    queue_.consume();
    ++commands;
    execute(*command);
    progress = true;
  }
}

void Proxy::Engine::validate(const mk_command &c) const {
  auto bad = [&](const std::string &why) {
    throw NetworkError(
        fmt::format("proxy: command (op {}, to node {}): {}", c.op, c.dst_node, why));
  };
  if (c.op < MK_CMD_PUT || c.op > MK_CMD_BARRIER)
    bad("unknown op");
  if (c.op == MK_CMD_FENCE || c.op == MK_CMD_BARRIER) {
    if (c.op == MK_CMD_BARRIER && (c.signal_offset % 4 || c.signal_offset + 4 > heap_.bytes))
      bad(fmt::format("signal offset {} is not a word of the heap ({} bytes)", c.signal_offset,
                      heap_.bytes));
    return;
  }
  const bool signals = c.op != MK_CMD_PUT;
  if (signals && (c.signal_offset % 4 || c.signal_offset + 4 > heap_.bytes))
    bad(fmt::format("signal offset {} is not a word of the heap ({} bytes)", c.signal_offset,
                    heap_.bytes));
  if (c.op != MK_CMD_SIGNAL && c.rows && c.row_bytes)
    validateRange(c, bad);
  if (c.dst_node >= static_cast<std::uint32_t>(rail_.nodes) ||
      c.dst_node == static_cast<std::uint32_t>(rail_.node))
    bad(fmt::format("node {} is not another node of the rail ({} nodes, this is node {})",
                    c.dst_node, rail_.nodes, rail_.node));
}

void Proxy::Engine::validateRange(const mk_command &c,
                                  const std::function<void(const std::string &)> &bad) const {
  if (c.rows > 1 && (c.src_pitch < c.row_bytes || c.dst_pitch < c.row_bytes))
    bad(fmt::format("pitches {} and {} are shorter than rows of {} bytes", c.src_pitch, c.dst_pitch,
                    c.row_bytes));
  auto extent = [&](std::uint64_t pitch) {
    return (std::uint64_t(c.rows) - 1) * pitch + c.row_bytes;
  };
  const std::uint64_t sourceBytes =
      c.view == MK_VIEW_STAGING ? queue_.deviceView().staging_bytes : heap_.bytes;
  if (c.view > MK_VIEW_STAGING)
    bad(fmt::format("unknown source view {}", c.view));
  if (c.src_offset + extent(c.src_pitch) > sourceBytes)
    bad(fmt::format("source [{}, +{}) overruns the {} ({} bytes)", c.src_offset,
                    extent(c.src_pitch), c.view == MK_VIEW_STAGING ? "staging area" : "heap",
                    sourceBytes));
  if (c.dst_offset + extent(c.dst_pitch) > heap_.bytes)
    bad(fmt::format("destination [{}, +{}) overruns the heap ({} bytes)", c.dst_offset,
                    extent(c.dst_pitch), heap_.bytes));
}

std::uint64_t Proxy::Engine::sourceAddress(const mk_command &c) const {
  return (c.view == MK_VIEW_STAGING ? queue_.stagingAddress() : heap_.base) + c.src_offset;
}

void Proxy::Engine::execute(const mk_command &command) {
  try {
    validate(command);
  } catch (const NetworkError &) {
    queue_.abort(MK_QUEUE_BAD_COMMAND);
    throw;
  }
  // Rows that lie back to back at both ends (a tile-major tile) travel as one row: one write
  // for a network without strided writes, one copy for the emulated NIC.
  mk_command c = command;
  if (c.rows > 1 && c.src_pitch == c.row_bytes && c.dst_pitch == c.row_bytes &&
      std::uint64_t(c.rows) * c.row_bytes <= UINT32_MAX) {
    c.row_bytes *= c.rows;
    c.rows = 1;
  }
  const int node = static_cast<int>(c.dst_node);
  switch (c.op) {
  case MK_CMD_PUT:
  case MK_CMD_PUT_SIGNAL: {
    const bool signal = c.op == MK_CMD_PUT_SIGNAL;
    const bool empty = c.rows == 0 || c.row_bytes == 0;
    if (staged_) {
      if (!empty || signal)
        queuePieces(node, sourceAddress(c), c, signal);
    } else {
      if (!empty)
        postData(node, sourceAddress(c), c.view == MK_VIEW_STAGING, c);
      if (signal)
        queueSignal(node, c.signal_offset);
    }
    break;
  }
  case MK_CMD_SIGNAL:
    if (staged_)
      queuePieces(node, 0, c, true);
    else
      queueSignal(node, c.signal_offset);
    break;
  case MK_CMD_FENCE:
    fencing_ = true;
    break;
  case MK_CMD_BARRIER:
    fencing_ = true;
    barriers_.push_back(c);
    break;
  }
}

//===--- direct -----------------------------------------------------------===//

void Proxy::Engine::postData(int node, std::uint64_t src, bool fromStaging, const mk_command &c) {
  Write write;
  write.localRegion = fromStaging ? stagingRegion_.id : heapRegion_.id;
  write.localOffset = src - (fromStaging ? queue_.stagingAddress() : heap_.base);
  write.peer = node;
  write.remote = peer(node).heap;
  write.remoteOffset = c.dst_offset;
  write.rowBytes = c.row_bytes;
  write.rows = c.rows;
  write.localPitch = c.src_pitch;
  write.remotePitch = c.dst_pitch;
  bytes += std::uint64_t(c.rows) * c.row_bytes;
  enqueue(write, Purpose::Data);
}

void Proxy::Engine::queueSignal(int node, std::uint64_t signalOffset) {
  Peer &p = peer(node);
  p.signals.emplace_back(p.dataQueued, signalOffset);
}

bool Proxy::Engine::sendSignals() {
  bool progress = false;
  for (int node = 0; node < rail_.nodes; ++node) {
    Peer &p = peer(node);
    while (!p.signals.empty()) {
      const auto [fence, offset] = p.signals.front();
      // Data writes before the signal: posted and, unless the transport keeps order, complete
      // (not earlier flags: waiting for each flag's round trip would serialize the tiles). A
      // count for the same word must not be overtaken: counts are absolute, a late one would
      // take a newer one back.
      const bool unordered = !caps_.orderedWrites;
      if (p.dataPosted < fence ||
          (unordered && (p.dataCompleteBelow < fence || p.flagsInFlight.contains(offset))) ||
          freeValueSlots_.empty())
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
      enqueue(write, Purpose::Flag, slot, -1, offset);
      progress = true;
    }
  }
  return progress;
}

//===--- staged -----------------------------------------------------------===//

void Proxy::Engine::queuePieces(int node, std::uint64_t src, const mk_command &c, bool signal) {
  Peer &p = peer(node);
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
    p.backlog.push_back({pieces[i], i + 1 == pieces.size() ? signalOffset : MK_NO_SIGNAL});
  backlogged_ += pieces.size();
  bytes += std::uint64_t(c.rows) * c.row_bytes;
}

bool Proxy::Engine::packPieces() {
  bool progress = false;
  for (int node = 0; node < rail_.nodes; ++node) {
    Peer &p = peer(node);
    while (!p.backlog.empty() && !freeSendSlots_.empty() &&
           p.slotsSent - nodeCreditsTo(node) < options_.slotsPerPeer) {
      const int sendSlot = freeSendSlots_.back();
      freeSendSlots_.pop_back();
      const std::size_t slotAt = std::size_t(sendSlot) * options_.slotBytes;
      auto *slot = static_cast<unsigned char *>(send_.host) + slotAt;
      SlotHeader header{};
      header.sequence = p.slotsSent;
      Packing packing{node, sendSlot, kSlotHeaderBytes,
                      static_cast<std::uint32_t>(p.slotsSent % options_.slotsPerPeer), 0};
      // As many waiting pieces as fit (the first always does: split() sized it).
      while (!p.backlog.empty() && header.pieces < kPiecesPerSlot) {
        const auto [piece, signalOffset] = p.backlog.front();
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

bool Proxy::Engine::postPacked() {
  bool progress = false;
  while (!packing_.empty() &&
         (packing_.front().token == 0 || memory_.complete(packing_.front().token))) {
    const Packing packing = packing_.front();
    packing_.pop_front();
    Write write;
    write.localRegion = sendRegion_.id;
    write.localOffset = std::uint64_t(packing.sendSlot) * options_.slotBytes;
    write.peer = packing.peer;
    write.remote = peer(packing.peer).inbox;
    write.remoteOffset = (std::uint64_t(rail_.node) * options_.slotsPerPeer + packing.inboxSlot) *
                         options_.slotBytes;
    write.rowBytes = packing.bytes;
    write.immediate = slotImmediate(rail_.node, packing.inboxSlot);
    enqueue(write, Purpose::Slot, -1, packing.sendSlot);
    progress = true;
  }
  return progress;
}

void Proxy::Engine::arrived(std::uint32_t immediate) {
  const int sender = static_cast<int>(immediate >> kSlotBits);
  const std::uint32_t slot = immediate & ((1u << kSlotBits) - 1);
  if (sender >= rail_.nodes || sender == rail_.node || slot >= options_.slotsPerPeer)
    throw NetworkError(
        fmt::format("proxy: an arrival names node {} slot {}, which do not exist", sender, slot));
  Peer &p = peer(sender);
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
    const std::uint64_t at =
        (std::size_t(sender) * options_.slotsPerPeer + turn) * options_.slotBytes;
    const auto *arrival = static_cast<const unsigned char *>(inbox_.host) + at;
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
          (piece.dstOffset + extent > heap_.bytes ||
           piece.payloadAt + payload > options_.slotBytes || piece.payloadAt < kSlotHeaderBytes))
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
}

bool Proxy::Engine::returnCredits() {
  bool progress = false;
  for (int node = 0; node < rail_.nodes; ++node) {
    Peer &p = peer(node);
    while (!p.unpacking.empty() &&
           (p.unpacking.front() == 0 || memory_.complete(p.unpacking.front()))) {
      p.unpacking.pop_front();
      ++p.slotsFreed;
      progress = true;
    }
    // One credit write per peer at a time: a later value must not be overtaken by an earlier.
    if (p.creditsPosted != p.slotsFreed && !p.creditInFlight && !freeValueSlots_.empty()) {
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

//===--- posting and events -----------------------------------------------===//

int Proxy::Engine::takeValueSlot(std::uint64_t value) {
  const int slot = freeValueSlots_.back();
  freeValueSlots_.pop_back();
  auto *words = static_cast<std::uint64_t *>(values_.host);
  words[slot] = value;
  return slot;
}

void Proxy::Engine::enqueue(Write write, Purpose purpose, int valueSlot, int sendSlot,
                            std::uint64_t flagWord) {
  std::uint64_t context;
  if (freeContexts_.empty()) {
    context = inFlight_.size();
    inFlight_.emplace_back();
  } else {
    context = freeContexts_.back();
    freeContexts_.pop_back();
  }
  Peer &p = peer(write.peer);
  inFlight_[context] = {purpose,   write.peer, purpose == Purpose::Data ? p.dataQueued++ : 0,
                        valueSlot, sendSlot,   flagWord,
                        false,     {}};
  write.context = context;
  toPost_.push_back(write);
}

bool Proxy::Engine::drainPosts() {
  bool progress = false;
  while (!toPost_.empty() && writesInFlight_ < options_.maxInFlight) {
    const std::size_t room = options_.maxInFlight - writesInFlight_;
    batch_.assign(toPost_.begin(),
                  toPost_.begin() + static_cast<std::ptrdiff_t>(std::min(room, toPost_.size())));
    const std::size_t taken = transport_.post(batch_);
    if (taken == 0)
      break;
    lastPost_ = Clock::now();
    ++posts;
    writes += taken;
    const auto now = Clock::now();
    for (std::size_t i = 0; i < taken; ++i) {
      const Write &write = batch_[i];
      InFlight &entry = inFlight_[write.context];
      Peer &p = peer(write.peer);
      ++p.incomplete;
      entry.posted = true;
      entry.postedAt = now;
      if (entry.purpose == Purpose::Data) {
        ++p.dataPosted;
        p.dataCompletedFrom.push_back(false); // data writes to a peer are posted in their order
      }
      toPost_.pop_front();
    }
    writesInFlight_ += taken;
    progress = true;
  }
  return progress;
}

bool Proxy::Engine::pollEvents() {
  events_.clear();
  if (transport_.poll(events_) == 0)
    return false;
  for (const Event &event : events_) {
    switch (event.kind) {
    case Event::Kind::Arrived:
      arrived(event.immediate);
      break;
    case Event::Kind::Failed:
      throw NetworkError(event.error);
    case Event::Kind::Completed: {
      InFlight &entry = inFlight_.at(event.context);
      Peer &p = peer(entry.peer);
      --p.incomplete;
      if (entry.purpose == Purpose::Data) {
        p.dataCompletedFrom[entry.sequence - p.dataCompleteBelow] = true;
        while (!p.dataCompletedFrom.empty() && p.dataCompletedFrom.front()) {
          p.dataCompletedFrom.pop_front();
          ++p.dataCompleteBelow;
        }
      }
      if (entry.purpose == Purpose::Flag)
        p.flagsInFlight.erase(entry.flagWord);
      p.lastProgress = Clock::now();
      if (entry.valueSlot >= 0)
        freeValueSlots_.push_back(entry.valueSlot);
      if (entry.sendSlot >= 0)
        freeSendSlots_.push_back(entry.sendSlot);
      if (entry.purpose == Purpose::Credit)
        p.creditInFlight = false;
      entry.posted = false;
      freeContexts_.push_back(event.context);
      --writesInFlight_;
      break;
    }
    }
  }
  return true;
}

void Proxy::Engine::checkDeadlines() {
  const auto now = Clock::now();
  if (toPost_.empty())
    lastPost_ = now;
  else if (now - lastPost_ > options_.timeout)
    throw NetworkError(fmt::format("proxy: the network took no write for {} ms with writes to "
                                   "node {} waiting: the node is unreachable or dead ({})",
                                   options_.timeout.count(), toPost_.front().peer,
                                   transport_.describe()));
  for (const InFlight &entry : inFlight_) {
    if (entry.posted && now - entry.postedAt > options_.timeout)
      throw NetworkError(fmt::format("proxy: a write to node {} did not complete within {} ms: "
                                     "the node is unreachable or dead ({})",
                                     entry.peer, options_.timeout.count(), transport_.describe()));
  }
  if (!staged_)
    return;
  for (int node = 0; node < rail_.nodes; ++node) {
    const Peer &p = peers_[node];
    const bool waiting = nodeCreditsTo(node) != p.slotsSent;
    if (waiting && now - p.lastProgress > options_.timeout)
      throw NetworkError(fmt::format("proxy: node {} has not taken in what it was sent for {} "
                                     "ms: its proxy is stuck or dead ({})",
                                     node, options_.timeout.count(), transport_.describe()));
  }
}

//===----------------------------------------------------------------------===//
// Proxy
//===----------------------------------------------------------------------===//

Proxy::Proxy(Transport &transport, LocalMemory &memory, const HeapBlock &heap, const Rail &rail,
             const ProxyOptions &options)
    : transport_(transport), memory_(memory), options_(options) {
  if (rail.nodes < 1 || rail.node < 0 || rail.node >= rail.nodes)
    throw NetworkError(
        fmt::format("proxy: node {} of {} is not a place on a rail", rail.node, rail.nodes));
  if (rail.nodes >= (1 << (32 - kSlotBits)) || options.slotsPerPeer > (1u << kSlotBits))
    throw NetworkError(fmt::format("proxy: {} nodes or {} slots per node is more than the "
                                   "immediate data can name",
                                   rail.nodes, options.slotsPerPeer));
  if (options.slotBytes <= kSlotHeaderBytes || options.slotBytes % kPayloadAlignment)
    throw NetworkError(fmt::format("proxy: a slot of {} bytes does not hold its {} bytes of "
                                   "headers and a payload (a multiple of {} bytes is needed)",
                                   options.slotBytes, kSlotHeaderBytes, kPayloadAlignment));
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
  engine_ = std::make_unique<Engine>(transport, memory, *queue_, heap, rail, options_, staged_);
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
    {
      std::lock_guard lock(errorMutex_);
      error_ = failure.what();
    }
    queue_->abort(MK_QUEUE_FAILED);
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
