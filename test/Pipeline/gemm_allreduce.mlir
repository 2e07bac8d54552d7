// The whole pipeline on lib/gemm_allreduce.mlir for 2 nodes x 4 GPUs: the scheduled IR, the CUDA
// C++, and sm_90a cubins for 1x2 (bf16 and f16), 2x1, 2x4 and 4x2 without spills (NVRTC, no GPU
// needed).

// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x4 --shape M=8192,N=8192,K=8192 --emit=mlir | FileCheck %s --check-prefix=SCHED
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x4 --shape M=8192,N=8192,K=8192 --emit=cuda | FileCheck %s --check-prefix=CUDA
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=8192,N=8192,K=8192 -o %t.1x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=8192,N=8192,K=8192 --in-place-all-reduce=false -o %t.1x2.roles.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// The in-place all-reduce of f16 (the senders add f16 pairs to the peer's copy).
// RUN: sed 's/bf16/f16/g' %mkc_lib/gemm_allreduce.mlir > %t.f16.mlir
// RUN: mkc %t.f16.mlir --topology 1x2 --shape M=4096,N=4096,K=4096 -o %t.1x2.f16.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=8192,N=8192,K=8192 --sm-split compute=119,intra_reduce=13 --emit=mlir | FileCheck %s --check-prefix=ROLES
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=8192,N=8192,K=8192 --explain-sm-split --emit=mlir -o /dev/null 2>&1 | FileCheck %s --check-prefix=INPLACE
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=8192,N=8192,K=8192 --all-reduce-copy-engine -o %t.1x2.engine.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=8192,N=8192,K=8192 --all-reduce-copy-engine --emit=cuda | FileCheck %s --check-prefix=COPIES
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=8192,N=8192,K=8192 --all-reduce-copy-engine --explain-sm-split --emit=mlir -o /dev/null 2>&1 | FileCheck %s --check-prefix=COPYSPLIT
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x1 --shape M=8192,N=8192,K=8192 -o %t.2x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x4 --shape M=8192,N=8192,K=8192 -o %t.2x4.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// Four nodes' reduce and send roles beside the matmul, which spilled while the roles' branches met
// between roles.
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 4x2 --shape M=1000,N=7000,K=2880 -o %t.4x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// Decode's M on the engine: A's rows only (M = 7: 8 rows, one consumer warpgroup multiplying;
// M = 100 in 128-row tiles: 104, both), stored in place on 1x2; M = 100 in the 64 x 64 tiles
// mk-tile-and-order chooses (two tile rows of one warpgroup's, twice the CTAs streaming B), its
// stores 64 rows a box; compiled without spills.
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=7,N=4096,K=4096 --emit=cuda | FileCheck %s --check-prefix=DECODE
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=7,N=4096,K=4096 -o %t.1x2.m7.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=100,N=4096,K=4096 --gemm-tile-m 128 --emit=cuda | FileCheck %s --check-prefix=DECODE104
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=100,N=4096,K=4096 --gemm-tile-m 128 -o %t.1x2.m100.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=100,N=4096,K=4096 --emit=cuda | FileCheck %s --check-prefix=DECODE64
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=128,N=4096,K=4096 -o %t.1x2.m128.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// M = 256 in 128 x 64 tiles (K not split, the default): a cluster's two CTAs, the two tile
// rows of a column, share B's one 64-column block in halves of its K rows (box {64, 32}).
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x1 --shape M=256,N=4096,K=4096 --emit=cuda | FileCheck %s --check-prefix=PAIRS
// Split-K as the model chooses (--gemm-k-splits 0): M = 256 on 1x2 (K = 4096 a rank) in 64
// tiles of 128 x 128, each in two parts of K at positions 2p and 2p + 1 (no cluster: every tile
// of a column pair is one rank's), the producer loading a part's 32 of the 64 blocks from its
// first; the consumers' product goes to the tile's two f32 slots of the partials buffer (tensor
// 3, 2 x 128 x 128 floats a tile) and counts on the tile's flag, and only the part that arrives
// last stores the tile and raises its flags. Compiled without spills.
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=256,N=4096,K=8192 --gemm-k-splits 0 --emit=cuda | FileCheck %s --check-prefix=SPLIT
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=256,N=4096,K=8192 --gemm-k-splits 0 -o %t.1x2.split.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x1 --shape M=256,N=4096,K=4096 -o %t.1x1.m256.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// Decode's all-reduce in one shot: each partial to every GPU of the node, every GPU summing every
// tile (the scheduled program in test/Transforms/mk-expand-collectives.mlir); simulated at shapes
// of 1, 7 and 300 rows, compiled at 8 GPUs and across nodes (where the node partials go as before).
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x8 --shape M=128,N=8192,K=8192 --one-shot-all-reduce -o %t.1x8.oneshot.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x4 --shape M=64,N=8192,K=8192 --one-shot-all-reduce -o %t.2x4.oneshot.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mk-sim %mkc_lib/gemm_allreduce.mlir --topology 1x4 --shape M=1,N=512,K=256 --one-shot-all-reduce --seeds 4 | FileCheck %s --check-prefix=ONESHOT
// RUN: mk-sim %mkc_lib/gemm_allreduce.mlir --topology 1x4 --shape M=7,N=136,K=64 --one-shot-all-reduce --seeds 4 | FileCheck %s --check-prefix=ONESHOT
// RUN: mk-sim %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=300,N=256,K=64 --one-shot-all-reduce --in-place-all-reduce=false --seeds 4 | FileCheck %s --check-prefix=ONESHOT
// RUN: mk-sim %mkc_lib/gemm_allreduce.mlir --topology 2x2 --shape M=7,N=136,K=64 --one-shot-all-reduce --seeds 4 | FileCheck %s --check-prefix=ONESHOT
// ONESHOT: @gemm_allreduce on #mk.mesh<{{.*}}>: 3 launches x 4 interleavings (seeds 0-3), {{[0-9]+}} steps: no findings

// Scheduled level: three roles on 129 CTAs. Compute puts each partial tile into the slot of its
// owner GPU (NVLink); the owner sums the node's 4 partials and sends the node partial to the same
// GPU of the other node only (RDMA through the proxy, rail-aligned); there the 2 node partials
// are summed and republished to the 4 GPUs of the node. Flags count arrivals per launch. The
// partials are staged tile-major, and each GPU stages only the tiles it owns: a [512 tiles x 128,
// 256] matrix per slot, a quarter of C, so that a tile crosses the network as one contiguous
// block, with one flag per tile.
// SCHED: mk.program @gemm_allreduce [M = 8192, N = 8192, K = 8192] mesh <2x4> ({{.*}}) grid 129 {
// SCHED-DAG: mk.flags @launched [1]
// SCHED-DAG: mk.flags @ready0 [512, 1]
// SCHED-DAG: mk.flags @ready1 [512, 1]
// SCHED: mk.role compute ctas [[COMPUTE:[0-9]+]] {
// SCHED: mk.tile_grid {{.*}} order <swizzle 8>
// SCHED: mk.matmul {{.*}} {k_tile = 64 : i64}
// SCHED: mk.wait @launched[%{{.*}}] count 5
// SCHED: mk.put {{.*}} at gpu %[[OWNER:.+]] via nvlink_store : !mk.tile<[128, 256], bf16>, !mk.tensor<[4, 65536, 256], bf16, symmetric>
// SCHED-NEXT: mk.signal @[[STAGED:ready[0-9]]][{{.*}}] at gpu %[[OWNER]] via nvlink_store
// SCHED: mk.role intra_reduce ctas [[INTRA:[0-9]+]] pool {
// SCHED: mk.tile_grid {{.*}} distribute gpus
// SCHED: mk.wait @[[STAGED]][{{.*}}] count 4
// SCHED: mk.accumulate sum %{{.*}}[:, %{{.*}}, %{{.*}}] : !mk.tensor<[4, 65536, 256], bf16, symmetric>
// SCHED: mk.copy {{.*}} at node %[[PEER:.+]] via rdma_proxy tile [128, 256] : !mk.tensor<[2, 65536, 256], bf16, symmetric>
// SCHED-NEXT: mk.signal @[[NODES:ready[0-9]]][{{.*}}] at node %[[PEER]] via rdma_proxy
// SCHED: mk.role inter_reduce ctas [[INTER:[0-9]+]] {
// SCHED: mk.wait @[[NODES]][{{.*}}] count 2
// SCHED: mk.accumulate sum %{{.*}}[:, %{{.*}}, %{{.*}}] : !mk.tensor<[2, 65536, 256], bf16, symmetric>
// SCHED: mk.put {{.*}} at gpu %{{.*}} via nvlink_store : !mk.tile<[128, 256], bf16>, !mk.tensor<[8192, 8192], bf16, replicated>

// CUDA level: one persistent kernel, role branches by CTA index over the ranges the launch gives
// the roles (the split is a launch parameter), calls of the device library.
// CUDA: #include "mk/device/kernel.cuh"
// CUDA: extern "C" __global__ __launch_bounds__(MK_CTA_THREADS, 1) void gemm_allreduce(const __grid_constant__ mk_kernel_args [[ARGS:v[0-9]+]])
// Every CTA takes the launch's epoch first; the last to take it moves it on for the next launch.
// CUDA: mk::begin_launch([[ARGS]], true, 0);
// CUDA: size_t [[CTA:v[0-9]+]] = mk::cta();
// CUDA-NEXT: size_t [[FIRST:v[0-9]+]] = mk::role_first([[ARGS]], 0);
// CUDA-NEXT: size_t [[CTAS:v[0-9]+]] = mk::role_ctas([[ARGS]], 0);
// CUDA-NEXT: if ((ptrdiff_t) [[CTA]] >= (ptrdiff_t) [[FIRST]] & (ptrdiff_t) [[CTA]] < (ptrdiff_t) ([[FIRST]] + [[CTAS]])) {
// Compute on the GEMM engine: the producer loads, the consumers multiply and store each partial
// to its owner through TMA.
// CUDA: [[ENGINE:v[0-9]+]] = mk::GemmEngine<mk::GemmConfig<mk::bf16, 256, mk::gemm_max_stages<mk::bf16, 256, 4, 128>(), false, 4, 1, 128>>(mk_smem);
// CUDA: if (mk::gemm_is_producer()) {
// CUDA: mk::gemm_load([[ENGINE]],
// CUDA: mk::gemm_consumer_begin([[ENGINE]]);
// CUDA: mk::signal_gpu([[ARGS]],
// CUDA: mk::signal_node([[ARGS]],
// CUDA: mk::gemm_mma([[ENGINE]], 16);
// CUDA: [[FIVE:v[0-9]+]] = mk::due([[ARGS]], 5);
// CUDA-NEXT: mk::gemm_consumer_wait_arrivals([[ENGINE]], [[ARGS]], {{.*}}, [[FIVE]]);
// CUDA: mk::gemm_store<mk::bf16>([[ENGINE]],
// The partial's flag is raised once its store lands, without the consumers waiting for it.
// CUDA: mk::gemm_signal_gpu([[ENGINE]], [[ARGS]],
// The engine's CTAs leave it with the registers split evenly, for the pool.
// CUDA: mk::gemm_leave([[ENGINE]]);
// The 2 node partials, combined through TMA (inter_reduce), whose CTAs then leave it too.
// CUDA: [[REDUCE:v[0-9]+]] = mk::TmaReduce<2, mk::bf16, mk::bf16, 128, 256>(mk_smem);
// CUDA: mk::tma_reduce<mk::Reduce::sum>([[REDUCE]],
// CUDA: mk::tma_store_reduced([[REDUCE]],
// CUDA: mk::team_leave();
// Last, every CTA's: the pool (intra_reduce), its tiles claimed one at a time: the node's 4
// partials, combined in chunks.
// CUDA: mk::team_begin();
// CUDA: mk::claim([[ARGS]], v{{[0-9]+}});
// CUDA: mk::accumulate_chunks<mk::Reduce::sum, mk::bf16, mk::bf16, 128, 256>(
// CUDA: mk::store_chunks(
// CUDA: mk::remote_put([[ARGS]],
// CUDA: extern "C" __device__ const mk_kernel_manifest gemm_allreduce_manifest = {
// CUDA-NEXT: /* abi_version */ MK_ABI_VERSION,
// CUDA-NEXT: /* grid */ 129,
// The pool is marked so: the runtime's controller may leave it few CTAs of its own.
// CUDA: /* sm_split */ {{[{][{]}}"compute", {{[0-9]+}}, 0}, {"intra_reduce", {{[0-9]+}}, MK_ROLE_POOL}, {"inter_reduce", {{[0-9]+}}, 0}},

// DECODE: mk::GemmConfig<mk::bf16, 64, mk::gemm_max_stages<mk::bf16, 64, 2, 8>(), false, 2, 1, 8>
// DECODE: {64, 8}
// DECODE104: mk::GemmConfig<mk::bf16, {{[0-9]+}}, mk::gemm_max_stages<mk::bf16, {{[0-9]+}}, 2, 104>(), false, 2, 1, 104>
// PAIRS: mk::GemmConfig<mk::bf16, 64, mk::gemm_max_stages<mk::bf16, 64, 2, 128>(), false, 2, 2, 128>
// PAIRS: {1, MK_MAP_LOCAL, MK_MAP_ELEMENT_BF16, 2, {4096ull, 4096ull}, {64, 32}, 128}
// DECODE64: mk::GemmConfig<mk::bf16, 64, mk::gemm_max_stages<mk::bf16, 64, 2, 64>(), false, 2, 1, 64>
// DECODE64: {2, 0, MK_MAP_ELEMENT_BF16, 2, {4096ull, 100ull}, {64, 64}, 128}, {2, 1, MK_MAP_ELEMENT_BF16, 2, {4096ull, 100ull}, {64, 64}, 128}
// SPLIT: mk::Tensor<float> {{v[0-9]+}} = mk::tensor<float>([[ARGS:v[0-9]+]], 3);
// SPLIT: mk::GemmConfig<mk::bf16, 128, mk::gemm_max_stages<mk::bf16, 128, 2, 128>(), false, 2, 1, 128>
// SPLIT: for (size_t [[P:i[0-9]+]] = {{.*}}; [[P]] < (128); [[P]] += {{v[0-9]+}}) {
// SPLIT-NEXT: size_t [[PART:v[0-9]+]] = [[P]] % 2;
// SPLIT: size_t [[FIRST:v[0-9]+]] = ([[PART]] * 64) / 2;
// SPLIT-NEXT: size_t [[COUNT:v[0-9]+]] = (([[PART]] + 1) * 64) / 2 - [[FIRST]];
// SPLIT: mk::gemm_load({{.*}}, [[COUNT]], [[FIRST]]);
// SPLIT: mk::gemm_mma([[E:v[0-9]+]], ((([[PART2:v[0-9]+]] + 1) * 64) / 2 - ([[PART2]] * 64) / 2));
// SPLIT: float* [[SLOTS:v[0-9]+]] = mk::at({{v[0-9]+}}, {{.*}} * 32768));
// SPLIT: mk_u32* [[FLAG:v[0-9]+]] = mk::flag_local([[ARGS]],
// SPLIT: mk_u32 [[EPOCH:v[0-9]+]] = mk::epoch([[ARGS]]);
// SPLIT: [[SUM:v[0-9]+]] = mk::gemm_sum_splits([[E]], {{v[0-9]+}}, [[SLOTS]], [[FLAG]], [[PART2]], 2, [[EPOCH]]);
// SPLIT-NEXT: if (mk::gemm_tile_complete([[E]])) {
// SPLIT: mk::gemm_store_gpus<mk::bf16>([[E]], [[SUM]],
// SPLIT: /* tensor_bytes */ {2097152ull, 33554432ull, 2097152ull, 8388608ull}

// CUBIN: mkc: gemm_allreduce: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// On one node of two GPUs the all-reduce is in place: every CTA computes, and a rank hands
// NVLink one tile's bytes per tile (half of the tiles stored, half added); 128 CTAs walk the 2048
// tiles in the 16 rounds 132 would. A split that gives CTAs to a reduce role asks for that role
// instead.
// INPLACE: SM split of @gemm_allreduce on 128 CTAs (of 132 SMs), from the cost model:
// INPLACE-NEXT: compute 128 CTAs: {{.*}} 134.2 MB over NVLink
// INPLACE-NOT: intra_reduce
// With the copies by copy engines, a GPU's kernel writes only its own C: its tiles through TMA,
// then its band's flag (once the stores land); the other GPU's tiles are added where they lie
// once their band has arrived. The module lists the copies the runtime issues beside it, bands
// of 8 x 8 tiles (1024 rows of 4 KiB, 16 KiB apart): GPU 0's 16 bands to GPU 1 as their `ready`
// flags (words 1-16) fill, signalling `arrived` (33-48), and the sums of GPU 1's bands back from
// `summed` (81-96) to `final` (113-128).
// COPYSPLIT: compute 128 CTAs: {{.*}} MB through CTAs{{$}}
// COPYSPLIT-NEXT: copy engines: 134.2 MB over NVLink, beside the kernel (not modelled)
// The copy engines read the epoch after the kernel: the runtime moves it on after them.
// COPIES: mk::begin_launch({{v[0-9]+}}, false, 0);
// COPIES: mk::gemm_store<mk::bf16>(
// COPIES-NEXT: size_t [[READY:v[0-9]+]] = {{.*}} + 1;
// COPIES-NEXT: mk::gemm_signal_gpu({{.*}}, [[READY]]);
// COPIES: mk::gemm_consumer_defer_arrivals(
// COPIES: mk::gemm_store_add<mk::bf16>(
// COPIES: mk::gemm_consumer_wait_arrivals(
// The manifest, followed by its 64 copies.
// COPIES: struct gemm_allreduce_manifest_with_copies {
// COPIES: mk_engine_copy engine_copies[64];
// COPIES: /* flag_words */ 129,
// COPIES: /* engine_copy_count */ 64,
// COPIES: /* engine_copies */ {{[{][{]}}0, 1, 2, 1, 64, 33, 0ull, 4096ull, 1024ull, 16384ull}, {0, 1, 2, 2, 64, 34, 4096ull, 4096ull, 1024ull, 16384ull},
// COPIES-SAME: {0, 1, 2, 96, 64, 128, 117452800ull, 4096ull, 1024ull, 16384ull}}};
// COPIES-NEXT: extern "C" __global__ void gemm_allreduce_advance_epoch(mk_launch_count *launches) { mk::advance_epoch(launches); }

// ROLES: mk.role compute ctas 119
// ROLES: mk.role intra_reduce ctas 13
