//===- mk/device/impl/gemm_engine__funcs.cuh - the GEMM engine's pipeline -------------===//

#ifndef MK_DEVICE_IMPL_GEMM_ENGINE_FUNCS_CUH
#define MK_DEVICE_IMPL_GEMM_ENGINE_FUNCS_CUH

#include "mk/device/impl/ptx__funcs.cuh"
#include "mk/device/impl/ring__types.cuh"
#include "mk/device/impl/tile__types.cuh"
#include "mk/device/impl/watch.cuh"

namespace mk {

template <typename T_, int BN_, int kStages_, bool kBKMajor_, int kEpilogueBuffers_, int kCluster_,
          int kARows_>
struct GemmConfig {
  using T = T_;
  static constexpr int BM = 128, BN = BN_, BK = 64, kStages = kStages_;
  static constexpr bool kBKMajor = kBKMajor_;
  static constexpr int kEpilogueBuffers = kEpilogueBuffers_;
  static constexpr int kCluster = kCluster_;
  static constexpr int kARows = kARows_;
  static_assert(kEpilogueBuffers == 2 || kEpilogueBuffers == 4,
                "the epilogue stages chunks in 2 or 4 buffers");
  static_assert(sizeof(T) == 2, "16-bit operands (bf16, f16)");
  static_assert(BN == 64 || BN == 128 || BN == 256, "BN: a wgmma N of 64, 128 or 256");
  static_assert(kStages >= 2, "a ring of at least two stages");
  static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 CTAs");
  static_assert(kARows % 8 == 0 && kARows >= 8 && kARows <= BM,
                "A's rows: whole 8-row swizzle atoms of the 128-row tile");
  static_assert(kARows == BM || kCluster == 1, "a cluster's CTAs load A's 128 rows each");
  // Each CTA of a cluster loads its share of the B panel for all: whole 64-column blocks
  // ([K x N]), or, of a panel of one block, BK / kCluster of its K rows; or BN / kCluster rows
  // ([N x K]).
  static constexpr bool kSplitBlock = !kBKMajor && BN / 64 < kCluster;
  static_assert(kBKMajor || kSplitBlock || BN / 64 % kCluster == 0,
                "a [K x N] B panel splits in 64-column blocks");
  static constexpr int kBShare = kBKMajor ? BN / kCluster : BN / 64 / kCluster;
  static constexpr int kSplitRows = BK / kCluster;

  // A stage: A as 128 rows of 64 K (128 bytes, swizzled), or 64 where one warpgroup multiplies
  // (its wgmma reads 64), then B as BN rows of 64 K (K-major) or BN / 64 blocks of 64 K rows by
  // 64 N (MN-major). Every piece starts on 1 KiB.
  static constexpr int kABytes = (kARows > 64 ? BM : 64) * BK * 2;
  static constexpr int kBBytes = BN * BK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // What lands in a stage: A's first kARows rows (the rest of its space is never loaded: those
  // rows of the product are past M and never stored), and B.
  static constexpr int kStageLoadBytes = kARows * BK * 2 + kBBytes;
  // The epilogue stages 64-column chunks of the tile (128 rows of 128 bytes) in turn through its
  // buffers: two, or four, which hold a 256-column tile whole, so that slow stores (to a peer)
  // hold up the next tile rather than the chunks of this one.
  static constexpr int kChunkBytes = BM * 128;
  static constexpr int kEpilogueOffset = kStages * kStageBytes;
  static constexpr int kBarriersOffset = kEpilogueOffset + kEpilogueBuffers * kChunkBytes;
  // Flags held back until the consumers' TMA stores before them complete (gemm_signal,
  // gemm_stamp): each its address, bit 0 set for a stamp, whose value (the launch's epoch, the
  // same for all) follows them.
  static constexpr int kMaxPendingSignals = 8;
  static constexpr int kSignalsOffset = kBarriersOffset + 2 * kStages * 8;
  static constexpr int kStampOffset = kSignalsOffset + kMaxPendingSignals * 8; // and the counter
  // Whether the consumers' split-K part arrived last (gemm_sum_splits), team thread 0 telling the
  // others; 16 bytes keep the send jobs' alignment.
  static constexpr int kSplitLastOffset = kStampOffset + 16;
  // The producer warpgroup's other warps (the senders) finish what the consumers stage: they
  // write whole tiles bound for several GPUs (this GPU's copy through TMA, the peers' with
  // ordinary stores and reductions, which do not queue NVLink traffic ahead of the producer's
  // TMA loads) and raise every flag, so that no consumer waits on a system-scope fence. A ring of
  // send jobs, each a slot (SendJob) and a ready and a done mbarrier.
  static constexpr int kSenderWarps = 3;
  static constexpr int kSendSlots = 8;
  static constexpr int kSendJobsOffset = kSplitLastOffset + 16;
  static constexpr int kSendBarriersOffset = kSendJobsOffset + kSendSlots * 48;
  // The last job that reads each epilogue buffer.
  static constexpr int kBufferJobsOffset = kSendBarriersOffset + 2 * kSendSlots * 8;
  static constexpr int kBytes = 1024 + kBufferJobsOffset + kEpilogueBuffers * 4;
  static_assert(kBytes <= kMaxSmemBytes, "the GEMM engine's ring and epilogue do not fit a CTA's "
                                         "shared memory (227 KiB): use fewer stages");

  // wgmma reads 16 K (32 bytes of a K-major row, or 16 rows of an MN-major block) at a time.
  static constexpr int kMmaPerStage = BK / 16;
  static constexpr int kConsumerWarps = 8;
  // The consumer warpgroups that multiply: those with loaded rows of A (64 each). A second with
  // none (M <= 64) skips the mainloop, its product's rows past M.
  static constexpr int kMmaWarpgroups = kARows > 64 ? 2 : 1;
  // Every multiplying warp of the cluster releases a stage: each CTA's producer overwrites it in
  // all.
  static constexpr int kReleases = 4 * kMmaWarpgroups * kCluster;
  static constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
};

template <typename Config> __host__ __device__ constexpr int gemm_smem_bytes() {
  return Config::kBytes;
}

template <typename T, int BN, int kEpilogueBuffers, int kARows>
__host__ __device__ constexpr int gemm_max_stages() {
  using Two = GemmConfig<T, BN, 2, false, kEpilogueBuffers, 1, kARows>;
  // Each stage takes its slice of A and B and two barriers. Small stages (A's half, 64 columns)
  // fit 12: the more in flight, the closer one SM streams B at the memory's latency.
  const int stages =
      (kMaxSmemBytes - (Two::kBytes - 2 * Two::kStageBytes - 2 * 16)) / (Two::kStageBytes + 16);
  return stages < 16 ? stages : 16;
}

template <int C> struct GemmLayout {
  static_assert(C % 8 == 0, "whole n8 fragments");
  static constexpr int kPairs = C / 4;
  static __device__ __forceinline__ int row(int p) {
    return (static_cast<int>(threadIdx.x) / 32 - 4) * 16 + p % 2 * 8 + threadIdx.x % 32 / 4;
  }
  static __device__ __forceinline__ int col(int p) { return p / 2 * 8 + threadIdx.x % 4 * 2; }
};

template <typename T, int C, typename S> struct GemmRow {
  // Pairs 2 j and 2 j + 1 of a GemmTile<C> (rows r and r + 8) share columns: the row's pair j.
  static constexpr int kPairs = GemmLayout<C>::kPairs / 2;
  static __device__ __forceinline__ int col(int p) { return p * 8 + threadIdx.x % 4 * 2; }
  typename detail::PairOf<S>::type pairs[kPairs];
};

template <typename T, int C>
__device__ __forceinline__ GemmRow<T, C> gemm_load_row(const T *src, int count) {
  using Pair = typename detail::PairOf<T>::type;
  GemmRow<T, C> row;
  // A whole row at a pair's alignment: one load a pair, each in one register.
  if (count == C && reinterpret_cast<unsigned long long>(src) % sizeof(Pair) == 0) {
#pragma unroll
    for (int p = 0; p < GemmRow<T, C>::kPairs; ++p)
      row.pairs[p] = *reinterpret_cast<const Pair *>(src + GemmRow<T, C>::col(p));
    return row;
  }
#pragma unroll
  for (int p = 0; p < GemmRow<T, C>::kPairs; ++p) {
    const int c = GemmRow<T, C>::col(p);
    row.pairs[p] = {c < count ? src[c] : T(0.0f), c + 1 < count ? src[c + 1] : T(0.0f)};
  }
  return row;
}

template <typename To, typename T, int C, typename S>
__device__ __forceinline__ GemmRow<To, C, S> convert(const GemmRow<T, C, S> &row) {
  static_assert(sizeof(To) == 4, "a row widens to f32 only, which holds every S exactly");
  GemmRow<To, C, S> out;
#pragma unroll
  for (int p = 0; p < GemmRow<T, C, S>::kPairs; ++p)
    out.pairs[p] = row.pairs[p];
  return out;
}

template <int C, typename S>
__device__ __forceinline__ GemmTile<C> gemm_broadcast(const GemmRow<float, C, S> &row) {
  GemmTile<C> out;
#pragma unroll
  for (int p = 0; p < GemmLayout<C>::kPairs; ++p)
    out.pairs[p] = detail::to_float2(row.pairs[p / 2]);
  return out;
}

template <int kFirst, int kColumns, int C>
__device__ __forceinline__ GemmTile<kColumns> gemm_columns(const GemmTile<C> &t) {
  static_assert(kFirst % 64 == 0 && kColumns % 64 == 0 && kFirst + kColumns <= C,
                "whole 64-column chunks of the tile");
  GemmTile<kColumns> out;
#pragma unroll
  for (int p = 0; p < GemmLayout<kColumns>::kPairs; ++p)
    out.pairs[p] = t.pairs[kFirst / 4 + p];
  return out;
}

template <typename Config> class GemmEngine : public detail::RingPosition<Config::kStages> {
public:
  __device__ explicit GemmEngine(void *smem, mk_u64 *rows_elsewhere = nullptr)
      : base_((ptx::smem_address(smem) + 1023) & ~1023u), chunk_(0), pending_(0) {
    if (threadIdx.x == 0) {
      asm volatile("st.shared.u64 [%0], %1;\n" ::"r"(rows_counter()),
                   "l"(reinterpret_cast<mk_u64>(rows_elsewhere))
                   : "memory");
      for (int buffer = 0; buffer < Config::kEpilogueBuffers; ++buffer)
        asm volatile("st.shared.s32 [%0], -1;\n" ::"r"(buffer_job(buffer)) : "memory");
      for (int s = 0; s < Config::kStages; ++s) {
        ptx::mbarrier_init(full(s), 1);
        ptx::mbarrier_init(empty(s), Config::kReleases);
      }
      // Every consumer thread posts every job, and every sender thread finishes it: each
      // arrives itself, so that each access to a chunk is ordered by an mbarrier with those of
      // the other side (which compute-sanitizer's racecheck follows, unlike an arrival by one
      // thread after a named barrier).
      for (int slot = 0; slot < Config::kSendSlots; ++slot) {
        ptx::mbarrier_init(send_ready(slot), Config::kConsumerWarps * 32);
        ptx::mbarrier_init(send_done(slot), Config::kSenderWarps * 32);
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
  /// Every thread, once no thread of the cluster uses them: ends the barriers, so that the CTA
  /// may use their shared memory for another role's (gemm_leave).
  __device__ void invalidate_barriers() {
    if (threadIdx.x != 0)
      return;
    for (int s = 0; s < Config::kStages; ++s) {
      ptx::mbarrier_inval(full(s));
      ptx::mbarrier_inval(empty(s));
    }
    for (int slot = 0; slot < Config::kSendSlots; ++slot) {
      ptx::mbarrier_inval(send_ready(slot));
      ptx::mbarrier_inval(send_done(slot));
    }
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

  /// The epilogue buffer for the next chunk; they alternate.
  __device__ int next_chunk() { return chunk_++ & (Config::kEpilogueBuffers - 1); }

  /// Where pending flag i is kept, and how many are pending (the same in every consumer thread).
  __device__ mk_u32 pending_signal(int i) const { return base_ + Config::kSignalsOffset + i * 8; }
  __device__ mk_u32 pending_stamp() const { return base_ + Config::kStampOffset; }
  /// Where the senders find the count of the bytes of rows (gemm_store_rows) they store on other
  /// GPUs (an mk_u64 *, null: not counted), beside the stamp.
  __device__ mk_u32 rows_counter() const { return base_ + Config::kStampOffset + 8; }
  __device__ int &pending_signals() { return pending_; }
  /// Where team thread 0 tells the consumers whether their split-K part arrived last, and whether
  /// the last tile is whole here (the same in every consumer thread).
  __device__ mk_u32 split_last() const { return base_ + Config::kSplitLastOffset; }
  __device__ bool &tile_complete() { return tile_complete_; }

  /// Send job `job`'s slot (a SendJob) and its barriers: ready once every consumer thread has
  /// posted it, done once every sender thread has issued its part of the writes and TMA has read
  /// the chunk.
  __device__ mk_u32 send_job(int job) const {
    return base_ + Config::kSendJobsOffset + job % Config::kSendSlots * 48;
  }
  __device__ mk_u32 send_ready(int job) const {
    return base_ + Config::kSendBarriersOffset + job % Config::kSendSlots * 8;
  }
  __device__ mk_u32 send_done(int job) const { return send_ready(job) + Config::kSendSlots * 8; }
  /// The count of the jobs posted (the same in every consumer thread: they post together), and
  /// where team thread 0 keeps the last job that reads each epilogue buffer (-1: none yet; an
  /// older job is done once kSendSlots more are posted).
  __device__ int &sends() { return sends_; }
  __device__ mk_u32 buffer_job(int buffer) const {
    return base_ + Config::kBufferJobsOffset + buffer * 4;
  }
  /// Whether TMA has stored since the consumers last waited for it (the same in every consumer
  /// thread): flags after such stores wait for them (gemm_flush_signals).
  __device__ bool &tma_stored() { return tma_stored_; }
  /// Team thread 0's last wait job (gemm_defer_wait; -1: none): its own TMA writes wait for it.
  __device__ int &wait_job() { return wait_job_; }

private:
  mk_u32 base_;
  mk_u32 cluster_rank_ = 0;
  int chunk_;
  int pending_;
  int sends_ = 0;
  int wait_job_ = -1;
  bool tma_stored_ = false;
  bool tile_complete_ = true;
};

namespace detail {

/// What a send job asks of the senders: to store a chunk to GPUs of the node or add it there
/// (as bf16 or f16 pairs), to store each row of a chunk where its origin says, to raise a flag
/// (add one, or set it to a launch's epoch) once every earlier job's writes are visible, to wait
/// for a flag before the jobs after it, or to stop.
enum SendKind : mk_u32 {
  kSendStore,
  kSendAddBf16,
  kSendAddF16,
  kSendRows,
  kSendSignal,
  kSendStamp,
  kSendWait,
  kSendExit
};

/// A send job, as its slot in shared memory holds it.
struct SendJob {
  mk_u64 target; // the tensor's mk_tensor_ref (copies), or the flag (signals, kSendWait)
  mk_u64 offset; // elements from the start of each GPU's part to the chunk's first (for
                 // kSendRows, from a row's start), or the value the flag must reach (kSendWait)
                 // or is set to (kSendStamp)
  const mk_tensor_map *map; // this GPU's copy, through TMA at (c0, c1), or null
  mk_u32 ld;                // elements between rows
  mk_u32 c0, c1;            // kSendRows: the chunk's valid rows | its valid columns << 16, and
                            // the rows of `target` a GPU holds
  unsigned char kind, buffer;
  unsigned char peers, unused; // a mask of the other GPUs to write
  const int *origins;          // kSendRows: each row's origin, a row of `target` on some GPU
};
static_assert(sizeof(SendJob) == 48, "a send slot is 48 bytes");

/// Waits until the senders are done with job `job` (one of the last kSendSlots posted, so that
/// its slot's barrier has not moved on).
template <typename Config>
__device__ __forceinline__ void wait_sent(GemmEngine<Config> &e, int job) {
  ptx::mbarrier_wait(e.send_done(job), (job / Config::kSendSlots) & 1);
}

/// Team thread 0: waits until the senders are past the last wait job it posted, so that its own
/// writes (TMA stores) follow that wait too.
template <typename Config>
__device__ __forceinline__ void await_deferred_waits(GemmEngine<Config> &e) {
  const int job = e.wait_job();
  if (job >= 0 && job >= e.sends() - Config::kSendSlots) {
    wait_sent(e, job);
    ptx::fence_proxy_async();
  }
  e.wait_job() = -1;
}

/// Consumers, before the TMA stores team thread 0 issues: they follow its wait jobs, and the
/// flags after them wait for them (gemm_flush_signals).
template <typename Config> __device__ __forceinline__ void begin_tma_stores(GemmEngine<Config> &e) {
  if (team_thread() == 0)
    await_deferred_waits(e);
  e.tma_stored() = true;
}

/// Spins until `*flag` >= `target` (wrap-safe) or the wait gives up (mk_watch), then orders this
/// thread's later reads after the writes the flag counts.
__device__ __forceinline__ void spin_until(const mk_u32 *flag, mk_u32 target) {
  wait_at_least(flag, target, [] { __nanosleep(64); });
  // TMA reads and writes through the async proxy: order them after the acquire.
  ptx::fence_proxy_async();
}

/// Every consumer thread: waits until no send job reads epilogue buffer `buffer` (team thread 0
/// wrote its last job before a team barrier since).
template <typename Config>
__device__ __forceinline__ void wait_buffer_sent(GemmEngine<Config> &e, int buffer) {
  int job;
  asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(job) : "r"(e.buffer_job(buffer)) : "memory");
  // Posting job j waited for job j - kSendSlots, so only the last kSendSlots can be pending.
  if (job >= 0 && job >= e.sends() - Config::kSendSlots)
    wait_sent(e, job);
}

/// Every consumer thread: hands a job to the senders (team thread 0 writes it, only its `job`
/// counts), once the job kSendSlots before it has freed its slot. Each thread's arrival releases
/// its own writes of the chunk; waiting first keeps any thread from arriving a ring ahead.
template <typename Config>
__device__ __forceinline__ void post_send(GemmEngine<Config> &e, const SendJob &job) {
  const int index = e.sends()++;
  if (index >= Config::kSendSlots)
    wait_sent(e, index - Config::kSendSlots);
  if (team_thread() == 0) {
    const mk_u32 *words = reinterpret_cast<const mk_u32 *>(&job);
#pragma unroll
    for (int i = 0; i < 3; ++i)
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(e.send_job(index) + 16 * i),
                   "r"(words[4 * i]), "r"(words[4 * i + 1]), "r"(words[4 * i + 2]),
                   "r"(words[4 * i + 3])
                   : "memory");
    if (job.kind < kSendSignal)
      asm volatile("st.shared.s32 [%0], %1;\n" ::"r"(e.buffer_job(job.buffer)), "r"(index)
                   : "memory");
  }
  ptx::mbarrier_arrive(e.send_ready(index));
}

/// Every consumer thread: the senders raise `flag` (team thread 0's: an arrival, or with
/// kSendStamp set to `value`) once every write before it (theirs, and the consumers' that have
/// completed) is visible.
template <typename Config>
__device__ __forceinline__ void post_signal(GemmEngine<Config> &e, mk_u32 *flag, SendKind kind,
                                            mk_u32 value) {
  post_send(e, SendJob{reinterpret_cast<mk_u64>(flag), value, nullptr, 0, 0, 0,
                       static_cast<unsigned char>(kind), 0, 0, 0, nullptr});
}

/// The senders' part of a chunk: its 128 rows of 128 bytes, read from the 128-byte swizzled
/// buffer and written 16 bytes a thread (a warp writes four whole rows) at `dst`.
template <typename Config>
__device__ __forceinline__ void send_chunk(mk_u32 buffer, mk_u64 dst, mk_u32 ld, mk_u32 kind) {
  for (int unit = threadIdx.x - 32; unit < Config::BM * 8; unit += Config::kSenderWarps * 32) {
    const int row = unit / 8, column = unit % 8;
    mk_u32 v0, v1, v2, v3;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3)
                 : "r"(buffer + row * 128 + ((column ^ (row % 8)) << 4))
                 : "memory");
    const mk_u64 to = dst + (static_cast<mk_u64>(row) * ld + column * 8) * 2;
    if (kind == kSendStore)
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(to), "r"(v0), "r"(v1),
                   "r"(v2), "r"(v3)
                   : "memory");
    else if (kind == kSendAddBf16)
      asm volatile("red.global.add.noftz.v4.bf16x2 [%0], {%1, %2, %3, %4};\n" ::"l"(to), "r"(v0),
                   "r"(v1), "r"(v2), "r"(v3)
                   : "memory");
    else
      asm volatile("red.global.add.noftz.v4.f16x2 [%0], {%1, %2, %3, %4};\n" ::"l"(to), "r"(v0),
                   "r"(v1), "r"(v2), "r"(v3)
                   : "memory");
  }
}

/// The senders' part of a chunk whose rows go each to its own place: row r (of the first `rows`)
/// to row origins[r] % slots of `tensor` on GPU origins[r] / slots, at element `column`, its first
/// `cols` columns (whole 16-byte units).
template <typename Config>
__device__ __forceinline__ void send_rows(mk_u32 buffer, const mk_tensor_ref *tensor,
                                          const int *origins, int rows, int cols, mk_u32 slots,
                                          mk_u32 ld, mk_u64 column, mk_u32 counter) {
  // A sender keeps one 16-byte column of the chunk (the senders are a multiple of its 8): few
  // registers, in the producer warpgroup's few.
  const int unit = threadIdx.x - 32, unit_column = unit % 8;
  unsigned elsewhere = 0; // bytes stored on other GPUs
  if (unit_column * 8 < cols) {
    const mk_u64 column_bytes = (column + unit_column * 8) * 2;
    for (int row = unit / 8; row < rows; row += Config::kSenderWarps * 4) {
      const mk_u32 origin = static_cast<mk_u32>(origins[row]);
      mk_u32 v0, v1, v2, v3;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3)
                   : "r"(buffer + row * 128 + ((unit_column ^ (row % 8)) << 4))
                   : "memory");
      void *gpu = tensor->peer[origin / slots];
      const mk_u64 to = reinterpret_cast<mk_u64>(gpu) +
                        static_cast<mk_u64>(origin % slots) * ld * 2 + column_bytes;
      asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(to), "r"(v0), "r"(v1),
                   "r"(v2), "r"(v3)
                   : "memory");
      elsewhere += gpu == tensor->local ? 0 : 16;
    }
  }
  elsewhere = __reduce_add_sync(0xffffffffu, elsewhere);
  if (threadIdx.x % 32 == 0 && elsewhere) {
    mk_u64 count;
    asm volatile("ld.shared.u64 %0, [%1];\n" : "=l"(count) : "r"(counter) : "memory");
    if (count)
      atomicAdd(reinterpret_cast<mk_u64 *>(count), static_cast<mk_u64>(elsewhere));
  }
}

/// The senders (the producer warpgroup's warps 1-3) serve the jobs in order until the exit job.
template <typename Config> __device__ __forceinline__ void serve_sends(GemmEngine<Config> &e) {
  for (int index = 0;; ++index) {
    ptx::mbarrier_wait(e.send_ready(index), (index / Config::kSendSlots) & 1);
    SendJob job;
    mk_u32 *words = reinterpret_cast<mk_u32 *>(&job);
#pragma unroll
    for (int i = 0; i < 3; ++i)
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(words[4 * i]), "=r"(words[4 * i + 1]), "=r"(words[4 * i + 2]),
                     "=r"(words[4 * i + 3])
                   : "r"(e.send_job(index) + 16 * i)
                   : "memory");
    const bool first = threadIdx.x == 32; // issues the TMA copies and raises the flags
    if (job.kind == kSendExit) {
      if (first)
        ptx::bulk_wait_all();
      return;
    }
    if (job.kind == kSendWait) {
      // Thread 32's acquire, then the barrier, orders every sender's later writes after it.
      if (first)
        spin_until(reinterpret_cast<const mk_u32 *>(job.target), static_cast<mk_u32>(job.offset));
      ptx::bar_sync<2, Config::kSenderWarps * 32>();
    } else if (job.kind == kSendSignal || job.kind == kSendStamp) {
      // Every sender's writes so far, then the flag: its release publishes them (cumulative
      // over the barrier), so no job fences its own writes.
      if (first) {
        ptx::bulk_wait_all();
        ptx::fence_proxy_async();
      }
      ptx::bar_sync<2, Config::kSenderWarps * 32>();
      if (first && job.kind == kSendSignal)
        ptx::red_add_release_sys(reinterpret_cast<mk_u32 *>(job.target), 1);
      else if (first)
        ptx::store_release_sys(reinterpret_cast<mk_u32 *>(job.target),
                               static_cast<mk_u32>(job.offset));
    } else if (job.kind == kSendRows) {
      send_rows<Config>(e.chunk(job.buffer), reinterpret_cast<const mk_tensor_ref *>(job.target),
                        job.origins, static_cast<int>(job.c0 & 0xffff),
                        static_cast<int>(job.c0 >> 16), job.c1, job.ld, job.offset,
                        e.rows_counter());
    } else {
      const mk_u32 buffer = e.chunk(job.buffer);
      if (first && job.map) {
        // The first contribution, which a flag's acquire made visible, is read by the async
        // proxy.
        ptx::fence_proxy_async();
        if (job.kind == kSendStore)
          ptx::tma_store(job.map, job.c0, job.c1, buffer);
        else
          ptx::tma_store_add(job.map, job.c0, job.c1, buffer);
        ptx::bulk_commit();
      }
      const mk_tensor_ref *tensor = reinterpret_cast<const mk_tensor_ref *>(job.target);
      for (int gpu = 0; gpu < MK_MAX_GPUS_PER_NODE; ++gpu)
        if (job.peers >> gpu & 1)
          send_chunk<Config>(buffer, reinterpret_cast<mk_u64>(tensor->peer[gpu]) + job.offset * 2,
                             job.ld, job.kind);
      if (first)
        ptx::bulk_wait_read<0>();
    }
    ptx::mbarrier_arrive(e.send_done(index));
  }
}

} // namespace detail

__device__ __forceinline__ bool gemm_is_producer() { return threadIdx.x < 128; }

__device__ __forceinline__ bool gemm_loader() { return threadIdx.x == 0; }

template <typename Config>
__device__ __forceinline__ void gemm_producer_begin(GemmEngine<Config> &e) {
  ptx::setmaxnreg_dec<Config::kProducerRegisters>();
  // Warps 1-3 are the senders until gemm_finish.
  if (threadIdx.x >= 32)
    detail::serve_sends(e);
}

template <typename Config>
__device__ __forceinline__ void gemm_consumer_begin(GemmEngine<Config> &) {
  ptx::setmaxnreg_inc<Config::kConsumerRegisters>();
}

namespace detail {

/// The producer's loads of the next k_blocks stages, K blocks k_first .. k_first + k_blocks: A's
/// rows m0 .. m0 + 128 and B's panel, which is kParts (1 or 2) panels of BN / kParts columns side
/// by side, from b0 and b1 at columns n0 ... (Two maps as two values: an array of them, indexed by
/// the cluster rank, would live in local memory.)
template <typename Config, int kParts, bool kGrouped = false>
__device__ __forceinline__ void load_panels(GemmEngine<Config> &e, const mk_tensor_map *a,
                                            const mk_tensor_map *b0, const mk_tensor_map *b1,
                                            int m0, int n0, int k_blocks, int k_first,
                                            int a_group = 0, int b_group = 0) {
  constexpr int kPartColumns = Config::BN / kParts;
  static_assert((kParts == 1 || kParts == 2) && kPartColumns % 64 == 0,
                "one or two parts of 64-column blocks");
  static_assert(kParts == 1 || Config::kCluster == 1 || !Config::kBKMajor,
                "an [N x K] panel of parts is loaded by one CTA");
  static_assert(!kGrouped || Config::kCluster == 1, "a cluster's CTAs share one group's panel");
  // Rolled: unrolled for a short K known at compile time, it outgrows the producer's registers.
#pragma unroll 1
  for (int kb = 0; kb < k_blocks; ++kb) {
    const int s = e.stage();
    // A fresh barrier counts as having completed the phase before its first: the first pass
    // over the ring does not wait.
    ptx::mbarrier_wait(e.empty(s), e.phase() ^ 1);
    ptx::mbarrier_arrive_expect_tx(e.full(s), Config::kStageLoadBytes);
    const int k0 = (k_first + kb) * Config::BK;
    if constexpr (kGrouped)
      ptx::tma_load(e.a(s), a, k0, m0, a_group, e.full(s));
    else
      ptx::tma_load(e.a(s), a, k0, m0, e.full(s));
    // B: this CTA's share of the panel (all of it without a cluster; the CTAs of a cluster share
    // n0), into every CTA of the cluster.
    const auto load_b = [&](mk_u32 dst, const mk_tensor_map *map, int c0, int c1) {
      if constexpr (kGrouped)
        ptx::tma_load(dst, map, c0, c1, b_group, e.full(s));
      else if constexpr (Config::kCluster == 1)
        ptx::tma_load(dst, map, c0, c1, e.full(s));
      else
        ptx::tma_load_multicast(dst, map, c0, c1, e.full(s), (1u << Config::kCluster) - 1);
    };
    const int share =
        Config::kCluster == 1 ? 0 : static_cast<int>(e.cluster_rank()) * Config::kBShare;
    if constexpr (Config::kSplitBlock) {
      // The one 64-column block, its K rows in kCluster parts (a box of kSplitRows rows).
      const int rows = static_cast<int>(e.cluster_rank()) * Config::kSplitRows;
      load_b(e.b(s) + rows * 128, b0, n0, k0 + rows);
    } else if constexpr (Config::kBKMajor && kParts == 1) {
      load_b(e.b(s) + share * 128, b0, k0, n0 + share);
    } else if constexpr (Config::kBKMajor) {
      // Rows of 64 K (128 bytes), one box of kPartColumns rows a part.
      load_b(e.b(s), b0, k0, n0);
      load_b(e.b(s) + kPartColumns * 128, b1, k0, n0);
    } else {
      // 64-column blocks of 64 K rows; block j of the panel is block j % (blocks a part) of its
      // part.
#pragma unroll
      for (int j = 0; j < Config::kBShare; ++j) {
        const int block = share + j, part = block / (kPartColumns / 64);
        load_b(e.b(s) + block * Config::BK * 128, part == 0 ? b0 : b1,
               n0 + 64 * (block % (kPartColumns / 64)), k0);
      }
    }
    e.advance();
  }
}

} // namespace detail

template <typename Config>
__device__ __forceinline__ void gemm_load(GemmEngine<Config> &e, const mk_tensor_map *a,
                                          const mk_tensor_map *b, int m0, int n0, int k_blocks,
                                          int k_first) {
  detail::load_panels<Config, 1>(e, a, b, b, m0, n0, k_blocks, k_first);
}

template <typename Config>
__device__ __forceinline__ void gemm_load(GemmEngine<Config> &e, const mk_tensor_map *a,
                                          const mk_tensor_map *b0, const mk_tensor_map *b1, int m0,
                                          int n0, int k_blocks, int k_first) {
  detail::load_panels<Config, 2>(e, a, b0, b1, m0, n0, k_blocks, k_first);
}

template <typename Config>
__device__ __forceinline__ void gemm_load_grouped(GemmEngine<Config> &e, const mk_tensor_map *a,
                                                  const mk_tensor_map *b, int m0, int n0,
                                                  int k_blocks, int a_group, int b_group) {
  detail::load_panels<Config, 1, true>(e, a, b, b, m0, n0, k_blocks, 0, a_group, b_group);
}

template <typename Config>
__device__ __forceinline__ void
gemm_load_grouped(GemmEngine<Config> &e, const mk_tensor_map *a, const mk_tensor_map *b0,
                  const mk_tensor_map *b1, int m0, int n0, int k_blocks, int a_group, int b_group) {
  detail::load_panels<Config, 2, true>(e, a, b0, b1, m0, n0, k_blocks, 0, a_group, b_group);
}

template <typename Config>
__device__ __forceinline__ void gemm_wait(GemmEngine<Config> &, const mk_u32 *flag, mk_u32 target) {
  detail::spin_until(flag, target);
}

template <typename Config>
__device__ __forceinline__ void gemm_wait_all(GemmEngine<Config> &, const mk_u32 *flags, int n,
                                              mk_u32 target) {
  constexpr int kInFlight = 16; // 32 in flight spill the kernel at 168 registers
  for (int first = 0; first < n; first += kInFlight) {
    unsigned short_of_target = 0;
#pragma unroll
    for (int k = 0; k < kInFlight; ++k)
      if (first + k < n && static_cast<int>(ptx::load_relaxed_sys(flags + first + k) - target) < 0)
        short_of_target |= 1u << k;
    for (; short_of_target; short_of_target &= short_of_target - 1)
      detail::spin_until(flags + first + __ffs(short_of_target) - 1, target);
  }
  ptx::fence_acq_rel_sys();
  // TMA reads and writes through the async proxy: order them after the acquire.
  ptx::fence_proxy_async();
}

/// Hands the pending flags to the senders: the stores before them have completed by now (a
/// tile's mainloop later), or are waited for here.
template <typename Config>
__device__ __forceinline__ void gemm_flush_signals(GemmEngine<Config> &e) {
  if (e.pending_signals() == 0)
    return;
  if (team_thread() == 0) {
    ptx::bulk_wait_all();
    ptx::fence_proxy_async();
  }
  for (int i = 0; i < e.pending_signals(); ++i) {
    mk_u64 flag = 0;
    mk_u32 value = 0;
    if (team_thread() == 0) {
      asm volatile("ld.shared.u64 %0, [%1];\n" : "=l"(flag) : "r"(e.pending_signal(i)) : "memory");
      if (flag & 1)
        asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(value) : "r"(e.pending_stamp()) : "memory");
    }
    detail::post_signal(e, reinterpret_cast<mk_u32 *>(flag & ~1ull),
                        flag & 1 ? detail::kSendStamp : detail::kSendSignal, value);
  }
  e.pending_signals() = 0;
  e.tma_stored() = false;
}

namespace detail {

/// The senders raise `flag` (kSendSignal, or kSendStamp to `value`) once this tile's stores have
/// completed: at once after their own writes, or, after the consumers' TMA stores, at the next
/// tile's epilogue, a consumer wait, or gemm_finish, so that the consumers start the next tile
/// instead of waiting for the stores to land.
template <typename Config>
__device__ __forceinline__ void raise_after_stores(GemmEngine<Config> &e, mk_u32 *flag,
                                                   SendKind kind, mk_u32 value) {
  if (!e.tma_stored()) {
    // Only the senders wrote since this thread's stores last completed: they raise the flag
    // after their writes.
    post_signal(e, flag, kind, value);
    return;
  }
  if (e.pending_signals() == Config::kMaxPendingSignals)
    gemm_flush_signals(e);
  if (team_thread() == 0) {
    const mk_u64 pending = reinterpret_cast<mk_u64>(flag) | (kind == kSendStamp ? 1 : 0);
    asm volatile("st.shared.u64 [%0], %1;\n" ::"r"(e.pending_signal(e.pending_signals())),
                 "l"(pending)
                 : "memory");
    if (kind == kSendStamp)
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(e.pending_stamp()), "r"(value) : "memory");
  }
  ++e.pending_signals();
}

} // namespace detail

template <typename Config>
__device__ __forceinline__ void gemm_signal(GemmEngine<Config> &e, mk_u32 *flag) {
  detail::raise_after_stores(e, flag, detail::kSendSignal, 0);
}

template <typename Config>
__device__ __forceinline__ void gemm_stamp(GemmEngine<Config> &e, mk_u32 *flag, mk_u32 epoch) {
  detail::raise_after_stores(e, flag, detail::kSendStamp, epoch);
}

template <typename Config>
__device__ __forceinline__ void gemm_defer_wait(GemmEngine<Config> &e, const mk_u32 *flag,
                                                mk_u32 target) {
  // Flags held back go out first, as before any wait: what the peers wait for cannot queue
  // behind this one.
  gemm_flush_signals(e);
  e.wait_job() = e.sends();
  detail::post_send(e, detail::SendJob{reinterpret_cast<mk_u64>(flag), target, nullptr, 0, 0, 0,
                                       detail::kSendWait, 0, 0, 0, nullptr});
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

template <typename Config>
__device__ __forceinline__ void release(const GemmEngine<Config> &e, int s) {
  const int lane = threadIdx.x % 32;
  if constexpr (Config::kCluster == 1) {
    if (lane == 0)
      ptx::mbarrier_arrive(e.empty(s));
  } else if (lane < Config::kCluster) {
    ptx::mbarrier_arrive_cluster(e.empty(s), lane);
  }
}

/// The senders' addition of pairs of Out.
template <typename Out> struct PairOfOut;
template <> struct PairOfOut<bf16> { static constexpr SendKind kSendAdd = kSendAddBf16; };
template <> struct PairOfOut<f16> { static constexpr SendKind kSendAdd = kSendAddF16; };

/// Writes this thread's fragments of 64-column chunk `c` into `buffer` (128 rows of 128 bytes,
/// 128-byte swizzled, as the output map expects), then hands the buffer to `store`, which every
/// consumer thread calls (TMA stores are team thread 0's; the senders' jobs everyone's).
template <typename Out, typename Config, int C, typename Store>
__device__ __forceinline__ void store_chunks(GemmEngine<Config> &e, const GemmTile<C> &acc,
                                             Store store) {
  static_assert(C % 64 == 0 && C <= Config::BN, "64-column chunks, at most the engine's tile");
  // The previous tile's flags wait no longer than this tile's mainloop.
  gemm_flush_signals(e);
  const int wg = threadIdx.x / 128 - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int row = wg * 64 + warp * 16 + lane / 4;
#pragma unroll
  for (int c = 0; c < C / 64; ++c) {
    const int index = e.next_chunk();
    const mk_u32 buffer = e.chunk(index);
    // The buffer's previous stores (kEpilogueBuffers chunks ago) have read it.
    if (team_thread() == 0)
      ptx::bulk_wait_read<Config::kEpilogueBuffers - 1>();
    wait_buffer_sent(e, index);
    team_sync();
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int f = 8 * c + j; // the n8 fragment
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = row + 8 * half;
        const mk_u32 offset = r * 128 + ((j ^ (r % 8)) << 4) + (lane % 4) * 4;
        const float2 pair = acc.pairs[2 * f + half];
        const mk_u32 packed = pack_pair<Out>(pair.x, pair.y);
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(buffer + offset), "r"(packed) : "memory");
      }
    }
    ptx::fence_proxy_async_shared();
    team_sync();
    store(64 * c, buffer, index); // every consumer thread; TMA from team thread 0
    if (team_thread() == 0)
      ptx::bulk_commit();
  }
}

} // namespace detail

template <typename Config>
__device__ __forceinline__ GemmAccumulator<Config> gemm_mma(GemmEngine<Config> &e, int k_blocks) {
  GemmAccumulator<Config> acc;
  e.tile_complete() = true;
  const int wg = threadIdx.x / 128 - 1;
  if (wg >= Config::kMmaWarpgroups) {
    // Rows past A's loaded ones: only the ring's position moves on, in step with the others.
#pragma unroll
    for (int p = 0; p < GemmLayout<Config::BN>::kPairs; ++p)
      acc.pairs[p] = make_float2(0.0f, 0.0f);
    for (int kb = 0; kb < k_blocks; ++kb)
      e.advance();
    return acc;
  }
  int previous = 0;
  for (int kb = 0; kb < k_blocks; ++kb) {
    const int s = e.stage();
    ptx::mbarrier_wait(e.full(s), e.phase());
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < Config::kMmaPerStage; ++kk)
      ptx::Wgmma<typename Config::T, Config::BN>::template run<!Config::kBKMajor>(
          reinterpret_cast<float(&)[Config::BN / 2]>(acc.pairs), detail::a_descriptor(e, s, wg, kk),
          detail::b_descriptor(e, s, kk), kb > 0 || kk > 0);
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

template <typename Config>
__device__ __forceinline__ GemmAccumulator<Config>
gemm_sum_splits(GemmEngine<Config> &e, const GemmAccumulator<Config> &acc, float *slots,
                mk_u32 *arrivals, int split, int splits, mk_u32 epoch) {
  // Slot s holds 128 x BN floats; thread t's pairs 2q and 2q + 1 at float4 q * 256 + t, so that
  // each float4 of the team is one coalesced 4 KiB. Warpgroups past A's rows hold no product.
  constexpr int kQuads = GemmLayout<Config::BN>::kPairs / 2;
  constexpr int kSlotQuads = kQuads * MK_TEAM_THREADS;
  const int t = team_thread();
  const bool multiplies = static_cast<int>(threadIdx.x) / 128 - 1 < Config::kMmaWarpgroups;
  float4 *quads = reinterpret_cast<float4 *>(slots);
  const auto quad = [&](const GemmAccumulator<Config> &tile, int q) {
    return make_float4(tile.pairs[2 * q].x, tile.pairs[2 * q].y, tile.pairs[2 * q + 1].x,
                       tile.pairs[2 * q + 1].y);
  };
  if (multiplies) {
#pragma unroll
    for (int q = 0; q < kQuads; ++q)
      __stcg(quads + split * kSlotQuads + q * MK_TEAM_THREADS + t, quad(acc, q));
    __threadfence();
  }
  team_sync();
  if (t == 0) {
    mk_u32 before;
    asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;\n"
                 : "=r"(before)
                 : "l"(arrivals)
                 : "memory");
    const mk_u32 last = before + 1 == epoch * static_cast<mk_u32>(splits);
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(e.split_last()), "r"(last) : "memory");
  }
  team_sync();
  mk_u32 last;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(last) : "r"(e.split_last()) : "memory");
  e.tile_complete() = last != 0;
  if (!last || !multiplies)
    return acc;
  // The parts in order, each from its slot but this one's, summed in f32 (L2 reads: the slots
  // were written on other SMs).
  GemmAccumulator<Config> sum;
#pragma unroll
  for (int q = 0; q < kQuads; ++q) {
    const int at = q * MK_TEAM_THREADS + t;
    float4 total = split == 0 ? quad(acc, q) : __ldcg(quads + at);
#pragma unroll 1
    for (int s = 1; s < splits; ++s) {
      const float4 part = s == split ? quad(acc, q) : __ldcg(quads + s * kSlotQuads + at);
      total = make_float4(total.x + part.x, total.y + part.y, total.z + part.z, total.w + part.w);
    }
    sum.pairs[2 * q] = make_float2(total.x, total.y);
    sum.pairs[2 * q + 1] = make_float2(total.z, total.w);
  }
  return sum;
}

template <typename Config>
__device__ __forceinline__ bool gemm_tile_complete(GemmEngine<Config> &e) {
  return e.tile_complete();
}

template <typename Out, typename Config, int C>
__device__ __forceinline__ void gemm_store(GemmEngine<Config> &e, const GemmTile<C> &acc,
                                           const mk_tensor_map *map, int c0, int c1) {
  detail::begin_tma_stores(e);
  detail::store_chunks<Out>(e, acc, [&](int column, mk_u32 buffer, int) {
    if (team_thread() == 0)
      ptx::tma_store(map, c0 + column, c1, buffer);
  });
}

template <typename Out, typename Config, int C>
__device__ __forceinline__ void gemm_store(GemmEngine<Config> &e, const GemmTile<C> &acc,
                                           const mk_tensor_map *map, int c0, int c1, int c2) {
  detail::begin_tma_stores(e);
  detail::store_chunks<Out>(e, acc, [&](int column, mk_u32 buffer, int) {
    if (team_thread() == 0)
      ptx::tma_store(map, c0 + column, c1, c2, buffer);
  });
}

/// The tile to the same place of the 2-D tensor on several GPUs of the node, staged once: to
/// GPU (me + j) % gpus for j in [begin, end), stored or (kAdd) added. A whole tile goes through
/// the senders, at element `offset` of each GPU's part of `tensor`, rows `ld` elements apart; a
/// tile cut by the tensor's edges (or without `tensor`) through TMA and maps[gpu], which mask it.
template <typename Out, bool kAdd, typename Config, int C>
__device__ __forceinline__ void
gemm_store_to_gpus(GemmEngine<Config> &e, const GemmTile<C> &acc, const mk_tensor_map *maps, int me,
                   int begin, int end, int gpus, const mk_tensor_ref *tensor, long long offset,
                   int ld, int rows, int cols, int c0, int c1) {
  if (tensor && rows == Config::BM && cols == C) {
    unsigned char peers = 0;
    const mk_tensor_map *local = nullptr;
    for (int j = begin; j < end; ++j) {
      const int gpu = (me + j) % gpus;
      if (gpu == me)
        local = maps + gpu;
      else
        peers |= 1u << gpu;
    }
    const detail::SendKind kind = kAdd ? detail::PairOfOut<Out>::kSendAdd : detail::kSendStore;
    detail::store_chunks<Out>(e, acc, [&](int column, mk_u32, int index) {
      detail::post_send(
          e, detail::SendJob{reinterpret_cast<mk_u64>(tensor), static_cast<mk_u64>(offset + column),
                             local, static_cast<mk_u32>(ld), static_cast<mk_u32>(c0 + column),
                             static_cast<mk_u32>(c1), static_cast<unsigned char>(kind),
                             static_cast<unsigned char>(index), peers, 0, nullptr});
    });
    return;
  }
  detail::begin_tma_stores(e);
  // The first contribution, which a flag's acquire made visible, is read by the async proxy.
  if (kAdd && team_thread() == 0)
    ptx::fence_proxy_async();
  detail::store_chunks<Out>(e, acc, [&](int column, mk_u32 buffer, int) {
    for (int j = begin; j < end && team_thread() == 0; ++j) {
      const mk_tensor_map *map = maps + (me + j) % gpus;
      if constexpr (kAdd)
        ptx::tma_store_add(map, c0 + column, c1, buffer);
      else
        ptx::tma_store(map, c0 + column, c1, buffer);
    }
  });
}
/// Adds the tile to what the 2-D tensor of `map` holds at (c0, c1), where that memory is.
template <typename Out, typename Config, int C>
__device__ __forceinline__ void gemm_store_add(GemmEngine<Config> &e, const GemmTile<C> &acc,
                                               const mk_tensor_map *map, int c0, int c1) {
  gemm_store_to_gpus<Out, true>(e, acc, map, 0, 0, 1, 1, nullptr, 0, 0, 0, 0, c0, c1);
}
template <typename Out, typename Config, int C>
__device__ __forceinline__ void
gemm_store_gpus(GemmEngine<Config> &e, const GemmTile<C> &acc, const mk_tensor_map *maps, int me,
                int begin, int end, int gpus, const mk_tensor_ref *tensor, long long offset, int ld,
                int rows, int cols, int c0, int c1) {
  gemm_store_to_gpus<Out, false>(e, acc, maps, me, begin, end, gpus, tensor, offset, ld, rows, cols,
                                 c0, c1);
}
template <typename Out, typename Config, int C>
__device__ __forceinline__ void
gemm_store_add_gpus(GemmEngine<Config> &e, const GemmTile<C> &acc, const mk_tensor_map *maps,
                    int me, int begin, int end, int gpus, const mk_tensor_ref *tensor,
                    long long offset, int ld, int rows, int cols, int c0, int c1) {
  gemm_store_to_gpus<Out, true>(e, acc, maps, me, begin, end, gpus, tensor, offset, ld, rows, cols,
                                c0, c1);
}

template <typename Out, typename Config, int C>
__device__ __forceinline__ void
gemm_store_rows(GemmEngine<Config> &e, const GemmTile<C> &acc, const int *origins, int rows,
                int cols, const mk_tensor_ref *tensor, long long slots, int ld, long long column) {
  detail::store_chunks<Out>(e, acc, [&](int chunk_column, mk_u32, int index) {
    const int valid = min(max(cols - chunk_column, 0), 64);
    detail::post_send(e, detail::SendJob{reinterpret_cast<mk_u64>(tensor),
                                         static_cast<mk_u64>(column + chunk_column), nullptr,
                                         static_cast<mk_u32>(ld),
                                         static_cast<mk_u32>(rows | valid << 16),
                                         static_cast<mk_u32>(slots), detail::kSendRows,
                                         static_cast<unsigned char>(index), 0, 0, origins});
  });
}

/// The engine's CTAs leave its role for the pool (RoleOp's pool): its barriers ended once no CTA
/// of the cluster may still arrive on them, and the registers split evenly again (team_leave).
/// Every thread, after gemm_finish.
template <typename Config> __device__ __forceinline__ void gemm_leave(GemmEngine<Config> &e) {
  // Every warp of a warpgroup is past its last setmaxnreg, and the cluster's past its arrivals.
  if constexpr (Config::kCluster > 1)
    ptx::cluster_sync();
  else
    __syncthreads();
  e.invalidate_barriers();
  if (gemm_is_producer())
    ptx::setmaxnreg_inc<kEvenRegisters>();
  else
    ptx::setmaxnreg_dec<kEvenRegisters>();
}

template <typename Config> __device__ __forceinline__ void gemm_finish(GemmEngine<Config> &e) {
  gemm_flush_signals(e);
  detail::post_send(e,
                    detail::SendJob{0, 0, nullptr, 0, 0, 0, detail::kSendExit, 0, 0, 0, nullptr});
  if (team_thread() == 0)
    ptx::bulk_wait_all();
}

} // namespace mk

#endif // MK_DEVICE_IMPL_GEMM_ENGINE_FUNCS_CUH
