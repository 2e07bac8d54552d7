//===- mk/device/impl/tile__types.cuh - register tiles and their shared-memory form -===//

#ifndef MK_DEVICE_IMPL_TILE_TYPES_CUH
#define MK_DEVICE_IMPL_TILE_TYPES_CUH

#include "mk/abi.h"
#include "mk/device/impl/ptx__funcs.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace mk {

using bf16 = __nv_bfloat16;
using f16 = __half;

/// How accumulate_tiles combines its slots.
enum class Reduce { sum, max, min };

/// Warps of a CTA; every collective function is written for exactly this many threads.
constexpr int kTeamWarps = MK_TEAM_THREADS / 32;
static_assert(MK_TEAM_THREADS % 32 == 0, "whole warps");

/// Shared memory one CTA can have on sm_90 (227 KiB), static and dynamic together.
constexpr int kCtaSmemBytes = MK_CTA_SMEM_BYTES;
/// What the device library declares __shared__ for a kernel's lifetime (BulkCopier's barriers,
/// the launch's epoch).
constexpr int kStaticSmemBytes = 64;
/// Dynamic shared memory a function may ask for: what leaves the static its room.
constexpr int kMaxSmemBytes = kCtaSmemBytes - kStaticSmemBytes;

namespace detail {

/// Two adjacent elements of a row, the unit the tensor cores' accumulator layout hands out.
template <typename T> struct PairOf;
template <> struct PairOf<float> { using type = float2; };
template <> struct PairOf<bf16> { using type = __nv_bfloat162; };
template <> struct PairOf<f16> { using type = __half2; };

/// x and y rounded to T, as the register of a pair (x in the lower half).
template <typename T> __device__ __forceinline__ mk_u32 pack_pair(float x, float y);
template <> __device__ __forceinline__ mk_u32 pack_pair<bf16>(float x, float y) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<const mk_u32 *>(&pair);
}
template <> __device__ __forceinline__ mk_u32 pack_pair<f16>(float x, float y) {
  const __half2 pair = __floats2half2_rn(x, y);
  return *reinterpret_cast<const mk_u32 *>(&pair);
}

__host__ __device__ constexpr int min_of(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int max_of(int a, int b) { return a < b ? b : a; }

/// The warp grid (rows of warps) that gives each warp the squarest block of a `rows` x `cols`
/// tile in whole 16x16 blocks: the least shared-memory traffic per mma in matmul. 0: none fits.
__host__ __device__ constexpr int warp_grid_rows(int rows, int cols) {
  int best = 0;
  for (int warp_rows = 1; warp_rows <= kTeamWarps; warp_rows *= 2) {
    const int warp_cols = kTeamWarps / warp_rows;
    if (rows % (16 * warp_rows) != 0 || cols % (16 * warp_cols) != 0)
      continue;
    if (best == 0 || rows / warp_rows + cols / warp_cols < rows / best + cols / (kTeamWarps / best))
      best = warp_rows;
  }
  return best;
}

} // namespace detail

/// Where the elements of an R x C tile live: the CTA's warps form a kWarpsM x kWarpsN grid, each
/// warp owns a kWarpRows x kWarpCols block, cut into m16n8 fragments laid out as the accumulators
/// of mma.m16n8k16: lane l holds the pairs (row l/4, cols 2(l%4)..+1) and (row l/4 + 8, same
/// cols) of each fragment. Pair p of a thread is fragment p / 2 (row-major over the warp's
/// fragments), upper (p even) or lower (p odd) half. matmul produces exactly this layout.
template <int R, int C> struct TileLayout {
  static constexpr int kWarpsM = detail::warp_grid_rows(R, C);
  static_assert(kWarpsM != 0, "a tile must split into 16x16 blocks over the CTA's 8 warps "
                              "(R and C multiples of 16, R * C >= 2048)");
  static constexpr int kWarpsN = kTeamWarps / kWarpsM;
  static constexpr int kWarpRows = R / kWarpsM;
  static constexpr int kWarpCols = C / kWarpsN;
  static constexpr int kFragmentRows = kWarpRows / 16; // m16 fragments per warp
  static constexpr int kFragmentCols = kWarpCols / 8;  // n8 fragments per warp
  static constexpr int kPairs = kFragmentRows * kFragmentCols * 2;

  static __device__ __forceinline__ int warp() { return team_thread() / 32; }
  static __device__ __forceinline__ int lane() { return team_thread() % 32; }

  /// Tile row of this thread's pair `p`.
  static __device__ __forceinline__ int row(int p) {
    return warp() / kWarpsN * kWarpRows + p / (2 * kFragmentCols) * 16 + p % 2 * 8 + lane() / 4;
  }
  /// Tile column of the first element of this thread's pair `p`.
  static __device__ __forceinline__ int col(int p) {
    return warp() % kWarpsN * kWarpCols + p / 2 % kFragmentCols * 8 + lane() % 4 * 2;
  }
};

/// The layout of a rank-1 tile of R elements (mk.tile<[R]>, the device's Tile<T, R, 1>): pair p
/// of a thread holds elements element(p) and element(p) + 1, consecutive threads consecutive
/// pairs, so that elementwise work is the same as on any tile. Rank-2 tiles have no layout with
/// one column (mkc refuses them), so the two never meet. mk/device/vector.cuh moves values
/// between this layout and the rows or columns of rank-2 tiles.
template <int R> struct TileLayout<R, 1> {
  static constexpr int kPairs = (R + 2 * MK_TEAM_THREADS - 1) / (2 * MK_TEAM_THREADS);

  static __device__ __forceinline__ int element(int p) {
    return 2 * (p * MK_TEAM_THREADS + team_thread());
  }
};

/// An R x C tile of T held in the registers of the CTA's threads, in TileLayout<R, C> or, as the
/// GEMM engine's accumulators are, in another layout L (L::kPairs pairs a thread, at L::row(p)
/// and L::col(p)). Elementwise work takes any layout; what moves elements between threads takes
/// TileLayout's.
template <typename T, int R, int C, typename L = TileLayout<R, C>> struct Tile {
  using Layout = L;
  using Pair = typename detail::PairOf<T>::type;
  Pair pairs[Layout::kPairs];
};

namespace detail {

/// A kRows x kCols tile of T in shared memory, row-major, as 16-byte chunks XOR-swizzled so that
/// the 8 rows an ldmatrix or a fragment store touches at one column, and 8 consecutive chunks of
/// a row, fall in distinct bank groups: every shared-memory access of the library is free of bank
/// conflicts. The shared-memory form of a Tile<T, R, C>, and of matmul's operand stages.
template <typename T, int kRows, int kCols> struct TileSmem {
  static constexpr int kRowBytes = kCols * int(sizeof(T));
  static_assert(kRowBytes % 16 == 0, "rows of whole 16-byte chunks");
  static constexpr int kRowChunks = kRowBytes / 16;
  static constexpr int kChunks = kRows * kRowChunks;
  static constexpr int kBytes = kRows * kRowBytes;
  // Chunks are permuted within groups of kSwizzle (a power of two dividing the row, at most the
  // 8 chunks of a 128-byte bank line); kRowsPerLine rows share one line when a row is shorter.
  static constexpr int kSwizzle = min_of(8, kRowChunks & -kRowChunks);
  static constexpr int kRowsPerLine = 8 / kSwizzle;

  /// Byte offset of chunk `chunk` of row `row`.
  static __device__ __forceinline__ int chunk(int row, int chunk) {
    return row * kRowBytes + (chunk ^ (row / kRowsPerLine % kSwizzle)) * 16;
  }
  /// Byte offset of element (row, col).
  static __device__ __forceinline__ int element(int row, int col) {
    const int byte = col * int(sizeof(T));
    return chunk(row, byte / 16) + byte % 16;
  }
};

/// This thread's share of cp.async copies of kRows x kCols tiles of T (row-major, `ld`) into their
/// TileSmem form: chunk column `chunk`, rows row0 + i * kRowStep. What lies outside the valid
/// region is zero-filled, not read. Computed once, it serves every tile along a direction in which
/// the valid region does not change (matmul's k slices): a copy then costs one address, one
/// compare and one cp.async per chunk.
template <typename T, int kRows, int kCols> struct TileCopy {
  using Smem = TileSmem<T, kRows, kCols>;
  static_assert(MK_TEAM_THREADS % Smem::kRowChunks == 0 && Smem::kChunks % MK_TEAM_THREADS == 0,
                "rows of at most 4 KiB, tiles of at least 4 KiB, in powers of two");
  static constexpr int kRowStep = MK_TEAM_THREADS / Smem::kRowChunks;
  static constexpr int kCount = kRows / kRowStep;

  const T *src;       // this thread's first chunk of the next tile
  long long row_step; // elements between this thread's rows: kRowStep * ld
  int row0, chunk;
  int rows_left;   // valid rows from row0 on
  int chunk_bytes; // valid bytes of this thread's chunk column
};

/// 16 bytes of T, the unit of vectorised global accesses.
template <typename T> struct alignas(16) Vector {
  static constexpr int kSize = 16 / int(sizeof(T));
  T elements[kSize];
};

} // namespace detail

/// A tile that is only stored: this thread's 16-byte chunks of its rows (chunk i of the thread is
/// chunk team_thread() + i * MK_TEAM_THREADS of the tile, row-major). No shared memory and no
/// barriers: each thread stores what it holds.
template <typename T, int R, int C> struct ChunkTile {
  static constexpr int kRowChunks = C * int(sizeof(T)) / 16;
  static constexpr int kThreadChunks = R * kRowChunks / MK_TEAM_THREADS;
  static_assert(C * sizeof(T) % 16 == 0 && R * kRowChunks % MK_TEAM_THREADS == 0,
                "whole 16-byte chunks, the same number for every thread");
  detail::Vector<T> chunks[kThreadChunks];

  /// The tile row and first column of this thread's chunk i.
  static __device__ __forceinline__ int row(int i) {
    return (team_thread() + i * MK_TEAM_THREADS) / kRowChunks;
  }
  static __device__ __forceinline__ int col(int i) {
    return (team_thread() + i * MK_TEAM_THREADS) % kRowChunks * detail::Vector<T>::kSize;
  }
};

} // namespace mk

#endif // MK_DEVICE_IMPL_TILE_TYPES_CUH
