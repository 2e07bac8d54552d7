//===- mk/device/impl/attention_engine__funcs.cuh - the attention engine's pipeline ----===//

#ifndef MK_DEVICE_IMPL_ATTENTION_ENGINE_FUNCS_CUH
#define MK_DEVICE_IMPL_ATTENTION_ENGINE_FUNCS_CUH

#include "mk/device/impl/ptx__funcs.cuh"
#include "mk/device/impl/ring__types.cuh"
#include "mk/device/impl/tile__types.cuh"

namespace mk {

template <typename T_, int D_, int BN_, int kStages_> struct AttentionConfig {
  using T = T_;
  static constexpr int BM = 128, D = D_, BN = BN_, kStages = kStages_;
  static_assert(sizeof(T) == 2, "16-bit operands (bf16, f16)");
  static_assert(D == 64 || D == 128, "head dims 64 and 128");
  static_assert(BN == 128, "key blocks of 128 rows");
  static_assert(kStages >= 2, "a ring of at least two key blocks");
  // Every operand is kChunks blocks of 64 columns (128 bytes a row, swizzled), one TMA box each,
  // each starting on 1 KiB: Q [128 x 64], K and V [BN x 64], the output's staging [64 x 64] per
  // warpgroup.
  static constexpr int kChunks = D / 64;
  static constexpr int kQBytes = BM * D * 2, kKBytes = BN * D * 2, kVBytes = BN * D * 2;
  static constexpr int kStageBytes = kKBytes + kVBytes;
  static constexpr int kOBytes = 64 * D * 2; // a warpgroup's
  static constexpr int kStagesOffset = kQBytes;
  static constexpr int kOOffset = kStagesOffset + kStages * kStageBytes;
  static constexpr int kBarriersOffset = kOOffset + 2 * kOBytes;
  // q full and empty, then k full, k empty, v full and v empty of each stage, then the full and
  // empty barriers of the slots through which the producer hands claimed tiles to the consumers,
  // and the slots.
  static constexpr int kTileSlots = 2;
  static constexpr int kTileBarriersOffset = kBarriersOffset + (2 + 4 * kStages) * 8;
  static constexpr int kTileSlotsOffset = kTileBarriersOffset + 2 * kTileSlots * 8;
  static constexpr int kBytes = 1024 + kTileSlotsOffset + kTileSlots * 4;
  static_assert(kBytes <= kMaxSmemBytes, "the attention engine's ring does not fit a CTA's "
                                         "shared memory (227 KiB): use fewer stages");
  static constexpr int kConsumerWarps = 8;
  static constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
  // Named barriers (0 is __syncthreads', 1 the team's, 2 the GEMM engine's senders'): the
  // ping-pong's turn of warpgroup w is kTurnBarrier + w, its own epilogue's kStoreBarrier + w.
  static constexpr int kTurnBarrier = 3, kStoreBarrier = 5;
};

template <typename Config> __host__ __device__ constexpr int attention_smem_bytes() {
  return Config::kBytes;
}

template <typename Config> struct AttentionAccumulator {
  float o[Config::D / 2];
  float max[2], sum[2];
};

template <typename Config> class AttentionEngine : public detail::RingPosition<Config::kStages> {
public:
  __device__ explicit AttentionEngine(void *smem)
      : base_((ptx::smem_address(smem) + 1023) & ~1023u) {
    if (threadIdx.x == 0) {
      ptx::mbarrier_init(q_full(), 1);
      ptx::mbarrier_init(q_empty(), Config::kConsumerWarps);
      for (int s = 0; s < Config::kStages; ++s) {
        ptx::mbarrier_init(k_full(s), 1);
        ptx::mbarrier_init(k_empty(s), Config::kConsumerWarps);
        ptx::mbarrier_init(v_full(s), 1);
        ptx::mbarrier_init(v_empty(s), Config::kConsumerWarps);
      }
      for (int i = 0; i < Config::kTileSlots; ++i) {
        ptx::mbarrier_init(tile_full(i), 1);
        ptx::mbarrier_init(tile_empty(i), Config::kConsumerWarps);
      }
      ptx::fence_mbarrier_init();
    }
    __syncthreads();
  }
  AttentionEngine(const AttentionEngine &) = delete;
  AttentionEngine &operator=(const AttentionEngine &) = delete;

  __device__ mk_u32 q() const { return base_; }
  __device__ mk_u32 k(int s) const {
    return base_ + Config::kStagesOffset + s * Config::kStageBytes;
  }
  __device__ mk_u32 v(int s) const { return k(s) + Config::kKBytes; }
  /// Warpgroup wg's staging of its 64 output rows.
  __device__ mk_u32 o(int wg) const { return base_ + Config::kOOffset + wg * Config::kOBytes; }

  __device__ mk_u32 q_full() const { return base_ + Config::kBarriersOffset; }
  __device__ mk_u32 q_empty() const { return q_full() + 8; }
  __device__ mk_u32 k_full(int s) const { return q_full() + 16 + s * 32; }
  __device__ mk_u32 k_empty(int s) const { return k_full(s) + 8; }
  __device__ mk_u32 v_full(int s) const { return k_full(s) + 16; }
  __device__ mk_u32 v_empty(int s) const { return k_full(s) + 24; }

  __device__ mk_u32 tile_full(int i) const { return base_ + Config::kTileBarriersOffset + i * 16; }
  __device__ mk_u32 tile_empty(int i) const { return tile_full(i) + 8; }
  __device__ mk_u32 tile_slot(int i) const { return base_ + Config::kTileSlotsOffset + i * 4; }
  /// How many tiles this thread has claimed or been handed.
  __device__ int &tiles() { return tiles_; }

  /// The parity of the next Q block's phase; it flips with each block.
  __device__ mk_u32 next_q_phase() {
    const mk_u32 phase = q_phase_;
    q_phase_ ^= 1;
    return phase;
  }

private:
  mk_u32 base_;
  mk_u32 q_phase_ = 0;
  int tiles_ = 0;
};

__device__ __forceinline__ bool attention_is_producer() { return threadIdx.x < 128; }

namespace detail {

/// This consumer thread's warpgroup (0 or 1).
__device__ __forceinline__ int attention_warpgroup() {
  return static_cast<int>(threadIdx.x) / 128 - 1;
}

/// One arrival per consumer warp on `barrier`: the warp has read what it guards.
__device__ __forceinline__ void attention_release(mk_u32 barrier) {
  if (threadIdx.x % 32 == 0)
    ptx::mbarrier_arrive(barrier);
}

/// The ping-pong: a warpgroup issues its GEMMs in its turn, then gives the turn to the other.
template <typename Config> __device__ __forceinline__ void take_turn() {
  ptx::bar_sync<256>(Config::kTurnBarrier + attention_warpgroup());
}
template <typename Config> __device__ __forceinline__ void give_turn() {
  ptx::bar_arrive<256>(Config::kTurnBarrier + 1 - attention_warpgroup());
}

} // namespace detail

template <typename Config>
__device__ __forceinline__ void attention_producer_begin(AttentionEngine<Config> &) {
  ptx::setmaxnreg_dec<Config::kProducerRegisters>();
}

template <typename Config>
__device__ __forceinline__ void attention_consumer_begin(AttentionEngine<Config> &) {
  ptx::setmaxnreg_inc<Config::kConsumerRegisters>();
  // Warpgroup 0 takes the first turn.
  if (detail::attention_warpgroup() == 1)
    ptx::bar_arrive<256>(Config::kTurnBarrier);
}

template <typename Config>
__device__ __forceinline__ int attention_claim_tile(AttentionEngine<Config> &e, unsigned *counter,
                                                    int tiles, int claimers) {
  const int n = e.tiles()++, slot = n % Config::kTileSlots;
  ptx::mbarrier_wait(e.tile_empty(slot), (n / Config::kTileSlots & 1) ^ 1);
  const int tile = detail::claim_from(counter, tiles, claimers);
  asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(e.tile_slot(slot)), "r"(tile) : "memory");
  ptx::mbarrier_arrive(e.tile_full(slot));
  return tile;
}

template <typename Config>
__device__ __forceinline__ int attention_next_tile(AttentionEngine<Config> &e) {
  const int n = e.tiles()++, slot = n % Config::kTileSlots;
  ptx::mbarrier_wait(e.tile_full(slot), n / Config::kTileSlots & 1);
  int tile;
  asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(tile) : "r"(e.tile_slot(slot)) : "memory");
  __syncwarp();
  detail::attention_release(e.tile_empty(slot));
  return tile;
}

template <typename Config>
__device__ __forceinline__ void attention_load_q(AttentionEngine<Config> &e, const mk_tensor_map *q,
                                                 int q0, int bh) {
  // A fresh barrier counts as having completed the phase before its first: the first Q block
  // and the first pass over the ring do not wait.
  ptx::mbarrier_wait(e.q_empty(), e.next_q_phase() ^ 1);
  ptx::mbarrier_arrive_expect_tx(e.q_full(), Config::kQBytes);
#pragma unroll
  for (int c = 0; c < Config::kChunks; ++c)
    ptx::tma_load(e.q() + c * Config::BM * 128, q, 64 * c, q0, bh, e.q_full());
}

template <typename Config>
__device__ __forceinline__ void attention_load_kv(AttentionEngine<Config> &e,
                                                  const mk_tensor_map *k, const mk_tensor_map *v,
                                                  int row, int kv_bh) {
  const int s = e.stage();
  ptx::mbarrier_wait(e.k_empty(s), e.phase() ^ 1);
  ptx::mbarrier_arrive_expect_tx(e.k_full(s), Config::kKBytes);
#pragma unroll
  for (int c = 0; c < Config::kChunks; ++c)
    ptx::tma_load(e.k(s) + c * Config::BN * 128, k, 64 * c, row, kv_bh, e.k_full(s));
  ptx::mbarrier_wait(e.v_empty(s), e.phase() ^ 1);
  ptx::mbarrier_arrive_expect_tx(e.v_full(s), Config::kVBytes);
#pragma unroll
  for (int c = 0; c < Config::kChunks; ++c)
    ptx::tma_load(e.v(s) + c * Config::BN * 128, v, 64 * c, row, kv_bh, e.v_full(s));
  e.advance();
}

template <typename Config>
__device__ __forceinline__ AttentionAccumulator<Config>
attention_begin(AttentionEngine<Config> &e) {
  ptx::mbarrier_wait(e.q_full(), e.next_q_phase());
  AttentionAccumulator<Config> state;
#pragma unroll
  for (int i = 0; i < Config::D / 2; ++i)
    state.o[i] = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    state.max[h] = -__int_as_float(0x7f800000);
    state.sum[h] = 0.0f;
  }
  return state;
}

namespace detail {

/// How far (in base 2) a row's maximum may grow past its reference before the reference moves.
constexpr float kRescaleSlack = 8.0f;

/// A key block's scores for this thread's rows (wgmma's accumulator of 64 x BN), and the same as
/// 16-bit probabilities in the A-operand registers of the P V product (AttentionScores::kSlices
/// slices of 16 keys, four registers each).
template <typename Config> struct AttentionScores {
  static constexpr int kSlices = Config::BN / 16;
  float s[Config::BN / 2];
};
template <typename Config> struct AttentionProbabilities {
  mk_u32 p[Config::BN / 4];
  __device__ const mk_u32 (&slice(int kk) const)[4] {
    return *reinterpret_cast<const mk_u32(*)[4]>(p + 4 * kk);
  }
};

/// S = Q K^T of stage s, issued (one wgmma group, not waited for).
template <typename Config>
__device__ __forceinline__ void issue_scores(const AttentionEngine<Config> &e,
                                             AttentionScores<Config> &scores, int s) {
  const int wg = attention_warpgroup();
  ptx::fence_registers(scores.s);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Config::D / 16; ++kk) {
    // Q's rows of this warpgroup and K's rows (keys), both K-major, 16 head-dim columns a step.
    const mk_u32 column = kk % 4 * 32;
    const mk_u64 a =
        ptx::wgmma_descriptor(e.q() + kk / 4 * Config::BM * 128 + wg * 64 * 128 + column, 16, 1024);
    const mk_u64 b = ptx::wgmma_descriptor(e.k(s) + kk / 4 * Config::BN * 128 + column, 16, 1024);
    ptx::Wgmma<typename Config::T, Config::BN>::template run<0>(scores.s, a, b, kk > 0);
  }
  ptx::wgmma_commit();
  ptx::fence_registers(scores.s);
}

/// O += P V of stage s, issued (one wgmma group, not waited for).
template <typename Config>
__device__ __forceinline__ void issue_values(const AttentionEngine<Config> &e,
                                             AttentionAccumulator<Config> &state,
                                             AttentionProbabilities<Config> &p, int s) {
  ptx::fence_registers(state.o);
  ptx::fence_registers(p.p);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < AttentionScores<Config>::kSlices; ++kk) {
    // V is MN-major: 16 keys (rows of 128 bytes, 8-row groups 1 KiB apart) a step, its 64-column
    // blocks BN rows apart.
    const mk_u64 b = ptx::wgmma_descriptor(e.v(s) + kk * 16 * 128, Config::BN * 128, 1024);
    ptx::WgmmaRs<typename Config::T, Config::D>::template run<1>(state.o, p.slice(kk), b, 1);
  }
  ptx::wgmma_commit();
  ptx::fence_registers(state.o);
  ptx::fence_registers(p.p);
}

/// The online softmax of a key block for this thread's two rows: masks the keys the window does
/// not see (where `masked` says some may be), moves each row's reference where its maximum grew
/// past it by more than kRescaleSlack, sets the factor by which its earlier output and sum shrink
/// (alpha), leaves 2^(S - reference) in `scores`, and returns whether any row of the warp moved
/// (and so its output needs rescaling).
template <typename Config>
__device__ __forceinline__ bool
softmax_block(AttentionAccumulator<Config> &state, AttentionScores<Config> &scores,
              float (&alpha)[2], bool masked, const int (&limit)[2], float scale_log2) {
  const float minus_inf = -__int_as_float(0x7f800000);
  const int lane = threadIdx.x % 32;
  if (masked) {
    // Key column c of this block is seen by row h where c < limit[h].
#pragma unroll
    for (int i = 0; i < Config::BN / 2; ++i) {
      const int c = i / 4 * 8 + lane % 4 * 2 + i % 2, h = i / 2 % 2;
      if (c >= limit[h])
        scores.s[i] = minus_inf;
    }
  }
  float block_max[2] = {minus_inf, minus_inf};
#pragma unroll
  for (int i = 0; i < Config::BN / 2; ++i)
    block_max[i / 2 % 2] = fmaxf(block_max[i / 2 % 2], scores.s[i]);
  float base[2];
  bool moved[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // The four threads of a row hold its columns.
    block_max[h] = fmaxf(block_max[h], __shfl_xor_sync(0xffffffffu, block_max[h], 1));
    block_max[h] = fmaxf(block_max[h], __shfl_xor_sync(0xffffffffu, block_max[h], 2));
    // FlashAttention-4's conditional rescaling: the reference stays while the maximum is at
    // most kRescaleSlack above it, so that most blocks leave the output as it is (their
    // probabilities stay at most 2^kRescaleSlack). A row that has seen no key yet keeps -inf (the
    // difference is NaN, not above) and weighs its (masked) scores at 0.
    const float grown = fmaxf(state.max[h], block_max[h] * scale_log2);
    moved[h] = grown - state.max[h] > kRescaleSlack;
    const float next = moved[h] ? grown : state.max[h];
    base[h] = next == minus_inf ? 0.0f : next;
    alpha[h] = moved[h] ? ptx::ex2_approx(state.max[h] - base[h]) : 1.0f;
    state.max[h] = next;
  }
  float block_sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < Config::BN / 2; ++i) {
    const int h = i / 2 % 2;
    scores.s[i] = ptx::ex2_approx(fmaf(scores.s[i], scale_log2, -base[h]));
    block_sum[h] += scores.s[i];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
    state.sum[h] = state.sum[h] * alpha[h] + block_sum[h];
  return __any_sync(0xffffffffu, moved[0] || moved[1]);
}

/// Once the previous block's P V has read its probabilities: O *= alpha row by row where a row of
/// the warp moved its reference, and this block's probabilities to 16 bits. Accumulator pairs (2 i,
/// 2 i + 1) are the registers of the product's A operand, in order.
template <typename Config>
__device__ __forceinline__ void
next_probabilities(AttentionAccumulator<Config> &state, const AttentionScores<Config> &scores,
                   AttentionProbabilities<Config> &p, const float (&alpha)[2], bool rescale) {
  if (rescale) {
#pragma unroll
    for (int i = 0; i < Config::D / 2; ++i)
      state.o[i] *= alpha[i / 2 % 2];
  }
#pragma unroll
  for (int i = 0; i < Config::BN / 4; ++i)
    p.p[i] = pack_pair<typename Config::T>(scores.s[2 * i], scores.s[2 * i + 1]);
}

/// After a P V group has completed: its output is in place and its probabilities free.
template <typename Config>
__device__ __forceinline__ void values_done(AttentionAccumulator<Config> &state,
                                            AttentionProbabilities<Config> &p) {
  ptx::wgmma_wait<0>();
  ptx::fence_registers(state.o);
  ptx::fence_registers(p.p);
}

} // namespace detail

template <typename Config>
__device__ __forceinline__ void
attention_mma(AttentionEngine<Config> &e, AttentionAccumulator<Config> &state, int kv_blocks,
              const AttentionWindow &window, float scale_log2, bool last) {
  const int wg = detail::attention_warpgroup(), warp = threadIdx.x / 32 % 4,
            lane = threadIdx.x % 32;
  // This thread's rows, and the distance from each row's position to the first key's: key c of
  // block j is seen by row h where c < limit: the source's length, and with causal its diagonal.
  const int row0 = wg * 64 + warp * 16 + lane / 4;
  // The distance from the first key's position to the first query's matters only within
  // [-BM, length] (beyond, a row sees all of the source's keys or none): clamped so, it is an int,
  // and the blocks' arithmetic 32-bit.
  const long long distance = window.q_position - window.k_position;
  const int diagonal = static_cast<int>(distance < -Config::BM     ? -Config::BM
                                        : distance > window.length ? window.length
                                                                   : distance);
  // A block whose every key the first row of this warp sees (and so every row) needs no mask.
  const int warp_first = diagonal + wg * 64 + warp * 16;
  const auto limits = [&](int j, int(&limit)[2]) {
    const int first = j * Config::BN;
    bool masked = first + Config::BN > window.length;
    if (window.causal)
      masked |= first + Config::BN - 1 > warp_first;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int seen = window.length - first;
      if (window.causal)
        seen = min(seen, diagonal + row0 + 8 * h - first + 1);
      limit[h] = max(0, min(seen, Config::BN));
    }
    return masked;
  };

  // A source whose blocks the mask removes: nothing to fold.
  if (kv_blocks == 0) {
    if (last)
      detail::attention_release(e.q_empty());
    return;
  }
  detail::AttentionScores<Config> scores;
  detail::AttentionProbabilities<Config> p;
  float alpha[2];
  int limit[2];

  // The first block: its scores alone.
  int s = e.stage();
  ptx::mbarrier_wait(e.k_full(s), e.phase());
  detail::take_turn<Config>();
  detail::issue_scores(e, scores, s);
  detail::give_turn<Config>();
  ptx::wgmma_wait<0>();
  ptx::fence_registers(scores.s);
  detail::attention_release(e.k_empty(s));
  if (last && kv_blocks == 1)
    detail::attention_release(e.q_empty());
  bool masked = limits(0, limit);
  bool rescale = detail::softmax_block(state, scores, alpha, masked, limit, scale_log2);
  detail::next_probabilities(state, scores, p, alpha, rescale);
  int previous = s;
  mk_u32 previous_phase = e.phase();
  e.advance();

  // Then the scores of block j under the values of block j - 1.
  for (int j = 1; j < kv_blocks; ++j) {
    s = e.stage();
    ptx::mbarrier_wait(e.k_full(s), e.phase());
    detail::take_turn<Config>();
    detail::issue_scores(e, scores, s);
    ptx::mbarrier_wait(e.v_full(previous), previous_phase);
    detail::issue_values(e, state, p, previous);
    detail::give_turn<Config>();
    ptx::wgmma_wait<1>();
    ptx::fence_registers(scores.s);
    detail::attention_release(e.k_empty(s));
    if (last && j == kv_blocks - 1)
      detail::attention_release(e.q_empty());
    masked = limits(j, limit);
    rescale = detail::softmax_block(state, scores, alpha, masked, limit, scale_log2);
    detail::values_done(state, p);
    detail::attention_release(e.v_empty(previous));
    detail::next_probabilities(state, scores, p, alpha, rescale);
    previous = s;
    previous_phase = e.phase();
    e.advance();
  }

  // The last block's values.
  ptx::mbarrier_wait(e.v_full(previous), previous_phase);
  detail::take_turn<Config>();
  detail::issue_values(e, state, p, previous);
  detail::give_turn<Config>();
  detail::values_done(state, p);
  detail::attention_release(e.v_empty(previous));
}

template <typename Out, typename Config>
__device__ __forceinline__ void
attention_store(AttentionEngine<Config> &e, const AttentionAccumulator<Config> &state,
                const mk_tensor_map *o, int q0, int bh, float *lse, int rows) {
  const int wg = detail::attention_warpgroup(), warp = threadIdx.x / 32 % 4,
            lane = threadIdx.x % 32;
  const bool leader = threadIdx.x % 128 == 0;
  float scale[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = state.sum[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    scale[h] = sum > 0.0f ? 1.0f / sum : 0.0f;
    const int r = wg * 64 + warp * 16 + lane / 4 + 8 * h;
    if (lse && lane % 4 == 0 && r < rows)
      lse[r] = sum > 0.0f ? (state.max[h] + __log2f(sum)) * 0.69314718055994531f
                          : -__int_as_float(0x7f800000);
  }
  const mk_u32 buffer = e.o(wg);
  // The staging's previous stores (the last tile's) have read it.
  if (leader)
    ptx::bulk_wait_read<0>();
  ptx::bar_sync<128>(Config::kStoreBarrier + wg);
  // 64-column chunks of 64 rows of 128 bytes, swizzled as the output map expects.
#pragma unroll
  for (int i = 0; i < Config::D / 4; ++i) {
    const int f = i / 2, h = i % 2, chunk = f / 8, r = warp * 16 + lane / 4 + 8 * h;
    const mk_u32 offset = chunk * 64 * 128 + r * 128 + (((f % 8) ^ (r % 8)) << 4) + (lane % 4) * 4;
    const mk_u32 packed =
        detail::pack_pair<Out>(state.o[2 * i] * scale[h], state.o[2 * i + 1] * scale[h]);
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(buffer + offset), "r"(packed) : "memory");
  }
  ptx::fence_proxy_async_shared();
  ptx::bar_sync<128>(Config::kStoreBarrier + wg);
  if (leader) {
#pragma unroll
    for (int c = 0; c < Config::kChunks; ++c)
      ptx::tma_store(o, 64 * c, q0 + wg * 64, bh, buffer + c * 64 * 128);
    ptx::bulk_commit();
  }
}

template <typename Config>
__device__ __forceinline__ void attention_finish(AttentionEngine<Config> &) {
  // Warpgroup 1 gave warpgroup 0 one turn more than it took: take it, so that the barrier ends
  // as it began.
  if (detail::attention_warpgroup() == 0)
    detail::take_turn<Config>();
  if (threadIdx.x % 128 == 0)
    ptx::bulk_wait_all();
}

} // namespace mk

#endif // MK_DEVICE_IMPL_ATTENTION_ENGINE_FUNCS_CUH
