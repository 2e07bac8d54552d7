// RUN: mk-opt %s -split-input-file -verify-diagnostics -mk-tile-and-order="gemm-tile-n=256"

// What mk-tile-and-order rejects.

// A contracted extent that no mma depth divides.
mk.program @odd [] mesh <1x1> (%a: !mk.tensor<[128, 40], bf16, replicated>, %b: !mk.tensor<[40, 128], bf16, replicated>, %c: !mk.tensor<[128, 128], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[128, 128], bf16, replicated> {
    // expected-error @+1 {{'mk.matmul' op contracts a local extent of 40, which is not a multiple of 16}}
    %acc = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[128, 40], bf16, replicated>, !mk.tensor<[40, 128], bf16, replicated> -> !mk.tile<[128, 128], f32>
  }
}

// -----

// A program not specialized yet.
mk.program @unbound [K] mesh <?x?> (%a: !mk.tensor<[128, K], bf16, shard 1 over world>, %b: !mk.tensor<[K, 128], bf16, shard 0 over world>, %c: !mk.tensor<[128, 128], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[128, 128], bf16, replicated> {
    // expected-error @+1 {{'mk.matmul' op needs a specialized program (run mk-specialize first)}}
    %acc = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[128, K], bf16, shard 1 over world>, !mk.tensor<[K, 128], bf16, shard 0 over world> -> !mk.tile<[128, 128], f32>
  }
}

// -----

// gemm-tile-n=256 on a grid of 128-wide tiles: wider tiles than the program masks for.
mk.program @widen [] mesh <1x1> (%a: !mk.tensor<[128, 64], bf16, replicated>, %b: !mk.tensor<[64, 128], bf16, replicated>, %c: !mk.tensor<[128, 128], bf16, replicated>) {
  // expected-error @+1 {{'mk.tile_grid' op has tiles 128 columns wide; gemm-tile-n=256 would widen them past what the program masks}}
  mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[128, 128], bf16, replicated> {
    %acc = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[128, 64], bf16, replicated>, !mk.tensor<[64, 128], bf16, replicated> -> !mk.tile<[128, 128], f32>
  }
}
