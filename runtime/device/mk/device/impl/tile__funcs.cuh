//===- mk/device/impl/tile__funcs.cuh - definitions for mk/device/tile.cuh -----------===//

#ifndef MK_DEVICE_IMPL_TILE_FUNCS_CUH
#define MK_DEVICE_IMPL_TILE_FUNCS_CUH

#include "mk/device/impl/ptx__funcs.cuh"
#include "mk/device/impl/tile__types.cuh"

namespace mk {
namespace detail {

// ---- Pairs: the unit of elementwise work --------------------------------------------------

__device__ __forceinline__ float2 to_float2(float2 p) { return p; }
__device__ __forceinline__ float2 to_float2(__nv_bfloat162 p) { return __bfloat1622float2(p); }
__device__ __forceinline__ float2 to_float2(__half2 p) { return __half22float2(p); }

template <typename T> __device__ __forceinline__ typename PairOf<T>::type from_float2(float2 p);
template <> __device__ __forceinline__ float2 from_float2<float>(float2 p) { return p; }
template <> __device__ __forceinline__ __nv_bfloat162 from_float2<bf16>(float2 p) {
  return __float22bfloat162_rn(p);
}
template <> __device__ __forceinline__ __half2 from_float2<f16>(float2 p) {
  return __float22half2_rn(p);
}

// Native packed arithmetic for the 16-bit types (one rounding, as in f32).
__device__ __forceinline__ float2 pair_add(float2 a, float2 b) { return {a.x + b.x, a.y + b.y}; }
__device__ __forceinline__ float2 pair_sub(float2 a, float2 b) { return {a.x - b.x, a.y - b.y}; }
__device__ __forceinline__ float2 pair_mul(float2 a, float2 b) { return {a.x * b.x, a.y * b.y}; }
__device__ __forceinline__ float2 pair_div(float2 a, float2 b) { return {a.x / b.x, a.y / b.y}; }
__device__ __forceinline__ float2 pair_max(float2 a, float2 b) {
  return {fmaxf(a.x, b.x), fmaxf(a.y, b.y)};
}
__device__ __forceinline__ float2 pair_min(float2 a, float2 b) {
  return {fminf(a.x, b.x), fminf(a.y, b.y)};
}
template <typename Pair> __device__ __forceinline__ Pair pair_add(Pair a, Pair b) {
  return __hadd2(a, b);
}
template <typename Pair> __device__ __forceinline__ Pair pair_sub(Pair a, Pair b) {
  return __hsub2(a, b);
}
template <typename Pair> __device__ __forceinline__ Pair pair_mul(Pair a, Pair b) {
  return __hmul2(a, b);
}
template <typename Pair> __device__ __forceinline__ Pair pair_div(Pair a, Pair b) {
  return __h2div(a, b);
}
template <typename Pair> __device__ __forceinline__ Pair pair_max(Pair a, Pair b) {
  return __hmax2(a, b);
}
template <typename Pair> __device__ __forceinline__ Pair pair_min(Pair a, Pair b) {
  return __hmin2(a, b);
}

/// x * sigmoid(z): silu is z = x; the tanh form of gelu is this with z = 2 sqrt(2/pi)(x + ...),
/// since 0.5 (1 + tanh(u)) = sigmoid(2u).
__device__ __forceinline__ float times_sigmoid(float x, float z) {
  return __fdividef(x, 1.0f + __expf(-z));
}
__device__ __forceinline__ float silu(float x) { return times_sigmoid(x, x); }
__device__ __forceinline__ float gelu(float x) {
  constexpr float kTwoSqrtTwoOverPi = 1.5957691216057308f;
  return times_sigmoid(x, kTwoSqrtTwoOverPi * (x + 0.044715f * x * x * x));
}

template <typename To, typename T, int R, int C, typename L, typename F>
__device__ __forceinline__ Tile<To, R, C, L> map_pairs(const Tile<T, R, C, L> &t, F f) {
  Tile<To, R, C, L> out;
#pragma unroll
  for (int p = 0; p < L::kPairs; ++p)
    out.pairs[p] = f(t.pairs[p]);
  return out;
}

template <typename T, int R, int C, typename L, typename F>
__device__ __forceinline__ Tile<T, R, C, L> zip_pairs(const Tile<T, R, C, L> &a,
                                                      const Tile<T, R, C, L> &b, F f) {
  Tile<T, R, C, L> out;
#pragma unroll
  for (int p = 0; p < L::kPairs; ++p)
    out.pairs[p] = f(a.pairs[p], b.pairs[p]);
  return out;
}

/// `f` applied to every element in f32.
template <typename T, int R, int C, typename L, typename F>
__device__ __forceinline__ Tile<T, R, C, L> map_in_f32(const Tile<T, R, C, L> &t, F f) {
  return map_pairs<T>(t, [&](typename Tile<T, R, C, L>::Pair p) {
    const float2 x = to_float2(p);
    return from_float2<T>({f(x.x), f(x.y)});
  });
}

// ---- Between registers and shared memory -------------------------------------------------

template <typename T, int R, int C>
__device__ __forceinline__ void fragments_to_smem(const Tile<T, R, C> &t, unsigned char *smem) {
  using Layout = TileLayout<R, C>;
#pragma unroll
  for (int p = 0; p < Layout::kPairs; ++p)
    *reinterpret_cast<typename Tile<T, R, C>::Pair *>(
        smem + TileSmem<T, R, C>::element(Layout::row(p), Layout::col(p))) = t.pairs[p];
}

template <typename T, int R, int C>
__device__ __forceinline__ Tile<T, R, C> fragments_from_smem(const unsigned char *smem) {
  using Layout = TileLayout<R, C>;
  Tile<T, R, C> t;
#pragma unroll
  for (int p = 0; p < Layout::kPairs; ++p)
    t.pairs[p] = *reinterpret_cast<const typename Tile<T, R, C>::Pair *>(
        smem + TileSmem<T, R, C>::element(Layout::row(p), Layout::col(p)));
  return t;
}

// ---- Between global memory and shared memory or registers, in 16-byte chunks ---------------

/// Whether rows starting at `p`, `ld` elements apart, can be accessed in 16-byte vectors.
template <typename T> __device__ __forceinline__ bool vector_aligned(const T *p, long long ld) {
  return reinterpret_cast<unsigned long long>(p) % 16 == 0 && ld % Vector<T>::kSize == 0;
}

/// Elements of chunk column `chunk` that lie inside `cols` columns: 0 to the chunk's size.
template <typename T> __device__ __forceinline__ int valid_in_column(int chunk, int cols) {
  constexpr int kSize = Vector<T>::kSize;
  return min(max(cols - chunk * kSize, 0), kSize);
}

/// Elements of chunk `chunk` of row `row` that lie inside `rows` x `cols`.
template <typename T>
__device__ __forceinline__ int valid_in_chunk(int row, int chunk, int rows, int cols) {
  return row < rows ? valid_in_column<T>(chunk, cols) : 0;
}

/// The first `valid` elements at `from`, zeros after: one 16-byte load when the chunk is whole
/// and `aligned`, element by element otherwise.
template <typename T>
__device__ __forceinline__ Vector<T> load_chunk(const T *from, int valid, bool aligned) {
  if (aligned && valid == Vector<T>::kSize)
    return *reinterpret_cast<const Vector<T> *>(from);
  Vector<T> v = {};
#pragma unroll
  for (int i = 0; i < Vector<T>::kSize; ++i)
    if (i < valid)
      v.elements[i] = from[i];
  return v;
}

/// Writes the first `valid` elements of `v` to `to`, as load_chunk reads.
template <typename T>
__device__ __forceinline__ void store_chunk(T *to, const Vector<T> &v, int valid, bool aligned) {
  if (aligned && valid == Vector<T>::kSize) {
    ptx::st_global_16(to, v.elements);
    return;
  }
#pragma unroll
  for (int i = 0; i < Vector<T>::kSize; ++i)
    if (i < valid)
      to[i] = v.elements[i];
}

/// Calls f(row, chunk) for this thread's share of the kChunks chunks of a tile whose rows have
/// kRowChunks chunks; consecutive threads take consecutive chunks. A rolled loop, for stores and
/// the unaligned fallback, which need no loads in flight and should not cost registers.
template <int kChunks, int kRowChunks, typename F>
__device__ __forceinline__ void for_each_chunk(F f) {
#pragma unroll 1
  for (int index = team_thread(); index < kChunks; index += MK_TEAM_THREADS)
    f(index / kRowChunks, index % kRowChunks);
}

/// Plans this thread's part of copying the kRows x kCols tile at `src` (and, after advancing
/// `src`, of the tiles beyond it), of which `rows` x `cols` is valid. `src` and `ld` must be
/// vector_aligned.
template <typename T, int kRows, int kCols>
__device__ __forceinline__ TileCopy<T, kRows, kCols> plan_tile_copy(const T *src, long long ld,
                                                                    int rows, int cols) {
  using Copy = TileCopy<T, kRows, kCols>;
  Copy copy;
  copy.row0 = team_thread() / Copy::Smem::kRowChunks;
  copy.chunk = team_thread() % Copy::Smem::kRowChunks;
  copy.src = src + copy.row0 * ld + copy.chunk * Vector<T>::kSize;
  copy.row_step = Copy::kRowStep * ld;
  copy.rows_left = rows - copy.row0;
  copy.chunk_bytes = valid_in_column<T>(copy.chunk, cols) * int(sizeof(T));
  return copy;
}

/// Starts this thread's cp.async copies of the planned tile into the TileSmem at `smem`.
/// Completes with ptx::cp_async_commit and ptx::cp_async_wait.
template <typename T, int kRows, int kCols>
__device__ __forceinline__ void start_tile_copy(const TileCopy<T, kRows, kCols> &copy,
                                                mk_u32 smem) {
  using Copy = TileCopy<T, kRows, kCols>;
#pragma unroll
  for (int i = 0; i < Copy::kCount; ++i)
    // A zero-byte copy reads nothing: rows past the edge are not dereferenced.
    ptx::cp_async_16(smem + Copy::Smem::chunk(copy.row0 + i * Copy::kRowStep, copy.chunk),
                     copy.src + i * copy.row_step,
                     i * Copy::kRowStep < copy.rows_left ? copy.chunk_bytes : 0);
}

} // namespace detail

template <typename T, int R, int C> __host__ __device__ constexpr int tile_io_smem_bytes() {
  return detail::TileSmem<T, R, C>::kBytes;
}

template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> splat(T value) {
  Tile<T, R, C, L> t;
  const typename Tile<T, R, C, L>::Pair pair = {value, value};
#pragma unroll
  for (int p = 0; p < L::kPairs; ++p)
    t.pairs[p] = pair;
  return t;
}

template <typename To, typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<To, R, C, L> convert(const Tile<T, R, C, L> &t) {
  return detail::map_pairs<To>(t, [](typename Tile<T, R, C, L>::Pair p) {
    return detail::from_float2<To>(detail::to_float2(p));
  });
}

#define MK_DEVICE_DEFINE_BINARY(name, pair_op)                                                     \
  template <typename T, int R, int C, typename L>                                                  \
  __device__ __forceinline__ Tile<T, R, C, L> name(const Tile<T, R, C, L> &a,                      \
                                                   const Tile<T, R, C, L> &b) {                    \
    return detail::zip_pairs(a, b,                                                                 \
                             [](typename Tile<T, R, C, L>::Pair x,                                 \
                                typename Tile<T, R, C, L>::Pair y) { return pair_op(x, y); });     \
  }
MK_DEVICE_DEFINE_BINARY(add, detail::pair_add)
MK_DEVICE_DEFINE_BINARY(sub, detail::pair_sub)
MK_DEVICE_DEFINE_BINARY(mul, detail::pair_mul)
MK_DEVICE_DEFINE_BINARY(div, detail::pair_div)
MK_DEVICE_DEFINE_BINARY(maximum, detail::pair_max)
MK_DEVICE_DEFINE_BINARY(minimum, detail::pair_min)
#undef MK_DEVICE_DEFINE_BINARY

#define MK_DEVICE_DEFINE_UNARY(name, expression)                                                   \
  template <typename T, int R, int C, typename L>                                                  \
  __device__ __forceinline__ Tile<T, R, C, L> name(const Tile<T, R, C, L> &x) {                    \
    return detail::map_in_f32(x, [](float v) { return expression; });                              \
  }
MK_DEVICE_DEFINE_UNARY(exp, expf(v))
MK_DEVICE_DEFINE_UNARY(log, logf(v))
MK_DEVICE_DEFINE_UNARY(sqrt, sqrtf(v))
MK_DEVICE_DEFINE_UNARY(rsqrt, rsqrtf(v))
MK_DEVICE_DEFINE_UNARY(reciprocal, 1.0f / v)
MK_DEVICE_DEFINE_UNARY(tanh, tanhf(v))
MK_DEVICE_DEFINE_UNARY(sigmoid, 1.0f / (1.0f + expf(-v)))
MK_DEVICE_DEFINE_UNARY(neg, -v)
MK_DEVICE_DEFINE_UNARY(abs, fabsf(v))
#undef MK_DEVICE_DEFINE_UNARY

template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> relu(const Tile<T, R, C, L> &x) {
  return maximum(x, splat<T, R, C, L>(T(0.0f)));
}

template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> gelu(const Tile<T, R, C, L> &x) {
  return detail::map_in_f32(x, [](float v) { return detail::gelu(v); });
}

template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> silu(const Tile<T, R, C, L> &x) {
  return detail::map_in_f32(x, [](float v) { return detail::silu(v); });
}

template <typename T, int R, int C, typename L>
__device__ __forceinline__ Tile<T, R, C, L> swiglu(const Tile<T, R, C, L> &gate,
                                                   const Tile<T, R, C, L> &up) {
  return detail::zip_pairs(
      gate, up, [](typename Tile<T, R, C, L>::Pair g, typename Tile<T, R, C, L>::Pair u) {
        const float2 gf = detail::to_float2(g), uf = detail::to_float2(u);
        return detail::from_float2<T>({detail::silu(gf.x) * uf.x, detail::silu(gf.y) * uf.y});
      });
}

template <typename T, int R, int C>
__device__ __forceinline__ Tile<T, R, C> load_tile(const T *src, long long ld, int rows, int cols,
                                                   void *smem) {
  using Smem = detail::TileSmem<T, R, C>;
  unsigned char *staging = static_cast<unsigned char *>(smem);
  if (detail::vector_aligned(src, ld)) {
    detail::start_tile_copy(detail::plan_tile_copy<T, R, C>(src, ld, rows, cols),
                            ptx::smem_address(staging));
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
  } else {
    detail::for_each_chunk<Smem::kChunks, Smem::kRowChunks>([&](int row, int chunk) {
      *reinterpret_cast<detail::Vector<T> *>(staging + Smem::chunk(row, chunk)) =
          detail::load_chunk(src + row * ld + chunk * detail::Vector<T>::kSize,
                             detail::valid_in_chunk<T>(row, chunk, rows, cols), false);
    });
  }
  team_sync();
  const Tile<T, R, C> t = detail::fragments_from_smem<T, R, C>(staging);
  team_sync();
  return t;
}

template <typename T, int R, int C>
__device__ __forceinline__ void store_tile(const Tile<T, R, C> &t, T *dst, long long ld, int rows,
                                           int cols, void *smem) {
  using Smem = detail::TileSmem<T, R, C>;
  unsigned char *staging = static_cast<unsigned char *>(smem);
  detail::fragments_to_smem(t, staging);
  team_sync();
  const auto store = [&](bool aligned) {
    detail::for_each_chunk<Smem::kChunks, Smem::kRowChunks>([&](int row, int chunk) {
      const int valid = detail::valid_in_chunk<T>(row, chunk, rows, cols);
      if (valid > 0) {
        const detail::Vector<T> v =
            *reinterpret_cast<const detail::Vector<T> *>(staging + Smem::chunk(row, chunk));
        detail::store_chunk(dst + row * ld + chunk * detail::Vector<T>::kSize, v, valid, aligned);
      }
    });
  };
  // One loop for each case: one loop testing `aligned` per chunk held a few more registers
  // across it, which ring attention's consumers did not have.
  if (detail::vector_aligned(dst, ld))
    store(true);
  else
    store(false);
  team_sync();
}

namespace detail {

template <Reduce kOp> __device__ __forceinline__ float combine(float a, float b) {
  if constexpr (kOp == Reduce::sum)
    return a + b;
  else if constexpr (kOp == Reduce::max)
    return fmaxf(a, b);
  else
    return fminf(a, b);
}

} // namespace detail

namespace detail {

/// Calls f(i, row, col, valid, sum) for chunk i (0 .. kThreadChunks) of this thread's chunks of
/// the kOp-combination of `slots` R x C tiles of T at `src`, `slot_stride` apart: (row, col) its
/// first element, `valid` its elements inside `rows` x `cols`, `sum` its values in f32.
/// kPassChunks chunks per thread per pass: enough loads in flight to cover memory latency, few
/// enough registers to accumulate them.
template <Reduce kOp, typename T, int R, int C, int kPassChunks, typename F>
__device__ __forceinline__ void combine_chunks(const T *src, long long slot_stride, int slots,
                                               long long ld, int rows, int cols, F f) {
  using Source = TileSmem<T, R, C>; // only for its chunking of the source rows
  using Vector = detail::Vector<T>;
  constexpr int kThreadChunks = Source::kChunks / MK_TEAM_THREADS;
  static_assert(kThreadChunks % kPassChunks == 0 || kPassChunks % kThreadChunks == 0,
                "whole passes");
  constexpr int kBatch = min_of(kPassChunks, kThreadChunks);
  const bool aligned = vector_aligned(src, ld) && slot_stride % Vector::kSize == 0;

#pragma unroll
  for (int pass = 0; pass < kThreadChunks / kBatch; ++pass) {
    int row[kBatch], col[kBatch], valid[kBatch];
    float sum[kBatch][Vector::kSize];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int index = team_thread() + (pass * kBatch + i) * MK_TEAM_THREADS;
      row[i] = index / Source::kRowChunks;
      col[i] = index % Source::kRowChunks * Vector::kSize;
      valid[i] = valid_in_chunk<T>(row[i], col[i] / Vector::kSize, rows, cols);
    }
    // Two slots' loads in flight at once.
#pragma unroll 2
    for (int slot = 0; slot < slots; ++slot) {
      Vector v[kBatch];
#pragma unroll
      for (int i = 0; i < kBatch; ++i)
        v[i] = load_chunk(src + slot * slot_stride + row[i] * ld + col[i], valid[i], aligned);
#pragma unroll
      for (int i = 0; i < kBatch; ++i)
#pragma unroll
        for (int e = 0; e < Vector::kSize; ++e) {
          const float x = float(v[i].elements[e]);
          sum[i][e] = slot == 0 ? x : combine<kOp>(sum[i][e], x);
        }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i)
      f(pass * kBatch + i, row[i], col[i], valid[i], sum[i]);
  }
}

} // namespace detail

template <Reduce kOp, typename T, int R, int C>
__device__ __forceinline__ Tile<float, R, C> accumulate_tiles(const T *src, long long slot_stride,
                                                              int slots, long long ld, int rows,
                                                              int cols, void *smem) {
  using Staging = detail::TileSmem<float, R, C>;
  unsigned char *staging = static_cast<unsigned char *>(smem);
  detail::combine_chunks<kOp, T, R, C, 8>(
      src, slot_stride, slots, ld, rows, cols,
      [&](int, int row, int col, int, const float(&sum)[detail::Vector<T>::kSize]) {
#pragma unroll
        for (int e = 0; e < detail::Vector<T>::kSize; e += 4)
          *reinterpret_cast<float4 *>(staging + Staging::element(row, col + e)) =
              make_float4(sum[e], sum[e + 1], sum[e + 2], sum[e + 3]);
      });
  team_sync();
  const Tile<float, R, C> t = detail::fragments_from_smem<float, R, C>(staging);
  team_sync();
  return t;
}

template <Reduce kOp, typename Out, typename T, int R, int C>
__device__ __forceinline__ ChunkTile<Out, R, C>
accumulate_chunks(const T *src, long long slot_stride, int slots, long long ld, int rows,
                  int cols) {
  static_assert(sizeof(T) == sizeof(Out), "chunks of the same elements in and out");
  using Vector = detail::Vector<Out>;
  ChunkTile<Out, R, C> t;
  // Half the passes' chunks: the tile's own chunks stay in registers throughout.
  detail::combine_chunks<kOp, T, R, C, 4>(
      src, slot_stride, slots, ld, rows, cols,
      [&](int i, int, int, int, const float(&sum)[Vector::kSize]) {
#pragma unroll
        for (int e = 0; e < Vector::kSize; e += 2)
          reinterpret_cast<typename detail::PairOf<Out>::type *>(t.chunks[i].elements)[e / 2] =
              detail::from_float2<Out>(make_float2(sum[e], sum[e + 1]));
      });
  return t;
}

template <typename T, int R, int C>
__device__ __forceinline__ void store_chunks(const ChunkTile<T, R, C> &t, T *dst, long long ld,
                                             int rows, int cols) {
  using Tile = ChunkTile<T, R, C>;
  const bool aligned = detail::vector_aligned(dst, ld);
#pragma unroll
  for (int i = 0; i < Tile::kThreadChunks; ++i) {
    const int row = Tile::row(i), col = Tile::col(i);
    const int valid = detail::valid_in_chunk<T>(row, col / detail::Vector<T>::kSize, rows, cols);
    if (valid > 0)
      detail::store_chunk(dst + row * ld + col, t.chunks[i], valid, aligned);
  }
}

} // namespace mk

#endif // MK_DEVICE_IMPL_TILE_FUNCS_CUH
