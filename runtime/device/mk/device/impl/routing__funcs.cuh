//===- mk/device/impl/routing__funcs.cuh - definitions for mk/device/routing.cuh -----===//

#ifndef MK_DEVICE_IMPL_ROUTING_FUNCS_CUH
#define MK_DEVICE_IMPL_ROUTING_FUNCS_CUH

#include "mk/device/impl/tile__funcs.cuh"

namespace mk {

namespace detail {

/// Records the first copy of this rank's tokens (index `copy`) whose expert index lies outside
/// the experts, unless the host has yet to read an earlier one.
__device__ __forceinline__ void report_invalid(mk_routing_report *report, int copy, int top_k,
                                               int expert) {
  volatile mk_routing_report *out = report;
  if (out->invalid)
    return;
  out->invalid_token = copy / top_k;
  out->invalid_choice = copy % top_k;
  out->invalid_expert = expert;
  __threadfence_system();
  out->invalid = 1;
}

/// One warp gives the copies [begin, end) (routed by `experts`) their slots in order, 32 at a
/// time: a copy's slot is its expert's next (`next`, in shared memory, advanced) plus the earlier
/// lanes with the same expert. place(c, x, slot) for each, x -1 for an index outside the experts.
template <int kExperts, typename Place>
__device__ __forceinline__ void take_slots(const int *experts, int begin, int end, int *next,
                                           int lane, Place place) {
  for (int base = begin; base < end; base += 32) {
    const int c = base + lane;
    const int x = c < end ? experts[c] : -1;
    const bool routable = x >= 0 && x < kExperts;
    const unsigned group = __match_any_sync(0xffffffffu, routable ? x : -1);
    const int before = __popc(group & ((1u << lane) - 1));
    const int slot = routable ? next[x] + before : 0;
    __syncwarp();
    if (routable && before == __popc(group) - 1)
      next[x] = slot + 1;
    __syncwarp();
    if (c < end)
      place(c, routable ? x : -1, slot);
  }
}

} // namespace detail

// ---- Point to point -----------------------------------------------------------------------

namespace detail {

/// A warp's bulk copies of rows, global to shared to global, lane 0's: a ring of kSlots slots of
/// kSlotBytes, each with an mbarrier and the destination of its piece, so that kSlots loads are in
/// flight while the oldest piece is stored. Rows longer than a slot go in pieces.
struct RowMover {
  static constexpr int kSlots = 3, kSlotBytes = 8 * 1024;
  struct Piece {
    char *to;
    mk_u64 bytes;
  };
  // Each warp's share a multiple of 128 bytes, so that every warp's slots keep the 128-byte
  // alignment of the first (bulk copies need 16; 16 alone ran slower: row_movers).
  static constexpr int kWarpBytes =
      (kSlots * (kSlotBytes + 8 + int(sizeof(Piece))) + 127) / 128 * 128;

  /// The warp's slots, barriers and pieces at `smem` (kWarpBytes, 128-byte aligned); lane 0
  /// initialises the barriers, which the CTA's barrier then publishes.
  __device__ explicit RowMover(unsigned char *smem)
      : slots_(ptx::smem_address(smem)), barriers_(slots_ + kSlots * kSlotBytes),
        pieces_(reinterpret_cast<Piece *>(smem + kSlots * (kSlotBytes + 8))) {
    if (threadIdx.x % 32 == 0)
      for (int s = 0; s < kSlots; ++s)
        ptx::mbarrier_init(barriers_ + 8 * s, 1);
  }

  /// Lane 0: copies `bytes` (a multiple of 16, both ends 16-byte aligned) from `from` to `to`.
  __device__ __forceinline__ void copy(char *to, const char *from, long long bytes) {
    for (long long offset = 0; offset < bytes; offset += kSlotBytes) {
      if (issued_ - stored_ == kSlots) {
        store_oldest();
        // The slot's last store has read it.
        ptx::bulk_wait_read<0>();
      }
      const int s = issued_ % kSlots;
      const mk_u32 piece = static_cast<mk_u32>(min(bytes - offset, (long long)kSlotBytes));
      ptx::mbarrier_arrive_expect_tx(barriers_ + 8 * s, piece);
      ptx::bulk_copy_global_to_shared(slots_ + s * kSlotBytes, from + offset, piece,
                                      barriers_ + 8 * s);
      pieces_[s] = Piece{to + offset, piece};
      ++issued_;
    }
  }

  /// Lane 0: stores what is loaded, and waits until the stores' writes are done.
  __device__ __forceinline__ void drain() {
    while (stored_ < issued_)
      store_oldest();
    ptx::bulk_wait_all();
    ptx::fence_proxy_async();
  }

private:
  __device__ __forceinline__ void store_oldest() {
    const int s = stored_ % kSlots;
    ptx::mbarrier_wait(barriers_ + 8 * s, (stored_ / kSlots) & 1);
    const Piece piece = pieces_[s];
    ptx::bulk_copy_shared_to_global(piece.to, slots_ + s * kSlotBytes,
                                    static_cast<mk_u32>(piece.bytes));
    ptx::bulk_commit();
    ++stored_;
  }

  mk_u32 slots_, barriers_;
  Piece *pieces_;
  int issued_ = 0, stored_ = 0;
};

/// The bytes before route_rows' row movers: the experts' next slots and team_sum's word (or a
/// census's counts and the first invalid copy).
template <int kExperts> constexpr int kRouteHeaderBytes = (kExperts + 1) * 4;

/// Where route_rows' row movers start in its shared memory `smem`: after the header, on the next
/// 128-byte boundary of the shared window (bulk copies into slots only 16-byte aligned ran the
/// dispatch slower: docs/notes/moe.md v5).
template <int kExperts> __device__ __forceinline__ unsigned char *row_movers(void *smem) {
  const mk_u32 at = ptx::smem_address(smem);
  return static_cast<unsigned char *>(smem) + ((at + kRouteHeaderBytes<kExperts> + 127) & ~127u) -
         at;
}

} // namespace detail

template <int kExperts> __host__ __device__ constexpr int route_smem_bytes() {
  // The header, up to 127 bytes to align the movers, then each warp's row mover.
  return detail::kRouteHeaderBytes<kExperts> + 127 + kTeamWarps * detail::RowMover::kWarpBytes;
}

namespace detail {

/// The team's sum of `value`, in every thread; `scratch` is one word of shared memory.
__device__ __forceinline__ unsigned team_sum(unsigned value, unsigned *scratch) {
  if (team_thread() == 0)
    *scratch = 0;
  team_sync();
  value = __reduce_add_sync(0xffffffffu, value);
  if (team_thread() % 32 == 0)
    atomicAdd(scratch, value);
  team_sync();
  const unsigned sum = *scratch;
  team_sync();
  return sum;
}

/// One warp copies a row of `count` T from `from` to `to`, 16 bytes a lane where both allow.
template <typename T>
__device__ __forceinline__ void copy_row(T *to, const T *from, long long count, int lane) {
  const long long bytes = count * static_cast<long long>(sizeof(T));
  if ((reinterpret_cast<unsigned long long>(to) | reinterpret_cast<unsigned long long>(from) |
       static_cast<unsigned long long>(bytes)) %
          16 ==
      0) {
    const uint4 *src = reinterpret_cast<const uint4 *>(from);
    uint4 *dst = reinterpret_cast<uint4 *>(to);
    const long long units = bytes / 16;
    // 8 KiB of a warp's loads in flight before its stores: the team's 64 KiB keep an SM's loads
    // from waiting on memory's latency.
    constexpr int kInFlight = 16;
    for (long long u = lane; u < units; u += 32 * kInFlight) {
      uint4 v[kInFlight];
#pragma unroll
      for (int k = 0; k < kInFlight; ++k)
        if (u + 32 * k < units)
          v[k] = src[u + 32 * k];
#pragma unroll
      for (int k = 0; k < kInFlight; ++k)
        if (u + 32 * k < units)
          dst[u + 32 * k] = v[k];
    }
    return;
  }
  for (long long i = lane; i < count; i += 32)
    to[i] = from[i];
}

} // namespace detail

template <int kExperts>
__device__ __forceinline__ void route_census(const int *experts, int tokens, int top_k,
                                             const mk_tensor_ref *census, int me, int gpus,
                                             mk_routing_report *report, void *smem) {
  int *count = static_cast<int *>(smem);
  unsigned *invalid = reinterpret_cast<unsigned *>(count + kExperts);
  for (int e = team_thread(); e < kExperts; e += MK_TEAM_THREADS)
    count[e] = 0;
  if (team_thread() == 0)
    *invalid = ~0u;
  team_sync();
  const int copies = tokens * top_k;
  unsigned first_invalid = ~0u;
  for (int c = team_thread(); c < copies; c += MK_TEAM_THREADS) {
    const int x = experts[c];
    if (x >= 0 && x < kExperts)
      atomicAdd(&count[x], 1);
    else
      first_invalid = min(first_invalid, static_cast<unsigned>(c));
  }
  first_invalid = __reduce_min_sync(0xffffffffu, first_invalid);
  if (team_thread() % 32 == 0 && first_invalid != ~0u)
    atomicMin(invalid, first_invalid);
  team_sync();
  for (int i = team_thread(); i < gpus * kExperts; i += MK_TEAM_THREADS)
    static_cast<int *>(census->peer[i / kExperts])[me * kExperts + i % kExperts] =
        count[i % kExperts];
  if (team_thread() == 0 && *invalid != ~0u)
    detail::report_invalid(report, static_cast<int>(*invalid), top_k, experts[*invalid]);
  team_sync();
}

template <int kExperts>
__device__ __forceinline__ void route_counts(const int *census, int ranks, int me, int expert_first,
                                             int local_experts, int capacity, int *counts,
                                             mk_routing_report *report, mk_u32 epoch, void *smem) {
  for (int e = team_thread(); e < local_experts; e += MK_TEAM_THREADS) {
    long long total = 0;
    for (int r = 0; r < ranks; ++r)
      total += census[r * kExperts + expert_first + e];
    counts[e] = static_cast<int>(min(total, static_cast<long long>(capacity)));
  }
  // Rank me's copies to e take the slots after those of ranks before it.
  unsigned dropped = 0;
  for (int e = team_thread(); e < kExperts; e += MK_TEAM_THREADS) {
    long long before = 0;
    for (int r = 0; r < me; ++r)
      before += census[r * kExperts + e];
    const long long mine = census[me * kExperts + e];
    dropped += static_cast<unsigned>(max(0ll, min(mine, before + mine - capacity)));
  }
  dropped = detail::team_sum(dropped, static_cast<unsigned *>(smem));
  if (team_thread() == 0) {
    volatile mk_routing_report *out = report;
    out->dropped = dropped;
    __threadfence_system();
    out->epoch = epoch;
  }
}

template <int kExperts, typename T>
__device__ __noinline__ void
route_rows(const T *rows, const int *experts, int tokens, int top_k, long long hidden,
           const int *census, int me, int gpus, int expert_first, long long origin_first,
           int local_experts, int capacity, const mk_tensor_ref *routed,
           const mk_tensor_ref *origins, int *placement, int *returns, mk_u32 *const *flags,
           long long arrivals, mk_u64 *nvlink_bytes, int cta, int ctas, void *smem) {
  int *next = static_cast<int *>(smem); // each expert's next slot for this CTA's copies
  const int begin = static_cast<int>(static_cast<long long>(tokens) * cta / ctas) * top_k;
  const int end = static_cast<int>(static_cast<long long>(tokens) * (cta + 1) / ctas) * top_k;
  for (int e = team_thread(); e < kExperts; e += MK_TEAM_THREADS)
    next[e] = 0;
  team_sync();
  // The slots before this CTA's: this rank's copies in the chunks before, then the lower ranks'.
  for (int c = team_thread(); c < begin; c += MK_TEAM_THREADS) {
    const int x = experts[c];
    if (x >= 0 && x < kExperts)
      atomicAdd(&next[x], 1);
  }
  team_sync();
  for (int e = team_thread(); e < kExperts; e += MK_TEAM_THREADS) {
    int before = 0;
    for (int r = 0; r < me; ++r)
      before += census[r * kExperts + e];
    next[e] += before;
  }
  team_sync();
  // One warp places the chunk's copies in order, 32 at a time: a copy's slot is its expert's next
  // plus the earlier lanes with the same expert.
  if (team_thread() < 32)
    detail::take_slots<kExperts>(
        experts, begin, end, next, team_thread(), [&](int c, int x, int slot) {
          placement[c] = x >= 0 && slot < capacity ? x * capacity + slot : -1;
        });
  // Rows a rail peer packed: a copy to this node comes back to the row of its index among the
  // peer's copies to this node, as route_pack numbered them there.
  const auto here = [&](int x) {
    return x >= expert_first && x < expert_first + gpus * local_experts;
  };
  if (returns) {
    unsigned before = 0;
    for (int c = team_thread(); c < begin; c += MK_TEAM_THREADS)
      before += here(experts[c]);
    before = detail::team_sum(before, reinterpret_cast<unsigned *>(next + kExperts));
    if (team_thread() < 32) {
      const int lane = team_thread();
      for (int base = begin; base < end; base += 32) {
        const int c = base + lane;
        const bool mine = c < end && here(experts[c]);
        const unsigned ballot = __ballot_sync(0xffffffffu, mine);
        if (mine)
          returns[c] = static_cast<int>(before + __popc(ballot & ((1u << lane) - 1)));
        before += __popc(ballot);
      }
    }
  }
  team_sync();
  // The rows, expert by expert: each warp takes 32 copies at a time and copies the rows of those
  // routed to the expert, one after another, with bulk copies where rows are whole 16-byte
  // units. Then the expert's GPU learns this CTA is done.
  const int warp = team_thread() / 32, lane = team_thread() % 32;
  const long long row_bytes = hidden * static_cast<long long>(sizeof(T));
  const bool bulk = row_bytes % 16 == 0 && reinterpret_cast<unsigned long long>(rows) % 16 == 0;
  detail::RowMover mover(detail::row_movers<kExperts>(smem) + warp * detail::RowMover::kWarpBytes);
  ptx::fence_mbarrier_init();
  team_sync();
  mk_u64 elsewhere = 0; // lane 0's rows to other GPUs
  for (int l = 0; l < local_experts; ++l) {
    for (int step = 1; step <= gpus; ++step) {
      const int gpu = (me + step) % gpus, e = expert_first + gpu * local_experts + l;
      T *to = static_cast<T *>(routed->peer[gpu]) + static_cast<long long>(l) * capacity * hidden;
      int *origin = static_cast<int *>(origins->peer[gpu]) + static_cast<long long>(l) * capacity;
      for (int first = begin + warp * 32; first < end; first += kTeamWarps * 32) {
        const int at = first + lane < end ? placement[first + lane] : -1;
        unsigned hits = __ballot_sync(0xffffffffu, at >= 0 && at / capacity == e);
        while (hits) {
          const int hit = __ffs(hits) - 1;
          hits &= hits - 1;
          const int c = first + hit, slot = __shfl_sync(0xffffffffu, at, hit) - e * capacity;
          T *row_to = to + static_cast<long long>(slot) * hidden;
          const T *row_from = rows + static_cast<long long>(c / top_k) * hidden;
          if (!bulk)
            detail::copy_row(row_to, row_from, hidden, lane);
          else if (lane == 0)
            mover.copy(reinterpret_cast<char *>(row_to), reinterpret_cast<const char *>(row_from),
                       row_bytes);
          if (lane == 0) {
            origin[slot] = static_cast<int>(origin_first + (returns ? returns[c] : c));
            elsewhere += gpu == me % gpus ? 0 : row_bytes;
          }
        }
      }
      // As mk::signal: the barrier orders every thread's writes (the bulk copies' done) before
      // thread 0's release.
      if (lane == 0)
        mover.drain();
      team_sync();
      if (team_thread() == 0)
        ptx::red_add_release_sys(flags[gpu] + arrivals + e, 1);
    }
  }
  if (lane == 0 && elsewhere)
    atomicAdd(nvlink_bytes, elsewhere);
}

template <int kExperts, typename T>
__device__ __forceinline__ void route_pack(const T *rows, const int *experts, int tokens, int top_k,
                                           long long hidden, int node, int nodes, int node_experts,
                                           T *pack, int *pack_experts, int *packed, int *return_at,
                                           int cta, int ctas, void *smem) {
  unsigned *scratch = static_cast<unsigned *>(smem); // team_sum's word, then the chunk's count
  const int begin = static_cast<int>(static_cast<long long>(tokens) * cta / ctas);
  const int end = static_cast<int>(static_cast<long long>(tokens) * (cta + 1) / ctas);
  const int warp = team_thread() / 32, lane = team_thread() % 32;
  const long long region = static_cast<long long>(tokens) * top_k; // rows of `returned` a node
  auto node_of = [&](int x) { return x >= 0 && x < kExperts ? x / node_experts : -1; };
  // This node's copies come back to region `node` as they are; a copy to no expert, nowhere.
  for (int c = begin * top_k + team_thread(); c < end * top_k; c += MK_TEAM_THREADS)
    return_at[c] = node_of(experts[c]) == node ? static_cast<int>(node * region + c) : -1;
  for (int m = 0; m < nodes; ++m) {
    if (m == node)
      continue;
    auto bound = [&](int t) {
      bool any = false;
      for (int j = 0; j < top_k; ++j)
        any |= node_of(experts[t * top_k + j]) == m;
      return any;
    };
    // The tokens bound for m in the chunks before this CTA's: where its packed rows start.
    unsigned before = 0;
    for (int t = team_thread(); t < begin; t += MK_TEAM_THREADS)
      before += bound(t);
    before = detail::team_sum(before, scratch);
    // And their copies to m, where the results come back: each copy's index among them.
    unsigned copies_before = 0;
    for (int c = team_thread(); c < begin * top_k; c += MK_TEAM_THREADS)
      copies_before += node_of(experts[c]) == m;
    copies_before = detail::team_sum(copies_before, scratch);
    // One warp numbers the chunk's tokens bound for m in order, 32 at a time, and their copies.
    if (warp == 0) {
      unsigned next = before, copies = copies_before;
      for (int base = begin; base < end; base += 32) {
        const int t = base + lane;
        const bool mine = t < end && bound(t);
        int count = 0;
        for (int j = 0; mine && j < top_k; ++j)
          count += node_of(experts[t * top_k + j]) == m;
        // The copies of the earlier lanes' tokens: an inclusive scan of the counts, less this one.
        int below = count;
        for (int d = 1; d < 32; d *= 2) {
          const int other = __shfl_up_sync(0xffffffffu, below, d);
          if (lane >= d)
            below += other;
        }
        unsigned q = copies + below - count;
        for (int j = 0; mine && j < top_k; ++j)
          if (node_of(experts[t * top_k + j]) == m)
            return_at[t * top_k + j] = static_cast<int>(m * region + q++);
        const unsigned ballot = __ballot_sync(0xffffffffu, mine);
        next += __popc(ballot);
        copies += __shfl_sync(0xffffffffu, below, 31);
      }
      if (lane == 0) {
        scratch[1] = next;
        scratch[2] = copies;
      }
    }
    team_sync();
    // Each warp packs whole rows, and their routing, at the index the scan gave them: the tokens
    // bound for m before it in the chunk, after those of the chunks before.
    unsigned packed_before = before;
    for (int first = begin; first < end; first += 32) {
      const unsigned ballot = __ballot_sync(0xffffffffu, first + lane < end && bound(first + lane));
      for (unsigned rest = ballot; rest; rest &= rest - 1) {
        const int i = __ffs(rest) - 1, t = first + i;
        if ((t - begin) % kTeamWarps != warp)
          continue;
        const long long slot =
            static_cast<long long>(m) * tokens + packed_before + __popc(ballot & ((1u << i) - 1));
        detail::copy_row(pack + slot * hidden, rows + static_cast<long long>(t) * hidden, hidden,
                         lane);
        for (int j = lane; j < top_k; j += 32)
          pack_experts[slot * top_k + j] = experts[t * top_k + j];
      }
      packed_before += __popc(ballot);
    }
    if (cta == ctas - 1 && team_thread() == 0) {
      packed[m] = static_cast<int>(scratch[1]);
      packed[nodes + m] = static_cast<int>(scratch[2]);
    }
    team_sync();
  }
  if (cta == ctas - 1 && team_thread() == 0)
    packed[node] = packed[nodes + node] = 0;
}

template <typename T, int R, int C>
__device__ __forceinline__ void return_rows(const Tile<T, R, C> &t, const int *origins, int rows,
                                            int cols, const mk_tensor_ref *returned,
                                            long long slots_per_gpu, long long ld, long long column,
                                            mk_u64 *nvlink_bytes, void *smem) {
  using Smem = detail::TileSmem<T, R, C>;
  constexpr int kSize = detail::Vector<T>::kSize;
  unsigned char *staging = static_cast<unsigned char *>(smem);
  detail::fragments_to_smem(t, staging);
  team_sync();
  const bool aligned = ld % kSize == 0 && column % kSize == 0;
  unsigned elsewhere = 0; // bytes this thread stores on other GPUs
  detail::for_each_chunk<Smem::kChunks, Smem::kRowChunks>([&](int row, int chunk) {
    const int valid = detail::valid_in_chunk<T>(row, chunk, rows, cols);
    if (valid <= 0)
      return;
    const long long origin = origins[row];
    void *to = returned->peer[origin / slots_per_gpu];
    T *dst = static_cast<T *>(to) + origin % slots_per_gpu * ld + column + chunk * kSize;
    const detail::Vector<T> v =
        *reinterpret_cast<const detail::Vector<T> *>(staging + Smem::chunk(row, chunk));
    detail::store_chunk(dst, v, valid, aligned);
    elsewhere += to == returned->local ? 0 : valid * sizeof(T);
  });
  elsewhere = __reduce_add_sync(0xffffffffu, elsewhere);
  if (team_thread() % 32 == 0 && elsewhere)
    atomicAdd(nvlink_bytes, static_cast<mk_u64>(elsewhere));
  team_sync();
}

template <typename Out, typename R>
__device__ __forceinline__ void
combine_returned(const R *returned, long long hidden, const int *placement, const int *return_at,
                 const float *weights, int top_k, Out *dest, long long ld, int rows, int cols) {
  constexpr int kSize = detail::Vector<R>::kSize;
  const int chunks = (cols + kSize - 1) / kSize;
  const bool aligned = detail::vector_aligned(returned, hidden);
  for (int i = team_thread(); i < rows * chunks; i += MK_TEAM_THREADS) {
    const int r = i / chunks, chunk = i % chunks;
    const int valid = min(kSize, cols - chunk * kSize);
    float sum[kSize] = {};
    for (int j = 0; j < top_k; ++j) {
      if (placement[r * top_k + j] < 0)
        continue;
      const float w = weights[r * top_k + j];
      const long long row =
          return_at ? return_at[r * top_k + j] : static_cast<long long>(r) * top_k + j;
      const detail::Vector<R> v =
          detail::load_chunk(returned + row * hidden + chunk * kSize, valid, aligned);
#pragma unroll
      for (int k = 0; k < kSize; ++k)
        sum[k] += w * static_cast<float>(v.elements[k]);
    }
    Out *to = dest + static_cast<long long>(r) * ld + chunk * kSize;
    if constexpr (sizeof(Out) == sizeof(R)) {
      detail::Vector<Out> out;
#pragma unroll
      for (int k = 0; k < kSize; ++k)
        out.elements[k] = Out(sum[k]);
      detail::store_chunk(to, out, valid, detail::vector_aligned(dest, ld));
    } else {
      for (int k = 0; k < valid; ++k)
        to[k] = Out(sum[k]);
    }
  }
}

} // namespace mk

#endif // MK_DEVICE_IMPL_ROUTING_FUNCS_CUH
