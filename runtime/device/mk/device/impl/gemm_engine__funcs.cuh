//===- mk/device/impl/gemm_engine__funcs.cuh - the GEMM engine's pipeline -------------===//

#ifndef MK_DEVICE_IMPL_GEMM_ENGINE_FUNCS_CUH
#define MK_DEVICE_IMPL_GEMM_ENGINE_FUNCS_CUH

#include "mk/device/impl/ptx__funcs.cuh"
#include "mk/device/impl/tile__types.cuh"

namespace mk {

template <typename T_, int BN_, int kStages_, bool kBKMajor_, int kEpilogueBuffers_, int kCluster_>
struct GemmConfig {
  using T = T_;
  static constexpr int BM = 128, BN = BN_, BK = 64, kStages = kStages_;
  static constexpr bool kBKMajor = kBKMajor_;
  static constexpr int kEpilogueBuffers = kEpilogueBuffers_;
  static constexpr int kCluster = kCluster_;
  static_assert(kEpilogueBuffers == 2 || kEpilogueBuffers == 4,
                "the epilogue stages chunks in 2 or 4 buffers");
  static_assert(sizeof(T) == 2, "16-bit operands (bf16, f16)");
  static_assert(BN == 64 || BN == 128 || BN == 256, "BN: a wgmma N of 64, 128 or 256");
  static_assert(kStages >= 2, "a ring of at least two stages");
  static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 CTAs");
  // Each CTA of a cluster loads its share of the B panel for all: whole 64-column blocks
  // ([K x N]) or BN / kCluster rows ([N x K]).
  static_assert(kBKMajor || BN / 64 % kCluster == 0,
                "a [K x N] B panel splits in 64-column blocks");
  static constexpr int kBShare = kBKMajor ? BN / kCluster : BN / 64 / kCluster;

  // A stage: A as 128 rows of 64 K (128 bytes, swizzled), then B as BN rows of 64 K (K-major)
  // or BN / 64 blocks of 64 K rows by 64 N (MN-major). Every piece starts on 1 KiB.
  static constexpr int kABytes = BM * BK * 2;
  static constexpr int kBBytes = BN * BK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // The epilogue stages 64-column chunks of the tile (128 rows of 128 bytes) in turn through its
  // buffers: two, or four, which hold a 256-column tile whole, so that slow stores (to a peer)
  // hold up the next tile rather than the chunks of this one.
  static constexpr int kChunkBytes = BM * 128;
  static constexpr int kEpilogueOffset = kStages * kStageBytes;
  static constexpr int kBarriersOffset = kEpilogueOffset + kEpilogueBuffers * kChunkBytes;
  // Flags the consumers raise once the stores before them complete (gemm_signal).
  static constexpr int kMaxPendingSignals = 8;
  static constexpr int kSignalsOffset = kBarriersOffset + 2 * kStages * 8;
  static constexpr int kBytes = 1024 + kSignalsOffset + kMaxPendingSignals * 8;
  static_assert(kBytes <= kMaxSmemBytes, "the GEMM engine's ring and epilogue do not fit a CTA's "
                                         "shared memory (227 KiB): use fewer stages");

  // wgmma reads 16 K (32 bytes of a K-major row, or 16 rows of an MN-major block) at a time.
  static constexpr int kMmaPerStage = BK / 16;
  static constexpr int kConsumerWarps = 8;
  // Every consumer warp of the cluster releases a stage: each CTA's producer overwrites it in all.
  static constexpr int kReleases = kConsumerWarps * kCluster;
  static constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
};

template <typename Config> __host__ __device__ constexpr int gemm_smem_bytes() {
  return Config::kBytes;
}

template <typename T, int BN, int kEpilogueBuffers>
__host__ __device__ constexpr int gemm_max_stages() {
  using Two = GemmConfig<T, BN, 2, false, kEpilogueBuffers, 1>;
  // Each stage takes its slice of A and B and two barriers.
  const int stages = (kMaxSmemBytes - (Two::kBytes - 2 * Two::kStageBytes - 2 * 16)) /
                     (Two::kStageBytes + 16);
  return stages < 8 ? stages : 8;
}

template <typename Config> struct GemmAccumulator {
  float d[Config::BN / 2];
};

template <typename Config> class GemmEngine {
public:
  __device__ explicit GemmEngine(void *smem)
      : base_((ptx::smem_address(smem) + 1023) & ~1023u), stage_(0), phase_(0), chunk_(0),
        pending_(0) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < Config::kStages; ++s) {
        ptx::mbarrier_init(full(s), 1);
        ptx::mbarrier_init(empty(s), Config::kReleases);
      }
      ptx::fence_mbarrier_init();
    }
    if constexpr (Config::kCluster > 1) {
      cluster_rank_ = ptx::cluster_cta_rank();
      ptx::cluster_sync(); // the other CTAs' barriers are ready before any copy or arrival
    } else {
      __syncthreads();
    }
  }
  /// In a cluster, no CTA leaves while another may still arrive on its barriers.
  __device__ ~GemmEngine() {
    if constexpr (Config::kCluster > 1)
      ptx::cluster_sync();
  }
  GemmEngine(const GemmEngine &) = delete;
  GemmEngine &operator=(const GemmEngine &) = delete;

  /// This CTA's rank in its cluster (0 without one).
  __device__ mk_u32 cluster_rank() const { return cluster_rank_; }

  __device__ mk_u32 a(int s) const { return base_ + s * Config::kStageBytes; }
  __device__ mk_u32 b(int s) const { return a(s) + Config::kABytes; }
  __device__ mk_u32 chunk(int i) const {
    return base_ + Config::kEpilogueOffset + i * Config::kChunkBytes;
  }
  __device__ mk_u32 full(int s) const { return base_ + Config::kBarriersOffset + s * 8; }
  __device__ mk_u32 empty(int s) const { return full(Config::kStages + s); }

  __device__ int stage() const { return stage_; }
  __device__ mk_u32 phase() const { return phase_; }
  __device__ void advance() {
    if (++stage_ == Config::kStages) {
      stage_ = 0;
      phase_ ^= 1;
    }
  }
  /// The epilogue buffer for the next chunk; they alternate.
  __device__ int next_chunk() { return chunk_++ & (Config::kEpilogueBuffers - 1); }

  /// Where pending flag i is kept, and how many are pending (the same in every consumer thread).
  __device__ mk_u32 pending_signal(int i) const { return base_ + Config::kSignalsOffset + i * 8; }
  __device__ int &pending_signals() { return pending_; }

private:
  mk_u32 base_;
  mk_u32 cluster_rank_ = 0;
  int stage_;
  mk_u32 phase_;
  int chunk_;
  int pending_;
};

__device__ __forceinline__ bool gemm_is_producer() { return threadIdx.x < 128; }

template <typename Config> __device__ __forceinline__ void gemm_producer_begin(GemmEngine<Config> &) {
  ptx::setmaxnreg_dec<Config::kProducerRegisters>();
}

template <typename Config> __device__ __forceinline__ void gemm_consumer_begin(GemmEngine<Config> &) {
  ptx::setmaxnreg_inc<Config::kConsumerRegisters>();
}

template <typename Config>
__device__ __forceinline__ void gemm_load(GemmEngine<Config> &e, const mk_tensor_map *a,
                                          const mk_tensor_map *b, int m0, int n0, int k_blocks) {
  if (threadIdx.x != 0)
    return;
  for (int kb = 0; kb < k_blocks; ++kb) {
    const int s = e.stage();
    // A fresh barrier counts as having completed the phase before its first: the first pass
    // over the ring does not wait.
    ptx::mbarrier_wait(e.empty(s), e.phase() ^ 1);
    ptx::mbarrier_arrive_expect_tx(e.full(s), Config::kStageBytes);
    const int k0 = kb * Config::BK;
    ptx::tma_load(e.a(s), a, k0, m0, e.full(s));
    // B: this CTA's share of the panel (all of it without a cluster; the CTAs of a cluster share
    // n0), into every CTA of the cluster.
    const auto load_b = [&](mk_u32 dst, int c0, int c1) {
      if constexpr (Config::kCluster == 1)
        ptx::tma_load(dst, b, c0, c1, e.full(s));
      else
        ptx::tma_load_multicast(dst, b, c0, c1, e.full(s), (1u << Config::kCluster) - 1);
    };
    const int share =
        Config::kCluster == 1 ? 0 : static_cast<int>(e.cluster_rank()) * Config::kBShare;
    if constexpr (Config::kBKMajor) {
      load_b(e.b(s) + share * 128, k0, n0 + share);
    } else {
#pragma unroll
      for (int j = 0; j < Config::kBShare; ++j)
        load_b(e.b(s) + (share + j) * Config::BK * 128, n0 + 64 * (share + j), k0);
    }
    e.advance();
  }
}

template <typename Config>
__device__ __forceinline__ void gemm_wait(GemmEngine<Config> &, const mk_u32 *flag, mk_u32 target) {
  if (threadIdx.x != 0)
    return;
  while (static_cast<int>(ptx::load_acquire_sys(flag) - target) < 0)
    __nanosleep(64);
  // TMA reads through the async proxy: order them after the acquire.
  ptx::fence_proxy_async();
}

/// Raises the pending flags: the stores before them have completed by now (a tile's mainloop
/// later), or are waited for here.
template <typename Config> __device__ __forceinline__ void gemm_flush_signals(GemmEngine<Config> &e) {
  if (e.pending_signals() == 0)
    return;
  if (team_thread() == 0) {
    ptx::bulk_wait_all();
    ptx::fence_proxy_async();
    for (int i = 0; i < e.pending_signals(); ++i) {
      mk_u64 flag;
      asm volatile("ld.shared.u64 %0, [%1];\n" : "=l"(flag) : "r"(e.pending_signal(i)) : "memory");
      ptx::red_add_release_sys(reinterpret_cast<mk_u32 *>(flag), 1);
    }
  }
  e.pending_signals() = 0;
}

/// An arrival on `flag` once this tile's stores have completed: raised later (at the next
/// tile's epilogue, a consumer wait, or gemm_finish) so that the consumers start the next tile
/// instead of waiting for the stores to land.
template <typename Config>
__device__ __forceinline__ void gemm_signal(GemmEngine<Config> &e, mk_u32 *flag) {
  if (e.pending_signals() == Config::kMaxPendingSignals)
    gemm_flush_signals(e);
  if (team_thread() == 0)
    asm volatile("st.shared.u64 [%0], %1;\n" ::"r"(e.pending_signal(e.pending_signals())),
                 "l"(reinterpret_cast<mk_u64>(flag))
                 : "memory");
  ++e.pending_signals();
}

namespace detail {

/// The wgmma descriptors of slice `kk` (16 K) of stage `s` for consumer warpgroup `wg`.
template <typename Config>
__device__ __forceinline__ mk_u64 a_descriptor(const GemmEngine<Config> &e, int s, int wg, int kk) {
  return ptx::wgmma_descriptor(e.a(s) + wg * 64 * 128 + kk * 32, 16, 1024);
}
template <typename Config>
__device__ __forceinline__ mk_u64 b_descriptor(const GemmEngine<Config> &e, int s, int kk) {
  if constexpr (Config::kBKMajor)
    return ptx::wgmma_descriptor(e.b(s) + kk * 32, 16, 1024);
  // MN-major: 8-K groups of 128-byte rows 1 KiB apart, 64-column blocks one block (64 K rows)
  // apart.
  return ptx::wgmma_descriptor(e.b(s) + kk * 16 * 128, Config::BK * 128, 1024);
}

template <typename Config> __device__ __forceinline__ void release(const GemmEngine<Config> &e, int s) {
  const int lane = threadIdx.x % 32;
  if constexpr (Config::kCluster == 1) {
    if (lane == 0)
      ptx::mbarrier_arrive(e.empty(s));
  } else if (lane < Config::kCluster) {
    ptx::mbarrier_arrive_cluster(e.empty(s), lane);
  }
}

template <typename Out> struct PairOfOut;
template <> struct PairOfOut<bf16> {
  static __device__ __forceinline__ mk_u32 pack(float x, float y) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const mk_u32 *>(&v);
  }
};
template <> struct PairOfOut<f16> {
  static __device__ __forceinline__ mk_u32 pack(float x, float y) {
    const __half2 v = __floats2half2_rn(x, y);
    return *reinterpret_cast<const mk_u32 *>(&v);
  }
};

/// Writes this thread's fragments of 64-column chunk `c` into `buffer` (128 rows of 128 bytes,
/// 128-byte swizzled, as the output map expects), then hands the buffer to TMA.
template <typename Out, typename Config, typename Store>
__device__ __forceinline__ void store_chunks(GemmEngine<Config> &e, const GemmAccumulator<Config> &acc,
                                             Store store) {
  // The previous tile's flags wait no longer than this tile's mainloop.
  gemm_flush_signals(e);
  const int wg = threadIdx.x / 128 - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int row = wg * 64 + warp * 16 + lane / 4;
#pragma unroll
  for (int c = 0; c < Config::BN / 64; ++c) {
    const mk_u32 buffer = e.chunk(e.next_chunk());
    // The buffer's previous store (kEpilogueBuffers chunks ago) has read it.
    if (team_thread() == 0)
      ptx::bulk_wait_read<Config::kEpilogueBuffers - 1>();
    team_sync();
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int f = 8 * c + j; // the n8 fragment
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = row + 8 * half;
        const mk_u32 offset = r * 128 + ((j ^ (r % 8)) << 4) + (lane % 4) * 4;
        const mk_u32 packed = PairOfOut<Out>::pack(acc.d[4 * f + 2 * half], acc.d[4 * f + 2 * half + 1]);
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(buffer + offset), "r"(packed) : "memory");
      }
    }
    ptx::fence_proxy_async_shared();
    team_sync();
    if (team_thread() == 0) {
      store(64 * c, buffer);
      ptx::bulk_commit();
    }
  }
}

} // namespace detail

template <typename Config>
__device__ __forceinline__ GemmAccumulator<Config> gemm_mma(GemmEngine<Config> &e, int k_blocks) {
  GemmAccumulator<Config> acc;
  const int wg = threadIdx.x / 128 - 1;
  int previous = 0;
  for (int kb = 0; kb < k_blocks; ++kb) {
    const int s = e.stage();
    ptx::mbarrier_wait(e.full(s), e.phase());
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Config::kMmaPerStage; ++kk)
      ptx::Wgmma<typename Config::T, Config::BN>::template run<!Config::kBKMajor>(
          acc.d, detail::a_descriptor(e, s, wg, kk), detail::b_descriptor(e, s, kk),
          kb > 0 || kk > 0);
    ptx::wgmma_commit();
    // Keep one stage's wgmma in flight; the one before it has finished reading its stage.
    if (kb > 0) {
      ptx::wgmma_wait<1>();
      detail::release(e, previous);
    }
    previous = s;
    e.advance();
  }
  ptx::wgmma_wait<0>();
  detail::release(e, previous);
  return acc;
}

template <typename Out, typename Config>
__device__ __forceinline__ void gemm_store(GemmEngine<Config> &e, const GemmAccumulator<Config> &acc,
                                           const mk_tensor_map *map, int c0, int c1) {
  detail::store_chunks<Out>(e, acc, [&](int column, mk_u32 buffer) {
    ptx::tma_store(map, c0 + column, c1, buffer);
  });
}

template <typename Out, typename Config>
__device__ __forceinline__ void gemm_store(GemmEngine<Config> &e, const GemmAccumulator<Config> &acc,
                                           const mk_tensor_map *map, int c0, int c1, int c2) {
  detail::store_chunks<Out>(e, acc, [&](int column, mk_u32 buffer) {
    ptx::tma_store(map, c0 + column, c1, c2, buffer);
  });
}

/// The tile to the same place of the 2-D tensor on several GPUs of the node, staged once: to
/// map maps[(me + j) % gpus] for j in [begin, end), stored or (kAdd) added.
template <typename Out, bool kAdd, typename Config>
__device__ __forceinline__ void gemm_store_to_gpus(GemmEngine<Config> &e,
                                                   const GemmAccumulator<Config> &acc,
                                                   const mk_tensor_map *maps, int me, int begin,
                                                   int end, int gpus, int c0, int c1) {
  // The first contribution, which a flag's acquire made visible, is read by the async proxy.
  if (kAdd && team_thread() == 0)
    ptx::fence_proxy_async();
  detail::store_chunks<Out>(e, acc, [&](int column, mk_u32 buffer) {
    for (int j = begin; j < end; ++j) {
      const mk_tensor_map *map = maps + (me + j) % gpus;
      if constexpr (kAdd)
        ptx::tma_store_add(map, c0 + column, c1, buffer);
      else
        ptx::tma_store(map, c0 + column, c1, buffer);
    }
  });
}
/// Adds the tile to what the 2-D tensor of `map` holds at (c0, c1), where that memory is.
template <typename Out, typename Config>
__device__ __forceinline__ void gemm_store_add(GemmEngine<Config> &e,
                                               const GemmAccumulator<Config> &acc,
                                               const mk_tensor_map *map, int c0, int c1) {
  gemm_store_to_gpus<Out, true>(e, acc, map, 0, 0, 1, 1, c0, c1);
}
template <typename Out, typename Config>
__device__ __forceinline__ void gemm_store_gpus(GemmEngine<Config> &e, const GemmAccumulator<Config> &acc,
                                                const mk_tensor_map *maps, int me, int begin,
                                                int end, int gpus, int c0, int c1) {
  gemm_store_to_gpus<Out, false>(e, acc, maps, me, begin, end, gpus, c0, c1);
}
template <typename Out, typename Config>
__device__ __forceinline__ void gemm_store_add_gpus(GemmEngine<Config> &e,
                                                    const GemmAccumulator<Config> &acc,
                                                    const mk_tensor_map *maps, int me, int begin,
                                                    int end, int gpus, int c0, int c1) {
  gemm_store_to_gpus<Out, true>(e, acc, maps, me, begin, end, gpus, c0, c1);
}

template <typename Config> __device__ __forceinline__ void gemm_finish(GemmEngine<Config> &e) {
  gemm_flush_signals(e);
  if (team_thread() == 0)
    ptx::bulk_wait_all();
}

} // namespace mk

#endif // MK_DEVICE_IMPL_GEMM_ENGINE_FUNCS_CUH
