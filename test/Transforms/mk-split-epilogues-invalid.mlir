// RUN: mk-opt %s -split-input-file -verify-diagnostics -mk-split-epilogues

!R = !mk.tensor<[256, 256], bf16, replicated>
!T = !mk.tile<[128, 128], bf16>
mk.program @other_coordinates [] mesh <1x2> (%x: !R, %y: !R) {
  mk.tile_grid (%m, %n) over %y tiles [128, 128] : !R {
    %t = mk.load %x[%m, %n] : !R -> !T
    // expected-error @+1 {{'mk.all_reduce' op gives its combined tile to the rest of the body, so it must store at the grid's own tile coordinates, in the order of the grid's}}
    %s = mk.all_reduce sum %t into %y[%n, %m] : !T, !R -> !T
    mk.store %s, %x[%m, %n] : !T, !R
  }
}

// -----

!R = !mk.tensor<[256, 256], bf16, replicated>
!T = !mk.tile<[64, 128], bf16>
mk.program @other_tile [] mesh <1x2> (%x: !R, %y: !R) {
  mk.tile_grid (%m, %n) over %y tiles [128, 128] : !R {
    %t = mk.load %x[%m, %n] : !R -> !T
    // expected-error @+1 {{must combine the grid's own tile (of its tile sizes)}}
    %s = mk.all_reduce sum %t into %y[%m, %n] : !T, !R -> !T
    mk.store %s, %x[%m, %n] : !T, !R
  }
}

// -----

!R = !mk.tensor<[256, 256], bf16, replicated>
!T = !mk.tile<[128, 128], bf16>
mk.program @nested [] mesh <1x2> (%x: !R, %y: !R) {
  mk.tile_grid (%m, %n) over %y tiles [128, 128] : !R {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    scf.for %i = %c0 to %c1 step %c1 {
      %t = mk.load %x[%m, %n] : !R -> !T
      // expected-error @+1 {{must be directly in the body of a tile grid of the program}}
      %s = mk.all_reduce sum %t into %y[%m, %n] : !T, !R -> !T
      mk.store %s, %x[%m, %n] : !T, !R
    }
  }
}

// -----

!R = !mk.tensor<[256, 256], bf16, replicated>
!T = !mk.tile<[128, 128], bf16>
mk.program @needs_a_write [] mesh <1x2> (%x: !R, %y: !R, %z: !R) {
  mk.tile_grid (%m, %n) over %y tiles [128, 128] : !R {
    %t = mk.load %x[%m, %n] : !R -> !T
    // expected-error @+1 {{'scf.for' op writes memory, and the epilogue of a collective's combined tile needs its result: compute it after}}
    %u = scf.for %i = %m to %n step %n iter_args(%a = %t) -> (!T) {
      mk.store %a, %z[%m, %n] : !T, !R
      scf.yield %a : !T
    }
    // expected-note @+1 {{the collective}}
    %s = mk.all_reduce sum %t into %y[%m, %n] : !T, !R -> !T
    %v = mk.add %s, %u : !T
    mk.store %v, %x[%m, %n] : !T, !R
  }
}
