// Kernels that instantiate mk/device/vector.cuh, attention.cuh and routing.cuh: reductions of the
// rows and columns of 64 x 128 and 128 x 256 tiles, broadcasts back, the elementary functions on
// rank-1 tiles, one attention step on 128 x 128 tiles, expert routing.
#include "mk/device.cuh"

extern __shared__ __align__(128) unsigned char mk_smem[];

#define MK_KERNEL extern "C" __global__ void __launch_bounds__(MK_TEAM_THREADS, 1)
#define MK_SMEM(name, ...) extern "C" __constant__ int name##_smem = __VA_ARGS__;

template <int R, int C> __host__ __device__ constexpr int vector_smem_bytes() {
  return mk::detail::max_of(
      mk::detail::max_of(mk::tile_io_smem_bytes<float, R, C>(), mk::reduce_smem_bytes<1, R, C>()),
      mk::detail::max_of(mk::reduce_smem_bytes<0, R, C>(), mk::broadcast_smem_bytes<C>()));
}

// The tile of x at CTA (x, y)'s tile: its row sums, maxima and column minima (to rows and cols),
// and x - rowmax + colmin, e^x of the row sums and the other elementary functions of them
// (functions), stored whole.
template <typename T, int R, int C>
__device__ __forceinline__ void vector_ops(const T *x, long long ld, int M, int N, T *rows, T *cols,
                                           T *out, T *functions) {
  const int m0 = blockIdx.y * R, n0 = blockIdx.x * C;
  const auto t =
      mk::load_tile<T, R, C>(x + m0 * ld + n0, ld, min(R, M - m0), min(C, N - n0), mk_smem);
  const auto sum = mk::reduce<mk::Reduce::sum, 1>(t, mk_smem);
  const auto max = mk::reduce<mk::Reduce::max, 1>(t, mk_smem);
  const auto min_cols = mk::reduce<mk::Reduce::min, 0>(t, mk_smem);
  const int tile = blockIdx.y * gridDim.x + blockIdx.x;
  mk::store_vector(sum, rows + (3 * tile) * R, R);
  mk::store_vector(max, rows + (3 * tile + 1) * R, R);
  mk::store_vector(mk::load_vector<T, R>(rows + (3 * tile) * R, R), rows + (3 * tile + 2) * R, R);
  mk::store_vector(min_cols, cols + tile * C, C);
  const auto y = mk::add(mk::sub(t, mk::broadcast<1, R, C>(max, mk_smem)),
                         mk::broadcast<0, R, C>(min_cols, mk_smem));
  mk::store_tile(y, out + m0 * ld + n0, ld, R, C, mk_smem);
  T *f = functions + tile * 10 * R;
  mk::store_vector(mk::exp(sum), f, R);
  mk::store_vector(mk::log(mk::abs(sum)), f + R, R);
  mk::store_vector(mk::sqrt(mk::abs(sum)), f + 2 * R, R);
  mk::store_vector(mk::rsqrt(mk::abs(sum)), f + 3 * R, R);
  mk::store_vector(mk::reciprocal(sum), f + 4 * R, R);
  mk::store_vector(mk::tanh(sum), f + 5 * R, R);
  mk::store_vector(mk::sigmoid(sum), f + 6 * R, R);
  mk::store_vector(mk::neg(sum), f + 7 * R, R);
  mk::store_vector(mk::minimum(sum, max), f + 8 * R, R);
  mk::store_vector(mk::maximum(sum, max), f + 9 * R, R);
}

#define VECTOR_OPS_KERNEL(name, T, R, C)                                                           \
  MK_SMEM(name, vector_smem_bytes<R, C>())                                                         \
  MK_KERNEL name(const T *x, long long ld, int M, int N, T *rows, T *cols, T *out, T *functions) { \
    vector_ops<T, R, C>(x, ld, M, N, rows, cols, out, functions);                                  \
  }
VECTOR_OPS_KERNEL(vector_ops_f32, float, 64, 128)
VECTOR_OPS_KERNEL(vector_ops_bf16, mk::bf16, 64, 128)
VECTOR_OPS_KERNEL(vector_ops_f32_128x256, float, 128, 256)

// One attention step of a 128-row query block against a 128-key block, from a running state
// (acc, m, l) given in f32, written back in place; `keys` of k's rows keys, causal for keys
// k_first.. against q_first...
MK_SMEM(attention_block_bf16, (mk::attention_block_smem_bytes<mk::bf16, 128, 128, 128, 128>()))
MK_KERNEL attention_block_bf16(const mk::bf16 *q, const mk::bf16 *k, const mk::bf16 *v, float *acc,
                               float *m, float *l, long long q_first, long long k_first, int keys,
                               int causal, float scale) {
  const auto qt = mk::load_tile<mk::bf16, 128, 128>(q, 128, 128, 128, mk_smem);
  const auto kt = mk::load_tile<mk::bf16, 128, 128>(k, 128, 128, 128, mk_smem);
  const auto vt = mk::load_tile<mk::bf16, 128, 128>(v, 128, 128, 128, mk_smem);
  const mk::AttentionState<128, 128> s =
      mk::attention_block(qt, kt, vt, mk::load_tile<float, 128, 128>(acc, 128, 128, 128, mk_smem),
                          mk::load_vector<float, 128>(m, 128), mk::load_vector<float, 128>(l, 128),
                          q_first, k_first, keys, causal != 0, scale, mk_smem);
  mk::store_tile(mk::attention_acc(s), acc, 128, 128, 128, mk_smem);
  mk::store_vector(mk::attention_row_max(s), m, 128);
  mk::store_vector(mk::attention_row_sum(s), l, 128);
}

MK_SMEM(route_census_64, mk::route_smem_bytes<64>())
MK_KERNEL route_census_64(const int *experts, int tokens, int top_k, const mk_tensor_ref *census,
                          int me, int gpus, mk_routing_report *report) {
  mk::route_census<64>(experts, tokens, top_k, census, me, gpus, report, mk_smem);
}

MK_SMEM(route_counts_64, mk::route_smem_bytes<64>())
MK_KERNEL route_counts_64(const int *census, int ranks, int me, int expert_first, int local_experts,
                          int capacity, int *counts, mk_routing_report *report, mk_u32 epoch) {
  mk::route_counts<64>(census, ranks, me, expert_first, local_experts, capacity, counts, report,
                       epoch, mk_smem);
}

MK_SMEM(route_rows_bf16, mk::route_smem_bytes<64>())
MK_KERNEL route_rows_bf16(const mk::bf16 *rows, const int *experts, int tokens, int top_k,
                          long long hidden, const int *census, int me, int gpus, int expert_first,
                          long long origin_first, int local_experts, int capacity,
                          const mk_tensor_ref *routed, const mk_tensor_ref *origins, int *placement,
                          int *returns, mk_u32 *const *flags, long long arrivals,
                          mk_u64 *nvlink_bytes) {
  mk::route_rows<64>(rows, experts, tokens, top_k, hidden, census, me, gpus, expert_first,
                     origin_first, local_experts, capacity, routed, origins, placement, returns,
                     flags, arrivals, nvlink_bytes, blockIdx.x, gridDim.x, mk_smem);
}

MK_SMEM(route_pack_bf16, mk::route_smem_bytes<64>())
MK_KERNEL route_pack_bf16(const mk::bf16 *rows, const int *experts, int tokens, int top_k,
                          long long hidden, int node, int nodes, int node_experts, mk::bf16 *pack,
                          int *pack_experts, int *packed, int *return_at) {
  mk::route_pack<64>(rows, experts, tokens, top_k, hidden, node, nodes, node_experts, pack,
                     pack_experts, packed, return_at, blockIdx.x, gridDim.x, mk_smem);
}

MK_SMEM(return_rows_bf16, (mk::tile_io_smem_bytes<mk::bf16, 128, 256>()))
MK_KERNEL return_rows_bf16(const mk::bf16 *tile, const int *origins, int rows, int cols,
                           const mk_tensor_ref *returned, long long slots, long long ld,
                           long long column, mk_u64 *nvlink_bytes) {
  const auto t = mk::load_tile<mk::bf16, 128, 256>(tile, 256, 128, 256, mk_smem);
  mk::return_rows(t, origins, rows, cols, returned, slots, ld, column, nvlink_bytes, mk_smem);
}

MK_SMEM(combine_returned_bf16, 0)
MK_KERNEL combine_returned_bf16(const mk::bf16 *returned, long long hidden, const int *placement,
                                const int *return_at, const float *weights, int top_k,
                                mk::bf16 *dest, long long ld, int rows, int cols) {
  mk::combine_returned(returned, hidden, placement, return_at, weights, top_k, dest, ld, rows,
                       cols);
}
