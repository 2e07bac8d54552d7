//===- VerbsWorkRequests.cpp - a Write as verbs work requests ---------------===//

#include "mk/runtime/net/transport/verbs/VerbsWorkRequests.h"

#include <endian.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>

namespace mkc::net::verbs {

namespace {

std::string describe(const Write &write) {
  return "verbs: write to node " + std::to_string(write.peer) + " (context " +
         std::to_string(write.context) + ")";
}

/// One past the last byte that `rows` rows of `rowBytes`, `pitch` apart from `offset`, touch;
/// nothing when that is beyond 64 bits.
std::optional<std::uint64_t> extentEnd(std::uint64_t offset, std::uint32_t rows,
                                       std::uint64_t rowBytes, std::uint64_t pitch) {
  if (rows == 0 || rowBytes == 0)
    return offset;
  const unsigned __int128 end = static_cast<unsigned __int128>(offset) +
                                static_cast<unsigned __int128>(rows - 1) * pitch + rowBytes;
  if (end > std::numeric_limits<std::uint64_t>::max())
    return std::nullopt;
  return static_cast<std::uint64_t>(end);
}

void requireWithin(const Write &write, const char *side, std::uint64_t offset, std::uint64_t pitch,
                   std::uint64_t regionBytes) {
  const std::optional<std::uint64_t> end = extentEnd(offset, write.rows, write.rowBytes, pitch);
  if (!end)
    throw NetworkError(describe(write) + ": its rows reach beyond 2^64 bytes into the " + side +
                       " region");
  if (*end > regionBytes)
    throw NetworkError(describe(write) + ": its rows end at byte " + std::to_string(*end) +
                       " of the " + side + " region, which has " + std::to_string(regionBytes) +
                       " bytes");
}

} // namespace

WorkRequests translateWrite(const Write &write, const LocalRegion &local,
                            const WorkRequestLimits &limits, std::uint64_t ticket) {
  if (limits.maxSge == 0 || limits.maxMessageBytes == 0 || limits.signalInterval == 0)
    throw NetworkError(describe(write) + ": the queue pair allows no work request (max_send_sge " +
                       std::to_string(limits.maxSge) + ", max_msg_sz " +
                       std::to_string(limits.maxMessageBytes) + ", signal interval " +
                       std::to_string(limits.signalInterval) + ")");
  requireWithin(write, "local", write.localOffset, write.localPitch, local.bytes);
  requireWithin(write, "remote", write.remoteOffset, write.remotePitch, write.remote.bytes);
  if (write.remote.key > std::numeric_limits<std::uint32_t>::max())
    throw NetworkError(describe(write) + ": remote key " + std::to_string(write.remote.key) +
                       " is not a verbs rkey (32 bits)");
  const auto rkey = static_cast<std::uint32_t>(write.remote.key);
  // An entry's length is 32 bits, whatever the port allows.
  const std::uint64_t maxRequestBytes =
      std::min<std::uint64_t>(limits.maxMessageBytes, std::numeric_limits<std::uint32_t>::max());

  WorkRequests chain;
  std::vector<std::size_t> firstEntry; // of each request
  std::uint64_t requestEnd = 0;        // the remote address after the last request's bytes
  std::uint64_t requestBytes = 0;
  const auto openRequest = [&](std::uint64_t remoteAddress) {
    ibv_send_wr request{};
    request.opcode = IBV_WR_RDMA_WRITE;
    request.wr.rdma.remote_addr = remoteAddress;
    request.wr.rdma.rkey = rkey;
    chain.requests.push_back(request);
    firstEntry.push_back(chain.entries.size());
    requestEnd = remoteAddress;
    requestBytes = 0;
  };

  const std::uint32_t rows = write.rowBytes == 0 ? 0 : write.rows;
  for (std::uint64_t row = 0; row < rows; ++row) {
    std::uint64_t localAddress = local.address + write.localOffset + row * write.localPitch;
    std::uint64_t remoteAddress =
        write.remote.address + write.remoteOffset + row * write.remotePitch;
    std::uint64_t left = write.rowBytes;
    while (left > 0) {
      // Bytes that continue the open request at the peer join it: in its last entry when they
      // also continue it locally, else in an entry of their own while the request has room.
      bool joins =
          !chain.requests.empty() && remoteAddress == requestEnd && requestBytes < maxRequestBytes;
      bool extendsEntry = false;
      if (joins) {
        const ibv_sge &last = chain.entries.back();
        extendsEntry = last.addr + last.length == localAddress;
        joins = extendsEntry || chain.entries.size() - firstEntry.back() < limits.maxSge;
      }
      if (!joins) {
        openRequest(remoteAddress);
        extendsEntry = false;
      }
      const std::uint64_t take = std::min(left, maxRequestBytes - requestBytes);
      if (extendsEntry)
        chain.entries.back().length += static_cast<std::uint32_t>(take);
      else
        chain.entries.push_back({localAddress, static_cast<std::uint32_t>(take), local.lkey});
      requestBytes += take;
      requestEnd += take;
      localAddress += take;
      remoteAddress += take;
      left -= take;
    }
  }
  // Nothing to carry: one empty request still completes, and carries the immediate.
  if (chain.requests.empty())
    openRequest(write.remote.address + write.remoteOffset);

  const std::size_t count = chain.requests.size();
  for (std::size_t index = 0; index < count; ++index) {
    ibv_send_wr &request = chain.requests[index];
    const std::size_t endEntry = index + 1 < count ? firstEntry[index + 1] : chain.entries.size();
    request.num_sge = static_cast<int>(endEntry - firstEntry[index]);
    request.sg_list = request.num_sge > 0 ? &chain.entries[firstEntry[index]] : nullptr;
    request.next = index + 1 < count ? &chain.requests[index + 1] : nullptr;

    const RequestKind kind = index + 1 == count                         ? RequestKind::Final
                             : (index + 1) % limits.signalInterval == 0 ? RequestKind::Intermediate
                                                                        : RequestKind::Unsignaled;
    request.wr_id = requestId(ticket, kind);
    if (kind != RequestKind::Unsignaled)
      request.send_flags |= IBV_SEND_SIGNALED;

    std::uint64_t bytes = 0;
    for (int entry = 0; entry < request.num_sge; ++entry)
      bytes += request.sg_list[entry].length;
    if (local.hostMemory && bytes > 0 && bytes <= limits.maxInlineBytes)
      request.send_flags |= IBV_SEND_INLINE;
  }
  if (write.immediate) {
    ibv_send_wr &last = chain.requests.back();
    last.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    last.imm_data = htobe32(*write.immediate);
  }
  return chain;
}

} // namespace mkc::net::verbs
