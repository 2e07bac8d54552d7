// RUN: mk-opt %s -split-input-file -mk-expand-collectives | FileCheck %s
// RUN: mk-opt %s -split-input-file -mk-expand-collectives=in-place-all-reduce=false | FileCheck %s --check-prefix=ROLES
// RUN: mk-opt %s -split-input-file -mk-expand-collectives=all-reduce-copy-engine=true | FileCheck %s --check-prefix=ENGINE
// RUN: mk-opt %s -split-input-file -mk-expand-collectives=one-shot-all-reduce=true | FileCheck %s --check-prefix=ONESHOT
// RUN: mk-opt %s -split-input-file -mk-expand-collectives=one-shot-all-reduce=false | FileCheck %s --check-prefix=TWOHOPS

// mk-expand-collectives turns collective intents into hierarchical transfers in roles: NVLink
// within the node first, then rail-aligned RDMA between the same GPU index of each node, then
// back within the node. Waits and signals come later (mk-insert-signals).

!A = !mk.tensor<[1024, 1024], bf16, shard 1 over world>
!B = !mk.tensor<[1024, 1024], bf16, shard 0 over world>
!C = !mk.tensor<[1024, 1024], bf16, replicated>

// All-reduce on 2 nodes x 4 GPUs: the compute role hands each tile to its owner GPU (round-robin)
// in the slot of the sender; the owner sums the 4 slots, keeps the node partial in its node's
// slot and sends it to the same GPU of the other node; there the 2 node partials are summed and
// republished to every GPU of the node. Both stages are tile-major and hold only the owner's
// tiles: each slot a [tiles / 4 * 128, 256] matrix whose tile row (m * 4 + n) / 4 holds tile
// (m, n) (indices count tiles), so that a tile crosses the network in one piece and a GPU stages
// a quarter of C per slot.
// CHECK-LABEL: mk.program @all_reduce_2x4
// CHECK-DAG: %[[NODES:.+]] = mk.buffer : !mk.tensor<[2, 1024, 256], bf16, symmetric>
// CHECK-DAG: %[[STAGE:.+]] = mk.buffer : !mk.tensor<[4, 1024, 256], bf16, symmetric>
// CHECK: mk.role compute {
// CHECK: %{{.*}}, %[[OWNER:.+]] = mk.owner %{{.*}}[%[[M:.+]], %[[N:.+]]] tile [128, 256]
// CHECK: %{{.*}}, %[[ME:.+]] = mk.place
// CHECK: %[[BEFORE:.+]] = arith.muli %[[M]], %c4
// CHECK: %[[TILE:.+]] = arith.addi %[[BEFORE]], %[[N]]
// CHECK: %[[ROW:.+]] = arith.divsi %[[TILE]], %c4
// CHECK: mk.put %{{.*}}, %[[STAGE]][%[[ME]], %[[ROW]], %c0] at gpu %[[OWNER]] via nvlink_store
// CHECK: mk.role intra_reduce {
// CHECK: mk.tile_grid {{.*}} distribute gpus
// CHECK: mk.accumulate sum %[[STAGE]][:, %{{.*}}, %c0]
// CHECK: %[[BEFORE:.+]] = arith.muli %[[M:.+]], %c4
// CHECK: %[[TILE:.+]] = arith.addi %[[BEFORE]], %[[N:[^ ]+]]
// CHECK: %[[FIRST:.+]] = arith.divsi %[[TILE]], %c4
// CHECK: mk.store %{{.*}}, %[[NODES]][%[[MYNODE:[^,]+]], %[[FIRST]], %c0]
// CHECK: scf.for
// CHECK: mk.copy %[[NODES]][%[[MYNODE]], %[[FIRST]], %c0] -> %[[NODES]][%[[MYNODE]], %[[FIRST]], %c0] at node %{{.*}} via rdma_proxy tile [128, 256]
// CHECK: mk.role inter_reduce {
// CHECK: mk.tile_grid {{.*}} distribute gpus
// CHECK: mk.accumulate sum %[[NODES]][:, %{{.*}}, %c0]
// CHECK: scf.for
// CHECK: mk.put %{{.*}} at gpu %{{.*}} via nvlink_store
// CHECK-NOT: mk.all_reduce
mk.program @all_reduce_2x4 [] mesh <2x4> (%a: !A, %b: !B, %c: !C) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] : !C {
    %acc = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64} : !A, !B -> !mk.tile<[128, 256], f32>
    %t = mk.convert %acc : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %t into %c[%m, %n] : !mk.tile<[128, 256], bf16>, !C
  }
}

// -----

!A = !mk.tensor<[1024, 1024], bf16, shard 1 over world>
!B = !mk.tensor<[1024, 1024], bf16, shard 0 over world>
!C = !mk.tensor<[1024, 1024], bf16, replicated>

// One node of two GPUs: in place, in the compute role. Each GPU starts with its own slice of tile
// rows and puts those tiles to both GPUs, then raises the tile's flag on the other; there the
// other tiles wait for it and add into both copies.
// CHECK-LABEL: mk.program @all_reduce_1x2
// CHECK: mk.flags @[[INIT:initialized0]] [8, 4]
// CHECK-NOT: mk.buffer
// CHECK: mk.role compute {
// CHECK: mk.tile_grid (%[[M:.+]], %[[N:.+]]) over %{{.*}} order <row_major, local_first>
// CHECK: %{{.*}}, %[[FIRST:.+]] = mk.owner %{{.*}}[%[[M]], %[[N]]] tile [128, 256] row_slices
// CHECK: %{{.*}}, %[[ME:.+]] = mk.place
// CHECK: %[[MINE:.+]] = arith.cmpi eq, %[[FIRST]], %[[ME]]
// CHECK: scf.if %[[MINE]] {
// CHECK: scf.for
// CHECK: mk.put %{{.*}}, %{{.*}}[%[[M]], %[[N]]] at gpu %{{.*}} via nvlink_store :
// CHECK: mk.signal @[[INIT]][%[[M]], %[[N]]] at gpu
// CHECK: } else {
// CHECK-NEXT: mk.wait @[[INIT]][%[[M]], %[[N]]] count 1
// CHECK: scf.for
// CHECK: mk.put %{{.*}}, %{{.*}}[%[[M]], %[[N]]] at gpu %{{.*}} via nvlink_store combine sum
// CHECK-NOT: mk.role
// CHECK-NOT: mk.all_reduce

// With all-reduce-copy-engine, no SM writes to the other GPU. The 8 tile rows split into each
// GPU's slice of 4, one band each (no order groups: bands of up to 8 rows, and of up to 8 tile
// columns: here all 4). The first writer
// stores its tile and counts it into its band's `ready`; the second waits for the band to have
// arrived, adds its tile into its own copy and counts it into `summed`. After the tiles, every
// tile waits for its band's `final`. The copies: each band to the other GPU once it is ready
// (signalling `arrived`), then its sums back (signalling `final`), 4 x 4 tiles each.
// ENGINE-LABEL: mk.program @all_reduce_1x2
// ENGINE-DAG: mk.flags @[[READY:band_ready[0-9]+]] [2]
// ENGINE-DAG: mk.flags @[[ARRIVED:band_arrived[0-9]+]] [2]
// ENGINE-DAG: mk.flags @[[SUMMED:band_summed[0-9]+]] [2]
// ENGINE-DAG: mk.flags @[[FINAL:band_final[0-9]+]] [2]
// ENGINE-NOT: mk.buffer
// ENGINE: mk.role compute {
// ENGINE: mk.tile_grid (%[[M:.+]], %[[N:.+]]) over %{{.*}} order <row_major, local_first>
// ENGINE: %{{.*}}, %[[OWNER:.+]] = mk.owner %{{.*}}[%[[M]], %[[N]]] tile [128, 256] row_slices
// ENGINE: %{{.*}}, %[[ME:.+]] = mk.place
// ENGINE: %[[MINE:.+]] = arith.cmpi eq, %[[OWNER]], %[[ME]]
// ENGINE: scf.if %[[MINE]] {
// ENGINE-NEXT: mk.store %{{.*}}, %{{.*}}[%[[M]], %[[N]]] :
// ENGINE-NEXT: mk.signal @[[READY]][%[[BAND:.+]]] at gpu %[[ME]] via nvlink_store
// ENGINE-NEXT: } else {
// ENGINE-NEXT: mk.wait @[[ARRIVED]][%[[BAND]]] count 1
// ENGINE-NEXT: mk.put %{{.*}}, %{{.*}}[%[[M]], %[[N]]] combine sum :
// ENGINE-NEXT: mk.signal @[[SUMMED]][%[[BAND]]] at gpu %[[ME]] via nvlink_store
// The owner's tiles wait for their sums; the other GPU's are its own adds.
// ENGINE: mk.tile_grid (%[[WM:.+]], %[[WN:.+]]) over
// ENGINE: %{{.*}}, %[[WOWNER:.+]] = mk.owner %{{.*}}[%[[WM]], %[[WN]]] tile [128, 256] row_slices
// ENGINE: %{{.*}}, %[[WME:.+]] = mk.place
// ENGINE: %[[OWNED:.+]] = arith.cmpi eq, %[[WOWNER]], %[[WME]]
// ENGINE: scf.if %[[OWNED]] {
// ENGINE: mk.wait @[[FINAL]][%{{.*}}] count 1
// ENGINE-NEXT: }
// ENGINE: mk.engine_copy %{{.*}} rows [0, 512] cols [0, 1024] from gpu 0 to gpu 1 after @[[READY]][0] count 16 signal @[[ARRIVED]][0]
// ENGINE-NEXT: mk.engine_copy %{{.*}} rows [512, 1024] cols [0, 1024] from gpu 1 to gpu 0 after @[[READY]][1] count 16 signal @[[ARRIVED]][1]
// ENGINE-NEXT: mk.engine_copy %{{.*}} rows [0, 512] cols [0, 1024] from gpu 1 to gpu 0 after @[[SUMMED]][0] count 16 signal @[[FINAL]][0]
// ENGINE-NEXT: mk.engine_copy %{{.*}} rows [512, 1024] cols [0, 1024] from gpu 0 to gpu 1 after @[[SUMMED]][1] count 16 signal @[[FINAL]][1]
// ENGINE-NOT: mk.all_reduce

// With in-place-all-reduce=false, the owner sums the slots and republishes the tile.
// ROLES-LABEL: mk.program @all_reduce_1x2
// ROLES: mk.role compute
// ROLES-NOT: combine
// ROLES: mk.role intra_reduce
// ROLES-NOT: rdma_proxy
// ROLES-NOT: mk.role inter_reduce
mk.program @all_reduce_1x2 [] mesh <1x2> (%a: !A, %b: !B, %c: !C) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] : !C {
    %acc = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64} : !A, !B -> !mk.tile<[128, 256], f32>
    %t = mk.convert %acc : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %t into %c[%m, %n] : !mk.tile<[128, 256], bf16>, !C
  }
}

// -----

!A = !mk.tensor<[1024, 1024], bf16, shard 1 over world>
!B = !mk.tensor<[1024, 1024], bf16, shard 0 over world>
!C = !mk.tensor<[1024, 1024], bf16, replicated>

// One GPU per node: no NVLink step; the compute role sends its partial over the network itself,
// and the sum is stored where it is made.
// CHECK-LABEL: mk.program @all_reduce_2x1
// ROLES-LABEL: mk.program @all_reduce_2x1
// CHECK: mk.role compute
// CHECK: mk.copy {{.*}} at node %{{.*}} via rdma_proxy
// CHECK-NOT: mk.role intra_reduce
// CHECK: mk.role inter_reduce
// CHECK: mk.store
// CHECK-NOT: nvlink
mk.program @all_reduce_2x1 [] mesh <2x1> (%a: !A, %b: !B, %c: !C) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] : !C {
    %acc = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64} : !A, !B -> !mk.tile<[128, 256], f32>
    %t = mk.convert %acc : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %t into %c[%m, %n] : !mk.tile<[128, 256], bf16>, !C
  }
}

// -----

!A = !mk.tensor<[1024, 1024], bf16, shard 1 over world>
!B = !mk.tensor<[1024, 1024], bf16, shard 0 over world>
!C = !mk.tensor<[1024, 1024], bf16, shard 0 over world>

// Reduce-scatter: the node partial goes only to the owner's node (when it is another), which
// stores the sum in its shard.
// CHECK-LABEL: mk.program @reduce_scatter_2x4
// CHECK: mk.role compute
// CHECK: mk.tile_grid {{.*}} global tiles
// CHECK: mk.put {{.*}} at gpu
// CHECK: mk.role intra_reduce
// CHECK: mk.tile_grid {{.*}} global tiles [128, 256] distribute gpus
// CHECK: %[[ON:.+]], %{{.*}} = mk.owner
// CHECK: scf.if
// CHECK: mk.copy {{.*}} at node %[[ON]] via rdma_proxy
// CHECK: mk.role inter_reduce
// CHECK: mk.accumulate sum
// CHECK: mk.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : !mk.tile<[128, 256], bf16>, !mk.tensor<[1024, 1024], bf16, shard 0 over world>
mk.program @reduce_scatter_2x4 [] mesh <2x4> (%a: !A, %b: !B, %c: !C) {
  mk.tile_grid (%m, %n) over %c global tiles [128, 256] : !C {
    %acc = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64} : !A, !B -> !mk.tile<[128, 256], f32>
    %t = mk.convert %acc : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.reduce_scatter sum %t into %c[%m, %n] : !mk.tile<[128, 256], bf16>, !C
  }
}

// -----

!A = !mk.tensor<[1024, 512], bf16, shard 0 over world>
!G = !mk.tensor<[1024, 512], bf16, replicated>
!B = !mk.tensor<[512, 1024], bf16, shard 1 over world>
!C = !mk.tensor<[1024, 1024], bf16, shard 1 over world>

// All-gather: each rank copies its own shard's chunks to every GPU of its node and to its rail
// peer; what arrives over the rail is republished to the node's other GPUs. The consumer reads
// the gathered buffer.
// CHECK-LABEL: mk.program @all_gather_2x4
// CHECK: %[[G:.+]] = mk.buffer : !mk.tensor<[1024, 512], bf16, symmetric>
// CHECK: mk.role compute
// CHECK: mk.matmul %[[G]][
// CHECK: mk.role intra_transfer
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} tiles [128, :]
// CHECK: mk.copy %{{.*}}[%{{.*}}, :] -> %[[G]][%{{.*}}, :] at gpu %{{.*}} via nvlink_bulk tile [128, 512]
// CHECK: mk.copy %{{.*}}[%{{.*}}, :] -> %[[G]][%{{.*}}, :] at node %{{.*}} via rdma_proxy tile [128, 512]
// CHECK: mk.role republish
// CHECK: mk.tile_grid (%{{.*}}, %{{.*}}) over %{{.*}} held_by %{{.*}} tiles [128, :]
// CHECK: mk.copy %[[G]][%{{.*}}, :] -> %[[G]][%{{.*}}, :] at gpu %{{.*}} via nvlink_bulk
mk.program @all_gather_2x4 [] mesh <2x4> (%a: !A, %b: !B, %c: !C) {
  %g = mk.all_gather %a {chunk = array<i64: 128, 512>} : !A -> !G
  mk.tile_grid (%m, %n) over %c tiles [128, 128] order <swizzle 8, local_first> : !C {
    %acc = mk.matmul %g[%m, :], %b[:, %n] {k_tile = 64} : !G, !B -> !mk.tile<[128, 128], f32>
  }
}

// -----

!K = !mk.tensor<[2, 4096, 128], bf16, shard 1 over world>

// A ring shift gathers the shards like an all-gather, and the body becomes a loop over the
// sources: this rank first, then its node, then the other nodes.
// CHECK-LABEL: mk.program @ring_2x4
// CHECK: %[[KALL:.+]] = mk.buffer : !mk.tensor<[2, 4096, 128], bf16, symmetric>
// CHECK: scf.for %[[STEP:.+]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// CHECK: mk.shard_range %{{.*}} tile 128 of
// CHECK: mk.load %[[KALL]][
// CHECK-NOT: mk.ring_shift
mk.program @ring_2x4 [] mesh <2x4> (%k: !K) {
  mk.tile_grid (%b, %i, %d) over %k tiles [1, 128, :] : !K {
    %zero = arith.constant 0.0 : f32
    %init = mk.splat %zero : f32 -> !mk.tile<[128, 128], f32>
    %r = mk.ring_shift %k over world iter_args(%init : !mk.tile<[128, 128], f32>) : !K -> !mk.tile<[128, 128], f32> {
    ^bb0(%src: index, %shard: !K, %acc: !mk.tile<[128, 128], f32>):
      %lo, %hi = mk.shard_range %shard tile 128 of %src : !K
      %t = mk.load %shard[%b, %lo, :] : !K -> !mk.tile<[128, 128], bf16>
      %f = mk.convert %t : !mk.tile<[128, 128], bf16> -> !mk.tile<[128, 128], f32>
      %s = mk.add %acc, %f : !mk.tile<[128, 128], f32>
      mk.yield %s : !mk.tile<[128, 128], f32>
    }
  }
}

// -----

!X = !mk.tensor<[1024, 256], bf16, shard 0 over world>
!R = !mk.tensor<[1024, 2], i32, shard 0 over world>
!W = !mk.tensor<[1024, 2], f32, shard 0 over world>
!Xe = !mk.tensor<[16, 256, 256], bf16, shard 0 over world>
!Cn = !mk.tensor<[16], i32, shard 0 over world>
!O = !mk.tensor<[16, 256], i32, shard 0 over world>

// Across nodes, point to point and rail-aligned: each rank packs the rows bound for each other
// node and sends them, their routing, its census row and their count to its rail peer there,
// once; the rail peer passes the census row on to its node's GPUs and routes the rows as the
// source's own. Results come back to 2N regions: one per node for this rank's tokens, one per node
// for the copies a rail peer sent, which go back to it, one row a copy, once the node's compute
// CTAs are done.
// CHECK-LABEL: mk.program @moe_2x4
// CHECK: mk.flags @routing_returned [1]
// CHECK: mk.flags @routing_back [1]
// CHECK: mk.flags @routing_received [2]
// CHECK: %[[CENSUS:.+]] = mk.buffer : !mk.tensor<[8, 16], i32, symmetric>
// CHECK: %[[PACK:.+]] = mk.buffer : !mk.tensor<[256, 256], bf16, symmetric>
// CHECK: %[[PACKX:.+]] = mk.buffer : !mk.tensor<[256, 2], i32, symmetric>
// CHECK: %[[PACKED:.+]] = mk.buffer : !mk.tensor<[4], i32, symmetric>
// CHECK: %[[AT:.+]] = mk.buffer : !mk.tensor<[1024, 2], i32, shard 0 over world>
// CHECK: %[[RECEIVED:.+]] = mk.buffer : !mk.tensor<[4], i32, symmetric>
// CHECK: %[[RECV:.+]] = mk.buffer : !mk.tensor<[256, 256], bf16, symmetric>
// CHECK: %[[RECVX:.+]] = mk.buffer : !mk.tensor<[256, 2], i32, symmetric>
// CHECK: %[[RETURNED:.+]] = mk.buffer : !mk.tensor<[1024, 1, 256], bf16, symmetric>
// CHECK: mk.role compute {
// CHECK: mk.return_rows %{{.*}} into %[[RETURNED]]
// CHECK: mk.signal @routing_returned[%{{.*}}] at gpu %{{.*}} via nvlink_store
// CHECK: mk.single_cta {
// CHECK-NEXT: mk.wait @routing_returned[%{{.*}}] count 4 per_cta_of compute
// CHECK: mk.wait @routing_received[%[[SOURCE:.+]]] count 1
// CHECK: mk.send_rows %[[RETURNED]][%{{.*}}] -> %[[RETURNED]][%{{.*}}] count %[[RECEIVED]][%{{.*}}] at node %[[SOURCE]] via rdma_proxy
// CHECK-NEXT: mk.signal @routing_back[%{{.*}}] at node %[[SOURCE]] via rdma_proxy
// CHECK: mk.tile_grid
// CHECK-NEXT: mk.wait @routing_returned[%{{.*}}] count 4 per_cta_of compute
// CHECK-NEXT: mk.wait @routing_back[%{{.*}}] count 1
// CHECK-NEXT: mk.wait @routing_routed[%{{.*}}] count 1 per_cta_of dispatch
// CHECK-NEXT: mk.combine_returned %[[RETURNED]], %{{.*}} at %[[AT]]
// CHECK: mk.role dispatch {
// CHECK: mk.route_census %{{.*}} into %[[CENSUS]]
// CHECK: mk.route_pack %{{.*}}, %{{.*}} into %[[PACK]], %[[PACKX]], %[[PACKED]], %[[AT]] experts 16
// CHECK-NEXT: mk.signal @routing_packed[%{{.*}}]
// CHECK-NEXT: mk.single_cta {
// CHECK-NEXT: mk.wait @routing_packed[%{{.*}}] count 1 per_cta_of dispatch
// CHECK: mk.send_rows %[[CENSUS]][%[[ME:.+]]] -> %[[CENSUS]][%[[ME]]] at node %[[PEER:.+]] via rdma_proxy
// CHECK-NEXT: mk.send_rows %[[PACKED]][%[[PEER]]] -> %[[RECEIVED]][%{{.*}}] at node %[[PEER]] via rdma_proxy
// CHECK: mk.send_rows %[[PACKED]][%{{.*}}] -> %[[RECEIVED]][%{{.*}}] at node %[[PEER]] via rdma_proxy
// CHECK: mk.send_rows %[[PACK]][%{{.*}}] -> %[[RECV]][%{{.*}}] count %[[PACKED]][%[[PEER]]] at node %[[PEER]] via rdma_proxy
// CHECK-NEXT: mk.send_rows %[[PACKX]][%{{.*}}] -> %[[RECVX]][%{{.*}}] count %[[PACKED]][%[[PEER]]] at node %[[PEER]] via rdma_proxy
// CHECK-NEXT: mk.signal @routing_received[%{{.*}}] at node %[[PEER]] via rdma_proxy
// CHECK: mk.single_cta {
// CHECK: mk.wait @routing_received[%[[FROM:.+]]] count 1
// CHECK: mk.send_rows %[[CENSUS]][%{{.*}}] -> %[[CENSUS]][%{{.*}}] at gpu %{{.*}} via nvlink_store
// CHECK: mk.signal @routing_census[%{{.*}}] at gpu %{{.*}} via nvlink_store
// CHECK: mk.wait @routing_census[%{{.*}}] count 8
// CHECK: mk.route_counts %[[CENSUS]]
// CHECK: mk.route_rows %{{.*}}, %{{.*}}, %[[CENSUS]] into {{.*}} arrivals @routing_arrived :
// CHECK-NEXT: mk.signal @routing_routed[%{{.*}}]
// CHECK: mk.wait @routing_received[%[[FROM2:.+]]] count 1
// CHECK-NEXT: mk.route_rows %[[RECV]], %[[RECVX]], %[[CENSUS]] into {{.*}} arrivals @routing_arrived from node %[[FROM2]] count %[[RECEIVED]][%[[FROM2]]]
// CHECK-NOT: mk.dispatch
// CHECK-NOT: mk.combine {{.*}}routed
mk.program @moe_2x4 [] mesh <2x4> (%x: !X, %r: !R, %w: !W, %y: !X) {
  %xe, %count, %origin = mk.dispatch %x by %r : !X, !R -> !Xe, !Cn, !O
  mk.tile_grid (%e, %t, %n) over %xe tiles [1, 128, 256] rows %count : !Xe, !Cn {
    %rows = mk.load %xe[%e, %t, %n] : !Xe -> !mk.tile<[128, 256], bf16>
    %f = mk.convert %rows : !mk.tile<[128, 256], bf16> -> !mk.tile<[128, 256], f32>
    mk.combine %f from [%e, %t, %n] into %y routed %origin weighted %w : !mk.tile<[128, 256], f32>, !X, !O, !W
  }
}

// -----

!X = !mk.tensor<[1024, 256], bf16, shard 0 over world>
!R = !mk.tensor<[1024, 2], i32, shard 0 over world>
!W = !mk.tensor<[1024, 2], f32, shard 0 over world>
!Xe = !mk.tensor<[16, 256, 256], bf16, shard 0 over world>
!Cn = !mk.tensor<[16], i32, shard 0 over world>
!O = !mk.tensor<[16, 256], i32, shard 0 over world>

// On one node, point to point: a dispatch role counts each rank's copies into every GPU's census
// (one CTA), fills this rank's experts' row counts once every rank's census row is in, and sends
// each row to its expert's slot. The compute role waits for the row counts; each read of an
// expert's rows waits for every dispatch CTA of every rank to have sent them (once where several
// read them). Results go back to their tokens' slots, every compute CTA then tells every GPU, and a
// grid over the tokens sums each one's.
// CHECK-LABEL: mk.program @moe_1x2
// CHECK: mk.flags @routing_returned [1]
// CHECK: mk.flags @routing_census [1]
// CHECK: mk.flags @routing_counted [1]
// CHECK: mk.flags @routing_arrived [16]
// CHECK: mk.flags @routing_routed [1]
// CHECK: %[[CENSUS:.+]] = mk.buffer : !mk.tensor<[2, 16], i32, symmetric>
// CHECK: %[[ROUTED:.+]] = mk.buffer : !mk.tensor<[16, 256, 256], bf16, shard 0 over world>
// CHECK: %[[COUNTS:.+]] = mk.buffer : !mk.tensor<[16], i32, shard 0 over world>
// CHECK: %[[ORIGINS:.+]] = mk.buffer : !mk.tensor<[16, 256], i32, shard 0 over world>
// CHECK: %[[PLACEMENT:.+]] = mk.buffer : !mk.tensor<[1024, 2], i32, shard 0 over world>
// CHECK: %[[RETURNED:.+]] = mk.buffer : !mk.tensor<[1024, 2, 256], bf16, shard 0 over world>
// CHECK: mk.role compute {
// CHECK-NEXT: mk.wait @routing_counted[%{{.*}}] count 1
// CHECK-NEXT: mk.tile_grid (%[[E:.*]], %[[T:.*]], %[[N:.*]]) over %[[ROUTED]] tiles [1, 128, 256] rows %[[COUNTS]]
// CHECK-NEXT: mk.wait @routing_arrived[%[[E]]] count 2 per_cta_of dispatch
// CHECK-NEXT: mk.load %[[ROUTED]][%[[E]], %[[T]], %[[N]]]
// CHECK-NEXT: mk.matmul %[[ROUTED]][%[[E]], %[[T]], :]
// CHECK-NEXT: mk.matmul %[[ROUTED]][%[[E]], %[[T]], :]
// CHECK: %[[BACK:.+]] = mk.convert %{{.*}} : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
// CHECK-NEXT: mk.wait @routing_arrived[%[[E]]] count 2 per_cta_of dispatch
// CHECK-NEXT: mk.return_rows %[[BACK]], [%[[E]], %[[T]], %[[N]]] via %[[ORIGINS]], %[[COUNTS]] into %[[RETURNED]]
// CHECK: scf.for
// CHECK: mk.signal @routing_returned[%{{.*}}] at gpu %{{.*}} via nvlink_store
// CHECK: mk.tile_grid (%[[M:.*]], %[[C:.*]]) over %{{.*}} tiles [128, 256] masked
// CHECK-NEXT: mk.wait @routing_returned[%{{.*}}] count 2 per_cta_of compute
// CHECK-NEXT: mk.wait @routing_routed[%{{.*}}] count 1 per_cta_of dispatch
// CHECK-NEXT: mk.combine_returned %[[RETURNED]], %[[PLACEMENT]], %{{.*}} into %{{.*}}[%[[M]], %[[C]]] tile [128, 256]
// CHECK: mk.role dispatch {
// CHECK-NEXT: mk.single_cta {
// CHECK-NEXT: mk.route_census %{{.*}} into %[[CENSUS]]
// CHECK: mk.signal @routing_census[%{{.*}}] at gpu %{{.*}} via nvlink_store
// CHECK: mk.wait @routing_census[%{{.*}}] count 2
// CHECK-NEXT: mk.single_cta {
// CHECK-NEXT: mk.route_counts %[[CENSUS]] into %[[COUNTS]] capacity 256
// CHECK-NEXT: mk.signal @routing_counted[%{{.*}}]
// CHECK: mk.route_rows %{{.*}}, %{{.*}}, %[[CENSUS]] into %[[ROUTED]], %[[ORIGINS]], %[[PLACEMENT]] arrivals @routing_arrived
// CHECK-NEXT: mk.signal @routing_routed[%{{.*}}]
// CHECK-NOT: mk.dispatch
// CHECK-NOT: mk.combine {{.*}}routed
mk.program @moe_1x2 [] mesh <1x2> (%x: !X, %r: !R, %w: !W, %wg: !mk.tensor<[16, 256, 128], bf16, shard 0 over world>, %y: !X) {
  %xe, %count, %origin = mk.dispatch %x by %r : !X, !R -> !Xe, !Cn, !O
  mk.tile_grid (%e, %t, %n) over %xe tiles [1, 128, 256] rows %count : !Xe, !Cn {
    %rows = mk.load %xe[%e, %t, %n] : !Xe -> !mk.tile<[128, 256], bf16>
    %g = mk.matmul %xe[%e, %t, :], %wg[%e, :, %n] : !Xe, !mk.tensor<[16, 256, 128], bf16, shard 0 over world> -> !mk.tile<[128, 128], f32>
    %u = mk.matmul %xe[%e, %t, :], %wg[%e, :, %n] : !Xe, !mk.tensor<[16, 256, 128], bf16, shard 0 over world> -> !mk.tile<[128, 128], f32>
    %f = mk.convert %rows : !mk.tile<[128, 256], bf16> -> !mk.tile<[128, 256], f32>
    mk.combine %f from [%e, %t, %n] into %y routed %origin weighted %w : !mk.tile<[128, 256], f32>, !X, !O, !W
  }
}

// -----

!A = !mk.tensor<[256, 1024], bf16, shard 1 over world>
!B = !mk.tensor<[1024, 1024], bf16, shard 0 over world>
!C = !mk.tensor<[256, 1024], bf16, replicated>

// Four GPUs: a partial goes to the tile's owner, which sums the 4 slots and puts the sum to
// every GPU (two hops). In one shot, each partial goes to its slot on every GPU, and every GPU
// sums every tile for itself: a reduce grid over all the tiles, the sum stored where it is made.
// (Slots tile-major: tile t of the 8 at rows 128 t.) By default the cost model chooses: 512 KB
// of output is one shot (one 3 us hop against 1.5 x 512 KB more of each GPU's sends at
// 370 GB/s, 2.1 us).
// CHECK-LABEL: mk.program @all_reduce_1x4
// CHECK-NOT: mk.owner
// CHECK: mk.role intra_reduce
// CHECK-NOT: distribute
// CHECK: mk.accumulate sum
// TWOHOPS-LABEL: mk.program @all_reduce_1x4
// TWOHOPS: mk.owner
// TWOHOPS: mk.put {{.*}} at gpu
// TWOHOPS: mk.role intra_reduce
// TWOHOPS: mk.tile_grid {{.*}} distribute gpus
// TWOHOPS: mk.accumulate sum
// TWOHOPS: scf.for
// TWOHOPS: mk.put {{.*}} at gpu
// ONESHOT-LABEL: mk.program @all_reduce_1x4
// ONESHOT: %[[STAGE:.+]] = mk.buffer : !mk.tensor<[4, 1024, 256], bf16, symmetric>
// ONESHOT: mk.role compute
// ONESHOT-NOT: mk.owner
// ONESHOT: %{{.*}}, %[[GPU:.+]] = mk.place
// ONESHOT: scf.for
// ONESHOT: mk.put %{{.*}}, %[[STAGE]][%[[GPU]], %{{.*}}, %{{.*}}] at gpu
// ONESHOT: mk.role intra_reduce
// ONESHOT-NOT: distribute
// ONESHOT: mk.accumulate sum %[[STAGE]][:
// ONESHOT-NOT: mk.put
// ONESHOT: mk.store
mk.program @all_reduce_1x4 [] mesh <1x4> (%a: !A, %b: !B, %c: !C) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] : !C {
    %acc = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64} : !A, !B -> !mk.tile<[128, 256], f32>
    %t = mk.convert %acc : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %t into %c[%m, %n] : !mk.tile<[128, 256], bf16>, !C
  }
}

// -----

!A = !mk.tensor<[2048, 1024], bf16, shard 1 over world>
!B = !mk.tensor<[1024, 1024], bf16, shard 0 over world>
!C = !mk.tensor<[2048, 1024], bf16, replicated>

// 4 MB of output: the bytes outweigh a hop (17 us more of sends against 3 us), two hops.
// CHECK-LABEL: mk.program @all_reduce_1x4_large
// CHECK: mk.owner
// CHECK: mk.tile_grid {{.*}} distribute gpus
mk.program @all_reduce_1x4_large [] mesh <1x4> (%a: !A, %b: !B, %c: !C) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] : !C {
    %acc = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 64} : !A, !B -> !mk.tile<[128, 256], f32>
    %t = mk.convert %acc : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %t into %c[%m, %n] : !mk.tile<[128, 256], bf16>, !C
  }
}
