//===- mkc-launch.cpp - start the ranks of a job on this host -------------===//
//
// The project's own local launcher, for GPU tests and for users without torch: starts N ranks of a
// program as `torchrun --standalone --nproc-per-node N` does, with the MKC_* variables that
// mkc::detectLaunchEnvironment() reads (runtime/include/mk/runtime/bootstrap/Bootstrap.h) and
// MKC_DEVICE, the CUDA device of the rank. Needs no GPU and no LLVM.
//
// Ranks see this launch only: the variables by which torchrun, mpirun and srun name a rank are
// removed from their environment (Bootstrap prefers an enclosing launcher's to MKC_*, and other
// software would read a stale rank), and so are MKC_NODE_ID and, without --gpus-per-node,
// MKC_GPUS_PER_NODE. Their stdin is /dev/null: N ranks cannot share one input.
//
// Each rank runs in a process group of its own, so that a signal reaches what the rank started
// too (a shell script's children, a compiler's workers), and what a rank leaves behind is killed
// when it exits (before it is reaped, so that its group id cannot have been reused): a leftover
// would keep the output pipe open and hold GPU memory. Ranks are therefore not in the terminal's
// foreground group, and Ctrl-C reaches them only as the launcher forwards SIGINT, SIGTERM and
// SIGHUP (unless ignored, as under nohup) to every rank's group.
//
// The launcher always ends: after a failure the other ranks get --grace seconds to exit, then
// SIGTERM, then --grace seconds later SIGKILL; a rank that survives SIGKILL for 5 s (stuck in the
// kernel) is left behind with a message. Output goes through one pipe per rank and stream, cut
// into lines, and is written a whole line at a time, so lines of different ranks never mix.
//
//===----------------------------------------------------------------------===//

#include "mk/Support/BoundedNumber.h"
#include "mk/runtime/bootstrap/Bootstrap.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace {

using mkc::formatRanks;
using mkc::parseBoundedInt;
using mkc::parseBoundedReal;
using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

constexpr int kUsageStatus = 2;
constexpr int kSystemErrorStatus = 1;
constexpr int kTimeoutStatus = 124; // as timeout(1)
constexpr int kSkippedStatus = 77;  // a test that skipped itself (ctest's SKIP_RETURN_CODE)
constexpr Seconds kDefaultGrace{5};
constexpr Seconds kKillWait{5};
constexpr std::size_t kMaxLine = 64 * 1024; // longer lines are cut, so that memory stays bounded
// What a rank can have left in its pipe when it exits: the largest pipe buffer an unprivileged
// process may ask for (/proc/sys/fs/pipe-max-size). Reading stops there even if a process that
// escaped the rank's group keeps writing.
constexpr std::size_t kMaxDrain = 1024 * 1024;
constexpr std::string_view kMasterAddress = "127.0.0.1";

constexpr std::string_view kUsage = R"(Usage: mkc-launch [options] [--] program [args...]

Starts N ranks of a program on this host, as torchrun --standalone --nproc-per-node N does, each
with the variables the mkc runtime reads:
  MKC_RANK, MKC_WORLD_SIZE               the rank, the number of ranks
  MKC_LOCAL_RANK, MKC_LOCAL_WORLD_SIZE   the rank within its node, the node's number of ranks
  MKC_MASTER_ADDR, MKC_MASTER_PORT       where rank 0's store listens (127.0.0.1)
  MKC_JOB_TOKEN                          random per launch, unless already set
  MKC_GPUS_PER_NODE                      with --gpus-per-node
  MKC_DEVICE                             the rank's CUDA device: its index on this host

Options:
  -n, --nproc N          number of ranks (required)
  --gpus-per-node G      emulate nodes of G ranks each (G divides N)
  --master-port P        the store's port (default: a free one)
  --timeout SECONDS      stop every rank after this long, and exit 124
  --grace SECONDS        after a rank fails, how long the others get to exit before SIGTERM,
                         and SIGTERM before SIGKILL (default 5)
  --no-prefix            do not prefix output lines with [rank R]; ranks inherit the streams
  -h, --help             print this help

SIGINT, SIGTERM and SIGHUP are forwarded to every rank; a second one kills them.

Exit status: 0 when every rank exits 0; otherwise the status of the first rank that fails
(128 + N when killed by signal N), where any other status comes before 77 (skipped); 77 when
ranks skipped and none failed otherwise; 124 after --timeout; 128 + N after the launcher got
signal N; 2 for bad usage.
)";

// What the launcher sets, and the variables by which torchrun, mpirun and srun name a rank, or
// Bootstrap a node: no rank inherits them (see the top of this file).
constexpr std::string_view kReplacedVariables[] = {"MKC_RANK",
                                                   "MKC_WORLD_SIZE",
                                                   "MKC_LOCAL_RANK",
                                                   "MKC_LOCAL_WORLD_SIZE",
                                                   "MKC_MASTER_ADDR",
                                                   "MKC_MASTER_PORT",
                                                   "MKC_JOB_TOKEN",
                                                   "MKC_DEVICE",
                                                   "MKC_GPUS_PER_NODE",
                                                   "MKC_NODE_ID",
                                                   "RANK",
                                                   "WORLD_SIZE",
                                                   "LOCAL_RANK",
                                                   "LOCAL_WORLD_SIZE",
                                                   "OMPI_COMM_WORLD_RANK",
                                                   "OMPI_COMM_WORLD_SIZE",
                                                   "OMPI_COMM_WORLD_LOCAL_RANK",
                                                   "OMPI_COMM_WORLD_LOCAL_SIZE",
                                                   "SLURM_PROCID",
                                                   "SLURM_LOCALID",
                                                   "SLURM_NODEID"};

/// Writes all of `text`, waiting if `fd` is non-blocking; output to a closed reader is dropped.
void writeAll(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t written = write(fd, text.data(), text.size());
    if (written >= 0) {
      text.remove_prefix(static_cast<std::size_t>(written));
    } else if (errno == EAGAIN) {
      pollfd writable{fd, POLLOUT, 0};
      poll(&writable, 1, -1);
    } else if (errno != EINTR) {
      return;
    }
  }
}

template <typename... Args> void say(fmt::format_string<Args...> format, Args &&...args) {
  writeAll(STDERR_FILENO,
           fmt::format("mkc-launch: {}\n", fmt::format(format, std::forward<Args>(args)...)));
}

/// Bad usage: checked before any rank starts.
template <typename... Args>
[[noreturn]] void usageError(fmt::format_string<Args...> format, Args &&...args) {
  say("error: {}", fmt::format(format, std::forward<Args>(args)...));
  std::exit(kUsageStatus);
}

/// A failure of the system that no command line can cause (no descriptors, no processes left).
template <typename... Args>
[[noreturn]] void systemError(fmt::format_string<Args...> format, Args &&...args) {
  say("error: {}: {}", fmt::format(format, std::forward<Args>(args)...), std::strerror(errno));
  std::exit(kSystemErrorStatus);
}

std::string signalName(int signal) {
  const char *abbreviation = sigabbrev_np(signal);
  return abbreviation ? fmt::format("SIG{}", abbreviation) : fmt::format("signal {}", signal);
}

//===----------------------------------------------------------------------===//
// The command line
//===----------------------------------------------------------------------===//

struct Options {
  int ranks = 0;
  std::optional<int> gpusPerNode;
  std::optional<int> masterPort;
  std::optional<Seconds> timeout;
  Seconds grace = kDefaultGrace;
  bool prefix = true;
  std::vector<std::string> command; ///< the program and its arguments
};

std::optional<Seconds> parseSeconds(std::string_view text, bool zeroAllowed) {
  std::optional<double> value =
      parseBoundedReal(text, zeroAllowed ? 0 : std::numeric_limits<double>::min(),
                       std::numeric_limits<double>::max());
  if (!value)
    return std::nullopt;
  return Seconds(*value);
}

Options parseCommandLine(int argc, char **argv) {
  Options options;
  int index = 1;
  for (; index < argc; ++index) {
    const std::string_view argument = argv[index];
    if (argument == "--") {
      ++index;
      break;
    }
    if (argument == "-h" || argument == "--help") {
      writeAll(STDOUT_FILENO, kUsage);
      std::exit(0);
    }
    if (argument == "--no-prefix") {
      options.prefix = false;
      continue;
    }
    if (!argument.starts_with('-') || argument == "-")
      break; // the program

    // The options that take a value: --name VALUE, --name=VALUE, -n VALUE or -nVALUE.
    std::string_view name = argument;
    std::optional<std::string_view> value;
    if (argument.starts_with("--")) {
      if (std::size_t equals = argument.find('='); equals != std::string_view::npos) {
        name = argument.substr(0, equals);
        value = argument.substr(equals + 1);
      }
    } else if (argument.starts_with("-n") && argument.size() > 2) {
      name = "-n";
      value = argument.substr(2);
    }
    if (name != "-n" && name != "--nproc" && name != "--gpus-per-node" && name != "--master-port" &&
        name != "--timeout" && name != "--grace")
      usageError("unknown option '{}' (see mkc-launch --help)", argument);
    if (!value) {
      if (index + 1 == argc)
        usageError("{} needs a value", name);
      value = argv[++index];
    }

    if (name == "-n" || name == "--nproc") {
      std::optional<int> ranks = parseBoundedInt(*value, 1, INT_MAX);
      if (!ranks)
        usageError("{} expects a number of ranks (at least 1), not '{}'", name, *value);
      options.ranks = *ranks;
    } else if (name == "--gpus-per-node") {
      options.gpusPerNode = parseBoundedInt(*value, 1, INT_MAX);
      if (!options.gpusPerNode)
        usageError("{} expects a number of ranks per node (at least 1), not '{}'", name, *value);
    } else if (name == "--master-port") {
      options.masterPort = parseBoundedInt(*value, 1, 65535);
      if (!options.masterPort)
        usageError("{} expects a TCP port (1-65535), not '{}'", name, *value);
    } else if (name == "--timeout") {
      options.timeout = parseSeconds(*value, /*zeroAllowed=*/false);
      if (!options.timeout)
        usageError("{} expects a number of seconds above 0, not '{}'", name, *value);
    } else {
      std::optional<Seconds> grace = parseSeconds(*value, /*zeroAllowed=*/true);
      if (!grace)
        usageError("{} expects a number of seconds (0 or more), not '{}'", name, *value);
      options.grace = *grace;
    }
  }
  options.command.assign(argv + index, argv + argc);

  if (options.ranks == 0)
    usageError("-n/--nproc, the number of ranks, is required");
  if (options.command.empty())
    usageError("no program to run");
  if (options.gpusPerNode && options.ranks % *options.gpusPerNode)
    usageError("--gpus-per-node={} does not divide --nproc={}", *options.gpusPerNode,
               options.ranks);
  return options;
}

void checkExecutable(const std::string &path, std::string_view program) {
  struct stat status {};
  if (stat(path.c_str(), &status) != 0)
    usageError("program '{}' cannot be found: {}", program, std::strerror(errno));
  if (!S_ISREG(status.st_mode) || access(path.c_str(), X_OK) != 0)
    usageError("program '{}' is not an executable file", program);
}

/// The file to execute: `program` itself if it names a path, else the first executable file of
/// that name in PATH, as execvp would find it. Ranks execute this very file, so that the check
/// made before any rank starts is the one that counts.
std::string resolveProgram(const std::string &program) {
  if (program.find('/') != std::string::npos) {
    checkExecutable(program, program);
    return program;
  }
  const char *path = std::getenv("PATH");
  std::string_view directories = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
  for (;;) {
    const std::string_view directory = directories.substr(0, directories.find(':'));
    std::string candidate = fmt::format("{}/{}", directory.empty() ? "." : directory, program);
    struct stat status {};
    if (stat(candidate.c_str(), &status) == 0 && S_ISREG(status.st_mode) &&
        access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (directory.size() == directories.size())
      break;
    directories.remove_prefix(directory.size() + 1);
  }
  usageError("program '{}' not found in PATH", program);
}

//===----------------------------------------------------------------------===//
// The job
//===----------------------------------------------------------------------===//

/// A free port on 127.0.0.1, from the kernel. Another process may take it before rank 0 listens
/// there; torchrun --standalone has the same race.
int freePort() {
  int socketFd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (socketFd < 0 || bind(socketFd, reinterpret_cast<sockaddr *>(&address), length) != 0 ||
      getsockname(socketFd, reinterpret_cast<sockaddr *>(&address), &length) != 0)
    systemError("cannot find a free port on {}", kMasterAddress);
  close(socketFd);
  return ntohs(address.sin_port);
}

/// MKC_JOB_TOKEN if set (an empty one counts as unset, as for Bootstrap), else 128 random bits.
std::string jobToken() {
  if (const char *token = std::getenv("MKC_JOB_TOKEN"); token && *token)
    return token;
  unsigned char bytes[16];
  int randomFd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (randomFd < 0 || read(randomFd, bytes, sizeof bytes) != static_cast<ssize_t>(sizeof bytes))
    systemError("cannot read /dev/urandom");
  close(randomFd);
  std::string token;
  for (unsigned char byte : bytes)
    token += fmt::format("{:02x}", byte);
  return token;
}

/// The environment of every rank before its own variables: this process's, less
/// kReplacedVariables.
std::vector<std::string> inheritedEnvironment() {
  std::vector<std::string> environment;
  for (char **entry = environ; *entry; ++entry) {
    const std::string_view text(*entry);
    const std::string_view name = text.substr(0, text.find('='));
    if (std::find(std::begin(kReplacedVariables), std::end(kReplacedVariables), name) ==
        std::end(kReplacedVariables))
      environment.emplace_back(text);
  }
  return environment;
}

/// One output stream of a rank: the read end of its pipe and the line not yet complete.
struct OutputStream {
  int fd = -1; ///< -1 with --no-prefix, and once the stream is closed
  int target = STDOUT_FILENO;
  std::string pending;
};

struct Rank {
  int index = 0;
  pid_t pid = -1;
  bool running = false;
  std::string prefix;
  OutputStream out, err;
};

/// Where the launch stands: ranks run; after a failure the others get a grace period; then
/// they are signalled, killed, and (if SIGKILL does not work) left behind.
enum class Phase { Running, Grace, Terminating, Killing, GaveUp };

class Launcher {
public:
  Launcher(Options options, std::string executable)
      : options_(std::move(options)), executable_(std::move(executable)) {}

  /// Starts the ranks, forwards their output until all have exited; returns the exit status.
  int run();

private:
  void blockSignals();
  void startRanks();
  [[noreturn]] void execRank(const Rank &rank, char **environment, int outFd, int errFd);
  [[noreturn]] void abortStart(std::string_view what);
  std::vector<pollfd> pollSet(std::vector<OutputStream *> &streams);
  ssize_t readInto(OutputStream &stream, std::string_view prefix);
  void readOutput(OutputStream &stream, std::string_view prefix);
  void drainAndClose(OutputStream &stream, std::string_view prefix);
  void closeStream(OutputStream &stream, std::string_view prefix);
  void flushLines(OutputStream &stream, std::string_view prefix, bool atEnd);
  void handleSignals();
  void reapExited();
  void finish(Rank &rank, int waitStatus);
  void onLauncherSignal(int signal);
  void handleDeadlines();
  void signalRunning(int signal);
  void enter(Phase phase, Seconds wait);
  std::optional<Clock::time_point> nextDeadline() const;
  std::vector<int> runningRanks() const;
  int exitStatus() const;

  Options options_;
  std::string executable_;
  std::vector<Rank> ranks_;
  sigset_t originalMask_{};
  int signalFd_ = -1;
  int devNull_ = -1;

  Phase phase_ = Phase::Running;
  std::optional<Clock::time_point> phaseDeadline_;
  std::optional<Clock::time_point> timeoutDeadline_;
  std::string lastSignal_;          ///< the one the launcher sent last, for messages
  std::optional<int> failedRank_;   ///< the first rank that failed on its own
  std::optional<int> firstFailure_; ///< the first status of such a rank, other than 77
  bool skipped_ = false;            ///< a rank exited 77 on its own
  bool timedOut_ = false;
  std::optional<int> interruption_; ///< the first signal the launcher got
};

int Launcher::run() {
  blockSignals();
  startRanks();
  if (options_.timeout)
    timeoutDeadline_ =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(*options_.timeout);

  std::vector<OutputStream *> streams;
  while (phase_ != Phase::GaveUp && !runningRanks().empty()) {
    std::vector<pollfd> fds = pollSet(streams);
    int timeoutMs = -1;
    if (std::optional<Clock::time_point> deadline = nextDeadline())
      timeoutMs = static_cast<int>(std::clamp<Clock::rep>(
          std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count(), 0,
          INT_MAX));
    if (poll(fds.data(), fds.size(), timeoutMs) < 0 && errno != EINTR)
      systemError("poll failed");
    for (std::size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents)
        readOutput(*streams[i], ranks_[static_cast<std::size_t>(i - 1) / 2].prefix);
    if (fds[0].revents)
      handleSignals();
    handleDeadlines();
  }
  return exitStatus();
}

void Launcher::blockSignals() {
  // Signals are read from a descriptor in the poll loop; ranks get the original mask back. One
  // ignored on entry stays ignored, for the ranks too, as in a shell (nohup mkc-launch ...).
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGCHLD);
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction disposition {};
    if (sigaction(signal, nullptr, &disposition) == 0 && disposition.sa_handler != SIG_IGN)
      sigaddset(&handled, signal);
  }
  sigprocmask(SIG_BLOCK, &handled, &originalMask_);
  signalFd_ = signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signalFd_ < 0)
    systemError("cannot create a signalfd");
  // A reader that went away loses the output; the ranks run on.
  signal(SIGPIPE, SIG_IGN);
}

void Launcher::startRanks() {
  devNull_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devNull_ < 0)
    systemError("cannot open /dev/null");
  const std::vector<std::string> inherited = inheritedEnvironment();
  const int port = options_.masterPort ? *options_.masterPort : freePort();
  const std::string token = jobToken();
  const int localWorldSize = options_.gpusPerNode.value_or(options_.ranks);

  ranks_.resize(static_cast<std::size_t>(options_.ranks));
  for (int index = 0; index < options_.ranks; ++index) {
    Rank &rank = ranks_[static_cast<std::size_t>(index)];
    rank.index = index;
    rank.prefix = fmt::format("[rank {}] ", index);

    std::vector<std::string> environment = inherited;
    environment.push_back(fmt::format("MKC_RANK={}", index));
    environment.push_back(fmt::format("MKC_WORLD_SIZE={}", options_.ranks));
    environment.push_back(fmt::format("MKC_LOCAL_RANK={}", index % localWorldSize));
    environment.push_back(fmt::format("MKC_LOCAL_WORLD_SIZE={}", localWorldSize));
    environment.push_back(fmt::format("MKC_MASTER_ADDR={}", kMasterAddress));
    environment.push_back(fmt::format("MKC_MASTER_PORT={}", port));
    environment.push_back(fmt::format("MKC_JOB_TOKEN={}", token));
    environment.push_back(fmt::format("MKC_DEVICE={}", index));
    if (options_.gpusPerNode)
      environment.push_back(fmt::format("MKC_GPUS_PER_NODE={}", *options_.gpusPerNode));
    std::vector<char *> environmentPointers;
    for (std::string &variable : environment)
      environmentPointers.push_back(variable.data());
    environmentPointers.push_back(nullptr);

    int outPipe[2] = {-1, -1}, errPipe[2] = {-1, -1};
    if (options_.prefix) {
      if (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0)
        abortStart(fmt::format("cannot create the pipes of rank {}", index));
      rank.out = {outPipe[0], STDOUT_FILENO, {}};
      rank.err = {errPipe[0], STDERR_FILENO, {}};
      fcntl(outPipe[0], F_SETFL, O_NONBLOCK);
      fcntl(errPipe[0], F_SETFL, O_NONBLOCK);
    }
    pid_t pid = fork();
    if (pid < 0)
      abortStart(fmt::format("cannot start rank {}", index));
    if (pid == 0)
      execRank(rank, environmentPointers.data(), outPipe[1], errPipe[1]);
    setpgid(pid, pid); // the rank does it too: whichever runs first
    rank.pid = pid;
    rank.running = true;
    if (options_.prefix) {
      close(outPipe[1]);
      close(errPipe[1]);
    }
  }
}

void Launcher::execRank(const Rank &rank, char **environment, int outFd, int errFd) {
  setpgid(0, 0);
  sigprocmask(SIG_SETMASK, &originalMask_, nullptr);
  signal(SIGPIPE, SIG_DFL); // an ignored signal stays ignored across exec
  dup2(devNull_, STDIN_FILENO);
  if (options_.prefix) {
    dup2(outFd, STDOUT_FILENO);
    dup2(errFd, STDERR_FILENO);
  }
  std::vector<char *> arguments;
  for (const std::string &argument : options_.command)
    arguments.push_back(const_cast<char *>(argument.c_str()));
  arguments.push_back(nullptr);
  execve(executable_.c_str(), arguments.data(), environment);
  say("error: rank {} cannot execute '{}': {}", rank.index, executable_, std::strerror(errno));
  _exit(127);
}

void Launcher::abortStart(std::string_view what) {
  const int error = errno;
  for (Rank &rank : ranks_)
    if (rank.running) {
      killpg(rank.pid, SIGKILL);
      waitpid(rank.pid, nullptr, 0);
    }
  errno = error;
  systemError("{}", what);
}

/// The signal descriptor first, then each open output stream, with `streams` naming them.
std::vector<pollfd> Launcher::pollSet(std::vector<OutputStream *> &streams) {
  std::vector<pollfd> fds = {{signalFd_, POLLIN, 0}};
  streams.assign(1, nullptr);
  for (Rank &rank : ranks_)
    for (OutputStream *stream : {&rank.out, &rank.err}) {
      // A closed stream keeps its place (poll skips negative descriptors), so that the index
      // says the rank.
      fds.push_back({stream->fd, POLLIN, 0});
      streams.push_back(stream);
    }
  return fds;
}

ssize_t Launcher::readInto(OutputStream &stream, std::string_view prefix) {
  char buffer[64 * 1024];
  ssize_t count = read(stream.fd, buffer, sizeof buffer);
  if (count > 0) {
    stream.pending.append(buffer, static_cast<std::size_t>(count));
    flushLines(stream, prefix, /*atEnd=*/false);
  }
  return count;
}

void Launcher::readOutput(OutputStream &stream, std::string_view prefix) {
  ssize_t count = readInto(stream, prefix);
  if (count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR))
    closeStream(stream, prefix);
}

void Launcher::drainAndClose(OutputStream &stream, std::string_view prefix) {
  if (stream.fd < 0)
    return;
  for (std::size_t drained = 0; drained < kMaxDrain;) {
    ssize_t count = readInto(stream, prefix);
    if (count <= 0)
      break; // all read (EAGAIN), or the end
    drained += static_cast<std::size_t>(count);
  }
  closeStream(stream, prefix);
}

void Launcher::closeStream(OutputStream &stream, std::string_view prefix) {
  flushLines(stream, prefix, /*atEnd=*/true);
  close(stream.fd);
  stream.fd = -1;
}

/// Writes the complete lines of `stream.pending` with `prefix`, in one write; a line longer than
/// kMaxLine is cut. At the end of the stream a last partial line goes too, with a newline.
void Launcher::flushLines(OutputStream &stream, std::string_view prefix, bool atEnd) {
  std::string text;
  std::string_view rest = stream.pending;
  for (;;) {
    const std::size_t newline = rest.find('\n');
    std::size_t length;
    if (newline != std::string_view::npos && newline <= kMaxLine)
      length = newline;
    else if (rest.size() >= kMaxLine)
      length = kMaxLine;
    else if (atEnd && !rest.empty())
      length = rest.size();
    else
      break;
    text.append(prefix).append(rest.substr(0, length)).push_back('\n');
    rest.remove_prefix(length + (length == newline ? 1 : 0));
  }
  stream.pending.erase(0, stream.pending.size() - rest.size());
  writeAll(stream.target, text);
}

void Launcher::handleSignals() {
  signalfd_siginfo info{};
  while (read(signalFd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
    if (info.ssi_signo == SIGCHLD)
      reapExited();
    else
      onLauncherSignal(static_cast<int>(info.ssi_signo));
  }
}

void Launcher::reapExited() {
  for (;;) {
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0)
      return;
    auto rank = std::find_if(ranks_.begin(), ranks_.end(),
                             [&](const Rank &rank) { return rank.pid == info.si_pid; });
    // What the rank leaves behind dies with it; while the rank is a zombie, its group id is
    // still its own.
    if (rank != ranks_.end())
      killpg(info.si_pid, SIGKILL);
    int waitStatus = 0;
    waitpid(info.si_pid, &waitStatus, 0);
    if (rank != ranks_.end())
      finish(*rank, waitStatus);
  }
}

void Launcher::finish(Rank &rank, int waitStatus) {
  rank.running = false;
  // Its output is in the pipes now: forward it before saying how the rank ended.
  drainAndClose(rank.out, rank.prefix);
  drainAndClose(rank.err, rank.prefix);

  const bool signalled = WIFSIGNALED(waitStatus);
  const int status = signalled ? 128 + WTERMSIG(waitStatus) : WEXITSTATUS(waitStatus);
  // After the launcher sent signals, how ranks end is its doing, not theirs.
  if (status == 0 || phase_ > Phase::Grace)
    return;
  if (signalled)
    say("rank {} was killed by signal {}", rank.index, signalName(WTERMSIG(waitStatus)));
  else if (status == kSkippedStatus)
    say("rank {} exited with status {} (skipped)", rank.index, status);
  else
    say("rank {} exited with status {}", rank.index, status);
  if (status == kSkippedStatus)
    skipped_ = true;
  else if (!firstFailure_)
    firstFailure_ = status;
  if (phase_ == Phase::Running) {
    failedRank_ = rank.index;
    enter(Phase::Grace, options_.grace);
  }
}

void Launcher::onLauncherSignal(int signal) {
  if (!interruption_)
    interruption_ = signal;
  const std::string name = signalName(signal);
  if (phase_ < Phase::Terminating) {
    say("got {}: forwarding it to {}", name, formatRanks(runningRanks()));
    lastSignal_ = name;
    signalRunning(signal);
    enter(Phase::Terminating, options_.grace);
  } else if (phase_ == Phase::Terminating) {
    say("got {} while stopping: sending SIGKILL to {}", name, formatRanks(runningRanks()));
    signalRunning(SIGKILL);
    enter(Phase::Killing, kKillWait);
  }
}

void Launcher::handleDeadlines() {
  const Clock::time_point now = Clock::now();
  if (runningRanks().empty())
    return;
  if (timeoutDeadline_ && now >= *timeoutDeadline_ && phase_ < Phase::Terminating) {
    timedOut_ = true;
    say("timeout after {:g} s: {} still running; sending SIGTERM", options_.timeout->count(),
        formatRanks(runningRanks()));
    lastSignal_ = "SIGTERM";
    signalRunning(SIGTERM);
    enter(Phase::Terminating, options_.grace);
    return;
  }
  if (!phaseDeadline_ || now < *phaseDeadline_)
    return;
  switch (phase_) {
  case Phase::Grace:
    say("{} still running {:g} s after rank {} failed; sending SIGTERM",
        formatRanks(runningRanks()), options_.grace.count(), *failedRank_);
    lastSignal_ = "SIGTERM";
    signalRunning(SIGTERM);
    enter(Phase::Terminating, options_.grace);
    break;
  case Phase::Terminating:
    say("{} still running {:g} s after {}; sending SIGKILL", formatRanks(runningRanks()),
        options_.grace.count(), lastSignal_);
    signalRunning(SIGKILL);
    enter(Phase::Killing, kKillWait);
    break;
  case Phase::Killing:
    say("{} still running {:g} s after SIGKILL (stuck in the kernel?); leaving them behind",
        formatRanks(runningRanks()), kKillWait.count());
    phase_ = Phase::GaveUp;
    break;
  case Phase::Running:
  case Phase::GaveUp:
    break;
  }
}

void Launcher::signalRunning(int signal) {
  for (const Rank &rank : ranks_)
    if (rank.running && killpg(rank.pid, signal) != 0)
      kill(rank.pid, signal); // the rank left its group
}

void Launcher::enter(Phase phase, Seconds wait) {
  phase_ = phase;
  phaseDeadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(wait);
}

std::optional<Clock::time_point> Launcher::nextDeadline() const {
  std::optional<Clock::time_point> deadline = phaseDeadline_;
  if (timeoutDeadline_ && phase_ < Phase::Terminating)
    deadline = deadline ? std::min(*deadline, *timeoutDeadline_) : *timeoutDeadline_;
  return deadline;
}

std::vector<int> Launcher::runningRanks() const {
  std::vector<int> running;
  for (const Rank &rank : ranks_)
    if (rank.running)
      running.push_back(rank.index);
  return running;
}

int Launcher::exitStatus() const {
  if (firstFailure_)
    return *firstFailure_;
  if (timedOut_)
    return kTimeoutStatus;
  if (interruption_)
    return 128 + *interruption_;
  return skipped_ ? kSkippedStatus : 0;
}

} // namespace

int main(int argc, char **argv) {
  Options options = parseCommandLine(argc, argv);
  std::string executable = resolveProgram(options.command.front());
  return Launcher(std::move(options), std::move(executable)).run();
}
