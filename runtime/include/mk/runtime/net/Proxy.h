//===- mk/runtime/net/Proxy.h - the host thread that carries kernels' commands over the network
//---*- C++ -*-===//
//
// One proxy per rank: a busy-polling thread (pinned to CPUs near the GPU) that reads the rank's
// command queue (mk/queue.h), turns commands into writes of a Transport, and delivers each flag
// after the data it announces. Peers are the ranks of the rail (this GPU index on every node).
//
// Two protocols, chosen from what the transport can do:
//
// - direct, when the transport registers the heap's memory (GPU memory over verbs and the
//   emulated NIC; host memory in tests): a put is one write heap to heap; a signal is a write of
//   this node's count for the flag word (an ever-growing absolute value, from a slot of the
//   proxy's registered value ring that stays untouched until the write completes) into the
//   destination's net_flags[this node][flag]. On an ordered transport the signal follows its puts
//   on the wire; on an unordered one it is posted only once every earlier put to that node has
//   completed there, and no earlier count for the same word is still on its way (a late one
//   would take the newer count back). Flags for other words do not wait for each other.
//
// - staged, when it cannot (GPU memory over tcp or shm): the proxy packs the rows of the puts
//   waiting for a node (up to 30 pieces) from the heap into a send slot of pinned host memory,
//   then writes headers and payloads in one write, carrying immediate data (sender node, slot),
//   into the slot the destination keeps for this node: fewer, larger writes, which is what a
//   socket-based provider needs. The destination's proxy, on that arrival, unpacks each piece
//   into its heap and, once every earlier transfer from that node has been unpacked (slots carry
//   a per-pair sequence), stores each flag count after its data in stream order; when the unpack
//   has completed it returns the slot with a credit write. Credits bound what a sender has in
//   flight per destination.
//
// Either way the proxy is done with a command once the network has read its source (the direct
// write completed, or its rows were packed into a send slot): the queue's tail passes it then, in
// ticket order (mk/queue.h, Release), and a kernel's launch ends only after that, so that the
// caller's next writes never change what is still being sent.
//
// Every write in flight is timed: one that neither completes nor fails within the timeout stops
// the proxy with an error naming the node. On any error the proxy stores MK_QUEUE_FAILED (or
// MK_QUEUE_BAD_COMMAND) into the queue's abort word, so that spinning kernels give up, and keeps
// the message for error().
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_NET_PROXY_H
#define MK_RUNTIME_NET_PROXY_H

#include "mk/runtime/net/CommandQueue.h"
#include "mk/runtime/net/LocalMemory.h"
#include "mk/runtime/net/Transport.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace mkc::net {

class ProxyEngine; // the proxy thread's state (lib/net/proxy/Engine.h)

/// This rank's place on its rail, and the collective that exchanges endpoints along it.
struct Rail {
  int node = 0;
  int nodes = 1;
  /// Every node's blob, indexed by node; collective over the rail's ranks.
  std::function<std::vector<std::vector<std::byte>>(std::span<const std::byte>)> allGather;
};

/// This rank's symmetric heap block: what command offsets are relative to.
struct HeapBlock {
  std::uint64_t base = 0;
  std::size_t bytes = 0;
  MemoryKind kind = MemoryKind::Device;
};

struct ProxyOptions {
  std::uint32_t queueCapacity = 4096; ///< commands in the ring (a power of two)
  std::size_t stagingBytes = 1 << 20; ///< the queue's staging area
  enum class Protocol { Automatic, Direct, Staged } protocol = Protocol::Automatic;
  std::size_t slotBytes = 1 << 20; ///< staged: a slot's headers (1 KiB) and payloads
  std::uint32_t slotsPerPeer = 16; ///< staged: slots each node keeps for each other node
  std::uint32_t maxInFlight = 256; ///< writes posted and not completed, at most
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  std::vector<int> cpus; ///< where the proxy thread runs; empty: anywhere
  /// Run by the proxy's thread every millisecond or so; what it throws stops the proxy like a
  /// network error. The runtime checks there that its launches keep finishing: a kernel waiting
  /// for a node that died without a write in flight would otherwise wait forever.
  std::function<void()> watch;
};

/// Counters a benchmark or a log reads.
struct ProxyStatistics {
  std::uint64_t commands = 0;
  std::uint64_t writes = 0;
  std::uint64_t posts = 0; ///< Transport::post calls that took at least one write
  std::uint64_t bytes = 0; ///< payload bytes written to peers
};

class Proxy {
public:
  /// Registers the heap and the proxy's buffers with `transport`, exchanges endpoints along the
  /// rail and connects; collective over the rail. The thread starts with start().
  Proxy(Transport &transport, LocalMemory &memory, const HeapBlock &heap, const Rail &rail,
        const ProxyOptions &options = {});
  /// Stops the thread (stop()).
  ~Proxy();
  Proxy(const Proxy &) = delete;
  Proxy &operator=(const Proxy &) = delete;

  /// The queue kernels write into.
  CommandQueue &queue() { return *queue_; }
  std::string describe() const;

  void start();
  /// Finishes what was consumed, then stops the thread; the queue is aborted with
  /// MK_QUEUE_STOPPED unless it failed before. Idempotent.
  void stop();

  /// Why the proxy stopped with an error, if it did.
  std::optional<std::string> error() const;
  /// Throws NetworkError with error(), if there is one.
  void check() const;

  /// Waits until every command published so far has been carried out (writes completed, flags
  /// delivered here and at the peers as far as this proxy can see), or the proxy failed, or
  /// `timeout` passed; returns whether it drained.
  bool drain(std::chrono::milliseconds timeout);

  ProxyStatistics statistics() const;

private:
  void run();

  Transport &transport_;
  LocalMemory &memory_;
  std::unique_ptr<CommandQueue> queue_;
  std::unique_ptr<ProxyEngine> engine_;
  ProxyOptions options_;
  bool staged_ = false;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> idle_{true};
  mutable std::mutex errorMutex_;
  std::optional<std::string> error_;
};

} // namespace mkc::net

#endif // MK_RUNTIME_NET_PROXY_H
