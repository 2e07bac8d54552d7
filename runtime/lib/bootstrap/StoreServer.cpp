//===- bootstrap/StoreServer.cpp - rank 0's store service ---===//
//
// The service of mk/runtime/bootstrap/Bootstrap.h on a thread of its own, polling its listener,
// its wake-up descriptor and every connection: hellos admitted or rejected with the reason,
// contributions gathered into one operation at a time, answered once every rank arrived, or the
// store failed for everyone at the earliest deadline or when a rank's connection closes without a
// goodbye.
//
//===----------------------------------------------------------------------===//

#include "bootstrap/StoreProtocol.h"

#include "mk/runtime/support/Log.h"

#include <fmt/format.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <thread>
#include <utility>

namespace mkc::bootstrap {

namespace {

/// Admits ranks and runs the operations, on a thread of its own so that it answers whatever
/// rank 0's own thread is doing. Everything but the wake-up descriptor belongs to that thread.
class ServerThread final : public StoreServer {
public:
  ServerThread(int worldSize, const Rendezvous &rendezvous)
      : worldSize_(worldSize), tokenHash_(fnv1a(rendezvous.jobToken)),
        flushTimeout_(rendezvous.timeout), listener_(listenAt(rendezvous)),
        wakeup_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), ranks_(worldSize, RankState::Absent),
        rankConnections_(worldSize, nullptr) {
    if (!wakeup_)
      throwErrno("eventfd");
    operation_.contributions.resize(worldSize);
    thread_ = std::thread([this] { serve(); });
  }

  ~ServerThread() override {
    const std::uint64_t stop = 1;
    while (::write(wakeup_.get(), &stop, sizeof stop) < 0 && errno == EINTR) {
    }
    thread_.join();
  }

private:
  enum class RankState { Absent, Joined, Left, Dead };

  struct Connection {
    UniqueFd socket;
    std::string peer;
    Deadline helloDeadline;
    std::optional<int> rank; // once admitted
    Bytes input;
    // Messages to send; a result is shared by the connections of all ranks.
    std::deque<std::shared_ptr<const Bytes>> output;
    std::size_t outputSent = 0; // of output.front()
    bool closeWhenSent = false; // a rejected connection gets its reason first
    bool closed = false;
  };

  /// The operation in progress: operations are collective, so there is one at a time.
  struct PendingOperation {
    std::uint64_t sequence = 0;
    Operation kind = Operation::AllGather;
    int firstRank = -1; // the rank whose call set `kind`
    std::vector<std::optional<Bytes>> contributions;
    int arrived = 0;
    Deadline deadline = Deadline::max();
    Timeout expiringTimeout{}; // the timeout that set `deadline`
  };

  void serve() {
    try {
      loop();
    } catch (const std::exception &error) {
      // Closing every connection tells the ranks now, rather than at their timeouts.
      log::error("store: the service thread failed: {}", error.what());
      connections_.clear();
      listener_ = UniqueFd();
    }
  }

  void loop() {
    std::optional<Deadline> stopBy;
    std::vector<pollfd> events;
    for (;;) {
      events.clear();
      events.push_back({wakeup_.get(), static_cast<short>(stopBy ? 0 : POLLIN), 0});
      events.push_back({listener_.get(), static_cast<short>(stopBy ? 0 : POLLIN), 0});
      for (const auto &connection : connections_)
        events.push_back({connection->socket.get(),
                          static_cast<short>(POLLIN | (connection->output.empty() ? 0 : POLLOUT)),
                          0});
      if (::poll(events.data(), events.size(), millisecondsUntil(nextDeadline(stopBy))) < 0) {
        if (errno == EINTR)
          continue;
        throwErrno("poll");
      }
      if (events[0].revents)
        stopBy = deadlineAfter(flushTimeout_);
      // accept() appends to connections_ after the entries polled.
      for (std::size_t i = 2; i < events.size(); ++i)
        if (events[i].revents & (POLLIN | POLLHUP | POLLERR))
          receive(*connections_[i - 2]);
      if (events[1].revents & POLLIN)
        accept();
      expire(Clock::now());
      for (const auto &connection : connections_)
        if (!connection->closed && !connection->output.empty())
          send(*connection);
      std::erase_if(connections_, [](const auto &connection) { return connection->closed; });
      if (stopBy &&
          (Clock::now() >= *stopBy || std::ranges::all_of(connections_, [](const auto &connection) {
             return connection->output.empty();
           })))
        return;
    }
  }

  Deadline nextDeadline(std::optional<Deadline> stopBy) const {
    Deadline next = stopBy.value_or(Deadline::max());
    if (failure_.empty() && operation_.arrived > 0)
      next = std::min(next, operation_.deadline);
    for (const auto &connection : connections_)
      if (!connection->rank)
        next = std::min(next, connection->helloDeadline);
    return next;
  }

  void accept() {
    for (;;) {
      sockaddr_storage address{};
      socklen_t length = sizeof address;
      UniqueFd socket(::accept4(listener_.get(), reinterpret_cast<sockaddr *>(&address), &length,
                                SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!socket) {
        if (errno == EINTR || errno == ECONNABORTED)
          continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
          log::warning("store: accept: {}", errorText(errno));
        return;
      }
      std::string peer = peerName(address, length);
      if (std::ranges::count_if(connections_, [](const auto &c) { return !c->rank; }) >=
          static_cast<std::ptrdiff_t>(kMaxWaitingConnections)) {
        log::warning("store: dropped a connection from {}: {} others have not said hello yet", peer,
                     kMaxWaitingConnections);
        continue;
      }
      setNoDelay(socket.get());
      auto connection = std::make_unique<Connection>();
      connection->socket = std::move(socket);
      connection->peer = std::move(peer);
      connection->helloDeadline = deadlineAfter(kHelloTimeout);
      connections_.push_back(std::move(connection));
    }
  }

  void receive(Connection &connection) {
    std::array<std::byte, 64 * 1024> chunk;
    bool ended = false;
    while (!connection.closed) {
      // Until it is admitted, a connection is read no further than its hello.
      const std::size_t wanted =
          connection.rank ? chunk.size() : kHelloBytes - connection.input.size();
      if (wanted == 0)
        break;
      ssize_t received = ::recv(connection.socket.get(), chunk.data(), wanted, 0);
      if (received > 0) {
        if (!connection.closeWhenSent)
          connection.input.insert(connection.input.end(), chunk.begin(), chunk.begin() + received);
        continue;
      }
      if (received < 0 && errno == EINTR)
        continue;
      ended = received == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
      break;
    }
    if (!connection.rank && !connection.closeWhenSent)
      admit(connection);
    if (connection.rank && !connection.closed)
      handleFrames(connection);
    if (ended && !connection.closed)
      lost(connection);
  }

  void admit(Connection &connection) {
    const auto magic = std::as_bytes(std::span(kMagic));
    const std::size_t checkable = std::min(connection.input.size(), magic.size());
    if (!std::equal(magic.begin(), magic.begin() + checkable, connection.input.begin())) {
      log::warning("store: dropped a connection from {}: it does not speak the store protocol",
                   connection.peer);
      close(connection);
      return;
    }
    if (connection.input.size() < kHelloBytes)
      return;
    ByteReader<BootstrapError> hello(connection.input);
    hello.bytes(magic.size());
    const std::uint32_t version = hello.get<std::uint32_t>();
    const std::uint32_t rank = hello.get<std::uint32_t>();
    const std::uint32_t worldSize = hello.get<std::uint32_t>();
    const std::uint64_t tokenHash = hello.get<std::uint64_t>();
    connection.input.clear();
    if (std::string problem = admissionProblem(version, rank, worldSize, tokenHash);
        !problem.empty()) {
      log::warning("store: rejected {} claiming rank {}: {}", connection.peer, rank, problem);
      rejections_.push_back(fmt::format("{} claiming rank {}: {}", connection.peer, rank, problem));
      if (rejections_.size() > kRejectionsKept)
        rejections_.pop_front();
      queue(connection, std::make_shared<const Bytes>(reply(Admission::Rejected, problem)));
      connection.closeWhenSent = true;
      return;
    }
    connection.rank = static_cast<int>(rank);
    ranks_[rank] = RankState::Joined;
    rankConnections_[rank] = &connection;
    queue(connection, std::make_shared<const Bytes>(reply(Admission::Accepted, "")));
    log::debug("store: rank {} joined from {}", rank, connection.peer);
  }

  std::string admissionProblem(std::uint32_t version, std::uint32_t rank, std::uint32_t worldSize,
                               std::uint64_t tokenHash) const {
    // The version comes first: another version's other fields may mean something else.
    if (version != kProtocolVersion)
      return fmt::format("it speaks store protocol version {}, the store version {} (are all "
                         "ranks running the same mkc?)",
                         version, kProtocolVersion);
    if (tokenHash != tokenHash_)
      return "wrong job token: it belongs to another job, or MKC_JOB_TOKEN differs between ranks";
    if (worldSize != static_cast<std::uint32_t>(worldSize_))
      return fmt::format("its world size is {}, the store's {}", worldSize, worldSize_);
    if (rank >= worldSize)
      return fmt::format("rank {} is not less than the world size {}", rank, worldSize);
    switch (ranks_[rank]) {
    case RankState::Absent:
      return "";
    case RankState::Joined:
      return fmt::format("rank {} has already joined, from {}", rank, rankConnections_[rank]->peer);
    case RankState::Left:
      return fmt::format("rank {} has left the store, and a rank cannot join twice", rank);
    case RankState::Dead:
      return fmt::format("rank {} died, and a rank cannot join twice", rank);
    }
    return "";
  }

  void handleFrames(Connection &connection) {
    std::size_t used = 0;
    try {
      while (!connection.closed && connection.input.size() - used >= kFrameHeaderBytes) {
        ByteReader<BootstrapError> header(
            std::span(connection.input).subspan(used, kFrameHeaderBytes));
        const std::uint32_t type = header.get<std::uint32_t>();
        const std::uint64_t sequence = header.get<std::uint64_t>();
        const std::uint64_t length = header.get<std::uint64_t>();
        if (length > kMaxFramePayloadBytes)
          return violation(connection, fmt::format("a frame of {} bytes", length));
        if (connection.input.size() - used - kFrameHeaderBytes < length)
          break;
        ByteReader<BootstrapError> payload(
            std::span(connection.input).subspan(used + kFrameHeaderBytes, length));
        used += kFrameHeaderBytes + length;
        switch (static_cast<FrameType>(type)) {
        case FrameType::Contribute:
          contribute(connection, sequence, payload);
          break;
        case FrameType::Goodbye:
          leave(connection);
          break;
        default:
          return violation(connection, fmt::format("a frame of unknown type {}", type));
        }
      }
    } catch (const BootstrapError &error) {
      return violation(connection, error.what());
    }
    connection.input.erase(connection.input.begin(),
                           connection.input.begin() + static_cast<std::ptrdiff_t>(used));
  }

  void contribute(Connection &connection, std::uint64_t sequence,
                  ByteReader<BootstrapError> &payload) {
    const int rank = *connection.rank;
    const auto kind = static_cast<Operation>(payload.get<std::uint32_t>());
    const Timeout timeout(static_cast<Timeout::rep>(
        std::min<std::uint64_t>(payload.get<std::uint64_t>(), kLongestTimeout.count())));
    PendingOperation &operation = operation_;
    if (!failure_.empty())
      return queue(connection, failureFrame());
    if (kind != Operation::AllGather && kind != Operation::Barrier)
      return violation(connection, fmt::format("an operation of unknown kind {}",
                                               static_cast<std::uint32_t>(kind)));
    if (sequence != operation.sequence || operation.contributions[rank])
      return violation(connection, fmt::format("operation {} while the store is at operation {}",
                                               sequence, operation.sequence));
    if (operation.arrived > 0 && kind != operation.kind)
      return fail(fmt::format("operation {}: rank {} called {}, but rank {} called {}", sequence,
                              rank, nameOf(kind), operation.firstRank, nameOf(operation.kind)));
    if (operation.arrived++ == 0) {
      operation.kind = kind;
      operation.firstRank = rank;
    }
    const std::span<const std::byte> blob = payload.bytes(payload.remaining());
    operation.contributions[rank].emplace(blob.begin(), blob.end());
    if (Deadline deadline = deadlineAfter(timeout); deadline < operation.deadline) {
      operation.deadline = deadline;
      operation.expiringTimeout = timeout;
    }
    if (auto left = std::ranges::find(ranks_, RankState::Left); left != ranks_.end())
      return fail(fmt::format("operation {} ({}): rank {} has left the store", sequence,
                              nameOf(kind), left - ranks_.begin()));
    if (operation.arrived == worldSize_)
      complete();
  }

  void complete() {
    std::uint64_t payloadBytes = 0;
    for (const auto &contribution : operation_.contributions)
      payloadBytes += 8 + contribution->size();
    ByteWriter result = frameHeader(FrameType::Result, operation_.sequence, payloadBytes);
    for (const auto &contribution : operation_.contributions)
      result.put<std::uint64_t>(contribution->size()).bytes(*contribution);
    // Every rank is connected: one that left or died would have failed the store first.
    auto message = std::make_shared<const Bytes>(result.take());
    for (Connection *connection : rankConnections_)
      queue(*connection, message);
    PendingOperation next;
    next.sequence = operation_.sequence + 1;
    next.contributions.resize(worldSize_);
    operation_ = std::move(next);
  }

  void leave(Connection &connection) {
    const int rank = *connection.rank;
    ranks_[rank] = RankState::Left;
    close(connection);
    if (operation_.arrived > 0 && !operation_.contributions[rank])
      fail(fmt::format("operation {} ({}): rank {} has left the store", operation_.sequence,
                       nameOf(operation_.kind), rank));
  }

  /// A connection that closed or failed; for an admitted rank that has not said goodbye, the
  /// store fails: no operation can complete without it.
  void lost(Connection &connection) {
    close(connection);
    if (!connection.rank)
      return;
    ranks_[*connection.rank] = RankState::Dead;
    fail(fmt::format("rank {} died: its connection from {} closed without a goodbye",
                     *connection.rank, connection.peer));
  }

  void violation(Connection &connection, std::string_view what) {
    fail(fmt::format("rank {} broke the store protocol: it sent {}", *connection.rank, what));
    ranks_[*connection.rank] = RankState::Dead;
    close(connection);
  }

  /// The store fails for good: every rank is told now, whether it is waiting or not.
  void fail(std::string reason) {
    if (!failure_.empty())
      return;
    failure_ = std::move(reason);
    log::debug("store: failed: {}", failure_);
    auto message = failureFrame();
    for (Connection *connection : rankConnections_)
      if (connection)
        queue(*connection, message);
    operation_.contributions.assign(worldSize_, std::nullopt);
  }

  std::shared_ptr<const Bytes> failureFrame() const {
    return std::make_shared<const Bytes>(
        frameHeader(FrameType::Failure, operation_.sequence, failure_.size())
            .text(failure_)
            .take());
  }

  void expire(Deadline now) {
    for (const auto &connection : connections_)
      if (!connection->closed && !connection->rank && now >= connection->helloDeadline) {
        if (!connection->closeWhenSent)
          log::warning("store: dropped a connection from {}: no hello within {}", connection->peer,
                       formatDuration(kHelloTimeout));
        close(*connection);
      }
    if (failure_.empty() && operation_.arrived > 0 && now >= operation_.deadline)
      fail(timeoutReason());
  }

  std::string timeoutReason() const {
    std::vector<int> neverConnected, notArrived;
    for (int rank = 0; rank < worldSize_; ++rank)
      if (!operation_.contributions[rank])
        (ranks_[rank] == RankState::Absent ? neverConnected : notArrived).push_back(rank);
    std::string reason =
        fmt::format("operation {} ({}) timed out after {}:", operation_.sequence,
                    nameOf(operation_.kind), formatDuration(operation_.expiringTimeout));
    if (!neverConnected.empty())
      reason += fmt::format(" {} never connected to the store", formatRanks(neverConnected));
    if (!notArrived.empty())
      reason += fmt::format("{} {} did not call {}", neverConnected.empty() ? "" : ";",
                            formatRanks(notArrived), nameOf(operation_.kind));
    if (!neverConnected.empty() && !rejections_.empty())
      reason += fmt::format("; rejected connections: {}", fmt::join(rejections_, "; "));
    return reason;
  }

  void queue(Connection &connection, std::shared_ptr<const Bytes> message) {
    connection.output.push_back(std::move(message));
  }

  /// Sends what the socket takes now; the rest waits for POLLOUT.
  void send(Connection &connection) {
    while (!connection.output.empty()) {
      const Bytes &message = *connection.output.front();
      ssize_t sent = ::send(connection.socket.get(), message.data() + connection.outputSent,
                            message.size() - connection.outputSent, MSG_NOSIGNAL);
      if (sent < 0) {
        if (errno == EINTR)
          continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
          lost(connection);
        return;
      }
      connection.outputSent += static_cast<std::size_t>(sent);
      if (connection.outputSent == message.size()) {
        connection.output.pop_front();
        connection.outputSent = 0;
      }
    }
    if (connection.closeWhenSent)
      close(connection);
  }

  void close(Connection &connection) {
    connection.closed = true;
    connection.output.clear();
    if (connection.rank && rankConnections_[*connection.rank] == &connection)
      rankConnections_[*connection.rank] = nullptr;
  }

  const int worldSize_;
  const std::uint64_t tokenHash_;
  const Timeout flushTimeout_;
  UniqueFd listener_;
  UniqueFd wakeup_;
  std::vector<std::unique_ptr<Connection>> connections_;
  std::vector<RankState> ranks_;
  std::vector<Connection *> rankConnections_; // null while a rank is not connected
  PendingOperation operation_;
  std::string failure_;                // empty until the store fails
  std::deque<std::string> rejections_; // the latest, for the error if a rank never connects
  std::thread thread_;
};

} // namespace

std::unique_ptr<StoreServer> StoreServer::start(int worldSize, const Rendezvous &rendezvous) {
  return std::make_unique<ServerThread>(worldSize, rendezvous);
}

} // namespace mkc::bootstrap
