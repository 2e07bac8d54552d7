//===- mk/device/impl/gemm__funcs.cuh - definitions for mk/device/gemm.cuh -----------===//

#ifndef MK_DEVICE_IMPL_GEMM_FUNCS_CUH
#define MK_DEVICE_IMPL_GEMM_FUNCS_CUH

#include "mk/device/impl/gemm__types.cuh"
#include "mk/device/impl/ptx__funcs.cuh"
#include "mk/device/impl/tile__funcs.cuh"

namespace mk {
namespace detail {

/// Plans the loads of an operand's k slices, whose first row or column (of `valid_mn` real
/// ones) is at `origin`, with `valid_k` real k of the slice's kK.
template <typename Op>
__device__ __forceinline__ OperandSlices<Op>
plan_operand_slices(const typename Op::Element *origin, long long ld, int valid_mn, int valid_k) {
  if constexpr (Op::kKContiguous)
    return {
        plan_tile_copy<typename Op::Element, Op::kRows, Op::kCols>(origin, ld, valid_mn, valid_k),
        Op::kK};
  else
    return {
        plan_tile_copy<typename Op::Element, Op::kRows, Op::kCols>(origin, ld, valid_k, valid_mn),
        Op::kK * ld};
}

/// Starts the copy of the next k slice into the stage at `stage`.
template <typename Op>
__device__ __forceinline__ void load_next_slice(OperandSlices<Op> &slices, mk_u32 stage) {
  start_tile_copy(slices.copy, stage);
  slices.copy.src += slices.step;
}

/// Loads the k slice at `origin` (`valid_mn` x `valid_k` of it real, zeros elsewhere) into the
/// stage at `stage` element by element: for operands whose rows cannot be copied in 16-byte
/// chunks. Synchronous, so the pipeline's stages hold as they do with cp.async.
template <typename Op>
__device__ __forceinline__ void load_slice_elements(const typename Op::Element *origin,
                                                    long long ld, int valid_mn, int valid_k,
                                                    unsigned char *stage) {
  using T = typename Op::Element;
  const int rows = Op::kKContiguous ? valid_mn : valid_k;
  const int cols = Op::kKContiguous ? valid_k : valid_mn;
  for_each_chunk<Op::Smem::kChunks, Op::Smem::kRowChunks>([&](int row, int chunk) {
    *reinterpret_cast<Vector<T> *>(stage + Op::Smem::chunk(row, chunk)) =
        load_chunk(origin + row * ld + chunk * Vector<T>::kSize,
                   valid_in_chunk<T>(row, chunk, rows, cols), false);
  });
}

/// This thread's ldmatrix addresses for the kBlocks 16 (mn) x 16 (k) blocks at rows (or columns)
/// mn0 + 16 b of an operand stage, each a few per-thread bases plus an immediate. Addresses are
/// register operands of inline assembly, which the compiler cannot fold a constant into: computed
/// whole, every block and k step of a stage took a register of its own, held across the loops
/// around the stage (ptxas spilled them).
///
/// The 16 x 16 block at (mn, k0) as four 8x8 matrices, in the order mma.m16n8k16 takes them, so
/// that each fragment is a register pair or quad as is: for A (kForB false) mn-major: (mn low, k
/// low), (mn high, k low), (mn low, k high), (mn high, k high), an A fragment; for B k-major: (n
/// low, k low), (n low, k high), (n high, k low), (n high, k high), the fragments of the n8
/// blocks at n0 and n0 + 8.
template <typename Op, bool kForB, int kBlocks> struct FragmentAddresses {
  using Smem = typename Op::Smem;
  // Rows whose index differs by a multiple of 8 share a swizzle (TileSmem). K-contiguous, the mn
  // blocks are rows 16 apart, and the k steps' chunks fall in kSwizzle / 2 classes of the chunk
  // within its group; transposed (rows are k), the k steps are rows 16 apart, and each mn block
  // is a base.
  static constexpr int kBases = Op::kKContiguous ? max_of(1, Smem::kSwizzle / 2) : kBlocks;
  mk_u32 base[kBases];

  __device__ __forceinline__ FragmentAddresses(mk_u32 stage, int mn0) {
    // Lane l addresses row l % 8 of matrix l / 8.
    const int lane = team_thread() % 32, matrix = lane / 8;
    const int mn_half = kForB ? matrix / 2 : matrix % 2, k_half = kForB ? matrix % 2 : matrix / 2;
#pragma unroll
    for (int i = 0; i < kBases; ++i)
      base[i] = stage + (Op::kKContiguous
                             ? Smem::chunk(mn0 + mn_half * 8 + lane % 8, 2 * i + k_half)
                             : Smem::chunk(k_half * 8 + lane % 8, (mn0 + 16 * i) / 8 + mn_half));
  }

  /// The blocks from kBlock on at k kK0 (a multiple of 16), recursively: an immediate must be a
  /// constant expression, which an unrolled loop's index is not.
  template <int kK0, int kBlock = 0>
  __device__ __forceinline__ void load(mk_u32 (&fragments)[kBlocks][4]) const {
    if constexpr (kBlock < kBlocks) {
      if constexpr (Op::kKContiguous) {
        constexpr int kChunk = kK0 / 8, kInGroup = kChunk % Smem::kSwizzle;
        ptx::ldmatrix_x4<(kChunk - kInGroup) * 16 + kBlock * 16 * Smem::kRowBytes>(
            fragments[kBlock], base[kInGroup / 2]);
      } else {
        ptx::ldmatrix_x4_trans<kK0 * Smem::kRowBytes>(fragments[kBlock], base[kBlock]);
      }
      load<kK0, kBlock + 1>(fragments);
    }
  }
};

/// acc += the k16 steps from kK0 on of one shared-memory stage of A and B.
template <int kK0, typename OpA, typename OpB, int BM, int BN, typename AddressesA,
          typename AddressesB>
__device__ __forceinline__ void multiply_steps(Tile<float, BM, BN> &acc, const AddressesA &a_at,
                                               const AddressesB &b_at) {
  using Layout = TileLayout<BM, BN>;
  if constexpr (kK0 < OpA::kK) {
    mk_u32 a[Layout::kFragmentRows][4], b[Layout::kFragmentCols / 2][4];
    a_at.template load<kK0>(a);
    b_at.template load<kK0>(b);
#pragma unroll
    for (int i = 0; i < Layout::kFragmentRows; ++i)
#pragma unroll
      for (int j = 0; j < Layout::kFragmentCols; ++j) {
        const int p = (i * Layout::kFragmentCols + j) * 2;
        ptx::Mma<typename OpA::Element>::run(acc.pairs[p], acc.pairs[p + 1], a[i],
                                             b[j / 2][j % 2 * 2], b[j / 2][j % 2 * 2 + 1]);
      }
    multiply_steps<kK0 + 16, OpA, OpB>(acc, a_at, b_at);
  }
}

/// acc += the product of one shared-memory stage of A and B, in k16 steps.
template <typename OpA, typename OpB, int BM, int BN>
__device__ __forceinline__ void multiply_stage(Tile<float, BM, BN> &acc, mk_u32 a_stage,
                                               mk_u32 b_stage) {
  using Layout = TileLayout<BM, BN>;
  const int warp = team_thread() / 32;
  const FragmentAddresses<OpA, false, Layout::kFragmentRows> a_at(a_stage, warp / Layout::kWarpsN *
                                                                               Layout::kWarpRows);
  const FragmentAddresses<OpB, true, Layout::kFragmentCols / 2> b_at(
      b_stage, warp % Layout::kWarpsN * Layout::kWarpCols);
  multiply_steps<0, OpA, OpB>(acc, a_at, b_at);
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
  const auto stage_offset = [](int s) { return s * Shape::kStageBytes; };
  const int k_tiles = int((K + BK - 1) / BK);
  // The last slice may hold fewer than BK real k: zeros stand in for the rest.
  const int last_k = int(K - (long long)(k_tiles - 1) * BK);
  const bool vectors = detail::vector_aligned(A, lda) && detail::vector_aligned(B, ldb);
  // The edges do not move along k: each thread plans its copies once, then advances them, and
  // plans the last slice again where it is short.
  detail::OperandSlices<OpA> a_slices = detail::plan_operand_slices<OpA>(A, lda, rows, BK);
  detail::OperandSlices<OpB> b_slices = detail::plan_operand_slices<OpB>(B, ldb, cols, BK);
  const auto load_slice = [&](int k_tile) {
    const int valid_k = k_tile == k_tiles - 1 ? last_k : BK;
    const int s = k_tile % kStages;
    if (!vectors) {
      unsigned char *stage = static_cast<unsigned char *>(smem) + stage_offset(s);
      detail::load_slice_elements<OpA>(A + k_tile * a_slices.step, lda, rows, valid_k, stage);
      detail::load_slice_elements<OpB>(B + k_tile * b_slices.step, ldb, cols, valid_k,
                                       stage + OpA::Smem::kBytes);
      return;
    }
    if (valid_k != BK) {
      a_slices = detail::plan_operand_slices<OpA>(A + k_tile * a_slices.step, lda, rows, valid_k);
      b_slices = detail::plan_operand_slices<OpB>(B + k_tile * b_slices.step, ldb, cols, valid_k);
    }
    detail::load_next_slice(a_slices, stages + stage_offset(s));
    detail::load_next_slice(b_slices, stages + stage_offset(s) + OpA::Smem::kBytes);
  };

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
    team_sync();
    if (k_tile + kStages - 1 < k_tiles)
      load_slice(k_tile + kStages - 1);
    ptx::cp_async_commit();
    const mk_u32 a_stage = stages + stage_offset(k_tile % kStages);
    detail::multiply_stage<OpA, OpB>(acc, a_stage, a_stage + OpA::Smem::kBytes);
  }
  ptx::cp_async_wait<0>();
  team_sync();
  return acc;
}

} // namespace mk

#endif // MK_DEVICE_IMPL_GEMM_FUNCS_CUH
