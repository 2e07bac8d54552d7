// RUN: mk-opt %s -split-input-file -verify-diagnostics -mk-insert-signals

// What mk-insert-signals rejects.

// expected-error @+1 {{@flat has no roles (run mk-expand-collectives first)}}
mk.program @flat [] mesh <1x2> () {
}

// -----

// Reads in tiles of another size than the writes: a flag per written tile cannot tell when the
// read tile is complete.
!A = !mk.tensor<[256, 64], bf16, shard 0 over world>
!G = !mk.tensor<[256, 64], bf16, symmetric>
mk.program @mismatch [] mesh <1x2> (%a: !A, %g: !G) grid 132 {
  mk.role intra_transfer ctas 1 {
    mk.tile_grid (%i, %k) over %a tiles [64, :] : !A {
      %me_node, %me = mk.place : index, index
      mk.copy %a[%i, :] -> %g[%i, :] at gpu %me via nvlink_bulk tile [64, 64] : !A, !G
    }
  }
  mk.role compute ctas 1 {
    mk.tile_grid (%i, %k) over %g tiles [128, :] : !G {
      // expected-error @+1 {{'mk.load' op accesses tiles of 128 along dim 0 of a tensor others write in tiles of 64; mkc orders transfers tile by tile, so both must match}}
      %t = mk.load %g[%i, :] : !G -> !mk.tile<[128, 64], bf16>
    }
  }
}
