//===- mk/device/gemm.cuh - one output tile of a matrix product on the tensor cores ---===//
//
// Collective over the team, like everything in mk/device: all MK_TEAM_THREADS threads call it with
// the same arguments, and `smem` is free again when it returns.
//
//===----------------------------------------------------------------------------------===//

#ifndef MK_DEVICE_GEMM_CUH
#define MK_DEVICE_GEMM_CUH

#include "mk/device/impl/gemm__types.cuh"
#include "mk/device/tile.cuh"

namespace mk {

/// Shared memory matmul<BM, BN, BK, ...> of T needs (its cp.async pipeline stages).
template <typename T, int BM, int BN, int BK> __host__ __device__ constexpr int matmul_smem_bytes();

/// One BM x BN output tile of C = A * B with f32 accumulation (T: bf16 or f16), in the register
/// layout of every Tile. K, any extent, is the contracted extent held locally: its last slice of
/// BK is zero-filled past K.
///
/// A holds the tile's `rows` (<= BM) rows: [rows x K], K contiguous, `lda` apart, or, with
/// kATransposed, [K x rows], M contiguous. B holds its `cols` (<= BN) columns: [K x cols], N
/// contiguous, or, with kBTransposed, [cols x K], K contiguous. Both point at the tile's first
/// row/column. Rows and columns beyond `rows` and `cols` count as zeros and are never read.
///
/// mma.sync m16n8k16 on 64x64 (or the squarest) warp tiles, fed by ldmatrix from swizzled,
/// conflict-free shared memory that a multi-stage cp.async pipeline fills where both pointers and
/// leading dimensions are 16-byte aligned, and element-by-element loads otherwise (slower).
template <int BM, int BN, int BK, bool kATransposed, bool kBTransposed, typename T>
__device__ __forceinline__ Tile<float, BM, BN> matmul(const T *A, long long lda, const T *B,
                                                      long long ldb, long long K, int rows,
                                                      int cols, void *smem);

} // namespace mk

#include "mk/device/impl/gemm__funcs.cuh"

#endif // MK_DEVICE_GEMM_CUH
