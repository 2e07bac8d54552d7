// mk-sim reports each kind of fault, located at the op, when one is seeded into a scheduled
// program that is otherwise clean: the programs are the library's, compiled by mkc, with one line
// of the scheduled IR changed.

// A clean program simulates cleanly (and the seeded runs below start from it).
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x2 --shape M=256,N=512,K=256 --emit=mlir -o %t.ar.mlir
// RUN: mk-sim %mkc_lib/gemm_allreduce.mlir --topology 2x2 --shape M=256,N=512,K=256 --scheduled %t.ar.mlir --seeds 4 | FileCheck %s --check-prefix=CLEAN
// CLEAN: mk-sim: @gemm_allreduce on #mk.mesh<2x2>: 3 launches x 4 interleavings (seeds 0-3), {{[0-9]+}} steps: no findings

// A wait for more arrivals than a launch brings: the intra-node reduction waits for 3 partials of
// 2, and nothing can go on.
// RUN: sed -e 's/mk.wait @ready0\(.*\) count 2/mk.wait @ready0\1 count 3/' %t.ar.mlir > %t.deadlock.mlir
// RUN: not mk-sim %mkc_lib/gemm_allreduce.mlir --topology 2x2 --shape M=256,N=512,K=256 --scheduled %t.deadlock.mlir --seeds 4 2>&1 | FileCheck %s --check-prefix=DEADLOCK
// DEADLOCK: deadlock.mlir:44:9: error: deadlock: no thread can go on and nothing is in flight; rank {{[0-3]}} (CTA {{[0-9]+}}, intra_reduce {{[0-9]+}} of {{[0-9]+}}, launch 1){{.*}} waits at {{.*}}deadlock.mlir:44:9 for 3 of @ready0 word {{[0-9]+}}, which holds 2;

// A read that no wait orders after the write it reads: the reduction sums the staged partials
// without waiting for them.
// RUN: sed -e '/mk.wait @ready0/d' %t.ar.mlir > %t.unguarded.mlir
// RUN: not mk-sim %mkc_lib/gemm_allreduce.mlir --topology 2x2 --shape M=256,N=512,K=256 --scheduled %t.unguarded.mlir --seeds 4 2>&1 | FileCheck %s --check-prefix=UNGUARDED
// UNGUARDED: unguarded.mlir:44:14: error: unguarded read: rank {{[0-3]}} (CTA {{[0-9]+}}, intra_reduce {{[0-9]+}} of {{[0-9]+}}, launch {{[0-9]}}) reads element [{{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}] of the buffer made at {{.*}}unguarded.mlir:{{[0-9]+}}:{{[0-9]+}} on rank {{[0-3]}}
// UNGUARDED-SAME: the write by rank {{[0-3]}} (CTA {{[0-9]+}}, compute {{[0-9]+}} of {{[0-9]+}}, launch {{[0-9]}}) at {{.*}}unguarded.mlir:35:9

// Output elements a launch does not write: the reduce-scatter's owner stores nothing.
// RUN: mkc %mkc_lib/gemm_reducescatter.mlir --topology 2x1 --shape M=256,N=512,K=256 --emit=mlir -o %t.rs.mlir
// RUN: sed -e '/mk.store %2, %arg2/d' %t.rs.mlir > %t.unwritten.mlir
// RUN: not mk-sim %mkc_lib/gemm_reducescatter.mlir --topology 2x1 --shape M=256,N=512,K=256 --scheduled %t.unwritten.mlir --seeds 1 2>&1 | FileCheck %s --check-prefix=UNWRITTEN
// UNWRITTEN: error: unwritten output: launch 1 left 65536 elements of argument #2 unwritten on rank {{[01]}} (the first at [{{[0-9]+}}, 0])

// Results that are not the program's: the reduction takes the larger partial, not the sum.
// RUN: sed -e 's/mk.accumulate sum/mk.accumulate max/' %t.rs.mlir > %t.wrong.mlir
// RUN: not mk-sim %mkc_lib/gemm_reducescatter.mlir --topology 2x1 --shape M=256,N=512,K=256 --scheduled %t.wrong.mlir --seeds 1 2>&1 | FileCheck %s --check-prefix=WRONG
// WRONG: error: wrong result: launch 1 got {{[0-9]+}} elements of argument #2 wrong on rank {{[01]}}: the first at [{{[0-9]+}}, {{[0-9]+}}] is {{.*}}, the program means {{.*}} (seed 0)

// A wait that counts the compiled split's CTAs rather than the launch's: MoE's experts wait for
// 2 arrivals from each dispatch CTA, written as 84 for the 42 it was compiled with. Right while
// every launch takes the compiled split; once a launch takes another (--vary-split: the SM
// controller's candidates), the second launch waits for arrivals that never come.
// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 1x2 --shape T=64,Hd=128,I=128,E=4,TopK=2,C=64 --emit=mlir -o %t.moe.mlir
// RUN: sed -e 's/count 2 per_cta_of dispatch/count 84/' %t.moe.mlir > %t.compiled-split.mlir
// RUN: mk-sim %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 1x2 --shape T=64,Hd=128,I=128,E=4,TopK=2,C=64 --scheduled %t.compiled-split.mlir --seeds 2 | FileCheck %s --check-prefix=COMPILED-SPLIT
// COMPILED-SPLIT: mk-sim: @moe_dispatch_gemm_combine on #mk.mesh<1x2>: 3 launches x 2 interleavings (seeds 0-1), {{[0-9]+}} steps: no findings
// RUN: not mk-sim %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 1x2 --shape T=64,Hd=128,I=128,E=4,TopK=2,C=64 --scheduled %t.compiled-split.mlir --seeds 2 --vary-split 2>&1 | FileCheck %s --check-prefix=VARIED-SPLIT
// VARIED-SPLIT: compiled-split.mlir:32:9: error: deadlock: no thread can go on and nothing is in flight; rank {{[01]}} (CTA {{[0-9]+}}, compute {{[0-9]+}} of 131, launch 2){{.*}} waits at {{.*}}compiled-split.mlir:32:9 for 168 of @routing_arrived word {{[0-9]+}}, which holds 86;
