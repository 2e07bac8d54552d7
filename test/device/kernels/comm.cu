// Kernels that instantiate mk/device/comm.cuh: region copies, flags, the proxy queue, TMA
// reductions.
#include "mk/device.cuh"

extern __shared__ __align__(128) unsigned char mk_smem[];

#define MK_KERNEL extern "C" __global__ void __launch_bounds__(MK_TEAM_THREADS, 1)

// The dynamic shared memory of copy_region_bulk, for the host to read with cuModuleGetGlobal.
extern "C" __constant__ int copy_region_bulk_smem = mk::copy_region_bulk_smem_bytes();

#define COPY_KERNELS(suffix, T)                                                                    \
  MK_KERNEL copy_region_##suffix(const T *src, long long src_ld, T *dst, long long dst_ld,         \
                                 int rows, int cols) {                                             \
    mk::copy_region(src, src_ld, dst, dst_ld, rows, cols);                                         \
  }                                                                                                \
  /* `call_rows` rows a call, so that the barriers' phases run on from call to call. */            \
  MK_KERNEL copy_region_bulk_##suffix(const T *src, long long src_ld, T *dst, long long dst_ld,    \
                                      int rows, int cols, int call_rows) {                         \
    mk::BulkCopier copier;                                                                         \
    for (int first = 0; first < rows; first += call_rows)                                          \
      mk::copy_region_bulk(src + first * src_ld, src_ld, dst + first * dst_ld, dst_ld,             \
                           min(call_rows, rows - first), cols, mk_smem, copier);                   \
  }
COPY_KERNELS(bf16, mk::bf16)
COPY_KERNELS(f32, float)

// Two CTAs: `producer` sleeps (so that a consumer that did not wait would read stale data),
// writes data[i] = i + epoch and signals; the other waits for the epoch's signal and copies data
// to out. Launched once per epoch on the same, never reset, flag.
MK_KERNEL signal_wait(float *data, int count, mk_u32 *flag, mk_u32 epoch, float *out,
                      int producer) {
  if (blockIdx.x == producer) {
    for (int i = 0; i < 100; ++i)
      __nanosleep(1000);
    for (int i = threadIdx.x; i < count; i += MK_TEAM_THREADS)
      data[i] = float(i) + float(epoch);
    mk::signal(flag);
  } else {
    mk::wait(flag, epoch);
    for (int i = threadIdx.x; i < count; i += MK_TEAM_THREADS)
      out[i] = data[i];
  }
}

// Each CTA pushes `per_cta` commands that say who sent them.
MK_KERNEL proxy_push(mk_command_queue queue, int per_cta) {
  for (int i = 0; i < per_cta; ++i) {
    mk_command command = {};
    command.op = MK_CMD_PUT_SIGNAL;
    command.view = static_cast<mk_u16>(i & 1);
    command.dst_node = blockIdx.x;
    command.src_offset = (mk_u64(blockIdx.x) << 32) | i;
    command.dst_offset = ~command.src_offset;
    command.rows = 3;
    command.row_bytes = 256;
    command.src_pitch = 512;
    command.dst_pitch = 1024;
    command.signal_offset = blockIdx.x * 1000 + i;
    mk::proxy_push(queue, command);
  }
}

// mkc-proxy-gpu-bench's kernels: puts of 64 bytes to node 1, put i reading heap offset 64 i (the
// bench's transport tells puts apart by it).
__device__ __forceinline__ mk_command bench_put(mk_u64 i) {
  mk_command command = {};
  command.op = MK_CMD_PUT;
  command.dst_node = 1;
  command.src_offset = command.dst_offset = 64 * i;
  command.rows = 1;
  command.row_bytes = 64;
  return command;
}

__device__ __forceinline__ mk_u64 global_timer() {
  mk_u64 ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}

// Enqueue latency: one CTA pushes `count` puts, each once the one before has been posted
// (`*posted` counts posts), so each finds an empty ring and an idle proxy. stamps[2 i] is the
// GPU's clock before put i is pushed, stamps[2 i + 1] when its post was seen.
MK_KERNEL proxy_enqueue_latency(mk_command_queue queue, const mk_u32 *posted, int count,
                                mk_u64 *stamps) {
  for (int i = 0; i < count; ++i) {
    const mk_u64 start = global_timer();
    mk::proxy_push(queue, bench_put(i));
    if (mk::team_thread() == 0) {
      while (mk::ptx::load_acquire_sys(posted) < mk_u32(i + 1)) {
      }
      stamps[2 * i] = start;
      stamps[2 * i + 1] = global_timer();
    }
  }
}

// Command rate: every CTA pushes `per_cta` puts as fast as the ring takes them.
MK_KERNEL proxy_enqueue_rate(mk_command_queue queue, int per_cta) {
  for (int i = 0; i < per_cta; ++i)
    mk::proxy_push(queue, bench_put(mk_u64(blockIdx.x) * per_cta + i));
}

// The GPU's clock against the host's: round i waits for *go == i + 1 from the host, stamps the
// clock and answers with *done = i + 1.
MK_KERNEL clock_probe(const mk_u32 *go, mk_u32 *done, int rounds, mk_u64 *stamps) {
  if (threadIdx.x != 0)
    return;
  for (int i = 0; i < rounds; ++i) {
    while (mk::ptx::load_acquire_sys(go) != mk_u32(i + 1)) {
    }
    stamps[i] = global_timer();
    mk::ptx::store_release_sys(done, mk_u32(i + 1));
  }
}

// dst = the sum of the two [rows x cols] bf16 slots of src (a [2 x rows x cols] tensor), 128 x 256
// tiles walked by a few persistent CTAs through TmaReduce (src's map has boxes {64, 128, 1},
// dst's {64, 128}); each tile adds 1 to *tiles_done once it is stored. MK_CTA_THREADS threads.
extern "C" __constant__ int tma_reduce_sum_bf16_smem =
    mk::TmaReduce<2, mk::bf16, mk::bf16, 128, 256>::kBytes;
extern "C" __global__ void __launch_bounds__(MK_CTA_THREADS, 1)
    tma_reduce_sum_bf16(const __grid_constant__ mk_tensor_map src,
                        const __grid_constant__ mk_tensor_map dst, int tiles_m, int tiles_n,
                        mk_u32 *tiles_done) {
  mk::TmaReduce<2, mk::bf16, mk::bf16, 128, 256> reduce(mk_smem);
  if (mk::team_member()) {
    for (int t = blockIdx.x; t < tiles_m * tiles_n; t += gridDim.x) {
      const int m0 = t / tiles_n * 128, n0 = t % tiles_n * 256;
      const mk::ReducedTile tile = mk::tma_reduce<mk::Reduce::sum>(reduce, &src, n0, m0, 0);
      mk::tma_store_reduced(reduce, tile, &dst, n0, m0);
      mk::tma_signal(reduce, tiles_done);
      mk::tma_commit(reduce);
    }
    mk::tma_reduce_finish(reduce);
  } else {
    mk::tma_publish(reduce);
  }
}

// Holds every SM (launched with as many CTAs of 1024 threads as fit, two per SM): each CTA waits
// until *flag reaches `epoch` or `timeout_ns` pass, then counts itself in *gave_up if it timed
// out. A copy that the driver runs as a kernel cannot start while it holds them, as a fused
// kernel's persistent grid holds them while it waits for a copy engine's flag.
extern "C" __global__ void __launch_bounds__(1024, 2)
    hold_sms(const mk_u32 *flag, mk_u32 epoch, mk_u64 timeout_ns, mk_u32 *gave_up) {
  if (threadIdx.x == 0) {
    const mk_u64 deadline = global_timer() + timeout_ns;
    while (mk::ptx::load_acquire_sys(flag) < epoch) {
      if (global_timer() > deadline) {
        atomicAdd(gave_up, 1u);
        break;
      }
      __nanosleep(200);
    }
  }
  __syncthreads();
}
