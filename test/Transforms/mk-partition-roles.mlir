// RUN: mk-opt %s -split-input-file -mk-partition-roles | FileCheck %s
// RUN: mk-opt %s -split-input-file -mk-partition-roles="sm-split=compute=100,intra_reduce=20,republish=30,dispatch=2" | FileCheck %s --check-prefix=OVERRIDE
// RUN: mk-opt %s -split-input-file -mk-partition-roles="explain=true" 2>&1 >/dev/null | FileCheck %s --check-prefix=EXPLAIN
// RUN: not mk-opt %s -split-input-file -mk-partition-roles="explain=true sm-count=56 gpu-sm-count=132" 2>&1 >/dev/null | FileCheck %s --check-prefix=SHARE

// mk-partition-roles splits the SMs between the roles from a cost model (compute from matmul
// FLOPs, transfers from bytes per CTA, capped by link bandwidth) and sets the grid to what they
// take.

!A = !mk.tensor<[8192, 4096], bf16, shard 1 over world>
!B = !mk.tensor<[4096, 8192], bf16, shard 0 over world>
!C = !mk.tensor<[8192, 8192], bf16, replicated>
!S = !mk.tensor<[2, 8192, 8192], bf16, symmetric>

// GEMM + all-reduce on 1 x 2: 2048 tiles of 2 x 128 x 256 x 4096 FLOP (275 GFLOP) at 740 TFLOP/s,
// with their partials put to the owner, and reducing this GPU's 1024 tiles (2 slots read, the sum
// put to both GPUs: 403 MB through the CTAs at 36 GB/s each) balance at 110 and 22 CTAs, both
// near 0.51 ms. 108 compute CTAs walk the 2048 tiles in the same 19 rounds as 110, and the
// reduction is the faster role: the grid is 130.
// CHECK-LABEL: mk.program @gemm_allreduce
// CHECK-SAME: grid 130
// CHECK: mk.role compute ctas 108
// CHECK: mk.role intra_reduce ctas 22
// OVERRIDE-LABEL: mk.program @gemm_allreduce
// OVERRIDE: mk.role compute ctas 100
// OVERRIDE: mk.role intra_reduce ctas 20
// EXPLAIN: remark: SM split of @gemm_allreduce on 130 CTAs (of 132 SMs), from the cost model:
// EXPLAIN-NEXT: compute 108 CTAs: {{.*}} ms for 274.9 GFLOP
// EXPLAIN-NEXT: intra_reduce 22 CTAs: {{.*}} ms, {{.*}} MB through CTAs, {{.*}} MB over NVLink
// A grid with a share of the GPU (MPS: 56 of 132 SMs) computes at 56/132 of its rate, not all of
// it: compute takes 46 CTAs, where a 56-SM GPU's cost model would give it 40.
// SHARE: remark: SM split of @gemm_allreduce on 56 CTAs (of 56 SMs, a share of the GPU's 132), from the cost model:
// SHARE-NEXT: compute 46 CTAs: 1.228 ms for 274.9 GFLOP
// SHARE-NEXT: intra_reduce 10 CTAs
mk.program @gemm_allreduce [] mesh <1x2> (%a: !A, %b: !B, %c: !C) {
  %s = mk.buffer : !S
  %c2 = arith.constant 2 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  mk.role compute {
    mk.tile_grid (%m, %n) over %c tiles [128, 256] : !C {
      %acc = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64} : !A, !B -> !mk.tile<[128, 256], f32>
      %t = mk.convert %acc : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
      %node, %gpu = mk.owner %c[%m, %n] tile [128, 256] : !C
      %me_node, %me = mk.place : index, index
      mk.put %t, %s[%me, %m, %n] at gpu %gpu via nvlink_store : !mk.tile<[128, 256], bf16>, !S
    }
  }
  mk.role intra_reduce {
    mk.tile_grid (%m, %n) over %c tiles [128, 256] distribute gpus : !C {
      %sum = mk.accumulate sum %s[:, %m, %n] : !S -> !mk.tile<[128, 256], f32>
      %t = mk.convert %sum : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
      %node, %gpu = mk.place : index, index
      scf.for %o = %c1 to %c3 step %c1 {
        %g = arith.remsi %o, %c2 : index
        mk.put %t, %c[%m, %n] at gpu %g via nvlink_store : !mk.tile<[128, 256], bf16>, !C
      }
    }
  }
}

// -----

// An author's split, as an attribute of the program, wins over the cost model.
// CHECK-LABEL: mk.program @author
// CHECK: mk.role compute ctas 96
// CHECK: mk.role republish ctas 36
// OVERRIDE-LABEL: mk.program @author
// OVERRIDE: mk.role compute ctas 100
// OVERRIDE: mk.role republish ctas 30
// A grid with a share of the GPU has fewer CTAs than the author's split asks for.
// SHARE: mk-partition-roles.mlir:[[# @LINE + 1]]:1: error: the sm split needs 132 CTAs, but the grid has 56
mk.program @author [] mesh <1x2> () attributes {mk.sm_split = {compute = 96, republish = 36}} {
  mk.role compute {
  }
  mk.role republish {
  }
}

// -----

!A = !mk.tensor<[8192, 4096], bf16, shard 1 over world>
!B = !mk.tensor<[4096, 8192], bf16, shard 0 over world>
!C = !mk.tensor<[8192, 8192], bf16, replicated>

// Compute alone (GEMM + all-reduce in place) takes the CTAs as far as they take rounds of tiles
// off it: its 2048 tiles take 16 rounds on 132 CTAs and on 128, so the grid is 128.
// CHECK-LABEL: mk.program @compute_alone
// CHECK-SAME: grid 128
// CHECK: mk.role compute ctas 128
// EXPLAIN: remark: SM split of @compute_alone on 128 CTAs (of 132 SMs), from the cost model:
// EXPLAIN-NEXT: compute 128 CTAs
mk.program @compute_alone [] mesh <1x2> (%a: !A, %b: !B, %c: !C) {
  mk.role compute {
    mk.tile_grid (%m, %n) over %c tiles [128, 256] : !C {
      %acc = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64} : !A, !B -> !mk.tile<[128, 256], f32>
      %t = mk.convert %acc : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
      mk.store %t, %c[%m, %n] : !mk.tile<[128, 256], bf16>, !C
    }
  }
}

// -----

// A tile count the pass cannot know (an unbound shape symbol) leaves compute every spare CTA.
// CHECK-LABEL: mk.program @unknown_tiles
// CHECK-SAME: grid 132
// CHECK: mk.role compute ctas 132
mk.program @unknown_tiles [M] mesh <1x2> (%a: !mk.tensor<[M, 4096], bf16, shard 1 over world>,
    %b: !mk.tensor<[4096, 8192], bf16, shard 0 over world>,
    %c: !mk.tensor<[M, 8192], bf16, replicated>) {
  mk.role compute {
    mk.tile_grid (%m, %n) over %c tiles [128, 256] : !mk.tensor<[M, 8192], bf16, replicated> {
      %acc = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64} : !mk.tensor<[M, 4096], bf16, shard 1 over world>, !mk.tensor<[4096, 8192], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
    }
  }
}

// -----

!X = !mk.tensor<[4096, 4096], bf16, shard 0 over world>
!K = !mk.tensor<[4096, 2], i32, shard 0 over world>
!W = !mk.tensor<[8, 4096, 14336], bf16, shard 0 over world>
!Wd = !mk.tensor<[8, 14336, 4096], bf16, shard 0 over world>
!Census = !mk.tensor<[1, 8], i32, symmetric>
!Counts = !mk.tensor<[8], i32, shard 0 over world>
!Routed = !mk.tensor<[8, 4096, 4096], bf16, shard 0 over world>
!H = !mk.tensor<[8, 4096, 14336], bf16, shard 0 over world>

// Mixtral's experts at 4096 tokens, top-2: one dispatch CTA would move the 134 MB of rows in
// about as long as the compute takes (3.7 and 4.0 ms), but the compute's tiles of an expert wait
// for its rows, which arrive expert by expert: with one CTA the first expert's take 0.47 ms, with
// 4 0.12 ms, worth the 3 compute CTAs.
// CHECK-LABEL: mk.program @pipelined
// CHECK-SAME: grid 132
// CHECK: mk.role compute ctas 128
// CHECK: mk.role dispatch ctas 4
// OVERRIDE-LABEL: mk.program @pipelined
// OVERRIDE: mk.role compute ctas 100
// OVERRIDE: mk.role dispatch ctas 2
// EXPLAIN: compute 128 CTAs: {{.*}} ms for 2886.2 GFLOP
// EXPLAIN-NEXT: dispatch 4 CTAs: {{.*}} ms, 134.2 MB through CTAs
// EXPLAIN-NEXT: compute's last tile at {{.*}} ms: dispatch hands it 8 pieces in order
mk.program @pipelined [] mesh <1x1> (%x: !X, %experts: !K, %wg: !W, %wu: !W, %wd: !Wd) {
  %c0 = arith.constant 0 : index
  mk.flags @arrived [8]
  %census = mk.buffer : !Census
  %counts = mk.buffer : !Counts
  %routed = mk.buffer : !Routed
  %origins = mk.buffer : !mk.tensor<[8, 4096], i32, shard 0 over world>
  %placement = mk.buffer : !K
  %h = mk.buffer : !H
  mk.role compute {
    mk.tile_grid (%e, %t, %n) over %h tiles [1, 128, 128] rows %counts masked : !H, !Counts {
      mk.wait @arrived[%e] count 1 per_cta_of dispatch
      %gate = mk.matmul %routed[%e, %t, :], %wg[%e, :, %n] {k_tile = 64} : !Routed, !W -> !mk.tile<[128, 128], f32>
      %up = mk.matmul %routed[%e, %t, :], %wu[%e, :, %n] {k_tile = 64} : !Routed, !W -> !mk.tile<[128, 128], f32>
      %act = mk.swiglu %gate, %up : !mk.tile<[128, 128], f32>
      %act_bf16 = mk.convert %act : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
      mk.store %act_bf16, %h[%e, %t, %n] : !mk.tile<[128, 128], bf16>, !H
    }
    mk.tile_grid (%e, %t, %n) over %routed tiles [1, 128, 256] rows %counts masked : !Routed, !Counts {
      %y = mk.matmul %h[%e, %t, :], %wd[%e, :, %n] {k_tile = 64} : !H, !Wd -> !mk.tile<[128, 256], f32>
      %y_bf16 = mk.convert %y : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
      mk.store %y_bf16, %routed[%e, %t, %n] : !mk.tile<[128, 256], bf16>, !Routed
    }
  }
  mk.role dispatch {
    mk.single_cta {
      mk.route_census %experts into %census : !K, !Census
    }
    mk.single_cta {
      mk.route_counts %census into %counts capacity 4096 : !Census, !Counts
    }
    mk.route_rows %x, %experts, %census into %routed, %origins, %placement arrivals @arrived : !X, !K, !Census, !Routed, !mk.tensor<[8, 4096], i32, shard 0 over world>, !K
  }
}
