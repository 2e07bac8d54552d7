//===- mk/runtime/net/Transport.h - one-sided writes between the ranks of a rail ---*- C++ -*-===//
//
// What the network proxy (Proxy.h) needs from a network: register memory, learn the peers'
// addresses, post one-sided writes (optionally carrying 4 bytes of immediate data that the peer
// sees as an arrival once the data is in place) and poll for completions. Peers are the ranks of
// this rank's rail: the rank with the same GPU index on every node, indexed by node.
//
// Backends: `fabric` (libfabric FI_RMA, any provider), `verbs` (rdma-core RC queue pairs) and
// `emulated` (a NIC model for nodes that share one host: peer copies between their GPUs, shaped
// by a bandwidth and a latency); makeTransport() picks one by name.
//
//   auto transport = mkc::net::makeTransport("fabric", config);
//   Region heap = transport->registerMemory(base, bytes, MemoryKind::Device);
//   auto names = rail.allGather(transport->address());    // every node's endpoint
//   transport->connect(names);
//   transport->post(writes);                              // then poll() for events
//
// A transport is used by one thread at a time (the proxy's); nothing in it is thread-safe.
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_NET_TRANSPORT_H
#define MK_RUNTIME_NET_TRANSPORT_H

#include "mk/runtime/driver/CudaDriver.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace mkc::net {

/// A network that cannot be used: no device, a peer unreachable, a transfer rejected. The
/// message names the backend, the peer (by node) and the call that failed.
class NetworkError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

enum class MemoryKind { Host, Device };

/// A local registration, and what a peer needs to write into it.
struct RemoteRegion {
  std::uint64_t address = 0; ///< what the peer passes as the remote address of offset 0
  std::uint64_t key = 0;     ///< the remote key
  std::uint64_t bytes = 0;
};

struct Region {
  int id = -1;         ///< names the region in Write::localRegion
  RemoteRegion remote; ///< to hand to the peers (through the rail's all-gather)
};

/// What a backend guarantees; the proxy builds its protocol on it.
struct Capabilities {
  /// Registers GPU memory (MemoryKind::Device): data moves heap to heap, without staging.
  bool deviceMemory = false;
  /// Writes to one peer are placed in the order they were posted, so a flag written after data
  /// is seen after it (reliable-connected queue pairs, one stream per peer).
  bool orderedWrites = false;
  /// Writes can carry immediate data (Write::immediate).
  bool immediateData = false;
  /// Largest single write, and writes posted but not completed.
  std::size_t maxWriteBytes = 0;
  std::size_t maxInFlight = 0;
};

/// A one-sided write of `rows` rows of `rowBytes` bytes: from `localPitch` apart at
/// `localOffset` of local region `localRegion` to `remotePitch` apart at `remoteOffset` of a
/// region of node `peer` (described by `remote`). With `immediate`, the peer gets an
/// Event::Arrived carrying it once every byte is in place. Every backend takes any number of rows
/// (one operation per row where the network has no strided writes) and reports the write once.
struct Write {
  int localRegion = -1;
  std::uint64_t localOffset = 0;
  int peer = -1;
  RemoteRegion remote;
  std::uint64_t remoteOffset = 0;
  std::uint64_t rowBytes = 0;
  std::uint32_t rows = 1;
  std::uint64_t localPitch = 0;
  std::uint64_t remotePitch = 0;
  std::optional<std::uint32_t> immediate;
  std::uint64_t context = 0; ///< returned in this write's Event
};

struct Event {
  enum class Kind {
    Completed, ///< a posted write is complete at the peer (its bytes there)
    Arrived,   ///< a peer's write with immediate data landed here
    Failed,    ///< a posted write failed
  };
  Kind kind = Kind::Completed;
  std::uint64_t context = 0; ///< Completed, Failed: the write's
  int peer = -1; ///< the peer written (Completed, Failed) or writing (Arrived), -1 if unknown
  std::uint32_t immediate = 0; ///< Arrived
  std::string error;           ///< Failed: what went wrong, naming the peer
};

class Transport {
public:
  virtual ~Transport() = default;

  /// "fabric (tcp;ofi_rxm)", "verbs (mlx5_0 port 1)", "emulated (50 GB/s, 3 us)".
  virtual std::string describe() const = 0;
  virtual Capabilities capabilities() const = 0;

  /// Registers `bytes` at `base` for local reads and remote writes. Host memory must stay
  /// allocated (and pinned, for a GPU to reach it) as long as the transport lives.
  virtual Region registerMemory(void *base, std::size_t bytes, MemoryKind kind) = 0;

  /// This endpoint's name, for every peer to pass to connect().
  virtual std::vector<std::byte> address() = 0;
  /// Connects to the peers: `addresses[n]` is node n's (this node's own included).
  virtual void connect(int self, const std::vector<std::vector<std::byte>> &addresses) = 0;

  /// Posts writes in order; returns how many it took (fewer when the network is busy: post the
  /// rest after polling). Throws NetworkError for a write it can never carry out.
  virtual std::size_t post(std::span<const Write> writes) = 0;
  /// Appends the events that happened since the last poll; returns how many. Also makes progress:
  /// a provider with manual progress moves data only while it is polled, on both sides.
  virtual std::size_t poll(std::vector<Event> &events) = 0;
};

/// Settings of a backend, from MKC_NET_* variables or the caller: "provider" (fabric: tcp, shm,
/// verbs, efa; default: the first that works), "address" (fabric: the interface address to bind,
/// e.g. 127.0.0.1), "device" (verbs: e.g. mlx5_0), "nodes" (verbs: the rail's length),
/// "bandwidth_gbps", "latency_us", "reorder", "copy_streams" (emulated).
using TransportConfig = std::map<std::string, std::string, std::less<>>;

/// This rank's GPU and how to meet the rail's other ranks on this host: what the emulated NIC
/// needs of the runtime.
struct GpuPlace {
  const cuda::Driver *driver = nullptr;
  CUcontext context = nullptr; ///< current on the threads that call the transport
  CUdevice device = 0;
  std::string token; ///< the same on the rail's ranks, and only there (NodeSockets)
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
};

/// The backend called `name` ("fabric", "verbs", "emulated": that one needs `gpu`); throws
/// NetworkError when it cannot be used here (e.g. "verbs: no RDMA device (ibv_get_device_list:
/// Function not implemented)").
std::unique_ptr<Transport> makeTransport(const std::string &name, const TransportConfig &config,
                                         const GpuPlace *gpu = nullptr);

std::unique_ptr<Transport> makeFabricTransport(const TransportConfig &config);
std::unique_ptr<Transport> makeVerbsTransport(const TransportConfig &config);
/// Settings: "bandwidth_gbps" (default 50: a 400 Gb/s NIC per GPU), "latency_us" (default 3),
/// "reorder" (1: writes land out of order, as on an unordered fabric; default 0), "copy_streams"
/// (streams the copies are spread over, default 4).
std::unique_ptr<Transport> makeEmulatedTransport(const TransportConfig &config,
                                                 const GpuPlace &gpu);

} // namespace mkc::net

#endif // MK_RUNTIME_NET_TRANSPORT_H
