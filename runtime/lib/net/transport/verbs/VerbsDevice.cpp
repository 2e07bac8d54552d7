//===- VerbsDevice.cpp - the verbs transport's device, port, GID, resources and memory ---===//
//
// The device and port chosen from the configuration (never an EFA device: its SRD queue pairs are
// unordered), the GID to route by, what the transport makes on them (protection domain, one
// completion queue, a queue pair per node in INIT with its receives posted), and memory
// registration. makeVerbsTransport() is here: the device first, the settings second.
//
//===----------------------------------------------------------------------===//

#include "net/transport/verbs/VerbsTransport.h"

#include "mk/Support/BoundedNumber.h"
#include "mk/runtime/driver/CudaDriver.h"
#include "mk/runtime/support/Log.h"

#include <infiniband/efadv.h>

#include <unistd.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>

namespace mkc::net::verbs {

namespace {

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

/// The integer under `key`, between `min` and `max`; nothing when the key is absent.
std::optional<long> configInteger(const TransportConfig &config, std::string_view key, long min,
                                  long max) {
  const auto entry = config.find(key);
  if (entry == config.end())
    return std::nullopt;
  const std::string &text = entry->second;
  const std::optional<std::int64_t> value = parseBoundedInt(text, min, max);
  if (!value)
    throw NetworkError(
        fmt::format("verbs: config {}={:?} is not an integer from {} to {}", key, text, min, max));
  return static_cast<long>(*value);
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

/// ::ffff:a.b.c.d, how a RoCE v2 GID carries an IPv4 address.
bool isIpv4Mapped(const ibv_gid &gid) {
  return std::all_of(gid.raw, gid.raw + 10, [](std::uint8_t b) { return !b; }) &&
         gid.raw[10] == 0xff && gid.raw[11] == 0xff;
}

} // namespace

std::string errorText(int error) { return std::generic_category().message(error); }

void reportRelease(const char *call, int error) {
  if (error)
    log::error("verbs: {}: {}", call, errorText(error));
}

bool isZero(const ibv_gid &gid) {
  return std::all_of(std::begin(gid.raw), std::end(gid.raw), [](std::uint8_t b) { return !b; });
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

} // namespace mkc::net::verbs

namespace mkc::net {

std::unique_ptr<Transport> makeVerbsTransport(const TransportConfig &config) {
  // The device first: without one, nothing else matters.
  auto [list, count] = verbs::listDevices();
  const verbs::Settings settings = verbs::parseSettings(config);
  verbs::OpenPort port = verbs::selectPort(
      std::span<ibv_device *const>(list.get(), static_cast<std::size_t>(count)), settings);
  // Opened devices stay usable once the list is freed.
  list.reset();
  return std::make_unique<verbs::VerbsTransport>(std::move(port), settings);
}

} // namespace mkc::net
