// GEMM + AllReduce into a buffer, then a second grid that reads each reduced tile, adds a bias and
// applies GeLU: an epilogue after the collective, which is not in the library.
//
// On one node of two GPUs the all-reduce runs in place: each GPU receives two writes of every
// tile per launch, the first writer's put and then the other's `combine sum` put. Only the
// combining put signals the tile's flag, so the reader's `count 1` waits for the sum, launch
// after launch (it used to count both, reading partial sums and, from the second launch on, not
// waiting at all).

// RUN: mkc %s --topology 1x2 --shape M=1000,N=1024,K=512 --gemm-tile-n 256 --emit=mlir | FileCheck %s --check-prefix=INPLACE
// RUN: mkc %s --topology 1x2 --shape M=1000,N=1024,K=512 --gemm-tile-n 256 --emit=cuda -o /dev/null
// RUN: mkc %s --topology 2x2 --shape M=1000,N=1024,K=512 --gemm-tile-n 256 --emit=cuda -o /dev/null

// INPLACE: mk.flags @[[READY:ready[0-9]+]] [8, 4]
// INPLACE: mk.role compute
// The first writer's puts signal only the flag that orders the combining puts after them.
// INPLACE: scf.if
// INPLACE: mk.put {{.*}} at gpu %{{.*}} via nvlink_store :
// INPLACE-NOT: mk.signal @[[READY]]
// INPLACE: mk.signal @initialized{{[0-9]+}}
// INPLACE: } else {
// INPLACE: mk.put {{.*}} via nvlink_store combine sum
// INPLACE-NEXT: mk.signal @[[READY]][%{{.*}}, %{{.*}}] at gpu
// INPLACE: mk.wait @[[READY]][%{{.*}}, %{{.*}}] count 1
// INPLACE-NEXT: mk.load

mk.program @gemm_allreduce_epilogue [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, shard 1 over world>,
    %B: !mk.tensor<[K, N], bf16, shard 0 over world>,
    %bias: !mk.tensor<[M, N], bf16, replicated>,
    %Y: !mk.tensor<[M, N], bf16, replicated>) {
  %C = mk.buffer : !mk.tensor<[M, N], bf16, replicated>
  mk.tile_grid (%m, %n) over %C tiles [128, 256] masked : !mk.tensor<[M, N], bf16, replicated> {
    %partial = mk.matmul %A[%m, :], %B[:, %n]
        : !mk.tensor<[M, K], bf16, shard 1 over world>, !mk.tensor<[K, N], bf16, shard 0 over world>
        -> !mk.tile<[128, 256], f32>
    %tile = mk.convert %partial : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %tile into %C[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
  }
  mk.tile_grid (%m, %n) over %Y tiles [128, 256] masked : !mk.tensor<[M, N], bf16, replicated> {
    %c = mk.load %C[%m, %n] : !mk.tensor<[M, N], bf16, replicated> -> !mk.tile<[128, 256], bf16>
    %b = mk.load %bias[%m, %n] : !mk.tensor<[M, N], bf16, replicated> -> !mk.tile<[128, 256], bf16>
    %c32 = mk.convert %c : !mk.tile<[128, 256], bf16> -> !mk.tile<[128, 256], f32>
    %b32 = mk.convert %b : !mk.tile<[128, 256], bf16> -> !mk.tile<[128, 256], f32>
    %sum = mk.add %c32, %b32 : !mk.tile<[128, 256], f32>
    %act = mk.activation gelu %sum : !mk.tile<[128, 256], f32>
    %y = mk.convert %act : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.store %y, %Y[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
  }
}
