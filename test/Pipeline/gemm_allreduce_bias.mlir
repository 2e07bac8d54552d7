// A GEMM + AllReduce into a buffer, and a second grid that adds a bias to its 128 x 256 tiles: at
// M = 128 the GEMM's own best width would be 128 columns, which the second grid's reads of the
// buffer do not agree with, so the GEMM keeps 256 (mk-tile-and-order) and the program compiles.

// RUN: mkc %s --topology 1x2 --shape M=128,N=1024,K=512 --emit=mlir | FileCheck %s --check-prefix=SCHED
// RUN: mkc %s --topology 1x1 --shape M=128,N=1024,K=512 --emit=mlir | FileCheck %s --check-prefix=SCHED
// RUN: mkc %s --topology 1x2 --shape M=128,N=1024,K=512 --emit=cuda | FileCheck %s --check-prefix=CUDA
// RUN: mkc %s --topology 1x2 --shape M=128,N=1024,K=512 -o %t.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN

// SCHED: mk.tile_grid {{.*}} over %{{.*}} tiles [128, 256] order <swizzle 1{{.*}}> : !mk.tensor<[128, 1024], bf16, replicated> {
// SCHED: mk.matmul {{.*}} -> !mk.tile<[128, 256], f32>
// SCHED: mk.tile_grid {{.*}} over %{{.*}} tiles [128, 256] order <row_major> : !mk.tensor<[128, 1024], bf16, replicated> {
// SCHED: mk.load {{.*}} -> !mk.tile<[128, 256], bf16>

// CUDA: extern "C" __global__ __launch_bounds__(MK_CTA_THREADS, 1) void gemm_allreduce_bias(

// CUBIN: mkc: gemm_allreduce_bias: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

mk.program @gemm_allreduce_bias [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, shard 1 over world>,
    %B: !mk.tensor<[K, N], bf16, shard 0 over world>,
    %bias: !mk.tensor<[M, N], bf16, replicated>,
    %out: !mk.tensor<[M, N], bf16, replicated>) {
  %sum = mk.buffer : !mk.tensor<[M, N], bf16, replicated>
  mk.tile_grid (%m, %n) over %sum tiles [128, 256] : !mk.tensor<[M, N], bf16, replicated> {
    %partial = mk.matmul %A[%m, :], %B[:, %n]
        : !mk.tensor<[M, K], bf16, shard 1 over world>, !mk.tensor<[K, N], bf16, shard 0 over world>
        -> !mk.tile<[128, 256], f32>
    %tile = mk.convert %partial : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %tile into %sum[%m, %n]
        : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
  }
  mk.tile_grid (%m, %n) over %out tiles [128, 256] : !mk.tensor<[M, N], bf16, replicated> {
    %x = mk.load %sum[%m, %n] : !mk.tensor<[M, N], bf16, replicated> -> !mk.tile<[128, 256], bf16>
    %b = mk.load %bias[%m, %n] : !mk.tensor<[M, N], bf16, replicated> -> !mk.tile<[128, 256], bf16>
    %y = mk.add %x, %b : !mk.tile<[128, 256], bf16>
    mk.store %y, %out[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
  }
}
