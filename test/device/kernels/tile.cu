// Kernels that instantiate the tile functions of mk/device/tile.cuh on 64 x 128 tiles of an
// M x N region (CTA (x, y) takes tile (y, x)); each result goes to its own plane of `out`.
#include "mk/device.cuh"

extern __shared__ __align__(128) unsigned char mk_smem[];

#define MK_KERNEL extern "C" __global__ void __launch_bounds__(MK_TEAM_THREADS, 1)
// The dynamic shared memory kernel `name` needs, for the host to read with cuModuleGetGlobal.
#define MK_SMEM(name, ...) extern "C" __constant__ int name##_smem = __VA_ARGS__;

constexpr int R = 64, C = 128;

struct Region {
  long long m0, n0;
  int rows, cols;
};
__device__ __forceinline__ Region tile_region(int M, int N) {
  const int m0 = blockIdx.y * R, n0 = blockIdx.x * C;
  return {m0, n0, min(R, M - m0), min(C, N - n0)};
}

// The planes of tile_ops' output, in order.
enum TileOp { kCopy, kAdd, kSub, kMul, kDiv, kMax, kRelu, kGelu, kSilu, kSwiglu, kSplatAdd, kOps };

// `whole` gets x's tile stored whole: what lies beyond M and N must have loaded as 0.
template <typename T>
__device__ __forceinline__ void tile_ops(const T *x, const T *y, T *out, long long ld,
                                         long long plane, T *whole, long long whole_ld, int M,
                                         int N) {
  const Region r = tile_region(M, N);
  const long long at = r.m0 * ld + r.n0;
  const mk::Tile<T, R, C> a = mk::load_tile<T, R, C>(x + at, ld, r.rows, r.cols, mk_smem);
  const mk::Tile<T, R, C> b = mk::load_tile<T, R, C>(y + at, ld, r.rows, r.cols, mk_smem);
  mk::store_tile(a, whole + r.m0 * whole_ld + r.n0, whole_ld, R, C, mk_smem);
  const auto put = [&](TileOp op, const mk::Tile<T, R, C> &t) {
    mk::store_tile(t, out + op * plane + at, ld, r.rows, r.cols, mk_smem);
  };
  put(kCopy, a);
  put(kAdd, mk::add(a, b));
  put(kSub, mk::sub(a, b));
  put(kMul, mk::mul(a, b));
  put(kDiv, mk::div(a, b));
  put(kMax, mk::maximum(a, b));
  put(kRelu, mk::relu(a));
  put(kGelu, mk::gelu(a));
  put(kSilu, mk::silu(a));
  put(kSwiglu, mk::swiglu(a, b));
  put(kSplatAdd, mk::add(a, mk::splat<T, R, C>(T(2.5f))));
}

#define TILE_OPS_KERNEL(name, T)                                                                   \
  MK_SMEM(name, mk::tile_io_smem_bytes<T, R, C>())                                                 \
  MK_KERNEL name(const T *x, const T *y, T *out, long long ld, long long plane, T *whole,          \
                 long long whole_ld, int M, int N) {                                               \
    tile_ops(x, y, out, ld, plane, whole, whole_ld, M, N);                                         \
  }
TILE_OPS_KERNEL(tile_ops_f32, float)
TILE_OPS_KERNEL(tile_ops_bf16, mk::bf16)
TILE_OPS_KERNEL(tile_ops_f16, mk::f16)

// Every conversion between f32, bf16 and f16 of x (f32) and of xb (bf16).
MK_SMEM(tile_convert, mk::tile_io_smem_bytes<float, R, C>())
MK_KERNEL tile_convert(const float *x, const mk::bf16 *xb, long long ld, mk::bf16 *f32_to_bf16,
                       mk::f16 *f32_to_f16, float *bf16_to_f32, mk::f16 *bf16_to_f16,
                       float *f16_to_f32, int M, int N) {
  const Region r = tile_region(M, N);
  const long long at = r.m0 * ld + r.n0;
  const auto f = mk::load_tile<float, R, C>(x + at, ld, r.rows, r.cols, mk_smem);
  const auto b = mk::load_tile<mk::bf16, R, C>(xb + at, ld, r.rows, r.cols, mk_smem);
  mk::store_tile(mk::convert<mk::bf16>(f), f32_to_bf16 + at, ld, r.rows, r.cols, mk_smem);
  mk::store_tile(mk::convert<mk::f16>(f), f32_to_f16 + at, ld, r.rows, r.cols, mk_smem);
  mk::store_tile(mk::convert<float>(b), bf16_to_f32 + at, ld, r.rows, r.cols, mk_smem);
  const auto h = mk::convert<mk::f16>(b);
  mk::store_tile(h, bf16_to_f16 + at, ld, r.rows, r.cols, mk_smem);
  mk::store_tile(mk::convert<float>(h), f16_to_f32 + at, ld, r.rows, r.cols, mk_smem);
}

// out (f32) = the combination of `slots` tiles `slot_stride` apart, stored whole: what lies
// beyond M and N must come out 0.
template <mk::Reduce kOp, typename T, int TR, int TC>
__device__ __forceinline__ void accumulate(const T *src, long long slot_stride, int slots,
                                           long long ld, float *out, long long out_ld, int M,
                                           int N) {
  const long long m0 = blockIdx.y * TR, n0 = blockIdx.x * TC;
  const int rows = min(TR, int(M - m0)), cols = min(TC, int(N - n0));
  const mk::Tile<float, TR, TC> t = mk::accumulate_tiles<kOp, T, TR, TC>(
      src + m0 * ld + n0, slot_stride, slots, ld, rows, cols, mk_smem);
  mk::store_tile(t, out + m0 * out_ld + n0, out_ld, TR, TC, mk_smem);
}

#define ACCUMULATE_KERNEL(name, op, T, TR, TC)                                                     \
  MK_SMEM(name, mk::tile_io_smem_bytes<float, TR, TC>())                                           \
  MK_KERNEL name(const T *src, long long slot_stride, int slots, long long ld, float *out,         \
                 long long out_ld, int M, int N) {                                                 \
    accumulate<mk::Reduce::op, T, TR, TC>(src, slot_stride, slots, ld, out, out_ld, M, N);         \
  }
ACCUMULATE_KERNEL(accumulate_sum_bf16, sum, mk::bf16, R, C)
ACCUMULATE_KERNEL(accumulate_max_bf16, max, mk::bf16, R, C)
ACCUMULATE_KERNEL(accumulate_min_bf16, min, mk::bf16, R, C)
ACCUMULATE_KERNEL(accumulate_sum_f32, sum, float, R, C)
ACCUMULATE_KERNEL(accumulate_sum_f16, sum, mk::f16, R, C)
ACCUMULATE_KERNEL(accumulate_sum_bf16_128x256, sum, mk::bf16, 128, 256)
ACCUMULATE_KERNEL(accumulate_max_f32_128x256, max, float, 128, 256)

// out (bf16, ld) = the combination of `slots` tiles `slot_stride` apart, rounded once, through
// accumulate_chunks and store_chunks: only the region inside M x N is written.
MK_SMEM(accumulate_chunks_sum_bf16_128x256, 0)
MK_KERNEL accumulate_chunks_sum_bf16_128x256(const mk::bf16 *src, long long slot_stride, int slots,
                                             long long ld, mk::bf16 *out, int M, int N) {
  const long long m0 = blockIdx.y * 128, n0 = blockIdx.x * 256;
  const int rows = min(128, int(M - m0)), cols = min(256, int(N - n0));
  const mk::ChunkTile<mk::bf16, 128, 256> t =
      mk::accumulate_chunks<mk::Reduce::sum, mk::bf16, mk::bf16, 128, 256>(
          src + m0 * ld + n0, slot_stride, slots, ld, rows, cols);
  mk::store_chunks(t, out + m0 * ld + n0, ld, rows, cols);
}
