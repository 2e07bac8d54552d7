//===- mk/device/kernel.cuh - what a generated kernel knows of its launch ------------===//
//
// The layer between the mk_kernel_args of mk/abi.h and the device library: this CTA's place in
// the grid and this rank's in the topology, the tensors with their peer mappings, flags and their
// epochs, and network transfers through the host proxy. Generated kernels include this header;
// mkc's lowering (compiler/lib/Conversion/MkToEmitC) is its only other user.
//
//===----------------------------------------------------------------------------------===//

#ifndef MK_DEVICE_KERNEL_CUH
#define MK_DEVICE_KERNEL_CUH

#include "mk/device.cuh"
#include "mk/grouped_walk.h"

// The fixed-width names EmitC prints; NVRTC has no <stdint.h>.
typedef long long int64_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef unsigned int uint32_t;
// And C's names of the infinite and not-a-number floats, which are <math.h>'s.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

namespace mk {

/// One tensor of the program as this kernel sees it: a reference into the kernel's parameters,
/// which are __grid_constant__, so that indexing the peer table by a run-time GPU index reads it
/// in place instead of copying it to local memory.
template <typename T> struct Tensor { const mk_tensor_ref *ref; };

/// Tensor `index` of the launch (arguments first, then mk.buffer allocations).
template <typename T>
__device__ __forceinline__ Tensor<T> tensor(const mk_kernel_args &args, int index) {
  return Tensor<T>{&args.tensors[index]};
}

/// The mappings of `t`, for the device library's layers below this one.
template <typename T> __device__ __forceinline__ const mk_tensor_ref *tensor_ref(Tensor<T> t) {
  return t.ref;
}

/// Element `offset` of this rank's part of `t`, and of the part GPU `gpu` of this node holds.
template <typename T> __device__ __forceinline__ T *at(Tensor<T> t, int64_t offset) {
  return static_cast<T *>(t.ref->local) + offset;
}
template <typename T>
__device__ __forceinline__ T *at_peer(Tensor<T> t, int64_t gpu, int64_t offset) {
  return static_cast<T *>(t.ref->peer[gpu]) + offset;
}

/// This CTA's index in the grid; this rank's node and GPU index; this launch's epoch.
__device__ __forceinline__ int64_t cta() { return blockIdx.x; }
/// The first CTA and the CTAs of role `role` (the manifest's order) in this launch.
__device__ __forceinline__ int64_t role_first(const mk_kernel_args &args, int64_t role) {
  return args.roles[role].first;
}
__device__ __forceinline__ int64_t role_ctas(const mk_kernel_args &args, int64_t role) {
  return args.roles[role].ctas;
}
__device__ __forceinline__ int64_t node(const mk_kernel_args &args) { return args.node; }
__device__ __forceinline__ int64_t gpu(const mk_kernel_args &args) { return args.gpu; }

namespace detail {
/// The launch's epoch as begin_launch took it: the count it points to moves on during the launch.
__shared__ mk_u32 launch_epoch;
/// Each counted role's CTAs summed over the launches so far, this one included.
__shared__ mk_u32 launch_role_ctas[MK_MAX_ROLES];
} // namespace detail

/// Every thread of the CTA, first thing: takes the launch's epoch (mk_launch_count), no commands
/// handed to the proxy yet (proxy_wait_reads), and, of its first `counted_roles` roles (those whose
/// CTAs the kernel's waits count arrivals of), the CTAs over every launch through this one. With
/// `advance`, the grid's last CTA to take them advances them for the next launch, which the stream
/// orders after this one.
__device__ __forceinline__ void begin_launch(const mk_kernel_args &args, bool advance,
                                             int counted_roles) {
  if (threadIdx.x == 0) {
    mk_launch_count *launches = args.launches;
    const mk_u32 taken = *static_cast<volatile mk_u32 *>(&launches->epoch);
    detail::launch_epoch = taken;
    detail::proxy_pushed = 0;
    for (int r = 0; r < counted_roles; ++r)
      detail::launch_role_ctas[r] =
          *static_cast<volatile mk_u32 *>(&launches->role_ctas[r]) + args.roles[r].ctas;
    if (advance) {
      // The reads before the count: the last CTA's advance must not reach an earlier read.
      __threadfence();
      if (atomicAdd(&launches->readers, 1u) == gridDim.x - 1) {
        __threadfence();
        launches->readers = 0;
        for (int r = 0; r < counted_roles; ++r)
          launches->role_ctas[r] = detail::launch_role_ctas[r];
        launches->epoch = taken + 1;
      }
    }
  }
  __syncthreads();
}

/// This launch's epoch, and where it reports and counts what the caller reads (mk/abi.h's
/// mk_op_report and mk_op_counters).
__device__ __forceinline__ mk_u32 epoch(const mk_kernel_args &) { return detail::launch_epoch; }

/// The arrivals a flag holds once this launch's have come, flags never being reset: for `count`
/// a launch, the epoch times it; for `count` per CTA of a role, `count` times the role's CTAs
/// over every launch through this one (role_ctas_through, summed over the roles counted), which
/// the launch's split may have changed.
__device__ __forceinline__ mk_u32 due(const mk_kernel_args &args, int64_t count) {
  return epoch(args) * static_cast<mk_u32>(count);
}
__device__ __forceinline__ mk_u32 role_ctas_through(const mk_kernel_args &, int64_t role) {
  return detail::launch_role_ctas[role];
}
__device__ __forceinline__ mk_routing_report *routing_report(const mk_kernel_args &args) {
  return &args.report->routing;
}
__device__ __forceinline__ mk_u64 *nvlink_bytes(const mk_kernel_args &args) {
  return &args.counters->nvlink_bytes;
}

/// Adds one arrival to flag `offset` of this rank, or of GPU `gpu` of this node.
__device__ __forceinline__ void signal_local(const mk_kernel_args &args, int64_t offset) {
  signal(args.flags + offset);
}
__device__ __forceinline__ void signal_gpu(const mk_kernel_args &args, int64_t gpu,
                                           int64_t offset) {
  signal(args.flags_peer[gpu] + offset);
}

/// Sets flag `offset` of this rank, or of GPU `gpu` of this node, to the launch's epoch (a signal
/// with `stamp`).
__device__ __forceinline__ void stamp_local(const mk_kernel_args &args, int64_t offset) {
  stamp(args.flags + offset, epoch(args));
}
__device__ __forceinline__ void stamp_gpu(const mk_kernel_args &args, int64_t gpu, int64_t offset) {
  stamp(args.flags_peer[gpu] + offset, epoch(args));
}

/// The flag regions of the GPUs of this node, for an op that raises flags on several.
__device__ __forceinline__ mk_u32 *const *flag_regions(const mk_kernel_args &args) {
  return args.flags_peer;
}

/// Flag `offset` of this rank, and of GPU `gpu` of this node.
__device__ __forceinline__ mk_u32 *flag_local(const mk_kernel_args &args, int64_t offset) {
  return args.flags + offset;
}
__device__ __forceinline__ mk_u32 *flag_gpu(const mk_kernel_args &args, int64_t gpu,
                                            int64_t offset) {
  return args.flags_peer[gpu] + offset;
}

/// Arrivals on flag `offset` so far: this node's signals, and those of other nodes, which their
/// proxies count in this rank's network flags (mk/queue.h).
__device__ __forceinline__ mk_u32 arrivals(const mk_kernel_args &args, int64_t offset) {
  mk_u32 count = ptx::load_acquire_sys(args.flags + offset);
  for (mk_u32 n = 0; n < args.nodes; ++n)
    if (n != args.node)
      count += ptx::load_acquire_sys(args.net_flags + n * args.flag_words + offset);
  return count;
}

/// One thread's wait for `target` arrivals on flag `offset` (wrap-safe). It gives up after
/// mk_watch's timeout, and across nodes once the proxy has stopped: the host reports why, and the
/// launch must end rather than hang.
__device__ __forceinline__ void wait_arrivals_thread(const mk_kernel_args &args, int64_t offset,
                                                     mk_u32 target) {
  detail::Backoff backoff;
  detail::WaitWatch watch;
  mk_u32 seen;
  for (unsigned spins = 1; static_cast<int>((seen = arrivals(args, offset)) - target) < 0;
       ++spins) {
    // The abort word is host memory: read it rarely, or spinning CTAs flood PCIe with reads.
    if (args.nodes > 1 && spins % detail::kAbortCheckSpins == 0 && proxy_aborted(args.queue))
      return;
    if (watch.give_up(args.flags + offset, target, seen))
      return;
    backoff.pause();
  }
}

/// Waits until flag `offset` holds `target` arrivals (due: this launch's have come).
__device__ __forceinline__ void wait_arrivals(const mk_kernel_args &args, int64_t offset,
                                              mk_u32 target) {
  if (args.nodes == 1) {
    wait(args.flags + offset, target);
    return;
  }
  if (team_thread() == 0)
    wait_arrivals_thread(args, offset, target);
  team_sync();
}

/// The next launch's epoch, for an op whose copy engines read it until after the kernel: the
/// runtime runs it with one thread once they are done.
__device__ __forceinline__ void advance_epoch(mk_launch_count *launches) { launches->epoch += 1; }

/// Offset of `address` in this rank's symmetric heap block, which is the same buffer's offset on
/// every rank: how commands name memory (mk/queue.h).
__device__ __forceinline__ mk_u64 heap_offset(const mk_kernel_args &args, const void *address) {
  return reinterpret_cast<mk_u64>(address) - args.queue.heap_base;
}

/// Where node `node` counts this node's arrivals on flag `offset`: this node's row of its network
/// flags, as a heap offset.
__device__ __forceinline__ mk_u64 net_flag_offset(const mk_kernel_args &args, int64_t offset) {
  return heap_offset(args, args.net_flags + args.node * args.flag_words + offset);
}

/// remote_put's flag argument when the put signals nothing.
#define MK_NO_FLAG 0xffffffffu

/// Asks the proxy to copy `rows` rows of `row_bytes` from tensor `src_tensor` to tensor
/// `dst_tensor` of the same GPU index of node `node` (both symmetric), and then, with `flag` !=
/// MK_NO_FLAG, to add an arrival to that flag there. Offsets and pitches in bytes.
__device__ __forceinline__ void remote_put(const mk_kernel_args &args, int64_t node, int src_tensor,
                                           int64_t src_offset, int dst_tensor, int64_t dst_offset,
                                           int rows, int row_bytes, int64_t src_pitch,
                                           int64_t dst_pitch, mk_u32 flag) {
  mk_command command = {};
  command.op = flag == MK_NO_FLAG ? MK_CMD_PUT : MK_CMD_PUT_SIGNAL;
  command.view = MK_VIEW_HEAP;
  command.dst_node = static_cast<mk_u32>(node);
  command.signal_offset = flag == MK_NO_FLAG ? MK_NO_SIGNAL : net_flag_offset(args, flag);
  command.src_offset =
      heap_offset(args, static_cast<const char *>(args.tensors[src_tensor].local) + src_offset);
  command.dst_offset =
      heap_offset(args, static_cast<const char *>(args.tensors[dst_tensor].local) + dst_offset);
  command.rows = static_cast<mk_u32>(rows);
  command.row_bytes = static_cast<mk_u32>(row_bytes);
  command.src_pitch = static_cast<mk_u32>(src_pitch);
  command.dst_pitch = static_cast<mk_u32>(dst_pitch);
  proxy_push(args.queue, command);
}

/// An arrival on flag `offset` of the same GPU index of node `node`, after this rank's earlier
/// remote puts to it.
__device__ __forceinline__ void signal_node(const mk_kernel_args &args, int64_t node,
                                            int64_t offset) {
  mk_command command = {};
  command.op = MK_CMD_SIGNAL;
  command.dst_node = static_cast<mk_u32>(node);
  command.signal_offset = net_flag_offset(args, offset);
  proxy_push(args.queue, command);
}

/// The end of a role's team that sends through the proxy: proxy_wait_reads.
__device__ __forceinline__ void await_proxy_reads(const mk_kernel_args &args) {
  proxy_wait_reads(args.queue);
}

/// A role without the GEMM engine runs on its team (threads 0-255), which takes the registers of
/// the CTA's third warpgroup: team_begin in the team's branch, team_idle in the other.
__device__ __forceinline__ void team_begin() { ptx::setmaxnreg_inc<240>(); }
__device__ __forceinline__ void team_idle() { ptx::setmaxnreg_dec<24>(); }

/// A role's CTAs leave it for the pool (RoleOp's pool) with the registers split evenly again, as
/// at the kernel's start, so that the pool's code, after every role's, starts from one count (the
/// count ptxas must know at each point, whichever role a CTA ran): the team's registers back to the
/// third warpgroup.
__device__ __forceinline__ void team_leave() {
  __syncthreads(); // every warp of a warpgroup is past its last setmaxnreg
  if (team_member())
    ptx::setmaxnreg_dec<kEvenRegisters>();
  else
    ptx::setmaxnreg_inc<kEvenRegisters>();
}

namespace detail {
/// The pool's position the team's thread 0 claimed last.
__shared__ mk_u32 claimed;
} // namespace detail

/// The pool's next of its walk's `positions`, from the launch's count of claims (mk_launch_count),
/// which every CTA of the grid draws from until it draws past the end: every team thread,
/// together; a position past the end means the pool is done.
__device__ __forceinline__ int64_t claim(const mk_kernel_args &args, int64_t positions) {
  team_sync(); // every team thread has read the last claim
  if (team_thread() == 0)
    detail::claimed = static_cast<mk_u32>(detail::claim_from(
        &args.launches->claims, static_cast<int>(positions), static_cast<int>(gridDim.x)));
  team_sync();
  return detail::claimed;
}

/// Tensor map `index` of the launch, in place in the kernel's parameter (TMA reads it there).
__device__ __forceinline__ const mk_tensor_map *tensor_map(const mk_kernel_args &args,
                                                           int64_t index) {
  return &args.maps[index];
}

/// The engine producer's wait_arrivals, in its loading thread (as gemm_wait), ordering its loads
/// after it.
template <typename Config>
__device__ __forceinline__ void gemm_wait_arrivals(GemmEngine<Config> &engine,
                                                   const mk_kernel_args &args, int64_t offset,
                                                   mk_u32 target) {
  if (args.nodes == 1) {
    gemm_wait(engine, args.flags + offset, target);
    return;
  }
  wait_arrivals_thread(args, offset, target);
  // TMA reads through the async proxy: order them after the acquire.
  ptx::fence_proxy_async();
}

/// The engine producer's wait_arrivals on flags offset .. offset + n - 1, `target` arrivals each
/// (a loop of waits on the tiles of a panel), as gemm_wait_all on one node.
template <typename Config>
__device__ __forceinline__ void gemm_wait_arrivals_span(GemmEngine<Config> &engine,
                                                        const mk_kernel_args &args, int64_t offset,
                                                        int64_t n, mk_u32 target) {
  if (args.nodes == 1) {
    gemm_wait_all(engine, args.flags + offset, static_cast<int>(n), target);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    wait_arrivals_thread(args, offset + i, target);
  ptx::fence_proxy_async();
}

/// The engine consumers' signals and waits: an arrival on flag `offset` of this rank or of GPU
/// `gpu` of the node once the tile's stores complete (deferred, gemm_signal; gemm_stamp_* set it
/// to the epoch); a wait that first raises what is deferred, so that no rank waits on a flag
/// another holds back.
template <typename Config>
__device__ __forceinline__ void gemm_stamp_local(GemmEngine<Config> &engine,
                                                 const mk_kernel_args &args, int64_t offset) {
  gemm_stamp(engine, args.flags + offset, epoch(args));
}
template <typename Config>
__device__ __forceinline__ void gemm_stamp_gpu(GemmEngine<Config> &engine,
                                               const mk_kernel_args &args, int64_t gpu,
                                               int64_t offset) {
  gemm_stamp(engine, args.flags_peer[gpu] + offset, epoch(args));
}
template <typename Config>
__device__ __forceinline__ void gemm_signal_local(GemmEngine<Config> &engine,
                                                  const mk_kernel_args &args, int64_t offset) {
  gemm_signal(engine, args.flags + offset);
}
template <typename Config>
__device__ __forceinline__ void gemm_signal_gpu(GemmEngine<Config> &engine,
                                                const mk_kernel_args &args, int64_t gpu,
                                                int64_t offset) {
  gemm_signal(engine, args.flags_peer[gpu] + offset);
}
template <typename Config>
__device__ __forceinline__ void gemm_consumer_wait_arrivals(GemmEngine<Config> &engine,
                                                            const mk_kernel_args &args,
                                                            int64_t offset, mk_u32 target) {
  gemm_flush_signals(engine);
  wait_arrivals(args, offset, target);
}
/// A consumer wait on one node that only the engine's writes after it depend on (its stores and
/// signals): the senders wait, in order, and the consumers go on to the next tile.
template <typename Config>
__device__ __forceinline__ void gemm_consumer_defer_arrivals(GemmEngine<Config> &engine,
                                                             const mk_kernel_args &args,
                                                             int64_t offset, mk_u32 target) {
  gemm_defer_wait(engine, args.flags + offset, team_thread() == 0 ? target : 0);
}

/// The attention engine's producer thread: wait_arrivals by the one thread that loads, ordering
/// its TMA loads after the acquire.
__device__ __forceinline__ void producer_wait_arrivals(const mk_kernel_args &args, int64_t offset,
                                                       mk_u32 target) {
  wait_arrivals_thread(args, offset, target);
  ptx::fence_proxy_async();
}

/// The thread of the attention engine's producer warpgroup that loads.
__device__ __forceinline__ bool attention_loader() { return threadIdx.x == 0; }

/// The attention engine's consumers, as mkc lowers a source's loop of attention steps: its
/// `kv_blocks` key blocks, the first at key position `k_position`, `length` keys in all, for the
/// query tile at `q_position`.
template <typename Config>
__device__ __forceinline__ void
attention_fold(AttentionEngine<Config> &engine, AttentionAccumulator<Config> &state,
               size_t kv_blocks, size_t length, bool causal, size_t q_position, size_t k_position,
               float scale_log2, bool last) {
  const AttentionWindow window{static_cast<int>(length), causal, static_cast<long long>(q_position),
                               static_cast<long long>(k_position)};
  attention_mma(engine, state, static_cast<int>(kv_blocks), window, scale_log2, last);
}

/// The walk of a tile grid bounded by the row counts at `counts` (mk/grouped_walk.h), its
/// positions, and its tile at a position, coordinate by coordinate.
__device__ __forceinline__ GroupedWalk grouped_walk(const int *counts, int64_t groups,
                                                    int64_t capacity, int64_t tile_rows,
                                                    int64_t col_tiles, int64_t band) {
  return GroupedWalk{counts,
                     static_cast<int>(groups),
                     static_cast<int>(capacity),
                     static_cast<int>(tile_rows),
                     static_cast<int>(col_tiles),
                     static_cast<int>(band)};
}
__device__ __forceinline__ int64_t grouped_positions(const GroupedWalk &walk) {
  return walk.positions();
}
__device__ __forceinline__ GroupedTile grouped_tile(const GroupedWalk &walk, int64_t position) {
  return walk.at(position);
}
/// Whether a position of the walk names a tile (it does, short of the end).
__device__ __forceinline__ bool tile_within(const GroupedTile &tile) { return tile.row >= 0; }
__device__ __forceinline__ int64_t tile_group(const GroupedTile &tile) { return tile.group; }
__device__ __forceinline__ int64_t tile_row(const GroupedTile &tile) { return tile.row; }
__device__ __forceinline__ int64_t tile_col(const GroupedTile &tile) { return tile.col; }

/// The rows of a tile of `rows` from row `first` that lie below the count at `count`.
__device__ __forceinline__ int64_t rows_within(const int *count, int64_t first, int64_t rows) {
  const int64_t below = *count - first;
  return below < 0 ? 0 : below < rows ? below : rows;
}

/// The slices an mk.send_rows sends: the count at `count`, which this GPU wrote or received
/// (read after the flag that published it), or one without a count.
__device__ __forceinline__ int slices(const int *count) {
  return count ? *static_cast<const volatile int *>(count) : 1;
}

/// The larger of two sizes, for the kernel's shared-memory requirement.
__host__ __device__ constexpr int max_bytes(int a, int b) { return a > b ? a : b; }

} // namespace mk

#endif // MK_DEVICE_KERNEL_CUH
