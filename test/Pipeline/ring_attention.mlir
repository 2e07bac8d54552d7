// Ring attention (causal and not) through every pass to the scheduled level on 2 nodes x 4 GPUs,
// and to cubins whose team roles (240 registers after setmaxnreg) do not spill: at D = 128 the
// accumulator, q and the scores take 160 of them.

// RUN: mkc %mkc_lib/ring_attention.mlir --topology 2x4 --shape B=4,H=16,S=65536,D=128 --emit=mlir | FileCheck %s
// RUN: mkc %mkc_lib/ring_attention_causal.mlir --topology 2x4 --shape B=4,H=16,S=65536,D=128 --emit=mlir | FileCheck %s --check-prefixes=CHECK,CAUSAL
// RUN: mkc %mkc_lib/ring_attention.mlir --topology 1x2 --shape B=1,H=2,S=512,D=128 -o %t.1x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/ring_attention.mlir --topology 1x2 --shape B=2,H=4,S=256,D=64 -o %t.1x2.d64.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/ring_attention_causal.mlir --topology 1x2 --shape B=1,H=2,S=512,D=128 -o %t.causal.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/ring_attention_causal.mlir --topology 2x4 --shape B=4,H=16,S=65536,D=128 -o %t.2x4.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// CUBIN: mkc: {{ring_attention(_causal)?}}: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// K and V are gathered chunk by chunk (per 128 keys of each batch and head) along rails and within
// nodes; each query tile visits the 8 sources in arrival order (this rank, its node, the other
// node) and waits for each K and V chunk before it folds it in.
// CHECK: mk.program @{{ring_attention(_causal)?}} {{.*}} mesh <2x4> ({{.*}}) grid 132 {
// CHECK-DAG: mk.flags @[[K:ready[0-9]]] [4, 16, 512]
// CHECK-DAG: mk.flags @[[V:ready[0-9]]] [4, 16, 512]
// CHECK: mk.role compute ctas {{[0-9]+}} {
// CHECK: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK: mk.shard_range
// CHECK: mk.wait @{{ready[0-9]}}[%{{.*}}, %{{.*}}, %{{.*}}] count 1
// CHECK-NEXT: mk.load
// CHECK: mk.wait @{{ready[0-9]}}[%{{.*}}, %{{.*}}, %{{.*}}] count 1
// CHECK-NEXT: mk.load
// CAUSAL: mk.attention_block {{.*}} at ({{.*}}) causal
// CHECK: mk.role intra_transfer ctas
// CHECK: via rdma_proxy
// CHECK: mk.role republish ctas
// CHECK-NOT: mk.ring_shift
