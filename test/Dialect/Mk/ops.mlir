// RUN: mk-opt %s -split-input-file | mk-opt -split-input-file | FileCheck %s
// RUN: mk-opt %s -split-input-file -mlir-print-op-generic | mk-opt -split-input-file | FileCheck %s

// Round trip of every op, type and attribute of the mk dialect, in the custom and in the generic
// form. Each case is a program that verifies.

// Types and attributes: every placement, mesh form and element type.
// CHECK-LABEL: mk.program @types [M, N = 512, C default M] mesh <2x4>
// CHECK-SAME: !mk.tensor<[M, N], bf16, shard 0 over world>
// CHECK-SAME: !mk.tensor<[M, 512], f16, shard 1 over nodes>
// CHECK-SAME: !mk.tensor<[16, N], f32, shard 0 over gpus>
// CHECK-SAME: !mk.tensor<[M, N], f8E4M3FN, replicated>
// CHECK-SAME: !mk.tensor<[4, M, N], f8E5M2, symmetric>
// CHECK-SAME: !mk.tensor<[M], i32, replicated>
mk.program @types [M, N = 512, C default M] mesh <2x4> (
    %a: !mk.tensor<[M, N], bf16, shard 0 over world>,
    %b: !mk.tensor<[M, 512], f16, shard 1 over nodes>,
    %c: !mk.tensor<[16, N], f32, shard 0 over gpus>,
    %d: !mk.tensor<[M, N], f8E4M3FN, replicated>,
    %e: !mk.tensor<[4, M, N], f8E5M2, symmetric>,
    %f: !mk.tensor<[M], i32, replicated>) {
}

// -----

// A program with no shape symbols on an unbound mesh, and a buffer.
// CHECK-LABEL: mk.program @buffer [] mesh <?x?>
// CHECK: mk.buffer : !mk.tensor<[64, 64], f32, symmetric>
// CHECK: mk.buffer {note = "scratch"} : !mk.tensor<[64, 64], f32, replicated>
mk.program @buffer [] mesh <?x?> () {
  %s = mk.buffer : !mk.tensor<[64, 64], f32, symmetric>
  %r = mk.buffer {note = "scratch"} : !mk.tensor<[64, 64], f32, replicated>
}

// -----

// Tile grids: local and global, whole-dim tiles, masked partial tiles, each order, row counts.
// CHECK-LABEL: mk.program @grids
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [128, 256] : !mk.tensor<[M, N], bf16, shard 1 over world> {
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} global tiles [128, :] order <swizzle 8> : !mk.tensor<[M, N], bf16, shard 1 over world> {
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [96, 256] order <row_major, local_first> masked : !mk.tensor<[M, N], bf16, shard 1 over world> {
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [128, 256] order <column_major> : !mk.tensor<[M, N], bf16, shard 1 over world> attributes {note} {
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}, %{{.*}}) over %{{.*}} tiles [1, 128, :] rows %{{.*}} : !mk.tensor<[E, C, N], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world> {
mk.program @grids [M, N, E, C] mesh <?x?> (
    %c: !mk.tensor<[M, N], bf16, shard 1 over world>,
    %routed: !mk.tensor<[E, C, N], bf16, shard 0 over world>,
    %counts: !mk.tensor<[E], i32, shard 0 over world>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] : !mk.tensor<[M, N], bf16, shard 1 over world> {
  }
  mk.tile_grid (%m, %n) over %c global tiles [128, :] order <swizzle 8> : !mk.tensor<[M, N], bf16, shard 1 over world> {
  }
  mk.tile_grid (%m, %n) over %c tiles [96, 256] order <row_major, local_first> masked : !mk.tensor<[M, N], bf16, shard 1 over world> {
  }
  mk.tile_grid (%m, %n) over %c tiles [128, 256] order <column_major> : !mk.tensor<[M, N], bf16, shard 1 over world> attributes {note} {
  }
  mk.tile_grid (%e, %t, %n) over %routed tiles [1, 128, :] rows %counts : !mk.tensor<[E, C, N], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world> {
  }
}

// -----

// Compute on tiles: load, matmul (both operand layouts, with k_tile), elementwise ops, activations,
// broadcast, reduce, splat, convert, store.
// CHECK-LABEL: mk.program @compute
// CHECK: %[[X:.+]] = mk.load %{{.*}}[%{{.*}}, :] : !mk.tensor<[M, K], bf16, replicated> -> !mk.tile<[128, K], bf16>
// CHECK: %[[ACC:.+]] = mk.matmul %{{.*}}[%{{.*}}, :], %{{.*}}[:, %{{.*}}] {k_tile = 64 : i64} : !mk.tensor<[M, K], bf16, replicated>, !mk.tensor<[K, N], bf16, replicated> -> !mk.tile<[128, 256], f32>
// CHECK: mk.matmul %{{.*}}[:, %{{.*}}], %{{.*}}[%{{.*}}, :] : !mk.tensor<[K, M], bf16, replicated>, !mk.tensor<[N, K], bf16, replicated> -> !mk.tile<[128, 256], f32>
// CHECK: mk.add %[[ACC]], %{{.*}} : !mk.tile<[128, 256], f32>
// CHECK: mk.sub
// CHECK: mk.mul
// CHECK: mk.div
// CHECK: mk.max
// CHECK: mk.min %{{.*}}, %{{.*}} : !mk.tile<[128, 256], f32>
// CHECK: mk.exp %{{.*}} : !mk.tile<[128, 256], f32>
// CHECK: mk.log
// CHECK: mk.sqrt
// CHECK: mk.rsqrt
// CHECK: mk.reciprocal
// CHECK: mk.tanh
// CHECK: mk.sigmoid
// CHECK: mk.neg
// CHECK: mk.abs
// CHECK: mk.activation relu %{{.*}} : !mk.tile<[128, 256], f32>
// CHECK: mk.activation gelu
// CHECK: mk.activation silu
// CHECK: mk.swiglu %{{.*}}, %{{.*}} : !mk.tile<[128, 256], f32>
// CHECK: mk.load %{{.*}}[%{{.*}}] : !mk.tensor<[N], f32, replicated> -> !mk.tile<[256], f32>
// CHECK: mk.broadcast %{{.*}} dim 0 : !mk.tile<[256], f32> -> !mk.tile<[128, 256], f32>
// CHECK: mk.reduce sum %{{.*}} dim 1 : !mk.tile<[128, 256], f32> -> !mk.tile<[128], f32>
// CHECK: mk.reduce max
// CHECK: mk.reduce min
// CHECK: mk.shape_symbol "N" : f32
// CHECK: mk.splat %{{.*}} : f32 -> !mk.tile<[128, 256], f32>
// CHECK: mk.convert %{{.*}} : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
// CHECK: mk.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
mk.program @compute [M, N, K] mesh <?x?> (
    %x: !mk.tensor<[M, K], bf16, replicated>,
    %w: !mk.tensor<[K, N], bf16, replicated>,
    %xt: !mk.tensor<[K, M], bf16, replicated>,
    %wt: !mk.tensor<[N, K], bf16, replicated>,
    %bias: !mk.tensor<[N], f32, replicated>,
    %y: !mk.tensor<[M, N], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %y tiles [128, 256] : !mk.tensor<[M, N], bf16, replicated> {
    %row = mk.load %x[%m, :] : !mk.tensor<[M, K], bf16, replicated> -> !mk.tile<[128, K], bf16>
    %acc = mk.matmul %x[%m, :], %w[:, %n] {k_tile = 64} : !mk.tensor<[M, K], bf16, replicated>, !mk.tensor<[K, N], bf16, replicated> -> !mk.tile<[128, 256], f32>
    %acc_t = mk.matmul %xt[:, %m], %wt[%n, :] : !mk.tensor<[K, M], bf16, replicated>, !mk.tensor<[N, K], bf16, replicated> -> !mk.tile<[128, 256], f32>
    %0 = mk.add %acc, %acc_t : !mk.tile<[128, 256], f32>
    %1 = mk.sub %0, %acc : !mk.tile<[128, 256], f32>
    %2 = mk.mul %1, %acc : !mk.tile<[128, 256], f32>
    %3 = mk.div %2, %acc : !mk.tile<[128, 256], f32>
    %mx0 = mk.max %3, %acc : !mk.tile<[128, 256], f32>
    %mn0 = mk.min %mx0, %acc : !mk.tile<[128, 256], f32>
    %u0 = mk.exp %mn0 : !mk.tile<[128, 256], f32>
    %u1 = mk.log %u0 : !mk.tile<[128, 256], f32>
    %u2 = mk.sqrt %u1 : !mk.tile<[128, 256], f32>
    %u3 = mk.rsqrt %u2 : !mk.tile<[128, 256], f32>
    %u4 = mk.reciprocal %u3 : !mk.tile<[128, 256], f32>
    %u5 = mk.tanh %u4 : !mk.tile<[128, 256], f32>
    %u6 = mk.sigmoid %u5 : !mk.tile<[128, 256], f32>
    %u7 = mk.neg %u6 : !mk.tile<[128, 256], f32>
    %4 = mk.abs %u7 : !mk.tile<[128, 256], f32>
    %5 = mk.activation relu %4 : !mk.tile<[128, 256], f32>
    %6 = mk.activation gelu %5 : !mk.tile<[128, 256], f32>
    %7 = mk.activation silu %6 : !mk.tile<[128, 256], f32>
    %8 = mk.swiglu %7, %acc : !mk.tile<[128, 256], f32>
    %b = mk.load %bias[%n] : !mk.tensor<[N], f32, replicated> -> !mk.tile<[256], f32>
    %bb = mk.broadcast %b dim 0 : !mk.tile<[256], f32> -> !mk.tile<[128, 256], f32>
    %9 = mk.add %8, %bb : !mk.tile<[128, 256], f32>
    %s = mk.reduce sum %9 dim 1 : !mk.tile<[128, 256], f32> -> !mk.tile<[128], f32>
    %mx = mk.reduce max %9 dim 1 : !mk.tile<[128, 256], f32> -> !mk.tile<[128], f32>
    %mn = mk.reduce min %9 dim 0 : !mk.tile<[128, 256], f32> -> !mk.tile<[256], f32>
    %count = mk.shape_symbol "N" : f32
    %half = arith.constant 0.5 : f32
    %h = mk.splat %half : f32 -> !mk.tile<[128, 256], f32>
    %10 = mk.mul %9, %h : !mk.tile<[128, 256], f32>
    %out = mk.convert %10 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.store %out, %y[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
  }
}

// -----

// Online-softmax attention blocks, plain and causal with an explicit scale.
// CHECK-LABEL: mk.program @attention
// CHECK: mk.attention_block %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : !mk.tile<[64, 128], bf16>, !mk.tile<[128, 128], bf16>, !mk.tile<[128, 128], bf16>, !mk.tile<[64, 128], f32>, !mk.tile<[64], f32>
// CHECK: mk.attention_block %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} at (%{{.*}}, %{{.*}}) causal {scale = 1.250000e-01 : f32}
mk.program @attention [S] mesh <?x?> (%q: !mk.tensor<[S, 128], bf16, replicated>, %kv: !mk.tensor<[S, 128], bf16, replicated>) {
  mk.tile_grid (%i, %d) over %q tiles [64, :] : !mk.tensor<[S, 128], bf16, replicated> {
    %j = arith.constant 0 : index
    %qt = mk.load %q[%i, :] : !mk.tensor<[S, 128], bf16, replicated> -> !mk.tile<[64, 128], bf16>
    %kt = mk.load %kv[%j, :] : !mk.tensor<[S, 128], bf16, replicated> -> !mk.tile<[128, 128], bf16>
    %zero = arith.constant 0.0 : f32
    %acc = mk.splat %zero : f32 -> !mk.tile<[64, 128], f32>
    %m = mk.splat %zero : f32 -> !mk.tile<[64], f32>
    %a1, %m1, %l1 = mk.attention_block %qt, %kt, %kt, %acc, %m, %m : !mk.tile<[64, 128], bf16>, !mk.tile<[128, 128], bf16>, !mk.tile<[128, 128], bf16>, !mk.tile<[64, 128], f32>, !mk.tile<[64], f32>
    %a2, %m2, %l2 = mk.attention_block %qt, %kt, %kt, %a1, %m1, %l1 at (%i, %j) causal {scale = 0.125 : f32} : !mk.tile<[64, 128], bf16>, !mk.tile<[128, 128], bf16>, !mk.tile<[128, 128], bf16>, !mk.tile<[64, 128], f32>, !mk.tile<[64], f32>
  }
}

// -----

// Collective intents: all-reduce (over the world and over the GPUs of a node), reduce-scatter,
// all-gather with a chunk size.
// CHECK-LABEL: mk.program @collectives
// CHECK: mk.all_gather %{{.*}} {chunk = array<i64: 128, 64>} : !mk.tensor<[M, K], bf16, shard 0 over world> -> !mk.tensor<[M, K], bf16, replicated>
// CHECK: mk.all_reduce sum %{{.*}} into %{{.*}}[%{{.*}}, %{{.*}}] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, M], bf16, replicated>
// CHECK: mk.all_reduce max %{{.*}} into %{{.*}}[%{{.*}}, %{{.*}}] over gpus : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, M], bf16, symmetric>
// CHECK: mk.reduce_scatter sum %{{.*}} into %{{.*}}[%{{.*}}, %{{.*}}] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, M], bf16, shard 0 over world>
// CHECK: %{{.*}} = mk.all_reduce sum %{{.*}} into %{{.*}}[%{{.*}}, %{{.*}}] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, M], bf16, replicated> -> !mk.tile<[128, 128], bf16>
// CHECK: %{{.*}} = mk.reduce_scatter sum %{{.*}} into %{{.*}}[%{{.*}}, %{{.*}}] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, M], bf16, shard 0 over world> -> !mk.tile<[128, 128], bf16>
mk.program @collectives [M, K] mesh <?x?> (
    %a: !mk.tensor<[M, K], bf16, shard 0 over world>,
    %r: !mk.tensor<[M, M], bf16, replicated>,
    %p: !mk.tensor<[M, M], bf16, symmetric>,
    %s: !mk.tensor<[M, M], bf16, shard 0 over world>) {
  %all = mk.all_gather %a {chunk = array<i64: 128, 64>} : !mk.tensor<[M, K], bf16, shard 0 over world> -> !mk.tensor<[M, K], bf16, replicated>
  mk.tile_grid (%m, %n) over %r tiles [128, 128] : !mk.tensor<[M, M], bf16, replicated> {
    %acc = mk.matmul %all[%m, :], %all[%n, :] : !mk.tensor<[M, K], bf16, replicated>, !mk.tensor<[M, K], bf16, replicated> -> !mk.tile<[128, 128], f32>
    %t = mk.convert %acc : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
    mk.all_reduce sum %t into %r[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, M], bf16, replicated>
    mk.all_reduce max %t into %p[%m, %n] over gpus : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, M], bf16, symmetric>
    mk.reduce_scatter sum %t into %s[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, M], bf16, shard 0 over world>
    %ar = mk.all_reduce sum %t into %r[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, M], bf16, replicated> -> !mk.tile<[128, 128], bf16>
    %rs = mk.reduce_scatter sum %ar into %s[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, M], bf16, shard 0 over world> -> !mk.tile<[128, 128], bf16>
  }
}

// -----

// A ring shift with loop-carried values, one without, and the shard range of the source.
// CHECK-LABEL: mk.program @ring
// CHECK: %{{.*}} = mk.ring_shift %{{.*}} over world iter_args(%{{.*}} : !mk.tile<[128], f32>) : !mk.tensor<[S, 128], bf16, shard 0 over world> -> !mk.tile<[128], f32> {
// CHECK: ^bb0(%[[SRC:.+]]: index, %[[KV:.+]]: !mk.tensor<[S, 128], bf16, shard 0 over world>, %{{.*}}: !mk.tile<[128], f32>):
// CHECK: mk.shard_range %[[KV]] tile 128 of %[[SRC]] : !mk.tensor<[S, 128], bf16, shard 0 over world>
// CHECK: mk.yield %{{.*}} : !mk.tile<[128], f32>
// CHECK: mk.ring_shift %{{.*}}, %{{.*}} over nodes : !mk.tensor<[S, 128], bf16, shard 0 over nodes>, !mk.tensor<[S, 128], bf16, shard 0 over nodes> {
mk.program @ring [S] mesh <?x?> (%kv: !mk.tensor<[S, 128], bf16, shard 0 over world>,
                                 %k2: !mk.tensor<[S, 128], bf16, shard 0 over nodes>) {
  mk.tile_grid (%i, %d) over %kv tiles [128, :] : !mk.tensor<[S, 128], bf16, shard 0 over world> {
    %zero = arith.constant 0.0 : f32
    %init = mk.splat %zero : f32 -> !mk.tile<[128], f32>
    %r = mk.ring_shift %kv over world iter_args(%init : !mk.tile<[128], f32>) : !mk.tensor<[S, 128], bf16, shard 0 over world> -> !mk.tile<[128], f32> {
    ^bb0(%src: index, %shard: !mk.tensor<[S, 128], bf16, shard 0 over world>, %carried: !mk.tile<[128], f32>):
      %lo, %hi = mk.shard_range %shard tile 128 of %src : !mk.tensor<[S, 128], bf16, shard 0 over world>
      mk.yield %carried : !mk.tile<[128], f32>
    }
    mk.ring_shift %k2, %k2 over nodes : !mk.tensor<[S, 128], bf16, shard 0 over nodes>, !mk.tensor<[S, 128], bf16, shard 0 over nodes> {
    ^bb0(%src: index, %a: !mk.tensor<[S, 128], bf16, shard 0 over nodes>, %b: !mk.tensor<[S, 128], bf16, shard 0 over nodes>):
    }
  }
}

// -----

// A zigzag placement, and a tile's place in the sequence.
// CHECK-LABEL: mk.program @zigzag
// CHECK: %[[Q:.+]]: !mk.tensor<[S, 128], bf16, shard 0 over world zigzag>
// CHECK: mk.sequence_tile %[[Q]] tile 128 of %{{.*}} : !mk.tensor<[S, 128], bf16, shard 0 over world zigzag>
mk.program @zigzag [S] mesh <?x?> (%q: !mk.tensor<[S, 128], bf16, shard 0 over world zigzag>) {
  mk.tile_grid (%i, %d) over %q tiles [128, :] : !mk.tensor<[S, 128], bf16, shard 0 over world zigzag> {
    %p = mk.sequence_tile %q tile 128 of %i : !mk.tensor<[S, 128], bf16, shard 0 over world zigzag>
  }
}

// -----

// Expert routing: dispatch and combine.
// CHECK-LABEL: mk.program @moe
// CHECK: %{{.*}}, %{{.*}}, %{{.*}} = mk.dispatch %{{.*}} by %{{.*}} : !mk.tensor<[T, H], bf16, shard 0 over world>, !mk.tensor<[T, 2], i32, shard 0 over world> -> !mk.tensor<[E, C, H], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world>, !mk.tensor<[E, C], i32, shard 0 over world>
// CHECK: mk.combine %{{.*}} from [%{{.*}}, %{{.*}}, %{{.*}}] into %{{.*}} routed %{{.*}} weighted %{{.*}} : !mk.tile<[128, 128], f32>, !mk.tensor<[T, H], bf16, shard 0 over world>, !mk.tensor<[E, C], i32, shard 0 over world>, !mk.tensor<[T, 2], f32, shard 0 over world>
mk.program @moe [T, H, E, C] mesh <?x?> (
    %x: !mk.tensor<[T, H], bf16, shard 0 over world>,
    %experts: !mk.tensor<[T, 2], i32, shard 0 over world>,
    %weights: !mk.tensor<[T, 2], f32, shard 0 over world>,
    %y: !mk.tensor<[T, H], bf16, shard 0 over world>) {
  %routed, %counts, %origins = mk.dispatch %x by %experts : !mk.tensor<[T, H], bf16, shard 0 over world>, !mk.tensor<[T, 2], i32, shard 0 over world> -> !mk.tensor<[E, C, H], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world>, !mk.tensor<[E, C], i32, shard 0 over world>
  mk.tile_grid (%e, %t, %n) over %routed tiles [1, 128, 128] rows %counts : !mk.tensor<[E, C, H], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world> {
    %rows = mk.load %routed[%e, %t, %n] : !mk.tensor<[E, C, H], bf16, shard 0 over world> -> !mk.tile<[128, 128], bf16>
    %f = mk.convert %rows : !mk.tile<[128, 128], bf16> -> !mk.tile<[128, 128], f32>
    mk.combine %f from [%e, %t, %n] into %y routed %origins weighted %weights : !mk.tile<[128, 128], f32>, !mk.tensor<[T, H], bf16, shard 0 over world>, !mk.tensor<[E, C], i32, shard 0 over world>, !mk.tensor<[T, 2], f32, shard 0 over world>
  }
}

// -----

// The scheduled level: a grid split into roles of every kind, flags, signals and waits over each
// link, puts and copies to peers, accumulation of received slots, this rank's place, tile owners.
// CHECK-LABEL: mk.program @scheduled [M = 1024, N = 1024] mesh <2x4> rank 5 ({{.*}}) grid 132 {
// CHECK: mk.flags @partial [8, 4]
// CHECK: mk.flags @reduced [8, 4]
// CHECK: mk.role compute ctas 100 {
// CHECK: %[[NODE:.+]], %[[GPU:.+]] = mk.owner %{{.*}}[%{{.*}}, %{{.*}}] tile [128, 256] : !mk.tensor<[1024, 1024], bf16, shard 0 over world>
// CHECK: mk.put %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] at gpu %[[GPU]] via nvlink_store : !mk.tile<[128, 256], bf16>, !mk.tensor<[4, 1024, 1024], bf16, symmetric>
// CHECK: mk.signal @partial[%{{.*}}, %{{.*}}] at gpu %[[GPU]] via nvlink_store
// CHECK: mk.role intra_reduce ctas 8 {
// CHECK: mk.wait @partial[%{{.*}}, %{{.*}}] count 4
// CHECK: mk.accumulate sum %{{.*}}[:, %{{.*}}, %{{.*}}] : !mk.tensor<[4, 1024, 1024], bf16, symmetric> -> !mk.tile<[128, 256], f32>
// CHECK: mk.put %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : !mk.tile<[128, 256], bf16>, !mk.tensor<[2, 1024, 1024], bf16, symmetric>
// CHECK: mk.copy %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] -> %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] at node %{{.*}} via rdma_proxy tile [128, 256] : !mk.tensor<[2, 1024, 1024], bf16, symmetric>, !mk.tensor<[2, 1024, 1024], bf16, symmetric>
// CHECK: mk.signal @reduced[%{{.*}}, %{{.*}}] at node %{{.*}} via rdma_proxy
// CHECK: mk.signal @reduced[%{{.*}}, %{{.*}}]{{$}}
// CHECK: mk.role intra_transfer ctas 4
// CHECK: mk.copy {{.*}} at gpu %{{.*}} via nvlink_bulk tile [128, 256]
// CHECK: mk.role inter_send ctas 4
// CHECK: mk.single_cta {
// CHECK: mk.tile_grid ({{.*}}) over %{{.*}} held_by %{{.*}} tiles [128, 256] :
// CHECK: mk.tile_grid ({{.*}}) over %{{.*}} tiles [1, 128, 256] distribute gpus :
// CHECK: mk.role inter_reduce ctas 4
// CHECK: mk.role republish ctas 4
// CHECK: mk.role dispatch ctas 8
mk.program @scheduled [M = 1024, N = 1024] mesh <2x4> rank 5 (
    %c: !mk.tensor<[1024, 1024], bf16, shard 0 over world>,
    %stage: !mk.tensor<[4, 1024, 1024], bf16, symmetric>,
    %recv: !mk.tensor<[2, 1024, 1024], bf16, symmetric>) grid 132 {
  mk.flags @partial [8, 4]
  mk.flags @reduced [8, 4]
  %i1 = arith.constant 1 : index
  mk.role compute ctas 100 {
    mk.tile_grid (%m, %n) over %c global tiles [128, 256] : !mk.tensor<[1024, 1024], bf16, shard 0 over world> {
      %zero = arith.constant 0.0 : bf16
      %t = mk.splat %zero : bf16 -> !mk.tile<[128, 256], bf16>
      %node, %gpu = mk.owner %c[%m, %n] tile [128, 256] : !mk.tensor<[1024, 1024], bf16, shard 0 over world>
      %me_node, %me_gpu = mk.place : index, index
      mk.put %t, %stage[%me_gpu, %m, %n] at gpu %gpu via nvlink_store : !mk.tile<[128, 256], bf16>, !mk.tensor<[4, 1024, 1024], bf16, symmetric>
      mk.signal @partial[%m, %n] at gpu %gpu via nvlink_store
    }
  }
  mk.role intra_reduce ctas 8 {
    mk.tile_grid (%m, %n) over %c tiles [128, 256] : !mk.tensor<[1024, 1024], bf16, shard 0 over world> {
      mk.wait @partial[%m, %n] count 4
      %sum = mk.accumulate sum %stage[:, %m, %n] : !mk.tensor<[4, 1024, 1024], bf16, symmetric> -> !mk.tile<[128, 256], f32>
      %t = mk.convert %sum : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
      %me_node, %me_gpu = mk.place : index, index
      mk.put %t, %recv[%me_node, %m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[2, 1024, 1024], bf16, symmetric>
      %one = arith.constant 1 : index
      %peer = arith.subi %one, %me_node : index
      mk.copy %recv[%me_node, %m, %n] -> %recv[%me_node, %m, %n] at node %peer via rdma_proxy tile [128, 256] : !mk.tensor<[2, 1024, 1024], bf16, symmetric>, !mk.tensor<[2, 1024, 1024], bf16, symmetric>
      mk.signal @reduced[%m, %n] at node %peer via rdma_proxy
      mk.signal @reduced[%m, %n]
      mk.wait @reduced[%m, %n] count 2
    }
  }
  mk.role intra_transfer ctas 4 {
    %g = arith.constant 1 : index
    %i = arith.constant 0 : index
    mk.copy %stage[%i, %i, %i] -> %stage[%i, %i, %i] at gpu %g via nvlink_bulk tile [128, 256] : !mk.tensor<[4, 1024, 1024], bf16, symmetric>, !mk.tensor<[4, 1024, 1024], bf16, symmetric>
  }
  mk.role inter_send ctas 4 {
    mk.single_cta {
      %i = arith.constant 0 : index
      mk.signal @reduced[%i, %i]
    }
    mk.tile_grid (%m, %n) over %c held_by %i1 tiles [128, 256] : !mk.tensor<[1024, 1024], bf16, shard 0 over world> {
    }
    mk.tile_grid (%s, %m, %n) over %stage tiles [1, 128, 256] distribute gpus : !mk.tensor<[4, 1024, 1024], bf16, symmetric> {
    }
  }
  mk.role inter_reduce ctas 4 {
  }
  mk.role republish ctas 4 {
  }
  mk.role dispatch ctas 8 {
  }
}

// -----

// Attributes used outside types print in their full form.
// CHECK-LABEL: mk.program @attrs_outside_types
// CHECK-SAME: attributes {mesh_hint = #mk.mesh<2x?>, order_hint = #mk.order<swizzle 4, local_first>, placement_hint = #mk.placement<shard 1 over gpus>}
mk.program @attrs_outside_types [] mesh <?x?> () attributes {mesh_hint = #mk.mesh<2x?>, order_hint = #mk.order<swizzle 4, local_first>, placement_hint = #mk.placement<shard 1 over gpus>} {
}

// -----

// Roles before mk-partition-roles: no CTA counts, no grid.
// CHECK-LABEL: mk.program @unpartitioned
// CHECK: mk.role compute {
// CHECK: mk.role republish {
mk.program @unpartitioned [] mesh <1x2> () {
  mk.role compute {
  }
  mk.role republish {
  }
}

// -----

// Expert routing across nodes at the scheduled level: rows packed for the other node, sent to
// the rail peer with a count the GPU keeps, routed there as the peer's own, and a tile of tokens
// combined from the rows its results came back to.
// CHECK-LABEL: mk.program @routing
// CHECK: mk.route_pack %{{.*}}, %{{.*}} into %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} experts 8 : !mk.tensor<[64, 32], bf16, shard 0 over world>, !mk.tensor<[64, 2], i32, shard 0 over world>, !mk.tensor<[64, 32], bf16, symmetric>, !mk.tensor<[64, 2], i32, symmetric>, !mk.tensor<[4], i32, symmetric>, !mk.tensor<[64, 2], i32, shard 0 over world>
// CHECK: mk.send_rows %{{.*}}[%{{.*}}] -> %{{.*}}[%{{.*}}] count %{{.*}}[%{{.*}}] at node %{{.*}} via rdma_proxy : !mk.tensor<[64, 32], bf16, symmetric>, !mk.tensor<[64, 32], bf16, symmetric>, !mk.tensor<[4], i32, symmetric>
// CHECK: mk.send_rows %{{.*}}[%{{.*}}] -> %{{.*}}[%{{.*}}] at gpu %{{.*}} via nvlink_store : !mk.tensor<[4, 8], i32, symmetric>, !mk.tensor<[4, 8], i32, symmetric>
// CHECK: mk.route_rows %{{.*}}, %{{.*}}, %{{.*}} into %{{.*}}, %{{.*}}, %{{.*}} arrivals @arrived from node %{{.*}} count %{{.*}}[%{{.*}}] : {{.*}}, !mk.tensor<[4], i32, symmetric>
// CHECK: mk.combine_returned %{{.*}}, %{{.*}}, %{{.*}} into %{{.*}}[%{{.*}}, %{{.*}}] tile [16, 32] at %{{.*}} : {{.*}}, !mk.tensor<[64, 2], i32, shard 0 over world>
!X = !mk.tensor<[64, 32], bf16, shard 0 over world>
!E = !mk.tensor<[64, 2], i32, shard 0 over world>
!P = !mk.tensor<[64, 32], bf16, symmetric>
!PE = !mk.tensor<[64, 2], i32, symmetric>
!N = !mk.tensor<[4], i32, symmetric>
!C = !mk.tensor<[4, 8], i32, symmetric>
mk.program @routing [] mesh <2x2> (
    %x: !X, %e: !E, %pack: !P, %pe: !PE, %n: !N, %at: !E, %census: !C,
    %r: !mk.tensor<[8, 16, 32], bf16, shard 0 over world>, %o: !mk.tensor<[8, 16], i32, shard 0 over world>,
    %back: !mk.tensor<[512, 1, 32], bf16, symmetric>, %w: !mk.tensor<[64, 2], f32, shard 0 over world>,
    %y: !X) grid 8 {
  mk.flags @arrived [8]
  mk.role dispatch ctas 4 {
    %c1 = arith.constant 1 : index
    mk.route_pack %x, %e into %pack, %pe, %n, %at experts 8 : !X, !E, !P, !PE, !N, !E
    mk.send_rows %pack[%c1] -> %pack[%c1] count %n[%c1] at node %c1 via rdma_proxy : !P, !P, !N
    mk.send_rows %census[%c1] -> %census[%c1] at gpu %c1 via nvlink_store : !C, !C
    mk.route_rows %pack, %pe, %census into %r, %o, %pe arrivals @arrived from node %c1 count %n[%c1] : !P, !PE, !C, !mk.tensor<[8, 16, 32], bf16, shard 0 over world>, !mk.tensor<[8, 16], i32, shard 0 over world>, !PE, !N
  }
  mk.role compute ctas 4 {
    mk.tile_grid (%i, %j) over %y tiles [16, 32] : !X {
      mk.combine_returned %back, %e, %w into %y[%i, %j] tile [16, 32] at %at : !mk.tensor<[512, 1, 32], bf16, symmetric>, !E, !mk.tensor<[64, 2], f32, shard 0 over world>, !X, !E
    }
  }
}

// -----

// A copy engine's copy of a block of a matrix between the GPUs of a node, between flags.
// CHECK-LABEL: mk.program @engine_copy
// CHECK: mk.engine_copy %{{.*}} rows [0, 512] cols [0, 256] from gpu 0 to gpu 1 after @ready[0] count 8 signal @arrived[0] : !mk.tensor<[1024, 256], bf16, replicated>
mk.program @engine_copy [] mesh <1x2> (%c: !mk.tensor<[1024, 256], bf16, replicated>) {
  mk.flags @ready [2]
  mk.flags @arrived [2]
  mk.engine_copy %c rows [0, 512] cols [0, 256] from gpu 0 to gpu 1 after @ready[0] count 8 signal @arrived[0] : !mk.tensor<[1024, 256], bf16, replicated>
}

// -----

// A matmul whose K the GEMM engine splits in parts, meeting in f32 slots and a flag a tile.
// CHECK-LABEL: mk.program @split_k
// CHECK: mk.matmul %{{.*}}[%{{.*}}, :], %{{.*}}[:, %{{.*}}] partials %{{.*}} : !mk.tensor<[512, 128], f32, replicated> {arrivals = @split_k_arrivals, k_splits = 2 : i64, k_tile = 64 : i64} : !mk.tensor<[256, 4096], bf16, replicated>, !mk.tensor<[4096, 256], bf16, replicated> -> !mk.tile<[128, 128], f32>
mk.program @split_k [] mesh <1x1> (%a: !mk.tensor<[256, 4096], bf16, replicated>, %b: !mk.tensor<[4096, 256], bf16, replicated>) {
  mk.flags @split_k_arrivals [2, 2]
  %p = mk.buffer : !mk.tensor<[512, 128], f32, replicated>
  %i = arith.constant 0 : index
  %acc = mk.matmul %a[%i, :], %b[:, %i] partials %p : !mk.tensor<[512, 128], f32, replicated> {k_tile = 64, k_splits = 2, arrivals = @split_k_arrivals} : !mk.tensor<[256, 4096], bf16, replicated>, !mk.tensor<[4096, 256], bf16, replicated> -> !mk.tile<[128, 128], f32>
}
