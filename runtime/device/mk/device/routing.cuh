//===- mk/device/routing.cuh - expert routing: rows to experts, results back to tokens -===//
//
// The device side of expert parallelism's routing ops. Collective over the team, `smem` free on
// return. Routing is in token order: copy c = token * top_k + j goes to slot (the number of
// earlier copies routed to its expert) of its expert, or is dropped past the capacity; a copy
// whose expert index is outside [0, experts) goes nowhere. Both are reported for this rank's
// tokens (mk/abi.h's mk_routing_report), never silent.
//
// Point to point: route_census counts each rank's copies per expert into every GPU's
// census [ranks, experts]; from it, route_counts gives each expert's rows and route_rows each copy
// its slot (the copies of lower ranks first), writes the row to the expert's GPU and signals the
// expert there; return_rows sends each result row back to its token's slot of `returned`
// [tokens, top_k, hidden], and combine_returned sums a token's results. Across nodes the census
// rows and the rows bound for another node go to the rail peer there (route_pack packs them, the
// kernel's send_rows sends them), which routes them as its own.
//
//===------------------------------------------------------------------------------------===//

#ifndef MK_DEVICE_ROUTING_CUH
#define MK_DEVICE_ROUTING_CUH

#include "mk/device/tile.cuh"

namespace mk {

/// Shared memory route_census, route_counts and route_rows need for `kExperts` experts.
template <int kExperts> __host__ __device__ constexpr int route_smem_bytes();

/// Row `me` of `census` ([ranks, kExperts] on each of the node's `gpus` GPUs, through its peer
/// mappings) becomes the number of copies of this rank's `tokens` x `top_k` routing `experts`
/// to each expert. The first copy whose index lies outside [0, kExperts) is reported (kept in
/// `report` until the host reads it).
template <int kExperts>
__device__ __forceinline__ void route_census(const int *experts, int tokens, int top_k,
                                             const mk_tensor_ref *census, int me, int gpus,
                                             mk_routing_report *report, void *smem);

/// counts[e] = min(capacity, sum over ranks of census[r][expert_first + e]) for this rank's
/// `local_experts`; `report` gets, for launch `epoch`, the copies of rank `me` that fall past
/// their expert's capacity (the census orders copies rank by rank).
template <int kExperts>
__device__ __forceinline__ void route_counts(const int *census, int ranks, int me, int expert_first,
                                             int local_experts, int capacity, int *counts,
                                             mk_routing_report *report, mk_u32 epoch, void *smem);

/// CTA `cta` of `ctas` routes its chunk of rank `me`'s `tokens` (rows of `hidden` T, routed by
/// `experts` [tokens, top_k]): each copy takes its slot (the copies of lower ranks to its expert,
/// from `census`, then rank me's before it), placement[t][j] = expert * capacity + slot, or -1
/// past the capacity or outside [0, kExperts); a kept copy to an expert of this node (those from
/// `expert_first`, `local_experts` a GPU, [local_experts, capacity(, hidden)] there) sends its row
/// to routed[e][slot] and its origin (origin_first + t * top_k + j) to origins[e][slot] on the
/// GPU holding the expert. Experts are served by their index on a GPU, then GPU by GPU from the
/// next one; after its rows to expert e the CTA adds an arrival to flags[gpu][arrivals + e]
/// there, for every expert of the node. Rows a rail peer packed (route_pack) are routed as its
/// own (rank me is then that peer), with `returns` ([tokens, top_k], else null): a copy's origin
/// is then origin_first + its index among the copies to this node, written there. The bytes of
/// rows stored on other GPUs are added to *nvlink_bytes. Not inlined: across nodes a kernel calls
/// it twice (its own rows, then those its rail peer packed), and two inlined copies spilled the
/// kernel's registers at DeepSeek's shapes.
template <int kExperts, typename T>
__device__ __noinline__ void
route_rows(const T *rows, const int *experts, int tokens, int top_k, long long hidden,
           const int *census, int me, int gpus, int expert_first, long long origin_first,
           int local_experts, int capacity, const mk_tensor_ref *routed,
           const mk_tensor_ref *origins, int *placement, int *returns, mk_u32 *const *flags,
           long long arrivals, mk_u64 *nvlink_bytes, int cta, int ctas, void *smem);

/// Across nodes: CTA `cta` of `ctas` packs its chunk of this rank's `tokens` for each other node
/// m (experts are `node_experts` a node): the tokens with a copy to an expert of m, numbered p in
/// token order, have their row copied to pack[m * tokens + p] and their routing row to
/// pack_experts[m * tokens + p]; the last CTA writes their number to packed[m] and that of their
/// copies to m to packed[nodes + m] (0 for this node). return_at[t][j] becomes the row of
/// `returned` (rows of `hidden`) copy (t, j)'s result comes back to: m * tokens * top_k + its
/// index among the copies to m (token-major), t * top_k + j in this node's region for an expert
/// of this node, -1 for an index outside [0, kExperts).
template <int kExperts, typename T>
__device__ __forceinline__ void route_pack(const T *rows, const int *experts, int tokens, int top_k,
                                           long long hidden, int node, int nodes, int node_experts,
                                           T *pack, int *pack_experts, int *packed, int *return_at,
                                           int cta, int ctas, void *smem);

/// Sends row i of `t` (the first `rows` x `cols`) to its token's slot: origin o = origins[i] to
/// row o % slots_per_gpu of `returned` on GPU o / slots_per_gpu (its peer mapping), at element
/// `column` of rows `ld` apart; the bytes stored on other GPUs are added to *nvlink_bytes.
template <typename T, int R, int C>
__device__ __forceinline__ void return_rows(const Tile<T, R, C> &t, const int *origins, int rows,
                                            int cols, const mk_tensor_ref *returned,
                                            long long slots_per_gpu, long long ld, long long column,
                                            mk_u64 *nvlink_bytes, void *smem);

/// One tile of this rank's tokens: dest[r][c] = sum over j, in order, of weights[r][j] *
/// returned[r][j][c] where placement[r][j] >= 0, in f32, rounded once; `rows` x `cols` of it,
/// dest `ld` apart, returned rows `hidden` apart (top_k per token). Placement and weights point at
/// the tile's first token, `returned` at its first column: of the tile's first token, or, with
/// `return_at` (at the tile's first token), of the whole [rows, hidden] that return_at[r][j]
/// indexes.
template <typename Out, typename R>
__device__ __forceinline__ void
combine_returned(const R *returned, long long hidden, const int *placement, const int *return_at,
                 const float *weights, int top_k, Out *dest, long long ld, int rows, int cols);

} // namespace mk

#include "mk/device/impl/routing__funcs.cuh"

#endif // MK_DEVICE_ROUTING_CUH
