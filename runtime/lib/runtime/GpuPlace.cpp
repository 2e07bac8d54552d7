//===- runtime/GpuPlace.cpp - the rank's GPU, the CPUs near it, GPUs shared between ranks ---===//
//
// Which GPU a rank takes (MKC_DEVICE, else its local rank's, modulo the GPUs with
// MKC_SHARE_GPU=1), the CPUs of its NUMA node for the proxy thread, and the check, across the
// node's ranks, that no two of them share a GPU unless told to and that every rank sees the same
// topology.
//
//===----------------------------------------------------------------------===//

#include "runtime/RuntimeState.h"

#include "mk/runtime/support/Log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <sstream>

namespace mkc {

int deviceAttribute(const cuda::Driver &cu, CUdevice device, CUdevice_attribute attribute) {
  int value = 0;
  MK_CU_CHECK(cu, cuDeviceGetAttribute(&value, attribute, device));
  return value;
}

int contextSmCount(const cuda::Driver &cu, CUdevice device) {
  const int sms = deviceAttribute(cu, device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  // A context without a limit it can tell (no affinity support) may use them all.
  CUexecAffinityParam affinity{};
  if (cu.cuCtxGetExecAffinity(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT) != CUDA_SUCCESS)
    return sms;
  const int limit = static_cast<int>(affinity.param.smCount.val);
  return limit > 0 && limit < sms ? limit : sms;
}

const cuda::Driver &availableDriver() {
  const cuda::Driver &cu = cuda::Driver::get();
  if (!cu.available())
    throw NoDeviceError("no usable CUDA driver: " + cu.unavailableReason());
  return cu;
}

LaunchEnvironment detectWithDriver() {
  availableDriver();
  return detectLaunchEnvironment();
}

std::vector<int> cpusNear(std::string busId) {
  std::transform(busId.begin(), busId.end(), busId.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  std::ifstream file("/sys/bus/pci/devices/" + busId + "/local_cpulist");
  std::string list;
  std::vector<int> cpus;
  if (!std::getline(file, list))
    return cpus;
  std::istringstream ranges(list);
  for (std::string range; std::getline(ranges, range, ',');) {
    int first = 0, last = 0;
    const char *end = range.data() + range.size();
    auto [dash, error] = std::from_chars(range.data(), end, first);
    last = first;
    if (error == std::errc() && dash != end && *dash == '-')
      std::from_chars(dash + 1, end, last);
    for (int cpu = first; cpu <= last; ++cpu)
      cpus.push_back(cpu);
  }
  return cpus;
}

int rankDevice(const cuda::Driver &cu, const ProcessGroup &group, std::optional<int> chosen,
               bool share) {
  int devices = 0;
  MK_CU_CHECK(cu, cuDeviceGetCount(&devices));
  if (share)
    return (chosen ? *chosen : group.localRank()) % devices;
  if (chosen)
    return *chosen;
  if (devices == 1)
    return 0; // the launcher gave each rank its own GPU (CUDA_VISIBLE_DEVICES)
  if (group.localRank() >= devices)
    throw NoDeviceError(fmt::format("local rank {} has no GPU of its own: this process sees {} "
                                    "GPUs; set MKC_DEVICE or CUDA_VISIBLE_DEVICES",
                                    group.localRank(), devices));
  return group.localRank();
}

/// Two ranks of a node on one GPU wait for each other's persistent kernel, which only the GPU's
/// time-slicing between their contexts lets run: a test set-up, never a job's.
void Runtime::State::checkPlacement(const RuntimeOptions &options) {
  char pciBusId[32] = {};
  MK_CU_CHECK(driver, cuDeviceGetPCIBusId(pciBusId, sizeof pciBusId, context.device()));
  busId = pciBusId;
  std::string topology = fmt::format("{}x{}", group.nodeCount(), group.localWorldSize());
  std::vector<std::byte> mine = blobOf({topology, busId});
  std::vector<std::vector<std::byte>> everyone = group.store().allGather(mine);
  for (int peer : group.nodeRanks()) {
    std::vector<std::string> theirs = fields(everyone[peer]);
    if (peer == group.rank() || theirs[1] != busId)
      continue;
    if (!options.shareGpu)
      throw RuntimeError(fmt::format("ranks {} and {} both use the GPU at {}: give each rank of a "
                                     "node its own GPU (MKC_DEVICE, CUDA_VISIBLE_DEVICES), or, "
                                     "to test on fewer GPUs, let them take turns "
                                     "(MKC_SHARE_GPU=1)",
                                     std::min(peer, group.rank()), std::max(peer, group.rank()),
                                     busId));
    ranksSharingGpu.push_back(peer);
  }
  // Under MPS the ranks' kernels run at once, each on its share of the SMs, and every rank's
  // persistent grid must be resident beside the others': the share is a cap, not SMs of its own.
  // Grids of the whole share were not (H100, two ranks at 50%: grids of 64 CTAs, the second
  // waiting for SMs the first held, whose waits for it gave up; notes/controller.md v3); grids
  // that leave 15% of the share free, without clusters (Compile.cpp), were.
  int mps = 0;
  if (!ranksSharingGpu.empty() &&
      driver.cuDeviceGetAttribute(&mps, CU_DEVICE_ATTRIBUTE_MPS_ENABLED, context.device()) ==
          CUDA_SUCCESS &&
      mps) {
    ranksAtOnce = true;
    smCount -= (smCount * 15 + 99) / 100;
    log::info("runtime: ranks {} and {} share the GPU at {} under MPS and run at once: grids of "
              "{} CTAs, without clusters, so that theirs all fit",
              group.rank(), fmt::join(ranksSharingGpu, ", "), busId, smCount);
  }
  for (int rank = 0; rank < group.worldSize(); ++rank)
    if (fields(everyone[rank])[0] != topology)
      throw RuntimeError(fmt::format("rank {} sees the job as {} (nodes x ranks per node), rank {} "
                                     "as {}: every node needs as many ranks",
                                     rank, fields(everyone[rank])[0], group.rank(), topology));
}
} // namespace mkc
