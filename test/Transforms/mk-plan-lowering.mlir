// RUN: mk-opt %s -split-input-file -mk-plan-lowering | FileCheck %s
// RUN: mk-opt %s -split-input-file -mk-plan-lowering="gemm-stages=3 gemm-cluster=1" | FileCheck %s --check-prefix=OPTIONS

// GEMM+AllReduce on one node: the compute role runs the GEMM engine (its matmul, conversion and
// puts), in clusters of 2 (104 and 28 CTAs pair up, the swizzled order pairs rows); the wait and
// signal that only engine stores follow are left to its senders. The reduce role's reduction is
// only stored: through TMA, and its puts then its signals are split into two loops.
// CHECK-LABEL: mk.program @gemm_allreduce
// CHECK: mk.role compute ctas 104 attributes {mk.gemm_engine = #mk.gemm_engine<element = bf16, tile_n = 256, stages = 0, b_k_major = false, staging_buffers = 4, cluster = 2>}
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
// OPTIONS: #mk.gemm_engine<element = bf16, tile_n = 256, stages = 3, b_k_major = false, staging_buffers = 4, cluster = 1>
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
