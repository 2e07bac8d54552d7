//===- mk/runtime/net/CommandQueue.h - the ring kernels write commands into ---*- C++ -*-===//
//
// The host's side of mk/queue.h: a ring of commands in pinned host memory mapped into the GPU, the
// tail and abort words next to it, the head in device memory. Kernels produce (device library,
// mk::proxy_push); the proxy takes commands with next()/take(), holding each while it carries it
// out and once more for each write that still reads its source (hold()), and releases the holds
// in any order; the tail moves over the commands without holds in ticket order. Host threads can
// produce too with pushCommand(), which follows the kernels' protocol to the letter: the proxy's
// tests use it to play the GPU's part.
//
//   CommandQueue queue(memory, 4096, 1 << 20, heapBase);
//   args.queue = queue.deviceView();
//   while (auto command = queue.next()) { std::uint64_t ticket = queue.take(); ...;
//                                         queue.release(ticket); }
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_NET_COMMANDQUEUE_H
#define MK_RUNTIME_NET_COMMANDQUEUE_H

#include "mk/queue.h"
#include "mk/runtime/net/LocalMemory.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>

namespace mkc::net {

class CommandQueue {
public:
  /// A ring of `capacity` commands (a power of two) and `stagingBytes` of staging area in memory
  /// of `memory`, whose kernels address heap offsets from `heapBase`.
  CommandQueue(LocalMemory &memory, std::uint32_t capacity, std::size_t stagingBytes,
               std::uint64_t heapBase);

  /// The queue as kernels see it (mk_kernel_args::queue): device addresses.
  const mk_command_queue &deviceView() const { return device_; }
  /// The queue as host producers see it: host addresses.
  const mk_command_queue &hostView() const { return host_; }

  /// The next command not yet taken, once its producer has published it.
  std::optional<mk_command> next() const;
  /// Takes the command next() returned, held once; returns its ticket.
  std::uint64_t take();
  /// One more hold on command `ticket` (taken, still held): a write still reads its source.
  void hold(std::uint64_t ticket);
  /// Ends a hold on command `ticket`. Once it has none, and no earlier command has, the tail
  /// passes it, which hands its slot back to the producers and tells its kernel that the memory
  /// it names may change.
  void release(std::uint64_t ticket);

  /// Tells kernels (and host producers) to stop waiting: the proxy stopped for `reason` (an
  /// MK_QUEUE_* code). The first reason stays.
  void abort(std::uint32_t reason);
  std::uint32_t abortReason() const;

  /// The staging area as the proxy addresses it.
  std::uint64_t stagingAddress() const { return reinterpret_cast<std::uint64_t>(host_.staging); }

private:
  mk_command_queue device_{};
  mk_command_queue host_{};
  std::uint64_t taken_ = 0;             // tickets taken
  std::uint64_t tail_ = 0;              // tickets done with, in order: the published tail
  std::deque<std::uint32_t> holdsFrom_; // holds on ticket tail_ + i, up to taken_
};

/// What pushCommand() found.
enum class PushResult { Pushed, Aborted, TimedOut };

/// Pushes `command` as a kernel would (mk/queue.h): takes a ticket, waits while the ring is full
/// (at most `timeout`; then, or once the queue is aborted, the ticket is lost and the queue must
/// not be used further), writes the command and publishes it with a release store of its first
/// word. For host producers; `queue` holds host addresses (CommandQueue::hostView()).
PushResult pushCommand(const mk_command_queue &queue, const mk_command &command,
                       std::chrono::milliseconds timeout);

} // namespace mkc::net

#endif // MK_RUNTIME_NET_COMMANDQUEUE_H
