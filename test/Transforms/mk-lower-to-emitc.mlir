// RUN: mk-opt %s -split-input-file -mk-plan-lowering -mk-lower-to-emitc | FileCheck %s
// RUN: mk-opt %s -split-input-file -mk-plan-lowering="gemm-stages=3" -mk-lower-to-emitc | FileCheck %s --check-prefix=STAGES
// RUN: mk-opt %s -split-input-file -mk-plan-lowering="gemm-cluster=1" -mk-lower-to-emitc | FileCheck %s --check-prefix=SINGLE

// mk-lower-to-emitc turns a scheduled program into one EmitC function: an extern "C" __global__
// kernel taking the launch's mk_kernel_args, whose CTAs branch on their role, loop over their
// tiles and call the device library. The launch parameters the runtime reads back follow it.

// GEMM + all-reduce on 1 x 2. The compute role runs on the GEMM engine: its CTAs split into the
// producer, whose loop keeps only the loads, and the consumers, which multiply, store each tile
// to its owner through TMA and signal. The reduction role runs on its team of 256 threads, with
// TMA: the two slots in, their sum out to both GPUs. Both roles have an even number of CTAs and
// the swizzled order gives CTAs 2c and 2c + 1 tiles of the same column, rows 2i and 2i + 1: the
// kernel runs in clusters of 2, whose engines share each B panel (unless gemm-cluster=1).
// CHECK: emitc.include "mk/device/kernel.cuh"
// CHECK: emitc.verbatim "extern __shared__ __align__(128) unsigned char mk_smem[];"
// CHECK-LABEL: emitc.func @gemm_allreduce
// CHECK-SAME: (%[[ARGS:.+]]: !emitc.opaque<"const __grid_constant__ mk_kernel_args">)
// CHECK-SAME: specifiers = ["extern \22C\22 __global__ __launch_bounds__(MK_CTA_THREADS, 1) __cluster_dims__(2, 1, 1)"]
// SINGLE-LABEL: emitc.func @gemm_allreduce
// SINGLE-SAME: specifiers = ["extern \22C\22 __global__ __launch_bounds__(MK_CTA_THREADS, 1)"]
// SINGLE: call_opaque "mk::GemmEngine<mk::GemmConfig<mk::bf16, 256, mk::gemm_max_stages<mk::bf16, 256, 4, 128>(), false, 4, 1, 128>>"()
// CHECK-DAG: call_opaque "mk::tensor"(%[[ARGS]]) {args = [0 : index, #emitc.opaque<"0">], template_args = [#emitc.opaque<"mk::bf16">]}
// CHECK-DAG: call_opaque "mk::begin_launch"(%[[ARGS]]) {args = [0 : index, #emitc.opaque<"true">, #emitc.opaque<"0">]}
// CHECK-DAG: call_opaque "mk::cta"()
// CHECK: %[[ENGINE:.+]] = call_opaque "mk::GemmEngine<mk::GemmConfig<mk::bf16, 256, mk::gemm_max_stages<mk::bf16, 256, 4, 128>(), false, 4, 2, 128>>"() {args = [#emitc.opaque<"mk_smem">]}
// CHECK: %[[PRODUCER:.+]] = call_opaque "mk::gemm_is_producer"
// CHECK: if %[[PRODUCER]]
// CHECK: call_opaque "mk::gemm_producer_begin"(%[[ENGINE]])
// CHECK: %[[LOADER:.+]] = call_opaque "mk::gemm_loader"
// CHECK: if %[[LOADER]]
// CHECK: {{^ +}}for %
// CHECK-NOT: call_opaque "mk::wait_arrivals"
// CHECK: call_opaque "mk::gemm_load"(%[[ENGINE]]
// CHECK: } else {
// CHECK: call_opaque "mk::gemm_consumer_begin"(%[[ENGINE]])
// CHECK: call_opaque "mk::signal_gpu"
// CHECK: {{^ +}}for %
// CHECK: %[[ACC:.+]] = call_opaque "mk::gemm_mma"(%[[ENGINE]]) {args = [0 : index, #emitc.opaque<"8">]}
// CHECK-SAME: -> !emitc.opaque<"mk::GemmAccumulator<mk::GemmConfig<mk::bf16, 256, mk::gemm_max_stages<mk::bf16, 256, 4, 128>(), false, 4, 2, 128>>">
// CHECK: call_opaque "mk::gemm_consumer_defer_arrivals"(%[[ENGINE]]
// CHECK: %[[MAP:.+]] = call_opaque "mk::tensor_map"
// CHECK: call_opaque "mk::gemm_store"(%[[ENGINE]], %[[ACC]], %[[MAP]]
// CHECK-SAME: template_args = [#emitc.opaque<"mk::bf16">]
// CHECK: call_opaque "mk::gemm_signal_gpu"(%[[ENGINE]]
// CHECK: call_opaque "mk::gemm_finish"(%[[ENGINE]])
// Each role's branch is the else of the one before (a CTA takes one role): the warpgroups' paths,
// at the register counts their setmaxnreg gave them, meet only at the kernel's end.
// CHECK: } else {
// The reduction walks every tile in the compute role's order (swizzled) and keeps this GPU's,
// so that it takes tiles up as they are finished; it puts the sum to every GPU, then signals
// every GPU. The puts and signals go to the publisher (the warpgroup outside the team), which
// raises the flags once the puts are complete while the team reduces the next tile.
// CHECK: %[[REDUCE:.+]] = call_opaque "mk::TmaReduce<2, mk::bf16, mk::bf16, 128, 256>"() {args = [#emitc.opaque<"mk_smem">]}
// CHECK: %[[TEAM:.+]] = call_opaque "mk::team_member"
// CHECK: if %[[TEAM]]
// CHECK: call_opaque "mk::team_begin"
// CHECK: {{^ +}}for %
// CHECK: %[[OWNED:.+]] = cmp eq,
// CHECK: if %[[OWNED]]
// CHECK: call_opaque "mk::wait_arrivals"
// CHECK: %[[SUM:.+]] = call_opaque "mk::tma_reduce"(%[[REDUCE]]
// CHECK-SAME: template_args = [#emitc.opaque<"mk::Reduce::sum">]
// CHECK: {{^ +}}for %
// CHECK-NOT: call_opaque "mk::tma_signal"
// CHECK: call_opaque "mk::tma_store_reduced"(%[[REDUCE]], %[[SUM]]
// CHECK-NEXT: {{^ +}}}
// CHECK-NEXT: {{^ +}}for %
// CHECK-NOT: call_opaque "mk::tma_store_reduced"
// CHECK: %[[FLAG:.+]] = call_opaque "mk::flag_gpu"
// CHECK: call_opaque "mk::tma_signal"(%[[REDUCE]], %[[FLAG]])
// CHECK: call_opaque "mk::tma_commit"(%[[REDUCE]])
// CHECK: call_opaque "mk::tma_reduce_finish"(%[[REDUCE]])
// CHECK: } else {
// CHECK: call_opaque "mk::team_idle"
// CHECK: call_opaque "mk::tma_publish"(%[[REDUCE]])
// CHECK: {{^ +}}return
// The manifest, one mk_kernel_manifest (mk/abi.h) for the runtime.
// CHECK: emitc.verbatim "extern \22C\22 __device__ const mk_kernel_manifest gemm_allreduce_manifest = {\0A    /* abi_version */ MK_ABI_VERSION,
// CHECK-SAME: /* grid */ 132,
// CHECK-SAME: /* dynamic_smem_bytes */ mk::max_bytes(mk::max_bytes(0, mk::gemm_smem_bytes<mk::GemmConfig<mk::bf16, 256, mk::gemm_max_stages<mk::bf16, 256, 4, 128>(), false, 4, 2, 128>>()), mk::TmaReduce<2, mk::bf16, mk::bf16, 128, 256>::kBytes),
// CHECK-SAME: /* flag_words */ 65,
// CHECK-SAME: /* arguments */ 3,
// CHECK-SAME: /* tensors */ 4,
// The output, which peers write, and the staging slots must be in symmetric memory.
// CHECK-SAME: /* symmetric_tensors */ 12u,
// CHECK-SAME: /* roles */ 2,
// CHECK-SAME: /* tensor_map_count */ 7,
// CHECK-SAME: /* engine_copy_count */ 0,
// CHECK-SAME: /* tensor_bytes */ {1048576ull, 1048576ull, 2097152ull, 4194304ull},
// Each rank holds half of K.
// CHECK-SAME: /* argument_types */ {{[{][{]}}\22bf16\22, 2, 0, {1024ull, 512ull}}, {\22bf16\22, 2, 0, {512ull, 1024ull}}, {\22bf16\22, 2, 0, {1024ull, 1024ull}}},
// The roles' CTAs.
// CHECK-SAME: /* sm_split */ {{[{][{]}}\22compute\22, 104, 0}, {\22intra_reduce\22, 28, 0}},
// TMA maps: A and B, the slots on each GPU (the partials' owner) and here (the reduction), the
// output on each GPU.
// CHECK-SAME: /* tensor_maps */ {{[{][{]}}0, MK_MAP_LOCAL, MK_MAP_ELEMENT_BF16, 2, {512ull, 1024ull}, {64, 128}, 128}, {1, MK_MAP_LOCAL, MK_MAP_ELEMENT_BF16, 2, {1024ull, 512ull}, {64, 64}, 128}, {3, 0, MK_MAP_ELEMENT_BF16, 3, {1024ull, 1024ull, 2ull}, {64, 128, 1}, 128}, {3, 1, MK_MAP_ELEMENT_BF16, 3, {1024ull, 1024ull, 2ull}, {64, 128, 1}, 128}, {3, MK_MAP_LOCAL, MK_MAP_ELEMENT_BF16, 3, {1024ull, 1024ull, 2ull}, {64, 128, 1}, 128}, {2, 0, MK_MAP_ELEMENT_BF16, 2, {1024ull, 1024ull}, {64, 128}, 128}, {2, 1, MK_MAP_ELEMENT_BF16, 2, {1024ull, 1024ull}, {64, 128}, 128}}};
// CHECK-NOT: mk.
// The ring depth, overridden.
// STAGES: mk::GemmEngine<mk::GemmConfig<mk::bf16, 256, 3, false, 4, 2, 128>>
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

// A matmul whose tile is not only stored (here it goes through an activation) stays on the tile
// library's mma.sync path, on the team; so does a reduction over 4 copies, combined and stored
// in chunks.
// CHECK-LABEL: emitc.func @fallback
// CHECK: call_opaque "mk::team_member"
// CHECK: call_opaque "mk::team_begin"
// CHECK: call_opaque "mk::matmul"{{.*}}template_args = [#emitc.opaque<"128">, #emitc.opaque<"128">, #emitc.opaque<"64">, #emitc.opaque<"false">, #emitc.opaque<"false">, #emitc.opaque<"mk::bf16">]
// CHECK: call_opaque "mk::relu"
// CHECK: call_opaque "mk::store_tile"
// CHECK: call_opaque "mk::accumulate_chunks"{{.*}}template_args = [#emitc.opaque<"mk::Reduce::sum">, #emitc.opaque<"mk::bf16">, #emitc.opaque<"mk::bf16">, #emitc.opaque<"128">, #emitc.opaque<"128">]
// CHECK: call_opaque "mk::store_chunks"
// CHECK: call_opaque "mk::team_idle"
// CHECK: fallback_manifest = {
// CHECK-SAME: /* tensor_map_count */ 0,
// CHECK-SAME: /* tensor_maps */ {}};
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

// Tile math that exchanges values between threads: a row norm (reduce, broadcast, rsqrt of the
// mean from a splat), column minima, the elementary functions, rank-1 loads and stores.
// CHECK-LABEL: emitc.func @row_math
// CHECK: call_opaque "mk::load_tile"
// CHECK: call_opaque "mk::reduce"{{.*}}template_args = [#emitc.opaque<"mk::Reduce::sum">, #emitc.opaque<"1">]
// CHECK: call_opaque "mk::rsqrt"
// CHECK: call_opaque "mk::broadcast"{{.*}}template_args = [#emitc.opaque<"1">, #emitc.opaque<"128">, #emitc.opaque<"256">]
// CHECK: call_opaque "mk::reduce"{{.*}}template_args = [#emitc.opaque<"mk::Reduce::min">, #emitc.opaque<"0">]
// CHECK: call_opaque "mk::load_vector"{{.*}}template_args = [#emitc.opaque<"float">, #emitc.opaque<"256">]
// CHECK: call_opaque "mk::minimum"
// CHECK: call_opaque "mk::store_vector"
// CHECK: call_opaque "mk::exp"
// CHECK: call_opaque "mk::log"
// CHECK: call_opaque "mk::sqrt"
// CHECK: call_opaque "mk::reciprocal"
// CHECK: call_opaque "mk::tanh"
// CHECK: call_opaque "mk::sigmoid"
// CHECK: call_opaque "mk::neg"
// CHECK: call_opaque "mk::abs"
// CHECK: call_opaque "mk::store_tile"
// CHECK: mk::reduce_smem_bytes<1, 128, 256>()
// CHECK-SAME: mk::broadcast_smem_bytes<128>()
// CHECK-SAME: mk::reduce_smem_bytes<0, 128, 256>()
!X = !mk.tensor<[512, 1024], f32, replicated>
!V = !mk.tensor<[1024], f32, replicated>
!T = !mk.tile<[128, 256], f32>
!R = !mk.tile<[128], f32>
!C = !mk.tile<[256], f32>
mk.program @row_math [] mesh <1x1> (%x: !X, %v: !V, %y: !X, %w: !V) grid 132 {
  mk.role compute ctas 132 {
    mk.tile_grid (%m, %n) over %y tiles [128, 256] : !X {
      %t = mk.load %x[%m, %n] : !X -> !T
      %sq = mk.mul %t, %t : !T
      %sum = mk.reduce sum %sq dim 1 : !T -> !R
      %inv = arith.constant 3.906250e-03 : f32
      %scale = mk.splat %inv : f32 -> !R
      %mean = mk.mul %sum, %scale : !R
      %r = mk.rsqrt %mean : !R
      %rb = mk.broadcast %r dim 1 : !R -> !T
      %normed = mk.mul %t, %rb : !T
      %cmin = mk.reduce min %normed dim 0 : !T -> !C
      %vv = mk.load %v[%n] : !V -> !C
      %lo = mk.min %cmin, %vv : !C
      mk.store %lo, %w[%n] : !C, !V
      %e = mk.exp %normed : !T
      %l = mk.log %e : !T
      %q = mk.sqrt %l : !T
      %i = mk.reciprocal %q : !T
      %h = mk.tanh %i : !T
      %g = mk.sigmoid %h : !T
      %ng = mk.neg %g : !T
      %a = mk.abs %ng : !T
      mk.store %a, %y[%m, %n] : !T, !X
    }
  }
}

// -----

// Ring attention's pieces on the tile library: the range of a shard's tiles, one attention step
// (its state taken apart), and the final normalisation's broadcast.
// CHECK-LABEL: emitc.func @attention
// CHECK: call_opaque "mk::attention_block"{{.*}}#emitc.opaque<"true">, #emitc.opaque<"0x1p-3f">, #emitc.opaque<"mk_smem">]} : (!emitc.opaque<"mk::Tile<mk::bf16, 128, 64>">, {{.*}}) -> !emitc.opaque<"mk::AttentionState<128, 64>">
// CHECK: call_opaque "mk::attention_acc"
// CHECK: call_opaque "mk::attention_row_max"
// CHECK: call_opaque "mk::attention_row_sum"
// CHECK: call_opaque "mk::broadcast"
// CHECK: mk::attention_block_smem_bytes<mk::bf16, 128, 128, 64, 64>()
!Q = !mk.tensor<[1024, 64], bf16, shard 0 over world>
!QT = !mk.tile<[128, 64], bf16>
!A = !mk.tile<[128, 64], f32>
!S = !mk.tile<[128], f32>
mk.program @attention [] mesh <1x2> (%q: !Q, %k: !Q, %o: !Q) grid 132 {
  mk.role compute ctas 132 {
    mk.tile_grid (%i, %d) over %o tiles [128, :] : !Q {
      %one = arith.constant 1 : index
      %src = arith.constant 1 : index
      %zero = arith.constant 0.0 : f32
      %qt = mk.load %q[%i, :] : !Q -> !QT
      %acc0 = mk.splat %zero : f32 -> !A
      %m0 = mk.splat %zero : f32 -> !S
      %lo, %hi = mk.shard_range %k tile 128 of %src : !Q
      %acc, %m, %l = scf.for %j = %lo to %hi step %one iter_args(%a = %acc0, %mm = %m0, %ll = %m0) -> (!A, !S, !S) {
        %kt = mk.load %k[%j, :] : !Q -> !mk.tile<[128, 64], bf16>
        %a1, %m1, %l1 = mk.attention_block %qt, %kt, %kt, %a, %mm, %ll at (%i, %j) causal {scale = 0.125 : f32} : !QT, !mk.tile<[128, 64], bf16>, !mk.tile<[128, 64], bf16>, !A, !S
        scf.yield %a1, %m1, %l1 : !A, !S, !S
      }
      %lb = mk.broadcast %l dim 1 : !S -> !A
      %out = mk.div %acc, %lb : !A
      %o16 = mk.convert %out : !A -> !QT
      mk.store %o16, %o[%i, :] : !QT, !Q
    }
  }
}

// -----

// Expert routing across nodes: each dispatch CTA packs its share of the tokens bound for the
// other node; one sends them with the count the GPU keeps (one proxy command a tensor: slices of
// 1024 bytes, slice 1 from byte 1024; the signal riding on it), the census row on to a GPU of the
// node, and the rows the rail peer sent are routed as its own, from its region; a tile of tokens
// sums the rows `at` names.
// CHECK-LABEL: emitc.func @routing_nodes
// CHECK: call_opaque "mk::route_pack"({{.*}}template_args = [#emitc.opaque<"8">]
// CHECK: %[[COUNT:.+]] = call_opaque "mk::slices"(%{{.*}}) {{.*}} -> !emitc.opaque<"int">
// CHECK: %[[FROM:.+]] = "emitc.constant"() <{value = 1024 : index}>
// CHECK: call_opaque "mk::remote_put"(%arg0, %{{.*}}, %[[FROM]], %{{.*}}, %[[COUNT]], %{{.*}}) {args = [{{.*}}#emitc.opaque<"1024">, #emitc.opaque<"1024">, #emitc.opaque<"1024">
// CHECK: %[[ONE:.+]] = call_opaque "mk::slices"() {args = [#emitc.opaque<"nullptr">]}
// CHECK: call_opaque "mk::copy_region"({{.*}}%[[ONE]])
// CHECK: %[[RECEIVED:.+]] = call_opaque "mk::slices"
// CHECK: call_opaque "mk::route_rows"({{.*}}%[[RECEIVED]],
// CHECK: call_opaque "mk::combine_returned"
// CHECK: mk::route_smem_bytes<8>()
mk.program @routing_nodes [] mesh <2x1> (%x: !mk.tensor<[256, 512], bf16, shard 0 over world>, %e: !mk.tensor<[256, 4], i32, shard 0 over world>,
    %w: !mk.tensor<[256, 4], f32, shard 0 over world>, %y: !mk.tensor<[256, 512], bf16, shard 0 over world>) grid 132 {
  mk.flags @arrived [8]
  mk.flags @received [2]
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %census = mk.buffer : !mk.tensor<[2, 8], i32, symmetric>
  %routed = mk.buffer : !mk.tensor<[8, 256, 512], bf16, shard 0 over world>
  %origins = mk.buffer : !mk.tensor<[8, 256], i32, shard 0 over world>
  %pack = mk.buffer : !mk.tensor<[256, 512], bf16, symmetric>
  %pe = mk.buffer : !mk.tensor<[256, 4], i32, symmetric>
  %n = mk.buffer : !mk.tensor<[4], i32, symmetric>
  %at = mk.buffer : !mk.tensor<[256, 4], i32, shard 0 over world>
  %slots = mk.buffer : !mk.tensor<[512, 4], i32, symmetric>
  %back = mk.buffer : !mk.tensor<[2048, 1, 512], bf16, symmetric>
  mk.role dispatch ctas 2 {
    mk.route_pack %x, %e into %pack, %pe, %n, %at experts 8 : !mk.tensor<[256, 512], bf16, shard 0 over world>, !mk.tensor<[256, 4], i32, shard 0 over world>, !mk.tensor<[256, 512], bf16, symmetric>, !mk.tensor<[256, 4], i32, symmetric>, !mk.tensor<[4], i32, symmetric>, !mk.tensor<[256, 4], i32, shard 0 over world>
    mk.single_cta {
      mk.send_rows %pack[%c1] -> %pack[%c0] count %n[%c1] at node %c1 via rdma_proxy : !mk.tensor<[256, 512], bf16, symmetric>, !mk.tensor<[256, 512], bf16, symmetric>, !mk.tensor<[4], i32, symmetric>
      mk.signal @received[%c0] at node %c1 via rdma_proxy
      mk.send_rows %census[%c1] -> %census[%c1] at gpu %c0 via nvlink_store : !mk.tensor<[2, 8], i32, symmetric>, !mk.tensor<[2, 8], i32, symmetric>
    }
    mk.route_rows %pack, %pe, %census into %routed, %origins, %slots arrivals @arrived from node %c1 count %n[%c1] : !mk.tensor<[256, 512], bf16, symmetric>, !mk.tensor<[256, 4], i32, symmetric>, !mk.tensor<[2, 8], i32, symmetric>, !mk.tensor<[8, 256, 512], bf16, shard 0 over world>, !mk.tensor<[8, 256], i32, shard 0 over world>, !mk.tensor<[512, 4], i32, symmetric>, !mk.tensor<[4], i32, symmetric>
  }
  mk.role compute ctas 130 {
    mk.tile_grid (%t, %c) over %y tiles [128, 256] : !mk.tensor<[256, 512], bf16, shard 0 over world> {
      mk.combine_returned %back, %at, %w into %y[%t, %c] tile [128, 256] at %at : !mk.tensor<[2048, 1, 512], bf16, symmetric>, !mk.tensor<[256, 4], i32, shard 0 over world>, !mk.tensor<[256, 4], f32, shard 0 over world>, !mk.tensor<[256, 512], bf16, shard 0 over world>, !mk.tensor<[256, 4], i32, shard 0 over world>
    }
  }
}

// -----

// Across nodes, a copy through the proxy followed by a signal to the same node becomes one
// command, the signal's flag riding on the put; a signal to another node, or one that does not
// follow a copy, stays a command of its own.
// CHECK-LABEL: emitc.func @network
// CHECK: call_opaque "mk::remote_put"
// CHECK-NOT: "MK_NO_FLAG"
// CHECK-NOT: call_opaque "mk::signal_node"
// CHECK: call_opaque "mk::remote_put"{{.*}}#emitc.opaque<"MK_NO_FLAG">
// CHECK-NEXT: call_opaque "mk::signal_node"
mk.program @network [] mesh <3x1> (%x: !mk.tensor<[256, 256], bf16, replicated>) grid 132 {
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    mk.flags @arrived [2, 1]
    %s = mk.buffer : !mk.tensor<[3, 256, 256], bf16, symmetric>
    mk.role compute ctas 132 {
      mk.tile_grid (%m, %n) over %x tiles [128, 256] : !mk.tensor<[256, 256], bf16, replicated> {
        %node, %gpu = mk.place : index, index
        mk.copy %s[%node, %m, %n] -> %s[%node, %m, %n] at node %c1 via rdma_proxy tile [128, 256] : !mk.tensor<[3, 256, 256], bf16, symmetric>, !mk.tensor<[3, 256, 256], bf16, symmetric>
        mk.signal @arrived[%m, %n] at node %c1 via rdma_proxy
        mk.copy %s[%node, %m, %n] -> %s[%node, %m, %n] at node %c1 via rdma_proxy tile [128, 256] : !mk.tensor<[3, 256, 256], bf16, symmetric>, !mk.tensor<[3, 256, 256], bf16, symmetric>
        mk.signal @arrived[%m, %n] at node %c2 via rdma_proxy
      }
    }
}

// -----

// GEMM + all-reduce in place on 1 x 2 (mk-expand-collectives): one engine role. Each GPU's own
// rows come first (rotated by the GPU's slice); a first writer stages the tile once and stores it
// to both GPUs, then raises the tile's flag on the other; the other waits for that flag and adds
// its tile into both copies. The stores name the tensor's peer mappings, its row pitch (1024) and
// the tile's valid rows and columns: whole tiles reach the peers through the engine's senders.
// Flags after the engine's stores are held back until the stores land, and waits raise them first.
// The waits in the tile loop (the launch, the first writer's flag) guard only the engine's stores
// and signals: the senders wait, in order, while the consumers go on; after the loop, the
// consumers themselves wait for every tile of the output.
// CHECK-LABEL: emitc.func @gemm_allreduce
// CHECK: %[[ENGINE:.+]] = call_opaque "mk::GemmEngine<mk::GemmConfig<mk::bf16, 256, mk::gemm_max_stages<mk::bf16, 256, 4, 128>(), false, 4, 2, 128>>"()
// CHECK: call_opaque "mk::gemm_load"(%[[ENGINE]]
// CHECK: %[[ACC:.+]] = call_opaque "mk::gemm_mma"(%[[ENGINE]])
// CHECK: call_opaque "mk::gemm_consumer_defer_arrivals"(%[[ENGINE]]
// CHECK: if
// CHECK: %[[REF:.+]] = call_opaque "mk::tensor_ref"
// CHECK: call_opaque "mk::gemm_store_gpus"(%[[ENGINE]], %[[ACC]], %{{.*}}, %{{.*}}, %[[REF]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) {args = [0 : index, 1 : index, 2 : index, 3 : index, #emitc.opaque<"1">, #emitc.opaque<"3">, #emitc.opaque<"2">, 4 : index, 5 : index, 6 : index, 7 : index, 8 : index, 9 : index, 10 : index]
// CHECK: call_opaque "mk::gemm_signal_gpu"(%[[ENGINE]]
// CHECK: } else {
// CHECK: call_opaque "mk::gemm_consumer_defer_arrivals"(%[[ENGINE]]
// CHECK: %[[REF2:.+]] = call_opaque "mk::tensor_ref"
// CHECK: call_opaque "mk::gemm_store_add_gpus"(%[[ENGINE]], %[[ACC]], %{{.*}}, %{{.*}}, %[[REF2]]
// CHECK: {{^ +}}for %
// CHECK: call_opaque "mk::gemm_signal_gpu"(%[[ENGINE]]
// CHECK: call_opaque "mk::gemm_consumer_wait_arrivals"(%[[ENGINE]]
// CHECK: call_opaque "mk::gemm_finish"(%[[ENGINE]])
// CHECK-NOT: TmaReduce
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

// A tensor sharded along a leading dim (the experts of a [E, C, H] buffer): the index counts from
// the rank's shard, as along a tile's dims. The tile loop steps by the CTAs the launch gives the
// role.
// CHECK-LABEL: emitc.func @leading_shard
// CHECK: %[[CTAS:.+]] = call_opaque "mk::role_ctas"(%arg0) {args = [0 : index, #emitc.opaque<"0">]}
// CHECK: for %{{.+}} = %{{.+}} to %{{.+}} step %[[CTAS]]
// CHECK: %[[EXPERT:.+]] = sub %{{.*}}, %{{.*}} : (!emitc.size_t, !emitc.size_t) -> !emitc.size_t
// CHECK-NEXT: %[[OFFSET:.+]] = mul %[[EXPERT]], %{{.*}} : (!emitc.size_t, !emitc.size_t) -> !emitc.size_t
// CHECK: call_opaque "mk::at"(%{{.*}}, %[[OFFSET]])
// CHECK: call_opaque "mk::load_tile"
!E = !mk.tensor<[8, 128, 256], bf16, shard 0 over world>
mk.program @leading_shard [] mesh <1x2> (%x: !E, %y: !E) grid 132 {
  mk.role compute ctas 132 {
    mk.tile_grid (%e, %t, %n) over %y tiles [1, 128, 256] : !E {
      %v = mk.load %x[%e, %t, %n] : !E -> !mk.tile<[128, 256], bf16>
      mk.store %v, %y[%e, %t, %n] : !mk.tile<[128, 256], bf16>, !E
    }
  }
}

// -----

// MoE on one node (1 x 2), planned and lowered: each expert grid walks the tiles within the row
// counts (mk::GroupedWalk over them), a position past the walk's end naming no tile; the producer
// loads each expert's operands at its group, after waiting for the rows of every dispatch CTA on
// every rank (2 x the dispatch role's CTAs over the launches through this one: the split may change
// between launches); the hidden tiles' stamps go to the senders, which are flushed as each tile
// loop ends; rows go back to their tokens through the senders; the tokens' sums wait for every
// compute CTA on every rank (2 x the compute role's, likewise).
// The dispatch role's census, counts and rows are one call each.
// CHECK-LABEL: emitc.func @moe_one_node
// CHECK: call_opaque "mk::grouped_walk"({{.*}}) {args = [0 : index, #emitc.opaque<"2">, #emitc.opaque<"256">, #emitc.opaque<"128">, #emitc.opaque<"2">, #emitc.opaque<"2">]}
// CHECK: call_opaque "mk::grouped_positions"
// CHECK: call_opaque "mk::grouped_tile"
// CHECK: %[[WITHIN:.*]] = call_opaque "mk::tile_within"
// CHECK: if %[[WITHIN]] {
// CHECK: %[[DISPATCH:.+]] = call_opaque "mk::role_ctas_through"(%arg0) {args = [0 : index, #emitc.opaque<"1">]}
// CHECK: %[[FROM_DISPATCH:.+]] = mul %{{.+}}, %[[DISPATCH]]
// CHECK: call_opaque "mk::gemm_wait_arrivals"(%{{.+}}, %arg0, %{{.+}}, %[[FROM_DISPATCH]]) {args = [0 : index, 1 : index, 2 : index, 3 : index]}
// CHECK: call_opaque "mk::gemm_load_grouped"
// CHECK: call_opaque "mk::gemm_stamp_local"
// CHECK: call_opaque "mk::gemm_flush_signals"
// CHECK: call_opaque "mk::gemm_store_rows"
// CHECK: call_opaque "mk::gemm_flush_signals"
// CHECK: call_opaque "mk::gemm_signal_gpu"
// CHECK: %[[COMPUTE:.+]] = call_opaque "mk::role_ctas_through"(%arg0) {args = [0 : index, #emitc.opaque<"0">]}
// CHECK: %[[FROM_COMPUTE:.+]] = mul %{{.+}}, %[[COMPUTE]]
// CHECK: call_opaque "mk::gemm_consumer_wait_arrivals"(%{{.+}}, %arg0, %{{.+}}, %[[FROM_COMPUTE]]) {args = [0 : index, 1 : index, 2 : index, 3 : index]}
// CHECK: call_opaque "mk::combine_returned"
// CHECK: call_opaque "mk::route_census"({{.*}}template_args = [#emitc.opaque<"4">]
// CHECK: call_opaque "mk::route_counts"
// CHECK: call_opaque "mk::flag_regions"
// CHECK: call_opaque "mk::route_rows"
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
