// lib/moe_dispatch_gemm_combine.mlir at 1x2, T=256, Hd=256, I=256, E=4, TopK=2, C=256, scheduled as
// mk-insert-signals did before the fix: the expert grids skip the tiles past the row counts.
module {
  mk.program @moe_dispatch_gemm_combine [T = 256, Hd = 256, I = 256, E = 4, TopK = 2, C = 256] mesh <1x2> (%arg0: !mk.tensor<[256, 256], bf16, shard 0 over world>, %arg1: !mk.tensor<[256, 2], i32, shard 0 over world>, %arg2: !mk.tensor<[256, 2], f32, shard 0 over world>, %arg3: !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, %arg4: !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, %arg5: !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, %arg6: !mk.tensor<[256, 256], bf16, shard 0 over world>) grid 13 {
    %c4 = arith.constant 4 : index
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c2 = arith.constant 2 : index
    mk.flags @launched [1]
    mk.flags @ready7 [4, 2]
    mk.flags @ready6 [1]
    mk.flags @ready5 [1]
    mk.flags @ready4 [1]
    mk.flags @ready3 [2]
    mk.flags @ready2 [2]
    mk.flags @ready1 [4, 2, 1]
    mk.flags @ready0 [4, 2, 2]
    %0 = mk.buffer : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>
    %1 = mk.buffer : !mk.tensor<[256, 256], bf16, symmetric>
    %2 = mk.buffer : !mk.tensor<[256, 2], i32, symmetric>
    %3 = mk.buffer : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>
    %4 = mk.buffer : !mk.tensor<[4], i32, shard 0 over world>
    %5 = mk.buffer : !mk.tensor<[4, 256], i32, shard 0 over world>
    %6 = mk.buffer : !mk.tensor<[256, 2], i32, shard 0 over world>
    %7 = mk.buffer : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>
    %8 = mk.buffer : !mk.tensor<[4, 256, 256], bf16, symmetric>
    mk.role compute ctas 8 {
      mk.single_cta {
        %node, %gpu = mk.place : index, index
        scf.for %arg7 = %c0 to %c2 step %c1 {
          %9 = arith.addi %gpu, %arg7 : index
          %10 = arith.remsi %9, %c2 : index
          mk.signal @launched[%c0] at gpu %10 via nvlink_store
        }
      }
      mk.wait @ready5[%c0] count 1
      mk.tile_grid (%arg7, %arg8, %arg9) over %0 tiles [1, 128, 128] rows %4 order <swizzle 2> : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, !mk.tensor<[4], i32, shard 0 over world> {
        mk.wait @ready4[%c0] count 1
        %9 = mk.matmul %3[%arg7, %arg8, :], %arg3[%arg7, :, %arg9] {k_tile = 64 : i64} : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, !mk.tensor<[4, 256, 256], bf16, shard 0 over world> -> !mk.tile<[128, 128], f32>
        %10 = mk.matmul %3[%arg7, %arg8, :], %arg4[%arg7, :, %arg9] {k_tile = 64 : i64} : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, !mk.tensor<[4, 256, 256], bf16, shard 0 over world> -> !mk.tile<[128, 128], f32>
        %11 = mk.swiglu %9, %10 : !mk.tile<[128, 128], f32>
        %12 = mk.convert %11 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
        mk.wait @launched[%c0] count 2
        mk.store %12, %0[%arg7, %arg8, %arg9] : !mk.tile<[128, 128], bf16>, !mk.tensor<[4, 256, 256], bf16, shard 0 over world>
        mk.signal @ready0[%arg7, %arg8, %arg9]
      }
      mk.tile_grid (%arg7, %arg8, %arg9) over %3 tiles [1, 128, 256] rows %4 order <swizzle 2> : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, !mk.tensor<[4], i32, shard 0 over world> {
        scf.for %arg10 = %c0 to %c2 step %c1 {
          mk.wait @ready0[%arg7, %arg8, %arg10] count 1
        }
        %9 = mk.matmul %0[%arg7, %arg8, :], %arg5[%arg7, :, %arg9] {k_tile = 64 : i64} : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, !mk.tensor<[4, 256, 256], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
        %10 = mk.convert %9 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
        mk.wait @launched[%c0] count 2
        mk.store %10, %7[%arg7, %arg8, %arg9] : !mk.tile<[128, 256], bf16>, !mk.tensor<[4, 256, 256], bf16, shard 0 over world>
        mk.signal @ready1[%arg7, %arg8, %arg9]
      }
    }
    mk.role intra_transfer ctas 1 {
      mk.tile_grid (%arg7, %arg8) over %arg0 tiles [128, :] : !mk.tensor<[256, 256], bf16, shard 0 over world> {
        %node, %gpu = mk.place : index, index
        mk.wait @launched[%c0] count 2
        scf.for %arg9 = %c1 to %c3 step %c1 {
          %9 = arith.addi %gpu, %arg9 : index
          %10 = arith.remsi %9, %c2 : index
          mk.copy %arg0[%arg7, :] -> %1[%arg7, :] at gpu %10 via nvlink_bulk tile [128, 256] : !mk.tensor<[256, 256], bf16, shard 0 over world>, !mk.tensor<[256, 256], bf16, symmetric>
          mk.signal @ready2[%arg7] at gpu %10 via nvlink_store
        }
      }
    }
    mk.role intra_transfer ctas 1 {
      mk.tile_grid (%arg7, %arg8) over %arg1 tiles [128, :] : !mk.tensor<[256, 2], i32, shard 0 over world> {
        %node, %gpu = mk.place : index, index
        mk.wait @launched[%c0] count 2
        scf.for %arg9 = %c1 to %c3 step %c1 {
          %9 = arith.addi %gpu, %arg9 : index
          %10 = arith.remsi %9, %c2 : index
          mk.copy %arg1[%arg7, :] -> %2[%arg7, :] at gpu %10 via nvlink_bulk tile [128, 2] : !mk.tensor<[256, 2], i32, shard 0 over world>, !mk.tensor<[256, 2], i32, symmetric>
          mk.signal @ready3[%arg7] at gpu %10 via nvlink_store
        }
      }
    }
    mk.role dispatch ctas 1 {
      mk.single_cta {
        scf.for %arg7 = %c0 to %c2 step %c1 {
          mk.wait @ready2[%arg7] count 1
        }
        scf.for %arg7 = %c0 to %c2 step %c1 {
          mk.wait @ready3[%arg7] count 1
        }
        mk.select_routed %1, %2 into %3, %4, %5, %6 : !mk.tensor<[256, 256], bf16, symmetric>, !mk.tensor<[256, 2], i32, symmetric>, !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, !mk.tensor<[4], i32, shard 0 over world>, !mk.tensor<[4, 256], i32, shard 0 over world>, !mk.tensor<[256, 2], i32, shard 0 over world>
        mk.signal @ready6[%c0]
        mk.signal @ready5[%c0]
        mk.signal @ready4[%c0]
      }
    }
    mk.role intra_transfer ctas 1 {
      mk.tile_grid (%arg7, %arg8, %arg9) over %7 tiles [1, 128, :] : !mk.tensor<[4, 256, 256], bf16, shard 0 over world> {
        %node, %gpu = mk.place : index, index
        mk.wait @ready1[%arg7, %arg8, %c0] count 1
        mk.wait @launched[%c0] count 2
        scf.for %arg10 = %c1 to %c3 step %c1 {
          %9 = arith.addi %gpu, %arg10 : index
          %10 = arith.remsi %9, %c2 : index
          mk.copy %7[%arg7, %arg8, :] -> %8[%arg7, %arg8, :] at gpu %10 via nvlink_bulk tile [128, 256] : !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, !mk.tensor<[4, 256, 256], bf16, symmetric>
          mk.signal @ready7[%arg7, %arg8] at gpu %10 via nvlink_store
        }
      }
    }
    mk.role combine ctas 1 {
      mk.tile_grid (%arg7, %arg8) over %arg6 tiles [128, 256] : !mk.tensor<[256, 256], bf16, shard 0 over world> {
        mk.wait @ready6[%c0] count 1
        scf.for %arg9 = %c0 to %c4 step %c1 {
          scf.for %arg10 = %c0 to %c2 step %c1 {
            mk.wait @ready7[%arg9, %arg10] count 1
          }
        }
        mk.combine_routed %8, %6, %arg2 into %arg6[%arg7, %arg8] tile [128, 256] : !mk.tensor<[4, 256, 256], bf16, symmetric>, !mk.tensor<[256, 2], i32, shard 0 over world>, !mk.tensor<[256, 2], f32, shard 0 over world>, !mk.tensor<[256, 256], bf16, shard 0 over world>
      }
    }
  }
}
