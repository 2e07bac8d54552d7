//===- mk/device/impl/attention__funcs.cuh - definitions for mk/device/attention.cuh -===//

#ifndef MK_DEVICE_IMPL_ATTENTION_FUNCS_CUH
#define MK_DEVICE_IMPL_ATTENTION_FUNCS_CUH

#include "mk/device/impl/gemm__funcs.cuh"
#include "mk/device/impl/vector__funcs.cuh"

namespace mk {
namespace detail {

/// acc += a b (or a b^T, kBTransposed: b is [N x K]), both register tiles staged through shared
/// memory whole: one stage of mma.sync.
template <bool kBTransposed, typename T, int M, int K, int N>
__device__ __forceinline__ void
multiply_tiles(Tile<float, M, N> &acc, const Tile<T, M, K> &a,
               const Tile<T, kBTransposed ? N : K, kBTransposed ? K : N> &b, unsigned char *smem) {
  using OpA = Operand<T, M, K, true>;
  using OpB = Operand<T, N, K, kBTransposed>;
  fragments_to_smem(a, smem);
  fragments_to_smem(b, smem + OpA::Smem::kBytes);
  team_sync();
  const mk_u32 stage = ptx::smem_address(smem);
  multiply_stage<OpA, OpB>(acc, stage, stage + OpA::Smem::kBytes);
  team_sync();
}

} // namespace detail

template <typename T, int RQ, int RK, int D, int DV>
__host__ __device__ constexpr int attention_block_smem_bytes() {
  return detail::max_of(
      detail::max_of(detail::TileSmem<T, RQ, D>::kBytes + detail::TileSmem<T, RK, D>::kBytes,
                     detail::TileSmem<T, RQ, RK>::kBytes + detail::TileSmem<T, RK, DV>::kBytes),
      detail::max_of(reduce_smem_bytes<1, RQ, RK>(), broadcast_smem_bytes<RQ>()));
}

template <typename T, int RQ, int RK, int D, int DV>
__device__ __forceinline__ AttentionState<RQ, DV>
attention_block(const Tile<T, RQ, D> &q, const Tile<T, RK, D> &k, const Tile<T, RK, DV> &v,
                const Tile<float, RQ, DV> &acc, const Tile<float, RQ, 1> &row_max,
                const Tile<float, RQ, 1> &row_sum, long long q_first, long long k_first,
                bool causal, float scale, void *smem) {
  using Scores = TileLayout<RQ, RK>;
  unsigned char *staging = static_cast<unsigned char *>(smem);
  const float minus_inf = detail::identity<Reduce::max>();
  Tile<float, RQ, RK> s = splat<float, RQ, RK>(0.0f);
  detail::multiply_tiles<true>(s, q, k, staging);
#pragma unroll
  for (int p = 0; p < Scores::kPairs; ++p) {
    const long long query = q_first + Scores::row(p), key = k_first + Scores::col(p);
    s.pairs[p].x = causal && key > query ? minus_inf : s.pairs[p].x * scale;
    s.pairs[p].y = causal && key + 1 > query ? minus_inf : s.pairs[p].y * scale;
  }
  AttentionState<RQ, DV> next;
  next.row_max = maximum(row_max, reduce<Reduce::max, 1>(s, smem));
  // e^(m - m'), 1 where both are -inf (nothing seen yet).
  const Tile<float, RQ, 1> alpha =
      detail::zip_pairs(row_max, next.row_max, [&](float2 m, float2 m1) {
        return float2{m1.x == minus_inf ? 1.0f : expf(m.x - m1.x),
                      m1.y == minus_inf ? 1.0f : expf(m.y - m1.y)};
      });
  const Tile<float, RQ, RK> m1 = broadcast<1, RQ, RK>(next.row_max, smem);
  // A masked score is -inf and weighs 0; any other is at most its row's finite max.
  const Tile<float, RQ, RK> e = detail::zip_pairs(s, m1, [&](float2 x, float2 m) {
    return float2{x.x == minus_inf ? 0.0f : expf(x.x - m.x),
                  x.y == minus_inf ? 0.0f : expf(x.y - m.y)};
  });
  next.row_sum = add(mul(row_sum, alpha), reduce<Reduce::sum, 1>(e, smem));
  next.acc = mul(acc, broadcast<1, RQ, DV>(alpha, smem));
  detail::multiply_tiles<false>(next.acc, convert<T>(e), v, staging);
  return next;
}

} // namespace mk

#endif // MK_DEVICE_IMPL_ATTENTION_FUNCS_CUH
