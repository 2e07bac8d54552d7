//===- mk/device/impl/comm__funcs.cuh - definitions for mk/device/comm.cuh -----------===//

#ifndef MK_DEVICE_IMPL_COMM_FUNCS_CUH
#define MK_DEVICE_IMPL_COMM_FUNCS_CUH

#include "mk/device/impl/comm__types.cuh"
#include "mk/device/impl/ptx__funcs.cuh"
#include "mk/device/impl/watch.cuh"
#include "mk/device/tile.cuh"

namespace mk {

template <typename T>
__device__ __forceinline__ void copy_region(const T *src, long long src_ld, T *dst,
                                            long long dst_ld, int rows, int cols) {
  using Vector = detail::Vector<T>;
  // Chunks in flight per thread: loads of one round are all issued before its stores.
  constexpr int kUnroll = 8;
  const bool aligned = detail::vector_aligned(src, src_ld) && detail::vector_aligned(dst, dst_ld);
  const int row_chunks = (cols + Vector::kSize - 1) / Vector::kSize;
  const int chunks = rows * row_chunks;
  for (int first = team_thread(); first < chunks; first += kUnroll * MK_TEAM_THREADS) {
    int row[kUnroll], col[kUnroll];
    Vector v[kUnroll];
#pragma unroll
    for (int i = 0; i < kUnroll; ++i) {
      const int index = first + i * MK_TEAM_THREADS;
      row[i] = index / row_chunks;
      col[i] = (index - row[i] * row_chunks) * Vector::kSize;
      if (index < chunks)
        v[i] = detail::load_chunk(src + row[i] * src_ld + col[i], min(cols - col[i], Vector::kSize),
                                  aligned);
    }
#pragma unroll
    for (int i = 0; i < kUnroll; ++i)
      if (first + i * MK_TEAM_THREADS < chunks)
        detail::store_chunk(dst + row[i] * dst_ld + col[i], v[i], min(cols - col[i], Vector::kSize),
                            aligned);
  }
}

__host__ __device__ constexpr int copy_region_bulk_smem_bytes() {
  return detail::BulkStaging::kBytes;
}

__device__ __forceinline__ BulkCopier::BulkCopier() : parities_(0) {
  __shared__ detail::BulkBarriers barriers;
  barriers_ = ptx::smem_address(&barriers);
  if (team_thread() == 0) {
    for (int s = 0; s < detail::BulkStaging::kSlots; ++s)
      ptx::mbarrier_init(barrier(s), 1);
    ptx::fence_mbarrier_init();
  }
  team_sync();
}

__device__ __forceinline__ mk_u32 BulkCopier::barrier(int slot) const {
  return barriers_ + slot * static_cast<int>(sizeof(mk_u64));
}

__device__ __forceinline__ mk_u32 BulkCopier::parity(int slot) const {
  return parities_ >> slot & 1;
}

__device__ __forceinline__ void BulkCopier::completed(int slot, int loads) {
  parities_ ^= static_cast<mk_u32>(loads & 1) << slot;
}

template <typename T>
__device__ __forceinline__ void copy_region_bulk(const T *src, long long src_ld, T *dst,
                                                 long long dst_ld, int rows, int cols, void *smem,
                                                 BulkCopier &copier) {
  using Staging = detail::BulkStaging;
  const long long row_bytes = static_cast<long long>(cols) * sizeof(T);
  if (row_bytes % 16 != 0 || !detail::vector_aligned(src, src_ld) ||
      !detail::vector_aligned(dst, dst_ld)) {
    copy_region(src, src_ld, dst, dst_ld, rows, cols);
    return;
  }
  if (rows <= 0 || cols <= 0)
    return;

  // Each batch fills one slot: as many whole rows as fit, or one slot-sized piece of a long row.
  const int row_pieces = int((row_bytes + Staging::kSlotBytes - 1) / Staging::kSlotBytes);
  const int batch_rows = row_pieces == 1 ? int(Staging::kSlotBytes / row_bytes) : 1;
  const int batches = row_pieces == 1 ? (rows + batch_rows - 1) / batch_rows : rows * row_pieces;
  const auto batch_at = [&](int b) -> detail::BulkBatch {
    if (row_pieces == 1)
      return {b * batch_rows, min(batch_rows, rows - b * batch_rows), 0, int(row_bytes)};
    const long long offset = static_cast<long long>(b % row_pieces) * Staging::kSlotBytes;
    return {b / row_pieces, 1, offset,
            int(min(row_bytes - offset, (long long)Staging::kSlotBytes))};
  };
  const mk_u32 slots = ptx::smem_address(smem);
  const auto slot = [&](int b) { return slots + b % Staging::kSlots * Staging::kSlotBytes; };
  const auto barrier = [&](int b) { return copier.barrier(b % Staging::kSlots); };
  const char *src_bytes = reinterpret_cast<const char *>(src);
  char *dst_bytes = reinterpret_cast<char *>(dst);
  const long long src_pitch = src_ld * sizeof(T), dst_pitch = dst_ld * sizeof(T);

  // Every thread's earlier ordinary accesses (to this shared memory, to the source) come before
  // the bulk-copy engine's.
  ptx::fence_proxy_async();
  team_sync();

  // One warp drives the engine; its lanes issue the per-row copies of a batch.
  if (team_thread() < 32) {
    const int lane = team_thread();
    const auto load = [&](int b) {
      const detail::BulkBatch batch = batch_at(b);
      if (lane == 0)
        ptx::mbarrier_arrive_expect_tx(barrier(b), batch.count * batch.bytes);
      __syncwarp();
      for (int i = lane; i < batch.count; i += 32)
        ptx::bulk_copy_global_to_shared(
            slot(b) + i * batch.bytes, src_bytes + (batch.first_row + i) * src_pitch + batch.offset,
            batch.bytes, barrier(b));
    };
    const auto store = [&](int b) {
      const detail::BulkBatch batch = batch_at(b);
      // The slot's phase when the call began, on by one for each of its earlier batches.
      ptx::mbarrier_wait(barrier(b), copier.parity(b % Staging::kSlots) ^ b / Staging::kSlots % 2);
      for (int i = lane; i < batch.count; i += 32)
        ptx::bulk_copy_shared_to_global(dst_bytes + (batch.first_row + i) * dst_pitch +
                                            batch.offset,
                                        slot(b) + i * batch.bytes, batch.bytes);
      ptx::bulk_commit();
    };
    for (int b = 0; b < min(batches, Staging::kSlots); ++b)
      load(b);
    for (int b = 0; b < batches; ++b) {
      store(b);
      // Refill the slot of batch b - 1 once its stores have read it: all but the newest group.
      if (b >= 1 && b - 1 + Staging::kSlots < batches) {
        ptx::bulk_wait_read<1>();
        __syncwarp();
        load(b - 1 + Staging::kSlots);
      }
    }
    // The writes are complete, and ordered before what the CTA does next (a signal, say).
    ptx::bulk_wait_all();
    ptx::fence_proxy_async();
    __syncwarp();
  }
  // Slot s took the batches s, s + kSlots, ...; every thread keeps the phases, warp 0 uses them.
  for (int s = 0; s < Staging::kSlots; ++s)
    copier.completed(s, (batches - s + Staging::kSlots - 1) / Staging::kSlots);
  team_sync();
}

__device__ __forceinline__ void signal(mk_u32 *flag) {
  // The barrier orders every thread's writes before thread 0's release, and release is
  // cumulative: a waiter that acquires the new count sees them all.
  // The engine's tile stores are bulk copies issued by team thread 0: they complete first.
  team_sync();
  if (team_thread() == 0) {
    ptx::bulk_wait_all();
    ptx::fence_proxy_async();
    ptx::red_add_release_sys(flag, 1);
  }
}

__device__ __forceinline__ void stamp(mk_u32 *flag, mk_u32 value) {
  team_sync();
  if (team_thread() == 0) {
    ptx::bulk_wait_all();
    ptx::fence_proxy_async();
    ptx::store_release_sys(flag, value);
  }
}

__device__ __forceinline__ void wait(const mk_u32 *flag, mk_u32 target) {
  if (team_thread() == 0) {
    detail::Backoff backoff;
    detail::wait_at_least(flag, target, [&] { backoff.pause(); });
  }
  team_sync();
}

__device__ __forceinline__ bool proxy_aborted(const mk_command_queue &q) {
  return *q.abort != MK_QUEUE_RUNNING;
}

__device__ __forceinline__ void proxy_push(const mk_command_queue &q, const mk_command &command) {
  team_sync();
  if (team_thread() != 0)
    return;
  // The engine's tile stores (bulk copies of this thread) are complete before the proxy reads.
  ptx::bulk_wait_all();
  ptx::fence_proxy_async();
  const mk_u64 ticket = atomicAdd(&q.head[MK_QUEUE_NEXT_TICKET], 1ull);
  detail::proxy_pushed = ticket + 1;
  // The slot is free once the proxy has consumed the command a lap before. The tail a producer
  // last read (in device memory) usually shows it, saving a read across PCIe.
  mk_u64 *tail_seen = &q.head[MK_QUEUE_TAIL_SEEN];
  if (ticket - ptx::load_acquire_gpu(tail_seen) >= q.capacity) {
    detail::Backoff backoff;
    mk_u64 tail;
    for (unsigned spins = 1; ticket - (tail = ptx::load_acquire_sys(q.tail)) >= q.capacity;
         ++spins) {
      if (spins % detail::kAbortCheckSpins == 0 && proxy_aborted(q))
        return;
      backoff.pause();
    }
    ptx::red_max_release_gpu(tail_seen, tail);
  }
  mk_u64 *slot = reinterpret_cast<mk_u64 *>(&q.slots[ticket & (q.capacity - 1)]);
  const mk_u64 *words = reinterpret_cast<const mk_u64 *>(&command);
  for (int i = 1; i < static_cast<int>(sizeof(mk_command) / sizeof(mk_u64)); ++i)
    slot[i] = words[i];
  // Word 0 publishes the others, and the team's writes before the barrier.
  const mk_u64 header = static_cast<mk_u32>(ticket + 1) | static_cast<mk_u64>(command.op) << 32 |
                        static_cast<mk_u64>(command.view) << 48;
  ptx::store_release_sys(slot, header);
}

__device__ __forceinline__ void proxy_wait_reads(const mk_command_queue &q) {
  if (team_thread() != 0 || detail::proxy_pushed == 0)
    return;
  // The tail passes a ticket once the proxy is done with it and with every earlier one.
  detail::Backoff backoff;
  for (unsigned spins = 1;
       static_cast<long long>(ptx::load_acquire_sys(q.tail) - detail::proxy_pushed) < 0; ++spins) {
    if (spins % detail::kAbortCheckSpins == 0 && proxy_aborted(q))
      return;
    backoff.pause();
  }
}

namespace detail {

/// What a team hands its publisher for one reduced tile: where to store it, then which flags to
/// raise once the stores are complete.
struct PublishBatch {
  static constexpr int kMaxStores = MK_MAX_GPUS_PER_NODE, kMaxSignals = 2 * MK_MAX_GPUS_PER_NODE;
  const mk_tensor_map *maps[kMaxStores];
  int coords[kMaxStores][3];
  int rank[kMaxStores];
  mk_u32 *flags[kMaxSignals];
  int stores, signals, stop;
};

} // namespace detail

template <int kSlots, typename T, typename Out, int R, int C> class TmaReduce {
public:
  static_assert(sizeof(T) == 2 && sizeof(Out) == 2, "16-bit elements in and out");
  static_assert(R <= 256 && C % 64 == 0, "boxes of 64 columns by at most 256 rows");
  static constexpr int kBoxes = C / 64, kBoxBytes = R * 128, kTileBytes = kBoxes * kBoxBytes;
  // The slots' tiles, the result, the mbarriers (the slots' loads; the result read by the
  // publisher's stores; two batches ready and done), two batches. 1 KiB of slack aligns the tiles
  // for the 128-byte swizzle.
  static constexpr int kBarriersOffset = (kSlots + 1) * kTileBytes;
  static constexpr int kBatchesOffset = kBarriersOffset + 6 * 8;
  static constexpr int kBytes = 1024 + kBatchesOffset + 2 * int(sizeof(detail::PublishBatch));

  /// Every thread of the CTA: the team's threads reduce, the others publish (tma_publish).
  __device__ explicit TmaReduce(void *smem)
      : tiles_(0), batches_(0),
        smem_(static_cast<unsigned char *>(smem) +
              (((ptx::smem_address(smem) + 1023) & ~1023u) - ptx::smem_address(smem))),
        base_(ptx::smem_address(smem_)) {
    if (threadIdx.x == 0) {
      for (int b = 0; b < 6; ++b)
        ptx::mbarrier_init(base_ + kBarriersOffset + 8 * b, 1);
      ptx::fence_mbarrier_init();
    }
    __syncthreads();
  }
  __device__ mk_u32 slot(int s) const { return base_ + s * kTileBytes; }
  __device__ mk_u32 result() const { return slot(kSlots); }
  __device__ mk_u32 loaded() const { return base_ + kBarriersOffset; }
  __device__ mk_u32 result_free() const { return loaded() + 8; }
  __device__ mk_u32 ready(int b) const { return loaded() + 16 + 8 * b; }
  __device__ mk_u32 done(int b) const { return loaded() + 32 + 8 * b; }
  __device__ detail::PublishBatch &batch(int b) const {
    return reinterpret_cast<detail::PublishBatch *>(smem_ + kBatchesOffset)[b];
  }

  // The team's progress: tiles reduced, batches handed over (and the one being filled).
  int tiles_, batches_;

private:
  unsigned char *smem_;
  mk_u32 base_;
};

namespace detail {

/// Team thread 0: starts filling batch `reduce.batches_` once the publisher is done with the
/// batch that used its buffer two batches ago.
template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ PublishBatch &open_batch(TmaReduce<kSlots, T, Out, R, C> &reduce) {
  const int b = reduce.batches_;
  if (b >= 2)
    ptx::mbarrier_wait(reduce.done(b % 2), (b / 2 - 1) & 1);
  PublishBatch &batch = reduce.batch(b % 2);
  batch.stores = batch.signals = batch.stop = 0;
  return batch;
}

} // namespace detail

template <Reduce kOp, int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ ReducedTile tma_reduce(TmaReduce<kSlots, T, Out, R, C> &reduce,
                                                  const mk_tensor_map *map, int c0, int c1,
                                                  int slot0) {
  using Stage = TmaReduce<kSlots, T, Out, R, C>;
  const int tile = reduce.tiles_++;
  if (team_thread() == 0) {
    ptx::mbarrier_arrive_expect_tx(reduce.loaded(), kSlots * Stage::kTileBytes);
    for (int s = 0; s < kSlots; ++s)
      for (int b = 0; b < Stage::kBoxes; ++b)
        ptx::tma_load(reduce.slot(s) + b * Stage::kBoxBytes, map, c0 + 64 * b, c1, slot0 + s,
                      reduce.loaded());
    detail::open_batch(reduce);
  }
  ptx::mbarrier_wait(reduce.loaded(), tile & 1);
  // The previous tile's stores have read the result.
  if (tile > 0)
    ptx::mbarrier_wait(reduce.result_free(), (tile - 1) & 1);
  // Every slot has the same (swizzled) layout: combine 16-byte units into the result's.
  using In = detail::Vector<T>;
  using Result = detail::Vector<Out>;
  constexpr int kUnits = Stage::kTileBytes / 16;
  static_assert(kUnits % MK_TEAM_THREADS == 0, "the same units for every thread");
#pragma unroll 4
  for (int u = team_thread(); u < kUnits; u += MK_TEAM_THREADS) {
    float sum[In::kSize];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) {
      In v;
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(reinterpret_cast<mk_u32 *>(v.elements)[0]),
                     "=r"(reinterpret_cast<mk_u32 *>(v.elements)[1]),
                     "=r"(reinterpret_cast<mk_u32 *>(v.elements)[2]),
                     "=r"(reinterpret_cast<mk_u32 *>(v.elements)[3])
                   : "r"(reduce.slot(s) + u * 16));
#pragma unroll
      for (int e = 0; e < In::kSize; ++e)
        sum[e] = s == 0 ? float(v.elements[e]) : detail::combine<kOp>(sum[e], float(v.elements[e]));
    }
    Result out;
#pragma unroll
    for (int e = 0; e < Result::kSize; e += 2)
      reinterpret_cast<typename detail::PairOf<Out>::type *>(out.elements)[e / 2] =
          detail::from_float2<Out>(make_float2(sum[e], sum[e + 1]));
    const mk_u32 *words = reinterpret_cast<const mk_u32 *>(out.elements);
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(reduce.result() + u * 16),
                 "r"(words[0]), "r"(words[1]), "r"(words[2]), "r"(words[3])
                 : "memory");
  }
  ptx::fence_proxy_async_shared();
  team_sync();
  return {};
}

namespace detail {

template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ void add_store(TmaReduce<kSlots, T, Out, R, C> &reduce,
                                          const mk_tensor_map *map, int rank, int c0, int c1,
                                          int c2) {
  if (team_thread() != 0)
    return;
  PublishBatch &batch = reduce.batch(reduce.batches_ % 2);
  const int i = batch.stores++;
  batch.maps[i] = map;
  batch.rank[i] = rank;
  batch.coords[i][0] = c0;
  batch.coords[i][1] = c1;
  batch.coords[i][2] = c2;
}

} // namespace detail

template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ void tma_store_reduced(TmaReduce<kSlots, T, Out, R, C> &reduce,
                                                  ReducedTile, const mk_tensor_map *map, int c0,
                                                  int c1) {
  detail::add_store(reduce, map, 2, c0, c1, 0);
}

template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ void tma_store_reduced(TmaReduce<kSlots, T, Out, R, C> &reduce,
                                                  ReducedTile, const mk_tensor_map *map, int c0,
                                                  int c1, int c2) {
  detail::add_store(reduce, map, 3, c0, c1, c2);
}

template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ void tma_signal(TmaReduce<kSlots, T, Out, R, C> &reduce, mk_u32 *flag) {
  if (team_thread() != 0)
    return;
  detail::PublishBatch &batch = reduce.batch(reduce.batches_ % 2);
  batch.flags[batch.signals++] = flag;
}

template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ void tma_commit(TmaReduce<kSlots, T, Out, R, C> &reduce) {
  const int b = reduce.batches_++;
  if (team_thread() == 0)
    ptx::mbarrier_arrive(reduce.ready(b % 2));
}

template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ void tma_reduce_finish(TmaReduce<kSlots, T, Out, R, C> &reduce) {
  if (team_thread() == 0)
    detail::open_batch(reduce).stop = 1;
  tma_commit(reduce);
}

template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ void tma_publish(TmaReduce<kSlots, T, Out, R, C> &reduce) {
  using Stage = TmaReduce<kSlots, T, Out, R, C>;
  if (threadIdx.x != MK_TEAM_THREADS)
    return;
  for (int b = 0;; ++b) {
    ptx::mbarrier_wait(reduce.ready(b % 2), (b / 2) & 1);
    const detail::PublishBatch &batch = reduce.batch(b % 2);
    if (batch.stop)
      return;
    for (int i = 0; i < batch.stores; ++i)
      for (int box = 0; box < Stage::kBoxes; ++box) {
        const int *c = batch.coords[i];
        const mk_u32 src = reduce.result() + box * Stage::kBoxBytes;
        if (batch.rank[i] == 2)
          ptx::tma_store(batch.maps[i], c[0] + 64 * box, c[1], src);
        else
          ptx::tma_store(batch.maps[i], c[0] + 64 * box, c[1], c[2], src);
      }
    ptx::bulk_commit();
    ptx::bulk_wait_read<0>();
    ptx::mbarrier_arrive(reduce.result_free());
    // Flags follow their data: every store of the batch is complete and published first.
    ptx::bulk_wait_all();
    ptx::fence_proxy_async();
    for (int i = 0; i < batch.signals; ++i)
      ptx::red_add_release_sys(batch.flags[i], 1);
    ptx::mbarrier_arrive(reduce.done(b % 2));
  }
}

} // namespace mk

#endif // MK_DEVICE_IMPL_COMM_FUNCS_CUH
