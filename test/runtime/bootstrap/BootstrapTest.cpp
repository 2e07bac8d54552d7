//===- BootstrapTest.cpp - launch environments, the TCP store, process groups ----===//
//
// Environments are parsed from maps. Rendezvous tests fork one process per rank on 127.0.0.1, at
// a port reserved for the test so that tests running in parallel never meet; each rank reports
// what it saw (or its error) through a pipe, and the parent checks the reports.
//
//===----------------------------------------------------------------------===//

#include "mk/runtime/bootstrap/Bootstrap.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>

using namespace mkc;
using namespace std::chrono_literals;

namespace {

//===----------------------------------------------------------------------===//
// Environments
//===----------------------------------------------------------------------===//

Environment torchrunEnvironment() {
  return {{"RANK", "5"},
          {"WORLD_SIZE", "8"},
          {"LOCAL_RANK", "1"},
          {"LOCAL_WORLD_SIZE", "4"},
          {"MASTER_ADDR", "10.0.0.1"},
          {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_RUN_ID", "run7"}};
}

Environment srunEnvironment() {
  return {{"SLURM_PROCID", "5"},
          {"SLURM_NTASKS", "8"},
          {"SLURM_STEP_NUM_TASKS", "6"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"},
          {"SLURM_STEP_TASKS_PER_NODE", "4,2"},
          {"SLURM_TASKS_PER_NODE", "4(x2)"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_NNODES", "3"},
          {"SLURM_JOB_ID", "1234"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEP_NODELIST", "gpu07,gpu08"}};
}

Environment mpirunEnvironment() {
  return {{"OMPI_COMM_WORLD_RANK", "3"},
          {"OMPI_COMM_WORLD_SIZE", "4"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
          {"OMPI_MCA_orte_hnp_uri", "2752315392.0;tcp://10.0.0.1:41235"},
          {"MASTER_ADDR", "node0"}};
}

/// `environment` with `changes` applied; an empty value unsets, as in the environment itself.
Environment with(Environment environment,
                 std::initializer_list<std::pair<const std::string, std::string>> changes) {
  for (const auto &[name, value] : changes)
    environment[name] = value;
  return environment;
}

/// The message of the error detecting `environment` throws, empty if it does not.
std::string errorOf(const Environment &environment) {
  try {
    detectLaunchEnvironment(environment);
  } catch (const BootstrapError &error) {
    return error.what();
  }
  return "";
}

TEST_CASE("bootstrap: torchrun's variables", "[bootstrap][environment]") {
  const LaunchEnvironment launch = detectLaunchEnvironment(torchrunEnvironment());
  CHECK(launch.launcher == Launcher::Torchrun);
  CHECK(launcherName(launch.launcher) == "torchrun");
  CHECK(launch.rank == 5);
  CHECK(launch.worldSize == 8);
  REQUIRE(launch.localRank);
  CHECK(launch.localRank->value == 1);
  CHECK(launch.localRank->variable == "LOCAL_RANK");
  REQUIRE(launch.localWorldSize);
  CHECK(launch.localWorldSize->value == 4);
  CHECK_FALSE(launch.nodeCount);
  CHECK(launch.jobId == "run7");
  CHECK(launch.rendezvous.address == "10.0.0.1");
  CHECK(launch.rendezvous.port == 29501); // torchrun's agent holds MASTER_PORT
  CHECK(launch.rendezvous.timeout == 60s);
  // Another run at the same master is another job.
  CHECK(launch.rendezvous.jobToken !=
        detectLaunchEnvironment(with(torchrunEnvironment(), {{"TORCHELASTIC_RUN_ID", "run8"}}))
            .rendezvous.jobToken);
}

TEST_CASE("bootstrap: MKC_ variables override the launcher's", "[bootstrap][environment]") {
  const LaunchEnvironment launch =
      detectLaunchEnvironment(with(torchrunEnvironment(), {{"MKC_RANK", "6"},
                                                           {"MKC_LOCAL_WORLD_SIZE", "8"},
                                                           {"MKC_MASTER_ADDR", "127.0.0.1"},
                                                           {"MKC_MASTER_PORT", "40000"},
                                                           {"MKC_JOB_TOKEN", "secret"},
                                                           {"MKC_BOOTSTRAP_TIMEOUT", "2.5"},
                                                           {"MKC_GPUS_PER_NODE", "2"}}));
  CHECK(launch.launcher == Launcher::Torchrun);
  CHECK(launch.rank == 6);
  CHECK(launch.localWorldSize->value == 8);
  CHECK(launch.localWorldSize->variable == "MKC_LOCAL_WORLD_SIZE");
  CHECK(launch.localRank->variable == "LOCAL_RANK");
  CHECK(launch.rendezvous.address == "127.0.0.1");
  CHECK(launch.rendezvous.port == 40000);
  CHECK(launch.rendezvous.jobToken == "secret");
  CHECK(launch.rendezvous.timeout == 2500ms);
  CHECK(launch.gpusPerNode == 2);
  CHECK_FALSE(launch.nodeId);
  // An empty variable is unset.
  CHECK(detectLaunchEnvironment(with(torchrunEnvironment(), {{"MKC_RANK", ""}})).rank == 5);
}

TEST_CASE("bootstrap: MKC_ variables alone", "[bootstrap][environment]") {
  const LaunchEnvironment launch = detectLaunchEnvironment({{"MKC_RANK", "0"},
                                                            {"MKC_WORLD_SIZE", "2"},
                                                            {"MKC_MASTER_ADDR", "localhost"},
                                                            {"MKC_MASTER_PORT", "5000"},
                                                            {"MKC_NODE_ID", "1"}});
  CHECK(launch.launcher == Launcher::Explicit);
  CHECK(launch.worldSize == 2);
  CHECK_FALSE(launch.localRank);
  CHECK(launch.jobId.empty());
  CHECK(launch.rendezvous.port == 5000);
  CHECK(launch.nodeId == 1);
  CHECK_FALSE(launch.rendezvous.jobToken.empty());
}

TEST_CASE("bootstrap: a process without a launcher is a world of one", "[bootstrap][environment]") {
  const LaunchEnvironment launch = detectLaunchEnvironment(Environment{});
  CHECK(launch.launcher == Launcher::Standalone);
  CHECK(launch.rank == 0);
  CHECK(launch.worldSize == 1);
  CHECK_FALSE(launch.localRank);
  // It meets no one, so it needs no address; its token names the process, so that two worlds
  // of one on a host do not take each other's node sockets.
  CHECK(launch.rendezvous.address.empty());
  CHECK(launch.rendezvous.port == 0);
  CHECK_THAT(launch.rendezvous.jobToken, Catch::EndsWith(fmt::format("|pid {}", ::getpid())));
  // So is a launch of one rank, whatever says so.
  const LaunchEnvironment one =
      detectLaunchEnvironment(with(torchrunEnvironment(), {{"RANK", "0"},
                                                           {"WORLD_SIZE", "1"},
                                                           {"LOCAL_RANK", "0"},
                                                           {"LOCAL_WORLD_SIZE", "1"},
                                                           {"MASTER_ADDR", ""}}));
  CHECK(one.launcher == Launcher::Torchrun);
  CHECK(one.worldSize == 1);
  CHECK(one.rendezvous.address.empty());
  CHECK(detectLaunchEnvironment({{"MKC_JOB_TOKEN", "mine"}}).rendezvous.jobToken == "mine");
}

TEST_CASE("bootstrap: srun's variables", "[bootstrap][environment]") {
  const LaunchEnvironment launch = detectLaunchEnvironment(srunEnvironment());
  CHECK(launch.launcher == Launcher::Slurm);
  CHECK(launch.rank == 5);
  CHECK(launch.worldSize == 6); // the step's tasks, not the allocation's
  CHECK(launch.localRank->value == 1);
  CHECK(launch.localWorldSize->value == 2); // node 1 of "4,2"
  CHECK(launch.localWorldSize->variable == "SLURM_STEP_TASKS_PER_NODE");
  REQUIRE(launch.nodeCount);
  CHECK(launch.nodeCount->value == 2);
  CHECK(launch.jobId == "1234.0");
  CHECK(launch.rendezvous.address == "gpu07");
  // Without MASTER_PORT, a port derived from the job id: the same on every rank, below the
  // ephemeral range.
  CHECK(launch.rendezvous.port >= 20000);
  CHECK(launch.rendezvous.port < 32000);
  CHECK(detectLaunchEnvironment(with(srunEnvironment(), {{"SLURM_PROCID", "0"}})).rendezvous.port ==
        launch.rendezvous.port);
  CHECK(
      detectLaunchEnvironment(with(srunEnvironment(), {{"SLURM_STEP_ID", "1"}})).rendezvous.port !=
      launch.rendezvous.port);

  SECTION("compressed task lists") {
    const Environment compressed = with(srunEnvironment(), {{"SLURM_STEP_TASKS_PER_NODE", ""},
                                                            {"SLURM_TASKS_PER_NODE", "1,2(x3),4"},
                                                            {"SLURM_STEP_NUM_TASKS", "11"}});
    for (auto [node, tasks] : {std::pair{0, 1}, {1, 2}, {3, 2}, {4, 4}})
      CHECK(detectLaunchEnvironment(
                with(compressed, {{"SLURM_NODEID", std::to_string(node)}, {"SLURM_LOCALID", "0"}}))
                .localWorldSize->value == tasks);
    CHECK(errorOf(with(compressed, {{"SLURM_NODEID", "5"}})) ==
          "SLURM_NODEID=5 but SLURM_TASKS_PER_NODE=1,2(x3),4 lists 5 nodes");
    CHECK(errorOf(with(compressed, {{"SLURM_TASKS_PER_NODE", "2(x"}})) ==
          "SLURM_TASKS_PER_NODE='2(x' is not a Slurm task list such as 4(x2),2");
  }
  SECTION("the master address") {
    CHECK(detectLaunchEnvironment(with(srunEnvironment(), {{"SLURM_STEP_NODELIST", "gpu07"}}))
              .rendezvous.address == "gpu07");
    const Environment compressed = with(srunEnvironment(), {{"SLURM_STEP_NODELIST", "gpu[07-08]"}});
    CHECK_THAT(errorOf(compressed), Catch::Contains("SLURM_STEP_NODELIST=gpu[07-08]") &&
                                        Catch::Contains("set MASTER_ADDR"));
    const LaunchEnvironment given = detectLaunchEnvironment(
        with(compressed, {{"MASTER_ADDR", "gpu07"}, {"MASTER_PORT", "7000"}}));
    CHECK(given.rendezvous.address == "gpu07");
    CHECK(given.rendezvous.port == 7001);
  }
}

TEST_CASE("bootstrap: mpirun's variables", "[bootstrap][environment]") {
  const LaunchEnvironment launch = detectLaunchEnvironment(mpirunEnvironment());
  CHECK(launch.launcher == Launcher::OpenMpi);
  CHECK(launch.rank == 3);
  CHECK(launch.worldSize == 4);
  CHECK(launch.localRank->value == 1);
  CHECK(launch.localWorldSize->value == 2);
  CHECK(launch.localWorldSize->variable == "OMPI_COMM_WORLD_LOCAL_SIZE");
  CHECK(launch.jobId == "2752315392.0;tcp://10.0.0.1:41235");
  CHECK(launch.rendezvous.address == "node0");
  CHECK(detectLaunchEnvironment(with(mpirunEnvironment(), {{"OMPI_MCA_orte_hnp_uri", ""},
                                                           {"PMIX_NAMESPACE", "prterun-n0-77"}}))
            .jobId == "prterun-n0-77");
  CHECK(errorOf(with(mpirunEnvironment(), {{"MASTER_ADDR", ""}})) ==
        "mpirun (Open MPI): MKC_MASTER_ADDR or MASTER_ADDR is not set");
}

TEST_CASE("bootstrap: the innermost launcher wins", "[bootstrap][environment]") {
  Environment inAllocation = srunEnvironment();
  inAllocation.merge(torchrunEnvironment());
  CHECK(detectLaunchEnvironment(inAllocation).launcher == Launcher::Torchrun);
  inAllocation = srunEnvironment();
  inAllocation.merge(mpirunEnvironment());
  CHECK(detectLaunchEnvironment(inAllocation).launcher == Launcher::OpenMpi);
}

TEST_CASE("bootstrap: errors name the missing or inconsistent variable",
          "[bootstrap][environment]") {
  const Environment torchrun = torchrunEnvironment();
  const std::vector<std::pair<Environment, std::string>> cases = {
      {with(torchrun, {{"WORLD_SIZE", ""}}), "torchrun: MKC_WORLD_SIZE or WORLD_SIZE is not set"},
      {with(torchrun, {{"RANK", "8"}}), "RANK=8 is not less than WORLD_SIZE=8"},
      {with(torchrun, {{"MKC_RANK", "9"}}), "MKC_RANK=9 is not less than WORLD_SIZE=8"},
      {with(torchrun, {{"RANK", "two"}}), "RANK='two' is not a non-negative integer"},
      {with(torchrun, {{"RANK", "-1"}}), "RANK='-1' is not a non-negative integer"},
      {with(torchrun, {{"RANK", "0"}, {"WORLD_SIZE", "0"}}),
       "WORLD_SIZE=0: a world has at least one rank"},
      {with(torchrun, {{"LOCAL_RANK", "4"}}), "LOCAL_RANK=4 is not less than LOCAL_WORLD_SIZE=4"},
      {with(torchrun, {{"LOCAL_WORLD_SIZE", "16"}}), "LOCAL_WORLD_SIZE=16 exceeds WORLD_SIZE=8"},
      {with(torchrun, {{"MASTER_ADDR", ""}}),
       "torchrun: MKC_MASTER_ADDR or MASTER_ADDR is not set"},
      {with(torchrun, {{"MASTER_PORT", ""}, {"TORCHELASTIC_RUN_ID", ""}}),
       "torchrun: MKC_MASTER_PORT or MASTER_PORT is not set"},
      {with(torchrun, {{"MASTER_PORT", "65535"}}),
       "MASTER_PORT=65535 leaves no port for the store (it listens on MASTER_PORT + 1); set "
       "MKC_MASTER_PORT"},
      {with(torchrun, {{"MKC_MASTER_PORT", "70000"}}),
       "MKC_MASTER_PORT=70000 is not a TCP port (1-65535)"},
      {with(torchrun, {{"MKC_GPUS_PER_NODE", "3"}}),
       "MKC_GPUS_PER_NODE=3 does not divide WORLD_SIZE=8"},
      {with(torchrun, {{"MKC_GPUS_PER_NODE", "2"}, {"MKC_NODE_ID", "0"}}),
       "MKC_GPUS_PER_NODE and MKC_NODE_ID both say what a node is: set one of them"},
      {with(torchrun, {{"MKC_NODE_ID", "8"}}),
       "MKC_NODE_ID=8 is not less than WORLD_SIZE=8: every node has a rank"},
      {with(torchrun, {{"MKC_BOOTSTRAP_TIMEOUT", "soon"}}),
       "MKC_BOOTSTRAP_TIMEOUT='soon' is not a number of seconds"},
      {with(srunEnvironment(), {{"SLURM_STEP_NUM_TASKS", ""}, {"SLURM_NTASKS", ""}}),
       "srun: MKC_WORLD_SIZE or SLURM_STEP_NUM_TASKS or SLURM_NTASKS is not set"},
      {{{"MKC_RANK", "0"}, {"MKC_WORLD_SIZE", "2"}, {"MKC_MASTER_ADDR", "127.0.0.1"}},
       "MKC_* variables: MKC_MASTER_PORT or MASTER_PORT is not set"},
      {{{"MKC_RANK", "0"}}, "MKC_* variables: MKC_WORLD_SIZE is not set"},
      {{{"MKC_GPUS_PER_NODE", "2"}}, "MKC_GPUS_PER_NODE=2 does not divide MKC_WORLD_SIZE=1"},
  };
  for (const auto &[environment, error] : cases)
    CHECK(errorOf(environment) == error);
}

//===----------------------------------------------------------------------===//
// Processes
//===----------------------------------------------------------------------===//

/// A port on 127.0.0.1 that no other socket takes while this object lives: bound (to a port no
/// socket had) but never listening, with SO_REUSEADDR set afterwards so that rank 0's store,
/// which sets it too, can listen there. Until it does, connecting is refused.
class ReservedPort {
public:
  ReservedPort() : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    int on = 1;
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr *>(&address), sizeof address) == 0);
    REQUIRE(::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) == 0);
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr *>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
  }
  ~ReservedPort() { ::close(fd_); }
  ReservedPort(const ReservedPort &) = delete;
  ReservedPort &operator=(const ReservedPort &) = delete;

  std::uint16_t port() const { return port_; }
  /// Listens without ever answering, as another program holding the port would.
  void occupy() const { REQUIRE(::listen(fd_, 16) == 0); }
  Rendezvous rendezvous(std::string token, Timeout timeout) const {
    return {"127.0.0.1", port_, std::move(token), timeout};
  }
  /// MKC_ variables for rank `rank` of `worldSize` meeting at this port.
  Environment environment(int rank, int worldSize, std::string_view timeoutSeconds) const {
    return {{"MKC_RANK", std::to_string(rank)},
            {"MKC_WORLD_SIZE", std::to_string(worldSize)},
            {"MKC_MASTER_ADDR", "127.0.0.1"},
            {"MKC_MASTER_PORT", std::to_string(port_)},
            {"MKC_BOOTSTRAP_TIMEOUT", std::string(timeoutSeconds)}};
  }

private:
  int fd_;
  std::uint16_t port_ = 0;
};

struct RankReport {
  bool succeeded = false;
  std::string text;   // what the rank returned, or its error
  double seconds = 0; // from the start of all ranks to this one's end
};

void writeAll(int fd, std::string_view text) {
  while (!text.empty()) {
    ssize_t written = ::write(fd, text.data(), text.size());
    if (written < 0 && errno == EINTR)
      continue;
    if (written <= 0)
      return;
    text.remove_prefix(static_cast<std::size_t>(written));
  }
}

/// Runs `body(rank)` for each of `ranks`, each in a process of its own, all at once, and returns
/// their reports by position in `ranks`. A rank that exits without reporting (it died) reports
/// nothing; one that stops itself (SIGSTOP) is killed once the others are done; one that has
/// not finished within `limit` is killed and reported as hung.
std::vector<RankReport> runRanks(const std::vector<int> &ranks,
                                 const std::function<std::string(int)> &body,
                                 std::chrono::seconds limit = 30s) {
  struct Child {
    pid_t pid;
    int output;
    std::string received;
    bool open = true;
    bool stopped = false;
    RankReport report;
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<Child> children;
  for (int rank : ranks) {
    int channel[2];
    REQUIRE(::pipe(channel) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(channel[0]);
      std::string report;
      try {
        report = "ok\n" + body(rank);
      } catch (const std::exception &error) {
        report = std::string("error\n") + error.what();
      }
      writeAll(channel[1], report);
      ::_exit(0);
    }
    ::close(channel[1]);
    children.push_back({pid, channel[0], {}, true, false, {}});
  }
  const auto running = [&] {
    return std::ranges::any_of(children, [](const Child &c) { return c.open && !c.stopped; });
  };
  while (running() && std::chrono::steady_clock::now() < start + limit) {
    std::vector<pollfd> events;
    for (const Child &child : children)
      events.push_back({child.open ? child.output : -1, POLLIN, 0});
    ::poll(events.data(), events.size(), 50);
    for (std::size_t i = 0; i < children.size(); ++i) {
      Child &child = children[i];
      if (events[i].revents) {
        char buffer[4096];
        ssize_t received = ::read(child.output, buffer, sizeof buffer);
        if (received > 0) {
          child.received.append(buffer, static_cast<std::size_t>(received));
        } else if (received == 0 || errno != EINTR) {
          child.open = false;
          child.report.seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        }
      }
      int status = 0;
      if (child.open && ::waitpid(child.pid, &status, WNOHANG | WUNTRACED) == child.pid &&
          WIFSTOPPED(status))
        child.stopped = true;
    }
  }
  std::vector<RankReport> reports;
  for (Child &child : children) {
    if (child.open) {
      ::kill(child.pid, SIGKILL);
      child.received = child.stopped ? "stopped" : "hung";
    }
    ::close(child.output);
    while (::waitpid(child.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    const std::size_t newline = child.received.find('\n');
    child.report.succeeded = child.received.starts_with("ok\n");
    child.report.text =
        newline == std::string::npos ? child.received : child.received.substr(newline + 1);
    reports.push_back(child.report);
  }
  return reports;
}

std::span<const std::byte> bytesOf(std::string_view text) { return std::as_bytes(std::span(text)); }

std::string textOf(const std::vector<std::byte> &blob) {
  return std::string(reinterpret_cast<const char *>(blob.data()), blob.size());
}

/// The error of `operation`, or "no error".
std::string errorOf(const std::function<void()> &operation) {
  try {
    operation();
  } catch (const BootstrapError &error) {
    return error.what();
  }
  return "no error";
}

TEST_CASE("bootstrap: allGather and barrier across four processes", "[bootstrap][store]") {
  const ReservedPort port;
  const auto reports = runRanks({0, 1, 2, 3}, [&](int rank) {
    TcpStore store(rank, 4, port.rendezvous("job", 20s));
    std::string seen;
    // Rank 0 contributes nothing; rank 2 more than a socket buffer holds.
    const std::string mine =
        rank == 2 ? std::string(8 << 20, 'x') : std::string(rank, static_cast<char>('a' + rank));
    for (const auto &blob : store.allGather(bytesOf(mine)))
      seen += (blob.size() > 100 ? fmt::format("{} bytes", blob.size()) : textOf(blob)) + "|";
    for (int i = 0; i < 3; ++i)
      store.barrier();
    for (const auto &blob : store.allGather(bytesOf(std::to_string(rank * rank)), 5s))
      seen += textOf(blob) + "|";
    store.barrier(5s);
    return seen;
  });
  for (const RankReport &report : reports) {
    CHECK(report.succeeded);
    CHECK(report.text == "|b|8388608 bytes|ddd|0|1|4|9|");
  }
}

TEST_CASE("bootstrap: a world of one answers in the process", "[bootstrap][store]") {
  // No port: a store that listened or connected would fail here.
  TcpStore store(0, 1, Rendezvous{"", 0, "token", 100ms});
  const std::vector<std::vector<std::byte>> blobs = store.allGather(bytesOf("alone"));
  REQUIRE(blobs.size() == 1);
  CHECK(textOf(blobs[0]) == "alone");
  store.barrier();
  ProcessGroup group(detectLaunchEnvironment(Environment{}));
  CHECK(group.nodeCount() == 1);
  CHECK(group.nodeRanks() == std::vector<int>{0});
}

TEST_CASE("bootstrap: a rank that never arrives is named within the timeout",
          "[bootstrap][store]") {
  const ReservedPort port;
  const auto reports = runRanks({0, 1}, [&](int rank) {
    TcpStore store(rank, 3, port.rendezvous("job", 1s));
    const std::string first = errorOf([&] { store.barrier(); });
    return first + "\n" + errorOf([&] { store.allGather({}); });
  });
  for (int rank : {0, 1}) {
    const RankReport &report = reports[rank];
    CHECK(report.succeeded);
    CHECK_THAT(report.text,
               Catch::Contains(fmt::format(
                   "barrier failed on rank {}: operation 0 (barrier) timed out after 1 s: rank 2 "
                   "never connected to the store",
                   rank)));
    CHECK_THAT(report.text, Catch::Contains(fmt::format(
                                "allGather on rank {}: the store failed earlier", rank)));
    CHECK(report.seconds < 4);
  }
}

TEST_CASE("bootstrap: without rank 0, the others fail once the timeout has passed",
          "[bootstrap][store]") {
  const ReservedPort port;
  const auto reports = runRanks({1}, [&](int rank) {
    TcpStore store(rank, 2, port.rendezvous("job", 1s));
    return std::string("joined");
  });
  CHECK_FALSE(reports[0].succeeded);
  CHECK_THAT(reports[0].text, Catch::StartsWith(fmt::format(
                                  "rank 1 could not reach the store at 127.0.0.1:{} within "
                                  "1 s: Connection refused; is rank 0 running there?",
                                  port.port())));
  CHECK(reports[0].seconds >= 1);
  CHECK(reports[0].seconds < 4);
}

TEST_CASE("bootstrap: a rank that dies after joining is named at once", "[bootstrap][store]") {
  const ReservedPort port;
  const auto reports = runRanks({0, 1, 2}, [&](int rank) {
    TcpStore store(rank, 3, port.rendezvous("job", 30s));
    store.barrier();
    if (rank == 2)
      ::_exit(1); // no goodbye, as in a crash
    store.barrier();
    return std::string("no error");
  });
  for (int rank : {0, 1}) {
    CHECK_FALSE(reports[rank].succeeded);
    CHECK_THAT(reports[rank].text,
               Catch::Matches(fmt::format("barrier failed on rank {}: rank 2 died: its connection "
                                          "from 127\\.0\\.0\\.1:[0-9]+ closed without a goodbye",
                                          rank)));
    CHECK(reports[rank].seconds < 10); // far from the 30 s timeout
  }
}

TEST_CASE("bootstrap: when rank 0 dies, the others lose the store at once", "[bootstrap][store]") {
  const ReservedPort port;
  const auto reports = runRanks({0, 1, 2}, [&](int rank) {
    TcpStore store(rank, 3, port.rendezvous("job", 30s));
    store.barrier();
    if (rank == 0)
      ::_exit(1);
    store.barrier();
    return std::string("no error");
  });
  for (int rank : {1, 2}) {
    CHECK_FALSE(reports[rank].succeeded);
    CHECK(reports[rank].text ==
          fmt::format("barrier failed on rank {}: lost the connection to the store (rank 0 at "
                      "127.0.0.1:{}): rank 0 died or destroyed its store",
                      rank, port.port()));
    CHECK(reports[rank].seconds < 10);
  }
}

TEST_CASE("bootstrap: an unresponsive rank 0 is an error, not a hang", "[bootstrap][store]") {
  const ReservedPort port;
  const auto reports = runRanks({0, 1}, [&](int rank) {
    TcpStore store(rank, 2, port.rendezvous("job", 1s));
    store.barrier();
    if (rank == 0)
      ::raise(SIGSTOP); // its service thread stops with it
    store.barrier();
    return std::string("no error");
  });
  CHECK(reports[0].text == "stopped");
  CHECK_FALSE(reports[1].succeeded);
  CHECK(reports[1].text ==
        fmt::format("barrier failed on rank 1: no answer from the store (rank 0 at 127.0.0.1:{}) "
                    "within 1 s plus 5 s: rank 0 is unreachable or hangs",
                    port.port()));
  CHECK(reports[1].seconds < 10);
}

TEST_CASE("bootstrap: a rank that left is not waited for", "[bootstrap][store]") {
  const ReservedPort port;
  const auto reports = runRanks({0, 1}, [&](int rank) {
    TcpStore store(rank, 2, port.rendezvous("job", 30s));
    store.barrier();
    if (rank == 1)
      return std::string("left");
    store.barrier();
    return std::string("no error");
  });
  CHECK(reports[1].text == "left");
  CHECK_FALSE(reports[0].succeeded);
  CHECK(reports[0].text ==
        "barrier failed on rank 0: operation 1 (barrier): rank 1 has left the store");
  CHECK(reports[0].seconds < 10);
}

TEST_CASE("bootstrap: ranks calling different operations fail together", "[bootstrap][store]") {
  const ReservedPort port;
  const auto reports = runRanks({0, 1}, [&](int rank) {
    TcpStore store(rank, 2, port.rendezvous("job", 30s));
    if (rank == 0)
      store.barrier();
    else
      store.allGather(bytesOf("1"));
    return std::string("no error");
  });
  for (const RankReport &report : reports) {
    CHECK_FALSE(report.succeeded);
    CHECK_THAT(
        report.text,
        Catch::Contains("operation 0: rank 1 called allGather, but rank 0 called barrier") ||
            Catch::Contains("operation 0: rank 0 called barrier, but rank 1 called allGather"));
  }
}

TEST_CASE("bootstrap: a wrong token is rejected on both sides", "[bootstrap][store]") {
  const ReservedPort port;
  const auto reports = runRanks({0, 1}, [&](int rank) {
    TcpStore store(rank, 2, port.rendezvous(rank == 0 ? "job-a" : "job-b", 2s));
    store.barrier();
    return std::string("no error");
  });
  CHECK_FALSE(reports[1].succeeded);
  CHECK(reports[1].text == fmt::format("the store at 127.0.0.1:{} rejected rank 1: wrong job "
                                       "token: it belongs to another job, or MKC_JOB_TOKEN "
                                       "differs between ranks",
                                       port.port()));
  CHECK_FALSE(reports[0].succeeded);
  CHECK_THAT(reports[0].text,
             Catch::Matches("barrier failed on rank 0: operation 0 \\(barrier\\) timed out after 2 "
                            "s: rank 1 never connected to the store; rejected connections: "
                            "127\\.0\\.0\\.1:[0-9]+ claiming rank 1: wrong job token: .*"));
}

/// Opens a connection to 127.0.0.1:`port` as a stranger would, sends `bytes` and closes its side,
/// and returns what comes back until the other side closes (within 5 s).
std::string strayExchange(std::uint16_t port, std::string_view bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval patience{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof address) == 0) {
    writeAll(fd, bytes);
    ::shutdown(fd, SHUT_WR);
    char buffer[4096];
    for (ssize_t received; (received = ::recv(fd, buffer, sizeof buffer, 0)) > 0;)
      answer.append(buffer, static_cast<std::size_t>(received));
  }
  ::close(fd);
  return answer;
}

/// The store's hello, as documented in Bootstrap.h: magic, version, rank, world size, token hash.
std::string hello(std::uint32_t version, std::uint32_t rank, std::uint32_t worldSize,
                  std::uint64_t tokenHash) {
  std::string bytes = "MKCSTORE";
  const auto little = [&](std::uint64_t value, int width) {
    for (int byte = 0; byte < width; ++byte)
      bytes.push_back(static_cast<char>(value >> (8 * byte)));
  };
  little(version, 4);
  little(rank, 4);
  little(worldSize, 4);
  little(tokenHash, 8);
  return bytes;
}

TEST_CASE("bootstrap: strays on the port neither disturb rank 0 nor count as ranks",
          "[bootstrap][store]") {
  const ReservedPort port;
  const auto reports = runRanks({0, 1}, [&](int rank) {
    // Rank 0's warnings go to a file, to be reported.
    std::FILE *warnings = std::tmpfile();
    if (rank == 0)
      ::dup2(::fileno(warnings), STDERR_FILENO);
    TcpStore store(rank, 2, port.rendezvous("job", 20s));
    std::string seen;
    if (rank == 1) { // rank 0 serves: it waits in the allGather below
      const int idle = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in address{};
      address.sin_family = AF_INET;
      address.sin_port = htons(port.port());
      address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ::connect(idle, reinterpret_cast<sockaddr *>(&address), sizeof address);
      std::string garbage(4096, '\0');
      for (std::size_t i = 0; i < garbage.size(); ++i)
        garbage[i] = static_cast<char>(i * 7919 % 251);
      seen += "garbage:" + strayExchange(port.port(), garbage) + "\n";
      seen += "http:" + strayExchange(port.port(), "GET / HTTP/1.0\r\n\r\n") + "\n";
      seen += "nothing:" + strayExchange(port.port(), "") + "\n";
      seen += "half a hello:" + strayExchange(port.port(), hello(1, 1, 2, 0).substr(0, 12)) + "\n";
      seen += "version 99:" + strayExchange(port.port(), hello(99, 1, 2, 0)) + "\n";
      seen += "wrong token:" + strayExchange(port.port(), hello(1, 1, 2, 42)) + "\n";
      ::close(idle);
    }
    for (int round = 0; round < 2; ++round)
      for (const auto &blob : store.allGather(bytesOf(std::to_string(rank))))
        seen += textOf(blob) + "|";
    if (rank == 0) {
      std::fflush(stderr);
      std::rewind(warnings);
      for (int c; (c = std::fgetc(warnings)) != EOF;)
        seen.push_back(static_cast<char>(c));
    }
    return seen;
  });
  REQUIRE(reports[0].succeeded);
  REQUIRE(reports[1].succeeded);
  const std::string &stray = reports[1].text;
  CHECK_THAT(stray, Catch::Contains("garbage:\n") && Catch::Contains("http:\n") &&
                        Catch::Contains("nothing:\n") && Catch::Contains("half a hello:\n"));
  CHECK_THAT(stray, Catch::Contains("it speaks store protocol version 99, the store version 1"));
  CHECK_THAT(stray, Catch::Contains("wrong job token"));
  CHECK_THAT(stray, Catch::EndsWith("0|1|0|1|"));
  const std::string &served = reports[0].text;
  CHECK_THAT(served, Catch::StartsWith("0|1|0|1|"));
  CHECK_THAT(served, Catch::Contains("it does not speak the store protocol"));
  CHECK_THAT(served, Catch::Contains("claiming rank 1: it speaks store protocol version 99"));
  CHECK_THAT(served, Catch::Contains("claiming rank 1: wrong job token"));
}

TEST_CASE("bootstrap: a port held by another program is an error on both sides",
          "[bootstrap][store]") {
  const ReservedPort port;
  port.occupy();
  const auto reports = runRanks({0, 1}, [&](int rank) {
    TcpStore store(rank, 2, port.rendezvous("job", 1s));
    return std::string("joined");
  });
  CHECK(reports[0].text == fmt::format("rank 0 cannot listen for the store at 127.0.0.1:{}: "
                                       "Address already in use (another process holds the "
                                       "port: set MKC_MASTER_PORT to a free one)",
                                       port.port()));
  CHECK(reports[1].text ==
        fmt::format("rank 1: 127.0.0.1:{} did not answer the store's hello in time: it is not an "
                    "mkc store, or rank 0 is shutting down (torch's store holds MASTER_PORT, "
                    "mkc's MASTER_PORT + 1 or MKC_MASTER_PORT)",
                    port.port()));
  CHECK(reports[1].seconds < 4);
}

TEST_CASE("bootstrap: a process forked from a rank does not speak for it", "[bootstrap][store]") {
  const ReservedPort port;
  const auto reports = runRanks({0, 1}, [&](int rank) {
    auto store = std::make_unique<TcpStore>(rank, 2, port.rendezvous("job", 20s));
    store->barrier();
    // As a data loader's worker would: it inherits the store and destroys it on its way out.
    const pid_t worker = ::fork();
    if (worker == 0) {
      store.reset();
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(worker, &status, 0);
    store->barrier();
    return fmt::format("worker exited {}", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  });
  for (const RankReport &report : reports) {
    CHECK(report.succeeded);
    CHECK(report.text == "worker exited 0");
  }
}

/// "node N of C, local rank L of S: ranks a,b" for `group`.
std::string placeOf(const ProcessGroup &group) {
  return fmt::format("node {} of {}, local rank {} of {}: ranks {}", group.nodeIndex(),
                     group.nodeCount(), group.localRank(), group.localWorldSize(),
                     fmt::join(group.nodeRanks(), ","));
}

TEST_CASE("bootstrap: ranks on one host are one node", "[bootstrap][group]") {
  const ReservedPort port;
  const auto reports = runRanks({0, 1, 2, 3}, [&](int rank) {
    ProcessGroup group(detectLaunchEnvironment({{"RANK", std::to_string(rank)},
                                                {"WORLD_SIZE", "4"},
                                                {"LOCAL_RANK", std::to_string(rank)},
                                                {"LOCAL_WORLD_SIZE", "4"},
                                                {"MASTER_ADDR", "127.0.0.1"},
                                                {"MASTER_PORT", std::to_string(port.port() - 1)},
                                                {"MKC_BOOTSTRAP_TIMEOUT", "20"}}));
    return placeOf(group);
  });
  for (int rank = 0; rank < 4; ++rank) {
    CHECK(reports[rank].succeeded);
    CHECK(reports[rank].text ==
          fmt::format("node 0 of 1, local rank {} of 4: ranks 0,1,2,3", rank));
  }
}

TEST_CASE("bootstrap: MKC_GPUS_PER_NODE makes nodes of consecutive ranks", "[bootstrap][group]") {
  const ReservedPort port;
  const auto reports = runRanks({0, 1, 2, 3}, [&](int rank) {
    // The launcher's LOCAL_WORLD_SIZE (the host's 4) does not count: the override says what a
    // node is.
    Environment environment = port.environment(rank, 4, "20");
    environment["MKC_GPUS_PER_NODE"] = "2";
    environment["MKC_LOCAL_WORLD_SIZE"] = "4";
    return placeOf(ProcessGroup(detectLaunchEnvironment(environment)));
  });
  CHECK(reports[0].text == "node 0 of 2, local rank 0 of 2: ranks 0,1");
  CHECK(reports[1].text == "node 0 of 2, local rank 1 of 2: ranks 0,1");
  CHECK(reports[2].text == "node 1 of 2, local rank 0 of 2: ranks 2,3");
  CHECK(reports[3].text == "node 1 of 2, local rank 1 of 2: ranks 2,3");
}

TEST_CASE("bootstrap: MKC_NODE_ID names each rank's node", "[bootstrap][group]") {
  const ReservedPort port;
  const std::vector<int> nodeIds = {1, 0, 1, 0};
  const auto reports = runRanks({0, 1, 2, 3}, [&](int rank) {
    Environment environment = port.environment(rank, 4, "20");
    environment["MKC_NODE_ID"] = std::to_string(nodeIds[rank]);
    return placeOf(ProcessGroup(detectLaunchEnvironment(environment)));
  });
  CHECK(reports[0].text == "node 1 of 2, local rank 0 of 2: ranks 0,2");
  CHECK(reports[1].text == "node 0 of 2, local rank 0 of 2: ranks 1,3");
  CHECK(reports[2].text == "node 1 of 2, local rank 1 of 2: ranks 0,2");
  CHECK(reports[3].text == "node 0 of 2, local rank 1 of 2: ranks 1,3");
}

TEST_CASE("bootstrap: nodes that disagree with the launcher fail every rank alike",
          "[bootstrap][group]") {
  const ReservedPort port;
  SECTION("a local world size") {
    // Two torchrun agents on one host, each thinking it has a node of 2.
    const auto reports = runRanks({0, 1, 2, 3}, [&](int rank) {
      Environment environment = port.environment(rank, 4, "20");
      environment["LOCAL_RANK"] = std::to_string(rank % 2);
      environment["LOCAL_WORLD_SIZE"] = "2";
      environment["RANK"] = std::to_string(rank);
      environment["WORLD_SIZE"] = "4";
      return placeOf(ProcessGroup(detectLaunchEnvironment(environment)));
    });
    for (const RankReport &report : reports) {
      CHECK_FALSE(report.succeeded);
      CHECK_THAT(report.text,
                 Catch::Matches("rank 0 has LOCAL_WORLD_SIZE=2, but ranks 0-3 run on host .*; if "
                                "a node is not a host here, set MKC_GPUS_PER_NODE or MKC_NODE_ID "
                                "on every rank"));
    }
  }
  SECTION("an override set on some ranks only") {
    const auto reports = runRanks({0, 1}, [&](int rank) {
      Environment environment = port.environment(rank, 2, "20");
      if (rank == 1)
        environment["MKC_GPUS_PER_NODE"] = "1";
      return placeOf(ProcessGroup(detectLaunchEnvironment(environment)));
    });
    for (const RankReport &report : reports)
      CHECK(report.text == "MKC_GPUS_PER_NODE is unset on rank 0 but 1 on rank 1: set it alike "
                           "on every rank");
  }
}

} // namespace
