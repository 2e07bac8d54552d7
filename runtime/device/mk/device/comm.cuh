//===- mk/device/comm.cuh - copies between GPUs, flags, and the host proxy queue ------===//
//
// Collective over the team, like everything in mk/device: all MK_TEAM_THREADS threads call each
// function with the same arguments. Peer memory is a plain mapped pointer: ordinary loads,
// stores and atomics reach it over NVLink.
//
//===----------------------------------------------------------------------------------===//

#ifndef MK_DEVICE_COMM_CUH
#define MK_DEVICE_COMM_CUH

#include "mk/device/impl/comm__types.cuh"
#include "mk/device/impl/tile__types.cuh"

namespace mk {

/// Copies a `rows` x `cols` region of T (row-major; fewer than 2^31 16-byte chunks) from `src` to
/// `dst`, either of which may be a peer mapping, in coalesced 16-byte vectors when both pointers
/// and leading dimensions allow it, else element by element.
template <typename T>
__device__ __forceinline__ void copy_region(const T *src, long long src_ld, T *dst,
                                            long long dst_ld, int rows, int cols);

/// Dynamic shared memory that copy_region_bulk needs: its staging, which other functions may
/// use between its calls.
__host__ __device__ constexpr int copy_region_bulk_smem_bytes();

/// A team's bulk-copy engine: the staging slots' mbarriers, in static shared memory, initialized
/// once for the kernel (constructed by the whole team before its first copy_region_bulk), and
/// their phases, which run on across calls. Barriers initialized again for each call would be as
/// correct, but compute-sanitizer's racecheck does not follow bulk copies across a
/// re-initialization and reports each slot's writes in two calls as a hazard.
class BulkCopier {
public:
  __device__ BulkCopier();
  /// Slot `slot`'s barrier, and the parity of the phase its next load completes.
  __device__ mk_u32 barrier(int slot) const;
  __device__ mk_u32 parity(int slot) const;
  /// `loads` more loads into slot `slot` have been waited for.
  __device__ void completed(int slot, int loads);

private:
  mk_u32 barriers_;
  mk_u32 parities_; // bit s: the phase of slot s's next load
};

/// copy_region through the bulk-copy engine (cp.async.bulk global -> shared -> global, completion
/// on `copier`'s mbarriers), which frees the CTA's threads from moving data. Falls back to
/// copy_region when the rows are not 16-byte aligned and sized. Its writes are complete when it
/// returns.
template <typename T>
__device__ __forceinline__ void copy_region_bulk(const T *src, long long src_ld, T *dst,
                                                 long long dst_ld, int rows, int cols, void *smem,
                                                 BulkCopier &copier);

/// Publishes the CTA's earlier writes (to this GPU or peers) at system scope, then adds 1 to the
/// arrival counter `*flag` with release semantics.
__device__ __forceinline__ void signal(mk_u32 *flag);

/// As signal, but sets `*flag` to `value` (a launch's epoch) instead of adding an arrival: a flag
/// one writer raises at most once a launch, and in some launches not at all.
__device__ __forceinline__ void stamp(mk_u32 *flag, mk_u32 value);

/// Returns once `*flag` >= `target` (compared wrap-safely), with acquire semantics: what was
/// written before the signals it counts is visible to the whole CTA.
__device__ __forceinline__ void wait(const mk_u32 *flag, mk_u32 target);

/// Whether the host proxy of queue `q` has stopped (mk/queue.h): waits give up then.
__device__ __forceinline__ bool proxy_aborted(const mk_command_queue &q);

/// Hands `command` to the host proxy through queue `q` (protocol in mk/queue.h), after the team's
/// earlier writes, which the command may refer to. Waits while the ring is full; gives up (the
/// command is dropped) once the proxy has stopped.
__device__ __forceinline__ void proxy_push(const mk_command_queue &q, const mk_command &command);

/// Returns once the proxy of queue `q` is done with every command this CTA handed it in this
/// launch (mk/queue.h: their sources read), or has stopped; the team's first thread, which handed
/// them, waits. A role that sends through the proxy ends so: the launch must not end while the
/// network still reads memory that the caller, or the next launch, may write.
__device__ __forceinline__ void proxy_wait_reads(const mk_command_queue &q);

/// The reduction of received tiles through the bulk tensor copy engine: kSlots R x C tiles of T
/// (the copies of one tile that ranks put into a [slots x rows x cols] buffer) are loaded with
/// TMA, combined in f32 and converted to Out in shared memory by the team, and stored with TMA to
/// every destination by the CTA's third warpgroup (the publisher), which raises the tiles' flags
/// once their stores are complete. The team goes on to the next tile meanwhile: a tile's loads
/// and sum overlap the previous tile's stores and their completion. Construct it with every
/// thread of the CTA; it keeps kBytes of shared memory for the role's life.
///
///   mk::TmaReduce<...> reduce(mk_smem);
///   if (mk::team_member()) {
///     for (tile : tiles) {
///       mk::ReducedTile t = mk::tma_reduce<kOp>(reduce, &slots_map, n0, m0, 0);
///       mk::tma_store_reduced(reduce, t, &dst_map, n0, m0);  // each destination
///       mk::tma_signal(reduce, flag);                        // each flag, after the stores
///       mk::tma_commit(reduce);
///     }
///     mk::tma_reduce_finish(reduce);
///   } else {
///     mk::tma_publish(reduce);
///   }
template <int kSlots, typename T, typename Out, int R, int C> class TmaReduce;

/// What tma_reduce leaves in shared memory for tma_store_reduced.
struct ReducedTile {};

/// Team-collective: combines with kOp the kSlots boxes at (c0, c1, slot0 + s) of `map` (columns,
/// rows, slots; boxes of {64, R, 1}, 128-byte swizzled), s = 0 .. kSlots; waits until the
/// publisher has read the previous tile.
template <Reduce kOp, int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ ReducedTile tma_reduce(TmaReduce<kSlots, T, Out, R, C> &reduce,
                                                  const mk_tensor_map *map, int c0, int c1,
                                                  int slot0);

/// Adds a store of the reduced tile at (c0, c1[, c2]) of `map` (boxes of {64, R[, 1]}) to the
/// tile's batch.
template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ void tma_store_reduced(TmaReduce<kSlots, T, Out, R, C> &reduce,
                                                  ReducedTile, const mk_tensor_map *map, int c0,
                                                  int c1);
template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ void tma_store_reduced(TmaReduce<kSlots, T, Out, R, C> &reduce,
                                                  ReducedTile, const mk_tensor_map *map, int c0,
                                                  int c1, int c2);

/// Adds an arrival on `flag` to the tile's batch: raised after every store of the batch.
template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ void tma_signal(TmaReduce<kSlots, T, Out, R, C> &reduce, mk_u32 *flag);

/// Hands the tile's batch to the publisher.
template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ void tma_commit(TmaReduce<kSlots, T, Out, R, C> &reduce);

/// The team's last call: the publisher stops after the batches before it.
template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ void tma_reduce_finish(TmaReduce<kSlots, T, Out, R, C> &reduce);

/// The publisher's loop (the CTA's threads outside the team; one of them works).
template <int kSlots, typename T, typename Out, int R, int C>
__device__ __forceinline__ void tma_publish(TmaReduce<kSlots, T, Out, R, C> &reduce);

} // namespace mk

#include "mk/device/impl/comm__funcs.cuh"

#endif // MK_DEVICE_COMM_CUH
