//===- mk/device/impl/routing__funcs.cuh - definitions for mk/device/routing.cuh -----===//

#ifndef MK_DEVICE_IMPL_ROUTING_FUNCS_CUH
#define MK_DEVICE_IMPL_ROUTING_FUNCS_CUH

#include "mk/device/impl/tile__funcs.cuh"

namespace mk {

template <int kExperts> __host__ __device__ constexpr int select_routed_smem_bytes() {
  return kExperts * 4;
}

template <int kExperts, typename T>
__device__ __forceinline__ void
select_routed(const T *rows, const int *experts, int tokens, int top_k, long long hidden, T *routed,
              int *counts, int *origins, int *placement, int expert_first, int local_experts,
              int capacity, int token_first, int local_tokens, mk_routing_report *report,
              mk_u32 epoch, void *smem) {
  int *filled = static_cast<int *>(smem); // rows each expert has received so far
  for (int e = team_thread(); e < kExperts; e += MK_TEAM_THREADS)
    filled[e] = 0;
  for (int s = team_thread(); s < local_experts * capacity; s += MK_TEAM_THREADS)
    origins[s] = -1;
  team_sync();
  // One warp routes the copies in order, 32 at a time: a copy's slot is its expert's count so far
  // plus the earlier lanes with the same expert. It counts the copies of this rank's tokens that
  // drop past the capacity, and finds the first that names no expert.
  if (team_thread() < 32) {
    const int lane = team_thread();
    const int copies = tokens * top_k;
    const int mine_first = token_first * top_k, mine_end = (token_first + local_tokens) * top_k;
    unsigned dropped = 0, first_invalid = ~0u;
    for (int base = 0; base < copies; base += 32) {
      const int c = base + lane;
      const int x = c < copies ? experts[c] : -1;
      const bool routable = x >= 0 && x < kExperts;
      const unsigned group = __match_any_sync(0xffffffffu, routable ? x : -1);
      const int before = __popc(group & ((1u << lane) - 1));
      const int slot = routable ? filled[x] + before : 0;
      __syncwarp();
      if (routable && before == __popc(group) - 1)
        filled[x] = slot + 1;
      __syncwarp();
      if (c >= copies)
        continue;
      const bool kept = routable && slot < capacity;
      if (kept && x >= expert_first && x < expert_first + local_experts)
        origins[(x - expert_first) * capacity + slot] = c;
      if (c >= mine_first && c < mine_end) {
        placement[c - mine_first] = kept ? x * capacity + slot : -1;
        dropped += routable && !kept;
        if (!routable)
          first_invalid = min(first_invalid, static_cast<unsigned>(c));
      }
    }
    dropped = __reduce_add_sync(0xffffffffu, dropped);
    first_invalid = __reduce_min_sync(0xffffffffu, first_invalid);
    volatile mk_routing_report *out = report;
    if (first_invalid != ~0u && lane == 0 && !out->invalid) {
      out->invalid_token = first_invalid / top_k - token_first;
      out->invalid_choice = first_invalid % top_k;
      out->invalid_expert = experts[first_invalid];
      __threadfence_system();
      out->invalid = 1;
    }
    if (lane == 0) {
      out->dropped = dropped;
      __threadfence_system();
      out->epoch = epoch;
    }
  }
  team_sync();
  for (int e = team_thread(); e < local_experts; e += MK_TEAM_THREADS)
    counts[e] = min(filled[expert_first + e], capacity);
  // Each warp copies whole rows, its lanes consecutive elements.
  const int warp = team_thread() / 32, lane = team_thread() % 32;
  for (int s = warp; s < local_experts * capacity; s += kTeamWarps) {
    const int origin = origins[s];
    const T *from = origin < 0 ? nullptr : rows + (long long)(origin / top_k) * hidden;
    T *to = routed + (long long)s * hidden;
    for (long long i = lane; i < hidden; i += 32)
      to[i] = from ? from[i] : T(0.0f);
  }
  team_sync();
}

template <typename Out, typename R>
__device__ __forceinline__ void
combine_routed(const R *results, long long ld_results, const int *placement, const float *weights,
               int top_k, Out *dest, long long ld, int rows, int cols) {
  for (int i = team_thread(); i < rows * cols; i += MK_TEAM_THREADS) {
    const int r = i / cols, c = i % cols;
    float sum = 0.0f;
    for (int j = 0; j < top_k; ++j) {
      const int slot = placement[r * top_k + j];
      if (slot >= 0)
        sum += weights[r * top_k + j] * float(results[slot * ld_results + c]);
    }
    dest[r * ld + c] = Out(sum);
  }
}

} // namespace mk

#endif // MK_DEVICE_IMPL_ROUTING_FUNCS_CUH
