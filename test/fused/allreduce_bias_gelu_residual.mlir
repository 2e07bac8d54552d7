// The epilogue of a row-parallel linear layer after its all-reduce: y = x + gelu(A B + bias),
// the bias a vector broadcast down the rows, the residual x read beside the combined tile the
// all-reduce gives the body, in the kernel that all-reduces the product.
// RUN: mkc %s --topology 1x1 --shape M=1024,N=1024,K=1024 -o %t.1x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 1x2 --shape M=1024,N=1024,K=1024 -o %t.1x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 2x1 --shape M=1024,N=1024,K=1024 -o %t.2x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 2x2 --shape M=1024,N=1024,K=1024 -o %t.2x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mk-sim %s --topology 1x2 --shape M=384,N=768,K=256 --seeds 2 | FileCheck %s --check-prefix=SIM
// RUN: mk-sim %s --topology 2x1 --shape M=384,N=768,K=256 --seeds 2 | FileCheck %s --check-prefix=SIM
// CUBIN: mkc: allreduce_bias_gelu_residual: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// SIM: mk-sim: @allreduce_bias_gelu_residual on {{.*}}: no findings

mk.program @allreduce_bias_gelu_residual [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, shard 1 over world>,
    %B: !mk.tensor<[K, N], bf16, shard 0 over world>,
    %bias: !mk.tensor<[N], bf16, replicated>,
    %X: !mk.tensor<[M, N], bf16, replicated>,
    %Y: !mk.tensor<[M, N], bf16, replicated>) {
  %R = mk.buffer : !mk.tensor<[M, N], bf16, replicated>
  mk.tile_grid (%m, %n) over %R tiles [128, 256] : !mk.tensor<[M, N], bf16, replicated> {
    %p = mk.matmul %A[%m, :], %B[:, %n]
        : !mk.tensor<[M, K], bf16, shard 1 over world>, !mk.tensor<[K, N], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
    %p16 = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    %r16 = mk.all_reduce sum %p16 into %R[%m, %n]
        : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated> -> !mk.tile<[128, 256], bf16>
    %r = mk.convert %r16 : !mk.tile<[128, 256], bf16> -> !mk.tile<[128, 256], f32>
    %b16 = mk.load %bias[%n] : !mk.tensor<[N], bf16, replicated> -> !mk.tile<[256], bf16>
    %b = mk.convert %b16 : !mk.tile<[256], bf16> -> !mk.tile<[256], f32>
    %bb = mk.broadcast %b dim 0 : !mk.tile<[256], f32> -> !mk.tile<[128, 256], f32>
    %z = mk.add %r, %bb : !mk.tile<[128, 256], f32>
    %g = mk.activation gelu %z : !mk.tile<[128, 256], f32>
    %x16 = mk.load %X[%m, %n] : !mk.tensor<[M, N], bf16, replicated> -> !mk.tile<[128, 256], bf16>
    %x = mk.convert %x16 : !mk.tile<[128, 256], bf16> -> !mk.tile<[128, 256], f32>
    %y = mk.add %x, %g : !mk.tile<[128, 256], f32>
    %y16 = mk.convert %y : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.store %y16, %Y[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
  }
}
