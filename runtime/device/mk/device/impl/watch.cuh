//===- mk/device/impl/watch.cuh - waits that give up (mk_wait_watch) -----------------===//
//
// The one place where a spinning wait decides to stop: after mk_watch.timeout_ns, or once another
// wait of this GPU has stopped (mk/abi.h). Per-thread, in mk::detail.
//
//===----------------------------------------------------------------------------------===//

#ifndef MK_DEVICE_IMPL_WATCH_CUH
#define MK_DEVICE_IMPL_WATCH_CUH

#include "mk/abi.h"
#include "mk/device/impl/ptx__funcs.cuh"

/// Set by the runtime after it loads the module; zero (never give up) in modules it does not.
extern "C" {
__constant__ mk_wait_watch mk_watch;
}

namespace mk {
namespace detail {

/// Polls between which a wait looks at the clock and at the GPU's gave-up word.
constexpr unsigned kWatchSpins = 256;

/// One wait's clock: call give_up() on every poll that found the flag short of `target`.
class WaitWatch {
public:
  __device__ __forceinline__ bool give_up(const mk_u32 *flag, mk_u32 target, mk_u32 seen) {
    if (++polls_ % kWatchSpins != 0 || mk_watch.timeout_ns == 0)
      return false;
    if (*static_cast<volatile const mk_u32 *>(mk_watch.gave_up))
      return true;
    mk_u64 now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (deadline_ == 0)
      deadline_ = now + mk_watch.timeout_ns;
    if (now < deadline_)
      return false;
    if (atomicCAS(mk_watch.gave_up, 0u, 1u) == 0u) {
      volatile mk_wait_failure *failure = mk_watch.failure;
      failure->target = target;
      failure->seen = seen;
      failure->flag = reinterpret_cast<mk_u64>(flag);
      __threadfence_system();
      failure->failed = 1;
    }
    return true;
  }

private:
  unsigned polls_ = 0;
  mk_u64 deadline_ = 0;
};

/// Polls `*flag` until it reaches `target` (wrap-safe: counters never reset and may wrap) or the
/// wait gives up, calling `pause()` between polls.
template <typename Pause>
__device__ __forceinline__ void wait_at_least(const mk_u32 *flag, mk_u32 target, Pause pause) {
  WaitWatch watch;
  for (mk_u32 seen; static_cast<int>((seen = ptx::load_acquire_sys(flag)) - target) < 0;) {
    if (watch.give_up(flag, target, seen))
      return;
    pause();
  }
}

} // namespace detail
} // namespace mk

#endif // MK_DEVICE_IMPL_WATCH_CUH
