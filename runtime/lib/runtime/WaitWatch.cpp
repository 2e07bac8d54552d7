//===- runtime/WaitWatch.cpp - the watchdog of kernels' waits ---===//
//
// Every loaded module gets the rank's mk_wait_watch (mk/abi.h): a wait that passes its timeout
// raises the gave-up word and describes itself in mapped host memory, which check() reads without
// a driver call and turns into an error naming the op's flag word and the ranks it waited for.
//
//===----------------------------------------------------------------------===//

#include "runtime/RuntimeState.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace mkc {

void Runtime::State::armWaitWatch(const RuntimeOptions &options) {
  cuda::ContextScope scope(driver, context.context());
  void *failure = nullptr;
  MK_CU_CHECK(driver, cuMemHostAlloc(&failure, sizeof(mk_wait_failure),
                                     CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  waitFailure = static_cast<mk_wait_failure *>(failure);
  *waitFailure = {};
  CUdeviceptr failureOnDevice = 0;
  MK_CU_CHECK(driver, cuMemHostGetDevicePointer(&failureOnDevice, failure, 0));
  MK_CU_CHECK(driver, cuMemAlloc(&gaveUp, sizeof(mk_u32)));
  MK_CU_CHECK(driver, cuMemsetD32(gaveUp, 0, 1));
  watch.timeout_ns = static_cast<mk_u64>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(options.waitTimeout).count());
  watch.gave_up = reinterpret_cast<mk_u32 *>(gaveUp);
  watch.failure = reinterpret_cast<mk_wait_failure *>(failureOnDevice);
}

void Runtime::State::watchWaits(CUmodule module) const {
  CUdeviceptr address = 0;
  std::size_t bytes = 0;
  MK_CU_CHECK(driver, cuModuleGetGlobal(&address, &bytes, module, "mk_watch"));
  if (bytes != sizeof watch)
    throw JitError(
        fmt::format("the module's mk_watch has {} bytes, mk_wait_watch {}", bytes, sizeof watch));
  MK_CU_CHECK(driver, cuMemcpyHtoD(address, &watch, sizeof watch));
}

void Runtime::State::check() const {
  if (proxy)
    proxy->check();
  if (!reinterpret_cast<volatile const mk_wait_failure *>(waitFailure)->failed)
    return;
  const mk_wait_failure failure = *waitFailure;
  const auto *flag = reinterpret_cast<const mk_u32 *>(failure.flag);
  std::string which = fmt::format("the flag at {:#x}", failure.flag);
  std::lock_guard lock(opFlagsMutex);
  for (const FlagRange &range : opFlags)
    if (flag >= range.first && flag < range.first + range.words)
      which = fmt::format("flag word {} of {}", flag - range.first, range.op);
  std::vector<int> others;
  for (int rank : group.nodeRanks())
    if (rank != group.rank())
      others.push_back(rank);
  const std::string suspects = others.size() == 1
                                   ? fmt::format("rank {}", others[0])
                                   : fmt::format("one of ranks {}", fmt::join(others, ", "));
  throw JobError(fmt::format(
      "rank {} (GPU {} of node {}): a kernel gave up after waiting {} s for {} to count {}; it "
      "counted {}. A rank of this node ({}) died, stopped launching or is stuck. The results of "
      "that launch are wrong, and this runtime launches nothing more (MKC_WAIT_TIMEOUT sets the "
      "limit)",
      group.rank(), group.localRank(), group.nodeIndex(), watch.timeout_ns / 1'000'000'000, which,
      failure.target, failure.seen, suspects));
}

} // namespace mkc
