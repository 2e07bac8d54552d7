//===- mk/device/attention.cuh - one online-softmax attention step on register tiles -===//
//
// mk.attention_block on the tile library: both products on the tensor cores (mma.sync) from
// shared memory, softmax in f32 registers. Collective over the team, `smem` free on return.
//
//===------------------------------------------------------------------------------------===//

#ifndef MK_DEVICE_ATTENTION_CUH
#define MK_DEVICE_ATTENTION_CUH

#include "mk/device/gemm.cuh"
#include "mk/device/vector.cuh"

namespace mk {

/// The running state of online softmax for RQ query rows of a DV-wide output.
template <int RQ, int DV> struct AttentionState {
  Tile<float, RQ, DV> acc;
  Tile<float, RQ, 1> row_max, row_sum;
};

/// Shared memory attention_block needs.
template <typename T, int RQ, int RK, int D, int DV>
__host__ __device__ constexpr int attention_block_smem_bytes();

/// With S = scale * q k^T (keys c >= `keys` masked out, a partial tile's, and keys after their
/// query when `causal`, query row r being global row q_first + r and key c global key
/// k_first + c), m' = max(m, rowmax(S)),
/// l' = l e^(m - m') + rowsum(e^(S - m')), acc' = acc e^(m - m') + e^(S - m') v, the products in
/// T with f32 accumulation. A row whose keys are all masked so far keeps m = -inf and adds nothing.
template <typename T, int RQ, int RK, int D, int DV>
__device__ __forceinline__ AttentionState<RQ, DV>
attention_block(const Tile<T, RQ, D> &q, const Tile<T, RK, D> &k, const Tile<T, RK, DV> &v,
                const Tile<float, RQ, DV> &acc, const Tile<float, RQ, 1> &row_max,
                const Tile<float, RQ, 1> &row_sum, long long q_first, long long k_first, int keys,
                bool causal, float scale, void *smem);

// The parts of a state, for code that holds one value per name.
template <int RQ, int DV>
__device__ __forceinline__ Tile<float, RQ, DV> attention_acc(const AttentionState<RQ, DV> &s) {
  return s.acc;
}
template <int RQ, int DV>
__device__ __forceinline__ Tile<float, RQ, 1> attention_row_max(const AttentionState<RQ, DV> &s) {
  return s.row_max;
}
template <int RQ, int DV>
__device__ __forceinline__ Tile<float, RQ, 1> attention_row_sum(const AttentionState<RQ, DV> &s) {
  return s.row_sum;
}

} // namespace mk

#include "mk/device/impl/attention__funcs.cuh"

#endif // MK_DEVICE_ATTENTION_CUH
