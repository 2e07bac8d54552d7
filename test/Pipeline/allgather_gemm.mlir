// The whole pipeline on lib/allgather_gemm.mlir for 2 nodes x 4 GPUs: the scheduled IR, the CUDA
// C++, and sm_90a cubins for 1x2, 2x1 and 2x4 without spills.

// RUN: mkc %mkc_lib/allgather_gemm.mlir --topology 2x4 --shape M=8192,N=8192,K=8192 --emit=mlir | FileCheck %s --check-prefix=SCHED
// RUN: mkc %mkc_lib/allgather_gemm.mlir --topology 2x4 --shape M=8192,N=8192,K=8192 --emit=cuda | FileCheck %s --check-prefix=CUDA
// RUN: mkc %mkc_lib/allgather_gemm.mlir --topology 1x2 --shape M=8192,N=8192,K=8192 -o %t.1x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/allgather_gemm.mlir --topology 2x1 --shape M=8192,N=8192,K=8192 -o %t.2x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/allgather_gemm.mlir --topology 2x4 --shape M=8192,N=8192,K=8192 -o %t.2x4.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN

// Scheduled level: the compute role multiplies this rank's rows first, waiting for each chunk of
// 128 rows of the gathered A; an intra_transfer role copies this rank's shard to the 4 GPUs of
// its node (bulk copies over NVLink) and to the same GPU of the other node (RDMA); a republish
// role forwards what arrives over the rail to the node's other 3 GPUs.
// SCHED: mk.program @allgather_gemm {{.*}} mesh <2x4> ({{.*}}) grid 130 {
// SCHED: mk.flags @[[ROWS:ready[0-9]]] [64]
// SCHED: %[[GATHERED:.+]] = mk.buffer : !mk.tensor<[8192, 8192], bf16, symmetric>
// SCHED: mk.role compute ctas {{[0-9]+}} {
// SCHED: mk.tile_grid {{.*}} order <swizzle 8, local_first>
// SCHED: mk.wait @[[ROWS]][%{{.*}}] count 1
// SCHED-NEXT: mk.matmul %[[GATHERED]][%{{.*}}, :]
// SCHED: mk.role intra_transfer ctas {{[0-9]+}} {
// SCHED: mk.copy %{{.*}}[%{{.*}}, :] -> %[[GATHERED]][%{{.*}}, :] at gpu %[[GPU:.+]] via nvlink_bulk tile [128, 8192]
// SCHED-NEXT: mk.signal @[[ROWS]][%{{.*}}] at gpu %[[GPU]] via nvlink_store
// SCHED: mk.copy %{{.*}}[%{{.*}}, :] -> %[[GATHERED]][%{{.*}}, :] at node %[[NODE:.+]] via rdma_proxy tile [128, 8192]
// SCHED-NEXT: mk.signal @[[ROWS]][%{{.*}}] at node %[[NODE]] via rdma_proxy
// SCHED: mk.role republish ctas {{[0-9]+}} {
// SCHED: mk.tile_grid {{.*}} held_by
// SCHED: mk.wait @[[ROWS]][%{{.*}}] count 1
// SCHED: mk.copy %[[GATHERED]][%{{.*}}, :] -> %[[GATHERED]][%{{.*}}, :] at gpu %{{.*}} via nvlink_bulk

// CUDA: void allgather_gemm(const __grid_constant__ mk_kernel_args [[ARGS:v[0-9]+]])
// The GEMM engine: the producer waits for each tile's rows of A before loading them.
// CUDA: [[ENGINE:v[0-9]+]] = mk::GemmEngine<mk::GemmConfig<mk::bf16, 256, mk::gemm_max_stages<mk::bf16, 256, 2, 128>(), false, 2, 1, 128>>(mk_smem);
// CUDA: if (mk::gemm_is_producer()) {
// CUDA: mk::gemm_wait_arrivals([[ENGINE]], [[ARGS]],
// CUDA: mk::gemm_load([[ENGINE]],
// CUDA: mk::gemm_mma([[ENGINE]], 128);
// CUDA: mk::gemm_store<mk::bf16>([[ENGINE]],
// The team's bulk-copy engine, set up once; each copy through it.
// CUDA: mk::team_begin();
// CUDA-NEXT: mk::BulkCopier [[COPIER:v[0-9]+]] = mk::BulkCopier();
// CUDA: mk::copy_region_bulk({{.*}}, mk_smem, [[COPIER]]);
// CUDA: mk::remote_put([[ARGS]],
// The team ends once the proxy is done with what it sent: the caller's next write of A must not
// change it (mk/queue.h, Release).
// CUDA: mk::await_proxy_reads([[ARGS]]);
// CUDA-NEXT: } else {
// CUDA-NEXT: mk::team_idle();
// CUDA: mk::copy_region_bulk_smem_bytes()

// CUBIN: mkc: allgather_gemm: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
