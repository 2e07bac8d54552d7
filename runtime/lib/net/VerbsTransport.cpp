//===- VerbsTransport.cpp - one-sided writes over rdma-core RC queue pairs ---===//
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

#include "mk/runtime/CudaDriver.h"
#include "mk/runtime/Log.h"
#include "mk/runtime/net/Transport.h"
#include "mk/runtime/net/VerbsWorkRequests.h"

#include <infiniband/efadv.h>
#include <infiniband/verbs.h>

#include <endian.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>

namespace mkc::net {

namespace {

using verbs::RequestKind;

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

// address(): "mkvb", then a version; nothing else on the rail's all-gather is a verbs endpoint.
constexpr std::uint32_t kAddressMagic = 0x6d6b7662;
constexpr std::uint16_t kAddressVersion = 1;

std::string errorText(int error) { return std::generic_category().message(error); }

/// Destructors cannot throw, but a failed release must not pass unseen.
void reportRelease(const char *call, int error) {
  if (error)
    log::error("verbs: {}: {}", call, errorText(error));
}

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

/// A DMA-BUF file descriptor, closed on destruction: the registration holds its own reference.
class DmaBuf {
public:
  explicit DmaBuf(int fd) : fd_(fd) {}
  ~DmaBuf() {
    if (::close(fd_))
      reportRelease("close(DMA-BUF)", errno);
  }
  DmaBuf(const DmaBuf &) = delete;
  DmaBuf &operator=(const DmaBuf &) = delete;
  int get() const { return fd_; }

private:
  int fd_;
};

struct Settings {
  int nodes = 0;
  std::optional<std::string> device;
  std::uint8_t port = 1;
  std::optional<int> gidIndex;
  std::uint8_t trafficClass = 0;
  std::uint8_t serviceLevel = 0;
};

/// The integer under `key`, between `min` and `max`; nothing when the key is absent.
std::optional<long> configInteger(const TransportConfig &config, std::string_view key, long min,
                                  long max) {
  const auto entry = config.find(key);
  if (entry == config.end())
    return std::nullopt;
  const std::string &text = entry->second;
  long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min || value > max)
    throw NetworkError(
        fmt::format("verbs: config {}={:?} is not an integer from {} to {}", key, text, min, max));
  return value;
}

Settings parseSettings(const TransportConfig &config) {
  Settings settings;
  const std::optional<long> nodes = configInteger(config, "nodes", 1, 1 << 16);
  if (!nodes)
    throw NetworkError("verbs: config key \"nodes\" is required: address() names a queue pair for "
                       "every node of the rail, before connect() says how many there are");
  settings.nodes = static_cast<int>(*nodes);
  if (const auto device = config.find("device"); device != config.end())
    settings.device = device->second;
  settings.port = static_cast<std::uint8_t>(configInteger(config, "port", 1, 255).value_or(1));
  if (const std::optional<long> index = configInteger(config, "gid_index", 0, 65535))
    settings.gidIndex = static_cast<int>(*index);
  settings.trafficClass =
      static_cast<std::uint8_t>(configInteger(config, "traffic_class", 0, 255).value_or(0));
  settings.serviceLevel =
      static_cast<std::uint8_t>(configInteger(config, "service_level", 0, 15).value_or(0));
  return settings;
}

/// The devices; throws when there are none. This machine's kernel may have no RDMA support at
/// all: then the list is null with ENOSYS, not empty.
std::pair<DeviceList, int> listDevices() {
  int count = 0;
  errno = 0;
  DeviceList list(ibv_get_device_list(&count));
  if (!list)
    throw NetworkError(fmt::format("verbs: no RDMA device (ibv_get_device_list: {})",
                                   errno ? errorText(errno) : "failed"));
  if (count <= 0)
    throw NetworkError("verbs: no RDMA device (ibv_get_device_list found none)");
  return {std::move(list), count};
}

std::string efaRefusal(const std::string &device) {
  return device + " is an EFA device; its SRD queue pairs are unordered and not supported by this "
                  "backend yet; use MKC_NET=fabric with provider efa";
}

bool isEfa(ibv_context *context) {
  efadv_device_attr attributes{};
  return efadv_query_device(context, &attributes, sizeof attributes) == 0;
}

struct OpenPort {
  DeviceContext context;
  std::string device;
  ibv_port_attr attributes{};
};

/// The configured device, or the first one whose port is active. EFA devices are never taken;
/// when they are all there is, the error says what to use instead.
OpenPort selectPort(std::span<ibv_device *const> devices, const Settings &settings) {
  std::vector<std::string> names;
  std::vector<std::string> problems;
  std::optional<std::string> efa;
  for (ibv_device *device : devices) {
    const std::string name = ibv_get_device_name(device);
    names.push_back(name);
    if (settings.device && name != *settings.device)
      continue;
    DeviceContext context(ibv_open_device(device));
    if (!context) {
      problems.push_back(fmt::format("{}: ibv_open_device: {}", name, errorText(errno)));
      continue;
    }
    if (isEfa(context.get())) {
      efa = efa.value_or(name);
      continue;
    }
    if (device->transport_type != IBV_TRANSPORT_IB) {
      problems.push_back(fmt::format("{} is not InfiniBand or RoCE (node type {})", name,
                                     ibv_node_type_str(device->node_type)));
      continue;
    }
    ibv_port_attr attributes{};
    if (const int error = ibv_query_port(context.get(), settings.port, &attributes)) {
      problems.push_back(
          fmt::format("{}: ibv_query_port({}): {}", name, settings.port, errorText(error)));
      continue;
    }
    if (attributes.state != IBV_PORT_ACTIVE) {
      problems.push_back(fmt::format("{} port {} is not active ({})", name, settings.port,
                                     ibv_port_state_str(attributes.state)));
      continue;
    }
    return {std::move(context), name, attributes};
  }
  if (efa && problems.empty())
    throw NetworkError("verbs: " + efaRefusal(*efa));
  if (settings.device && problems.empty())
    throw NetworkError(fmt::format("verbs: no RDMA device named {} (there are: {})",
                                   *settings.device, fmt::join(names, ", ")));
  if (efa)
    problems.push_back(efaRefusal(*efa));
  throw NetworkError(fmt::format("verbs: no usable RDMA device: {}", fmt::join(problems, "; ")));
}

bool isZero(const ibv_gid &gid) {
  return std::all_of(std::begin(gid.raw), std::end(gid.raw), [](std::uint8_t b) { return !b; });
}

/// ::ffff:a.b.c.d, how a RoCE v2 GID carries an IPv4 address.
bool isIpv4Mapped(const ibv_gid &gid) {
  return std::all_of(gid.raw, gid.raw + 10, [](std::uint8_t b) { return !b; }) &&
         gid.raw[10] == 0xff && gid.raw[11] == 0xff;
}

/// The RoCE GID to route by when none is configured: RoCE v2 (UDP/IP, routable) with an IPv4
/// address, else any RoCE v2 one, else index 0.
int defaultRoceGidIndex(ibv_context *context, std::uint8_t port, int tableLength) {
  std::optional<int> anyV2;
  for (int index = 0; index < tableLength; ++index) {
    ibv_gid_entry entry{};
    // Unused entries fail (ENODATA); they are skipped like zero ones.
    if (ibv_query_gid_ex(context, port, static_cast<std::uint32_t>(index), &entry, 0) ||
        entry.gid_type != IBV_GID_TYPE_ROCE_V2 || isZero(entry.gid))
      continue;
    if (isIpv4Mapped(entry.gid))
      return index;
    anyV2 = anyV2.value_or(index);
  }
  return anyV2.value_or(0);
}

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

/// Fixed-width little-endian fields, whatever the host's order.
class AddressWriter {
public:
  template <typename Integer> void put(Integer value) {
    for (std::size_t byte = 0; byte < sizeof value; ++byte)
      bytes_.push_back(static_cast<std::byte>(static_cast<std::uint64_t>(value) >> (8 * byte)));
  }
  void put(const ibv_gid &gid) {
    for (std::uint8_t byte : gid.raw)
      bytes_.push_back(static_cast<std::byte>(byte));
  }
  std::vector<std::byte> take() { return std::move(bytes_); }

private:
  std::vector<std::byte> bytes_;
};

class AddressReader {
public:
  explicit AddressReader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  /// Whether every read so far found its bytes.
  bool complete() const { return complete_; }
  bool atEnd() const { return offset_ == bytes_.size(); }

  template <typename Integer> Integer get() {
    std::uint64_t value = 0;
    if (!take(sizeof(Integer)))
      return 0;
    for (std::size_t byte = 0; byte < sizeof(Integer); ++byte)
      value |= static_cast<std::uint64_t>(bytes_[offset_ - sizeof(Integer) + byte]) << (8 * byte);
    return static_cast<Integer>(value);
  }
  ibv_gid getGid() {
    ibv_gid gid{};
    if (take(sizeof gid.raw))
      std::memcpy(gid.raw, bytes_.data() + offset_ - sizeof gid.raw, sizeof gid.raw);
    return gid;
  }

private:
  bool take(std::size_t count) {
    if (!complete_ || bytes_.size() - offset_ < count) {
      complete_ = false;
      return false;
    }
    offset_ += count;
    return true;
  }
  std::span<const std::byte> bytes_;
  std::size_t offset_ = 0;
  bool complete_ = true;
};

std::vector<std::byte> encode(const Endpoint &endpoint) {
  AddressWriter writer;
  writer.put(kAddressMagic);
  writer.put(kAddressVersion);
  writer.put(endpoint.linkLayer);
  writer.put(endpoint.port);
  writer.put(endpoint.mtu);
  writer.put(endpoint.lid);
  writer.put(endpoint.gid);
  writer.put(static_cast<std::uint32_t>(endpoint.queuePairs.size()));
  for (const Endpoint::QueuePairName &queuePair : endpoint.queuePairs) {
    writer.put(queuePair.number);
    writer.put(queuePair.psn);
  }
  return writer.take();
}

Endpoint decode(std::span<const std::byte> bytes, int node) {
  AddressReader reader(bytes);
  const auto magic = reader.get<std::uint32_t>();
  const auto version = reader.get<std::uint16_t>();
  if (!reader.complete() || magic != kAddressMagic)
    throw NetworkError(
        fmt::format("verbs: connect: node {}'s address ({} bytes) is not a verbs endpoint's", node,
                    bytes.size()));
  if (version != kAddressVersion)
    throw NetworkError(fmt::format("verbs: connect: node {}'s address has version {}, this node's "
                                   "{}: every node must run the same mkc",
                                   node, version, kAddressVersion));
  Endpoint endpoint;
  endpoint.linkLayer = reader.get<std::uint8_t>();
  endpoint.port = reader.get<std::uint8_t>();
  endpoint.mtu = reader.get<std::uint8_t>();
  endpoint.lid = reader.get<std::uint16_t>();
  endpoint.gid = reader.getGid();
  const auto count = reader.get<std::uint32_t>();
  // Bounded by the bytes there are, so that a corrupt count cannot allocate much.
  for (std::uint32_t index = 0; index < count && reader.complete(); ++index) {
    const auto number = reader.get<std::uint32_t>();
    const auto psn = reader.get<std::uint32_t>();
    endpoint.queuePairs.push_back({number, psn});
  }
  if (!reader.complete() || !reader.atEnd())
    throw NetworkError(fmt::format(
        "verbs: connect: node {}'s address ({} bytes) is truncated or has trailing bytes", node,
        bytes.size()));
  return endpoint;
}

const char *linkLayerName(std::uint8_t linkLayer) {
  switch (linkLayer) {
  case IBV_LINK_LAYER_INFINIBAND:
    return "InfiniBand";
  case IBV_LINK_LAYER_ETHERNET:
    return "Ethernet (RoCE)";
  default:
    return "an unspecified link layer";
  }
}

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

VerbsTransport::VerbsTransport(OpenPort port, const Settings &settings)
    : context_(std::move(port.context)), device_(std::move(port.device)), port_(settings.port),
      portAttributes_(port.attributes), nodes_(settings.nodes),
      trafficClass_(settings.trafficClass), serviceLevel_(settings.serviceLevel),
      random_(std::random_device{}()) {
  ibv_device_attr device{};
  if (const int error = ibv_query_device(context_.get(), &device))
    throw NetworkError(fmt::format("verbs: {}: ibv_query_device: {}", device_, errorText(error)));
  if (nodes_ > device.max_qp)
    throw NetworkError(fmt::format("verbs: {} has at most {} queue pairs, {} nodes need one each",
                                   device_, device.max_qp, nodes_));
  // The one completion queue must hold a completion for every request that may be outstanding:
  // a send and a receive queue's worth per node.
  depth_ = std::min({kQueueDepth, static_cast<std::uint32_t>(device.max_qp_wr),
                     static_cast<std::uint32_t>(device.max_cqe) / (2 * nodes_)});
  if (depth_ < kMinQueueDepth)
    throw NetworkError(fmt::format(
        "verbs: {} cannot give {} nodes {} work requests each (max_qp_wr {}, max_cqe {})", device_,
        nodes_, kMinQueueDepth, device.max_qp_wr, device.max_cqe));
  sendSge_ = std::min(kMaxSendSge, static_cast<std::uint32_t>(std::max(device.max_sge, 1)));

  if (portAttributes_.link_layer == IBV_LINK_LAYER_ETHERNET)
    gidIndex_ = settings.gidIndex.value_or(
        defaultRoceGidIndex(context_.get(), port_, portAttributes_.gid_tbl_len));
  else
    gidIndex_ = settings.gidIndex.value_or(0);
  if (gidIndex_ >= portAttributes_.gid_tbl_len)
    throw NetworkError(fmt::format("verbs: {}: gid_index {} is past the GID table's {} entries",
                                   where(), gidIndex_, portAttributes_.gid_tbl_len));
  if (ibv_query_gid(context_.get(), port_, gidIndex_, &gid_))
    throw NetworkError(
        fmt::format("verbs: {}: ibv_query_gid({}): {}", where(), gidIndex_, errorText(errno)));
  if (portAttributes_.link_layer == IBV_LINK_LAYER_ETHERNET && isZero(gid_))
    throw NetworkError(fmt::format("verbs: {}: GID {} is empty; RoCE routes by GID (set "
                                   "gid_index, see show_gids)",
                                   where(), gidIndex_));

  pd_.reset(ibv_alloc_pd(context_.get()));
  if (!pd_)
    throw NetworkError(fmt::format("verbs: {}: ibv_alloc_pd: {}", device_, errorText(errno)));
  const int cqEntries = static_cast<int>(2 * depth_ * static_cast<std::uint32_t>(nodes_));
  cq_.reset(ibv_create_cq(context_.get(), cqEntries, nullptr, nullptr, 0));
  if (!cq_)
    throw NetworkError(fmt::format("verbs: {}: ibv_create_cq({} entries): {}", device_, cqEntries,
                                   errorText(errno)));

  limits_.maxSge = std::numeric_limits<std::uint32_t>::max();
  limits_.maxInlineBytes = std::numeric_limits<std::uint32_t>::max();
  limits_.maxMessageBytes = portAttributes_.max_msg_sz;
  limits_.signalInterval = depth_ / 4;
  peers_.resize(static_cast<std::size_t>(nodes_));
  for (int node = 0; node < nodes_; ++node) {
    Peer &peer = peers_[static_cast<std::size_t>(node)];
    peer.queuePair = createQueuePair(node);
    peer.psn = randomPsn();
    nodeOfQueuePair_[peer.queuePair->qp_num] = node;
    // Receives are posted before the peer can write: a write with immediate consumes one.
    ibv_qp_attr attributes{};
    attributes.qp_state = IBV_QPS_INIT;
    attributes.pkey_index = 0;
    attributes.port_num = port_;
    attributes.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    modifyQueuePair(node, attributes,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT");
    for (std::uint32_t receive = 0; receive < depth_; ++receive)
      if (const int error = postReceive(node))
        throw NetworkError(fmt::format("verbs: {}: ibv_post_recv for node {}: {}", where(), node,
                                       errorText(error)));
  }
}

std::uint32_t VerbsTransport::randomPsn() {
  // Random, so that packets of an earlier connection between the same queue pair numbers are
  // not taken for this one's.
  return std::uniform_int_distribution<std::uint32_t>(0, (1u << 24) - 1)(random_);
}

QueuePair VerbsTransport::createQueuePair(int node) {
  for (;;) {
    ibv_qp_init_attr attributes{};
    attributes.send_cq = cq_.get();
    attributes.recv_cq = cq_.get();
    attributes.qp_type = IBV_QPT_RC;
    attributes.sq_sig_all = 0;
    attributes.cap.max_send_wr = depth_;
    attributes.cap.max_recv_wr = depth_;
    attributes.cap.max_send_sge = sendSge_;
    attributes.cap.max_recv_sge = 1;
    attributes.cap.max_inline_data = inlineBytes_;
    QueuePair queuePair(ibv_create_qp(pd_.get(), &attributes));
    if (queuePair) {
      // The queue pair may hold more than asked for; the requests are built for what all hold.
      limits_.maxSge = std::min(limits_.maxSge, attributes.cap.max_send_sge);
      limits_.maxInlineBytes = std::min(limits_.maxInlineBytes, attributes.cap.max_inline_data);
      return queuePair;
    }
    const int error = errno;
    // Inline data is an optimisation; a device that refuses it still carries every write.
    if (error == EINVAL && inlineBytes_ > 0) {
      inlineBytes_ = 0;
      continue;
    }
    throw NetworkError(fmt::format(
        "verbs: {}: ibv_create_qp(RC, {} send and receive requests, {} entries) for node {}: {}",
        where(), depth_, sendSge_, node, errorText(error)));
  }
}

void VerbsTransport::modifyQueuePair(int node, ibv_qp_attr &attributes, int mask,
                                     const char *state) {
  if (const int error =
          ibv_modify_qp(peers_[static_cast<std::size_t>(node)].queuePair.get(), &attributes, mask))
    throw NetworkError(
        fmt::format("verbs: {}: moving node {}'s queue pair to {}: ibv_modify_qp: {}", where(),
                    node, state, errorText(error)));
}

int VerbsTransport::postReceive(int node) {
  // Empty: a write with immediate places its bytes by remote address, none in the receive.
  ibv_recv_wr receive{};
  receive.wr_id = verbs::requestId(static_cast<std::uint64_t>(node), RequestKind::Receive);
  ibv_recv_wr *bad = nullptr;
  return ibv_post_recv(peers_[static_cast<std::size_t>(node)].queuePair.get(), &receive, &bad);
}

std::string VerbsTransport::describe() const {
  if (portAttributes_.link_layer == IBV_LINK_LAYER_ETHERNET)
    return fmt::format("verbs ({} port {}, RoCE GID {})", device_, port_, gidIndex_);
  return fmt::format("verbs ({} port {})", device_, port_);
}

Capabilities VerbsTransport::capabilities() const {
  Capabilities capabilities;
  capabilities.deviceMemory = true;
  // RC places a queue pair's writes in order; registrations without relaxed ordering keep PCIe
  // from reordering them on the way into memory.
  capabilities.orderedWrites = true;
  capabilities.immediateData = true;
  capabilities.maxWriteBytes = portAttributes_.max_msg_sz;
  capabilities.maxInFlight = depth_;
  return capabilities;
}

ibv_mr *VerbsTransport::registerDeviceMemory(void *base, std::size_t bytes, int access) {
  const std::string what =
      fmt::format("verbs: {}: registering GPU memory at {} ({} bytes)", device_, base, bytes);
  const cuda::Driver &cu = cuda::Driver::get();
  if (!cu.available())
    throw NetworkError(what + " needs the CUDA driver: " + cu.unavailableReason());
  // DMA-BUF handles cover whole host pages; the registration starts at `base` within one.
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const auto address = reinterpret_cast<std::uintptr_t>(base);
  const std::uint64_t first = address / page * page;
  const std::uint64_t end = (address + bytes + page - 1) / page * page;
  int fd = -1;
  const CUresult result = cu.cuMemGetHandleForAddressRange(&fd, first, end - first,
                                                           CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  std::string dmaBufProblem;
  if (result == CUDA_SUCCESS) {
    const DmaBuf buffer(fd);
    if (ibv_mr *region =
            ibv_reg_dmabuf_mr(pd_.get(), address - first, bytes, address, buffer.get(), access))
      return region;
    const int error = errno;
    if (error != EOPNOTSUPP)
      throw NetworkError(what + ": ibv_reg_dmabuf_mr: " + errorText(error));
    dmaBufProblem = "ibv_reg_dmabuf_mr: " + errorText(error);
  } else if (result == CUDA_ERROR_NOT_SUPPORTED) {
    dmaBufProblem = "cuMemGetHandleForAddressRange: " + cu.describe(result);
  } else {
    throw NetworkError(what + ": cuMemGetHandleForAddressRange: " + cu.describe(result) +
                       " (the GPU's context must be current on this thread)");
  }
  // Without DMA-BUF (an older kernel or GPU driver), nvidia-peermem lets ibv_reg_mr pin GPU
  // memory directly.
  if (ibv_mr *region = ibv_reg_mr(pd_.get(), base, bytes, access))
    return region;
  const int error = errno;
  throw NetworkError(what + ": DMA-BUF is unavailable (" + dmaBufProblem +
                     ") and ibv_reg_mr failed too (" + errorText(error) +
                     "): use a kernel and GPU driver with DMA-BUF, or load nvidia-peermem");
}

Region VerbsTransport::registerMemory(void *base, std::size_t bytes, MemoryKind kind) {
  if (!base || bytes == 0)
    throw NetworkError(
        fmt::format("verbs: {}: cannot register {} bytes at {}", device_, bytes, base));
  // Never IBV_ACCESS_RELAXED_ORDERING: see capabilities().
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  MemoryRegion region(kind == MemoryKind::Device ? registerDeviceMemory(base, bytes, access)
                                                 : ibv_reg_mr(pd_.get(), base, bytes, access));
  if (!region)
    throw NetworkError(fmt::format("verbs: {}: ibv_reg_mr(host memory at {}, {} bytes): {}",
                                   device_, base, bytes, errorText(errno)));
  const auto address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(base));
  Region result;
  result.id = static_cast<int>(regions_.size());
  // Registered at their virtual addresses (iova == base): peers write to `base + offset`.
  result.remote = {address, region->rkey, bytes};
  const verbs::LocalRegion local{address, region->lkey, bytes, kind == MemoryKind::Host};
  regions_.push_back({std::move(region), local});
  return result;
}

std::vector<std::byte> VerbsTransport::address() {
  Endpoint endpoint;
  endpoint.linkLayer = portAttributes_.link_layer;
  endpoint.port = port_;
  endpoint.mtu = static_cast<std::uint8_t>(portAttributes_.active_mtu);
  endpoint.lid = portAttributes_.lid;
  endpoint.gid = gid_;
  for (const Peer &peer : peers_)
    endpoint.queuePairs.push_back({peer.queuePair->qp_num, peer.psn});
  return encode(endpoint);
}

void VerbsTransport::connectQueuePair(int node, const Endpoint &remote,
                                      const Endpoint::QueuePairName &target) {
  ibv_qp_attr attributes{};
  attributes.qp_state = IBV_QPS_RTR;
  attributes.path_mtu = static_cast<ibv_mtu>(std::min<int>(portAttributes_.active_mtu, remote.mtu));
  attributes.dest_qp_num = target.number;
  attributes.rq_psn = target.psn;
  attributes.max_dest_rd_atomic = 1;
  attributes.min_rnr_timer = kMinRnrTimer;
  attributes.ah_attr.dlid = remote.lid;
  attributes.ah_attr.sl = serviceLevel_;
  attributes.ah_attr.src_path_bits = 0;
  attributes.ah_attr.port_num = port_;
  // RoCE always routes by GID; InfiniBand by LID, unless the peer is in another subnet.
  if (portAttributes_.link_layer == IBV_LINK_LAYER_ETHERNET ||
      remote.gid.global.subnet_prefix != gid_.global.subnet_prefix) {
    attributes.ah_attr.is_global = 1;
    attributes.ah_attr.grh.dgid = remote.gid;
    attributes.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(gidIndex_);
    attributes.ah_attr.grh.hop_limit = kHopLimit;
    attributes.ah_attr.grh.traffic_class = trafficClass_;
    attributes.ah_attr.grh.flow_label = 0;
  }
  modifyQueuePair(node, attributes,
                  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                  "RTR");

  attributes = {};
  attributes.qp_state = IBV_QPS_RTS;
  attributes.timeout = kAckTimeout;
  attributes.retry_cnt = kRetryCount;
  attributes.rnr_retry = kRnrRetry;
  attributes.sq_psn = peers_[static_cast<std::size_t>(node)].psn;
  attributes.max_rd_atomic = 1;
  modifyQueuePair(node, attributes,
                  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
                  "RTS");
}

void VerbsTransport::connect(int self, const std::vector<std::vector<std::byte>> &addresses) {
  if (connected_)
    throw NetworkError("verbs: connect: already connected");
  if (static_cast<int>(addresses.size()) != nodes_ || self < 0 || self >= nodes_)
    throw NetworkError(fmt::format("verbs: connect: node {} of {} addresses, but config \"nodes\" "
                                   "was {}",
                                   self, addresses.size(), nodes_));
  std::vector<Endpoint> endpoints;
  for (int node = 0; node < nodes_; ++node) {
    Endpoint endpoint = decode(addresses[static_cast<std::size_t>(node)], node);
    if (static_cast<int>(endpoint.queuePairs.size()) != nodes_)
      throw NetworkError(fmt::format("verbs: connect: node {} was configured for {} nodes, this "
                                     "node ({}) for {}",
                                     node, endpoint.queuePairs.size(), self, nodes_));
    if (endpoint.linkLayer != portAttributes_.link_layer)
      throw NetworkError(fmt::format("verbs: connect: node {}'s port is on {}, this node's ({}) "
                                     "on {}",
                                     node, linkLayerName(endpoint.linkLayer), where(),
                                     linkLayerName(portAttributes_.link_layer)));
    endpoints.push_back(std::move(endpoint));
  }
  const Endpoint::QueuePairName &own =
      endpoints[static_cast<std::size_t>(self)].queuePairs[static_cast<std::size_t>(self)];
  if (own.number != peers_[static_cast<std::size_t>(self)].queuePair->qp_num)
    throw NetworkError(fmt::format(
        "verbs: connect: addresses[{}] is not this endpoint's address(): wrong `self`?", self));
  for (int node = 0; node < nodes_; ++node) {
    const Endpoint &remote = endpoints[static_cast<std::size_t>(node)];
    connectQueuePair(node, remote, remote.queuePairs[static_cast<std::size_t>(self)]);
  }
  connected_ = true;
  log::debug("verbs: node {} connected to {} nodes over {} ({} requests per queue pair)", self,
             nodes_, describe(), depth_);
}

std::optional<std::string> VerbsTransport::postWaiting(int node) {
  Peer &peer = peers_[static_cast<std::size_t>(node)];
  Peer::Waiting &waiting = *peer.waiting;
  std::vector<ibv_send_wr> &requests = waiting.chain.requests;
  const std::uint64_t room = depth_ - (peer.posted - peer.retired);
  // The longest run that fits and ends in a signaled request: an unsignaled tail would hold
  // slots that no completion gives back.
  std::size_t end = waiting.next;
  for (std::size_t index = waiting.next; index < requests.size() && index - waiting.next < room;
       ++index)
    if (requests[index].send_flags & IBV_SEND_SIGNALED)
      end = index + 1;
  if (end == waiting.next)
    return std::nullopt;

  ibv_send_wr &last = requests[end - 1];
  ibv_send_wr *const following = last.next;
  last.next = nullptr;
  ibv_send_wr *bad = nullptr;
  const int error = ibv_post_send(peer.queuePair.get(), &requests[waiting.next], &bad);
  last.next = following;
  // On failure, the requests before `bad` were posted.
  const std::size_t postedEnd = !error ? end
                                : bad  ? static_cast<std::size_t>(bad - requests.data())
                                       : waiting.next;
  for (std::size_t index = waiting.next; index < postedEnd; ++index) {
    ++peer.posted;
    if (requests[index].send_flags & IBV_SEND_SIGNALED)
      peer.signaledEnds.push_back(peer.posted);
  }
  waiting.next = postedEnd;
  if (error)
    return fmt::format("verbs: {}: ibv_post_send to node {}: {}", where(), node, errorText(error));
  if (waiting.next == requests.size()) {
    peer.waiting.reset();
    --waitingPeers_;
  }
  return std::nullopt;
}

void VerbsTransport::abandonWaiting(Peer &peer) {
  writes_.remove(peer.waiting->ticket);
  peer.waiting.reset();
  --waitingPeers_;
}

std::size_t VerbsTransport::post(std::span<const Write> writes) {
  if (!connected_)
    throw NetworkError("verbs: post: connect() first");
  std::size_t taken = 0;
  for (const Write &write : writes) {
    if (write.peer < 0 || write.peer >= nodes_)
      throw NetworkError(fmt::format("verbs: write (context {}) to node {}: there are {} nodes",
                                     write.context, write.peer, nodes_));
    if (write.localRegion < 0 || write.localRegion >= static_cast<int>(regions_.size()))
      throw NetworkError(fmt::format("verbs: write (context {}) to node {}: no local region {}",
                                     write.context, write.peer, write.localRegion));
    Peer &peer = peers_[static_cast<std::size_t>(write.peer)];
    if (!peer.failure.empty())
      throw NetworkError(fmt::format("verbs: write (context {}) to node {}: its queue pair "
                                     "failed: {}",
                                     write.context, write.peer, peer.failure));
    // Behind a waiting write, this one would overtake it.
    if (peer.waiting)
      break;
    const std::uint64_t ticket = writes_.add(write.context);
    try {
      peer.waiting = Peer::Waiting{
          verbs::translateWrite(write, regions_[static_cast<std::size_t>(write.localRegion)].local,
                                limits_, ticket),
          0, ticket};
    } catch (...) {
      writes_.remove(ticket);
      throw;
    }
    ++waitingPeers_;
    // The exception reports this write; later ones to the node are refused with it.
    if (std::optional<std::string> error = postWaiting(write.peer)) {
      peer.failure = *error;
      abandonWaiting(peer);
      throw NetworkError(*error);
    }
    ++taken;
  }
  return taken;
}

void VerbsTransport::failPeer(int node, const std::string &reason, std::vector<Event> &events) {
  Peer &peer = peers_[static_cast<std::size_t>(node)];
  if (peer.failure.empty())
    peer.failure = reason;
  if (!peer.waiting)
    return;
  if (WriteTable::Entry *write = writes_.find(peer.waiting->ticket); write && !write->failed) {
    Event event;
    event.kind = Event::Kind::Failed;
    event.context = write->context;
    event.peer = node;
    event.error = "verbs: write to node " + std::to_string(node) +
                  " was not posted: its queue pair failed: " + peer.failure;
    events.push_back(std::move(event));
  }
  abandonWaiting(peer);
}

void VerbsTransport::handleSend(const ibv_wc &completion, std::vector<Event> &events) {
  const auto found = nodeOfQueuePair_.find(completion.qp_num);
  if (found == nodeOfQueuePair_.end())
    return;
  const int node = found->second;
  Peer &peer = peers_[static_cast<std::size_t>(node)];
  const RequestKind kind = verbs::requestKind(completion.wr_id);
  const std::uint64_t ticket = verbs::requestTag(completion.wr_id);
  WriteTable::Entry *write = writes_.find(ticket);

  if (completion.status == IBV_WC_SUCCESS) {
    // Signaled requests of a queue pair complete in the order they were posted.
    if (!peer.signaledEnds.empty()) {
      peer.retired = peer.signaledEnds.front();
      peer.signaledEnds.pop_front();
    }
    if (kind == RequestKind::Final && write) {
      Event event;
      event.kind = Event::Kind::Completed;
      event.context = write->context;
      event.peer = node;
      events.push_back(std::move(event));
      writes_.remove(ticket);
    }
    return;
  }

  // After the first failure the queue pair is in error and flushes the rest, signaled or not.
  std::string error = fmt::format("verbs: write to node {} failed on {}: {} (status {}, vendor "
                                  "error {:#x})",
                                  node, where(), ibv_wc_status_str(completion.status),
                                  static_cast<int>(completion.status), completion.vendor_err);
  if (completion.status == IBV_WC_WR_FLUSH_ERR && !peer.failure.empty())
    error += "; the queue pair had failed: " + peer.failure;
  if (write && !write->failed) {
    Event event;
    event.kind = Event::Kind::Failed;
    event.context = write->context;
    event.peer = node;
    event.error = error;
    events.push_back(std::move(event));
    write->failed = true;
  }
  if (write && kind == RequestKind::Final)
    writes_.remove(ticket);
  failPeer(node, error, events);
}

void VerbsTransport::handleReceive(const ibv_wc &completion, std::vector<Event> &events) {
  const auto node = static_cast<int>(verbs::requestTag(completion.wr_id));
  Peer &peer = peers_[static_cast<std::size_t>(node)];
  if (completion.status != IBV_WC_SUCCESS) {
    // No write of this node's fails with it, so no event says so: the log does, once.
    if (peer.failure.empty())
      log::error("verbs: receiving from node {} failed on {}: {} (status {}, vendor error {:#x})",
                 node, where(), ibv_wc_status_str(completion.status),
                 static_cast<int>(completion.status), completion.vendor_err);
    failPeer(node,
             fmt::format("verbs: receiving from node {} failed: {}", node,
                         ibv_wc_status_str(completion.status)),
             events);
    return;
  }
  if (completion.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (completion.wc_flags & IBV_WC_WITH_IMM)) {
    Event event;
    event.kind = Event::Kind::Arrived;
    event.peer = node;
    event.immediate = be32toh(completion.imm_data);
    events.push_back(std::move(event));
  }
  if (const int error = postReceive(node)) {
    const std::string reason =
        fmt::format("verbs: {}: ibv_post_recv for node {}: {}", where(), node, errorText(error));
    log::error("{}", reason);
    failPeer(node, reason, events);
  }
}

std::size_t VerbsTransport::poll(std::vector<Event> &events) {
  const std::size_t before = events.size();
  std::array<ibv_wc, kPollBatch> completions;
  const int count = ibv_poll_cq(cq_.get(), kPollBatch, completions.data());
  if (count < 0)
    throw NetworkError(fmt::format("verbs: {}: ibv_poll_cq failed ({})", device_, count));
  // A failed completion's opcode is undefined: the wr_id says whether it was a receive.
  for (int index = 0; index < count; ++index) {
    const ibv_wc &completion = completions[static_cast<std::size_t>(index)];
    if (verbs::requestKind(completion.wr_id) == RequestKind::Receive)
      handleReceive(completion, events);
    else
      handleSend(completion, events);
  }
  // Completions gave slots back: post what waits for them.
  for (int node = 0; node < nodes_ && waitingPeers_ > 0; ++node)
    if (peers_[static_cast<std::size_t>(node)].waiting)
      if (std::optional<std::string> error = postWaiting(node))
        failPeer(node, *error, events);
  return events.size() - before;
}

} // namespace

std::unique_ptr<Transport> makeVerbsTransport(const TransportConfig &config) {
  // The device first: without one, nothing else matters.
  auto [list, count] = listDevices();
  const Settings settings = parseSettings(config);
  OpenPort port = selectPort(
      std::span<ibv_device *const>(list.get(), static_cast<std::size_t>(count)), settings);
  // Opened devices stay usable once the list is freed.
  list.reset();
  return std::make_unique<VerbsTransport>(std::move(port), settings);
}

} // namespace mkc::net
