// Scores and their softmax over whole rows: S = scale * Q K^T for a rank's rows (K^T column
// shards all-gathered), then each row of S normalised, p = e^(s - max) / sum e^(s - max), over
// row tiles of 128 columns: a first pass keeps the running max and sum (rescaling the sum when
// the max grows), a second writes the probabilities.
// RUN: mkc %s --topology 1x1 --shape M=1024,N=1024,D=128 -o %t.1x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 1x2 --shape M=1024,N=1024,D=128 -o %t.1x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 2x1 --shape M=1024,N=1024,D=128 -o %t.2x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 2x2 --shape M=1024,N=1024,D=128 -o %t.2x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mk-sim %s --topology 1x2 --shape M=256,N=512,D=64 --seeds 2 | FileCheck %s --check-prefix=SIM
// RUN: mk-sim %s --topology 2x1 --shape M=256,N=512,D=64 --seeds 2 | FileCheck %s --check-prefix=SIM
// CUBIN: mkc: gemm_softmax: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// SIM: mk-sim: @gemm_softmax on {{.*}}: no findings

mk.program @gemm_softmax [M, N, D] mesh <?x?> (
    %Q: !mk.tensor<[M, D], bf16, shard 0 over world>,
    %Kt: !mk.tensor<[D, N], bf16, shard 1 over world>,
    %P: !mk.tensor<[M, N], f32, shard 0 over world>) {
  %K_all = mk.all_gather %Kt : !mk.tensor<[D, N], bf16, shard 1 over world> -> !mk.tensor<[D, N], bf16, replicated>
  mk.tile_grid (%m, %whole) over %P tiles [128, :] : !mk.tensor<[M, N], f32, shard 0 over world> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = mk.shape_symbol "N" : index
    %c128 = arith.constant 128 : index
    %tiles = arith.divui %n, %c128 : index
    %d = mk.shape_symbol "D" : f32
    %ds = mk.splat %d : f32 -> !mk.tile<[128, 128], f32>
    %scale = mk.rsqrt %ds : !mk.tile<[128, 128], f32>
    %zero = arith.constant 0.0 : f32
    %minus_inf = arith.constant 0xFF800000 : f32
    %max0 = mk.splat %minus_inf : f32 -> !mk.tile<[128], f32>
    %sum0 = mk.splat %zero : f32 -> !mk.tile<[128], f32>
    %max, %sum = scf.for %j = %c0 to %tiles step %c1 iter_args(%m_in = %max0, %l_in = %sum0) -> (!mk.tile<[128], f32>, !mk.tile<[128], f32>) {
      %s0 = mk.matmul %Q[%m, :], %K_all[:, %j]
          : !mk.tensor<[M, D], bf16, shard 0 over world>, !mk.tensor<[D, N], bf16, replicated> -> !mk.tile<[128, 128], f32>
      %s = mk.mul %s0, %scale : !mk.tile<[128, 128], f32>
      %tile_max = mk.reduce max %s dim 1 : !mk.tile<[128, 128], f32> -> !mk.tile<[128], f32>
      %m_out = mk.max %m_in, %tile_max : !mk.tile<[128], f32>
      %shift = mk.sub %m_in, %m_out : !mk.tile<[128], f32>
      %alpha = mk.exp %shift : !mk.tile<[128], f32>
      %mb = mk.broadcast %m_out dim 1 : !mk.tile<[128], f32> -> !mk.tile<[128, 128], f32>
      %centred = mk.sub %s, %mb : !mk.tile<[128, 128], f32>
      %e = mk.exp %centred : !mk.tile<[128, 128], f32>
      %tile_sum = mk.reduce sum %e dim 1 : !mk.tile<[128, 128], f32> -> !mk.tile<[128], f32>
      %kept = mk.mul %l_in, %alpha : !mk.tile<[128], f32>
      %l_out = mk.add %kept, %tile_sum : !mk.tile<[128], f32>
      scf.yield %m_out, %l_out : !mk.tile<[128], f32>, !mk.tile<[128], f32>
    }
    %mb = mk.broadcast %max dim 1 : !mk.tile<[128], f32> -> !mk.tile<[128, 128], f32>
    %r = mk.reciprocal %sum : !mk.tile<[128], f32>
    %rb = mk.broadcast %r dim 1 : !mk.tile<[128], f32> -> !mk.tile<[128, 128], f32>
    scf.for %j = %c0 to %tiles step %c1 {
      %s0 = mk.matmul %Q[%m, :], %K_all[:, %j]
          : !mk.tensor<[M, D], bf16, shard 0 over world>, !mk.tensor<[D, N], bf16, replicated> -> !mk.tile<[128, 128], f32>
      %s = mk.mul %s0, %scale : !mk.tile<[128, 128], f32>
      %centred = mk.sub %s, %mb : !mk.tile<[128, 128], f32>
      %e = mk.exp %centred : !mk.tile<[128, 128], f32>
      %p = mk.mul %e, %rb : !mk.tile<[128, 128], f32>
      mk.store %p, %P[%m, %j] : !mk.tile<[128, 128], f32>, !mk.tensor<[M, N], f32, shard 0 over world>
    }
  }
}
