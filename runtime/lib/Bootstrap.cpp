//===- Bootstrap.cpp - process groups from existing launchers --------------===//

#include "mk/runtime/Bootstrap.h"

#include "mk/runtime/Log.h"
#include "mk/runtime/UniqueFd.h"
#include "mk/support/BoundedInt.h"
#include "mk/support/ByteCodec.h"

#include <fmt/format.h>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <climits>
#include <deque>
#include <fstream>
#include <system_error>
#include <thread>
#include <utility>

extern char **environ;

namespace mkc {

namespace {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
using Bytes = std::vector<std::byte>;
using namespace std::chrono_literals;

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string formatDuration(Timeout timeout) {
  return fmt::format("{:g} s", static_cast<double>(timeout.count()) / 1000);
}

//===----------------------------------------------------------------------===//
// The launch environment
//===----------------------------------------------------------------------===//

// Ports derived from a job id lie below Linux's ephemeral range (32768-60999), where outgoing
// connections would take them.
constexpr int kDerivedPortBase = 20000;
constexpr int kDerivedPortCount = 12000;

/// Reads variables; an empty one counts as unset, so that `export MKC_RANK=` clears an override.
class VariableReader {
public:
  explicit VariableReader(const Environment &environment) : environment_(environment) {}

  struct Variable {
    std::string_view name;
    std::string_view value;
  };

  /// The first of `names` that is set.
  std::optional<Variable> first(const std::vector<std::string_view> &names) const {
    for (std::string_view name : names)
      if (auto it = environment_.find(name); it != environment_.end() && !it->second.empty())
        return Variable{name, it->second};
    return std::nullopt;
  }
  bool has(std::string_view name) const { return first({name}).has_value(); }

  std::optional<EnvironmentValue> integer(const std::vector<std::string_view> &names) const {
    std::optional<Variable> variable = first(names);
    if (!variable)
      return std::nullopt;
    return EnvironmentValue{parseInteger(*variable), std::string(variable->name)};
  }

  static int parseInteger(const Variable &variable) {
    const std::optional<std::int64_t> value = parseBoundedInt(variable.value, 0, INT_MAX);
    if (!value)
      throw BootstrapError(
          fmt::format("{}='{}' is not a non-negative integer", variable.name, variable.value));
    return static_cast<int>(*value);
  }

private:
  const Environment &environment_;
};

/// The variables a launcher sets for each rank, in precedence order after the MKC_ override.
struct LauncherVariables {
  std::vector<std::string_view> rank, worldSize, localRank, localWorldSize;
};

Launcher detectLauncher(const VariableReader &env) {
  // The innermost launcher wins: torchrun or mpirun may run inside a Slurm allocation.
  if (env.has("RANK") || env.has("WORLD_SIZE"))
    return Launcher::Torchrun;
  if (env.has("OMPI_COMM_WORLD_RANK") || env.has("OMPI_COMM_WORLD_SIZE"))
    return Launcher::OpenMpi;
  if (env.has("SLURM_PROCID"))
    return Launcher::Slurm;
  if (env.has("MKC_RANK") || env.has("MKC_WORLD_SIZE"))
    return Launcher::Explicit;
  return Launcher::Standalone;
}

EnvironmentValue requireInteger(const VariableReader &env, Launcher launcher,
                                const std::vector<std::string_view> &names) {
  if (std::optional<EnvironmentValue> value = env.integer(names))
    return *value;
  throw BootstrapError(
      fmt::format("{}: {} is not set", launcherName(launcher), fmt::join(names, " or ")));
}

/// Slurm's task counts per node, "4(x2),2" for 4, 4 and 2: the count of node `node`.
int slurmTasksOnNode(const VariableReader::Variable &list, int node) {
  const auto malformed = [&] {
    return BootstrapError(
        fmt::format("{}='{}' is not a Slurm task list such as 4(x2),2", list.name, list.value));
  };
  int first = 0; // the index of the first node of the current entry
  for (std::string_view rest = list.value; !rest.empty();) {
    const std::string_view entry = rest.substr(0, rest.find(','));
    rest.remove_prefix(std::min(rest.size(), entry.size() + 1));
    const std::size_t paren = entry.find('(');
    const std::optional<std::int64_t> tasks =
        parseBoundedInt(entry.substr(0, paren), INT_MIN, INT_MAX);
    if (!tasks)
      throw malformed();
    int repeat = 1;
    if (paren != std::string_view::npos) {
      const std::string_view suffix = entry.substr(paren);
      if (!suffix.starts_with("(x") || !suffix.ends_with(')'))
        throw malformed();
      const std::optional<std::int64_t> times =
          parseBoundedInt(suffix.substr(2, suffix.size() - 3), 1, INT_MAX);
      if (!times)
        throw malformed();
      repeat = static_cast<int>(*times);
    }
    if (node < first + repeat)
      return static_cast<int>(*tasks);
    first += repeat;
  }
  throw BootstrapError(
      fmt::format("SLURM_NODEID={} but {}={} lists {} nodes", node, list.name, list.value, first));
}

std::string jobIdOf(const VariableReader &env, Launcher launcher) {
  std::optional<VariableReader::Variable> id;
  switch (launcher) {
  case Launcher::Torchrun:
    id = env.first({"TORCHELASTIC_RUN_ID"});
    break;
  case Launcher::OpenMpi:
    id = env.first({"OMPI_MCA_orte_hnp_uri", "PMIX_NAMESPACE"});
    break;
  case Launcher::Slurm: {
    // Each step of a job is a group of ranks of its own.
    id = env.first({"SLURM_JOB_ID"});
    std::optional<VariableReader::Variable> step = env.first({"SLURM_STEP_ID"});
    if (id && step)
      return fmt::format("{}.{}", id->value, step->value);
    break;
  }
  case Launcher::Explicit:
  case Launcher::Standalone:
    break;
  }
  return id ? std::string(id->value) : std::string();
}

std::string masterAddressOf(const VariableReader &env, Launcher launcher) {
  if (auto address = env.first({"MKC_MASTER_ADDR", "MASTER_ADDR"}))
    return std::string(address->value);
  if (launcher == Launcher::Slurm)
    if (auto nodes = env.first({"SLURM_STEP_NODELIST"})) {
      const std::string_view first = nodes->value.substr(0, nodes->value.find(','));
      if (!first.empty() && first.find_first_of("[]") == std::string_view::npos)
        return std::string(first);
      throw BootstrapError(fmt::format(
          "srun: SLURM_STEP_NODELIST={} does not start with a plain host name; set MASTER_ADDR "
          "(e.g. to $(scontrol show hostnames \"$SLURM_STEP_NODELIST\" | head -n 1))",
          nodes->value));
    }
  throw BootstrapError(
      fmt::format("{}: MKC_MASTER_ADDR or MASTER_ADDR is not set", launcherName(launcher)));
}

std::uint16_t storePortOf(const VariableReader &env, Launcher launcher, std::string_view jobId) {
  const auto port = [](const VariableReader::Variable &variable) {
    int value = VariableReader::parseInteger(variable);
    if (value < 1 || value > 65535)
      throw BootstrapError(
          fmt::format("{}={} is not a TCP port (1-65535)", variable.name, variable.value));
    return value;
  };
  if (auto variable = env.first({"MKC_MASTER_PORT"}))
    return static_cast<std::uint16_t>(port(*variable));
  if (auto variable = env.first({"MASTER_PORT"})) {
    // torchrun's agent, and torch.distributed's store, listen on MASTER_PORT itself.
    int value = port(*variable);
    if (value == 65535)
      throw BootstrapError("MASTER_PORT=65535 leaves no port for the store (it listens on "
                           "MASTER_PORT + 1); set MKC_MASTER_PORT");
    return static_cast<std::uint16_t>(value + 1);
  }
  if (!jobId.empty())
    return static_cast<std::uint16_t>(kDerivedPortBase + fnv1a(jobId) % kDerivedPortCount);
  throw BootstrapError(
      fmt::format("{}: MKC_MASTER_PORT or MASTER_PORT is not set", launcherName(launcher)));
}

Timeout timeoutOf(const VariableReader &env) {
  auto variable = env.first({"MKC_BOOTSTRAP_TIMEOUT"});
  if (!variable)
    return Rendezvous{}.timeout;
  double seconds = 0;
  const char *end = variable->value.data() + variable->value.size();
  auto [stop, error] = std::from_chars(variable->value.data(), end, seconds);
  if (error != std::errc() || stop != end || !(seconds > 0 && seconds < 1e6))
    throw BootstrapError(
        fmt::format("MKC_BOOTSTRAP_TIMEOUT='{}' is not a number of seconds", variable->value));
  return Timeout(static_cast<Timeout::rep>(seconds * 1000));
}

void checkConsistency(const LaunchEnvironment &launch, const EnvironmentValue &rank,
                      const EnvironmentValue &worldSize) {
  const std::optional<EnvironmentValue> &localRank = launch.localRank;
  const std::optional<EnvironmentValue> &localWorldSize = launch.localWorldSize;
  if (worldSize.value < 1)
    throw BootstrapError(fmt::format("{}=0: a world has at least one rank", worldSize.variable));
  if (rank.value >= worldSize.value)
    throw BootstrapError(fmt::format("{}={} is not less than {}={}", rank.variable, rank.value,
                                     worldSize.variable, worldSize.value));
  if (localWorldSize && localWorldSize->value < 1)
    throw BootstrapError(
        fmt::format("{}=0: a node has at least one rank", localWorldSize->variable));
  if (localWorldSize && localWorldSize->value > worldSize.value)
    throw BootstrapError(fmt::format("{}={} exceeds {}={}", localWorldSize->variable,
                                     localWorldSize->value, worldSize.variable, worldSize.value));
  const EnvironmentValue &localBound = localWorldSize ? *localWorldSize : worldSize;
  if (localRank && localRank->value >= localBound.value)
    throw BootstrapError(fmt::format("{}={} is not less than {}={}", localRank->variable,
                                     localRank->value, localBound.variable, localBound.value));
  if (launch.gpusPerNode && launch.nodeId)
    throw BootstrapError(
        "MKC_GPUS_PER_NODE and MKC_NODE_ID both say what a node is: set one of them");
  if (launch.gpusPerNode && (*launch.gpusPerNode < 1 || worldSize.value % *launch.gpusPerNode))
    throw BootstrapError(fmt::format("MKC_GPUS_PER_NODE={} does not divide {}={}",
                                     *launch.gpusPerNode, worldSize.variable, worldSize.value));
  if (launch.nodeId && *launch.nodeId >= worldSize.value)
    throw BootstrapError(fmt::format("MKC_NODE_ID={} is not less than {}={}: every node has a rank",
                                     *launch.nodeId, worldSize.variable, worldSize.value));
}

} // namespace

Environment processEnvironment() {
  Environment environment;
  for (char **entry = environ; *entry; ++entry) {
    const std::string_view text(*entry);
    if (std::size_t equals = text.find('='); equals != std::string_view::npos)
      environment.emplace(text.substr(0, equals), text.substr(equals + 1));
  }
  return environment;
}

std::string formatRanks(std::span<const int> ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t begin = 0, end; begin < ranks.size(); begin = end) {
    for (end = begin + 1; end < ranks.size() && ranks[end] == ranks[end - 1] + 1; ++end) {
    }
    text += begin ? ", " : "";
    text += end - begin == 1 ? std::to_string(ranks[begin])
                             : fmt::format("{}-{}", ranks[begin], ranks[end - 1]);
  }
  return text;
}

std::string_view launcherName(Launcher launcher) {
  switch (launcher) {
  case Launcher::Explicit:
    return "MKC_* variables";
  case Launcher::Standalone:
    return "no launcher";
  case Launcher::Torchrun:
    return "torchrun";
  case Launcher::Slurm:
    return "srun";
  case Launcher::OpenMpi:
    return "mpirun (Open MPI)";
  }
  return "unknown launcher";
}

LaunchEnvironment detectLaunchEnvironment(const Environment &environment) {
  const VariableReader env(environment);
  LaunchEnvironment launch;
  launch.launcher = detectLauncher(env);

  const LauncherVariables names = [&]() -> LauncherVariables {
    switch (launch.launcher) {
    case Launcher::Torchrun:
      return {{"MKC_RANK", "RANK"},
              {"MKC_WORLD_SIZE", "WORLD_SIZE"},
              {"MKC_LOCAL_RANK", "LOCAL_RANK"},
              {"MKC_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE"}};
    case Launcher::OpenMpi:
      return {{"MKC_RANK", "OMPI_COMM_WORLD_RANK"},
              {"MKC_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"},
              {"MKC_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"},
              {"MKC_LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}};
    case Launcher::Slurm: // the local world size comes from the task list below
      return {{"MKC_RANK", "SLURM_PROCID"},
              {"MKC_WORLD_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"},
              {"MKC_LOCAL_RANK", "SLURM_LOCALID"},
              {"MKC_LOCAL_WORLD_SIZE"}};
    case Launcher::Explicit:
    case Launcher::Standalone:
      break;
    }
    return {{"MKC_RANK"}, {"MKC_WORLD_SIZE"}, {"MKC_LOCAL_RANK"}, {"MKC_LOCAL_WORLD_SIZE"}};
  }();
  const bool standalone = launch.launcher == Launcher::Standalone;
  const EnvironmentValue rank = standalone ? EnvironmentValue{0, "MKC_RANK"}
                                           : requireInteger(env, launch.launcher, names.rank);
  const EnvironmentValue worldSize = standalone
                                         ? EnvironmentValue{1, "MKC_WORLD_SIZE"}
                                         : requireInteger(env, launch.launcher, names.worldSize);
  launch.rank = rank.value;
  launch.worldSize = worldSize.value;
  launch.localRank = env.integer(names.localRank);
  launch.localWorldSize = env.integer(names.localWorldSize);
  if (launch.launcher == Launcher::Slurm) {
    auto tasks = env.first({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
    auto node = env.first({"SLURM_NODEID"});
    if (!launch.localWorldSize && tasks && node)
      launch.localWorldSize = EnvironmentValue{
          slurmTasksOnNode(*tasks, VariableReader::parseInteger(*node)), std::string(tasks->name)};
    launch.nodeCount = env.integer({"SLURM_STEP_NUM_NODES", "SLURM_NNODES"});
  }
  if (auto gpusPerNode = env.integer({"MKC_GPUS_PER_NODE"}))
    launch.gpusPerNode = gpusPerNode->value;
  if (auto nodeId = env.integer({"MKC_NODE_ID"}))
    launch.nodeId = nodeId->value;
  checkConsistency(launch, rank, worldSize);

  launch.jobId = jobIdOf(env, launch.launcher);
  Rendezvous &rendezvous = launch.rendezvous;
  // A world of one meets no one: its store needs no address, and the process tells it apart
  // from the other worlds of one on the host.
  std::string meetingPlace = fmt::format("pid {}", ::getpid());
  if (launch.worldSize > 1) {
    rendezvous.address = masterAddressOf(env, launch.launcher);
    rendezvous.port = storePortOf(env, launch.launcher, launch.jobId);
    meetingPlace = fmt::format("{}:{}", rendezvous.address, rendezvous.port);
  }
  if (auto token = env.first({"MKC_JOB_TOKEN"}))
    rendezvous.jobToken = token->value;
  else
    rendezvous.jobToken =
        fmt::format("{}|{}|{}", launcherName(launch.launcher), launch.jobId, meetingPlace);
  rendezvous.timeout = timeoutOf(env);
  return launch;
}

LaunchEnvironment detectLaunchEnvironment() {
  return detectLaunchEnvironment(processEnvironment());
}

//===----------------------------------------------------------------------===//
// The store's protocol and sockets
//===----------------------------------------------------------------------===//

namespace {

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
constexpr Timeout kHelloTimeout = 10s;
constexpr std::size_t kMaxWaitingConnections = 64;
// How long after its own timeout a rank waits for rank 0's verdict before taking rank 0 for
// unresponsive: rank 0 decides at the earliest deadline of the ranks that arrived.
constexpr Timeout kVerdictGrace = 5s;
constexpr Timeout kFirstRetryPause = 10ms;
constexpr Timeout kLongestRetryPause = 1s;
constexpr Timeout kGoodbyeTimeout = 1s;
// Longer timeouts are clamped, so that a deadline never overflows the clock.
constexpr Timeout kLongestTimeout = std::chrono::hours(24 * 365);
constexpr std::size_t kRejectionsKept = 4;

Deadline deadlineAfter(Timeout timeout) {
  return Clock::now() + std::clamp(timeout, Timeout::zero(), kLongestTimeout);
}

int millisecondsUntil(Deadline deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, INT_MAX));
}

std::string_view nameOf(Operation operation) {
  return operation == Operation::Barrier ? "barrier" : "allGather";
}

std::string errorText(int error) { return std::system_category().message(error); }

[[noreturn]] void throwErrno(std::string_view what) {
  throw BootstrapError(fmt::format("{}: {}", what, errorText(errno)));
}

ByteWriter frameHeader(FrameType type, std::uint64_t sequence, std::uint64_t payloadBytes) {
  ByteWriter encoder;
  encoder.put<std::uint32_t>(static_cast<std::uint32_t>(type))
      .put<std::uint64_t>(sequence)
      .put<std::uint64_t>(payloadBytes);
  return encoder;
}

Bytes reply(Admission admission, std::string_view reason) {
  reason = reason.substr(0, kMaxReasonBytes);
  return ByteWriter()
      .text(kMagic)
      .put<std::uint32_t>(kProtocolVersion)
      .put<std::uint32_t>(static_cast<std::uint32_t>(admission))
      .put<std::uint32_t>(static_cast<std::uint32_t>(reason.size()))
      .text(reason)
      .take();
}

void setNoDelay(int socket) {
  int on = 1; // the protocol's messages are small and each waits for an answer
  ::setsockopt(socket, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

/// Waits until `fd` is ready for `events` (or has an error to report); false at the deadline.
bool waitUntilReady(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd entry{fd, events, 0};
    int ready = ::poll(&entry, 1, millisecondsUntil(deadline));
    if (ready > 0)
      return true;
    if (ready < 0 && errno != EINTR)
      throwErrno("poll");
    if (ready == 0 && Clock::now() >= deadline)
      return false;
  }
}

enum class Io { Done, TimedOut, Closed };

Io sendAll(int fd, std::span<const std::byte> data, Deadline deadline) {
  while (!data.empty()) {
    ssize_t sent = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (sent > 0) {
      data = data.subspan(static_cast<std::size_t>(sent));
    } else if (sent < 0 && errno == EINTR) {
      continue;
    } else if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitUntilReady(fd, POLLOUT, deadline))
        return Io::TimedOut;
    } else {
      return Io::Closed;
    }
  }
  return Io::Done;
}

Io receiveExact(int fd, std::span<std::byte> into, Deadline deadline) {
  while (!into.empty()) {
    ssize_t received = ::recv(fd, into.data(), into.size(), 0);
    if (received > 0) {
      into = into.subspan(static_cast<std::size_t>(received));
    } else if (received < 0 && errno == EINTR) {
      continue;
    } else if (received < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitUntilReady(fd, POLLIN, deadline))
        return Io::TimedOut;
    } else {
      return Io::Closed;
    }
  }
  return Io::Done;
}

struct AddressListDeleter {
  void operator()(addrinfo *list) const { ::freeaddrinfo(list); }
};
using AddressList = std::unique_ptr<addrinfo, AddressListDeleter>;

/// The addresses of `host` for a TCP socket at `port`, or null with `problem` saying why not.
AddressList resolve(const std::string &host, std::uint16_t port, std::string &problem) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo *list = nullptr;
  if (int status = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &list)) {
    problem = fmt::format("cannot resolve {}: {}", host,
                          status == EAI_SYSTEM ? errorText(errno) : ::gai_strerror(status));
    return nullptr;
  }
  return AddressList(list);
}

std::string peerName(const sockaddr_storage &address, socklen_t length) {
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr *>(&address), length, host, sizeof host,
                    service, sizeof service, NI_NUMERICHOST | NI_NUMERICSERV))
    return "an unknown peer";
  return address.ss_family == AF_INET6 ? fmt::format("[{}]:{}", host, service)
                                       : fmt::format("{}:{}", host, service);
}

UniqueFd listenAt(const Rendezvous &rendezvous) {
  std::string problem;
  AddressList addresses = resolve(rendezvous.address, rendezvous.port, problem);
  if (!addresses)
    throw BootstrapError(fmt::format("rank 0 cannot listen for the store: {}", problem));
  int error = 0;
  for (const addrinfo *address = addresses.get(); address; address = address->ai_next) {
    UniqueFd socket(::socket(address->ai_family,
                             address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                             address->ai_protocol));
    if (!socket) {
      error = errno;
      continue;
    }
    int on = 1; // a restarted job may listen while its predecessor's connections linger
    ::setsockopt(socket.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (::bind(socket.get(), address->ai_addr, address->ai_addrlen) == 0 &&
        ::listen(socket.get(), SOMAXCONN) == 0)
      return socket;
    error = errno;
  }
  std::string_view hint = error == EADDRINUSE      ? " (another process holds the port: set "
                                                     "MKC_MASTER_PORT to a free one)"
                          : error == EADDRNOTAVAIL ? " (not an address of this host: rank 0 must "
                                                     "run where the master address points)"
                                                   : "";
  throw BootstrapError(fmt::format("rank 0 cannot listen for the store at {}:{}: {}{}",
                                   rendezvous.address, rendezvous.port, errorText(error), hint));
}

/// One attempt at each of the master's addresses: a connected socket, or null with `problem`
/// saying why none answered.
UniqueFd connectOnce(const Rendezvous &rendezvous, Deadline deadline, std::string &problem) {
  AddressList addresses = resolve(rendezvous.address, rendezvous.port, problem);
  for (const addrinfo *address = addresses.get(); address; address = address->ai_next) {
    UniqueFd socket(::socket(address->ai_family,
                             address->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                             address->ai_protocol));
    if (!socket) {
      problem = errorText(errno);
      continue;
    }
    // A non-blocking connect, or one interrupted by a signal, completes in the background.
    if (::connect(socket.get(), address->ai_addr, address->ai_addrlen) != 0) {
      if (errno != EINPROGRESS && errno != EINTR) {
        problem = errorText(errno);
        continue;
      }
      if (!waitUntilReady(socket.get(), POLLOUT, deadline)) {
        problem = "connecting timed out";
        continue;
      }
      int error = 0;
      socklen_t length = sizeof error;
      ::getsockopt(socket.get(), SOL_SOCKET, SO_ERROR, &error, &length);
      if (error) {
        problem = errorText(error);
        continue;
      }
    }
    setNoDelay(socket.get());
    return socket;
  }
  return UniqueFd();
}

} // namespace

//===----------------------------------------------------------------------===//
// Rank 0's service
//===----------------------------------------------------------------------===//

/// Admits ranks and runs the operations, on a thread of its own so that it answers whatever
/// rank 0's own thread is doing. Everything but the wake-up descriptor belongs to that thread.
class TcpStore::Server {
public:
  Server(int worldSize, const Rendezvous &rendezvous)
      : worldSize_(worldSize), tokenHash_(fnv1a(rendezvous.jobToken)),
        flushTimeout_(rendezvous.timeout), listener_(listenAt(rendezvous)),
        wakeup_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), ranks_(worldSize, RankState::Absent),
        rankConnections_(worldSize, nullptr) {
    if (!wakeup_)
      throwErrno("eventfd");
    operation_.contributions.resize(worldSize);
    thread_ = std::thread([this] { serve(); });
  }

  ~Server() {
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

//===----------------------------------------------------------------------===//
// Every rank's connection
//===----------------------------------------------------------------------===//

class TcpStore::Client {
public:
  Client(int rank, int worldSize, const Rendezvous &rendezvous)
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

  ~Client() {
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

TcpStore::TcpStore(int rank, int worldSize, const Rendezvous &rendezvous)
    : rank_(rank), worldSize_(worldSize), timeout_(rendezvous.timeout), owner_(::getpid()) {
  if (worldSize < 1 || rank < 0 || rank >= worldSize)
    throw BootstrapError(fmt::format("rank {} of a world of {}: no such rank", rank, worldSize));
  if (worldSize == 1)
    return;
  const auto start = Clock::now();
  if (rank == 0)
    server_ = std::make_unique<Server>(worldSize, rendezvous);
  client_ = std::make_unique<Client>(rank, worldSize, rendezvous);
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

//===----------------------------------------------------------------------===//
// Nodes
//===----------------------------------------------------------------------===//

namespace {

/// What a rank tells the others about where it runs; -1 for what it was not told.
struct HostRecord {
  std::string hostname;
  std::string bootId; // with the hostname, tells apart machines cloned with one name
  int nodeId = -1;
  int gpusPerNode = -1;
  int launcherLocalRank = -1;
  int launcherLocalWorldSize = -1;

  std::string identity() const { return hostname + '/' + bootId; }
};

HostRecord thisHost(const LaunchEnvironment &launch) {
  HostRecord host;
  std::array<char, HOST_NAME_MAX + 1> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0)
    throwErrno("gethostname");
  host.hostname = name.data();
  std::ifstream("/proc/sys/kernel/random/boot_id") >> host.bootId;
  host.nodeId = launch.nodeId.value_or(-1);
  host.gpusPerNode = launch.gpusPerNode.value_or(-1);
  host.launcherLocalRank = launch.localRank ? launch.localRank->value : -1;
  host.launcherLocalWorldSize = launch.localWorldSize ? launch.localWorldSize->value : -1;
  return host;
}

Bytes encode(const HostRecord &host) {
  return ByteWriter()
      .put<std::uint32_t>(static_cast<std::uint32_t>(host.nodeId))
      .put<std::uint32_t>(static_cast<std::uint32_t>(host.gpusPerNode))
      .put<std::uint32_t>(static_cast<std::uint32_t>(host.launcherLocalRank))
      .put<std::uint32_t>(static_cast<std::uint32_t>(host.launcherLocalWorldSize))
      .put<std::uint32_t>(static_cast<std::uint32_t>(host.hostname.size()))
      .text(host.hostname)
      .text(host.bootId)
      .take();
}

HostRecord decode(std::span<const std::byte> bytes) {
  ByteReader<BootstrapError> decoder(bytes);
  HostRecord host;
  host.nodeId = static_cast<std::int32_t>(decoder.get<std::uint32_t>());
  host.gpusPerNode = static_cast<std::int32_t>(decoder.get<std::uint32_t>());
  host.launcherLocalRank = static_cast<std::int32_t>(decoder.get<std::uint32_t>());
  host.launcherLocalWorldSize = static_cast<std::int32_t>(decoder.get<std::uint32_t>());
  host.hostname = decoder.text(decoder.get<std::uint32_t>());
  host.bootId = decoder.text(decoder.remaining());
  return host;
}

std::string describeSetting(int value) { return value < 0 ? "unset" : std::to_string(value); }

/// The node of each rank, from the records of all ranks; every rank computes the same, so that
/// every rank throws the same error.
std::vector<int> groupIntoNodes(const std::vector<HostRecord> &hosts) {
  const int worldSize = static_cast<int>(hosts.size());
  const HostRecord &first = hosts.front();
  for (int rank = 1; rank < worldSize; ++rank) {
    if (hosts[rank].gpusPerNode != first.gpusPerNode)
      throw BootstrapError(fmt::format("MKC_GPUS_PER_NODE is {} on rank 0 but {} on rank {}: "
                                       "set it alike on every rank",
                                       describeSetting(first.gpusPerNode),
                                       describeSetting(hosts[rank].gpusPerNode), rank));
    if ((hosts[rank].nodeId < 0) != (first.nodeId < 0))
      throw BootstrapError(fmt::format("MKC_NODE_ID is {} on rank 0 but {} on rank {}: set it on "
                                       "every rank or on none",
                                       describeSetting(first.nodeId),
                                       describeSetting(hosts[rank].nodeId), rank));
  }
  std::vector<int> nodeOfRank(worldSize);
  if (first.gpusPerNode > 0) {
    for (int rank = 0; rank < worldSize; ++rank)
      nodeOfRank[rank] = rank / first.gpusPerNode;
  } else if (first.nodeId >= 0) {
    for (int rank = 0; rank < worldSize; ++rank)
      nodeOfRank[rank] = hosts[rank].nodeId;
    const int nodeCount = std::ranges::max(nodeOfRank) + 1;
    for (int node = 0; node < nodeCount; ++node)
      if (std::ranges::find(nodeOfRank, node) == nodeOfRank.end())
        throw BootstrapError(fmt::format(
            "MKC_NODE_ID: no rank is on node {}, but rank {} is on node {}: node ids run from 0 "
            "without gaps",
            node, std::ranges::max_element(nodeOfRank) - nodeOfRank.begin(), nodeCount - 1));
  } else {
    std::map<std::string, int> nodeOfHost;
    for (int rank = 0; rank < worldSize; ++rank)
      nodeOfRank[rank] =
          nodeOfHost.try_emplace(hosts[rank].identity(), static_cast<int>(nodeOfHost.size()))
              .first->second;
  }
  return nodeOfRank;
}

std::vector<int> ranksOfNode(const std::vector<int> &nodeOfRank, int node) {
  std::vector<int> ranks;
  for (int rank = 0; rank < static_cast<int>(nodeOfRank.size()); ++rank)
    if (nodeOfRank[rank] == node)
      ranks.push_back(rank);
  return ranks;
}

/// Throws if the nodes found by host disagree with what the launchers say a node is.
void checkAgainstLaunchers(const std::vector<HostRecord> &hosts, const std::vector<int> &nodeOfRank,
                           const LaunchEnvironment &launch) {
  const std::string_view remedy =
      "if a node is not a host here, set MKC_GPUS_PER_NODE or MKC_NODE_ID on every rank";
  const std::string localRankVariable =
      launch.localRank ? launch.localRank->variable : "its launcher's local rank";
  const std::string localWorldSizeVariable =
      launch.localWorldSize ? launch.localWorldSize->variable : "its launcher's local world size";
  for (int rank = 0; rank < static_cast<int>(hosts.size()); ++rank) {
    const std::vector<int> node = ranksOfNode(nodeOfRank, nodeOfRank[rank]);
    const int localRank = static_cast<int>(std::ranges::find(node, rank) - node.begin());
    const HostRecord &host = hosts[rank];
    if (host.launcherLocalWorldSize >= 0 &&
        host.launcherLocalWorldSize != static_cast<int>(node.size()))
      throw BootstrapError(fmt::format("rank {} has {}={}, but {} run on host {}; {}", rank,
                                       localWorldSizeVariable, host.launcherLocalWorldSize,
                                       formatRanks(node), host.hostname, remedy));
    if (host.launcherLocalRank >= 0 && host.launcherLocalRank != localRank)
      throw BootstrapError(fmt::format("rank {} has {}={}, but it is local rank {} of {} on host "
                                       "{}; {}",
                                       rank, localRankVariable, host.launcherLocalRank, localRank,
                                       formatRanks(node), host.hostname, remedy));
  }
  const int nodeCount = std::ranges::max(nodeOfRank) + 1;
  if (launch.nodeCount && launch.nodeCount->value != nodeCount)
    throw BootstrapError(fmt::format("{}={}, but the ranks run on {} host(s); {}",
                                     launch.nodeCount->variable, launch.nodeCount->value, nodeCount,
                                     remedy));
}

} // namespace

ProcessGroup::ProcessGroup(const LaunchEnvironment &launch)
    : launch_(launch), store_(launch.rank, launch.worldSize, launch.rendezvous) {
  std::vector<HostRecord> hosts;
  for (const Bytes &record : store_.allGather(encode(thisHost(launch))))
    hosts.push_back(decode(record));
  const std::vector<int> nodeOfRank = groupIntoNodes(hosts);
  if (!launch.gpusPerNode && !launch.nodeId)
    checkAgainstLaunchers(hosts, nodeOfRank, launch);
  nodeIndex_ = nodeOfRank[launch.rank];
  nodeCount_ = std::ranges::max(nodeOfRank) + 1;
  nodeRanks_ = ranksOfNode(nodeOfRank, nodeIndex_);
  localRank_ = static_cast<int>(std::ranges::find(nodeRanks_, launch.rank) - nodeRanks_.begin());
  log::debug("rank {} of {} ({}): node {} of {}, local rank {} of {}", launch.rank,
             launch.worldSize, launcherName(launch.launcher), nodeIndex_, nodeCount_, localRank_,
             nodeRanks_.size());
}

} // namespace mkc
