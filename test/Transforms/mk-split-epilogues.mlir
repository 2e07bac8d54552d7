// RUN: mk-opt %s -split-input-file -mk-split-epilogues | FileCheck %s

// What uses an all-reduce's combined tile moves into a grid of the destination's tiles after
// the grid, which reads the tile back; the bias load it needs is recomputed there, and the
// all-reduce keeps no result.
// CHECK-LABEL: mk.program @all_reduce
// CHECK: mk.tile_grid (%[[M:.+]], %[[N:.+]]) over %[[R:.+]] tiles [128, 256] masked
// CHECK-NOT: mk.load
// CHECK:   mk.matmul
// CHECK:   mk.all_reduce sum %{{.*}} into %[[R]][%[[M]], %[[N]]] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>{{$}}
// CHECK-NEXT: }
// CHECK: mk.tile_grid (%[[M2:.+]], %[[N2:.+]]) over %[[R]] tiles [128, 256] masked
// CHECK:   %[[S:.+]] = mk.load %[[R]][%[[M2]], %[[N2]]] : !mk.tensor<[M, N], bf16, replicated> -> !mk.tile<[128, 256], bf16>
// CHECK:   %[[B:.+]] = mk.load %{{.*}}[%[[M2]], %[[N2]]]
// CHECK:   mk.add %[[S]], %[[B]]
// CHECK:   mk.store
mk.program @all_reduce [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, shard 1 over world>, %B: !mk.tensor<[K, N], bf16, shard 0 over world>,
    %bias: !mk.tensor<[M, N], bf16, replicated>, %Y: !mk.tensor<[M, N], bf16, replicated>) {
  %R = mk.buffer : !mk.tensor<[M, N], bf16, replicated>
  mk.tile_grid (%m, %n) over %R tiles [128, 256] masked : !mk.tensor<[M, N], bf16, replicated> {
    %b = mk.load %bias[%m, %n] : !mk.tensor<[M, N], bf16, replicated> -> !mk.tile<[128, 256], bf16>
    %p = mk.matmul %A[%m, :], %B[:, %n] : !mk.tensor<[M, K], bf16, shard 1 over world>, !mk.tensor<[K, N], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
    %p16 = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    %s = mk.all_reduce sum %p16 into %R[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated> -> !mk.tile<[128, 256], bf16>
    %y = mk.add %s, %b : !mk.tile<[128, 256], bf16>
    mk.store %y, %Y[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
  }
}

// -----

// A reduce-scatter's combined tile, on the rank that holds it: the new grid covers the shard's
// tiles (not global), an epilogue inside a loop moves whole.
// CHECK-LABEL: mk.program @reduce_scatter
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %[[S:.+]] global tiles [128, 128]
// CHECK:   mk.reduce_scatter sum %{{.*}} into %[[S]][%{{.*}}, %{{.*}}] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, N], bf16, shard 0 over world>{{$}}
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %[[S]] tiles [128, 128] :
// CHECK:   mk.load %[[S]]
// CHECK:   scf.for
// CHECK:     mk.activation relu
mk.program @reduce_scatter [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, shard 1 over world>, %B: !mk.tensor<[K, N], bf16, shard 0 over world>,
    %Y: !mk.tensor<[M, N], bf16, shard 0 over world>) {
  %S = mk.buffer : !mk.tensor<[M, N], bf16, shard 0 over world>
  mk.tile_grid (%m, %n) over %S global tiles [128, 128] : !mk.tensor<[M, N], bf16, shard 0 over world> {
    %p = mk.matmul %A[%m, :], %B[:, %n] : !mk.tensor<[M, K], bf16, shard 1 over world>, !mk.tensor<[K, N], bf16, shard 0 over world> -> !mk.tile<[128, 128], f32>
    %p16 = mk.convert %p : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
    %s = mk.reduce_scatter sum %p16 into %S[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, N], bf16, shard 0 over world> -> !mk.tile<[128, 128], bf16>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %r = scf.for %i = %c0 to %c2 step %c1 iter_args(%t = %s) -> (!mk.tile<[128, 128], bf16>) {
      %u = mk.activation relu %t : !mk.tile<[128, 128], bf16>
      scf.yield %u : !mk.tile<[128, 128], bf16>
    }
    mk.store %r, %Y[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, N], bf16, shard 0 over world>
  }
}
