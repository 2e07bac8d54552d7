// RMSNorm after a reduce-scatter (tensor parallelism into sequence parallelism): the partial
// products of the ranks' K shards are summed onto the rank that owns each row block, which then
// normalises its whole rows, y = x / sqrt(mean(x^2) + eps) * gamma, in the same kernel: a first
// pass over a row's tiles sums the squares, a second scales them.
// RUN: mkc %s --topology 1x1 --shape M=1024,N=4096,K=512 -o %t.1x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 1x2 --shape M=1024,N=4096,K=512 -o %t.1x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 2x1 --shape M=1024,N=4096,K=512 -o %t.2x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 2x2 --shape M=1024,N=4096,K=512 -o %t.2x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mk-sim %s --topology 1x2 --shape M=256,N=768,K=128 --seeds 2 | FileCheck %s --check-prefix=SIM
// RUN: mk-sim %s --topology 2x1 --shape M=256,N=768,K=128 --seeds 2 | FileCheck %s --check-prefix=SIM
// CUBIN: mkc: rmsnorm_reducescatter: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// SIM: mk-sim: @rmsnorm_reducescatter on {{.*}}: no findings

mk.program @rmsnorm_reducescatter [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, shard 1 over world>,
    %B: !mk.tensor<[K, N], bf16, shard 0 over world>,
    %gamma: !mk.tensor<[N], bf16, replicated>,
    %Y: !mk.tensor<[M, N], bf16, shard 0 over world>) {
  %S = mk.buffer : !mk.tensor<[M, N], bf16, shard 0 over world>
  mk.tile_grid (%m, %n) over %S global tiles [128, 256] : !mk.tensor<[M, N], bf16, shard 0 over world> {
    %p = mk.matmul %A[%m, :], %B[:, %n]
        : !mk.tensor<[M, K], bf16, shard 1 over world>, !mk.tensor<[K, N], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
    %p16 = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.reduce_scatter sum %p16 into %S[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, shard 0 over world>
  }
  mk.tile_grid (%m, %whole) over %Y tiles [128, :] : !mk.tensor<[M, N], bf16, shard 0 over world> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c255 = arith.constant 255 : index
    %c256 = arith.constant 256 : index
    %n = mk.shape_symbol "N" : index
    %n_up = arith.addi %n, %c255 : index
    %tiles = arith.divui %n_up, %c256 : index
    %zero = arith.constant 0.0 : f32
    %sum0 = mk.splat %zero : f32 -> !mk.tile<[128], f32>
    %sum = scf.for %j = %c0 to %tiles step %c1 iter_args(%acc = %sum0) -> (!mk.tile<[128], f32>) {
      %x16 = mk.load %S[%m, %j] : !mk.tensor<[M, N], bf16, shard 0 over world> -> !mk.tile<[128, 256], bf16>
      %x = mk.convert %x16 : !mk.tile<[128, 256], bf16> -> !mk.tile<[128, 256], f32>
      %x2 = mk.mul %x, %x : !mk.tile<[128, 256], f32>
      %rows = mk.reduce sum %x2 dim 1 : !mk.tile<[128, 256], f32> -> !mk.tile<[128], f32>
      %next = mk.add %acc, %rows : !mk.tile<[128], f32>
      scf.yield %next : !mk.tile<[128], f32>
    }
    %count = mk.shape_symbol "N" : f32
    %eps = arith.constant 1.0e-06 : f32
    %counts = mk.splat %count : f32 -> !mk.tile<[128], f32>
    %epss = mk.splat %eps : f32 -> !mk.tile<[128], f32>
    %mean = mk.div %sum, %counts : !mk.tile<[128], f32>
    %var = mk.add %mean, %epss : !mk.tile<[128], f32>
    %inv = mk.rsqrt %var : !mk.tile<[128], f32>
    %scale = mk.broadcast %inv dim 1 : !mk.tile<[128], f32> -> !mk.tile<[128, 256], f32>
    scf.for %j = %c0 to %tiles step %c1 {
      %x16 = mk.load %S[%m, %j] : !mk.tensor<[M, N], bf16, shard 0 over world> -> !mk.tile<[128, 256], bf16>
      %x = mk.convert %x16 : !mk.tile<[128, 256], bf16> -> !mk.tile<[128, 256], f32>
      %g16 = mk.load %gamma[%j] : !mk.tensor<[N], bf16, replicated> -> !mk.tile<[256], bf16>
      %g = mk.convert %g16 : !mk.tile<[256], bf16> -> !mk.tile<[256], f32>
      %gb = mk.broadcast %g dim 0 : !mk.tile<[256], f32> -> !mk.tile<[128, 256], f32>
      %xs = mk.mul %x, %scale : !mk.tile<[128, 256], f32>
      %y = mk.mul %xs, %gb : !mk.tile<[128, 256], f32>
      %y16 = mk.convert %y : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
      mk.store %y16, %Y[%m, %j] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, shard 0 over world>
    }
  }
}
