//===- mk/device/impl/ring__types.cuh - a position in a ring of mbarrier stages -------===//

#ifndef MK_DEVICE_IMPL_RING_TYPES_CUH
#define MK_DEVICE_IMPL_RING_TYPES_CUH

#include "mk/abi.h"

namespace mk::detail {

/// Where one thread is in a ring of kStages stages that complete on mbarriers: the stage, and
/// the parity of its barriers' phase, which flips each time around.
template <int kStages> class RingPosition {
public:
  __device__ int stage() const { return stage_; }
  __device__ mk_u32 phase() const { return phase_; }
  __device__ void advance() {
    if (++stage_ == kStages) {
      stage_ = 0;
      phase_ ^= 1;
    }
  }

private:
  int stage_ = 0;
  mk_u32 phase_ = 0;
};

} // namespace mk::detail

#endif // MK_DEVICE_IMPL_RING_TYPES_CUH
