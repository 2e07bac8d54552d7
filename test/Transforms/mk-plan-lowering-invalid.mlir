// RUN: mk-opt %s -split-input-file -verify-diagnostics -mk-plan-lowering="gemm-cluster=2"
// RUN: not mk-opt %s -split-input-file -mk-plan-lowering="gemm-stages=99" 2>&1 | FileCheck %s --check-prefix=STAGES
// RUN: not mk-opt %s -split-input-file -mk-plan-lowering="gemm-cluster=3" 2>&1 | FileCheck %s --check-prefix=CLUSTER

// What mk-plan-lowering rejects.

// GEMM engine options out of bounds, on every program.
// STAGES: mk-plan-lowering-invalid.mlir:[[# @LINE + 5]]:1: error: gemm-stages=99: the GEMM engine's ring has 2 to 8 stages (the deepest fits shared memory only beside 128 x 64 tiles)
// CLUSTER: mk-plan-lowering-invalid.mlir:[[# @LINE + 4]]:1: error: gemm-cluster=3: the GEMM engine runs in clusters of 1 or 2 CTAs

// A program that was not scheduled is not planned either.
// expected-error @+1 {{@flat is not scheduled (run the mkc pipeline up to mk-insert-signals first)}}
mk.program @flat [] mesh <1x2> () {
}

// -----

// Clusters of 2 asked for, but the roles' CTAs do not pair up: a cluster would span both roles.
mk.program @odd_roles [M = 1024, N = 1024, K = 1024] mesh <1x1> (%a: !mk.tensor<[1024, 1024], bf16, replicated>, %b: !mk.tensor<[1024, 1024], bf16, replicated>, %c: !mk.tensor<[1024, 1024], bf16, replicated>) grid 132 {
  // expected-error @+1 {{the GEMM engine cannot run in clusters of 2 CTAs: a role has an odd number of CTAs}}
  mk.role compute ctas 131 {
    mk.tile_grid (%m, %n) over %c tiles [128, 256] order <swizzle 8> : !mk.tensor<[1024, 1024], bf16, replicated> {
      %p = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64 : i64} : !mk.tensor<[1024, 1024], bf16, replicated>, !mk.tensor<[1024, 1024], bf16, replicated> -> !mk.tile<[128, 256], f32>
      %t = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
      mk.store %t, %c[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[1024, 1024], bf16, replicated>
    }
  }
  mk.role intra_transfer ctas 1 {
  }
}

// -----

// Clusters of 2 asked for, on 64-row tiles: a cluster's CTAs each multiply 128 rows of A.
mk.program @rows_64 [] mesh <1x1> (%a: !mk.tensor<[128, 4096], bf16, replicated>, %b: !mk.tensor<[4096, 1024], bf16, replicated>, %c: !mk.tensor<[128, 1024], bf16, replicated>) grid 32 {
  // expected-error @+1 {{the GEMM engine cannot run in clusters of 2 CTAs: its tiles are 64 rows, one MMA warpgroup's, and a cluster's CTAs multiply 128}}
  mk.role compute ctas 32 {
    mk.tile_grid (%m, %n) over %c tiles [64, 128] order <swizzle 2> : !mk.tensor<[128, 1024], bf16, replicated> {
      %1 = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64 : i64} : !mk.tensor<[128, 4096], bf16, replicated>, !mk.tensor<[4096, 1024], bf16, replicated> -> !mk.tile<[64, 128], f32>
      %2 = mk.convert %1 : !mk.tile<[64, 128], f32> -> !mk.tile<[64, 128], bf16>
      mk.store %2, %c[%m, %n] : !mk.tile<[64, 128], bf16>, !mk.tensor<[128, 1024], bf16, replicated>
    }
  }
}

// -----

// Clusters of 2 asked for, but bands of odd rows put CTAs 2c and 2c + 1 in different columns.
mk.program @odd_band [M = 1024, N = 1024, K = 1024] mesh <1x1> (%a: !mk.tensor<[1024, 1024], bf16, replicated>, %b: !mk.tensor<[1024, 1024], bf16, replicated>, %c: !mk.tensor<[1024, 1024], bf16, replicated>) grid 132 {
  // expected-error @+1 {{the GEMM engine cannot run in clusters of 2 CTAs: the tile loop does not give CTAs 2c and 2c + 1 the two rows of a pair of tiles}}
  mk.role compute ctas 132 {
    mk.tile_grid (%m, %n) over %c tiles [128, 256] order <swizzle 3> : !mk.tensor<[1024, 1024], bf16, replicated> {
      %p = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64 : i64} : !mk.tensor<[1024, 1024], bf16, replicated>, !mk.tensor<[1024, 1024], bf16, replicated> -> !mk.tile<[128, 256], f32>
      %t = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
      mk.store %t, %c[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[1024, 1024], bf16, replicated>
    }
  }
}

// -----
