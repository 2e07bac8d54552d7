//===- FabricTransport.cpp - one-sided writes through libfabric (FI_RMA) -----===//
//
// One reliable-datagram endpoint (FI_EP_RDM) per transport, whatever the provider: tcp (as
// tcp;ofi_rxm), shm, verbs (verbs;ofi_rxm) or efa. Peers sit in an address vector, indexed by
// node; every write and every arrival goes through one completion queue.
//
// The provider may place writes in any order, so a Write of several rows whose last row carries
// immediate data posts that row only once the others completed: the peer's arrival then means
// every row is in place. Writes ask for delivery-complete semantics, so that a completion means
// the bytes are at the peer and not merely sent (describe() says when a provider refuses it).
//
// What the providers of libfabric 1.17 (Debian 12, Ubuntu 24.04) do when things go wrong, as the
// tests observe it:
// - tcp: a write with a bad remote key fails (FI_ECANCELED) within milliseconds, and so does
//   every write in flight to a peer that died; the connection to that peer stays broken, later
//   writes to it fail too.
// - shm: neither is reported. A bad key is dropped by the target without an answer, and a dead
//   peer never answers: the write never completes, and the provider refuses (-FI_EAGAIN) every
//   later write to that peer; only the caller's timeout (the proxy's) catches these. Worse, a
//   peer killed while it holds the spinlock of its shared region leaves fi_write (so post())
//   spinning on that lock forever. The processes take each other's spinlocks, so pollers that
//   outnumber the cores make shm crawl (tens of writes a second) unless they back off when idle.
//
//===----------------------------------------------------------------------===//

#include "mk/runtime/net/Transport.h"

#include "mk/runtime/support/Log.h"

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <string_view>
#include <utility>

namespace mkc::net {

namespace {

constexpr std::uint32_t kApiVersion = FI_VERSION(1, 17);

// Operations the transport keeps in flight at most, whatever queue depth a provider claims.
constexpr std::size_t kMaxOperations = 4096;

// Completion entries read per fi_cq_read.
constexpr std::size_t kCompletionBatch = 64;

// Providers this backend knows how to address, and the order in which it tries them when the
// configuration names none: hardware first, then tcp, which works wherever there is IP. shm only
// reaches the processes of one host, so it is never picked unasked.
constexpr std::array<std::string_view, 4> kKnownProviders = {"efa", "verbs", "tcp", "shm"};
constexpr std::array<std::string_view, 3> kDefaultProviders = {"efa", "verbs", "tcp"};

/// The message of a libfabric return code (negative, as calls return them).
std::string fabricError(long code) { return fi_strerror(static_cast<int>(-code)); }

/// Closes a libfabric object; destructors cannot throw, so a failure is logged.
struct CloseFid {
  template <typename Object> void operator()(Object *object) const {
    if (const int result = fi_close(&object->fid))
      log::error("fabric: fi_close: {}", fabricError(result));
  }
};
template <typename Object> using FabricPtr = std::unique_ptr<Object, CloseFid>;

struct FreeInfo {
  void operator()(fi_info *info) const { fi_freeinfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, FreeInfo>;

InfoPtr allocateInfo() {
  InfoPtr info(fi_allocinfo());
  if (!info)
    throw NetworkError("fabric: fi_allocinfo: out of memory");
  return info;
}

/// fi_freeinfo frees every string of an fi_info, so the hints own copies.
char *ownedCopy(std::string_view text) {
  char *copy = static_cast<char *>(std::malloc(text.size() + 1));
  if (!copy)
    throw NetworkError("fabric: out of memory");
  std::memcpy(copy, text.data(), text.size());
  copy[text.size()] = '\0';
  return copy;
}

/// An RDM endpoint of `provider` for one-sided writes carrying 4 bytes of immediate data.
InfoPtr endpointHints(std::string_view provider, bool deliveryComplete) {
  InfoPtr hints = allocateInfo();
  // FI_MSG and FI_RECV only serve providers with FI_RX_CQ_DATA, where an arrival consumes a
  // posted receive.
  hints->caps = FI_RMA | FI_WRITE | FI_REMOTE_WRITE | FI_MSG | FI_RECV;
  hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  hints->domain_attr->cq_data_size = sizeof(std::uint32_t);
  // One thread at a time uses a transport (Transport.h): the provider can skip its locks.
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  if (deliveryComplete)
    hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  hints->fabric_attr->prov_name = ownedCopy(provider);
  // shm names endpoints by strings and takes no node (it fails with FI_SOURCE and none).
  if (provider == "shm")
    hints->addr_format = FI_ADDR_STR;
  return hints;
}

struct Endpoint {
  InfoPtr info;
  bool deliveryComplete = false;
};

/// The endpoint description of `provider`, bound to `address` if it takes one; nullopt, with
/// `why`, when the provider offers none here.
std::optional<Endpoint> findEndpoint(std::string_view provider, const std::string &address,
                                     std::string &why) {
  const bool bindAddress = !address.empty() && provider != "shm";
  const char *node = bindAddress ? address.c_str() : nullptr;
  const std::uint64_t flags = bindAddress ? FI_SOURCE : 0;
  int result = 0;
  // Delivery complete when the provider can: a completion then means the bytes are placed at
  // the peer. Without it a completion only means they were sent, which a transport reports in
  // describe().
  for (const bool deliveryComplete : {true, false}) {
    InfoPtr hints = endpointHints(provider, deliveryComplete);
    fi_info *found = nullptr;
    result = fi_getinfo(kApiVersion, node, nullptr, flags, hints.get(), &found);
    if (result == 0)
      return Endpoint{InfoPtr(found), deliveryComplete};
    if (result != -FI_ENODATA)
      break;
  }
  // Tell a provider that lists nothing here (no device) from one lacking what writes need.
  InfoPtr bare = allocateInfo();
  bare->fabric_attr->prov_name = ownedCopy(provider);
  fi_info *any = nullptr;
  const int bareResult = fi_getinfo(kApiVersion, nullptr, nullptr, 0, bare.get(), &any);
  fi_freeinfo(any);
  if (bareResult != 0)
    why = fmt::format("fabric ({}): the provider lists no device here (fi_getinfo: {})", provider,
                      fabricError(bareResult));
  else
    why = fmt::format("fabric ({}): no reliable-datagram endpoint with RMA writes and remote CQ "
                      "data{} (fi_getinfo: {})",
                      provider, bindAddress ? " on " + address : "", fabricError(result));
  return std::nullopt;
}

class FabricTransport final : public Transport {
public:
  FabricTransport(std::string provider, Endpoint endpoint);

  std::string describe() const override;
  Capabilities capabilities() const override;
  Region registerMemory(void *base, std::size_t bytes, MemoryKind kind) override;
  std::vector<std::byte> address() override;
  void connect(int self, const std::vector<std::vector<std::byte>> &addresses) override;
  std::size_t post(std::span<const Write> writes) override;
  std::size_t poll(std::vector<Event> &events) override;

private:
  /// One fi_write in flight: a row of a Write.
  struct Operation {
    fi_context2 scratch; // the provider's until the completion (FI_CONTEXT2); first, so that the
                         // operation's address is its context
    std::uint64_t write = 0;
  };

  /// A Write taken by post(), until its last row completed or failed.
  struct PostedWrite {
    Write write;
    std::uint32_t reserved = 0; // operations set aside for its rows
    std::uint32_t nextRow = 0;  // the first row not posted yet
    std::uint32_t inFlight = 0;
    std::uint32_t completedRows = 0;
    bool failed = false;
  };

  struct LocalRegion {
    FabricPtr<fid_mr> mr;
    std::byte *base = nullptr;
    std::size_t bytes = 0;
    void *descriptor = nullptr;
  };

  std::string where() const { return "fabric (" + provider_ + ")"; }
  std::string peerName(int peer) const { return "node " + std::to_string(peer); }
  void check(int result, const char *call) const;

  void checkWrite(const Write &write) const;
  /// Posts the rows of `posted` that may go now: 0, -FI_EAGAIN when the provider is out of room,
  /// or the error of the fi_write that failed.
  long postReadyRows(std::uint64_t serial, PostedWrite &posted);
  std::string rowError(const PostedWrite &posted, long code) const;
  /// Posts the rows held back (behind a row that had to complete, or a busy provider).
  void advance();
  void fail(PostedWrite &posted, std::string message);
  /// Forgets a write once nothing of it is in flight and it completed or failed.
  void retireIfDone(std::map<std::uint64_t, PostedWrite>::iterator found);

  /// Reads the completion queue (which is also what moves data for manual-progress providers)
  /// into pending_.
  void readCompletions();
  void readError();
  /// The write operation `context` names, or null for another context (a posted receive, or none
  /// for a peer's write).
  Operation *ownOperation(void *context);
  void complete(const fi_cq_data_entry &entry);
  void postReceive(fi_context2 *receive);

  std::string provider_;
  InfoPtr info_;
  bool deliveryComplete_;
  bool receivesCarryData_; // FI_RX_CQ_DATA: each arrival consumes a posted receive
  std::size_t maxInFlight_;

  // Storage the provider holds pointers into: it outlives the endpoint (members are destroyed in
  // reverse order).
  std::vector<Operation> operations_;
  std::vector<fi_context2> receives_;

  FabricPtr<fid_fabric> fabric_;
  FabricPtr<fid_domain> domain_;
  FabricPtr<fid_cq> cq_;
  FabricPtr<fid_av> av_;
  FabricPtr<fid_ep> ep_;
  std::vector<LocalRegion> regions_;

  std::vector<Operation *> freeOperations_;
  std::size_t unreserved_;
  std::vector<fi_context2 *> receivesToPost_;
  std::uint64_t nextSerial_ = 0;
  std::map<std::uint64_t, PostedWrite> writes_;
  std::deque<std::uint64_t> heldBack_; // serials of writes with rows not posted yet, oldest first
  std::vector<Event> pending_;         // events read while posting, for the next poll
  std::vector<fi_addr_t> peers_;       // by node; FI_ADDR_NOTAVAIL for this node
  int self_ = -1;
};

FabricTransport::FabricTransport(std::string provider, Endpoint endpoint)
    : provider_(std::move(provider)), info_(std::move(endpoint.info)),
      deliveryComplete_(endpoint.deliveryComplete),
      receivesCarryData_((info_->mode & FI_RX_CQ_DATA) != 0),
      maxInFlight_(std::clamp<std::size_t>(info_->tx_attr->size, 1, kMaxOperations)),
      operations_(maxInFlight_), unreserved_(maxInFlight_) {
  fid_fabric *fabric = nullptr;
  check(fi_fabric(info_->fabric_attr, &fabric, nullptr), "fi_fabric");
  fabric_.reset(fabric);
  fid_domain *domain = nullptr;
  check(fi_domain(fabric_.get(), info_.get(), &domain, nullptr), "fi_domain");
  domain_.reset(domain);

  fi_cq_attr cqAttributes{};
  cqAttributes.format = FI_CQ_FORMAT_DATA; // the immediate data of arrivals
  cqAttributes.wait_obj = FI_WAIT_NONE;    // the proxy busy-polls
  fid_cq *cq = nullptr;
  check(fi_cq_open(domain_.get(), &cqAttributes, &cq, nullptr), "fi_cq_open");
  cq_.reset(cq);

  fi_av_attr avAttributes{};
  avAttributes.type = FI_AV_TABLE;
  fid_av *av = nullptr;
  check(fi_av_open(domain_.get(), &avAttributes, &av, nullptr), "fi_av_open");
  av_.reset(av);

  fid_ep *ep = nullptr;
  check(fi_endpoint(domain_.get(), info_.get(), &ep, nullptr), "fi_endpoint");
  ep_.reset(ep);
  check(fi_ep_bind(ep_.get(), &av_->fid, 0), "fi_ep_bind (address vector)");
  check(fi_ep_bind(ep_.get(), &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind (completion queue)");
  check(fi_enable(ep_.get()), "fi_enable");

  freeOperations_.reserve(operations_.size());
  for (Operation &operation : operations_)
    freeOperations_.push_back(&operation);
  if (receivesCarryData_) {
    receives_.resize(std::clamp<std::size_t>(info_->rx_attr->size, 1, kMaxOperations));
    for (fi_context2 &receive : receives_)
      postReceive(&receive);
  }
  log::info("{}: {} on {}, {} writes in flight at most", where(), describe(),
            info_->domain_attr->name, maxInFlight_);
}

void FabricTransport::check(int result, const char *call) const {
  if (result != 0)
    throw NetworkError(fmt::format("{}: {}: {}", where(), call, fabricError(result)));
}

std::string FabricTransport::describe() const {
  return fmt::format("fabric ({}, {})", info_->fabric_attr->prov_name,
                     deliveryComplete_ ? "delivery complete" : "transmit complete");
}

Capabilities FabricTransport::capabilities() const {
  Capabilities capabilities;
  // Host memory only: neither Debian's nor Ubuntu's libfabric is built with CUDA, and FI_HMEM
  // registration would need the CUDA device of the memory, which registerMemory is not told.
  capabilities.deviceMemory = false;
  // FI_EP_RDM promises no placement order between writes (and rxm spreads them over
  // connections), so every provider counts as unordered.
  capabilities.orderedWrites = false;
  capabilities.immediateData = true;
  capabilities.maxWriteBytes = static_cast<std::size_t>(std::min<std::uint64_t>(
      info_->ep_attr->max_msg_size, std::numeric_limits<std::size_t>::max()));
  capabilities.maxInFlight = maxInFlight_;
  return capabilities;
}

Region FabricTransport::registerMemory(void *base, std::size_t bytes, MemoryKind kind) {
  if (kind == MemoryKind::Device)
    throw NetworkError(where() + ": this provider cannot register GPU memory (this libfabric "
                                 "backend registers host memory only)");
  const std::uint64_t mrMode = info_->domain_attr->mr_mode;
  // Without FI_MR_PROV_KEY the application picks the keys: the region's index is unique.
  const std::uint64_t requestedKey = regions_.size() + 1;
  fid_mr *mr = nullptr;
  check(fi_mr_reg(domain_.get(), base, bytes, FI_WRITE | FI_REMOTE_WRITE, 0, requestedKey, 0, &mr,
                  nullptr),
        "fi_mr_reg");
  LocalRegion region{FabricPtr<fid_mr>(mr), static_cast<std::byte *>(base), bytes, nullptr};
  if (mrMode & FI_MR_ENDPOINT) {
    check(fi_mr_bind(mr, &ep_->fid, 0), "fi_mr_bind");
    check(fi_mr_enable(mr), "fi_mr_enable");
  }
  const std::uint64_t key = fi_mr_key(mr);
  if (key == FI_KEY_NOTAVAIL)
    throw NetworkError(where() + ": fi_mr_key: the region has no key to pass to peers");
  region.descriptor = fi_mr_desc(mr);
  regions_.push_back(std::move(region));

  Region result;
  result.id = static_cast<int>(regions_.size() - 1);
  // With FI_MR_VIRT_ADDR peers address the region by its virtual address, else by offset.
  result.remote.address = (mrMode & FI_MR_VIRT_ADDR) ? reinterpret_cast<std::uint64_t>(base) : 0;
  result.remote.key = key;
  result.remote.bytes = bytes;
  log::debug("{}: region {}: {} bytes at {}, key {:#x}", where(), result.id, bytes, base, key);
  return result;
}

std::vector<std::byte> FabricTransport::address() {
  std::size_t length = 0;
  const int sizing = fi_getname(&ep_->fid, nullptr, &length);
  if (sizing != -FI_ETOOSMALL)
    check(sizing, "fi_getname");
  std::vector<std::byte> name(length);
  check(fi_getname(&ep_->fid, name.data(), &length), "fi_getname");
  name.resize(length);
  return name;
}

void FabricTransport::connect(int self, const std::vector<std::vector<std::byte>> &addresses) {
  if (self_ >= 0)
    throw NetworkError(where() + ": connect: already connected");
  if (self < 0 || static_cast<std::size_t>(self) >= addresses.size())
    throw NetworkError(fmt::format("{}: connect: node {} is not among the {} addresses", where(),
                                   self, addresses.size()));
  std::vector<fi_addr_t> peers(addresses.size(), FI_ADDR_NOTAVAIL);
  for (std::size_t node = 0; node < addresses.size(); ++node) {
    if (node == static_cast<std::size_t>(self))
      continue;
    const std::string peer = peerName(static_cast<int>(node));
    if (addresses[node].empty())
      throw NetworkError(where() + ": connect: " + peer + " has an empty address");
    const int inserted =
        fi_av_insert(av_.get(), addresses[node].data(), 1, &peers[node], 0, nullptr);
    if (inserted < 0)
      throw NetworkError(
          fmt::format("{}: fi_av_insert of {}: {}", where(), peer, fabricError(inserted)));
    if (inserted != 1)
      throw NetworkError(where() + ": fi_av_insert of " + peer + ": the address was not taken");
  }
  peers_ = std::move(peers);
  self_ = self;
  log::debug("{}: node {} of {} connected", where(), self, addresses.size());
}

void FabricTransport::checkWrite(const Write &write) const {
  const auto reject = [&](const std::string &why) {
    throw NetworkError(where() + ": write to " + peerName(write.peer) + ": " + why);
  };
  if (self_ < 0)
    reject("not connected");
  if (write.peer < 0 || static_cast<std::size_t>(write.peer) >= peers_.size() ||
      write.peer == self_)
    reject(fmt::format("no such peer (this is node {} of {})", self_, peers_.size()));
  if (write.localRegion < 0 || static_cast<std::size_t>(write.localRegion) >= regions_.size())
    reject(fmt::format("no local region {}", write.localRegion));
  if (write.rows == 0)
    reject("no rows");
  if (const std::size_t largest = capabilities().maxWriteBytes; write.rowBytes > largest)
    reject(fmt::format("a row of {} bytes exceeds the provider's {}", write.rowBytes, largest));
  // The extent of the rows, where a single row ignores the pitches.
  const auto extent = [&](std::uint64_t pitch) {
    return (write.rows - 1) * pitch + write.rowBytes;
  };
  const LocalRegion &local = regions_[write.localRegion];
  if (write.localOffset > local.bytes || extent(write.localPitch) > local.bytes - write.localOffset)
    reject(fmt::format("the rows at offset {} overrun local region {} ({} bytes)",
                       write.localOffset, write.localRegion, local.bytes));
  if (write.remoteOffset > write.remote.bytes ||
      extent(write.remotePitch) > write.remote.bytes - write.remoteOffset)
    reject(fmt::format("the rows at offset {} overrun the remote region ({} bytes)",
                       write.remoteOffset, write.remote.bytes));
}

long FabricTransport::postReadyRows(std::uint64_t serial, PostedWrite &posted) {
  const Write &write = posted.write;
  const LocalRegion &local = regions_[write.localRegion];
  while (posted.nextRow < write.rows && posted.inFlight < posted.reserved) {
    const std::uint32_t row = posted.nextRow;
    const bool lastRow = row + 1 == write.rows;
    // The provider may place rows in any order: the row that announces the write goes last.
    if (lastRow && write.immediate && posted.completedRows < row)
      return 0;
    Operation *operation = freeOperations_.back();
    operation->write = serial;
    std::byte *source = local.base + write.localOffset + row * write.localPitch;
    const std::uint64_t destination =
        write.remote.address + write.remoteOffset + row * write.remotePitch;
    const long result =
        lastRow && write.immediate
            ? fi_writedata(ep_.get(), source, write.rowBytes, local.descriptor, *write.immediate,
                           peers_[write.peer], destination, write.remote.key, operation)
            : fi_write(ep_.get(), source, write.rowBytes, local.descriptor, peers_[write.peer],
                       destination, write.remote.key, operation);
    if (result != 0)
      return result;
    freeOperations_.pop_back();
    ++posted.nextRow;
    ++posted.inFlight;
  }
  return 0;
}

std::string FabricTransport::rowError(const PostedWrite &posted, long code) const {
  const bool carriesData = posted.write.immediate && posted.nextRow + 1 == posted.write.rows;
  return fmt::format("{}: {} to {}: {}", where(), carriesData ? "fi_writedata" : "fi_write",
                     peerName(posted.write.peer), fabricError(code));
}

std::size_t FabricTransport::post(std::span<const Write> writes) {
  advance();
  std::size_t taken = 0;
  bool progressed = false;
  for (const Write &write : writes) {
    checkWrite(write);
    const auto reserved =
        static_cast<std::uint32_t>(std::min<std::size_t>(write.rows, maxInFlight_));
    // Room for every row it may keep in flight, so that no write waits on another's rows.
    if (reserved > unreserved_)
      break;
    // The serial is spent only on a write that stays: a busy provider refuses many attempts.
    const std::uint64_t serial = nextSerial_;
    const auto found = writes_.emplace(serial, PostedWrite{write, reserved}).first;
    unreserved_ -= reserved;
    PostedWrite &posted = found->second;
    long result = postReadyRows(serial, posted);
    if (result == -FI_EAGAIN && posted.nextRow == 0 && !progressed) {
      // Out of room: completions (and, with manual progress, the provider's own queues) make
      // some, once per call, so that a call returns soon. Their events wait in pending_ for the
      // next poll.
      readCompletions();
      progressed = true;
      result = postReadyRows(serial, posted);
    }
    if (result == -FI_EAGAIN && posted.nextRow == 0) {
      writes_.erase(found);
      unreserved_ += reserved;
      break;
    }
    ++nextSerial_;
    if (result != 0 && result != -FI_EAGAIN) {
      // Not taken: rows of it already in flight finish without an event.
      posted.failed = true;
      const std::string error = rowError(posted, result);
      retireIfDone(found);
      throw NetworkError(error);
    }
    ++taken;
    if (posted.nextRow < write.rows)
      heldBack_.push_back(serial);
    if (result == -FI_EAGAIN)
      break;
  }
  return taken;
}

void FabricTransport::advance() {
  for (fi_context2 *receive : std::exchange(receivesToPost_, {}))
    postReceive(receive);
  for (auto serial = heldBack_.begin(); serial != heldBack_.end();) {
    const auto found = writes_.find(*serial);
    if (found == writes_.end() || found->second.failed) {
      serial = heldBack_.erase(serial);
      continue;
    }
    PostedWrite &posted = found->second;
    const long result = postReadyRows(*serial, posted);
    if (result == -FI_EAGAIN)
      return;
    if (result != 0) {
      fail(posted, rowError(posted, result));
      retireIfDone(found);
      serial = heldBack_.erase(serial);
      continue;
    }
    serial = posted.nextRow == posted.write.rows ? heldBack_.erase(serial) : std::next(serial);
  }
}

void FabricTransport::fail(PostedWrite &posted, std::string message) {
  if (posted.failed)
    return;
  posted.failed = true;
  Event event;
  event.kind = Event::Kind::Failed;
  event.context = posted.write.context;
  event.peer = posted.write.peer;
  event.error = std::move(message);
  pending_.push_back(std::move(event));
}

void FabricTransport::retireIfDone(std::map<std::uint64_t, PostedWrite>::iterator found) {
  const PostedWrite &posted = found->second;
  if (posted.inFlight > 0 || (!posted.failed && posted.completedRows < posted.write.rows))
    return;
  unreserved_ += posted.reserved;
  writes_.erase(found);
}

std::size_t FabricTransport::poll(std::vector<Event> &events) {
  readCompletions();
  advance();
  const std::size_t count = pending_.size();
  std::move(pending_.begin(), pending_.end(), std::back_inserter(events));
  pending_.clear();
  return count;
}

void FabricTransport::readCompletions() {
  std::array<fi_cq_data_entry, kCompletionBatch> entries;
  for (;;) {
    const ssize_t count = fi_cq_read(cq_.get(), entries.data(), entries.size());
    if (count == -FI_EAGAIN)
      return;
    if (count == -FI_EAVAIL) {
      readError();
      continue;
    }
    if (count < 0)
      throw NetworkError(fmt::format("{}: fi_cq_read: {}", where(), fabricError(count)));
    for (ssize_t i = 0; i < count; ++i)
      complete(entries[i]);
    // A short batch emptied the queue; a full one may have left more.
    if (static_cast<std::size_t>(count) < entries.size())
      return;
  }
}

void FabricTransport::complete(const fi_cq_data_entry &entry) {
  if (entry.flags & FI_REMOTE_CQ_DATA) {
    Event event;
    event.kind = Event::Kind::Arrived;
    event.immediate = static_cast<std::uint32_t>(entry.data);
    pending_.push_back(event);
    if (receivesCarryData_)
      postReceive(static_cast<fi_context2 *>(entry.op_context));
    return;
  }
  Operation *operation = ownOperation(entry.op_context);
  if (!operation) {
    // A provider may report peers' writes without data too: nothing to tell the proxy.
    return;
  }
  const auto found = writes_.find(operation->write);
  freeOperations_.push_back(operation);
  PostedWrite &posted = found->second;
  --posted.inFlight;
  ++posted.completedRows;
  if (!posted.failed && posted.completedRows == posted.write.rows) {
    Event event;
    event.kind = Event::Kind::Completed;
    event.context = posted.write.context;
    event.peer = posted.write.peer;
    pending_.push_back(event);
  }
  retireIfDone(found);
}

void FabricTransport::readError() {
  fi_cq_err_entry error{};
  const ssize_t count = fi_cq_readerr(cq_.get(), &error, 0);
  if (count == -FI_EAGAIN)
    return;
  if (count < 0)
    throw NetworkError(fmt::format("{}: fi_cq_readerr: {}", where(), fabricError(count)));
  std::array<char, 256> detail{};
  const char *providerError =
      fi_cq_strerror(cq_.get(), error.prov_errno, error.err_data, detail.data(), detail.size());
  // The provider's own words, where they add to the error's.
  std::string cause = fabricError(-error.err);
  if (providerError && cause != providerError)
    cause += fmt::format(" ({})", providerError);
  Operation *operation = ownOperation(error.op_context);
  if (!operation) {
    // Not a write of this node: a peer's write that failed here, or a receive.
    log::warning("{}: a completion failed here: {}", where(), cause);
    if (receivesCarryData_ && error.op_context)
      receivesToPost_.push_back(static_cast<fi_context2 *>(error.op_context));
    return;
  }
  const auto found = writes_.find(operation->write);
  freeOperations_.push_back(operation);
  PostedWrite &posted = found->second;
  --posted.inFlight;
  fail(posted,
       fmt::format("{}: write to {} failed: {}", where(), peerName(posted.write.peer), cause));
  retireIfDone(found);
}

FabricTransport::Operation *FabricTransport::ownOperation(void *context) {
  const auto *address = static_cast<const std::byte *>(context);
  const auto *first = reinterpret_cast<const std::byte *>(operations_.data());
  const auto *last = reinterpret_cast<const std::byte *>(operations_.data() + operations_.size());
  if (!address || std::less<>{}(address, first) || !std::less<>{}(address, last))
    return nullptr;
  return static_cast<Operation *>(context);
}

void FabricTransport::postReceive(fi_context2 *receive) {
  // Zero bytes: the receive only holds the immediate data of an arrival.
  const long result = fi_recv(ep_.get(), nullptr, 0, nullptr, FI_ADDR_UNSPEC, receive);
  if (result == -FI_EAGAIN)
    receivesToPost_.push_back(receive);
  else if (result != 0)
    throw NetworkError(fmt::format("{}: fi_recv: {}", where(), fabricError(result)));
}

} // namespace

std::unique_ptr<Transport> makeFabricTransport(const TransportConfig &config) {
  const auto setting = [&](std::string_view key) {
    const auto found = config.find(key);
    return found == config.end() ? std::string() : found->second;
  };
  const std::string requested = setting("provider");
  const std::string address = setting("address");
  if (!requested.empty() &&
      std::find(kKnownProviders.begin(), kKnownProviders.end(), requested) == kKnownProviders.end())
    throw NetworkError(fmt::format("fabric: unknown provider \"{}\" (known: {})", requested,
                                   fmt::join(kKnownProviders, ", ")));
  std::vector<std::string_view> candidates;
  if (requested.empty())
    candidates.assign(kDefaultProviders.begin(), kDefaultProviders.end());
  else
    candidates.push_back(requested);
  std::vector<std::string> reasons;
  for (const std::string_view provider : candidates) {
    std::string why;
    if (std::optional<Endpoint> endpoint = findEndpoint(provider, address, why))
      return std::make_unique<FabricTransport>(std::string(provider), std::move(*endpoint));
    log::debug("{}", why);
    reasons.push_back(std::move(why));
  }
  throw NetworkError(fmt::format("{}", fmt::join(reasons, "; ")));
}

} // namespace mkc::net
