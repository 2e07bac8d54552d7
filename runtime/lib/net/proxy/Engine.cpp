//===- net/proxy/Engine.cpp - what the proxy's two protocols share ---===//
//
// Taking and checking commands, fences and barriers, the value ring, the table of writes in
// flight, posting, polling and deadlines (net/proxy/Engine.h). The protocols' own steps are in
// DirectProtocol.cpp and StagedProtocol.cpp.
//
//===----------------------------------------------------------------------===//

#include "net/proxy/Engine.h"

#include "mk/Support/ByteCodec.h"

#include <fmt/format.h>

#include <algorithm>

namespace mkc::net {

namespace {

void putRegion(ByteWriter &writer, const RemoteRegion &region) {
  writer.put(region.address).put(region.key).put(region.bytes);
}

RemoteRegion getRegion(ByteReader<NetworkError> &reader) {
  RemoteRegion region;
  region.address = reader.get<std::uint64_t>();
  region.key = reader.get<std::uint64_t>();
  region.bytes = reader.get<std::uint64_t>();
  return region;
}

} // namespace

ProxyEngine::ProxyEngine(Transport &transport, LocalMemory &memory, CommandQueue &queue,
                         const HeapBlock &heap, const Rail &rail, const ProxyOptions &options)
    : transport_(transport), memory_(memory), queue_(queue), heap_(heap), rail_(rail),
      options_(options), caps_(transport.capabilities()), incomplete_(rail.nodes) {
  // Values that flag and credit writes read: each stays untouched until its write completes.
  const std::uint32_t valueSlots = 2 * options.maxInFlight;
  values_ = memory.allocateShared(valueSlots * sizeof(std::uint64_t));
  valueRegion_ =
      transport.registerMemory(values_.host, valueSlots * sizeof(std::uint64_t), MemoryKind::Host);
  for (int slot = static_cast<int>(valueSlots) - 1; slot >= 0; --slot)
    freeValueSlots_.push_back(slot);
}

std::vector<ProxyEngine::Endpoint> ProxyEngine::meet(const Endpoint &mine) {
  ByteWriter writer;
  writer.put(mine.staged);
  for (const RemoteRegion *region : {&mine.heap, &mine.inbox, &mine.credits})
    putRegion(writer, *region);
  writer.bytes(transport_.address());
  std::vector<std::vector<std::byte>> blobs = rail_.allGather(writer.take());

  std::vector<Endpoint> endpoints(rail_.nodes);
  std::vector<std::vector<std::byte>> addresses(rail_.nodes);
  for (int node = 0; node < rail_.nodes; ++node) {
    ByteReader<NetworkError> reader(blobs[node], fmt::format("proxy: node {}'s endpoint", node));
    Endpoint &theirs = endpoints[node];
    theirs.staged = reader.get<std::uint32_t>();
    for (RemoteRegion *region : {&theirs.heap, &theirs.inbox, &theirs.credits})
      *region = getRegion(reader);
    if (theirs.staged != mine.staged)
      throw NetworkError(fmt::format("proxy: node {} runs the {} protocol, node {} the {} one: "
                                     "every node needs the same transport and memory",
                                     node, theirs.staged ? "staged" : "direct", rail_.node,
                                     mine.staged ? "staged" : "direct"));
    const std::span<const std::byte> address = reader.rest();
    addresses[node].assign(address.begin(), address.end());
  }
  transport_.connect(rail_.node, addresses);
  // Nobody writes before every node is connected: a peer still connecting would refuse it.
  rail_.allGather({});
  return endpoints;
}

bool ProxyEngine::idle() const {
  return !fencing_ && barriers_.empty() && !sendingAny() && !receiving();
}

bool ProxyEngine::sendingAny() const {
  return !toPost_.empty() ||
         std::any_of(incomplete_.begin(), incomplete_.end(), [](std::size_t n) { return n; }) ||
         sending();
}

bool ProxyEngine::step() {
  bool progress = false;
  progress |= pollEvents();
  progress |= intake();
  progress |= advance();
  progress |= drainPosts();
  return progress;
}

bool ProxyEngine::intake() {
  bool progress = false;
  while (true) {
    if (fencing_) {
      if (sendingAny())
        return progress;
      fencing_ = false;
      // A barrier's signals go out once its fence has cleared.
      while (!barriers_.empty()) {
        const mk_command barrier = barriers_.front();
        barriers_.pop_front();
        for (int node = 0; node < rail_.nodes; ++node)
          if (node != rail_.node)
            signal(node, barrier);
      }
    }
    // Bound the work taken in: what waits to be posted stays below the writes in flight.
    if (writesInFlight_ + toPost_.size() + held() >= options_.maxInFlight)
      return progress;
    std::optional<mk_command> command = queue_.next();
    if (!command)
      return progress;
    executing_ = queue_.take();
    ++commands;
    execute(*command);
    queue_.release(executing_); // carried out; its writes hold it while they read its source
    progress = true;
  }
}

void ProxyEngine::validate(const mk_command &c) const {
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

void ProxyEngine::validateRange(const mk_command &c,
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

std::uint64_t ProxyEngine::sourceAddress(const mk_command &c) const {
  return (c.view == MK_VIEW_STAGING ? queue_.stagingAddress() : heap_.base) + c.src_offset;
}

void ProxyEngine::execute(const mk_command &command) {
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
  case MK_CMD_PUT_SIGNAL:
    put(node, c, c.op == MK_CMD_PUT_SIGNAL);
    break;
  case MK_CMD_SIGNAL:
    signal(node, c);
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

//===--- posting and events -----------------------------------------------===//

int ProxyEngine::takeValueSlot(std::uint64_t value) {
  const int slot = freeValueSlots_.back();
  freeValueSlots_.pop_back();
  auto *words = static_cast<std::uint64_t *>(values_.host);
  words[slot] = value;
  return slot;
}

void ProxyEngine::enqueue(Write write, Purpose purpose, int valueSlot, std::uint64_t tag) {
  std::uint64_t context;
  if (freeContexts_.empty()) {
    context = inFlight_.size();
    inFlight_.emplace_back();
  } else {
    context = freeContexts_.back();
    freeContexts_.pop_back();
  }
  inFlight_[context] = {
      purpose, write.peer, valueSlot, tag, purpose == Purpose::Data ? holdSource() : 0, false, {}};
  write.context = context;
  toPost_.push_back(write);
}

std::uint64_t ProxyEngine::holdSource() {
  queue_.hold(executing_);
  return executing_;
}

bool ProxyEngine::drainPosts() {
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
      ++incomplete_[write.peer];
      entry.posted = true;
      entry.postedAt = now;
      posted(entry);
      toPost_.pop_front();
    }
    writesInFlight_ += taken;
    progress = true;
  }
  return progress;
}

bool ProxyEngine::pollEvents() {
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
      --incomplete_[entry.peer];
      if (entry.purpose == Purpose::Data)
        queue_.release(entry.source);
      completed(entry);
      if (entry.valueSlot >= 0)
        freeValueSlots_.push_back(entry.valueSlot);
      entry.posted = false;
      freeContexts_.push_back(event.context);
      --writesInFlight_;
      break;
    }
    }
  }
  return true;
}

void ProxyEngine::checkDeadlines() {
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
  checkPeers(now);
}

} // namespace mkc::net
