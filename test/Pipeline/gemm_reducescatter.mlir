// The whole pipeline on lib/gemm_reducescatter.mlir for 2 nodes x 4 GPUs: the scheduled IR, the
// CUDA C++, and sm_90a cubins for 1x2, 2x1 and 2x4 without spills.

// RUN: mkc %mkc_lib/gemm_reducescatter.mlir --topology 2x4 --shape M=8192,N=8192,K=8192 --emit=mlir | FileCheck %s --check-prefix=SCHED
// RUN: mkc %mkc_lib/gemm_reducescatter.mlir --topology 2x4 --shape M=8192,N=8192,K=8192 --emit=cuda | FileCheck %s --check-prefix=CUDA
// RUN: mkc %mkc_lib/gemm_reducescatter.mlir --topology 1x2 --shape M=2048,N=2048,K=2048 --emit=cuda | FileCheck %s --check-prefix=SHARD
// RUN: mkc %mkc_lib/gemm_reducescatter.mlir --topology 1x2 --shape M=8192,N=8192,K=8192 -o %t.1x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_reducescatter.mlir --topology 2x1 --shape M=8192,N=8192,K=8192 -o %t.2x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_reducescatter.mlir --topology 2x4 --shape M=8192,N=8192,K=8192 -o %t.2x4.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN

// Shards that are not a multiple of the tile (500 rows, 16 rows), uneven shards (1000 rows over
// 3 ranks: 334, 333, 333; one row over 2: 1 and 0) and a local K of 360 (2880 over 8), on one
// node as across nodes: the tiles are numbered shard by shard (TileNumbering), and run on the
// tile library (128 columns), which masks them, where TMA cannot address them.
// RUN: mkc %mkc_lib/gemm_reducescatter.mlir --topology 1x2 --shape M=1000,N=7000,K=2880 -o %t.shards.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_reducescatter.mlir --topology 1x8 --shape M=128,N=7000,K=2880 -o %t.short.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_reducescatter.mlir --topology 3x1 --shape M=1000,N=4096,K=4096 -o %t.uneven.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_reducescatter.mlir --topology 1x2 --shape M=1,N=4096,K=4096 -o %t.empty.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_reducescatter.mlir --topology 4x2 --shape M=8192,N=4096,K=4096 -o %t.4x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_reducescatter.mlir --topology 2x1 --shape M=1000,N=7000,K=2880 --emit=cuda | FileCheck %s --check-prefix=TILES
// TILES-NOT: mk::GemmEngine
// TILES: mk::matmul<128, 128, {{[0-9]+}}, false, false, mk::bf16>

// Scheduled level: every rank computes a partial of every tile and puts it in the slot of the GPU
// of its node that is rail-aligned with the tile's owner; that GPU sums the 4 partials and sends
// the node partial to the owner's node only when it is another; the owner sums 2 node partials
// into its shard.
// SCHED: mk.program @gemm_reducescatter {{.*}} mesh <2x4> ({{.*}}) grid 129 {
// SCHED: mk.role compute ctas {{[0-9]+}} {
// SCHED: mk.tile_grid {{.*}} global tiles [128, 256] order <swizzle 8>
// SCHED: %{{.*}}, %[[OWNER:.+]] = mk.owner %{{.*}}[%{{.*}}, %{{.*}}] tile [128, 256] : !mk.tensor<[8192, 8192], bf16, shard 0 over world>
// SCHED: mk.put {{.*}} at gpu %[[OWNER]] via nvlink_store
// SCHED-NEXT: mk.signal @[[STAGED:ready[0-9]]][{{.*}}] at gpu %[[OWNER]] via nvlink_store
// SCHED: mk.role intra_reduce ctas {{[0-9]+}} pool {
// SCHED: mk.tile_grid {{.*}} global tiles [128, 256] order <swizzle 8> masked distribute gpus
// SCHED: mk.wait @[[STAGED]][{{.*}}] count 4
// SCHED: %[[ONODE:.+]], %{{.*}} = mk.owner
// SCHED: scf.if
// SCHED-NEXT: mk.copy {{.*}} at node %[[ONODE]] via rdma_proxy tile [128, 256]
// SCHED-NEXT: mk.signal @[[NODES:ready[0-9]]][{{.*}}] at node %[[ONODE]] via rdma_proxy
// SCHED: mk.role inter_reduce ctas {{[0-9]+}} {
// SCHED: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [128, 256] masked :
// SCHED: mk.wait @[[NODES]][{{.*}}] count 2
// SCHED: mk.store {{.*}} : !mk.tile<[128, 256], bf16>, !mk.tensor<[8192, 8192], bf16, shard 0 over world>

// CUDA: void gemm_reducescatter(const __grid_constant__ mk_kernel_args [[ARGS:v[0-9]+]])
// CUDA: [[ENGINE:v[0-9]+]] = mk::GemmEngine<mk::GemmConfig<mk::bf16, 256, mk::gemm_max_stages<mk::bf16, 256, 4, 128>(), false, 4, 1, 128>>(mk_smem);
// CUDA: mk::gemm_load([[ENGINE]],
// CUDA: mk::gemm_mma([[ENGINE]], 16);
// CUDA: mk::gemm_store<mk::bf16>([[ENGINE]],
// CUDA: mk::gemm_leave([[ENGINE]]);
// The node partials combined through TMA (inter_reduce), whose CTAs then join the pool.
// CUDA: [[REDUCE:v[0-9]+]] = mk::TmaReduce<2, mk::bf16, mk::bf16, 128, 256>(mk_smem);
// CUDA: mk::tma_reduce<mk::Reduce::sum>([[REDUCE]],
// CUDA: mk::tma_store_reduced([[REDUCE]],
// CUDA: mk::team_leave();
// The pool (intra_reduce), every CTA's last, its tiles claimed: the node's partials in chunks.
// CUDA: mk::claim([[ARGS]], v{{[0-9]+}});
// CUDA: mk::accumulate_chunks<mk::Reduce::sum, mk::bf16, mk::bf16, 128, 256>(
// CUDA: mk::store_chunks(
// The node partial goes to the owner's node with its signal in the same command (the flag the
// last argument, not MK_NO_FLAG).
// CUDA: mk::remote_put([[ARGS]], {{.*}}, v{{[0-9]+}});
// CUDA-NOT: mk::signal_node
// CUDA: extern "C" __device__ const mk_kernel_manifest gemm_reducescatter_manifest = {
// CUDA: /* dynamic_smem_bytes */

// CUBIN: mkc: gemm_reducescatter: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// On one node too, the reduction of GPU g walks the 8 tile rows of shard g: its rows are offset by
// g shards (the 64 tiles of a shard, one shard per node), claimed one at a time (the pool).
// SHARD: size_t [[POSITIONS:v[0-9]+]] = 64;
// SHARD: size_t [[I:v[0-9]+]] = mk::claim(v{{[0-9]+}}, [[POSITIONS]]);
// SHARD-NEXT: bool [[MORE:v[0-9]+]] = (ptrdiff_t) [[I]] < (ptrdiff_t) [[POSITIONS]];
// SHARD: + (([[I]] / 64) * 2 + v{{[0-9]+}}) * 8;
// SHARD: mk::tma_reduce<mk::Reduce::sum>(
