//===- VerbsDataPath.cpp - the verbs transport's writes posted and completions polled ---===//
//
// A Write becomes a chain of work requests (VerbsWorkRequests.h) posted on its node's queue
// pair, whole or, when the send queue is short of slots, in parts as completions free them;
// completions become events: a write completed or failed, a peer's write with immediate data
// arrived (and its receive posted again). A queue pair that fails fails its waiting write and
// every later one to its node.
//
//===----------------------------------------------------------------------===//

#include "net/transport/verbs/VerbsTransport.h"

#include "mk/runtime/support/Log.h"

#include <endian.h>

#include <array>
#include <utility>

namespace mkc::net::verbs {

int VerbsTransport::postReceive(int node) {
  // Empty: a write with immediate places its bytes by remote address, none in the receive.
  ibv_recv_wr receive{};
  receive.wr_id = verbs::requestId(static_cast<std::uint64_t>(node), RequestKind::Receive);
  ibv_recv_wr *bad = nullptr;
  return ibv_post_recv(peers_[static_cast<std::size_t>(node)].queuePair.get(), &receive, &bad);
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

} // namespace mkc::net::verbs
