//===- bootstrap/StoreProtocol.h - what the store's service and its clients share -*- C++ -*-===//
//
// Internal to MkBootstrap. The TcpStore of mk/runtime/bootstrap/Bootstrap.h is rank 0's service
// (StoreServer.cpp) and every rank's connection to it (TcpStore.cpp); both speak the protocol
// declared here and use its deadlines and socket calls (StoreProtocol.cpp).
//
//   const Deadline deadline = deadlineAfter(rendezvous.timeout);
//   UniqueFd socket = connectOnce(rendezvous, deadline, problem);
//   Bytes frame = frameHeader(FrameType::Contribute, sequence, bytes).bytes(payload).take();
//   if (sendAll(socket.get(), frame, deadline) != Io::Done) ...
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_LIB_BOOTSTRAP_STOREPROTOCOL_H
#define MK_RUNTIME_LIB_BOOTSTRAP_STOREPROTOCOL_H

#include "mk/Support/ByteCodec.h"
#include "mk/runtime/bootstrap/Bootstrap.h"
#include "mk/runtime/support/UniqueFd.h"

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mkc::bootstrap {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
using Bytes = std::vector<std::byte>;

/// The job token's hash that hellos carry, and what a store port is derived from.
std::uint64_t fnv1a(std::string_view text);
/// "2.5 s".
std::string formatDuration(Timeout timeout);

enum class Operation : std::uint32_t { AllGather = 1, Barrier = 2 };

// A connection opens with a hello (magic, version, rank, world size, token hash), answered by a
// reply (magic, version, admission, reason length, reason); then frames follow (type, sequence,
// payload length, payload). Integers are little-endian.
constexpr std::string_view kMagic = "MKCSTORE";
constexpr std::uint32_t kProtocolVersion = 1;
constexpr std::size_t kHelloBytes = kMagic.size() + 4 + 4 + 4 + 8;
constexpr std::size_t kReplyHeaderBytes = kMagic.size() + 4 + 4 + 4;
constexpr std::size_t kFrameHeaderBytes = 4 + 8 + 8;
constexpr std::size_t kContributionHeaderBytes = 4 + 8;
constexpr std::uint32_t kMaxReasonBytes = 4096;
constexpr std::uint64_t kMaxFramePayloadBytes = std::uint64_t(1) << 32;
constexpr std::uint64_t kMaxContributionBytes = kMaxFramePayloadBytes / 2;

enum class Admission : std::uint32_t { Accepted = 0, Rejected = 1 };
enum class FrameType : std::uint32_t { Contribute = 1, Goodbye = 2, Result = 3, Failure = 4 };

// A connection that has not said hello by then is dropped, and only so many may wait: a port
// scanner or a stuck client must not hold descriptors for long.
constexpr Timeout kHelloTimeout = std::chrono::seconds(10);
constexpr std::size_t kMaxWaitingConnections = 64;
// How long after its own timeout a rank waits for rank 0's verdict before taking rank 0 for
// unresponsive: rank 0 decides at the earliest deadline of the ranks that arrived.
constexpr Timeout kVerdictGrace = std::chrono::seconds(5);
constexpr Timeout kFirstRetryPause = std::chrono::milliseconds(10);
constexpr Timeout kLongestRetryPause = std::chrono::seconds(1);
constexpr Timeout kGoodbyeTimeout = std::chrono::seconds(1);
// Longer timeouts are clamped, so that a deadline never overflows the clock.
constexpr Timeout kLongestTimeout = std::chrono::hours(24 * 365);
constexpr std::size_t kRejectionsKept = 4;

/// Now plus `timeout`, clamped so that it never overflows the clock.
Deadline deadlineAfter(Timeout timeout);
/// What poll() takes: the milliseconds left until `deadline`, at least 0.
int millisecondsUntil(Deadline deadline);
std::string_view nameOf(Operation operation);
std::string errorText(int error);
[[noreturn]] void throwErrno(std::string_view what);

ByteWriter frameHeader(FrameType type, std::uint64_t sequence, std::uint64_t payloadBytes);
/// Rank 0's answer to a hello: admitted, or rejected with `reason`.
Bytes reply(Admission admission, std::string_view reason);

void setNoDelay(int socket);
/// Waits until `fd` is ready for `events` (or has an error to report); false at the deadline.
bool waitUntilReady(int fd, short events, Deadline deadline);

enum class Io { Done, TimedOut, Closed };
Io sendAll(int fd, std::span<const std::byte> data, Deadline deadline);
Io receiveExact(int fd, std::span<std::byte> into, Deadline deadline);

/// "10.0.0.1:29500", "[::1]:29500".
std::string peerName(const sockaddr_storage &address, socklen_t length);
/// A listening socket at the rendezvous's address and port; throws BootstrapError.
UniqueFd listenAt(const Rendezvous &rendezvous);
/// One attempt at each of the master's addresses (connectOnce in StoreProtocol.cpp).
UniqueFd connectOnce(const Rendezvous &rendezvous, Deadline deadline, std::string &problem);

/// Rank 0's service (StoreServer.cpp): it admits ranks and runs the operations on a thread of its
/// own until destroyed.
class StoreServer {
public:
  virtual ~StoreServer() = default;
  static std::unique_ptr<StoreServer> start(int worldSize, const Rendezvous &rendezvous);
};

} // namespace mkc::bootstrap

#endif // MK_RUNTIME_LIB_BOOTSTRAP_STOREPROTOCOL_H
