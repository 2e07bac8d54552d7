//===- mk/device/impl/attention__funcs.cuh - definitions for mk/device/attention.cuh -===//

#ifndef MK_DEVICE_IMPL_ATTENTION_FUNCS_CUH
#define MK_DEVICE_IMPL_ATTENTION_FUNCS_CUH

#include "mk/device/impl/gemm__funcs.cuh"
#include "mk/device/impl/vector__funcs.cuh"

namespace mk {

template <typename T, int RQ, int RK, int D, int DV>
__host__ __device__ constexpr int attention_block_smem_bytes() {
  return detail::TileSmem<T, RQ, D>::kBytes + detail::TileSmem<T, RK, D>::kBytes +
         detail::TileSmem<T, RK, DV>::kBytes +
         detail::max_of(detail::TileSmem<T, RQ, RK>::kBytes,
                        detail::max_of(reduce_smem_bytes<1, RQ, RK>(), broadcast_smem_bytes<RQ>()));
}

template <typename T, int RQ, int RK, int D, int DV>
__device__ __forceinline__ AttentionState<RQ, DV>
attention_block(const Tile<T, RQ, D> &q, const Tile<T, RK, D> &k, const Tile<T, RK, DV> &v,
                const Tile<float, RQ, DV> &acc, const Tile<float, RQ, 1> &row_max,
                const Tile<float, RQ, 1> &row_sum, long long q_first, long long k_first, int keys,
                bool causal, float scale, void *smem) {
  using Scores = TileLayout<RQ, RK>;
  using OpQ = detail::Operand<T, RQ, D, true>;
  using OpK = detail::Operand<T, RK, D, true>;
  using OpP = detail::Operand<T, RQ, RK, true>;
  using OpV = detail::Operand<T, DV, RK, false>;
  const float minus_inf = detail::identity<Reduce::max>();
  // q, k and v go to shared memory at once: v's registers are free before the scores take theirs.
  // After them, the probabilities and the reductions' partials.
  unsigned char *staging = static_cast<unsigned char *>(smem);
  unsigned char *work = staging + OpQ::Smem::kBytes + OpK::Smem::kBytes + OpV::Smem::kBytes;
  detail::fragments_to_smem(q, staging);
  detail::fragments_to_smem(k, staging + OpQ::Smem::kBytes);
  detail::fragments_to_smem(v, staging + OpQ::Smem::kBytes + OpK::Smem::kBytes);
  team_sync();
  const mk_u32 q_stage = ptx::smem_address(staging), k_stage = q_stage + OpQ::Smem::kBytes,
               v_stage = k_stage + OpK::Smem::kBytes;
  Tile<float, RQ, RK> s = splat<float, RQ, RK>(0.0f);
  detail::multiply_stage<OpQ, OpK>(s, q_stage, k_stage);
  // Key c comes after query r where k_first + c > q_first + r, that is c - r > q_first - k_first;
  // c - r lies within (-RQ, RK), so the difference clamped to [-RQ, RK] masks the same, in 32
  // bits and with one compare of a constant per element.
  const long long after = q_first - k_first;
  const int limit = int(after < -RQ ? -RQ : after > RK ? RK : after);
#pragma unroll
  for (int p = 0; p < Scores::kPairs; ++p) {
    const int col = Scores::col(p), distance = col - Scores::row(p);
    s.pairs[p].x = col >= keys || (causal && distance > limit) ? minus_inf : s.pairs[p].x * scale;
    s.pairs[p].y =
        col + 1 >= keys || (causal && distance + 1 > limit) ? minus_inf : s.pairs[p].y * scale;
  }
  AttentionState<RQ, DV> next;
  next.row_max = maximum(row_max, reduce<Reduce::max, 1>(s, work));
  // e^(m - m'), 1 where both are -inf (nothing seen yet).
  const Tile<float, RQ, 1> alpha =
      detail::zip_pairs(row_max, next.row_max, [&](float2 m, float2 m1) {
        return float2{m1.x == minus_inf ? 1.0f : expf(m.x - m1.x),
                      m1.y == minus_inf ? 1.0f : expf(m.y - m1.y)};
      });
  const Tile<float, RQ, RK> m1 = broadcast<1, RQ, RK>(next.row_max, work);
  // A masked score is -inf and weighs 0; any other is at most its row's finite max.
  const Tile<float, RQ, RK> e = detail::zip_pairs(s, m1, [&](float2 x, float2 m) {
    return float2{x.x == minus_inf ? 0.0f : expf(x.x - m.x),
                  x.y == minus_inf ? 0.0f : expf(x.y - m.y)};
  });
  next.row_sum = add(mul(row_sum, alpha), reduce<Reduce::sum, 1>(e, work));
  next.acc = mul(acc, broadcast<1, RQ, DV>(alpha, work));
  detail::fragments_to_smem(convert<T>(e), work);
  team_sync();
  detail::multiply_stage<OpP, OpV>(next.acc, ptx::smem_address(work), v_stage);
  team_sync();
  return next;
}

} // namespace mk

#endif // MK_DEVICE_IMPL_ATTENTION_FUNCS_CUH
