// Ring attention (causal and not) through every pass to the scheduled level on 2 nodes x 4 GPUs,
// planned onto the attention engine, and to cubins that do not spill for 1x1, 1x2, 2x1 and 2x4 at
// D 64 and 128, with grouped-query heads and without.

// RUN: mkc %mkc_lib/ring_attention.mlir --topology 2x4 --shape B=4,H=16,S=65536,D=128 --emit=mlir | FileCheck %s
// RUN: mkc %mkc_lib/ring_attention_causal.mlir --topology 2x4 --shape B=4,H=16,S=65536,D=128 --emit=mlir | FileCheck %s --check-prefixes=CHECK,CAUSAL
// RUN: mkc %mkc_lib/ring_attention_causal.mlir --topology 1x2 --shape B=1,H=2,S=1024,D=128 --emit=mlir | mk-opt --mk-plan-lowering | FileCheck %s --check-prefix=PLAN
// RUN: mkc %mkc_lib/ring_attention_causal.mlir --topology 1x2 --shape B=1,H=2,S=1024,D=128 --emit=cuda | FileCheck %s --check-prefix=ENGINE
// RUN: mkc %mkc_lib/ring_attention_causal.mlir --topology 1x1 --shape B=1,H=2,S=1024,D=128 --emit=cuda | FileCheck %s --check-prefix=CLAIM
// RUN: mkc %mkc_lib/ring_attention.mlir --topology 1x1 --shape B=2,H=16,S=3000,D=64 --emit=cuda | FileCheck %s --check-prefix=ONE
// RUN: mkc %mkc_lib/ring_attention_causal.mlir --topology 1x2 --shape B=1,H=2,S=2000,D=128 --emit=mlir | mk-opt --mk-plan-lowering | FileCheck %s --check-prefix=SHARDS
// RUN: for t in 1x2 2x1; do for d in 64 128; do mkc %mkc_lib/ring_attention_causal.mlir --topology $t --shape B=2,H=16,S=6000,D=$d -o %t.cubin --ptxas-report; done; done 2>&1 | FileCheck %s --check-prefix=SHARDS-CUBIN
// RUN: mkc %mkc_lib/ring_attention_zigzag.mlir --topology 1x2 --shape B=1,H=2,S=2048,D=128 --emit=mlir | mk-opt --mk-plan-lowering | FileCheck %s --check-prefix=ZIGZAG
// RUN: mkc %mkc_lib/ring_attention_zigzag.mlir --topology 1x2 --shape B=1,H=2,S=2048,D=128 --emit=cuda | FileCheck %s --check-prefix=ZIGZAG-CUDA
// RUN: for t in 1x1 1x2; do for d in 64 128; do mkc %mkc_lib/ring_attention_zigzag.mlir --topology $t --shape B=2,H=16,S=8192,D=$d -o %t.cubin --ptxas-report; done; done 2>&1 | FileCheck %s --check-prefix=ZIGZAG-CUBIN
// RUN: for t in 1x1 1x2 2x1 2x4; do for d in 64 128; do for p in ring_attention ring_attention_causal; do mkc %mkc_lib/$p.mlir --topology $t --shape B=2,H=16,S=8192,D=$d -o %t.cubin --ptxas-report; done; done; done 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: for t in 1x1 1x2 2x1 2x4; do for d in 64 128; do for p in ring_attention_gqa ring_attention_gqa_causal; do mkc %mkc_lib/$p.mlir --topology $t --shape B=1,H=32,Hkv=8,S=8192,D=$d -o %t.cubin --ptxas-report; done; done; done 2>&1 | FileCheck %s --check-prefix=GQA-CUBIN
// CUBIN-COUNT-16: mkc: {{ring_attention(_causal)?}}: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// GQA-CUBIN-COUNT-16: mkc: {{ring_attention_gqa(_causal)?}}: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

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

// The compute role runs the attention engine: its producer loads the query tile (after the tile's
// other waits) and each block after the block's K and V flags; a causal step's blocks stop at the
// query tile's diagonal.
// PLAN: mk.role compute ctas {{[0-9]+}} attributes {mk.attention_engine = #mk.attention_engine<element = bf16, head_dim = 128, stages = 2>}
// PLAN: mk.wait @launched{{.*}}{mk.lowering = #mk.lowering<producer>}
// PLAN: mk.load %arg0{{.*}}{mk.lowering = #mk.lowering<load>}
// PLAN-COUNT-3: mk.splat {{.*}}{mk.lowering = #mk.lowering<registers>}
// PLAN: %[[SEEN:.*]] = arith.select
// PLAN: scf.for %[[J:.*]] = %lo to %[[SEEN]] step
// PLAN-NEXT: mk.wait @{{ready[0-9]}}[%{{.*}}, %[[J]]] count 1 {mk.lowering = #mk.lowering<producer>}
// PLAN-NEXT: mk.load {{.*}}{mk.lowering = #mk.lowering<load>}
// PLAN-NEXT: mk.wait @{{ready[0-9]}}[%{{.*}}, %[[J]]] count 1 {mk.lowering = #mk.lowering<producer>}
// PLAN-NEXT: mk.load {{.*}}{mk.lowering = #mk.lowering<fused>}
// PLAN-NEXT: mk.attention_block {{.*}} causal {mk.lowering = #mk.lowering<mma>}
// PLAN: mk.broadcast {{.*}}{mk.lowering = #mk.lowering<registers>}
// PLAN-NEXT: mk.div {{.*}}{mk.lowering = #mk.lowering<registers>}
// PLAN-NEXT: mk.convert {{.*}}{mk.lowering = #mk.lowering<elide>}
// PLAN: mk.store {{.*}}{mk.lowering = #mk.lowering<store>}
// PLAN: mk.role intra_transfer

// ENGINE: mk::AttentionEngine<mk::AttentionConfig<mk::bf16, 128, 128, 2>> [[E:v[0-9]+]] =
// ENGINE: if (mk::attention_is_producer()) {
// ENGINE-NEXT: mk::attention_producer_begin([[E]]);
// ENGINE-NEXT: if (mk::attention_loader()) {
// ENGINE: mk::producer_wait_arrivals(
// ENGINE: mk::attention_load_q([[E]],
// ENGINE: for (size_t [[J:[a-z][0-9]+]] =
// ENGINE: mk::producer_wait_arrivals(
// ENGINE: mk::producer_wait_arrivals(
// ENGINE: mk::attention_load_kv([[E]],
// ENGINE: } else {
// ENGINE-NEXT: mk::attention_consumer_begin([[E]]);
// ENGINE: mk::AttentionAccumulator<mk::AttentionConfig<mk::bf16, 128, 128, 2>> [[S:v[0-9]+]] = mk::attention_begin([[E]]);
// ENGINE: mk::attention_fold([[E]], [[S]], {{.*}}, true,
// ENGINE-NOT: mk::attention_fold
// ENGINE: mk::tensor_map(
// ENGINE: mk::attention_store<mk::bf16>([[E]], [[S]],
// ENGINE: mk::attention_finish([[E]]);
// ENGINE: /* tensor_maps */ {{.*}}{0, MK_MAP_LOCAL, MK_MAP_ELEMENT_BF16, 3, {128ull, 512ull, 2ull}, {64, 128, 1}, 128}

// Shards of 1000 keys: tiles numbered shard after shard (8 a shard, the last of 104 rows), on the
// engine; block j of a causal step is seen where j <= i.
// SHARDS: mk.role compute ctas {{[0-9]+}} attributes {mk.attention_engine = #mk.attention_engine<element = bf16, head_dim = 128, stages = 2>}
// SHARDS: %lo, %hi = mk.shard_range
// SHARDS-NEXT: %c1{{.*}} = arith.constant 1 : index
// SHARDS-NEXT: %[[NEXT:.*]] = arith.addi %[[I:.*]], %c1
// SHARDS-NEXT: %[[BEFORE:.*]] = arith.cmpi slt, %hi, %[[NEXT]]
// SHARDS-NEXT: %[[SEEN:.*]] = arith.select %[[BEFORE]], %hi, %[[NEXT]]
// SHARDS-NEXT: scf.for %[[J:.*]] = %lo to %[[SEEN]]
// SHARDS: mk.attention_block {{.*}} at (%[[I]], %[[J]]) causal {mk.lowering = #mk.lowering<mma>}
// SHARDS-CUBIN-COUNT-4: mkc: ring_attention_causal: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// The zigzag layout (2 ranks, 4 chunks of 4 tiles): the mask takes the tiles' places in the
// sequence, and a causal step's blocks stop after those of the source's chunks c and 3 - c that
// the query tile sees; the consumers fold each chunk with one call site.
// ZIGZAG: mk.role compute ctas {{[0-9]+}} attributes {mk.attention_engine = #mk.attention_engine<element = bf16, head_dim = 128, stages = 2>}
// ZIGZAG: %[[QS:.*]] = mk.sequence_tile %arg0 tile 128 of %{{.*}} : !mk.tensor<[1, 2, 2048, 128], bf16, shard 2 over world zigzag>
// ZIGZAG: %lo, %hi = mk.shard_range %arg1 tile 128 of %[[SRC:.*]] : !mk.tensor<[1, 2, 2048, 128], bf16, shard 2 over world zigzag>
// ZIGZAG: arith.subi %c3{{.*}}, %[[SRC]] : index
// ZIGZAG: %[[SEEN:.*]] = arith.addi %lo, %{{.*}} : index
// ZIGZAG-NEXT: scf.for %[[J:.*]] = %lo to %[[SEEN]]
// ZIGZAG-NEXT: %[[KS:.*]] = mk.sequence_tile %arg1 tile 128 of %[[J]]
// ZIGZAG: mk.attention_block {{.*}} at (%[[QS]], %[[KS]]) causal {mk.lowering = #mk.lowering<mma>}
// ZIGZAG-CUDA: mk::attention_consumer_begin(
// ZIGZAG-CUDA: for (size_t [[P:k[0-9]+]] = 0; [[P]] < (2); [[P]] += 1) {
// ZIGZAG-CUDA: mk::attention_fold(
// ZIGZAG-CUDA-NOT: mk::attention_fold(
// ZIGZAG-CUBIN-COUNT-4: mkc: ring_attention_zigzag: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads

// At 1x1 the op reads its own shards: no transfer roles; the tile with the sequence's last 56
// keys masks the rest.
// ONE-NOT: mk::copy_region
// ONE: mk::attention_fold({{.*}}, false,
// ONE: /* sm_split */ {{[{][{]}}"compute", {{[0-9]+}}, 0}}

// With one source, causal tiles are claimed from a counter, longest first, by as many CTAs as
// the launch gives the role.
// CLAIM: size_t [[CTAS:v[0-9]+]] = mk::role_ctas({{v[0-9]+}}, 0);
// CLAIM: if (mk::attention_loader()) {
// CLAIM: mk::attention_claim_tile({{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, [[CTAS]]);
// CLAIM: do {
// CLAIM: mk::attention_load_q(
// CLAIM: mk::attention_claim_tile(
// CLAIM: } while (
// CLAIM: mk::attention_consumer_begin(
// CLAIM-NEXT: mk::attention_next_tile(
// CLAIM: /* flag_words */ 1,
