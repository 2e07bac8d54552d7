// RUN: mk-opt %s -mk-lower-to-emitc | FileCheck %s

// mk-lower-to-emitc turns a scheduled program (here GEMM + all-reduce on 1 x 2) into one EmitC
// function: an extern "C" __global__ kernel taking the launch's mk_kernel_args, whose CTAs
// branch on their role, loop over their tiles and call the device library. The launch
// parameters the runtime reads back follow it.

// CHECK: emitc.include "mk/device/kernel.cuh"
// CHECK: emitc.verbatim "extern __shared__ __align__(128) unsigned char mk_smem[];"
// CHECK: emitc.func @gemm_allreduce(%[[ARGS:.+]]: !emitc.opaque<"const __grid_constant__ mk_kernel_args">)
// CHECK-SAME: specifiers = ["extern \22C\22 __global__ __launch_bounds__(MK_CTA_THREADS, 1)"]
// CHECK-DAG: call_opaque "mk::tensor"(%[[ARGS]]) {args = [0 : index, #emitc.opaque<"0">], template_args = [#emitc.opaque<"mk::bf16">]}
// CHECK-DAG: call_opaque "mk::cta"()
// The compute role: CTAs [0, 114), a loop over 32 tiles strided by 114.
// CHECK: {{^ +}}if %
// CHECK: {{^ +}}for %
// CHECK: call_opaque "mk::matmul"{{.*}}template_args = [#emitc.opaque<"128">, #emitc.opaque<"256">, #emitc.opaque<"64">, #emitc.opaque<"false">, #emitc.opaque<"false">, #emitc.opaque<"mk::bf16">]
// CHECK-SAME: -> !emitc.opaque<"mk::Tile<float, 128, 256>">
// CHECK: call_opaque "mk::convert"{{.*}} -> !emitc.opaque<"mk::Tile<mk::bf16, 128, 256>">
// CHECK: call_opaque "mk::wait_arrivals"
// CHECK: call_opaque "mk::at_peer"
// CHECK: call_opaque "mk::store_tile"
// CHECK: call_opaque "mk::signal_gpu"
// The intra-node reduction role.
// CHECK: call_opaque "mk::accumulate_tiles"{{.*}}template_args = [#emitc.opaque<"mk::Reduce::sum">, #emitc.opaque<"mk::bf16">, #emitc.opaque<"128">, #emitc.opaque<"256">]
// CHECK: {{^ +}}return
// CHECK: emitc.verbatim "extern \22C\22 __device__ const int gemm_allreduce_abi_version = MK_ABI_VERSION;
// CHECK-SAME: gemm_allreduce_grid = 132;
// CHECK-SAME: gemm_allreduce_dynamic_smem_bytes = mk::max_bytes(
// CHECK-SAME: gemm_allreduce_flag_words = 33;
// CHECK-SAME: gemm_allreduce_arguments = 3;
// CHECK-SAME: gemm_allreduce_tensors = 4;
// The output, which peers write, and the staging slots must be in symmetric memory.
// CHECK-SAME: gemm_allreduce_symmetric_tensors = 12u;
// CHECK-SAME: gemm_allreduce_tensor_bytes[] = {1048576, 1048576, 2097152, 4194304};
// Each rank holds half of K.
// CHECK-SAME: gemm_allreduce_argument_types[] = \22bf16[1024,512] bf16[512,1024] bf16[1024,1024]\22;
// CHECK-NOT: mk.
mk.program @gemm_allreduce [M = 1024, N = 1024, K = 1024] mesh <1x2> (%arg0: !mk.tensor<[1024, 1024], bf16, shard 1 over world>, %arg1: !mk.tensor<[1024, 1024], bf16, shard 0 over world>, %arg2: !mk.tensor<[1024, 1024], bf16, replicated>) grid 132 {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c2 = arith.constant 2 : index
    mk.flags @launched [1]
    mk.flags @ready0 [8, 4]
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
      mk.tile_grid (%arg3, %arg4) over %arg2 tiles [128, 256] distribute gpus : !mk.tensor<[1024, 1024], bf16, replicated> {
        mk.wait @ready0[%arg3, %arg4] count 2
        %1 = mk.accumulate sum %0[:, %arg3, %arg4] : !mk.tensor<[2, 1024, 1024], bf16, symmetric> -> !mk.tile<[128, 256], f32>
        %2 = mk.convert %1 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
        %node, %gpu = mk.place : index, index
        mk.wait @launched[%c0] count 2
        scf.for %arg5 = %c1 to %c3 step %c1 {
          %3 = arith.addi %gpu, %arg5 : index
          %4 = arith.remsi %3, %c2 : index
          mk.put %2, %arg2[%arg3, %arg4] at gpu %4 via nvlink_store : !mk.tile<[128, 256], bf16>, !mk.tensor<[1024, 1024], bf16, replicated>
        }
      }
    }
  }
