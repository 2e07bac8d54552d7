//===- mk/runtime/net/transport/verbs/VerbsWorkRequests.h - a Write as requests -*- C++ -*-===//
//
// The verbs backend's translation of a Write (Transport.h) into the chain of RDMA-write work
// requests that one ibv_post_send carries, kept apart from the device so that it can be tested
// without one.
//
// Rows become IBV_WR_RDMA_WRITE requests, each starting a message at one remote address: a row
// longer than the largest message is split, and rows that are contiguous at the peer share a
// request (its local pieces gathered by up to `maxSge` scatter/gather entries). With an immediate,
// the last request is IBV_WR_RDMA_WRITE_WITH_IMM: on a reliable-connected queue pair the peer's
// completion for it comes once every earlier request's bytes are in place.
//
// Signaling: the last request is signaled (one completion per Write), and so is every
// `signalInterval`-th one before it. A send queue's slots come back only when a signaled request
// completes, so a chain longer than the queue can be posted in parts, each ending in a signaled
// request. Every request's wr_id names the write (a ticket the caller chooses) and its kind, so
// that even the completions a failed queue pair flushes for unsignaled requests name their write.
//
//   WorkRequests chain = translateWrite(write, local, limits, ticket);
//   ibv_post_send(qp, chain.first(), &bad);
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_NET_TRANSPORT_VERBS_VERBSWORKREQUESTS_H
#define MK_RUNTIME_NET_TRANSPORT_VERBS_VERBSWORKREQUESTS_H

#include "mk/runtime/net/Transport.h"

#include <infiniband/verbs.h>

#include <cstdint>
#include <vector>

namespace mkc::net::verbs {

/// What a work request's completion means; the low two bits of its wr_id.
enum class RequestKind : std::uint64_t {
  Unsignaled = 0,   ///< completes only in error (flushed, or the request that failed)
  Intermediate = 1, ///< signaled only to return send-queue slots
  Final = 2,        ///< the write's last request: its completion is the write's
  Receive = 3,      ///< a receive posted for a peer's write with immediate
};

/// A wr_id: `tag` (a write's ticket, or a receive's peer node; below 2^62) and the kind.
constexpr std::uint64_t requestId(std::uint64_t tag, RequestKind kind) {
  return tag << 2 | static_cast<std::uint64_t>(kind);
}
constexpr RequestKind requestKind(std::uint64_t id) { return static_cast<RequestKind>(id & 3); }
constexpr std::uint64_t requestTag(std::uint64_t id) { return id >> 2; }

/// The registration a write reads from.
struct LocalRegion {
  std::uint64_t address = 0; ///< of offset 0
  std::uint32_t lkey = 0;
  std::uint64_t bytes = 0;
  /// The CPU can read it (host memory), so small requests may be posted inline. GPU memory must
  /// not be: ibv_post_send would copy an inline request's bytes with the CPU.
  bool hostMemory = false;
};

/// The queue pair's and the port's limits.
struct WorkRequestLimits {
  std::uint32_t maxSge = 1;          ///< scatter/gather entries per request (max_send_sge)
  std::uint64_t maxMessageBytes = 0; ///< bytes per request (the port's max_msg_sz)
  std::uint32_t signalInterval = 1;  ///< requests per signaled one, at most the send queue depth
  std::uint32_t maxInlineBytes = 0;  ///< the queue pair's max_inline_data
};

/// A chain of work requests and the entries they point to, which it owns: moving it keeps the
/// pointers valid, copying would not, so it only moves.
struct WorkRequests {
  std::vector<ibv_send_wr> requests; ///< requests[i].next == &requests[i + 1]; the last's is null
  std::vector<ibv_sge> entries;

  WorkRequests() = default;
  WorkRequests(WorkRequests &&) = default;
  WorkRequests &operator=(WorkRequests &&) = default;
  WorkRequests(const WorkRequests &) = delete;
  WorkRequests &operator=(const WorkRequests &) = delete;

  ibv_send_wr *first() { return requests.data(); }
};

/// The work requests that carry `write` from `local` (its local region) with `ticket` in their
/// wr_ids. Throws NetworkError, naming the write's peer and context, when a row lies outside
/// either region, its remote key is not a verbs key, or `limits` allow no request.
WorkRequests translateWrite(const Write &write, const LocalRegion &local,
                            const WorkRequestLimits &limits, std::uint64_t ticket);

} // namespace mkc::net::verbs

#endif // MK_RUNTIME_NET_TRANSPORT_VERBS_VERBSWORKREQUESTS_H
