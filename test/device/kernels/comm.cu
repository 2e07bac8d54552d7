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
  MK_KERNEL copy_region_bulk_##suffix(const T *src, long long src_ld, T *dst, long long dst_ld,    \
                                      int rows, int cols) {                                        \
    mk::copy_region_bulk(src, src_ld, dst, dst_ld, rows, cols, mk_smem);                           \
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
