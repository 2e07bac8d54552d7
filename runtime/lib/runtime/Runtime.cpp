//===- runtime/Runtime.cpp - the runtime an application embeds ---===//
//
// Runtime::State built in named steps (the process group, the GPU and its context, the
// placement check, the symmetric heap, the wait watch, the rail), torn down in reverse, and
// Runtime's own calls.
//
//===----------------------------------------------------------------------===//

#include "runtime/RuntimeState.h"

#include "mk/runtime/support/Log.h"

#include <fmt/format.h>

namespace mkc {

Runtime::State::State(const LaunchEnvironment &launch, const RuntimeOptions &options)
    : group(launch), device(rankDevice(driver, group, options.device, options.shareGpu)),
      context(driver, device), smCount(contextSmCount(driver, context.device())),
      gpuSmCount(
          deviceAttribute(driver, context.device(), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)),
      nvrtcOptions(options.nvrtcOptions), jit(options.cacheDirectory) {
  char name[128] = {};
  MK_CU_CHECK(driver, cuDeviceGetName(name, sizeof name, context.device()));
  gpuName = name;
  int major =
      deviceAttribute(driver, context.device(), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  int minor =
      deviceAttribute(driver, context.device(), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  // Hopper's wgmma and TMA, and their successors, exist only in the arch-specific targets.
  arch = fmt::format("sm_{}{}{}", major, minor, major >= 9 ? "a" : "");

  checkPlacement(options);
  smController = options.smController.value_or(ranksSharingGpu.empty() || ranksAtOnce);

  NodePlace place;
  place.localRank = group.localRank();
  place.localWorldSize = group.localWorldSize();
  place.device = device;
  place.jobToken = launch.rendezvous.jobToken + "/node" + std::to_string(group.nodeIndex());
  place.timeout = launch.rendezvous.timeout;
  heap.emplace(place, options.symmetricBytes, options.flagWords);
  armWaitWatch(options);
  if (group.nodeCount() > 1)
    connectRail(options);
  log::info("runtime: rank {} of {} (node {} of {}, local rank {} of {}) on GPU {} ({}, {}, {} "
            "SMs); {} MiB of symmetric memory",
            group.rank(), group.worldSize(), group.nodeIndex(), group.nodeCount(),
            group.localRank(), group.localWorldSize(), device, busId, arch, smCount,
            heap->capacity() >> 20);
}

Runtime::State::~State() {
  proxy.reset(); // before the heap it reads goes
  try {
    cuda::ContextScope scope(driver, context.context());
    queuedLaunches.reset();
    heap->close();
    if (gaveUp)
      driver.cuMemFree(gaveUp);
    if (waitFailure)
      driver.cuMemFreeHost(waitFailure);
  } catch (const std::exception &error) {
    log::error("runtime: closing the symmetric heap: {}", error.what());
  }
}

Runtime::Runtime(const RuntimeOptions &options) : Runtime(detectWithDriver(), options) {}

Runtime::Runtime(const LaunchEnvironment &launch, const RuntimeOptions &options)
    : state_(std::make_shared<State>(launch, options)) {}

Runtime::~Runtime() = default;

ProcessGroup &Runtime::communicator() { return state_->group; }
int Runtime::rank() const { return state_->group.rank(); }
int Runtime::worldSize() const { return state_->group.worldSize(); }
int Runtime::device() const { return state_->device; }
CUcontext Runtime::context() const { return state_->context.context(); }
net::ProxyStatistics Runtime::networkStatistics() const {
  return state_->proxy ? state_->proxy->statistics() : net::ProxyStatistics{};
}
void Runtime::barrier() { state_->group.store().barrier(); }

void Runtime::check() const { state_->check(); }

SymmetricBuffer Runtime::allocate(std::size_t bytes) {
  State &state = *state_;
  if (auto error = agree(state.group, "allocate", {"bytes"}, {std::to_string(bytes)},
                         bytes ? "" : "cannot allocate 0 bytes"))
    throw RuntimeError(*error);
  cuda::ContextScope scope(state.driver, state.context.context());
  return state.heap->allocate(bytes);
}

} // namespace mkc
