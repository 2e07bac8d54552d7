//===- mk/device/impl/gemm__types.cuh - the shape of one tile matmul ------------------===//

#ifndef MK_DEVICE_IMPL_GEMM_TYPES_CUH
#define MK_DEVICE_IMPL_GEMM_TYPES_CUH

#include "mk/device/impl/tile__types.cuh"

namespace mk {
namespace detail {

/// One operand of the product as the tensor cores see it: kMN (M for A, N for B) x kK, stored in
/// global and shared memory either K-contiguous (A as [M x K], B as [N x K]) or MN-contiguous
/// (A as [K x M], B as [K x N]); shared memory keeps global memory's orientation, and ldmatrix
/// transposes MN-contiguous operands on the way to registers.
template <typename T, int kMN_, int kK_, bool kKContiguous_> struct Operand {
  using Element = T;
  static constexpr int kMN = kMN_, kK = kK_;
  static constexpr bool kKContiguous = kKContiguous_;
  static constexpr int kRows = kKContiguous ? kMN : kK;
  static constexpr int kCols = kKContiguous ? kK : kMN;
  using Smem = TileSmem<T, kRows, kCols>;
};

/// This thread's part of loading an operand's k slices, and the elements from one to the next.
template <typename Op> struct OperandSlices {
  TileCopy<typename Op::Element, Op::kRows, Op::kCols> copy;
  long long step;
};

/// A BM x BN x BK tile matmul: its pipeline depth and shared memory. Each stage holds one BK slice
/// of A and of B; as many stages as fit in shared memory, between 2 and 4.
template <typename T, int BM, int BN, int BK> struct MatmulShape {
  static_assert(BK % 16 == 0, "BK: whole k16 mma steps");
  static constexpr int kStageBytes = (BM + BN) * BK * int(sizeof(T));
  static constexpr int kStages = max_of(2, min_of(4, kMaxSmemBytes / kStageBytes));
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static_assert(kSmemBytes <= kMaxSmemBytes, "two stages of BM x BK and BK x BN must fit");
};

} // namespace detail
} // namespace mk

#endif // MK_DEVICE_IMPL_GEMM_TYPES_CUH
