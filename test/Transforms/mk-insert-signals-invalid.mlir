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

// -----

// Peers put into a sharded output: a rank receives only part of it, and which part is not what
// its grid says.
!S = !mk.tensor<[256, 256], bf16, shard 0 over world>
mk.program @sharded_output [] mesh <1x2> (%c: !S) grid 132 {
  mk.role intra_reduce ctas 1 {
    mk.tile_grid (%i, %j) over %c tiles [128, 256] : !S {
      %zero = arith.constant 0.0 : bf16
      %t = mk.splat %zero : bf16 -> !mk.tile<[128, 256], bf16>
      %me_node, %me = mk.place : index, index
      // expected-error @+1 {{'mk.put' op writes into argument #0 on other ranks, which is not replicated; mkc awaits the tiles peers write only in replicated outputs, which every rank receives whole}}
      mk.put %t, %c[%i, %j] at gpu %me via nvlink_store : !mk.tile<[128, 256], bf16>, !S
    }
  }
}

// -----

// Peers put into tiles the grid computes: the waits for them cannot name them.
!R = !mk.tensor<[256, 256], bf16, replicated>
mk.program @computed_tile [] mesh <1x2> (%c: !R) grid 132 {
  mk.role intra_reduce ctas 1 {
    mk.tile_grid (%i, %j) over %c tiles [128, 256] : !R {
      %zero = arith.constant 0.0 : bf16
      %t = mk.splat %zero : bf16 -> !mk.tile<[128, 256], bf16>
      %me_node, %me = mk.place : index, index
      %one = arith.constant 1 : index
      %next = arith.subi %one, %i : index
      // expected-error @+1 {{'mk.put' op writes into argument #0 at a tile computed inside its grid; mkc awaits the tiles peers write only where the grid's own coordinates name them}}
      mk.put %t, %c[%next, %j] at gpu %me via nvlink_store : !mk.tile<[128, 256], bf16>, !R
    }
  }
}
