//===- net/proxy/Engine.h - the proxy thread's state, shared by its two protocols ---*- C++ -*-===//
//
// Internal to MkNet. The engine runs on the proxy's thread alone (net/Proxy.cpp): each step()
// takes commands from the queue, checks them and hands puts and signals to its protocol, then
// posts and polls. It keeps what the two protocols of mk/runtime/net/Proxy.h share: the
// registered value ring that flag and credit writes read, the table of writes in flight (by
// context), the writes waiting for room in the transport, fences and barriers, and the deadlines
// of writes. A protocol derives from it and keeps its own state:
//
// - DirectProtocol.cpp: puts written heap to heap, flags written after their data;
// - StagedProtocol.cpp: puts packed into host slots, unpacked by the destination's proxy.
//
// It turns commands into writes with enqueue() and hears, through the hooks below, when a write
// was posted or completed and when a peer's write with immediate data arrived.
//
//   std::unique_ptr<ProxyEngine> engine =
//       makeStagedEngine(transport, memory, queue, heap, rail, options);
//   while (running) {
//     engine->step();
//     engine->checkDeadlines(); // now and then: a scan of the writes in flight
//   }
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_LIB_NET_PROXY_ENGINE_H
#define MK_RUNTIME_LIB_NET_PROXY_ENGINE_H

#include "mk/runtime/net/Proxy.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mkc::net {

class ProxyEngine {
public:
  virtual ~ProxyEngine() = default;

  /// One round: take commands, let the protocol move, post, poll; returns whether anything
  /// happened.
  bool step();
  /// Nothing taken and not yet finished.
  bool idle() const;
  /// Throws NetworkError if a write, or what the protocol waits for, is overdue.
  void checkDeadlines();

  std::atomic<std::uint64_t> commands{0}, writes{0}, posts{0}, bytes{0};

protected:
  using Clock = std::chrono::steady_clock;

  /// What a write is for: what its completion means to the protocol. A Data write reads the
  /// source of the command that made it (holdSource()), released as it completes.
  enum class Purpose : std::uint8_t { Data, Flag, Credit, Slot };
  struct InFlight {
    Purpose purpose;
    int peer;
    int valueSlot = -1;       // Flag, Credit: the slot of the value ring it reads
    std::uint64_t tag = 0;    // the protocol's: a data write's number, a flag's word, a send slot
    std::uint64_t source = 0; // Data: the ticket of the command whose source it reads
    bool posted = false;
    Clock::time_point postedAt;
  };
  /// What the nodes exchange: the protocol and the regions peers write into (the heap for the
  /// direct protocol, the inbox and the credits for the staged one).
  struct Endpoint {
    std::uint32_t staged = 0;
    RemoteRegion heap, inbox, credits;
  };

  /// Registers the value ring; the protocol registers its regions, then meets the rail.
  ProxyEngine(Transport &transport, LocalMemory &memory, CommandQueue &queue, const HeapBlock &heap,
              const Rail &rail, const ProxyOptions &options);

  /// Exchanges endpoints along the rail, checks that every node runs this protocol and
  /// connects; returns every node's endpoint, by node. Collective over the rail.
  std::vector<Endpoint> meet(const Endpoint &mine);

  //===--- what a protocol does ---------------------------------------------===//

  /// A put to `node` (rows or bytes may be 0), with a signal after it if `signal`.
  virtual void put(int node, const mk_command &command, bool signal) = 0;
  /// A signal (MK_CMD_SIGNAL or a barrier's) to `node`.
  virtual void signal(int node, const mk_command &command) = 0;
  /// Its part of a round, after the commands were taken; returns whether anything happened.
  virtual bool advance() = 0;
  /// Work it holds that is not yet a write: counted against maxInFlight when taking commands.
  virtual std::size_t held() const = 0;
  /// Whether anything it sent is not yet complete at its destination, beyond the writes.
  virtual bool sending() const = 0;
  /// Whether it still has what peers sent to finish.
  virtual bool receiving() const = 0;
  /// A peer's write with immediate data landed here.
  virtual void arrived(std::uint32_t immediate) = 0;
  virtual void posted(const InFlight &) {}
  virtual void completed(const InFlight &) {}
  /// Throws NetworkError if a peer is overdue with what the protocol waits for.
  virtual void checkPeers(Clock::time_point) const {}

  //===--- for protocols ----------------------------------------------------===//

  /// Where a put's source lies in this process (heap or staging area).
  std::uint64_t sourceAddress(const mk_command &command) const;
  bool valueSlotFree() const { return !freeValueSlots_.empty(); }
  /// A free slot of the value ring, holding `value`; free again when its write completes.
  int takeValueSlot(std::uint64_t value);
  /// Queues `write` for posting; its completion comes back through completed().
  void enqueue(Write write, Purpose purpose, int valueSlot = -1, std::uint64_t tag = 0);
  /// The command being carried out reads its source until queue_.release() of the ticket this
  /// returns (CommandQueue::hold).
  std::uint64_t holdSource();

  Transport &transport_;
  LocalMemory &memory_;
  CommandQueue &queue_;
  HeapBlock heap_;
  Rail rail_;
  ProxyOptions options_;
  Capabilities caps_;
  Region valueRegion_;

private:
  bool intake();
  void execute(const mk_command &command);
  void validate(const mk_command &command) const;
  void validateRange(const mk_command &command,
                     const std::function<void(const std::string &)> &bad) const;
  /// Whether anything this proxy sent is not yet complete at its destination.
  bool sendingAny() const;
  bool drainPosts();
  bool pollEvents();

  SharedMemory values_;
  std::vector<int> freeValueSlots_;
  std::vector<InFlight> inFlight_; // by context
  std::uint64_t executing_ = 0;    // the ticket of execute()'s command
  std::vector<std::uint64_t> freeContexts_;
  std::size_t writesInFlight_ = 0;
  std::vector<std::size_t> incomplete_; // by node: writes posted and not complete
  std::deque<Write> toPost_;
  std::vector<Write> batch_;                  // drainPosts()'s, kept for its capacity
  Clock::time_point lastPost_ = Clock::now(); // when the transport last took a write
  bool fencing_ = false;                      // a fence holds later commands back
  std::deque<mk_command> barriers_;           // barrier signals waiting for their fence
  std::vector<Event> events_;
};

/// The direct protocol (DirectProtocol.cpp): `options.protocol` chose it, or the transport
/// registers the heap's memory.
std::unique_ptr<ProxyEngine> makeDirectEngine(Transport &transport, LocalMemory &memory,
                                              CommandQueue &queue, const HeapBlock &heap,
                                              const Rail &rail, const ProxyOptions &options);
/// The staged protocol (StagedProtocol.cpp).
std::unique_ptr<ProxyEngine> makeStagedEngine(Transport &transport, LocalMemory &memory,
                                              CommandQueue &queue, const HeapBlock &heap,
                                              const Rail &rail, const ProxyOptions &options);
/// Throws NetworkError unless the staged protocol's slots and immediate data fit `rail` and
/// `options`; the proxy checks them whichever protocol runs.
void checkSlotOptions(const Rail &rail, const ProxyOptions &options);

} // namespace mkc::net

#endif // MK_RUNTIME_LIB_NET_PROXY_ENGINE_H
