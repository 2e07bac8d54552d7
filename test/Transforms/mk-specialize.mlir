// RUN: mk-opt %s -split-input-file -mk-specialize="topology=2x4 rank=5 shapes=M=4096,N=2048,K=1024" | FileCheck %s

// mk-specialize binds shape symbols, the mesh and the rank, and rewrites every type that names a
// symbol.

// Types of arguments, results and nested values all get the bound extents.
// CHECK-LABEL: mk.program @gemm [M = 4096, N = 2048, K = 1024] mesh <2x4> rank 5
// CHECK-SAME: %{{.*}}: !mk.tensor<[4096, 1024], bf16, shard 1 over world>
// CHECK-SAME: %{{.*}}: !mk.tensor<[1024, 2048], bf16, shard 0 over world>
// CHECK: mk.tile_grid ({{.*}}) over %{{.*}} tiles [128, 256] : !mk.tensor<[4096, 2048], bf16, replicated>
// CHECK: mk.matmul {{.*}} -> !mk.tile<[128, 256], f32>
// CHECK: mk.buffer : !mk.tensor<[8, 4096, 2048], bf16, symmetric>
mk.program @gemm [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, shard 1 over world>,
    %B: !mk.tensor<[K, N], bf16, shard 0 over world>,
    %C: !mk.tensor<[M, N], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %C tiles [128, 256] : !mk.tensor<[M, N], bf16, replicated> {
    %acc = mk.matmul %A[%m, :], %B[:, %n] : !mk.tensor<[M, K], bf16, shard 1 over world>, !mk.tensor<[K, N], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
  }
  %stage = mk.buffer : !mk.tensor<[8, M, N], bf16, symmetric>
}

// -----

// A symbol the program binds itself keeps its value; symbolic tile dims are bound too.
// CHECK-LABEL: mk.program @attention [M = 4096, N = 2048, K = 1024, D = 128] mesh <2x4> rank 5
// CHECK: mk.load {{.*}} -> !mk.tile<[128, 128], bf16>
mk.program @attention [M, N, K, D = 128] mesh <?x?> (%q: !mk.tensor<[M, D], bf16, shard 0 over world>) {
  mk.tile_grid (%i, %d) over %q tiles [128, :] : !mk.tensor<[M, D], bf16, shard 0 over world> {
    %t = mk.load %q[%i, :] : !mk.tensor<[M, D], bf16, shard 0 over world> -> !mk.tile<[128, D], bf16>
  }
}

// -----

// A symbol nothing binds takes its default's value; a binding overrides the default (the RUN line
// binds M, N and K, not C or D).
// CHECK-LABEL: mk.program @defaults [M = 4096, N = 2048 default M, K = 1024, C = 4096 default M, D = 4096 default C] mesh <2x4> rank 5
// CHECK-SAME: !mk.tensor<[4096, 4096], bf16, shard 0 over world>
mk.program @defaults [M, N default M, K, C default M, D default C] mesh <?x?> (
    %routed: !mk.tensor<[C, D], bf16, shard 0 over world>) {
}

// -----

// A program on a bound mesh equal to the topology asked for.
// CHECK-LABEL: mk.program @bound [M = 4096, N = 2048, K = 1024] mesh <2x4> rank 5
mk.program @bound [M, N, K] mesh <2x4> () {
}

// -----

// A shape symbol read as a scalar becomes a constant of its value.
// CHECK-LABEL: mk.program @mean
// CHECK-DAG: arith.constant 2.048000e+03 : f32
// CHECK-DAG: arith.constant 4096 : index
// CHECK-NOT: mk.shape_symbol
mk.program @mean [M, N, K] mesh <?x?> () {
  %n = mk.shape_symbol "N" : f32
  %m = mk.shape_symbol "M" : index
  %t = mk.splat %n : f32 -> !mk.tile<[128], f32>
}
