//===- bootstrap/ProcessGroup.cpp - the ranks of a job, grouped into nodes ---===//
//
// ProcessGroup (mk/runtime/bootstrap/Bootstrap.h): every rank's host record (hostname and boot
// id, or MKC_NODE_ID and MKC_GPUS_PER_NODE) gathered through the store, the ranks grouped into
// nodes in the order of their lowest rank, and the grouping checked against what the launcher
// said of local ranks and node counts.
//
//===----------------------------------------------------------------------===//

#include "mk/runtime/bootstrap/Bootstrap.h"

#include "bootstrap/StoreProtocol.h"
#include "mk/runtime/support/Log.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <fstream>

namespace mkc {

namespace {

using bootstrap::Bytes;
using bootstrap::throwErrno;

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
