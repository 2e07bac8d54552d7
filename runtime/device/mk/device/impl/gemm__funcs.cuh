//===- mk/device/impl/gemm__funcs.cuh - definitions for mk/device/gemm.cuh -----------===//

#ifndef MK_DEVICE_IMPL_GEMM_FUNCS_CUH
#define MK_DEVICE_IMPL_GEMM_FUNCS_CUH

#include "mk/device/impl/gemm__types.cuh"
#include "mk/device/impl/ptx__funcs.cuh"
#include "mk/device/impl/tile__funcs.cuh"

namespace mk {
namespace detail {

/// Starts the cp.async copy of k slice `k_tile` of an operand, whose first row or column (of
/// `valid_mn` real ones) is at `origin`, into the shared-memory stage at `stage`.
template <typename Op>
__device__ __forceinline__ void load_operand_slice(mk_u32 stage,
                                                   const typename Op::Element *origin,
                                                   long long ld, int k_tile, int valid_mn) {
  if constexpr (Op::kKContiguous)
    cp_async_tile<typename Op::Element, Op::kRows, Op::kCols>(stage, origin + k_tile * Op::kK, ld,
                                                              valid_mn, Op::kK);
  else
    cp_async_tile<typename Op::Element, Op::kRows, Op::kCols>(
        stage, origin + k_tile * Op::kK * ld, ld, Op::kK, valid_mn);
}

/// The 16 (mn) x 16 (k) block of an operand stage at (mn0, k0) as four 8x8 matrices in registers:
/// (mn low, k low), (mn high, k low), (mn low, k high), (mn high, k high). That is an A fragment of
/// mma.m16n8k16; for B, {0, 2} and {1, 3} are the fragments of the n8 blocks at n0 and n0 + 8.
template <typename Op>
__device__ __forceinline__ void load_operand_fragment(mk_u32 (&fragment)[4], mk_u32 stage,
                                                      int mn0, int k0) {
  const int lane = threadIdx.x % 32;
  if constexpr (Op::kKContiguous)
    // Lane l addresses row l % 8 of matrix l / 8: rows mn0 + l % 16, k chunk l / 16.
    ptx::ldmatrix_x4(fragment, stage + Op::Smem::chunk(mn0 + lane % 16, k0 / 8 + lane / 16));
  else
    // Rows are k here: k0 + 8 (l / 16) + l % 8, mn chunk (l / 8) % 2; transposed on loading.
    ptx::ldmatrix_x4_trans(fragment, stage + Op::Smem::chunk(k0 + lane / 16 * 8 + lane % 8,
                                                             mn0 / 8 + lane / 8 % 2));
}

/// acc += the product of one shared-memory stage of A and B, in k16 steps.
template <typename OpA, typename OpB, int BM, int BN>
__device__ __forceinline__ void multiply_stage(Tile<float, BM, BN> &acc, mk_u32 a_stage,
                                               mk_u32 b_stage) {
  using Layout = TileLayout<BM, BN>;
  const int warp = threadIdx.x / 32;
  const int warp_m0 = warp / Layout::kWarpsN * Layout::kWarpRows;
  const int warp_n0 = warp % Layout::kWarpsN * Layout::kWarpCols;
#pragma unroll
  for (int k0 = 0; k0 < OpA::kK; k0 += 16) {
    mk_u32 a[Layout::kFragmentRows][4], b[Layout::kFragmentCols / 2][4];
#pragma unroll
    for (int i = 0; i < Layout::kFragmentRows; ++i)
      load_operand_fragment<OpA>(a[i], a_stage, warp_m0 + i * 16, k0);
#pragma unroll
    for (int j = 0; j < Layout::kFragmentCols / 2; ++j)
      load_operand_fragment<OpB>(b[j], b_stage, warp_n0 + j * 16, k0);
#pragma unroll
    for (int i = 0; i < Layout::kFragmentRows; ++i)
#pragma unroll
      for (int j = 0; j < Layout::kFragmentCols; ++j) {
        const int p = (i * Layout::kFragmentCols + j) * 2;
        ptx::Mma<typename OpA::Element>::run(acc.pairs[p], acc.pairs[p + 1], a[i],
                                             b[j / 2][j % 2], b[j / 2][j % 2 + 2]);
      }
  }
}

} // namespace detail

template <typename T, int BM, int BN, int BK>
__host__ __device__ constexpr int matmul_smem_bytes() {
  return detail::MatmulShape<T, BM, BN, BK>::kSmemBytes;
}

template <int BM, int BN, int BK, bool kATransposed, bool kBTransposed, typename T>
__device__ __forceinline__ Tile<float, BM, BN> matmul(const T *A, long long lda, const T *B,
                                                      long long ldb, long long K, int rows,
                                                      int cols, void *smem) {
  using Shape = detail::MatmulShape<T, BM, BN, BK>;
  using OpA = detail::Operand<T, BM, BK, !kATransposed>;
  using OpB = detail::Operand<T, BN, BK, kBTransposed>;
  constexpr int kStages = Shape::kStages;
  const mk_u32 stages = ptx::smem_address(smem);
  const auto a_stage = [&](int s) { return stages + s * Shape::kStageBytes; };
  const auto b_stage = [&](int s) { return a_stage(s) + OpA::Smem::kBytes; };
  const auto load_slice = [&](int k_tile) {
    const int s = k_tile % kStages;
    detail::load_operand_slice<OpA>(a_stage(s), A, lda, k_tile, rows);
    detail::load_operand_slice<OpB>(b_stage(s), B, ldb, k_tile, cols);
  };
  const int k_tiles = int(K / BK);

  // Prologue: kStages - 1 slices in flight. Every iteration commits one group (possibly empty),
  // so "all but the newest kStages - 2 groups done" always means "slice k_tile has landed".
#pragma unroll
  for (int k_tile = 0; k_tile < kStages - 1; ++k_tile) {
    if (k_tile < k_tiles)
      load_slice(k_tile);
    ptx::cp_async_commit();
  }
  Tile<float, BM, BN> acc = splat<float, BM, BN>(0.0f);
  for (int k_tile = 0; k_tile < k_tiles; ++k_tile) {
    ptx::cp_async_wait<kStages - 2>();
    // Slice k_tile is visible to all warps, and all are done with the stage refilled next (the
    // one multiplied in the previous iteration).
    __syncthreads();
    if (k_tile + kStages - 1 < k_tiles)
      load_slice(k_tile + kStages - 1);
    ptx::cp_async_commit();
    detail::multiply_stage<OpA, OpB>(acc, a_stage(k_tile % kStages), b_stage(k_tile % kStages));
  }
  ptx::cp_async_wait<0>();
  __syncthreads();
  return acc;
}

} // namespace mk

#endif // MK_DEVICE_IMPL_GEMM_FUNCS_CUH
