//===- VerbsConnect.cpp - the verbs transport's address and its queue pairs connected ---===//
//
// address() names this node's port and, for every node, the queue pair meant for it (a
// versioned, little-endian encoding: nothing else on the rail's all-gather is a verbs endpoint);
// connect() checks every node's and brings each queue pair through RTR to RTS. The queue pairs
// themselves are created here too, for the constructor (VerbsDevice.cpp).
//
//===----------------------------------------------------------------------===//

#include "net/transport/verbs/VerbsTransport.h"

#include "mk/Support/ByteCodec.h"
#include "mk/runtime/support/Log.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>
#include <utility>

namespace mkc::net::verbs {

namespace {

// address(): "mkvb", then a version; nothing else on the rail's all-gather is a verbs endpoint.
constexpr std::uint32_t kAddressMagic = 0x6d6b7662;
constexpr std::uint16_t kAddressVersion = 1;

std::vector<std::byte> encode(const Endpoint &endpoint) {
  ByteWriter writer;
  writer.put(kAddressMagic).put(kAddressVersion);
  writer.put(endpoint.linkLayer).put(endpoint.port).put(endpoint.mtu).put(endpoint.lid);
  writer.bytes(std::as_bytes(std::span(endpoint.gid.raw)));
  writer.put(static_cast<std::uint32_t>(endpoint.queuePairs.size()));
  for (const Endpoint::QueuePairName &queuePair : endpoint.queuePairs)
    writer.put(queuePair.number).put(queuePair.psn);
  return writer.take();
}

Endpoint decode(std::span<const std::byte> bytes, int node) {
  const std::string what =
      fmt::format("verbs: connect: node {}'s address ({} bytes)", node, bytes.size());
  ByteReader<NetworkError> reader(bytes, what);
  if (reader.remaining() < sizeof kAddressMagic + sizeof kAddressVersion ||
      reader.get<std::uint32_t>() != kAddressMagic)
    throw NetworkError(what + " is not a verbs endpoint's");
  const auto version = reader.get<std::uint16_t>();
  if (version != kAddressVersion)
    throw NetworkError(fmt::format("verbs: connect: node {}'s address has version {}, this node's "
                                   "{}: every node must run the same mkc",
                                   node, version, kAddressVersion));
  Endpoint endpoint;
  endpoint.linkLayer = reader.get<std::uint8_t>();
  endpoint.port = reader.get<std::uint8_t>();
  endpoint.mtu = reader.get<std::uint8_t>();
  endpoint.lid = reader.get<std::uint16_t>();
  const std::span<const std::byte> gid = reader.bytes(sizeof endpoint.gid.raw);
  std::memcpy(endpoint.gid.raw, gid.data(), gid.size());
  // Each queue pair is read before it is kept: a corrupt count runs out of bytes, not memory.
  for (auto count = reader.get<std::uint32_t>(); count > 0; --count) {
    const auto number = reader.get<std::uint32_t>();
    const auto psn = reader.get<std::uint32_t>();
    endpoint.queuePairs.push_back({number, psn});
  }
  reader.expectEnd();
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

} // namespace

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

} // namespace mkc::net::verbs
