// RUN: mk-opt %s -split-input-file -mk-tile-and-order="gemm-k-splits=0" | FileCheck %s
// RUN: mk-opt %s -split-input-file -mk-tile-and-order="gemm-tile-n=128" | FileCheck %s --check-prefix=NARROW
// RUN: mk-opt %s -split-input-file -mk-tile-and-order="gemm-tile-m=128" | FileCheck %s --check-prefix=ROWS128
// RUN: mk-opt %s -split-input-file -mk-tile-and-order | FileCheck %s --check-prefix=UNSPLIT
// RUN: mk-opt %s -split-input-file -mk-tile-and-order="gemm-k-splits=4" | FileCheck %s --check-prefix=SPLIT4

// mk-tile-and-order picks the main-loop depth of matmuls, the chunks of all-gathers and the
// order of tile grids that do not have one. CHECK is with the model's splits of K
// (gemm-k-splits=0), UNSPLIT the default (none).

// A GEMM grid is swizzled in bands of 8 tile rows; 16-bit operands get k_tile 64 (128-byte rows).
// CHECK-LABEL: mk.program @swizzle
// CHECK: mk.tile_grid {{.*}} order <swizzle 8> :
// CHECK: mk.matmul {{.*}} {k_tile = 64 : i64}
mk.program @swizzle [] mesh <1x2> (%a: !mk.tensor<[4096, 4096], bf16, shard 1 over world>,
                                   %b: !mk.tensor<[4096, 4096], bf16, shard 0 over world>,
                                   %c: !mk.tensor<[4096, 4096], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] : !mk.tensor<[4096, 4096], bf16, replicated> {
    %acc = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[4096, 4096], bf16, shard 1 over world>, !mk.tensor<[4096, 4096], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
  }
}

// -----

// With fewer tile rows than a band, the band is the whole grid; f32 operands get k_tile 32; a
// local contracted extent of 48, which no depth of 32 or more divides, keeps 64 with a last step
// zero-filled past the extent, as one of 40 does.
// CHECK-LABEL: mk.program @small
// CHECK: mk.tile_grid {{.*}} order <swizzle 2> :
// CHECK: mk.matmul {{.*}} {k_tile = 32 : i64}
// CHECK: mk.matmul {{.*}} {k_tile = 64 : i64}
// CHECK: mk.matmul {{.*}} {k_tile = 64 : i64}
mk.program @small [] mesh <1x2> (%a: !mk.tensor<[256, 64], f32, replicated>,
                                 %b: !mk.tensor<[64, 256], f32, replicated>,
                                 %a2: !mk.tensor<[256, 96], bf16, shard 1 over world>,
                                 %b2: !mk.tensor<[96, 256], bf16, shard 0 over world>,
                                 %a3: !mk.tensor<[256, 40], bf16, replicated>,
                                 %b3: !mk.tensor<[40, 256], bf16, replicated>,
                                 %c: !mk.tensor<[256, 256], f32, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[256, 256], f32, replicated> {
    %acc = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[256, 64], f32, replicated>, !mk.tensor<[64, 256], f32, replicated> -> !mk.tile<[128, 128], f32>
    %acc2 = mk.matmul %a2[%m, :], %b2[:, %n] : !mk.tensor<[256, 96], bf16, shard 1 over world>, !mk.tensor<[96, 256], bf16, shard 0 over world> -> !mk.tile<[128, 128], f32>
    %acc3 = mk.matmul %a3[%m, :], %b3[:, %n] : !mk.tensor<[256, 40], bf16, replicated>, !mk.tensor<[40, 256], bf16, replicated> -> !mk.tile<[128, 128], f32>
  }
}

// -----

// A grid reading what an all-gather brings in produces its local rows first; the gather is
// tracked in chunks of the consumer's tile rows (64: 2048 x 256 a rank is 16 tiles of 128 x 256,
// 64 of 128 x 64, all one round, and 128 of 64 x 64) by the whole contracted dim.
// CHECK-LABEL: mk.program @gathered
// CHECK: mk.all_gather %{{.*}} {chunk = array<i64: 64, 1024>}
// CHECK: mk.tile_grid {{.*}} tiles [64, 64] order <swizzle 8, local_first> :
mk.program @gathered [] mesh <1x2> (%a: !mk.tensor<[2048, 1024], bf16, shard 0 over world>,
                                    %b: !mk.tensor<[1024, 512], bf16, shard 1 over world>,
                                    %c: !mk.tensor<[2048, 512], bf16, shard 1 over world>) {
  %g = mk.all_gather %a : !mk.tensor<[2048, 1024], bf16, shard 0 over world> -> !mk.tensor<[2048, 1024], bf16, replicated>
  mk.tile_grid (%m, %n) over %c tiles [128, 256] : !mk.tensor<[2048, 512], bf16, shard 1 over world> {
    %acc = mk.matmul %g[%m, :], %b[:, %n] : !mk.tensor<[2048, 1024], bf16, replicated>, !mk.tensor<[1024, 512], bf16, shard 1 over world> -> !mk.tile<[128, 256], f32>
  }
}

// -----

// A grid without matmuls is row-major; an order the author gave is kept.
// CHECK-LABEL: mk.program @kept
// CHECK: mk.tile_grid {{.*}} order <row_major> :
// CHECK: mk.tile_grid {{.*}} order <column_major> :
mk.program @kept [] mesh <1x2> (%c: !mk.tensor<[256, 256], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[256, 256], bf16, replicated> {
  }
  mk.tile_grid (%m, %n) over %c tiles [128, 128] order <column_major> : !mk.tensor<[256, 256], bf16, replicated> {
  }
}


// -----

// The GEMM engine's tiles take the width that takes the least time over the grid's 132 CTAs,
// rounds of tiles times a tile's time (a 128 x 128 tile takes 0.54 of a 128 x 256, a 128 x 64
// 0.30): 1024 x 2048 in 128 x 256 tiles is 64 tiles, one round; in 128 x 128 tiles, 128, one
// round of shorter tiles; in 128 x 64 tiles, 256, two rounds. The grid's tile sizes and its tile
// values change together.
// CHECK-LABEL: mk.program @narrow
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [128, 128] order <swizzle 8> :
// CHECK: mk.matmul {{.*}} -> !mk.tile<[128, 128], f32>
// CHECK: mk.convert {{.*}} : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
// CHECK: mk.all_reduce sum {{.*}} : !mk.tile<[128, 128], bf16>
mk.program @narrow [] mesh <1x2> (%a: !mk.tensor<[1024, 1024], bf16, shard 1 over world>,
                                  %b: !mk.tensor<[1024, 2048], bf16, shard 0 over world>,
                                  %c: !mk.tensor<[1024, 2048], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] : !mk.tensor<[1024, 2048], bf16, replicated> {
    %p = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[1024, 1024], bf16, shard 1 over world>, !mk.tensor<[1024, 2048], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
    %t = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %t into %c[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[1024, 2048], bf16, replicated>
  }
}

// -----

// Decode's GEMM, one token: 1 x 4096 is 16 tiles of 128 x 256, 32 of 128 x 128 or 64 of
// 128 x 64, all one round: the narrowest puts the most SMs on streaming B. 64-row tiles would
// be as many: the engine loads only A's rows of a 128-row tile.
// CHECK-LABEL: mk.program @decode
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [128, 64] order <swizzle 1> masked :
// CHECK: mk.matmul {{.*}} -> !mk.tile<[128, 64], f32>
mk.program @decode [] mesh <1x2> (%a: !mk.tensor<[1, 8192], bf16, shard 1 over world>,
                                  %b: !mk.tensor<[8192, 4096], bf16, shard 0 over world>,
                                  %c: !mk.tensor<[1, 4096], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] masked : !mk.tensor<[1, 4096], bf16, replicated> {
    %p = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[1, 8192], bf16, shard 1 over world>, !mk.tensor<[8192, 4096], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
    %t = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %t into %c[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[1, 4096], bf16, replicated>
  }
}

// -----

// Decode's GEMM at 128 tokens: 128 x 4096 is 64 tiles of 128 x 64, one round of half the SMs,
// or 128 of 64 x 64, one round of one MMA warpgroup's rows (two thirds of the bytes a CTA
// loads), or 64 tiles of 128 x 64 in two parts of K each, 128 parts that each load A's 128 rows
// and B's 64 columns over half of K (half the bytes of 64 x 64's, and 32 KiB of f32 product
// written). gemm-tile-m=128 keeps 128 rows; by default (gemm-k-splits=1) no K is split.
// CHECK-LABEL: mk.program @decode_rows
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [128, 64] order <swizzle 1> masked :
// CHECK: mk.matmul {{.*}} {k_splits = 2 : i64, k_tile = 64 : i64} {{.*}} -> !mk.tile<[128, 64], f32>
// UNSPLIT-LABEL: mk.program @decode_rows
// UNSPLIT: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [64, 64] order <swizzle 2> masked :
// UNSPLIT: mk.matmul {{.*}} {k_tile = 64 : i64} {{.*}} -> !mk.tile<[64, 64], f32>
// UNSPLIT: mk.convert {{.*}} -> !mk.tile<[64, 64], bf16>
// ROWS128-LABEL: mk.program @decode_rows
// ROWS128: tiles [128, 64]
mk.program @decode_rows [] mesh <1x2> (%a: !mk.tensor<[128, 8192], bf16, shard 1 over world>,
                                       %b: !mk.tensor<[8192, 4096], bf16, shard 0 over world>,
                                       %c: !mk.tensor<[128, 4096], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] masked : !mk.tensor<[128, 4096], bf16, replicated> {
    %p = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[128, 8192], bf16, shard 1 over world>, !mk.tensor<[8192, 4096], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
    %t = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %t into %c[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[128, 4096], bf16, replicated>
  }
}

// -----

// 8192 x 8192 is 2048 tiles of 128 x 256 in 16 rounds (1600), or 4096 of 128 x 128 in 32 (1728).
// gemm-tile-n=128 narrows them.
// CHECK-LABEL: mk.program @wide
// CHECK: tiles [128, 256]
// CHECK: -> !mk.tile<[128, 256], f32>
// NARROW-LABEL: mk.program @wide
// NARROW: tiles [128, 128]
// NARROW: -> !mk.tile<[128, 128], f32>
mk.program @wide [] mesh <1x2> (%a: !mk.tensor<[8192, 8192], bf16, shard 1 over world>,
                                %b: !mk.tensor<[8192, 8192], bf16, shard 0 over world>,
                                %c: !mk.tensor<[8192, 8192], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] : !mk.tensor<[8192, 8192], bf16, replicated> {
    %p = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[8192, 8192], bf16, shard 1 over world>, !mk.tensor<[8192, 8192], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
    %t = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %t into %c[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[8192, 8192], bf16, replicated>
  }
}

// -----

// 16384 x 8192 is 4096 tiles of 128 x 256 in 32 rounds (3200), or 8192 of 128 x 128 in 63 (3402):
// fewer columns of tile work, but more time (measured: 1.51 ms against 1.42 at K = 4096).
// CHECK-LABEL: mk.program @tall
// CHECK: tiles [128, 256]
mk.program @tall [] mesh <1x2> (%a: !mk.tensor<[16384, 8192], bf16, shard 1 over world>,
                                %b: !mk.tensor<[8192, 8192], bf16, shard 0 over world>,
                                %c: !mk.tensor<[16384, 8192], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] : !mk.tensor<[16384, 8192], bf16, replicated> {
    %p = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[16384, 8192], bf16, shard 1 over world>, !mk.tensor<[8192, 8192], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
    %t = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %t into %c[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[16384, 8192], bf16, replicated>
  }
}

// -----

// A width every reader and writer of a tensor agrees with: 128 x 1024 would take 128-column tiles
// (8 of them, one round), but another grid reads the buffer the GEMM writes in 256-column tiles,
// and mk-insert-signals orders them tile by tile, so the GEMM keeps 256.
// CHECK-LABEL: mk.program @pinned
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [128, 256] order <swizzle 1> :
// CHECK: mk.matmul {{.*}} -> !mk.tile<[128, 256], f32>
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [128, 256] order <row_major> :
mk.program @pinned [] mesh <1x2> (%a: !mk.tensor<[128, 512], bf16, shard 1 over world>,
                                  %b: !mk.tensor<[512, 1024], bf16, shard 0 over world>,
                                  %bias: !mk.tensor<[128, 1024], bf16, replicated>,
                                  %out: !mk.tensor<[128, 1024], bf16, replicated>) {
  %sum = mk.buffer : !mk.tensor<[128, 1024], bf16, replicated>
  mk.tile_grid (%m, %n) over %sum tiles [128, 256] : !mk.tensor<[128, 1024], bf16, replicated> {
    %p = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[128, 512], bf16, shard 1 over world>, !mk.tensor<[512, 1024], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
    %t = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %t into %sum[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[128, 1024], bf16, replicated>
  }
  mk.tile_grid (%m, %n) over %out tiles [128, 256] : !mk.tensor<[128, 1024], bf16, replicated> {
    %x = mk.load %sum[%m, %n] : !mk.tensor<[128, 1024], bf16, replicated> -> !mk.tile<[128, 256], bf16>
    %y = mk.load %bias[%m, %n] : !mk.tensor<[128, 1024], bf16, replicated> -> !mk.tile<[128, 256], bf16>
    %z = mk.add %x, %y : !mk.tile<[128, 256], bf16>
    mk.store %z, %out[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[128, 1024], bf16, replicated>
  }
}

// -----

// Tensors the program only reads pin no shape: the other grid reads B, the GEMM's operand, in
// 256-column tiles, and the GEMM still narrows (to 32 tiles of 64 x 64).
// CHECK-LABEL: mk.program @read_only
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [64, 64] order <swizzle 2> :
// CHECK: mk.matmul {{.*}} -> !mk.tile<[64, 64], f32>
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [128, 256] order <row_major> :
mk.program @read_only [] mesh <1x1> (%a: !mk.tensor<[128, 256], bf16, replicated>,
                                     %b: !mk.tensor<[256, 1024], bf16, replicated>,
                                     %c: !mk.tensor<[128, 1024], bf16, replicated>,
                                     %out: !mk.tensor<[128, 1024], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] : !mk.tensor<[128, 1024], bf16, replicated> {
    %p = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[128, 256], bf16, replicated>, !mk.tensor<[256, 1024], bf16, replicated> -> !mk.tile<[128, 256], f32>
    %t = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.store %t, %c[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[128, 1024], bf16, replicated>
  }
  mk.tile_grid (%m, %n) over %out tiles [128, 256] : !mk.tensor<[128, 1024], bf16, replicated> {
    %x = mk.load %b[%m, %n] : !mk.tensor<[256, 1024], bf16, replicated> -> !mk.tile<[128, 256], bf16>
    mk.store %x, %out[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[128, 1024], bf16, replicated>
  }
}

// -----

// Split-K: 256 x 4096 in tiles of 128 x 64 is one round of 128 tiles, each loading A's 128 rows
// over all of K beside 64 columns of B; 64 tiles of 128 x 128 in two parts of K each are as
// many CTAs loading a third less. K of 64 blocks also splits in 4 (gemm-k-splits=4: 32 tiles of
// 128 x 256), never below one block a part. Where the grid fills the GPU several times over,
// nothing is split.
// CHECK-LABEL: mk.program @split_k
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [128, 128] order <swizzle 2> masked :
// CHECK: mk.matmul {{.*}} {k_splits = 2 : i64, k_tile = 64 : i64}
// SPLIT4-LABEL: mk.program @split_k
// SPLIT4: tiles [128, 256]
// SPLIT4: mk.matmul {{.*}} {k_splits = 4 : i64, k_tile = 64 : i64}
// UNSPLIT-LABEL: mk.program @split_k
// UNSPLIT: tiles [128, 64]
// UNSPLIT: mk.matmul {{.*}} {k_tile = 64 : i64}
mk.program @split_k [] mesh <1x1> (%a: !mk.tensor<[256, 4096], bf16, replicated>,
                                   %b: !mk.tensor<[4096, 4096], bf16, replicated>,
                                   %c: !mk.tensor<[256, 4096], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] masked : !mk.tensor<[256, 4096], bf16, replicated> {
    %p = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[256, 4096], bf16, replicated>, !mk.tensor<[4096, 4096], bf16, replicated> -> !mk.tile<[128, 256], f32>
    %t = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.store %t, %c[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[256, 4096], bf16, replicated>
  }
}

// -----

// CHECK-LABEL: mk.program @split_k_large
// CHECK: tiles [128, 256]
// CHECK: mk.matmul {{.*}} {k_tile = 64 : i64}
mk.program @split_k_large [] mesh <1x1> (%a: !mk.tensor<[8192, 4096], bf16, replicated>,
                                         %b: !mk.tensor<[4096, 4096], bf16, replicated>,
                                         %c: !mk.tensor<[8192, 4096], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] masked : !mk.tensor<[8192, 4096], bf16, replicated> {
    %p = mk.matmul %a[%m, :], %b[:, %n] : !mk.tensor<[8192, 4096], bf16, replicated>, !mk.tensor<[4096, 4096], bf16, replicated> -> !mk.tile<[128, 256], f32>
    %t = mk.convert %p : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.store %t, %c[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[8192, 4096], bf16, replicated>
  }
}
