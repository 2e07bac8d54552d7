//===- mk/device/impl/vector__funcs.cuh - definitions for mk/device/vector.cuh -------===//

#ifndef MK_DEVICE_IMPL_VECTOR_FUNCS_CUH
#define MK_DEVICE_IMPL_VECTOR_FUNCS_CUH

#include "mk/device/impl/tile__funcs.cuh"

namespace mk {
namespace detail {

/// What kOp starts from: combining it with x gives x.
template <Reduce kOp> __device__ __forceinline__ float identity() {
  constexpr unsigned kInfinity = 0x7f800000u;
  if constexpr (kOp == Reduce::sum)
    return 0.0f;
  else if constexpr (kOp == Reduce::max)
    return -__uint_as_float(kInfinity);
  else
    return __uint_as_float(kInfinity);
}

} // namespace detail

template <typename T, int N>
__device__ __forceinline__ Tile<T, N, 1> load_vector(const T *src, int count) {
  using Layout = TileLayout<N, 1>;
  Tile<T, N, 1> v;
#pragma unroll
  for (int p = 0; p < Layout::kPairs; ++p) {
    const int e = Layout::element(p);
    v.pairs[p] = {e < count ? src[e] : T(0.0f), e + 1 < count ? src[e + 1] : T(0.0f)};
  }
  return v;
}

template <typename T, int N>
__device__ __forceinline__ void store_vector(const Tile<T, N, 1> &v, T *dst, int count) {
  using Layout = TileLayout<N, 1>;
#pragma unroll
  for (int p = 0; p < Layout::kPairs; ++p) {
    const int e = Layout::element(p);
    if (e < count)
      dst[e] = v.pairs[p].x;
    if (e + 1 < count)
      dst[e + 1] = v.pairs[p].y;
  }
}

template <int kDim, int R, int C> __host__ __device__ constexpr int reduce_smem_bytes() {
  using Layout = TileLayout<R, C>;
  return kDim == 1 ? Layout::kWarpsN * R * 4 : Layout::kWarpsM * C * 4;
}

template <Reduce kOp, int kDim, typename T, int R, int C>
__device__ __forceinline__ Tile<T, kDim == 1 ? R : C, 1> reduce(const Tile<T, R, C> &t,
                                                                void *smem) {
  static_assert(kDim == 0 || kDim == 1, "a rank-2 tile reduces along dim 0 or 1");
  using Layout = TileLayout<R, C>;
  constexpr int kOut = kDim == 1 ? R : C;
  constexpr int kFragmentCols = Layout::kFragmentCols;
  // This thread's partial results: one per row it holds (two per fragment row, its upper and
  // lower halves) or one per column (two per fragment column, a pair's two elements).
  constexpr int kParts = kDim == 1 ? 2 * Layout::kFragmentRows : 2 * kFragmentCols;
  float part[kParts];
#pragma unroll
  for (int i = 0; i < kParts; ++i)
    part[i] = detail::identity<kOp>();
#pragma unroll
  for (int p = 0; p < Layout::kPairs; ++p) {
    const float2 x = detail::to_float2(t.pairs[p]);
    if constexpr (kDim == 1) {
      float &row = part[p / (2 * kFragmentCols) * 2 + p % 2];
      row = detail::combine<kOp>(row, detail::combine<kOp>(x.x, x.y));
    } else {
      const int j = p / 2 % kFragmentCols;
      part[2 * j] = detail::combine<kOp>(part[2 * j], x.x);
      part[2 * j + 1] = detail::combine<kOp>(part[2 * j + 1], x.y);
    }
  }
  // Within the warp: a row's columns are on the 4 lanes of a quad, a column's rows on the 8 lanes
  // of one lane % 4.
#pragma unroll
  for (int i = 0; i < kParts; ++i)
#pragma unroll
    for (int mask = kDim == 1 ? 1 : 4; mask < (kDim == 1 ? 4 : 32); mask *= 2)
      part[i] = detail::combine<kOp>(part[i], __shfl_xor_sync(0xffffffffu, part[i], mask));
  // Across the warps that share the rows (or columns): each writes its results, then every
  // thread combines those of its own elements.
  float *partials = static_cast<float *>(smem);
  const int warp = Layout::warp(), lane = Layout::lane();
  if (kDim == 1 ? lane % 4 == 0 : lane < 4) {
#pragma unroll
    for (int i = 0; i < kParts; ++i) {
      if constexpr (kDim == 1)
        partials[warp % Layout::kWarpsN * R + Layout::row(i / 2 * 2 * kFragmentCols + i % 2)] =
            part[i];
      else
        partials[warp / Layout::kWarpsN * C + Layout::col(i / 2 * 2) + i % 2] = part[i];
    }
  }
  team_sync();
  constexpr int kWarps = kDim == 1 ? Layout::kWarpsN : Layout::kWarpsM;
  using Out = TileLayout<kOut, 1>;
  Tile<T, kOut, 1> out;
#pragma unroll
  for (int p = 0; p < Out::kPairs; ++p) {
    float v[2] = {detail::identity<kOp>(), detail::identity<kOp>()};
#pragma unroll
    for (int k = 0; k < 2; ++k)
      if (Out::element(p) + k < kOut)
#pragma unroll
        for (int w = 0; w < kWarps; ++w)
          v[k] = detail::combine<kOp>(v[k], partials[w * kOut + Out::element(p) + k]);
    out.pairs[p] = detail::from_float2<T>({v[0], v[1]});
  }
  team_sync();
  return out;
}

template <int N> __host__ __device__ constexpr int broadcast_smem_bytes() { return N * 4; }

template <int kDim, int R, int C, typename T, int N>
__device__ __forceinline__ Tile<T, R, C> broadcast(const Tile<T, N, 1> &v, void *smem) {
  static_assert(kDim == 0 || kDim == 1, "a new dim 0 or 1 of a rank-2 tile");
  static_assert(N == (kDim == 1 ? R : C), "the vector is as long as the kept dim");
  using In = TileLayout<N, 1>;
  using Layout = TileLayout<R, C>;
  float *values = static_cast<float *>(smem);
#pragma unroll
  for (int p = 0; p < In::kPairs; ++p) {
    const float2 x = detail::to_float2(v.pairs[p]);
    const int e = In::element(p);
    if (e < N)
      values[e] = x.x;
    if (e + 1 < N)
      values[e + 1] = x.y;
  }
  team_sync();
  Tile<T, R, C> out;
#pragma unroll
  for (int p = 0; p < Layout::kPairs; ++p) {
    if constexpr (kDim == 1) {
      const float x = values[Layout::row(p)];
      out.pairs[p] = detail::from_float2<T>({x, x});
    } else {
      const int c = Layout::col(p);
      out.pairs[p] = detail::from_float2<T>({values[c], values[c + 1]});
    }
  }
  team_sync();
  return out;
}

} // namespace mk

#endif // MK_DEVICE_IMPL_VECTOR_FUNCS_CUH
