// RUN: mk-opt %s -split-input-file -verify-diagnostics -mk-tile-and-order="gemm-tile-n=256"
// RUN: not mk-opt %s -split-input-file -mk-tile-and-order="sm-count=0" 2>&1 | FileCheck %s --check-prefix=SM-COUNT
// RUN: not mk-opt %s -split-input-file -mk-tile-and-order="sm-count=1025" 2>&1 | FileCheck %s --check-prefix=SM-COUNT-HIGH
// RUN: not mk-opt %s -split-input-file -mk-tile-and-order="gemm-tile-m=96" 2>&1 | FileCheck %s --check-prefix=TILE-M
// RUN: not mk-opt %s -split-input-file -mk-tile-and-order="gemm-k-splits=9" 2>&1 | FileCheck %s --check-prefix=K-SPLITS
// RUN: not mk-opt %s -split-input-file -mk-tile-and-order="gemm-k-splits=2" 2>&1 | FileCheck %s --check-prefix=K-SPLITS-SHORT

// What mk-tile-and-order rejects.

// An sm-count that no GPU has, on every program.
// SM-COUNT: mk-tile-and-order-invalid.mlir:[[# @LINE + 4]]:1: error: sm-count=0: the persistent grid has 1 to 1024 CTAs, one per SM (an H200 has 132)
// SM-COUNT-HIGH: mk-tile-and-order-invalid.mlir:[[# @LINE + 3]]:1: error: sm-count=1025: the persistent grid has 1 to 1024 CTAs, one per SM (an H200 has 132)

// A program not specialized yet.
mk.program @unbound [K] mesh <?x?> (%a: !mk.tensor<[128, K], bf16, shard 1 over world>, %b: !mk.tensor<[K, 128], bf16, shard 0 over world>, %c: !mk.tensor<[128, 128], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[128, 128], bf16, replicated> {
    // expected-error @+1 {{'mk.matmul' op needs a specialized program (run mk-specialize first)}}
    %acc = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[128, K], bf16, shard 1 over world>, !mk.tensor<[K, 128], bf16, shard 0 over world> -> !mk.tile<[128, 128], f32>
  }
}

// -----

// gemm-tile-n=256 on a grid of 128-wide tiles: wider tiles than the program masks for. A
// gemm-tile-m the engine has no tiles of; more parts of K than the engine splits a tile in, or
// than the tile's K has blocks.
// TILE-M: mk-tile-and-order-invalid.mlir:[[# @LINE + 3]]:1: error: gemm-tile-m=96: the GEMM engine's tiles are 64 or 128 rows
// K-SPLITS: mk-tile-and-order-invalid.mlir:[[# @LINE + 2]]:1: error: gemm-k-splits=9: the GEMM engine splits a tile's K in 1 to 8 parts (0: as the cost model finds fastest)
// K-SPLITS-SHORT: mk-tile-and-order-invalid.mlir:[[# @LINE + 3]]:3: error: 'mk.tile_grid' op contracts 64 elements: 1 of the engine's 64-deep blocks, fewer than the 2 parts of gemm-k-splits=2
mk.program @widen [] mesh <1x1> (%a: !mk.tensor<[128, 64], bf16, replicated>, %b: !mk.tensor<[64, 128], bf16, replicated>, %c: !mk.tensor<[128, 128], bf16, replicated>) {
  // expected-error @+1 {{'mk.tile_grid' op has tiles 128 columns wide; gemm-tile-n=256 would widen them past what the program masks}}
  mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[128, 128], bf16, replicated> {
    %acc = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[128, 64], bf16, replicated>, !mk.tensor<[64, 128], bf16, replicated> -> !mk.tile<[128, 128], f32>
  }
}
