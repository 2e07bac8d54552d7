//===- mk/device/vector.cuh - rank-1 tiles: load, store, reduce rows or columns, broadcast ===//
//
// A rank-1 tile of N elements is a Tile<T, N, 1> in TileLayout<N, 1> (each thread a few pairs of
// consecutive elements); the elementwise functions of mk/device/tile.cuh take it as any tile.
// Reductions and broadcasts exchange values between the rows or columns of a rank-2 tile and a
// rank-1 one through shared memory, collective over the team as everything in mk/device, and
// return with `smem` free.
//
//===------------------------------------------------------------------------------------===//

#ifndef MK_DEVICE_VECTOR_CUH
#define MK_DEVICE_VECTOR_CUH

#include "mk/device/tile.cuh"

namespace mk {

/// The `count` (<= N) elements at `src`, consecutive; the others are 0.
template <typename T, int N>
__device__ __forceinline__ Tile<T, N, 1> load_vector(const T *src, int count);

/// Writes the first `count` elements of `v` to `dst`, consecutive.
template <typename T, int N>
__device__ __forceinline__ void store_vector(const Tile<T, N, 1> &v, T *dst, int count);

/// Shared memory reduce<kOp, kDim> of a Tile<T, R, C> needs.
template <int kDim, int R, int C> __host__ __device__ constexpr int reduce_smem_bytes();

/// kOp over dim kDim of `t`, in f32, rounded once: kDim 1 combines each row (R results), kDim 0
/// each column (C results). Every element of the tile counts, zeros past a masked edge included.
template <Reduce kOp, int kDim, typename T, int R, int C>
__device__ __forceinline__ Tile<T, kDim == 1 ? R : C, 1> reduce(const Tile<T, R, C> &t, void *smem);

/// Shared memory broadcast of a Tile<T, N, 1> needs.
template <int N> __host__ __device__ constexpr int broadcast_smem_bytes();

/// `v` repeated along a new dim kDim of an R x C tile: kDim 1 gives out[r][c] = v[r] (N = R),
/// kDim 0 gives out[r][c] = v[c] (N = C).
template <int kDim, int R, int C, typename T, int N>
__device__ __forceinline__ Tile<T, R, C> broadcast(const Tile<T, N, 1> &v, void *smem);

} // namespace mk

#include "mk/device/impl/vector__funcs.cuh"

#endif // MK_DEVICE_VECTOR_CUH
