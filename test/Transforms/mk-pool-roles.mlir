// RUN: mk-opt %s -split-input-file -mk-pool-roles | FileCheck %s

// mk-pool-roles makes the first reduction within a node whose body is one tile grid, walked
// whole, the pool that the other roles' CTAs join when done with their own work (its tiles
// claimed one at a time).

!C = !mk.tensor<[1024, 1024], bf16, replicated>

// intra_reduce, of one grid, is the pool; a role of another kind never is (inter_reduce, across
// nodes, not yet).
// CHECK-LABEL: mk.program @first_of_one_grid
// CHECK: mk.role compute ctas 100 {
// CHECK: mk.role inter_reduce ctas 10 {
// CHECK: mk.role intra_reduce ctas 10 pool {
// CHECK: mk.role republish ctas 12 {
mk.program @first_of_one_grid [] mesh <2x2> (%c: !C) grid 132 {
  mk.role compute ctas 100 {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {}
  }
  mk.role inter_reduce ctas 10 {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {}
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {}
  }
  mk.role intra_reduce ctas 10 {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {}
  }
  mk.role republish ctas 12 {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {}
  }
}

// -----

!C = !mk.tensor<[1024, 1024], bf16, replicated>

// A reduction with its own single-CTA work is not one; nor is a reduction across nodes, or a
// program of one role.
// CHECK-LABEL: mk.program @none
// CHECK-NOT: pool {
// CHECK-LABEL: mk.program @across_nodes
// CHECK-NOT: pool {
// CHECK-LABEL: mk.program @alone
// CHECK-NOT: pool {
mk.program @none [] mesh <1x2> (%c: !C) grid 132 {
  mk.role compute ctas 100 {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {}
  }
  mk.role intra_reduce ctas 32 {
    mk.single_cta {}
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {}
  }
}
mk.program @across_nodes [] mesh <2x1> (%c: !C) grid 132 {
  mk.role compute ctas 100 {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {}
  }
  mk.role inter_reduce ctas 32 {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {}
  }
}
mk.program @alone [] mesh <1x2> (%c: !C) grid 132 {
  mk.role intra_reduce ctas 132 {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {}
  }
}

// -----

!C = !mk.tensor<[1024, 1024], bf16, replicated>

// The author's pool stands.
// CHECK-LABEL: mk.program @authored
// CHECK: mk.role intra_reduce ctas 10 {
// CHECK: mk.role inter_reduce ctas 22 pool {
mk.program @authored [] mesh <2x2> (%c: !C) grid 132 {
  mk.role compute ctas 100 {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {}
  }
  mk.role intra_reduce ctas 10 {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {}
  }
  mk.role inter_reduce ctas 22 pool {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {}
  }
}
