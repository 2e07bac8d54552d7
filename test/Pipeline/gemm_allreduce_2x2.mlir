// GEMM+AllReduce on 2 nodes x 2 GPUs, the smallest hierarchy (issue 7's first shape, compiled
// here without the 4 GPUs it needs to run): partials are reduced inside the node over NVLink
// first; only the owner GPU's node partial crosses to the same GPU of the other node (the rail),
// so 1/2 of a flat all-reduce's bytes leave each GPU; the sums are republished to the node's
// other GPU. The kernels for both ranks of a node compile without spills.

// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x2 --shape M=8192,N=8192,K=8192 --emit=mlir | FileCheck %s --check-prefix=SCHED
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x2 --shape M=8192,N=8192,K=8192 --emit=cuda | FileCheck %s --check-prefix=CUDA
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x2 --rank 0 --shape M=8192,N=8192,K=8192 -o %t.r0.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x2 --rank 3 --shape M=8192,N=8192,K=8192 -o %t.r3.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x1 --shape M=8192,N=8192,K=8192 --explain-sm-split --emit=mlir -o /dev/null 2>&1 | FileCheck %s --check-prefix=FLAT
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x2 --shape M=8192,N=8192,K=8192 --explain-sm-split --emit=mlir -o /dev/null 2>&1 | FileCheck %s --check-prefix=BYTES
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x4 --shape M=8192,N=8192,K=8192 --explain-sm-split --emit=mlir -o /dev/null 2>&1 | FileCheck %s --check-prefix=BYTES4

// SCHED: mk.program @gemm_allreduce [M = 8192, N = 8192, K = 8192] mesh <2x2> ({{.*}}) grid 130 {
// Compute: each partial tile to its owner GPU of this node, over NVLink.
// SCHED: mk.role compute ctas
// SCHED: mk.put {{.*}} at gpu {{.*}} via nvlink_store
// SCHED-NOT: rdma_proxy
// The owner sums the node's 2 partials; the node partial goes to the rail peer only.
// SCHED: mk.role intra_reduce ctas
// SCHED: mk.tile_grid {{.*}} distribute gpus
// SCHED: mk.wait @ready0[{{.*}}] count 2
// SCHED: mk.accumulate sum
// SCHED: mk.copy {{.*}} at node {{.*}} via rdma_proxy tile [128, 256]
// SCHED-NEXT: mk.signal @ready1[{{.*}}] at node {{.*}} via rdma_proxy
// The 2 node partials summed and republished to the node's GPUs.
// SCHED: mk.role inter_reduce ctas
// SCHED: mk.wait @ready1[{{.*}}] count 2
// SCHED: mk.put {{.*}} at gpu {{.*}} via nvlink_store

// Across nodes, one command per tile: the put with its signal.
// CUDA: mk::remote_put({{.*}}, v{{[0-9]+}});
// CUDA-NOT: mk::signal_node

// CUBIN: mkc: gemm_allreduce: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// What a rank hands the network per launch, counted on the compiled schedule: with G GPUs a node,
// 1/G of a flat all-reduce's (2x1: the whole 8192 x 8192 bf16 partial, 134.2 MB).
// FLAT: compute {{[0-9]+}} CTAs: {{.*}}, 134.2 MB over the network
// The split at 2x2: compute's 2048 tiles take 21 rounds on the 102 CTAs the cost model gives it
// and on 98; inter_reduce, slower than compute on 20 (0.559 ms against 0.554), takes 2 of the 4
// left, and 2 are not launched.
// BYTES: SM split of @gemm_allreduce on 130 CTAs (of 132 SMs), from the cost model:
// BYTES-NEXT: compute 98 CTAs:
// BYTES-NEXT: intra_reduce 10 CTAs: {{.*}}, 67.1 MB over the network
// BYTES-NEXT: inter_reduce 22 CTAs:
// BYTES4: intra_reduce {{[0-9]+}} CTAs: {{.*}}, 33.6 MB over the network
