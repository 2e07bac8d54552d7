//===- bootstrap/LaunchEnvironment.cpp - where a rank comes from: torchrun, srun, mpirun ---===//
//
// detectLaunchEnvironment() of mk/runtime/bootstrap/Bootstrap.h: the launcher recognised from its
// variables (innermost first), each field read from MKC_* or the launcher's variables, the store's
// address and port, the timeout and the job token, and the fields checked against each other.
//
//===----------------------------------------------------------------------===//

#include "mk/runtime/bootstrap/Bootstrap.h"

#include "bootstrap/StoreProtocol.h"
#include "mk/Support/BoundedNumber.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <limits>

extern char **environ;

namespace mkc {

namespace {

using bootstrap::fnv1a;

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
  std::optional<double> seconds =
      parseBoundedReal(variable->value, std::numeric_limits<double>::min(), 1e6);
  if (!seconds)
    throw BootstrapError(
        fmt::format("MKC_BOOTSTRAP_TIMEOUT='{}' is not a number of seconds", variable->value));
  return Timeout(static_cast<Timeout::rep>(*seconds * 1000));
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

} // namespace mkc
