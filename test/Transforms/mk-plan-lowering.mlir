// RUN: mk-opt %s -split-input-file -mk-plan-lowering | FileCheck %s
// RUN: mk-opt %s -split-input-file -mk-plan-lowering="gemm-stages=3 gemm-cluster=1" | FileCheck %s --check-prefix=OPTIONS

// GEMM+AllReduce on one node: the compute role runs the GEMM engine (its matmul, conversion and
// puts), in clusters of 2 (104 and 28 CTAs pair up, the swizzled order pairs rows); the wait and
// signal that only engine stores follow are left to its senders. The reduce role's reduction is
// only stored: through TMA, and its puts then its signals are split into two loops.
// CHECK-LABEL: mk.program @gemm_allreduce
// CHECK: mk.role compute ctas 104 attributes {mk.gemm_engine = #mk.gemm_engine<element = bf16, tile_n = 256, stages = 0, b_k_major = false, staging_buffers = 4, cluster = 2, a_rows = 128>}
// CHECK: mk.matmul {{.*}}mk.lowering = #mk.lowering<mma>
// CHECK: mk.convert {{.*}}{mk.lowering = #mk.lowering<elide>}
// CHECK: mk.wait @launched{{.*}}{mk.lowering = #mk.lowering<deferred>}
// CHECK: mk.put {{.*}}{mk.lowering = #mk.lowering<store>}
// CHECK: mk.signal @ready0{{.*}}{mk.lowering = #mk.lowering<deferred>}
// CHECK: mk.role intra_reduce ctas 28 {
// CHECK: mk.accumulate sum {{.*}}{mk.lowering = #mk.lowering<tma>}
// CHECK: mk.convert {{.*}}{mk.lowering = #mk.lowering<elide>}
// CHECK: scf.for
// CHECK-NEXT: arith.addi
// CHECK-NEXT: arith.remsi
// CHECK-NEXT: mk.put {{.*}}{mk.lowering = #mk.lowering<tma>}
// CHECK-NEXT: }
// CHECK-NEXT: scf.for
// CHECK-NEXT: arith.addi
// CHECK-NEXT: arith.remsi
// CHECK-NEXT: mk.signal @arrived1
// The options: a ring of 3, no clusters.
// OPTIONS-LABEL: mk.program @gemm_allreduce
// OPTIONS: #mk.gemm_engine<element = bf16, tile_n = 256, stages = 3, b_k_major = false, staging_buffers = 4, cluster = 1, a_rows = 128>
mk.program @gemm_allreduce [M = 1024, N = 1024, K = 1024] mesh <1x2> (%arg0: !mk.tensor<[1024, 1024], bf16, shard 1 over world>, %arg1: !mk.tensor<[1024, 1024], bf16, shard 0 over world>, %arg2: !mk.tensor<[1024, 1024], bf16, replicated>) grid 132 {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c2 = arith.constant 2 : index
    mk.flags @launched [1]
    mk.flags @ready0 [8, 4]
    mk.flags @arrived1 [8, 4]
    %0 = mk.buffer : !mk.tensor<[2, 1024, 1024], bf16, symmetric>
    mk.role compute ctas 104 {
      mk.single_cta {
        %node, %gpu = mk.place : index, index
        scf.for %arg3 = %c0 to %c2 step %c1 {
          %1 = arith.addi %gpu, %arg3 : index
          %2 = arith.remsi %1, %c2 : index
          mk.signal @launched[%c0] at gpu %2 via nvlink_store
        }
      }
      mk.tile_grid (%arg3, %arg4) over %arg2 tiles [128, 256] order <swizzle 8> : !mk.tensor<[1024, 1024], bf16, replicated> {
        %1 = mk.matmul %arg0[%arg3, :], %arg1[:, %arg4] {k_tile = 64 : i64} : !mk.tensor<[1024, 1024], bf16, shard 1 over world>, !mk.tensor<[1024, 1024], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
        %2 = mk.convert %1 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
        %node, %gpu = mk.owner %arg2[%arg3, %arg4] tile [128, 256] : !mk.tensor<[1024, 1024], bf16, replicated>
        %node_0, %gpu_1 = mk.place : index, index
        mk.wait @launched[%c0] count 2
        mk.put %2, %0[%gpu_1, %arg3, %arg4] at gpu %gpu via nvlink_store : !mk.tile<[128, 256], bf16>, !mk.tensor<[2, 1024, 1024], bf16, symmetric>
        mk.signal @ready0[%arg3, %arg4] at gpu %gpu via nvlink_store
      }
    }
    mk.role intra_reduce ctas 28 {
      mk.tile_grid (%arg3, %arg4) over %arg2 tiles [128, 256] order <swizzle 8> distribute gpus : !mk.tensor<[1024, 1024], bf16, replicated> {
        mk.wait @ready0[%arg3, %arg4] count 2
        %1 = mk.accumulate sum %0[:, %arg3, %arg4] : !mk.tensor<[2, 1024, 1024], bf16, symmetric> -> !mk.tile<[128, 256], f32>
        %2 = mk.convert %1 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
        %node, %gpu = mk.place : index, index
        mk.wait @launched[%c0] count 2
        scf.for %arg5 = %c1 to %c3 step %c1 {
          %3 = arith.addi %gpu, %arg5 : index
          %4 = arith.remsi %3, %c2 : index
          mk.put %2, %arg2[%arg3, %arg4] at gpu %4 via nvlink_store : !mk.tile<[128, 256], bf16>, !mk.tensor<[1024, 1024], bf16, replicated>
          mk.signal @arrived1[%arg3, %arg4] at gpu %4 via nvlink_store
        }
      }
    }
  }

// -----

// A matmul whose result is not only converted and stored stays on the tile library; a reduction
// over 4 copies cannot go through TMA (at most 3), so it is combined and stored in chunks.
// CHECK-LABEL: mk.program @fallback
// CHECK: mk.role compute ctas 132 {
// CHECK-NOT: mk.lowering
// CHECK: mk.accumulate sum {{.*}}{mk.lowering = #mk.lowering<chunks>}
// CHECK: mk.convert {{.*}}{mk.lowering = #mk.lowering<elide>}
// CHECK: mk.store {{.*}}{mk.lowering = #mk.lowering<chunks>}
mk.program @fallback [] mesh <1x4> (%a: !mk.tensor<[512, 256], bf16, replicated>, %b: !mk.tensor<[256, 512], bf16, replicated>, %c: !mk.tensor<[512, 512], bf16, replicated>) grid 132 {
    %s = mk.buffer : !mk.tensor<[4, 512, 512], bf16, symmetric>
    mk.role compute ctas 132 {
      mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[512, 512], bf16, replicated> {
        %1 = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64 : i64} : !mk.tensor<[512, 256], bf16, replicated>, !mk.tensor<[256, 512], bf16, replicated> -> !mk.tile<[128, 128], f32>
        %2 = mk.activation relu %1 : !mk.tile<[128, 128], f32>
        %3 = mk.convert %2 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
        mk.store %3, %c[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[512, 512], bf16, replicated>
        %4 = mk.accumulate sum %s[:, %m, %n] : !mk.tensor<[4, 512, 512], bf16, symmetric> -> !mk.tile<[128, 128], f32>
        %5 = mk.convert %4 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
        mk.store %5, %c[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[512, 512], bf16, replicated>
      }
    }
}

// -----

// Split-K on the engine: the parts of a tile meet in a buffer of 2 slots of 128 x 128 f32 for
// each of the 2 x 32 tiles, counted on a flag a tile. On the tile library (the fallback's
// epilogue needs its team) K is not split.
// CHECK-LABEL: mk.program @split_k
// CHECK: mk.flags @split_k [2, 32]
// CHECK: %[[PARTIALS:.+]] = mk.buffer : !mk.tensor<[16384, 128], f32, replicated>
// CHECK: mk.role compute ctas 128 attributes {mk.gemm_engine = #mk.gemm_engine<element = bf16, tile_n = 128, stages = 0, b_k_major = false, staging_buffers = 2, cluster = 2, a_rows = 128>}
// CHECK: mk.matmul {{.*}} partials %[[PARTIALS]] : !mk.tensor<[16384, 128], f32, replicated> {arrivals = @split_k, k_splits = 2 : i64, k_tile = 64 : i64, mk.lowering = #mk.lowering<mma>}
mk.program @split_k [] mesh <1x1> (%a: !mk.tensor<[256, 4096], bf16, replicated>, %b: !mk.tensor<[4096, 4096], bf16, replicated>, %c: !mk.tensor<[256, 4096], bf16, replicated>) grid 128 {
    mk.role compute ctas 128 {
      mk.tile_grid (%m, %n) over %c tiles [128, 128] order <swizzle 2> masked : !mk.tensor<[256, 4096], bf16, replicated> {
        %1 = mk.matmul %a[%m, :], %b[:, %n] {k_splits = 2 : i64, k_tile = 64 : i64} : !mk.tensor<[256, 4096], bf16, replicated>, !mk.tensor<[4096, 4096], bf16, replicated> -> !mk.tile<[128, 128], f32>
        %2 = mk.convert %1 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
        mk.store %2, %c[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[256, 4096], bf16, replicated>
      }
    }
}

// -----

// CHECK-LABEL: mk.program @split_k_tile_library
// CHECK-NOT: mk.buffer
// CHECK: mk.matmul %{{.*}}[%{{.*}}, :], %{{.*}}[:, %{{.*}}] {k_tile = 64 : i64} :
mk.program @split_k_tile_library [] mesh <1x1> (%a: !mk.tensor<[256, 4096], bf16, replicated>, %b: !mk.tensor<[4096, 4096], bf16, replicated>, %c: !mk.tensor<[256, 4096], bf16, replicated>) grid 128 {
    mk.role compute ctas 128 {
      mk.tile_grid (%m, %n) over %c tiles [128, 128] order <swizzle 2> masked : !mk.tensor<[256, 4096], bf16, replicated> {
        %1 = mk.matmul %a[%m, :], %b[:, %n] {k_splits = 2 : i64, k_tile = 64 : i64} : !mk.tensor<[256, 4096], bf16, replicated>, !mk.tensor<[4096, 4096], bf16, replicated> -> !mk.tile<[128, 128], f32>
        %2 = mk.reduce sum %1 dim 1 : !mk.tile<[128, 128], f32> -> !mk.tile<[128], f32>
        %3 = mk.broadcast %2 dim 1 : !mk.tile<[128], f32> -> !mk.tile<[128, 128], f32>
        %4 = mk.convert %3 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
        mk.store %4, %c[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[256, 4096], bf16, replicated>
      }
    }
}

// -----

// Three copies of a 128 x 256 tile and the result do not fit a CTA's shared memory (256 KiB of
// the 227): combined and stored in chunks.
// CHECK-LABEL: mk.program @three_wide_copies
// CHECK: mk.accumulate sum {{.*}}{mk.lowering = #mk.lowering<chunks>}
mk.program @three_wide_copies [] mesh <3x1> (%c: !mk.tensor<[512, 512], bf16, replicated>) grid 132 {
    %s = mk.buffer : !mk.tensor<[3, 512, 512], bf16, symmetric>
    mk.role inter_reduce ctas 132 {
      mk.tile_grid (%m, %n) over %c tiles [128, 256] : !mk.tensor<[512, 512], bf16, replicated> {
        %4 = mk.accumulate sum %s[:, %m, %n] : !mk.tensor<[3, 512, 512], bf16, symmetric> -> !mk.tile<[128, 256], f32>
        %5 = mk.convert %4 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
        mk.store %5, %c[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[512, 512], bf16, replicated>
      }
    }
}

// -----

// Rows of 300 bf16 (600 bytes) are not whole 16-byte units, which TMA's strides must be: the
// matmul stays on the tile library, and the reduction into them, of 2 copies, is combined and
// stored in chunks.
// CHECK-LABEL: mk.program @rows_tma_cannot_address
// CHECK: mk.role compute ctas 132 {
// CHECK-NOT: mk.lowering = #mk.lowering<mma>
// CHECK: mk.accumulate sum {{.*}}{mk.lowering = #mk.lowering<chunks>}
// CHECK: mk.store {{.*}}{mk.lowering = #mk.lowering<chunks>}
mk.program @rows_tma_cannot_address [] mesh <1x2> (%a: !mk.tensor<[512, 256], bf16, replicated>, %b: !mk.tensor<[256, 300], bf16, replicated>, %c: !mk.tensor<[512, 300], bf16, replicated>) grid 132 {
    %s = mk.buffer : !mk.tensor<[2, 512, 300], bf16, symmetric>
    mk.role compute ctas 132 {
      mk.tile_grid (%m, %n) over %c tiles [128, 128] masked : !mk.tensor<[512, 300], bf16, replicated> {
        %1 = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64 : i64} : !mk.tensor<[512, 256], bf16, replicated>, !mk.tensor<[256, 300], bf16, replicated> -> !mk.tile<[128, 128], f32>
        %2 = mk.convert %1 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
        mk.store %2, %c[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[512, 300], bf16, replicated>
        %4 = mk.accumulate sum %s[:, %m, %n] : !mk.tensor<[2, 512, 300], bf16, symmetric> -> !mk.tile<[128, 128], f32>
        %5 = mk.convert %4 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
        mk.store %5, %c[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[512, 300], bf16, replicated>
      }
    }
}

// -----

// The engine's all-reduce in place to the node's 4 GPUs: each loop over the other GPUs (1 to 3)
// whose only effect is the engine's put becomes one put to all of them.
// CHECK-LABEL: mk.program @gemm_allreduce
// CHECK: mk.put {{.*}}{mk.gpu_offsets = array<i64: 1, 3>, mk.lowering = #mk.lowering<store>}
// CHECK: mk.put {{.*}} combine sum {mk.gpu_offsets = array<i64: 1, 3>, mk.lowering = #mk.lowering<store>}
// The wait that a non-engine op follows stays the consumers'.
// CHECK: mk.wait @arrived0{{.*}}{mk.lowering = #mk.lowering<consumer>}
mk.program @gemm_allreduce [M = 1024, N = 1024, K = 1024] mesh <1x2> (%arg0: !mk.tensor<[1024, 1024], bf16, shard 1 over world>, %arg1: !mk.tensor<[1024, 1024], bf16, shard 0 over world>, %arg2: !mk.tensor<[1024, 1024], bf16, replicated>) grid 132 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c2 = arith.constant 2 : index
  mk.flags @launched [1]
  mk.flags @arrived0 [8, 4]
  mk.flags @initialized0 [8, 4]
  mk.role compute ctas 132 {
    mk.single_cta {
      %node, %gpu = mk.place : index, index
      scf.for %arg3 = %c0 to %c2 step %c1 {
        %0 = arith.addi %gpu, %arg3 : index
        %1 = arith.remsi %0, %c2 : index
        mk.signal @launched[%c0] at gpu %1 via nvlink_store
      }
    }
    mk.tile_grid (%arg3, %arg4) over %arg2 tiles [128, 256] order <swizzle 8, local_first> masked : !mk.tensor<[1024, 1024], bf16, replicated> {
      %0 = mk.matmul %arg0[%arg3, :], %arg1[:, %arg4] {k_tile = 64 : i64} : !mk.tensor<[1024, 1024], bf16, shard 1 over world>, !mk.tensor<[1024, 1024], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
      %1 = mk.convert %0 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
      %node, %gpu = mk.owner %arg2[%arg3, %arg4] tile [128, 256] row_slices : !mk.tensor<[1024, 1024], bf16, replicated>
      %node_0, %gpu_1 = mk.place : index, index
      %2 = arith.cmpi eq, %gpu, %gpu_1 : index
      mk.wait @launched[%c0] count 2
      scf.if %2 {
        scf.for %arg5 = %c1 to %c3 step %c1 {
          %5 = arith.addi %gpu_1, %arg5 : index
          %6 = arith.remsi %5, %c2 : index
          mk.put %1, %arg2[%arg3, %arg4] at gpu %6 via nvlink_store : !mk.tile<[128, 256], bf16>, !mk.tensor<[1024, 1024], bf16, replicated>
        }
        %3 = arith.addi %gpu_1, %c1 : index
        %4 = arith.remsi %3, %c2 : index
        mk.signal @initialized0[%arg3, %arg4] at gpu %4 via nvlink_store
      } else {
        mk.wait @initialized0[%arg3, %arg4] count 1
        scf.for %arg5 = %c1 to %c3 step %c1 {
          %3 = arith.addi %gpu_1, %arg5 : index
          %4 = arith.remsi %3, %c2 : index
          mk.put %1, %arg2[%arg3, %arg4] at gpu %4 via nvlink_store combine sum : !mk.tile<[128, 256], bf16>, !mk.tensor<[1024, 1024], bf16, replicated>
          mk.signal @arrived0[%arg3, %arg4] at gpu %4 via nvlink_store
        }
      }
    }
    mk.tile_grid (%arg3, %arg4) over %arg2 tiles [128, 256] order <swizzle 8, local_first> masked : !mk.tensor<[1024, 1024], bf16, replicated> {
      mk.wait @arrived0[%arg3, %arg4] count 1
    }
  }
}

// -----

// A bias: a row the kernel does not write, converted and broadcast down the tile, then added to
// the product. Its consumers load the columns they hold: the whole chain is the epilogue's.
// CHECK-LABEL: mk.program @bias_in_registers
// CHECK: mk.role compute ctas 132 attributes {mk.gemm_engine = #mk.gemm_engine<element = bf16, tile_n = 128
// CHECK: mk.matmul {{.*}}mk.lowering = #mk.lowering<mma>
// CHECK-NEXT: mk.load %arg1[%{{.*}}] {mk.lowering = #mk.lowering<registers>}
// CHECK-NEXT: mk.convert {{.*}}{mk.lowering = #mk.lowering<registers>}
// CHECK-NEXT: mk.broadcast {{.*}}{mk.lowering = #mk.lowering<registers>}
// CHECK-NEXT: mk.add {{.*}}{mk.lowering = #mk.lowering<registers>}
// CHECK-NEXT: mk.activation gelu {{.*}}{mk.lowering = #mk.lowering<registers>}
// CHECK-NEXT: mk.convert {{.*}}{mk.lowering = #mk.lowering<elide>}
// CHECK-NEXT: mk.store {{.*}}{mk.lowering = #mk.lowering<store>}
mk.program @bias_in_registers [] mesh <1x1> (%a: !mk.tensor<[512, 256], bf16, replicated>, %bias: !mk.tensor<[512], bf16, replicated>, %b: !mk.tensor<[256, 512], bf16, replicated>, %c: !mk.tensor<[512, 512], bf16, replicated>) grid 132 {
    mk.role compute ctas 132 {
      mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[512, 512], bf16, replicated> {
        %1 = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64 : i64} : !mk.tensor<[512, 256], bf16, replicated>, !mk.tensor<[256, 512], bf16, replicated> -> !mk.tile<[128, 128], f32>
        %2 = mk.load %bias[%n] : !mk.tensor<[512], bf16, replicated> -> !mk.tile<[128], bf16>
        %3 = mk.convert %2 : !mk.tile<[128], bf16> -> !mk.tile<[128], f32>
        %4 = mk.broadcast %3 dim 0 : !mk.tile<[128], f32> -> !mk.tile<[128, 128], f32>
        %5 = mk.add %1, %4 : !mk.tile<[128, 128], f32>
        %6 = mk.activation gelu %5 : !mk.tile<[128, 128], f32>
        %7 = mk.convert %6 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
        mk.store %7, %c[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[512, 512], bf16, replicated>
      }
    }
}

// -----

// Decode's M: A has 7 rows, so the engine loads 8 (one swizzle atom) for each tile, and 72 rows
// take 72 (both consumer warpgroups multiply).
// CHECK-LABEL: mk.program @decode_rows
// CHECK: mk.role compute ctas 8 attributes {mk.gemm_engine = #mk.gemm_engine<element = bf16, tile_n = 128, stages = 0, b_k_major = false, staging_buffers = 2, cluster = 1, a_rows = 8>}
mk.program @decode_rows [] mesh <1x1> (%a: !mk.tensor<[7, 4096], bf16, replicated>, %b: !mk.tensor<[4096, 1024], bf16, replicated>, %c: !mk.tensor<[7, 1024], bf16, replicated>) grid 8 {
    mk.role compute ctas 8 {
      mk.tile_grid (%m, %n) over %c tiles [128, 128] masked : !mk.tensor<[7, 1024], bf16, replicated> {
        %1 = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64 : i64} : !mk.tensor<[7, 4096], bf16, replicated>, !mk.tensor<[4096, 1024], bf16, replicated> -> !mk.tile<[128, 128], f32>
        %2 = mk.convert %1 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
        mk.store %2, %c[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[7, 1024], bf16, replicated>
      }
    }
}

// -----

// CHECK-LABEL: mk.program @decode_rows_two_warpgroups
// CHECK: #mk.gemm_engine<{{.*}}cluster = 1, a_rows = 72>
mk.program @decode_rows_two_warpgroups [] mesh <1x1> (%a: !mk.tensor<[72, 4096], bf16, replicated>, %b: !mk.tensor<[4096, 1024], bf16, replicated>, %c: !mk.tensor<[72, 1024], bf16, replicated>) grid 8 {
    mk.role compute ctas 8 {
      mk.tile_grid (%m, %n) over %c tiles [128, 128] masked : !mk.tensor<[72, 1024], bf16, replicated> {
        %1 = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64 : i64} : !mk.tensor<[72, 4096], bf16, replicated>, !mk.tensor<[4096, 1024], bf16, replicated> -> !mk.tile<[128, 128], f32>
        %2 = mk.convert %1 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
        mk.store %2, %c[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[72, 1024], bf16, replicated>
      }
    }
}

// -----

// 64-row tiles (mk-tile-and-order's at 128 x 1024): one MMA warpgroup's, so the engine loads A's
// 64 rows of each tile (and 8 where A has 7); cluster 1.
// CHECK-LABEL: mk.program @rows_64
// CHECK: #mk.gemm_engine<element = bf16, tile_n = 64, stages = 0, b_k_major = false, staging_buffers = 2, cluster = 1, a_rows = 64>
// CHECK-LABEL: mk.program @rows_64_of_7
// CHECK: #mk.gemm_engine<{{.*}}cluster = 1, a_rows = 8>
mk.program @rows_64 [] mesh <1x1> (%a: !mk.tensor<[128, 4096], bf16, replicated>, %b: !mk.tensor<[4096, 1024], bf16, replicated>, %c: !mk.tensor<[128, 1024], bf16, replicated>) grid 32 {
    mk.role compute ctas 32 {
      mk.tile_grid (%m, %n) over %c tiles [64, 64] order <swizzle 2> : !mk.tensor<[128, 1024], bf16, replicated> {
        %1 = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64 : i64} : !mk.tensor<[128, 4096], bf16, replicated>, !mk.tensor<[4096, 1024], bf16, replicated> -> !mk.tile<[64, 64], f32>
        %2 = mk.convert %1 : !mk.tile<[64, 64], f32> -> !mk.tile<[64, 64], bf16>
        mk.store %2, %c[%m, %n] : !mk.tile<[64, 64], bf16>, !mk.tensor<[128, 1024], bf16, replicated>
      }
    }
}
mk.program @rows_64_of_7 [] mesh <1x1> (%a: !mk.tensor<[7, 4096], bf16, replicated>, %b: !mk.tensor<[4096, 1024], bf16, replicated>, %c: !mk.tensor<[7, 1024], bf16, replicated>) grid 16 {
    mk.role compute ctas 16 {
      mk.tile_grid (%m, %n) over %c tiles [64, 64] masked : !mk.tensor<[7, 1024], bf16, replicated> {
        %1 = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64 : i64} : !mk.tensor<[7, 4096], bf16, replicated>, !mk.tensor<[4096, 1024], bf16, replicated> -> !mk.tile<[64, 64], f32>
        %2 = mk.convert %1 : !mk.tile<[64, 64], f32> -> !mk.tile<[64, 64], bf16>
        mk.store %2, %c[%m, %n] : !mk.tile<[64, 64], bf16>, !mk.tensor<[7, 1024], bf16, replicated>
      }
    }
}

// -----

// The row is a tensor the kernel writes (after the matmuls, here): the consumers would read it
// without waiting with the producer. The matmul stays on the tile library.
// CHECK-LABEL: mk.program @bias_written_in_kernel
// CHECK-NOT: mk.lowering
// CHECK: mk.store
// CHECK-NOT: mk.lowering
mk.program @bias_written_in_kernel [] mesh <1x1> (%a: !mk.tensor<[512, 256], bf16, replicated>, %bias: !mk.tensor<[512], f32, replicated>, %b: !mk.tensor<[256, 512], bf16, replicated>, %c: !mk.tensor<[512, 512], bf16, replicated>) grid 132 {
    mk.role compute ctas 132 {
      mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[512, 512], bf16, replicated> {
        %1 = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64 : i64} : !mk.tensor<[512, 256], bf16, replicated>, !mk.tensor<[256, 512], bf16, replicated> -> !mk.tile<[128, 128], f32>
        %2 = mk.load %bias[%n] : !mk.tensor<[512], f32, replicated> -> !mk.tile<[128], f32>
        %3 = mk.broadcast %2 dim 0 : !mk.tile<[128], f32> -> !mk.tile<[128, 128], f32>
        %4 = mk.add %1, %3 : !mk.tile<[128, 128], f32>
        %5 = mk.convert %4 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
        mk.store %5, %c[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[512, 512], bf16, replicated>
      }
      mk.tile_grid (%i) over %bias tiles [128] : !mk.tensor<[512], f32, replicated> {
        %6 = mk.load %bias[%i] : !mk.tensor<[512], f32, replicated> -> !mk.tile<[128], f32>
        %7 = mk.add %6, %6 : !mk.tile<[128], f32>
        mk.store %7, %bias[%i] : !mk.tile<[128], f32>, !mk.tensor<[512], f32, replicated>
      }
    }
}

// -----

// The broadcast row also feeds math outside the epilogue, which the tile library computes.
// CHECK-LABEL: mk.program @bias_used_beside
// CHECK-NOT: mk.lowering = #mk.lowering<mma>
mk.program @bias_used_beside [] mesh <1x1> (%a: !mk.tensor<[512, 256], bf16, replicated>, %bias: !mk.tensor<[512], f32, replicated>, %b: !mk.tensor<[256, 512], bf16, replicated>, %c: !mk.tensor<[512, 512], bf16, replicated>, %d: !mk.tensor<[512, 512], f32, replicated>) grid 132 {
    mk.role compute ctas 132 {
      mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[512, 512], bf16, replicated> {
        %1 = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64 : i64} : !mk.tensor<[512, 256], bf16, replicated>, !mk.tensor<[256, 512], bf16, replicated> -> !mk.tile<[128, 128], f32>
        %2 = mk.load %bias[%n] : !mk.tensor<[512], f32, replicated> -> !mk.tile<[128], f32>
        %3 = mk.broadcast %2 dim 0 : !mk.tile<[128], f32> -> !mk.tile<[128, 128], f32>
        %4 = mk.add %1, %3 : !mk.tile<[128, 128], f32>
        %5 = mk.convert %4 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
        mk.store %5, %c[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[512, 512], bf16, replicated>
        %6 = mk.mul %3, %3 : !mk.tile<[128, 128], f32>
        mk.store %6, %d[%m, %n] : !mk.tile<[128, 128], f32>, !mk.tensor<[512, 512], f32, replicated>
      }
    }
}

// -----

// MoE on one node, as scheduled (1 x 2): both expert grids run on the GEMM engine, loading each
// expert's operands at its group; the first's swiglu in registers and its tiles' stamps left to the
// senders; the second's rows go back to their tokens through the senders. The role's waits for the
// row counts are the producer's and the consumers'; the producer waits for the expert's rows and
// for every tile of the hidden row panel it loads; the consumers' waits before the rows go back, and
// the signals after the grids, are theirs and the senders'.
// CHECK-LABEL: mk.program @moe_one_node
// CHECK: mk.role compute ctas 106 attributes {mk.gemm_engine = #mk.gemm_engine<element = bf16, tile_n = 256, stages = 0, b_k_major = false, staging_buffers = 2, cluster = 1, a_rows = 128>}
// CHECK: mk.wait @routing_counted[%{{.*}}] count 1 {mk.lowering = #mk.lowering<producer>}
// CHECK-NEXT: mk.wait @routing_counted[%{{.*}}] count 1 {mk.lowering = #mk.lowering<consumer>}
// CHECK: mk.wait @routing_arrived[%{{.*}}] count 2 per_cta_of dispatch {mk.lowering = #mk.lowering<producer>}
// CHECK-NEXT: mk.matmul {{.*}}mk.lowering = #mk.lowering<mma>
// CHECK-NEXT: mk.matmul {{.*}}mk.lowering = #mk.lowering<fused>
// CHECK-NEXT: mk.swiglu {{.*}}{mk.lowering = #mk.lowering<registers>}
// CHECK: mk.store {{.*}}{mk.lowering = #mk.lowering<store>}
// CHECK-NEXT: mk.signal @ready0[{{.*}}] stamp {mk.lowering = #mk.lowering<deferred>}
// CHECK: scf.for
// CHECK-NEXT: mk.wait @ready0[{{.*}}] count 1 {mk.lowering = #mk.lowering<producer>}
// CHECK: mk.matmul {{.*}}mk.lowering = #mk.lowering<mma>
// CHECK: mk.wait @routing_arrived[%{{.*}}] count 2 per_cta_of dispatch {mk.lowering = #mk.lowering<consumer>}
// CHECK: mk.return_rows {{.*}}{mk.lowering = #mk.lowering<store>}
// CHECK: mk.signal @routing_returned[%{{.*}}] at gpu %{{.*}} via nvlink_store {mk.lowering = #mk.lowering<deferred>}
// CHECK: mk.wait @routing_returned[%{{.*}}] count 2 per_cta_of compute {mk.lowering = #mk.lowering<consumer>}
// CHECK: mk.role dispatch ctas
// CHECK-NOT: mk.lowering
// CHECK: mk.route_rows
mk.program @moe_one_node [T = 256, Hd = 256, I = 256, E = 4, TopK = 2, C = 256 default T] mesh <1x2> (%arg0: !mk.tensor<[256, 256], bf16, shard 0 over world>, %arg1: !mk.tensor<[256, 2], i32, shard 0 over world>, %arg2: !mk.tensor<[256, 2], f32, shard 0 over world>, %arg3: !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, %arg4: !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, %arg5: !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, %arg6: !mk.tensor<[256, 256], bf16, shard 0 over world>) grid 132 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c2 = arith.constant 2 : index
  mk.flags @launched [1]
  mk.flags @ready0 [4, 2, 2]
  mk.flags @routing_returned [1]
  mk.flags @routing_census [1]
  mk.flags @routing_counted [1]
  mk.flags @routing_arrived [4]
  mk.flags @routing_routed [1]
  %0 = mk.buffer : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>
  %1 = mk.buffer : !mk.tensor<[2, 4], i32, symmetric>
  %2 = mk.buffer : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>
  %3 = mk.buffer : !mk.tensor<[4], i32, shard 0 over world>
  %4 = mk.buffer : !mk.tensor<[4, 256], i32, shard 0 over world>
  %5 = mk.buffer : !mk.tensor<[256, 2], i32, shard 0 over world>
  %6 = mk.buffer : !mk.tensor<[256, 2, 256], bf16, shard 0 over world>
  mk.role compute ctas 106 {
    mk.single_cta {
      %node_0, %gpu_1 = mk.place : index, index
      scf.for %arg7 = %c0 to %c2 step %c1 {
        %7 = arith.addi %gpu_1, %arg7 : index
        %8 = arith.remsi %7, %c2 : index
        mk.signal @launched[%c0] at gpu %8 via nvlink_store
      }
    }
    mk.wait @routing_counted[%c0] count 1
    mk.tile_grid (%arg7, %arg8, %arg9) over %0 tiles [1, 128, 128] rows %3 order <swizzle 2> masked : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, !mk.tensor<[4], i32, shard 0 over world> {
      mk.wait @routing_arrived[%arg7] count 2 per_cta_of dispatch
      %7 = mk.matmul %2[%arg7, %arg8, :], %arg3[%arg7, :, %arg9] {k_tile = 64 : i64} : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, !mk.tensor<[4, 256, 256], bf16, shard 0 over world> -> !mk.tile<[128, 128], f32>
      %8 = mk.matmul %2[%arg7, %arg8, :], %arg4[%arg7, :, %arg9] {k_tile = 64 : i64} : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, !mk.tensor<[4, 256, 256], bf16, shard 0 over world> -> !mk.tile<[128, 128], f32>
      %9 = mk.swiglu %7, %8 : !mk.tile<[128, 128], f32>
      %10 = mk.convert %9 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
      mk.wait @launched[%c0] count 2
      mk.store %10, %0[%arg7, %arg8, %arg9] : !mk.tile<[128, 128], bf16>, !mk.tensor<[4, 256, 256], bf16, shard 0 over world>
      mk.signal @ready0[%arg7, %arg8, %arg9] stamp
    }
    mk.tile_grid (%arg7, %arg8, %arg9) over %2 tiles [1, 128, 256] rows %3 order <swizzle 2> masked : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, !mk.tensor<[4], i32, shard 0 over world> {
      scf.for %arg10 = %c0 to %c2 step %c1 {
        mk.wait @ready0[%arg7, %arg8, %arg10] count 1
      }
      %7 = mk.matmul %0[%arg7, %arg8, :], %arg5[%arg7, :, %arg9] {k_tile = 64 : i64} : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, !mk.tensor<[4, 256, 256], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
      %8 = mk.convert %7 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
      mk.wait @routing_arrived[%arg7] count 2 per_cta_of dispatch
      mk.wait @launched[%c0] count 2
      mk.return_rows %8, [%arg7, %arg8, %arg9] via %4, %3 into %6 : !mk.tile<[128, 256], bf16>, !mk.tensor<[4, 256], i32, shard 0 over world>, !mk.tensor<[4], i32, shard 0 over world>, !mk.tensor<[256, 2, 256], bf16, shard 0 over world>
    }
    %node, %gpu = mk.place : index, index
    scf.for %arg7 = %c1 to %c3 step %c1 {
      %7 = arith.addi %gpu, %arg7 : index
      %8 = arith.remsi %7, %c2 : index
      mk.signal @routing_returned[%c0] at gpu %8 via nvlink_store
    }
    mk.tile_grid (%arg7, %arg8) over %arg6 tiles [128, 256] masked : !mk.tensor<[256, 256], bf16, shard 0 over world> {
      mk.wait @routing_returned[%c0] count 2 per_cta_of compute
      mk.wait @routing_routed[%c0] count 1 per_cta_of dispatch
      mk.combine_returned %6, %5, %arg2 into %arg6[%arg7, %arg8] tile [128, 256] : !mk.tensor<[256, 2, 256], bf16, shard 0 over world>, !mk.tensor<[256, 2], i32, shard 0 over world>, !mk.tensor<[256, 2], f32, shard 0 over world>, !mk.tensor<[256, 256], bf16, shard 0 over world>
    }
  }
  mk.role dispatch ctas 26 {
    mk.single_cta {
      mk.wait @launched[%c0] count 2
      mk.route_census %arg1 into %1 : !mk.tensor<[256, 2], i32, shard 0 over world>, !mk.tensor<[2, 4], i32, symmetric>
      %node, %gpu = mk.place : index, index
      scf.for %arg7 = %c1 to %c3 step %c1 {
        %7 = arith.addi %gpu, %arg7 : index
        %8 = arith.remsi %7, %c2 : index
        mk.signal @routing_census[%c0] at gpu %8 via nvlink_store
      }
    }
    mk.wait @routing_census[%c0] count 2
    mk.single_cta {
      mk.route_counts %1 into %3 capacity 256 : !mk.tensor<[2, 4], i32, symmetric>, !mk.tensor<[4], i32, shard 0 over world>
      mk.signal @routing_counted[%c0]
    }
    mk.wait @launched[%c0] count 2
    mk.route_rows %arg0, %arg1, %1 into %2, %4, %5 arrivals @routing_arrived : !mk.tensor<[256, 256], bf16, shard 0 over world>, !mk.tensor<[256, 2], i32, shard 0 over world>, !mk.tensor<[2, 4], i32, symmetric>, !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, !mk.tensor<[4, 256], i32, shard 0 over world>, !mk.tensor<[256, 2], i32, shard 0 over world>
    mk.signal @routing_routed[%c0]
  }
}
