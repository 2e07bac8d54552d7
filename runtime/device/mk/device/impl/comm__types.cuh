//===- mk/device/impl/comm__types.cuh - transfers, flags and the proxy queue ----------===//

#ifndef MK_DEVICE_IMPL_COMM_TYPES_CUH
#define MK_DEVICE_IMPL_COMM_TYPES_CUH

#include "mk/abi.h"
#include "mk/device/impl/tile__types.cuh"

namespace mk {
namespace detail {

/// copy_region_bulk's staging: kSlots buffers that bulk loads fill while bulk stores drain the
/// others, each with the mbarrier (BulkCopier's) its loads complete on.
struct BulkStaging {
  static constexpr int kSlots = 4;
  static constexpr int kSlotBytes = 16 * 1024;
  static constexpr int kBytes = kSlots * kSlotBytes;
};

/// BulkCopier's barriers, one per staging slot, in static shared memory.
struct BulkBarriers {
  alignas(8) mk_u64 full[BulkStaging::kSlots];
};
static_assert(sizeof(BulkBarriers) <= kStaticSmemBytes, "within the static shared memory's room");

/// One slot's worth of a bulk copy: `count` rows from `first_row` (whole rows, or a piece of one
/// row when rows are longer than a slot), `bytes` of each from byte `offset` within the row.
struct BulkBatch {
  int first_row;
  int count;
  long long offset;
  int bytes;
};

/// Waits on the network check the host's abort word once per this many pauses (about 0.25 ms
/// once the backoff has grown).
constexpr unsigned kAbortCheckSpins = 256;

/// The ticket after the last command this CTA handed its proxy in this launch, 0 for none:
/// proxy_push sets it, proxy_wait_reads waits for the proxy to be done with it, begin_launch
/// clears it.
__shared__ mk_u64 proxy_pushed;

/// Exponential backoff for polling threads: they leave the issue slots (and the NVLink or PCIe
/// bandwidth) to the rest of the SM, adding at most about a microsecond of latency.
struct Backoff {
  unsigned nanoseconds = 32;
  __device__ __forceinline__ void pause() {
    __nanosleep(nanoseconds);
    if (nanoseconds < 1024)
      nanoseconds *= 2;
  }
};

} // namespace detail
} // namespace mk

#endif // MK_DEVICE_IMPL_COMM_TYPES_CUH
