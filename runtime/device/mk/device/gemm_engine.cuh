//===- mk/device/gemm_engine.cuh - warp-specialized persistent GEMM on TMA and wgmma --===//
//
// The compute engine of generated kernels on sm_90a. A CTA of MK_CTA_THREADS threads splits into
// a producer warpgroup (threads 0-127), whose one thread streams the operands of each output tile
// into a kStages-deep shared-memory ring with TMA, and two consumer warpgroups (threads 128-383,
// the tile library's team), which multiply them with wgmma, 64 rows each, and write the finished
// tile through shared memory with TMA stores. The ring's stages complete on mbarriers: `full`
// when a stage's bytes have landed, `empty` when every consumer warp is done reading it. The
// producer warpgroup's other three warps are the senders: they raise the flags of gemm_signal,
// write the tiles of gemm_store_gpus and wait on the flags of gemm_defer_wait, so that neither
// NVLink traffic nor system-scope fences and flags stall the producer's loads or the consumers.
//
// The engine does not choose tiles: producer and consumers walk the same sequence of tiles (the
// order the compiler chose), each in its own loop, so the producer runs ahead into the next
// tiles while the consumers finish the current one. What a consumer does after gemm_store (a
// signal, a copy to a peer) is the tile's completion hook: the tile is in memory by then.
//
//   mk::GemmEngine<Config> engine(mk_smem);           // every thread of the CTA
//   if (mk::gemm_is_producer()) {
//     mk::gemm_producer_begin(engine);
//     if (mk::gemm_loader())
//       for (tile : tiles) mk::gemm_load(engine, &a_map, &b_map, m0, n0, k_blocks, 0);
//   } else {
//     mk::gemm_consumer_begin(engine);
//     for (tile : tiles) {
//       mk::GemmAccumulator<Config> acc = mk::gemm_mma(engine, k_blocks);
//       mk::gemm_store<mk::bf16>(engine, acc, &c_map, n0, m0);
//       ... hook: signal, wait ...
//     }
//     mk::gemm_finish(engine);
//   }
//
// Operands: A is [M x K] (K contiguous); B is [K x N] (N contiguous) or, with kBKMajor, [N x K];
// their tensor maps use 128-byte swizzle with boxes {64, 128} for A and {64, 64} ({64, BN} when
// K-major) for B. The output map's box is {64, 128} (one 64-column chunk of the tile), also
// 128-byte swizzled. TMA reads zeros beyond the tensors' extents and never writes there, so any
// M, N and K work.
//
//===----------------------------------------------------------------------------------===//

#ifndef MK_DEVICE_GEMM_ENGINE_CUH
#define MK_DEVICE_GEMM_ENGINE_CUH

#include "mk/device/impl/ptx__funcs.cuh"
#include "mk/device/impl/tile__types.cuh"

namespace mk {

/// The engine's static shape: 128 x BN output tiles, K in 64-element slices through a
/// kStages-deep ring, operands of T (bf16 or f16), B [N x K] with kBKMajor, else [K x N]; the
/// epilogue's staging buffers (2, or 4 to hold a 256-column tile whole); and the CTAs of a
/// thread-block cluster (1 or 2) that share each B panel, every CTA loading its part of it into
/// all of them with TMA multicast.
///
/// With a cluster of 2 the kernel is declared __cluster_dims__(2, 1, 1), and the two CTAs of a
/// cluster walk tiles in step: the same number of tiles, each pair with the same n0 and k_blocks
/// (rows m0 of their own), so the grid's tile count is even; a tile beyond M still runs (TMA
/// loads zeros and stores nothing). With [N x K] B, B's map has box {64, BN / 2}; with [K x N] B
/// of one 64-column block (BN 64), each CTA loads half its K rows: box {64, 32}.
///
/// Where A has at most 128 rows (decode's M), the producer loads only its first kARows (M rounded
/// up to 8: A's map has box {64, kARows}) and, at kARows <= 64, only the first consumer
/// warpgroup multiplies: the product's rows past them are never stored, and TMA would spend each
/// k slice filling them with zeros. So are tiles of 64 rows (kARows 64, the output map's box
/// {64, 64}): one warpgroup multiplies each, and a grid of 128 rows has twice the tiles.
template <typename T, int BN, int kStages, bool kBKMajor, int kEpilogueBuffers = 2,
          int kCluster = 1, int kARows = 128>
struct GemmConfig;

/// Dynamic shared memory the engine of Config needs (the ring, the epilogue's staging, the
/// mbarriers, and slack to align the ring to 1 KiB as the 128-byte swizzle requires).
template <typename Config> __host__ __device__ constexpr int gemm_smem_bytes();

/// The deepest ring of 64-element K slices that fits a CTA's shared memory next to the epilogue.
template <typename T, int BN, int kEpilogueBuffers = 2, int kARows = 128>
__host__ __device__ constexpr int gemm_max_stages();

/// Where the consumers hold a 128 x C f32 tile (wgmma's accumulators): consumer warp w (threads
/// 128 + 32 w ..) has rows 16 w .. 16 w + 15, every column, in m16n8 fragments laid out as
/// TileLayout's. Elementwise tile math (mk/device/tile.cuh) works on it where it is, so that an
/// epilogue (bias, activation, a gate) costs no shared memory before the store.
template <int C> struct GemmLayout;
template <int C> using GemmTile = Tile<float, 128, C, GemmLayout<C>>;

/// A row of C values of T (a bias) that the consumers' epilogue repeats down a GemmTile<C>'s
/// rows: each thread the columns it holds there, pair p at columns 8 p + 2 (lane % 4), kept as S
/// (the elements as loaded) until the broadcast widens them, so that 32 registers hold a 16-bit
/// row of 256 beside the 128 of the accumulator.
template <typename T, int C, typename S = T> struct GemmRow;

/// The `count` (<= C) elements at `src`, consecutive, where the consumers hold a row; the others
/// are 0. Each thread reads only its columns: no shared memory, no other thread.
template <typename T, int C>
__device__ __forceinline__ GemmRow<T, C> gemm_load_row(const T *src, int count);

/// `row` as f32 (exactly: S is at most 32 bits); converted where it is broadcast.
template <typename To, typename T, int C, typename S>
__device__ __forceinline__ GemmRow<To, C, S> convert(const GemmRow<T, C, S> &row);

/// `row` repeated down the rows of a 128 x C tile: out[r][c] = row[c].
template <int C, typename S>
__device__ __forceinline__ GemmTile<C> gemm_broadcast(const GemmRow<float, C, S> &row);

/// One consumer thread's part of a finished 128 x BN f32 tile.
template <typename Config> using GemmAccumulator = GemmTile<Config::BN>;

/// The ring and its pipeline position, as one thread sees it. Construct it with every thread of
/// the CTA (it initialises the mbarriers and synchronises the CTA, or the cluster), with the
/// shared memory and, where it returns routed rows, the count of their bytes stored on other
/// GPUs; then producer and consumers each advance their own copy in step. In a cluster every
/// thread also reaches the end of its scope, where the cluster synchronises again.
template <typename Config> class GemmEngine;

/// Whether this thread is in the producer warpgroup.
__device__ __forceinline__ bool gemm_is_producer();

/// Hands registers from the producer warpgroup to the consumers; called first in each branch.
/// In the producer's, warps 1-3 serve as the senders until the consumers' gemm_finish.
template <typename Config>
__device__ __forceinline__ void gemm_producer_begin(GemmEngine<Config> &e);
template <typename Config>
__device__ __forceinline__ void gemm_consumer_begin(GemmEngine<Config> &e);

/// The producer's thread that walks the tiles, waits and loads (thread 0). The producer's loops
/// run in it alone: the rest of warp 0 has nothing to do there, and would read what the waits
/// order (the row counts that bound a grouped walk) before a flag publishes it.
__device__ __forceinline__ bool gemm_loader();

/// Producer (its loading thread, as every producer call below): streams A[m0 .. m0+128,
/// 64 k_first .. 64 (k_first + k_blocks)) and the matching B panel of columns n0 .. n0+BN into
/// the ring (k_first 0 but for a part of a split K: gemm_sum_splits).
template <typename Config>
__device__ __forceinline__ void gemm_load(GemmEngine<Config> &e, const mk_tensor_map *a,
                                          const mk_tensor_map *b, int m0, int n0, int k_blocks,
                                          int k_first);

/// Producer: as gemm_load, for matmuls that share A: B's panel is two panels of BN / 2 columns,
/// the first from `b0`, the second from `b1`, both at columns n0 .. n0 + BN / 2, so that one pass
/// over A computes both products side by side (gemm_columns takes them apart).
template <typename Config>
__device__ __forceinline__ void gemm_load(GemmEngine<Config> &e, const mk_tensor_map *a,
                                          const mk_tensor_map *b0, const mk_tensor_map *b1, int m0,
                                          int n0, int k_blocks, int k_first);

/// Producer: as gemm_load, for operands that are groups of matrices (3-D tensors whose outer dim
/// is the group: the experts of a grouped GEMM), A from group `a_group` and B from `b_group`. Not
/// in clusters: a cluster's CTAs would need one group.
template <typename Config>
__device__ __forceinline__ void gemm_load_grouped(GemmEngine<Config> &e, const mk_tensor_map *a,
                                                  const mk_tensor_map *b, int m0, int n0,
                                                  int k_blocks, int a_group, int b_group);
template <typename Config>
__device__ __forceinline__ void
gemm_load_grouped(GemmEngine<Config> &e, const mk_tensor_map *a, const mk_tensor_map *b0,
                  const mk_tensor_map *b1, int m0, int n0, int k_blocks, int a_group, int b_group);

/// Producer: waits until `*flag` >= `target` (wrap-safe) before the loads that follow, which then
/// see what was written before the signals it counts.
template <typename Config>
__device__ __forceinline__ void gemm_wait(GemmEngine<Config> &e, const mk_u32 *flag, mk_u32 target);

/// Producer: gemm_wait on each of flags[0 .. n) (the tiles of a panel that a tile reads): their
/// loads in flight together and one acquire, where n waits in a row would take n round trips
/// ahead of the tile's loads.
template <typename Config>
__device__ __forceinline__ void gemm_wait_all(GemmEngine<Config> &e, const mk_u32 *flags, int n,
                                              mk_u32 target);

/// Consumers: the product of the next tile's k_blocks slices (k_blocks >= 1).
template <typename Config>
__device__ __forceinline__ GemmAccumulator<Config> gemm_mma(GemmEngine<Config> &e, int k_blocks);

/// Consumers, where a tile's K is split in `splits` parts (split-K: each part's k blocks loaded
/// and multiplied at a position of its own) and `acc` is part `split`'s product: puts it in its
/// slot of `slots` (the tile's `splits` slots of 128 x BN f32, in the consumers' register
/// layout), counts it on the tile's flag `arrivals` (`splits` arrivals a launch of epoch
/// `epoch`: flags are never reset), and, where it arrived last, returns the sum of every part in
/// the order of the parts (the same bits whichever arrives last) and makes gemm_tile_complete
/// true. Elsewhere it returns `acc` and the tile is the last part's: nothing waits.
template <typename Config>
__device__ __forceinline__ GemmAccumulator<Config>
gemm_sum_splits(GemmEngine<Config> &e, const GemmAccumulator<Config> &acc, float *slots,
                mk_u32 *arrivals, int split, int splits, mk_u32 epoch);

/// Consumers: whether the tile of the last gemm_mma is whole here, so that its epilogue runs:
/// true but after a gemm_sum_splits whose part did not arrive last.
template <typename Config>
__device__ __forceinline__ bool gemm_tile_complete(GemmEngine<Config> &e);

/// Columns kFirst .. kFirst + kColumns of a tile (whole 64-column chunks), where they are.
template <int kFirst, int kColumns, int C>
__device__ __forceinline__ GemmTile<kColumns> gemm_columns(const GemmTile<C> &t);

/// Consumers: converts `acc` (BN or fewer columns) to Out (bf16 or f16) and stores it at (c0, c1[,
/// c2]) of `map` (innermost first: the tile's first column, its first row, then outer coordinates),
/// 64 columns at a time through TMA stores issued by team thread 0. The stores are complete, and
/// published, before that thread's next signal (mk::signal and gemm_signal wait for them).
template <typename Out, typename Config, int C>
__device__ __forceinline__ void gemm_store(GemmEngine<Config> &e, const GemmTile<C> &acc,
                                           const mk_tensor_map *map, int c0, int c1);
template <typename Out, typename Config, int C>
__device__ __forceinline__ void gemm_store(GemmEngine<Config> &e, const GemmTile<C> &acc,
                                           const mk_tensor_map *map, int c0, int c1, int c2);

/// Consumers: as gemm_store into a 2-D tensor, but adds the tile to what it holds, element by
/// element in its dtype, where that memory is (a TMA reduction; also across NVLink).
template <typename Out, typename Config, int C>
__device__ __forceinline__ void gemm_store_add(GemmEngine<Config> &e, const GemmTile<C> &acc,
                                               const mk_tensor_map *map, int c0, int c1);

/// Consumers: the tile to the same place (c0, c1) of a 2-D tensor on GPUs (me + j) % gpus of the
/// node, j in [begin, end), staged in shared memory once, stored or added. A whole tile (`rows` x
/// `cols` = 128 x BN) goes out through the senders: to this GPU through maps[me], to peers at
/// element `offset` of their mappings of `tensor` (rows `ld` elements apart). A tile the
/// tensor's edges cut goes through TMA and maps[gpu], which mask it.
template <typename Out, typename Config, int C>
__device__ __forceinline__ void
gemm_store_gpus(GemmEngine<Config> &e, const GemmTile<C> &acc, const mk_tensor_map *maps, int me,
                int begin, int end, int gpus, const mk_tensor_ref *tensor, long long offset, int ld,
                int rows, int cols, int c0, int c1);
template <typename Out, typename Config, int C>
__device__ __forceinline__ void
gemm_store_add_gpus(GemmEngine<Config> &e, const GemmTile<C> &acc, const mk_tensor_map *maps,
                    int me, int begin, int end, int gpus, const mk_tensor_ref *tensor,
                    long long offset, int ld, int rows, int cols, int c0, int c1);

/// Consumers: the tile's rows each to its own place, through the senders: row r (of the first
/// `rows` x `cols`) to row origins[r] % slots of `tensor` on GPU origins[r] / slots (its peer
/// mapping), at element `column` of rows `ld` elements apart (whole 16-byte units). Routed
/// results going back to their tokens; the bytes stored on other GPUs are added to the count the
/// engine was made with (GemmEngine's second argument), if any.
template <typename Out, typename Config, int C>
__device__ __forceinline__ void
gemm_store_rows(GemmEngine<Config> &e, const GemmTile<C> &acc, const int *origins, int rows,
                int cols, const mk_tensor_ref *tensor, long long slots, int ld, long long column);

/// Consumers: an arrival on `flag` once the stores issued so far have completed, raised by the
/// senders (after TMA stores of the consumers, only once those complete: at the next tile's
/// epilogue, gemm_flush_signals, or gemm_finish) so that the consumers go on to the next tile
/// instead of waiting for the stores to land. gemm_stamp sets the flag to `epoch` instead.
template <typename Config>
__device__ __forceinline__ void gemm_signal(GemmEngine<Config> &e, mk_u32 *flag);
template <typename Config>
__device__ __forceinline__ void gemm_stamp(GemmEngine<Config> &e, mk_u32 *flag, mk_u32 epoch);

/// Consumers: the engine's writes and flags after this call (the senders', and the consumers'
/// TMA stores) wait until `*flag` >= `target` (wrap-safe; `target` is read in team thread 0); the
/// consumers themselves do not wait. Releases the flags held back first, as before any wait.
template <typename Config>
__device__ __forceinline__ void gemm_defer_wait(GemmEngine<Config> &e, const mk_u32 *flag,
                                                mk_u32 target);

/// Consumers: releases the flags gemm_signal holds back; call before waiting on any flag.
template <typename Config>
__device__ __forceinline__ void gemm_flush_signals(GemmEngine<Config> &e);

/// Consumers, after their last tile: releases the flags held back, stops the senders once they
/// are done, and waits for the outstanding stores, which read shared memory.
template <typename Config> __device__ __forceinline__ void gemm_finish(GemmEngine<Config> &e);

/// Every thread, its role's work done, before the CTA joins the pool role (RoleOp's pool): the
/// registers split evenly again, as at the kernel's start (mk::team_leave's counterpart).
template <typename Config> __device__ __forceinline__ void gemm_leave(GemmEngine<Config> &e);

} // namespace mk

#include "mk/device/impl/gemm_engine__funcs.cuh"

#endif // MK_DEVICE_GEMM_ENGINE_CUH
