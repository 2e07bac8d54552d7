// test/Pipeline/gemm_allreduce_epilogue.mlir at 1x2, M=300, N=512, K=256, scheduled as mk-insert-signals did before
// the fix: the first writer's puts of the in-place all-reduce also signal the reader's flag.
module {
  mk.program @gemm_allreduce_epilogue [M = 300, N = 512, K = 256] mesh <1x2> (%arg0: !mk.tensor<[300, 256], bf16, shard 1 over world>, %arg1: !mk.tensor<[256, 512], bf16, shard 0 over world>, %arg2: !mk.tensor<[300, 512], bf16, replicated>, %arg3: !mk.tensor<[300, 512], bf16, replicated>) grid 6 {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c2 = arith.constant 2 : index
    mk.flags @launched [1]
    mk.flags @ready0 [3, 2]
    mk.flags @initialized0 [3, 2]
    %0 = mk.buffer : !mk.tensor<[300, 512], bf16, replicated>
    mk.role compute ctas 6 {
      mk.single_cta {
        %node, %gpu = mk.place : index, index
        scf.for %arg4 = %c0 to %c2 step %c1 {
          %1 = arith.addi %gpu, %arg4 : index
          %2 = arith.remsi %1, %c2 : index
          mk.signal @launched[%c0] at gpu %2 via nvlink_store
        }
      }
      mk.tile_grid (%arg4, %arg5) over %0 tiles [128, 256] order <swizzle 3, local_first> masked : !mk.tensor<[300, 512], bf16, replicated> {
        %1 = mk.matmul %arg0[%arg4, :], %arg1[:, %arg5] {k_tile = 64 : i64} : !mk.tensor<[300, 256], bf16, shard 1 over world>, !mk.tensor<[256, 512], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
        %2 = mk.convert %1 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
        %node, %gpu = mk.owner %0[%arg4, %arg5] tile [128, 256] row_slices : !mk.tensor<[300, 512], bf16, replicated>
        %node_0, %gpu_1 = mk.place : index, index
        %3 = arith.cmpi eq, %gpu, %gpu_1 : index
        mk.wait @launched[%c0] count 2
        scf.if %3 {
          scf.for %arg6 = %c1 to %c3 step %c1 {
            %6 = arith.addi %gpu_1, %arg6 : index
            %7 = arith.remsi %6, %c2 : index
            mk.put %2, %0[%arg4, %arg5] at gpu %7 via nvlink_store : !mk.tile<[128, 256], bf16>, !mk.tensor<[300, 512], bf16, replicated>
            mk.signal @ready0[%arg4, %arg5] at gpu %7 via nvlink_store
          }
          %4 = arith.addi %gpu_1, %c1 : index
          %5 = arith.remsi %4, %c2 : index
          mk.signal @initialized0[%arg4, %arg5] at gpu %5 via nvlink_store
        } else {
          mk.wait @initialized0[%arg4, %arg5] count 1
          scf.for %arg6 = %c1 to %c3 step %c1 {
            %4 = arith.addi %gpu_1, %arg6 : index
            %5 = arith.remsi %4, %c2 : index
            mk.put %2, %0[%arg4, %arg5] at gpu %5 via nvlink_store combine sum : !mk.tile<[128, 256], bf16>, !mk.tensor<[300, 512], bf16, replicated>
            mk.signal @ready0[%arg4, %arg5] at gpu %5 via nvlink_store
          }
        }
      }
      mk.tile_grid (%arg4, %arg5) over %arg3 tiles [128, 256] order <row_major> masked : !mk.tensor<[300, 512], bf16, replicated> {
        mk.wait @ready0[%arg4, %arg5] count 1
        %1 = mk.load %0[%arg4, %arg5] : !mk.tensor<[300, 512], bf16, replicated> -> !mk.tile<[128, 256], bf16>
        %2 = mk.load %arg2[%arg4, %arg5] : !mk.tensor<[300, 512], bf16, replicated> -> !mk.tile<[128, 256], bf16>
        %3 = mk.convert %1 : !mk.tile<[128, 256], bf16> -> !mk.tile<[128, 256], f32>
        %4 = mk.convert %2 : !mk.tile<[128, 256], bf16> -> !mk.tile<[128, 256], f32>
        %5 = mk.add %3, %4 : !mk.tile<[128, 256], f32>
        %6 = mk.activation gelu %5 : !mk.tile<[128, 256], f32>
        %7 = mk.convert %6 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
        mk.wait @launched[%c0] count 2
        mk.store %7, %arg3[%arg4, %arg5] : !mk.tile<[128, 256], bf16>, !mk.tensor<[300, 512], bf16, replicated>
      }
    }
  }
}
