// MoE dispatch + GEMM + combine through every pass to the scheduled level: point to point on one
// node (1 x 8) and across nodes, rail-aligned (2 x 4); to cubins that do not spill; and run by
// mk-sim across nodes, with token shards of any size.

// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 1x8 --shape T=32768,Hd=7168,I=2048,E=128,TopK=8 --emit=mlir | FileCheck %s
// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 2x4 --shape T=65536,Hd=7168,I=2048,E=256,TopK=8,C=4096 --emit=mlir | FileCheck %s --check-prefix=RAIL
// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 1x1 --shape T=128,Hd=512,I=384,E=4,TopK=4,C=256 -o %t.1x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 1x1 --shape T=4096,Hd=7168,I=2048,E=16,TopK=8 -o %t.deepseek.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 1x2 --shape T=256,Hd=512,I=384,E=8,TopK=4,C=128 -o %t.1x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 1x8 --shape T=8192,Hd=4096,I=14336,E=64,TopK=2 -o %t.1x8.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 2x1 --shape T=256,Hd=512,I=384,E=8,TopK=4,C=128 -o %t.2x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 2x4 --shape T=1024,Hd=512,I=384,E=8,TopK=4,C=128 -o %t.2x4.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 2x4 --shape T=4096,Hd=7168,I=2048,E=64,TopK=8 -o %t.2x4.deepseek.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 1x1 --shape T=1,Hd=4096,I=1024,E=8,TopK=1 --emit=cuda | FileCheck %s --check-prefix=CUDA
// RUN: mk-sim %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 2x1 --shape T=14,Hd=72,I=64,E=2,TopK=1 | FileCheck %s --check-prefix=SIM
// RUN: mk-sim %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 2x2 --shape T=28,Hd=200,I=136,E=8,TopK=4 | FileCheck %s --check-prefix=SIM
// RUN: mk-sim %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 2x2 --shape T=512,Hd=256,I=256,E=8,TopK=2,C=40 | FileCheck %s --check-prefix=SIM
// RUN: mk-sim %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 3x2 --shape T=6,Hd=64,I=64,E=12,TopK=2 | FileCheck %s --check-prefix=SIM
// SIM: @moe_dispatch_gemm_combine on #mk.mesh<{{.*}}>: 3 launches x 8 interleavings (seeds 0-7), {{[0-9]+}} steps: no findings
// CUBIN: mkc: moe_dispatch_gemm_combine: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// The engine's producer: its loading thread alone waits for the row counts, walks the expert
// grids and loads; before a down-projection tile, one wait on the 8 hidden tiles of its rows. An
// expert's rows are in once every dispatch CTA (of the one rank here) has sent its own: the
// dispatch role's CTAs over the launches so far (the split may change between launches), which
// the kernel counts from its start.
// CUDA: mk::begin_launch({{v[0-9]+}}, true, 2);
// CUDA: if (mk::gemm_is_producer()) {
// CUDA-NEXT: mk::gemm_producer_begin(
// CUDA-NEXT: if (mk::gemm_loader()) {
// CUDA: [[COUNTED:v[0-9]+]] = mk::due({{v[0-9]+}}, 1);
// CUDA-NEXT: mk::gemm_wait_arrivals({{.*}}, [[COUNTED]]);
// CUDA: mk::GroupedWalk
// CUDA: [[DISPATCH:v[0-9]+]] = mk::role_ctas_through({{v[0-9]+}}, 1);
// CUDA-NEXT: mk::gemm_wait_arrivals({{.*}}, [[DISPATCH]]);
// CUDA: [[HIDDEN:v[0-9]+]] = mk::due({{v[0-9]+}}, 1);
// CUDA-NEXT: mk::gemm_wait_arrivals_span({{.*}}, 8, [[HIDDEN]]);
// CUDA: } else {
// CUDA-NEXT: mk::gemm_consumer_begin(

// One node: a dispatch role counts each rank's copies into every GPU's census, fills its experts'
// row counts once every rank's row is in, and sends each row to its expert's slot, signalling each
// expert after its rows. The expert grids walk only the tiles within the row counts, stamp their
// tiles' flags, and wait for their expert's rows; the down projection returns each row to its
// token's slot, and a grid after it sums each token's, in order.
// CHECK: mk.flags @ready0 [128, 256, 16]
// CHECK: mk.flags @routing_arrived [128]
// CHECK: mk.role compute ctas {{[0-9]+}} {
// CHECK: mk.wait @routing_counted[%{{.*}}] count 1
// CHECK: mk.tile_grid (%[[E:.*]], %{{.*}}, %{{.*}}) over %{{.*}} tiles [1, 128, 128] rows %[[COUNTS:[0-9]+]]
// CHECK-NEXT: mk.wait @routing_arrived[%[[E]]] count 8 per_cta_of dispatch
// CHECK-NEXT: mk.matmul
// CHECK-NEXT: mk.matmul
// CHECK-NEXT: mk.swiglu
// CHECK: mk.store
// CHECK-NEXT: mk.signal @ready0[{{.*}}] stamp
// CHECK: mk.tile_grid (%[[E2:.*]], %[[T2:.*]], %[[N2:.*]]) over %{{.*}} tiles [1, 128, 256] rows %[[COUNTS]]
// CHECK: mk.wait @ready0[
// CHECK: mk.matmul
// CHECK: mk.wait @routing_arrived[%[[E2]]] count 8 per_cta_of dispatch
// CHECK: mk.return_rows %{{.*}}, [%[[E2]], %[[T2]], %[[N2]]] via
// CHECK: mk.signal @routing_returned[%{{.*}}] at gpu
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [128, 256] masked
// CHECK-NEXT: mk.wait @routing_returned[%{{.*}}] count 8 per_cta_of compute
// CHECK-NEXT: mk.wait @routing_routed[%{{.*}}] count 1 per_cta_of dispatch
// CHECK-NEXT: mk.combine_returned
// CHECK: mk.role dispatch ctas {{[0-9]+}} {
// CHECK: mk.single_cta {
// CHECK-NEXT: mk.wait @launched
// CHECK-NEXT: mk.route_census
// CHECK: mk.signal @routing_census[%{{.*}}] at gpu
// CHECK: mk.wait @routing_census[%{{.*}}] count 8
// CHECK: mk.route_counts %{{.*}} into %[[COUNTS]] capacity 32768
// CHECK-NEXT: mk.signal @routing_counted
// CHECK: mk.wait @launched
// CHECK-NEXT: mk.route_rows {{.*}} arrivals @routing_arrived
// CHECK-NEXT: mk.signal @routing_routed
// CHECK-NOT: mk.dispatch {{.*}} by

// Across nodes, point to point and rail-aligned: the expert grids still walk only the tiles within
// the row counts; each rank packs the rows bound for the other node and sends them once, with their
// routing, its census row and their count, to its rail peer, which routes them as the source's
// own; results of the other node's copies go back to its rail peer in one transfer, a row a copy.
// RAIL: mk.role compute ctas {{[0-9]+}} {
// RAIL: mk.tile_grid (%{{.*}}) over %{{.*}} tiles [1, 128, 128] rows
// RAIL: mk.return_rows
// RAIL: mk.send_rows %[[RETURNED:[0-9]+]][%{{.*}}] -> %[[RETURNED]][%{{.*}}] count %{{.*}} at node %{{.*}} via rdma_proxy : !mk.tensor<[262144, 1, 7168], bf16, symmetric>
// RAIL: mk.combine_returned %[[RETURNED]], {{.*}} at
// RAIL: mk.role dispatch ctas {{[0-9]+}} {
// RAIL: mk.route_pack {{.*}} experts 256 : {{.*}}, !mk.tensor<[16384, 7168], bf16, symmetric>
// RAIL: mk.send_rows {{.*}} count {{.*}} at node {{.*}} : !mk.tensor<[16384, 7168], bf16, symmetric>
// RAIL: mk.route_rows {{.*}} arrivals @routing_arrived :
// RAIL: mk.route_rows {{.*}} arrivals @routing_arrived from node
// RAIL-NOT: mk.dispatch {{.*}} by
