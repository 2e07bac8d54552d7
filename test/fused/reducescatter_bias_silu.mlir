// A linear layer whose output is reduce-scattered over the rows, then y = silu(A B + bias) on
// the rank that holds each row block: the body continues with the combined tile the
// reduce-scatter gives it.
// RUN: mkc %s --topology 1x1 --shape M=1024,N=1024,K=512 -o %t.1x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 1x2 --shape M=1024,N=1024,K=512 -o %t.1x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 2x1 --shape M=1024,N=1024,K=512 -o %t.2x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 2x2 --shape M=1024,N=1024,K=512 -o %t.2x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mk-sim %s --topology 1x2 --shape M=256,N=512,K=128 --seeds 2 | FileCheck %s --check-prefix=SIM
// RUN: mk-sim %s --topology 2x1 --shape M=256,N=512,K=128 --seeds 2 | FileCheck %s --check-prefix=SIM
// CUBIN: mkc: reducescatter_bias_silu: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// SIM: mk-sim: @reducescatter_bias_silu on {{.*}}: no findings

mk.program @reducescatter_bias_silu [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, shard 1 over world>,
    %B: !mk.tensor<[K, N], bf16, shard 0 over world>,
    %bias: !mk.tensor<[N], f32, replicated>,
    %Y: !mk.tensor<[M, N], bf16, shard 0 over world>) {
  %S = mk.buffer : !mk.tensor<[M, N], bf16, shard 0 over world>
  mk.tile_grid (%m, %n) over %S global tiles [128, 128] : !mk.tensor<[M, N], bf16, shard 0 over world> {
    %p = mk.matmul %A[%m, :], %B[:, %n]
        : !mk.tensor<[M, K], bf16, shard 1 over world>, !mk.tensor<[K, N], bf16, shard 0 over world> -> !mk.tile<[128, 128], f32>
    %p16 = mk.convert %p : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
    %s16 = mk.reduce_scatter sum %p16 into %S[%m, %n]
        : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, N], bf16, shard 0 over world> -> !mk.tile<[128, 128], bf16>
    %s = mk.convert %s16 : !mk.tile<[128, 128], bf16> -> !mk.tile<[128, 128], f32>
    %b = mk.load %bias[%n] : !mk.tensor<[N], f32, replicated> -> !mk.tile<[128], f32>
    %bb = mk.broadcast %b dim 0 : !mk.tile<[128], f32> -> !mk.tile<[128, 128], f32>
    %z = mk.add %s, %bb : !mk.tile<[128, 128], f32>
    %y = mk.activation silu %z : !mk.tile<[128, 128], f32>
    %y16 = mk.convert %y : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
    mk.store %y16, %Y[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, N], bf16, shard 0 over world>
  }
}
