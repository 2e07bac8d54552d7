//===- bootstrap/TcpStore.cpp - every rank's connection to the store ---===//
//
// TcpStore (mk/runtime/bootstrap/Bootstrap.h): rank 0 starts the service (StoreServer.cpp); every
// rank connects (retrying, with growing pauses, until the timeout), says hello and waits for its
// admission; then each collective operation is one contribution sent and one verdict read.
//
//===----------------------------------------------------------------------===//

#include "bootstrap/StoreProtocol.h"

#include "mk/runtime/support/Log.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>

namespace mkc {

namespace bootstrap {

class StoreClient {
public:
  StoreClient(int rank, int worldSize, const Rendezvous &rendezvous)
      : rank_(rank), worldSize_(worldSize),
        endpoint_(fmt::format("{}:{}", rendezvous.address, rendezvous.port)) {
    const Deadline deadline = deadlineAfter(rendezvous.timeout);
    std::string problem;
    for (Timeout pause = kFirstRetryPause;; pause = std::min(2 * pause, kLongestRetryPause)) {
      if ((socket_ = connectOnce(rendezvous, deadline, problem)))
        break;
      if (Clock::now() >= deadline)
        throw BootstrapError(fmt::format("rank {} could not reach the store at {} within {}: {}; "
                                         "is rank 0 running there?",
                                         rank, endpoint_, formatDuration(rendezvous.timeout),
                                         problem));
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
    }
    introduce(fnv1a(rendezvous.jobToken), deadline);
  }

  ~StoreClient() {
    try { // best effort: a rank that cannot say goodbye is taken for dead, which it nearly is
      const Bytes goodbye = frameHeader(FrameType::Goodbye, nextSequence_, 0).take();
      sendAll(socket_.get(), goodbye, deadlineAfter(kGoodbyeTimeout));
    } catch (const BootstrapError &) {
    }
  }

  std::vector<Bytes> collect(Operation operation, std::span<const std::byte> blob,
                             Timeout timeout) {
    if (failure_)
      throw BootstrapError(fmt::format("{} on rank {}: the store failed earlier: {}",
                                       nameOf(operation), rank_, *failure_));
    if (blob.size() > kMaxContributionBytes)
      throw BootstrapError(fmt::format("{} on rank {}: {} bytes exceed the store's limit of {}",
                                       nameOf(operation), rank_, blob.size(),
                                       kMaxContributionBytes));
    timeout = std::clamp(timeout, Timeout::zero(), kLongestTimeout);
    const std::uint64_t sequence = nextSequence_++;
    const Deadline deadline = deadlineAfter(timeout + kVerdictGrace);
    const Bytes request =
        frameHeader(FrameType::Contribute, sequence, kContributionHeaderBytes + blob.size())
            .put<std::uint32_t>(static_cast<std::uint32_t>(operation))
            .put<std::uint64_t>(static_cast<std::uint64_t>(timeout.count()))
            .bytes(blob)
            .take();
    check(operation, sendAll(socket_.get(), request, deadline), timeout);

    std::array<std::byte, kFrameHeaderBytes> headerBytes;
    check(operation, receiveExact(socket_.get(), headerBytes, deadline), timeout);
    ByteReader<BootstrapError> header(headerBytes);
    const auto type = static_cast<FrameType>(header.get<std::uint32_t>());
    const std::uint64_t answered = header.get<std::uint64_t>();
    const std::uint64_t length = header.get<std::uint64_t>();
    if (length > kMaxFramePayloadBytes)
      fail(operation,
           fmt::format("the store at {} announced a frame of {} bytes", endpoint_, length));
    Bytes payload(length);
    check(operation, receiveExact(socket_.get(), payload, deadline), timeout);
    ByteReader<BootstrapError> message(payload);
    if (type == FrameType::Failure)
      fail(operation, message.text(message.remaining()));
    if (type != FrameType::Result || answered != sequence)
      fail(operation, fmt::format("the store at {} answered operation {} with a frame of type "
                                  "{} for operation {}",
                                  endpoint_, sequence, static_cast<std::uint32_t>(type), answered));
    std::vector<Bytes> blobs;
    try {
      while (message.remaining()) {
        std::span<const std::byte> contribution = message.bytes(message.get<std::uint64_t>());
        blobs.emplace_back(contribution.begin(), contribution.end());
      }
    } catch (const BootstrapError &error) {
      fail(operation,
           fmt::format("the store at {} sent a malformed result: {}", endpoint_, error.what()));
    }
    if (blobs.size() != static_cast<std::size_t>(worldSize_))
      fail(operation, fmt::format("the store at {} sent {} contributions for {} ranks", endpoint_,
                                  blobs.size(), worldSize_));
    return blobs;
  }

private:
  void introduce(std::uint64_t tokenHash, Deadline deadline) {
    const Bytes hello = ByteWriter()
                            .text(kMagic)
                            .put<std::uint32_t>(kProtocolVersion)
                            .put<std::uint32_t>(static_cast<std::uint32_t>(rank_))
                            .put<std::uint32_t>(static_cast<std::uint32_t>(worldSize_))
                            .put<std::uint64_t>(tokenHash)
                            .take();
    std::array<std::byte, kReplyHeaderBytes> headerBytes;
    Io io = sendAll(socket_.get(), hello, deadline);
    if (io == Io::Done)
      io = receiveExact(socket_.get(), headerBytes, deadline);
    const auto notAStore = [&](std::string_view what) {
      return BootstrapError(fmt::format("rank {}: {} {}: it is not an mkc store, or rank 0 is "
                                        "shutting down (torch's store holds MASTER_PORT, mkc's "
                                        "MASTER_PORT + 1 or MKC_MASTER_PORT)",
                                        rank_, endpoint_, what));
    };
    if (io == Io::TimedOut)
      throw notAStore("did not answer the store's hello in time");
    if (io == Io::Closed)
      throw notAStore("closed the connection during the store's hello");
    ByteReader<BootstrapError> header(headerBytes);
    const bool magicMatches =
        std::ranges::equal(header.bytes(kMagic.size()), std::as_bytes(std::span(kMagic)));
    header.get<std::uint32_t>(); // the store's version: a rejection for a mismatch says it
    const auto admission = static_cast<Admission>(header.get<std::uint32_t>());
    const std::uint32_t reasonBytes = header.get<std::uint32_t>();
    if (!magicMatches || reasonBytes > kMaxReasonBytes)
      throw notAStore("answered something else than the store's reply");
    std::string reason(reasonBytes, '\0');
    if (receiveExact(socket_.get(), std::as_writable_bytes(std::span(reason)), deadline) !=
        Io::Done)
      throw notAStore("did not finish its reply");
    if (admission != Admission::Accepted)
      throw BootstrapError(
          fmt::format("the store at {} rejected rank {}: {}", endpoint_, rank_, reason));
  }

  /// Fails the store for this rank unless the transfer is done.
  void check(Operation operation, Io io, Timeout timeout) {
    if (io == Io::TimedOut)
      fail(operation,
           fmt::format("no answer from the store (rank 0 at {}) within {} plus {}: "
                       "rank 0 is unreachable or hangs",
                       endpoint_, formatDuration(timeout), formatDuration(kVerdictGrace)));
    if (io == Io::Closed)
      fail(operation, fmt::format("lost the connection to the store (rank 0 at {}): rank 0 died "
                                  "or destroyed its store",
                                  endpoint_));
  }

  [[noreturn]] void fail(Operation operation, std::string reason) {
    failure_ = reason;
    throw BootstrapError(fmt::format("{} failed on rank {}: {}", nameOf(operation), rank_, reason));
  }

  const int rank_;
  const int worldSize_;
  const std::string endpoint_;
  UniqueFd socket_;
  std::uint64_t nextSequence_ = 0;
  std::optional<std::string> failure_;
};

} // namespace bootstrap

using namespace bootstrap;

TcpStore::TcpStore(int rank, int worldSize, const Rendezvous &rendezvous)
    : rank_(rank), worldSize_(worldSize), timeout_(rendezvous.timeout), owner_(::getpid()) {
  if (worldSize < 1 || rank < 0 || rank >= worldSize)
    throw BootstrapError(fmt::format("rank {} of a world of {}: no such rank", rank, worldSize));
  if (worldSize == 1)
    return;
  const auto start = Clock::now();
  if (rank == 0)
    server_ = StoreServer::start(worldSize, rendezvous);
  client_ = std::make_unique<StoreClient>(rank, worldSize, rendezvous);
  log::debug("rank {} joined the store at {}:{} in {:.3f} s", rank, rendezvous.address,
             rendezvous.port, std::chrono::duration<double>(Clock::now() - start).count());
}

TcpStore::~TcpStore() {
  // A forked child's copy would say goodbye for the rank, and its thread object names a thread
  // the child does not have (joining it, or destroying it unjoined, is fatal).
  if (::getpid() != owner_) {
    static_cast<void>(client_.release());
    static_cast<void>(server_.release());
  }
}

std::vector<std::vector<std::byte>> TcpStore::allGather(std::span<const std::byte> blob) {
  return allGather(blob, timeout_);
}

std::vector<std::vector<std::byte>> TcpStore::allGather(std::span<const std::byte> blob,
                                                        Timeout timeout) {
  if (worldSize_ == 1)
    return {std::vector<std::byte>(blob.begin(), blob.end())};
  return client_->collect(Operation::AllGather, blob, timeout);
}

void TcpStore::barrier() { barrier(timeout_); }

void TcpStore::barrier(Timeout timeout) {
  if (worldSize_ > 1)
    client_->collect(Operation::Barrier, {}, timeout);
}

} // namespace mkc
