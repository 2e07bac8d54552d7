// MoE dispatch + GEMM + combine through every pass to the scheduled level on 2 nodes x 4 GPUs,
// and to cubins whose team roles (the two expert matmuls beside the copies, dispatch and
// combine) do not spill.

// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 2x4 --shape T=65536,Hd=7168,I=2048,E=256,TopK=8,C=4096 --emit=mlir | FileCheck %s
// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 1x1 --shape T=128,Hd=512,I=384,E=4,TopK=4,C=256 -o %t.1x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 1x2 --shape T=256,Hd=512,I=384,E=8,TopK=4,C=128 -o %t.1x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 2x1 --shape T=256,Hd=512,I=384,E=8,TopK=4,C=128 -o %t.2x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// CUBIN: mkc: moe_dispatch_gemm_combine: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// Tokens and routing are gathered along rails and within nodes; a dispatch role selects the rows
// of this rank's experts; the expert GEMMs wait for them, and the down projection waits for each
// chunk of the SwiGLU output it reads; results are gathered back and a combine role sums each
// token's. The expert GEMMs produce every tile of the capacity, not only those within the row
// counts: the waits for their tiles cannot know the counts, and a tile skipped would never be
// signalled (mk-sim finds the deadlock).
// CHECK: mk.program @moe_dispatch_gemm_combine {{.*}} mesh <2x4> ({{.*}}) grid 132 {
// CHECK: mk.role compute ctas {{[0-9]+}} {
// CHECK: mk.tile_grid
// CHECK-NOT: rows
// CHECK-SAME: {
// CHECK-NEXT: mk.wait @{{ready[0-9]}}[%{{.*}}] count 1
// CHECK: mk.swiglu
// CHECK: mk.store
// CHECK-NEXT: mk.signal @[[HIDDEN:ready[0-9]]][
// CHECK: scf.for
// CHECK-NEXT: mk.wait @[[HIDDEN]][
// CHECK: mk.role dispatch ctas {{[0-9]+}} {
// CHECK: mk.single_cta
// CHECK: mk.select_routed
// CHECK: mk.role combine ctas {{[0-9]+}} {
// CHECK: mk.combine_routed
// CHECK-NOT: mk.dispatch {{.*}} by
