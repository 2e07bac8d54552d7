// The attention engine (mk/device/attention_engine.cuh) as a plain persistent attention forward:
// O = softmax(scale Q K^T) V with the log-sum-exp of each row, over [B, H, S, D] tensors (K and V
// with Hkv heads, H a multiple of Hkv), causal as PyTorch's is_causal (query i sees keys 0 .. i).
// With `split` > 0 the keys are folded in as two sources (blocks 0 .. split, then the rest).
// One CTA per SM walks the tiles (a head's 128-row query block); causal tiles go longest first,
// to whichever CTA is free (tile_counter: a word 0 before and after each launch).
// Compiled by NVRTC in DeviceCompileTest (resources, spills) and by the attention bench's library
// (checks against PyTorch, timing against cuDNN and FlashAttention).
#include "mk/device.cuh"

extern __shared__ __align__(128) unsigned char mk_smem[];

template <typename Config, bool kCausal>
__device__ __forceinline__ void
attention(const mk_tensor_map &q, const mk_tensor_map &k, const mk_tensor_map &v,
          const mk_tensor_map &o, float *lse, int heads, int kv_heads, int heads_total, int q_len,
          int kv_len, float scale_log2, unsigned *tile_counter, int section_heads, int split) {
  const int m_blocks = (q_len + Config::BM - 1) / Config::BM, tiles = heads_total * m_blocks;
  const int kv_blocks_all = (kv_len + Config::BN - 1) / Config::BN;
  // Tile t: without causal, head t / m_blocks and query block t % m_blocks, walked over the grid
  // in turn (tiles of equal work). Causal, claimed as CTAs become free: sections of
  // `section_heads` heads (whose keys and values the L2 holds), in each the last (longest) query
  // block of every head first.
  const auto origin = [&](int t, int &bh, int &kv_bh, int &m, int &kv_blocks) {
    if (kCausal) {
      const int section = t / (section_heads * m_blocks), first = section * section_heads;
      const int in_section = t - first * m_blocks, count = min(section_heads, heads_total - first);
      m = m_blocks - 1 - in_section / count;
      bh = first + in_section % count;
    } else {
      bh = t / m_blocks;
      m = t % m_blocks;
    }
    kv_bh = bh / heads * kv_heads + bh % heads / (heads / kv_heads);
    kv_blocks = kv_blocks_all;
    if (kCausal) {
      // Keys after the block's last query are masked for all of its rows.
      const int seen = min(kv_len, (m + 1) * Config::BM);
      kv_blocks = (seen + Config::BN - 1) / Config::BN;
    }
  };
  mk::AttentionEngine<Config> engine(mk_smem);
  if (mk::attention_is_producer()) {
    mk::attention_producer_begin(engine);
    if (threadIdx.x != 0)
      return;
    for (int t = blockIdx.x;; t += gridDim.x) {
      if (kCausal)
        t = mk::attention_claim_tile(engine, tile_counter, tiles, gridDim.x);
      if (t >= tiles)
        break;
      int bh, kv_bh, m, kv_blocks;
      origin(t, bh, kv_bh, m, kv_blocks);
      mk::attention_load_q(engine, &q, m * Config::BM, bh);
      for (int j = 0; j < kv_blocks; ++j)
        mk::attention_load_kv(engine, &k, &v, j * Config::BN, kv_bh);
    }
  } else {
    mk::attention_consumer_begin(engine);
    for (int t = blockIdx.x;; t += gridDim.x) {
      if (kCausal)
        t = mk::attention_next_tile(engine);
      if (t >= tiles)
        break;
      int bh, kv_bh, m, kv_blocks;
      origin(t, bh, kv_bh, m, kv_blocks);
      mk::AttentionAccumulator<Config> state = mk::attention_begin(engine);
      // The keys as one source, or as two (the first `split` blocks, then the rest), each with its
      // window, as a ring's shards are. One call site: the engine's loop is inlined once.
      const int first = split > 0 && split < kv_blocks ? split : kv_blocks;
      for (int source = 0, begin = 0; begin < kv_blocks; ++source) {
        const int blocks = source == 0 ? first : kv_blocks - first;
        const mk::AttentionWindow window{min(kv_len - begin * Config::BN, blocks * Config::BN),
                                         kCausal, (long long)m * Config::BM,
                                         (long long)begin * Config::BN};
        begin += blocks;
        mk::attention_mma(engine, state, blocks, window, scale_log2, begin == kv_blocks);
      }
      mk::attention_store<typename Config::T>(engine, state, &o, m * Config::BM, bh,
                                              lse + (long long)bh * q_len + m * Config::BM,
                                              q_len - m * Config::BM);
    }
    mk::attention_finish(engine);
  }
}

// attention_<T>_d<D>x<stages>[_causal], and its shared memory.
#define ATTENTION_KERNEL(name, T, D, STAGES, CAUSAL)                                               \
  extern "C" __constant__ int name##_smem =                                                        \
      mk::attention_smem_bytes<mk::AttentionConfig<T, D, 128, STAGES>>();                          \
  extern "C" __global__ void __launch_bounds__(MK_CTA_THREADS, 1)                                  \
      name(const __grid_constant__ mk_tensor_map q, const __grid_constant__ mk_tensor_map k,       \
           const __grid_constant__ mk_tensor_map v, const __grid_constant__ mk_tensor_map o,       \
           float *lse, int heads, int kv_heads, int heads_total, int q_len, int kv_len,            \
           float scale_log2, unsigned *tile_counter, int section_heads, int split) {               \
    attention<mk::AttentionConfig<T, D, 128, STAGES>, CAUSAL>(                                     \
        q, k, v, o, lse, heads, kv_heads, heads_total, q_len, kv_len, scale_log2, tile_counter,    \
        section_heads, split);                                                                     \
  }

ATTENTION_KERNEL(attention_bf16_d128x2, mk::bf16, 128, 2, false)
ATTENTION_KERNEL(attention_bf16_d128x2_causal, mk::bf16, 128, 2, true)
ATTENTION_KERNEL(attention_bf16_d64x4, mk::bf16, 64, 4, false)
ATTENTION_KERNEL(attention_bf16_d64x4_causal, mk::bf16, 64, 4, true)
ATTENTION_KERNEL(attention_f16_d128x2, mk::f16, 128, 2, false)
ATTENTION_KERNEL(attention_f16_d128x2_causal, mk::f16, 128, 2, true)
ATTENTION_KERNEL(attention_f16_d64x4, mk::f16, 64, 4, false)
ATTENTION_KERNEL(attention_f16_d64x4_causal, mk::f16, 64, 4, true)
