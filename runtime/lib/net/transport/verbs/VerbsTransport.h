//===- net/transport/verbs/VerbsTransport.h - the verbs transport's parts -*- C++ -*-===//
//
// Internal to MkNetVerbs: what the verbs transport's files share, divided by phase as NCCL's
// net_ib/ is:
//
// - VerbsDevice.cpp: the device, port and GID chosen from the configuration, the resources made
//   on them (protection domain, completion queue, queue pairs with receives posted) and memory
//   registration (host memory, GPU memory through DMA-BUF or nvidia-peermem);
// - VerbsConnect.cpp: the address a node hands its peers, and its queue pairs brought to RTS;
// - VerbsDataPath.cpp: writes posted as work requests (VerbsWorkRequests.h), completions
//   polled into events.
//
//   auto transport = makeVerbsTransport({{"nodes", "2"}});  // VerbsDevice.cpp
//   transport->connect(self, rail.allGather(transport->address())); // VerbsConnect.cpp
//   transport->post(writes); transport->poll(events);       // VerbsDataPath.cpp
//
// One port of one device (InfiniBand or RoCE), one protection domain, one completion queue, and a
// reliable-connected queue pair per node of the rail: node n's queue pair here is connected to
// this node's queue pair at node n (this node's own to itself). RC delivers a queue pair's writes
// in order and reports a write with immediate at the target only once all earlier bytes are
// placed, which is what Capabilities::orderedWrites and immediateData promise.
//
// address() must name the queue pair meant for every node before connect() says how many there
// are, so the node count comes from the configuration. Keys (TransportConfig):
//   nodes          required: the rail's node count (the proxy passes it)
//   device         e.g. mlx5_0; default: the first device whose `port` is active
//   port           default 1
//   gid_index      default: on RoCE the first RoCE v2 GID with an IPv4 address (else the first
//                  RoCE v2 GID, else 0); on InfiniBand 0, used only across subnets
//   traffic_class  RoCE/GRH traffic class, default 0
//   service_level  default 0
//
// Memory is registered without IBV_ACCESS_RELAXED_ORDERING: with it, PCIe may reorder the NIC's
// writes into memory, and a flag written after data could be seen before it.
//
// Send queue slots: a slot comes back when a signaled request at or after it completes. Every
// write's last request is signaled, and long chains every quarter queue (VerbsWorkRequests.h);
// a write the send queue has no room for waits, whole or in part, and is posted as completions
// free slots. Later writes to that node are not taken meanwhile (post() returns fewer), so writes
// to a node stay in order.
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_LIB_NET_TRANSPORT_VERBS_VERBSTRANSPORT_H
#define MK_RUNTIME_LIB_NET_TRANSPORT_VERBS_VERBSTRANSPORT_H

#include "mk/runtime/net/Transport.h"
#include "mk/runtime/net/transport/verbs/VerbsWorkRequests.h"

#include <infiniband/verbs.h>

#include <fmt/format.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace mkc::net::verbs {

// Send and receive work requests per queue pair, unless the device allows fewer.
constexpr std::uint32_t kQueueDepth = 512;
// Fewer than this, and writes could hardly overlap.
constexpr std::uint32_t kMinQueueDepth = 16;
// Scatter/gather entries per send request: rows contiguous at the peer gather this many.
constexpr std::uint32_t kMaxSendSge = 4;
// Requests this small from host memory go inline (flags, counters): no DMA read of the source.
constexpr std::uint32_t kMaxInlineBytes = 64;
constexpr int kPollBatch = 64;

// Reliable-connection attributes: a lost packet is retried after 4.096 us * 2^14 = 67 ms, 7
// times; a peer without a posted receive is retried for ever (7), 0.64 ms apart (12).
constexpr std::uint8_t kAckTimeout = 14;
constexpr std::uint8_t kRetryCount = 7;
constexpr std::uint8_t kRnrRetry = 7;
constexpr std::uint8_t kMinRnrTimer = 12;
constexpr std::uint8_t kHopLimit = 255;

std::string errorText(int error);
/// Destructors cannot throw, but a failed release must not pass unseen.
void reportRelease(const char *call, int error);

struct FreeDeviceList {
  void operator()(ibv_device **list) const { ibv_free_device_list(list); }
};
struct CloseDevice {
  void operator()(ibv_context *context) const {
    if (ibv_close_device(context))
      reportRelease("ibv_close_device", errno);
  }
};
struct DeallocatePd {
  void operator()(ibv_pd *pd) const { reportRelease("ibv_dealloc_pd", ibv_dealloc_pd(pd)); }
};
struct DestroyCq {
  void operator()(ibv_cq *cq) const { reportRelease("ibv_destroy_cq", ibv_destroy_cq(cq)); }
};
struct DestroyQp {
  void operator()(ibv_qp *qp) const { reportRelease("ibv_destroy_qp", ibv_destroy_qp(qp)); }
};
struct DeregisterMr {
  void operator()(ibv_mr *mr) const { reportRelease("ibv_dereg_mr", ibv_dereg_mr(mr)); }
};

using DeviceList = std::unique_ptr<ibv_device *[], FreeDeviceList>;
using DeviceContext = std::unique_ptr<ibv_context, CloseDevice>;
using ProtectionDomain = std::unique_ptr<ibv_pd, DeallocatePd>;
using CompletionQueue = std::unique_ptr<ibv_cq, DestroyCq>;
using QueuePair = std::unique_ptr<ibv_qp, DestroyQp>;
using MemoryRegion = std::unique_ptr<ibv_mr, DeregisterMr>;

struct Settings {
  int nodes = 0;
  std::optional<std::string> device;
  std::uint8_t port = 1;
  std::optional<int> gidIndex;
  std::uint8_t trafficClass = 0;
  std::uint8_t serviceLevel = 0;
};

struct OpenPort {
  DeviceContext context;
  std::string device;
  ibv_port_attr attributes{};
};

/// What a peer needs to connect to this node: the port's address and, for every node, the queue
/// pair meant for it.
struct Endpoint {
  struct QueuePairName {
    std::uint32_t number = 0;
    std::uint32_t psn = 0; ///< the first packet sequence number it sends
  };
  std::uint8_t linkLayer = IBV_LINK_LAYER_UNSPECIFIED;
  std::uint8_t port = 0;
  std::uint8_t mtu = 0; ///< enum ibv_mtu
  std::uint16_t lid = 0;
  ibv_gid gid{};
  std::vector<QueuePairName> queuePairs; ///< by node
};

/// The writes taken and not yet finished, by ticket: a slot and its generation, so that a
/// completion flushed for a write already finished (failed while part of it waited) finds nothing.
class WriteTable {
public:
  struct Entry {
    std::uint64_t context = 0;
    bool failed = false; ///< its Failed event is out
  };

  std::uint64_t add(std::uint64_t context) {
    std::uint32_t slot = 0;
    if (free_.empty()) {
      slot = static_cast<std::uint32_t>(slots_.size());
      slots_.emplace_back();
    } else {
      slot = free_.back();
      free_.pop_back();
    }
    Slot &entry = slots_[slot];
    entry.used = true;
    entry.entry = {context, false};
    return static_cast<std::uint64_t>(entry.generation) << 32 | slot;
  }

  Entry *find(std::uint64_t ticket) {
    const auto slot = static_cast<std::uint32_t>(ticket);
    if (slot >= slots_.size() || !slots_[slot].used || slots_[slot].generation != ticket >> 32)
      return nullptr;
    return &slots_[slot].entry;
  }

  void remove(std::uint64_t ticket) {
    if (!find(ticket))
      return;
    const auto slot = static_cast<std::uint32_t>(ticket);
    slots_[slot].used = false;
    slots_[slot].generation = (slots_[slot].generation + 1) & kGenerationMask;
    free_.push_back(slot);
  }

private:
  // Tickets stay below 2^62, as wr_ids need (verbs::requestId).
  static constexpr std::uint32_t kGenerationMask = (1u << 30) - 1;
  struct Slot {
    std::uint32_t generation = 0;
    bool used = false;
    Entry entry;
  };
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_;
};

/// Node `node`'s queue pair and what is posted on it.
struct Peer {
  /// The part of a write the send queue had no room for.
  struct Waiting {
    verbs::WorkRequests chain;
    std::size_t next = 0; ///< the first request not posted
    std::uint64_t ticket = 0;
  };

  QueuePair queuePair;
  std::uint32_t psn = 0;                  ///< the first packet sequence number this side sends
  std::uint64_t posted = 0;               ///< send requests posted, ever
  std::uint64_t retired = 0;              ///< of those, the ones whose slots are free again
  std::deque<std::uint64_t> signaledEnds; ///< `posted` after each pending signaled request
  std::optional<Waiting> waiting;
  std::string failure; ///< why the queue pair failed; empty while it works
};

class VerbsTransport final : public Transport {
public:
  VerbsTransport(OpenPort port, const Settings &settings);

  std::string describe() const override;
  Capabilities capabilities() const override;
  Region registerMemory(void *base, std::size_t bytes, MemoryKind kind) override;
  std::vector<std::byte> address() override;
  void connect(int self, const std::vector<std::vector<std::byte>> &addresses) override;
  std::size_t post(std::span<const Write> writes) override;
  std::size_t poll(std::vector<Event> &events) override;

private:
  struct Registration {
    MemoryRegion region;
    verbs::LocalRegion local;
  };

  std::string where() const { return fmt::format("{} port {}", device_, port_); }
  std::uint32_t randomPsn();
  QueuePair createQueuePair(int node);
  void modifyQueuePair(int node, ibv_qp_attr &attributes, int mask, const char *state);
  void connectQueuePair(int node, const Endpoint &remote, const Endpoint::QueuePairName &target);
  int postReceive(int node);
  ibv_mr *registerDeviceMemory(void *base, std::size_t bytes, int access);

  /// Posts what fits of node `node`'s waiting write; the error, when ibv_post_send fails.
  std::optional<std::string> postWaiting(int node);
  /// Forgets `peer`'s waiting write; completions of parts already posted find no write any more.
  void abandonWaiting(Peer &peer);
  /// Records that `node`'s queue pair failed, and fails its waiting write.
  void failPeer(int node, const std::string &reason, std::vector<Event> &events);
  void handleSend(const ibv_wc &completion, std::vector<Event> &events);
  void handleReceive(const ibv_wc &completion, std::vector<Event> &events);

  // Declared in creation order: destroyed queue pairs first, then the registrations, the
  // completion queue, the protection domain, and the device last.
  DeviceContext context_;
  const std::string device_;
  const std::uint8_t port_;
  const ibv_port_attr portAttributes_;
  const int nodes_;
  const std::uint8_t trafficClass_;
  const std::uint8_t serviceLevel_;
  int gidIndex_ = 0;
  ibv_gid gid_{};
  std::uint32_t depth_ = 0;
  std::uint32_t sendSge_ = 0;
  std::uint32_t inlineBytes_ = kMaxInlineBytes;
  verbs::WorkRequestLimits limits_;
  std::mt19937 random_;
  ProtectionDomain pd_;
  CompletionQueue cq_;
  std::vector<Registration> regions_;
  std::vector<Peer> peers_; // by node
  std::unordered_map<std::uint32_t, int> nodeOfQueuePair_;
  WriteTable writes_;
  std::size_t waitingPeers_ = 0;
  bool connected_ = false;
};

/// The RoCE GID to route by when none is configured (VerbsDevice.cpp).
int defaultRoceGidIndex(ibv_context *context, std::uint8_t port, int tableLength);
bool isZero(const ibv_gid &gid);

} // namespace mkc::net::verbs

#endif // MK_RUNTIME_LIB_NET_TRANSPORT_VERBS_VERBSTRANSPORT_H
