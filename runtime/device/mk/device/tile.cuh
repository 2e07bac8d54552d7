//===- mk/device/tile.cuh - register tiles: create, convert, combine, load, store ----===//
//
// Every function is collective over the team: all MK_TEAM_THREADS threads call it with the same
// arguments. Functions that take `smem` (the kernel's dynamic shared memory, at least the bytes
// named) return with it free for the next call.
//
// Global tensors are row-major with leading dimension `ld` (elements), on this GPU or mapped
// from a peer. `rows` x `cols` (at most R x C) is the valid part of an edge tile: loads give 0
// outside it and read nothing there, stores write nothing there. Accesses are 16-byte vectors,
// coalesced, when the pointer and `ld` allow it, and single elements otherwise.
//
//===----------------------------------------------------------------------------------===//

#ifndef MK_DEVICE_TILE_CUH
#define MK_DEVICE_TILE_CUH

#include "mk/device/impl/tile__types.cuh"

namespace mk {

/// Shared memory that load_tile and store_tile of a Tile<T, R, C> need; accumulate_tiles
/// producing a Tile<float, R, C> needs tile_io_smem_bytes<float, R, C>().
template <typename T, int R, int C> __host__ __device__ constexpr int tile_io_smem_bytes();

/// Every element `value`.
template <typename T, int R, int C, typename L = TileLayout<R, C>>
__device__ __forceinline__ Tile<T, R, C, L> splat(T value);

/// Elementwise conversion, rounding to nearest even.
template <typename To, typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<To, R, C, L> convert(const Tile<T, R, C, L> &t);

// Elementwise arithmetic, rounded once per operation (T in float, bf16, f16); on every tile,
// rank-1 ones (Tile<T, R, 1>, mk/device/vector.cuh) included, as everything elementwise here.
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> add(const Tile<T, R, C, L> &a,
                                                const Tile<T, R, C, L> &b);
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> sub(const Tile<T, R, C, L> &a,
                                                const Tile<T, R, C, L> &b);
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> mul(const Tile<T, R, C, L> &a,
                                                const Tile<T, R, C, L> &b);
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> div(const Tile<T, R, C, L> &a,
                                                const Tile<T, R, C, L> &b);
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> maximum(const Tile<T, R, C, L> &a,
                                                    const Tile<T, R, C, L> &b);
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> minimum(const Tile<T, R, C, L> &a,
                                                    const Tile<T, R, C, L> &b);

// Elementary functions, evaluated in f32 (to within 2 ulp) and rounded once. The names are mk's:
// kernels call them qualified, beside the CUDA math library's.
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> exp(const Tile<T, R, C, L> &x);
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> log(const Tile<T, R, C, L> &x);
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> sqrt(const Tile<T, R, C, L> &x);
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> rsqrt(const Tile<T, R, C, L> &x);
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> reciprocal(const Tile<T, R, C, L> &x);
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> tanh(const Tile<T, R, C, L> &x);
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> sigmoid(const Tile<T, R, C, L> &x);
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> neg(const Tile<T, R, C, L> &x);
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> abs(const Tile<T, R, C, L> &x);

// Activations, evaluated in f32 and rounded once.
/// max(x, 0).
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> relu(const Tile<T, R, C, L> &x);
/// The tanh approximation 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> gelu(const Tile<T, R, C, L> &x);
/// x * sigmoid(x).
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> silu(const Tile<T, R, C, L> &x);
/// silu(gate) * up.
template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> swiglu(const Tile<T, R, C, L> &gate,
                                                   const Tile<T, R, C, L> &up);

/// The tile at `src`; elements outside `rows` x `cols` are 0.
template <typename T, int R, int C>
__device__ __forceinline__ Tile<T, R, C> load_tile(const T *src, long long ld, int rows, int cols,
                                                   void *smem);

/// Writes the `rows` x `cols` part of `t` to `dst`.
template <typename T, int R, int C>
__device__ __forceinline__ void store_tile(const Tile<T, R, C> &t, T *dst, long long ld, int rows,
                                           int cols, void *smem);

/// Combines `slots` (>= 1) tiles of T that lie `slot_stride` elements apart (received copies of
/// one tile) with kOp, in f32; elements outside `rows` x `cols` are 0.
template <Reduce kOp, typename T, int R, int C>
__device__ __forceinline__ Tile<float, R, C> accumulate_tiles(const T *src, long long slot_stride,
                                                              int slots, long long ld, int rows,
                                                              int cols, void *smem);

/// accumulate_tiles converted to Out (of T's size) and kept as this thread's chunks, for a result
/// that is only stored: no shared memory, no barriers, and no register tile to hold.
template <Reduce kOp, typename Out, typename T, int R, int C>
__device__ __forceinline__ ChunkTile<Out, R, C>
accumulate_chunks(const T *src, long long slot_stride, int slots, long long ld, int rows, int cols);

/// Writes the `rows` x `cols` part of `t` to `dst`, each thread its own chunks.
template <typename T, int R, int C>
__device__ __forceinline__ void store_chunks(const ChunkTile<T, R, C> &t, T *dst, long long ld,
                                             int rows, int cols);

} // namespace mk

#include "mk/device/impl/tile__funcs.cuh"

#endif // MK_DEVICE_TILE_CUH
