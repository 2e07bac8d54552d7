// RUN: mk-opt %s -split-input-file -verify-diagnostics -mk-expand-collectives

// What mk-expand-collectives rejects.

// expected-error @+1 {{@unbound is not specialized for a topology (run mk-specialize first)}}
mk.program @unbound [] mesh <?x?> () {
}

// -----

// expected-error @+1 {{@scheduled is already scheduled}}
mk.program @scheduled [] mesh <1x2> () {
  mk.role compute {
  }
}

// -----

!A = !mk.tensor<[256, 64], bf16, shard 0 over world>
mk.program @no_chunk [] mesh <1x2> (%a: !A) {
  // expected-error @+1 {{'mk.all_gather' op has no chunk size (run mk-tile-and-order first)}}
  %g = mk.all_gather %a : !A -> !mk.tensor<[256, 64], bf16, replicated>
}

// -----

!C = !mk.tensor<[256, 256], bf16, replicated>
mk.program @outside_grid [] mesh <1x2> (%c: !C) {
  %i = arith.constant 0 : index
  %zero = arith.constant 0.0 : bf16
  %t = mk.splat %zero : bf16 -> !mk.tile<[128, 128], bf16>
  // expected-error @+1 {{'mk.all_reduce' op must be in a tile grid of the program}}
  mk.all_reduce sum %t into %c[%i, %i] : !mk.tile<[128, 128], bf16>, !C
}

// -----

!Y = !mk.tensor<[256, 64], bf16, shard 0 over world>
!O = !mk.tensor<[4, 64], i32, shard 0 over world>
!W = !mk.tensor<[256, 2], f32, shard 0 over world>
mk.program @undispatched [] mesh <1x2> (%y: !Y, %o: !O, %w: !W) {
  mk.tile_grid (%t, %n) over %y tiles [64, 64] : !Y {
    %zero = arith.constant 0.0 : f32
    %v = mk.splat %zero : f32 -> !mk.tile<[64, 64], f32>
    %e = arith.constant 0 : index
    // expected-error @+1 {{'mk.combine' op combines rows that no mk.dispatch of this program routed}}
    mk.combine %v from [%e, %t, %n] into %y routed %o weighted %w : !mk.tile<[64, 64], f32>, !Y, !O, !W
  }
}

// -----

!X = !mk.tensor<[1024, 256], bf16, shard 0 over world>
!R = !mk.tensor<[1024, 2], i32, shard 0 over world>
!Xe = !mk.tensor<[16, 256, 256], bf16, shard 0 over world>
!Cn = !mk.tensor<[16], i32, shard 0 over world>
!O = !mk.tensor<[16, 256], i32, shard 0 over world>

// Two routings: a launch reports one (mk_routing_report).
mk.program @routes_twice [] mesh <1x2> (%x: !X, %r: !R, %s: !R) {
  %xe, %count, %origin = mk.dispatch %x by %r : !X, !R -> !Xe, !Cn, !O
  // expected-error @+1 {{'mk.dispatch' op routes tokens a second time in @routes_twice: a program routes once, as its launches report one routing (mk_routing_report)}}
  %xe2, %count2, %origin2 = mk.dispatch %x by %s : !X, !R -> !Xe, !Cn, !O
}

// -----

!X = !mk.tensor<[14, 32], bf16, shard 0 over world>
!R = !mk.tensor<[14, 2], i32, shard 0 over world>
!Xe = !mk.tensor<[4, 16, 32], bf16, shard 0 over world>
!Cn = !mk.tensor<[4], i32, shard 0 over world>
!O = !mk.tensor<[4, 16], i32, shard 0 over world>
// Routing finds a rank's tokens and experts by its index: equal shards.
mk.program @routes_uneven [] mesh <1x4> (%x: !X, %r: !R) {
  // expected-error @+1 {{'mk.dispatch' op routes tokens split unevenly: 14 over 4 ranks; mkc routes equal shards, a multiple of 4}}
  %xe, %count, %origin = mk.dispatch %x by %r : !X, !R -> !Xe, !Cn, !O
}
