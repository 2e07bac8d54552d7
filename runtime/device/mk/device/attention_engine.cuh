//===- mk/device/attention_engine.cuh - warp-specialized flash attention on TMA and wgmma -===//
//
// The attention engine of generated kernels on sm_90a, after FlashAttention-3. A CTA of
// MK_CTA_THREADS threads splits as the GEMM engine's does: a producer warpgroup (threads 0-127),
// whose first thread loads a 128-row block of queries and then streams the blocks of keys and
// values into a kStages-deep ring with TMA, and two consumer warpgroups (threads 128-383), each
// of which owns 64 of the query rows. Per key block a consumer computes S = Q K^T with wgmma
// from shared memory, updates its rows' online softmax in f32 registers (a reference near the
// running maximum, moved and the output rescaled only when the maximum outgrows it by 2^8, and
// the running sum, in base 2), converts the probabilities where they are and multiplies them by V
// with wgmma reading them from registers. Two overlaps keep the tensor cores busy:
//   - inside a warpgroup, S of the next block is issued before the softmax of this one, and
//     P V of this one runs under the next softmax;
//   - between the warpgroups, named barriers let their GEMMs take turns (ping-pong), so that one
//     warpgroup's softmax runs while the other's GEMMs do.
// The ring's stages complete on mbarriers: `full` when a block's bytes have landed, `empty` once
// every consumer warp has read it; K and V have their own, since K is done a block before V.
//
//   mk::AttentionEngine<Config> engine(mk_smem);           // every thread of the CTA
//   if (mk::attention_is_producer()) {
//     mk::attention_producer_begin(engine);
//     if (threadIdx.x == 0)
//       for (tile : tiles) {
//         mk::attention_load_q(engine, &q, q0, bh);
//         for (block : the tile's key blocks) mk::attention_load_kv(engine, &k, &v, row, kv_bh);
//       }
//   } else {
//     mk::attention_consumer_begin(engine);
//     for (tile : tiles) {
//       mk::AttentionAccumulator<Config> state = mk::attention_begin(engine);
//       mk::attention_mma(engine, state, kv_blocks, window, scale_log2, /*last=*/true);
//       mk::attention_store<T>(engine, state, &o, q0, bh, lse_rows, rows);
//     }
//     mk::attention_finish(engine);
//   }
//
// Several attention_mma calls may fold the key blocks of several sources (the shards of a ring,
// each with its window) into one state, the last with `last`; between key blocks the producer
// may wait for them to arrive. attention_store normalises once at the end.
//
// Tensors: Q, K, V and O are [rows x D] slices of 3-D tensors (D, rows, heads) (innermost first;
// batch and head flattened, as [B, H, S, D] is), 16-bit, through tensor maps with 128-byte
// swizzle and boxes {64, 128} for Q, {64, BN} for K and V and {64, 64} for O. TMA reads zeros
// beyond a tensor's rows and writes nothing there, so any row count works; keys beyond the
// window's length are masked.
//
//===--------------------------------------------------------------------------------------===//

#ifndef MK_DEVICE_ATTENTION_ENGINE_CUH
#define MK_DEVICE_ATTENTION_ENGINE_CUH

#include "mk/device/impl/ptx__funcs.cuh"
#include "mk/device/impl/tile__types.cuh"

namespace mk {

/// The engine's static shape: elements of T (bf16 or f16), head dim D (64 or 128), 128 query rows
/// a tile against key blocks of BN (128) rows, kStages blocks of K and of V in flight.
template <typename T, int D, int BN, int kStages> struct AttentionConfig;

/// Dynamic shared memory the engine of Config needs (Q, the ring, the output's staging, the
/// mbarriers, and slack to align to 1 KiB as the 128-byte swizzle requires).
template <typename Config> __host__ __device__ constexpr int attention_smem_bytes();

/// Which keys the query rows of a tile see: key block j holds keys k0 + BN j ..; a key is seen
/// when it is one of the first `length` (the source's keys) and, with `causal`, its position is at
/// most the query's (query row r of the tile at position q_position + r, the tile's key c at
/// k_position + c).
struct AttentionWindow {
  int length;
  bool causal;
  long long q_position, k_position;
};

/// A consumer thread's part of the running state of 64 query rows x D: the unnormalised output
/// (wgmma's accumulator layout: rows 16 (warp) + lane / 4 (+ 8)), and for its two rows the
/// reference of the scaled scores in base 2 (the running maximum, or at most 8 below it) and its
/// own share of the running sum (the four
/// threads of a row add theirs at the end).
template <typename Config> struct AttentionAccumulator;

/// The ring and its pipeline position, as one thread sees it. Construct it with every thread of
/// the CTA (it initialises the mbarriers and synchronises the CTA); producer and consumers then
/// advance their own copies in step.
template <typename Config> class AttentionEngine;

__device__ __forceinline__ bool attention_is_producer();

/// Gives the producer warpgroup's registers to the consumers; first in each branch. Of the
/// producer warpgroup only thread 0 loads and claims tiles; the others are free for the caller.
template <typename Config>
__device__ __forceinline__ void attention_producer_begin(AttentionEngine<Config> &e);
template <typename Config>
__device__ __forceinline__ void attention_consumer_begin(AttentionEngine<Config> &e);

/// Producer thread 0: rows q0 .. q0 + 128 of head `bh` of Q, once the consumers are done with the
/// previous block's.
template <typename Config>
__device__ __forceinline__ void attention_load_q(AttentionEngine<Config> &e, const mk_tensor_map *q,
                                                 int q0, int bh);
/// Producer thread 0: the next key block, BN rows from `row` of head `kv_bh` of K and of V
/// (grouped-query attention: several query heads read one key head, loaded for each and never
/// copied).
template <typename Config>
__device__ __forceinline__ void attention_load_kv(AttentionEngine<Config> &e,
                                                  const mk_tensor_map *k, const mk_tensor_map *v,
                                                  int row, int kv_bh);

/// Producer thread 0: claims the next tile (an index of the caller's order) from `counter`, a
/// word of device memory that is 0 before the launch and is again after it, and hands it to the
/// consumers; a claim of `tiles` or more means there are no more, and is handed on too. With
/// attention_next_tile, CTAs take tiles as they become free, so that tiles of unequal work (causal
/// ones, longest first) spread evenly. `claimers` CTAs claim from the counter, each until it
/// draws past the end; one counter per launch that may run at the same time.
template <typename Config>
__device__ __forceinline__ int attention_claim_tile(AttentionEngine<Config> &e, unsigned *counter,
                                                    int tiles, int claimers);
/// Consumers: the tile the producer claimed next.
template <typename Config>
__device__ __forceinline__ int attention_next_tile(AttentionEngine<Config> &e);

/// Consumers: the state before any key (output 0, maximum -inf, sum 0) of the next Q block,
/// once it has landed.
template <typename Config>
__device__ __forceinline__ AttentionAccumulator<Config> attention_begin(AttentionEngine<Config> &e);

/// Consumers: folds the next `kv_blocks` (none, where a mask removes a source's) key blocks into
/// `state`, scores scaled by `scale_log2` (the softmax scale times log2 e, > 0); with `last`, the Q
/// block is free for the next once their scores are computed. Both consumer warpgroups call it with
/// the same arguments.
template <typename Config>
__device__ __forceinline__ void
attention_mma(AttentionEngine<Config> &e, AttentionAccumulator<Config> &state, int kv_blocks,
              const AttentionWindow &window, float scale_log2, bool last);

/// Consumers: the normalised output (as Out) to rows q0 .. of head `bh` of `o` through TMA
/// stores (this warpgroup's 64 rows each), and, unless `lse` is null, each row's natural
/// log-sum-exp of the scaled scores to lse[r] for the first `rows` rows of the tile (-inf where a
/// row saw no key, whose output is 0).
template <typename Out, typename Config>
__device__ __forceinline__ void
attention_store(AttentionEngine<Config> &e, const AttentionAccumulator<Config> &state,
                const mk_tensor_map *o, int q0, int bh, float *lse, int rows);

/// Consumers, after their last tile: waits for the outstanding stores, which read shared memory.
template <typename Config>
__device__ __forceinline__ void attention_finish(AttentionEngine<Config> &e);

} // namespace mk

#include "mk/device/impl/attention_engine__funcs.cuh"

#endif // MK_DEVICE_ATTENTION_ENGINE_CUH
