//===- mk/device/routing.cuh - expert routing: select rows for experts, combine results -===//
//
// The device side of mk.select_routed and mk.combine_routed (expert parallelism). Collective over
// the team, `smem` free on return. Routing is in token order: copy c = token * top_k + j goes to
// slot (the number of earlier copies routed to its expert) of its expert, or is dropped past the
// capacity; a copy whose expert index is outside [0, experts) goes nowhere. Both are reported
// for this rank's tokens (mk/abi.h's mk_routing_report), never silent.
//
//===------------------------------------------------------------------------------------===//

#ifndef MK_DEVICE_ROUTING_CUH
#define MK_DEVICE_ROUTING_CUH

#include "mk/device/tile.cuh"

namespace mk {

/// Shared memory select_routed needs for `kExperts` experts.
template <int kExperts> __host__ __device__ constexpr int select_routed_smem_bytes();

/// Where the experts [expert_first, + local_experts) of this rank get their rows from: of the
/// `tokens` x `top_k` copies routed by `experts` (every rank's, [tokens, top_k]), `routed`
/// ([local_experts, capacity, hidden]) receives each kept copy's token row in its slot (zeros in
/// empty slots), `origins` ([local_experts, capacity]) the copy's index (-1 for an empty slot),
/// `counts` ([local_experts]) the slots filled; `placement` ([local_tokens, top_k], for this rank's
/// tokens [token_first, + local_tokens)) gets expert * capacity + slot for each copy, -1 if
/// dropped. `rows` is [tokens, hidden], every rank's. `report` gets, for launch `epoch`, the
/// copies of this rank's tokens dropped past the capacity, and the first without an expert.
template <int kExperts, typename T>
__device__ __forceinline__ void
select_routed(const T *rows, const int *experts, int tokens, int top_k, long long hidden, T *routed,
              int *counts, int *origins, int *placement, int expert_first, int local_experts,
              int capacity, int token_first, int local_tokens, mk_routing_report *report,
              mk_u32 epoch, void *smem);

/// One tile of this rank's tokens: dest[r][c] = sum over j of weights[r][j] * results[placement[r]
/// [j]][c] (a row of the [experts * capacity, ld_results] results, skipped where placement is -1),
/// in f32, rounded once; `rows` x `cols` of it, dest `ld` apart. placement and weights point at
/// the tile's first token, `top_k` per token; results at the tile's first column.
template <typename Out, typename R>
__device__ __forceinline__ void
combine_routed(const R *results, long long ld_results, const int *placement, const float *weights,
               int top_k, Out *dest, long long ld, int rows, int cols);

} // namespace mk

#include "mk/device/impl/routing__funcs.cuh"

#endif // MK_DEVICE_ROUTING_CUH
