// What mk-sim refuses to simulate, with a located message: ops it does not model, programs whose
// meaning reaches outside a rank's part, more CTAs than it models; and bad flags or inputs.

// RUN: split-file %s %t

// RUN: not mk-sim %t/empty.mlir --scheduled %t/unmodelled.mlir --topology 1x1 2>&1 | FileCheck %s --check-prefix=UNMODELLED
// UNMODELLED: unmodelled.mlir:4:10: error: 'arith.shli' op mk-sim: does not model this op
// RUN: not mk-sim %t/empty.mlir --scheduled %t/outside.mlir --topology 1x1 2>&1 | FileCheck %s --check-prefix=OUTSIDE-ROLE
// OUTSIDE-ROLE: outside.mlir:3:8: error: 'arith.shli' op mk-sim: does not model this op outside a role
// RUN: not mk-sim %t/empty.mlir --scheduled %t/other_shape.mlir --topology 1x1 2>&1 | FileCheck %s --check-prefix=ARGUMENTS
// ARGUMENTS: other_shape.mlir:1:1: error: mk-sim: @p does not take the arguments of the program it simulates

// RUN: not mk-sim %t/owner.mlir --topology 1x2 2>&1 | FileCheck %s --check-prefix=MEANING
// MEANING: owner.mlir:5:19: error: 'mk.owner' op mk-sim: has no meaning at the program level
// RUN: not mk-sim %t/next_shard.mlir --topology 1x2 2>&1 | FileCheck %s --check-prefix=REACH
// REACH: next_shard.mlir:6:10: error: mk-sim: the program's meaning reaches elements from [128, 0] on, which rank 0 does not hold

// RUN: not mk-sim %mkc_lib/allreduce.mlir --topology 8x8 --shape M=128,N=128 --sm-count 1024 --sm-split compute=1018,intra_reduce=2,inter_send=2,inter_reduce=2 2>&1 | FileCheck %s --check-prefix=CTAS
// CTAS: error: mk-sim: models at most 8192 threads of control (CTAs and copy engines of every rank) and 65535 launches; this program has 65472 and 3

// RUN: not mk-sim %t/empty.mlir --topology 1x1 --launches 0 2>&1 | FileCheck %s --check-prefix=LAUNCHES
// LAUNCHES: mk-sim: error: --launches and --seeds must be at least 1
// RUN: not mk-sim %t/empty.mlir --topology 0x1 2>&1 | FileCheck %s --check-prefix=TOPOLOGY
// TOPOLOGY: mk-sim: error: --topology=0x1 is not NODESxGPUS with both at least 1, e.g. 2x4
// RUN: not mk-sim /dev/zero --topology 1x1 2>&1 | FileCheck %s --check-prefix=DEVICE
// DEVICE: mk-sim: error: /dev/zero is a character device, not a regular file
// RUN: not mk-sim %t/empty.mlir --topology 1x1 --scheduled %t/missing.mlir 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: mk-sim: error: cannot open {{.*}}missing.mlir

//--- empty.mlir
mk.program @p [] mesh <?x?> (%c: !mk.tensor<[128, 128], bf16, replicated>) {
}

//--- unmodelled.mlir
mk.program @p [] mesh <1x1> (%c: !mk.tensor<[128, 128], bf16, replicated>) grid 1 {
  mk.role compute ctas 1 {
    %a = arith.constant 1 : i32
    %b = arith.shli %a, %a : i32
  }
}

//--- outside.mlir
mk.program @p [] mesh <1x1> (%c: !mk.tensor<[128, 128], bf16, replicated>) grid 1 {
  %a = arith.constant 1 : i32
  %b = arith.shli %a, %a : i32
  mk.role compute ctas 1 {
  }
}

//--- other_shape.mlir
mk.program @p [] mesh <1x1> (%c: !mk.tensor<[256, 128], bf16, replicated>) grid 1 {
  mk.role compute ctas 1 {
  }
}

//--- owner.mlir
!C = !mk.tensor<[256, 128], bf16, replicated>
mk.program @p [] mesh <?x?> (%x: !C, %c: !C) {
  mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {
    %t = mk.load %x[%m, %n] : !C -> !mk.tile<[128, 128], bf16>
    %node, %gpu = mk.owner %c[%m, %n] tile [128, 128] : !C
    mk.store %t, %c[%m, %n] : !mk.tile<[128, 128], bf16>, !C
  }
}

//--- next_shard.mlir
!S = !mk.tensor<[256, 128], bf16, shard 0 over world>
mk.program @p [] mesh <?x?> (%x: !S, %c: !S) {
  mk.tile_grid (%m, %n) over %c tiles [128, 128] : !S {
    %one = arith.constant 1 : index
    %next = arith.addi %m, %one : index
    %t = mk.load %x[%next, %n] : !S -> !mk.tile<[128, 128], bf16>
    mk.store %t, %c[%m, %n] : !mk.tile<[128, 128], bf16>, !S
  }
}
