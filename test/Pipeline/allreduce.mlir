// The whole pipeline on lib/allreduce.mlir, the all-reduce alone: across 2 nodes every tile goes
// to the other node through the proxy (a put and its signal) and each node sums the two; the
// cubins for 1x2, 2x1 and 2x4 have no spills.

// RUN: mkc %mkc_lib/allreduce.mlir --topology 2x1 --shape M=8192,N=8192 --emit=mlir | FileCheck %s --check-prefix=SCHED
// RUN: mkc %mkc_lib/allreduce.mlir --topology 2x1 --shape M=8192,N=8192 --emit=cuda | FileCheck %s --check-prefix=CUDA
// RUN: mkc %mkc_lib/allreduce.mlir --topology 1x2 --shape M=8192,N=8192 -o %t.1x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/allreduce.mlir --topology 2x1 --shape M=8192,N=8192 -o %t.2x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/allreduce.mlir --topology 2x4 --shape M=8192,N=8192 -o %t.2x4.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN

// SCHED: mk.program @allreduce [M = 8192, N = 8192] mesh <2x1> ({{.*}}) grid 132 {
// SCHED: mk.role compute ctas
// SCHED: mk.load %arg0
// SCHED: mk.copy {{.*}} at node {{.*}} via rdma_proxy tile [128, 256]
// SCHED-NEXT: mk.signal @ready0[{{.*}}] at node {{.*}} via rdma_proxy
// SCHED: mk.role inter_reduce ctas
// SCHED: mk.wait @ready0[{{.*}}] count 2
// SCHED: mk.accumulate sum

// The launch's announcement to the other node, then each tile's put with its signal riding on
// it (one command; the flag the last argument).
// CUDA: mk::signal_node(
// CUDA: mk::remote_put({{.*}}, v{{[0-9]+}});
// CUDA-NOT: mk::signal_node
// CUDA: mk::wait_arrivals(

// CUBIN: mkc: allreduce: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
