// RUN: mk-opt %s -split-input-file -mk-insert-signals | FileCheck %s

// mk-insert-signals orders every transfer with the reads of what it wrote: one flag per tile of
// the written tensor, a signal after each write to the rank written (over the same link, so that
// it follows the data), and a wait before each read for as many arrivals as the read combines.
// Each launch also starts with an announcement to the node and the rail, which every tile waits
// for before its first write that those ranks can see.

// All-reduce on 2 x 4: the staging slots and the node partials each get a flag per tile; the owner
// waits for 4 partials, then for 2 node partials; signals follow puts within the node and RDMA
// copies across nodes. The output, which peers put, gets a flag per tile too: the role that puts
// waits, after its own tiles, for every tile of its rank.
// CHECK-LABEL: mk.program @all_reduce_2x4
// CHECK-DAG: mk.flags @launched [1]
// CHECK-DAG: mk.flags @[[ARRIVED:arrived[0-9]+]] [8, 4]
// CHECK-DAG: mk.flags @[[NODE_READY:ready[0-9]+]] [8, 4]
// CHECK-DAG: mk.flags @[[STAGE_READY:ready[0-9]+]] [8, 4]
// CHECK: mk.role compute ctas
// CHECK-NEXT: mk.single_cta {
// CHECK: mk.signal @launched[%{{.*}}] at gpu %{{.*}} via nvlink_store
// CHECK: mk.signal @launched[%{{.*}}] at node %{{.*}} via rdma_proxy
// CHECK: mk.tile_grid
// CHECK: mk.wait @launched[%{{.*}}] count 5
// CHECK-NEXT: mk.put %{{.*}} at gpu %[[OWNER:.+]] via nvlink_store
// CHECK-NEXT: mk.signal @[[STAGE_READY]][%{{.*}}, %{{.*}}] at gpu %[[OWNER]] via nvlink_store
// CHECK: mk.role intra_reduce
// CHECK: mk.wait @[[STAGE_READY]][%{{.*}}, %{{.*}}] count 4
// CHECK-NEXT: mk.accumulate sum
// CHECK: mk.store
// CHECK-NEXT: mk.signal @[[NODE_READY]][%{{.*}}, %{{.*}}]{{$}}
// CHECK: mk.copy {{.*}} at node %[[PEER:.+]] via rdma_proxy
// CHECK-NEXT: mk.signal @[[NODE_READY]][%{{.*}}, %{{.*}}] at node %[[PEER]] via rdma_proxy
// CHECK: mk.role inter_reduce
// CHECK: mk.wait @[[NODE_READY]][%{{.*}}, %{{.*}}] count 2
// CHECK-NEXT: mk.accumulate sum
// CHECK: mk.put %{{.*}}, %arg2[%arg3, %arg4] at gpu %[[GPU:.+]] via nvlink_store
// CHECK-NEXT: mk.signal @[[ARRIVED]][%arg3, %arg4] at gpu %[[GPU]] via nvlink_store
// CHECK: mk.tile_grid (%[[M:.+]], %[[N:.+]]) over %arg2 tiles [128, 256] :
// CHECK-NEXT: mk.wait @[[ARRIVED]][%[[M]], %[[N]]] count 1
// CHECK-NEXT: }

  mk.program @all_reduce_2x4 [] mesh <2x4> (%arg0: !mk.tensor<[1024, 1024], bf16, shard 1 over world>, %arg1: !mk.tensor<[1024, 1024], bf16, shard 0 over world>, %arg2: !mk.tensor<[1024, 1024], bf16, replicated>) grid 132 {
    %c4 = arith.constant 4 : index
    %c5 = arith.constant 5 : index
    %c2 = arith.constant 2 : index
    %c1 = arith.constant 1 : index
    %0 = mk.buffer : !mk.tensor<[2, 1024, 1024], bf16, symmetric>
    %1 = mk.buffer : !mk.tensor<[4, 1024, 1024], bf16, symmetric>
    mk.role compute ctas 102 {
      mk.tile_grid (%arg3, %arg4) over %arg2 tiles [128, 256] : !mk.tensor<[1024, 1024], bf16, replicated> {
        %2 = mk.matmul %arg0[%arg3, :], %arg1[:, %arg4] {k_tile = 64 : i64} : !mk.tensor<[1024, 1024], bf16, shard 1 over world>, !mk.tensor<[1024, 1024], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
        %3 = mk.convert %2 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
        %node, %gpu = mk.owner %arg2[%arg3, %arg4] tile [128, 256] : !mk.tensor<[1024, 1024], bf16, replicated>
        %node_0, %gpu_1 = mk.place : index, index
        mk.put %3, %1[%gpu_1, %arg3, %arg4] at gpu %gpu via nvlink_store : !mk.tile<[128, 256], bf16>, !mk.tensor<[4, 1024, 1024], bf16, symmetric>
      }
    }
    mk.role intra_reduce ctas 6 {
      mk.tile_grid (%arg3, %arg4) over %arg2 tiles [128, 256] distribute gpus : !mk.tensor<[1024, 1024], bf16, replicated> {
        %2 = mk.accumulate sum %1[:, %arg3, %arg4] : !mk.tensor<[4, 1024, 1024], bf16, symmetric> -> !mk.tile<[128, 256], f32>
        %3 = mk.convert %2 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
        %node, %gpu = mk.place : index, index
        mk.store %3, %0[%node, %arg3, %arg4] : !mk.tile<[128, 256], bf16>, !mk.tensor<[2, 1024, 1024], bf16, symmetric>
        %node_0, %gpu_1 = mk.place : index, index
        scf.for %arg5 = %c1 to %c2 step %c1 {
          %4 = arith.addi %node_0, %arg5 : index
          %5 = arith.remsi %4, %c2 : index
          mk.copy %0[%node, %arg3, %arg4] -> %0[%node, %arg3, %arg4] at node %5 via rdma_proxy tile [128, 256] : !mk.tensor<[2, 1024, 1024], bf16, symmetric>, !mk.tensor<[2, 1024, 1024], bf16, symmetric>
        }
      }
    }
    mk.role inter_reduce ctas 24 {
      mk.tile_grid (%arg3, %arg4) over %arg2 tiles [128, 256] distribute gpus : !mk.tensor<[1024, 1024], bf16, replicated> {
        %2 = mk.accumulate sum %0[:, %arg3, %arg4] : !mk.tensor<[2, 1024, 1024], bf16, symmetric> -> !mk.tile<[128, 256], f32>
        %3 = mk.convert %2 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
        %node, %gpu = mk.place : index, index
        scf.for %arg5 = %c1 to %c5 step %c1 {
          %4 = arith.addi %gpu, %arg5 : index
          %5 = arith.remsi %4, %c4 : index
          mk.put %3, %arg2[%arg3, %arg4] at gpu %5 via nvlink_store : !mk.tile<[128, 256], bf16>, !mk.tensor<[1024, 1024], bf16, replicated>
        }
      }
    }
  }


// -----

// All-gather on 2 x 4: a flag per chunk of rows of the gathered buffer, one arrival each; the
// consumer's matmul and the republishing copy wait for it (hoisted out of the loop over GPUs).
// Bulk copies are followed by NVLink-store signals.
// CHECK-LABEL: mk.program @all_gather_2x4
// CHECK: mk.flags @[[READY:ready[0-9]+]] [8]
// CHECK: mk.wait @[[READY]][%[[M:.+]]] count 1
// CHECK-NEXT: mk.matmul
// CHECK: mk.copy {{.*}} via nvlink_bulk
// CHECK-NEXT: mk.signal @[[READY]][%{{.*}}] at gpu %{{.*}} via nvlink_store
// CHECK: mk.role republish
// CHECK: mk.wait @[[READY]][%{{.*}}] count 1
// CHECK: mk.wait @launched
// CHECK-NEXT: scf.for

  mk.program @all_gather_2x4 [] mesh <2x4> (%arg0: !mk.tensor<[1024, 512], bf16, shard 0 over world>, %arg1: !mk.tensor<[512, 1024], bf16, shard 1 over world>, %arg2: !mk.tensor<[1024, 1024], bf16, shard 1 over world>) grid 132 {
    %c2 = arith.constant 2 : index
    %c4 = arith.constant 4 : index
    %c5 = arith.constant 5 : index
    %c1 = arith.constant 1 : index
    %0 = mk.buffer : !mk.tensor<[1024, 512], bf16, symmetric>
    mk.role compute ctas 130 {
      mk.tile_grid (%arg3, %arg4) over %arg2 tiles [128, 128] order <swizzle 8, local_first> : !mk.tensor<[1024, 1024], bf16, shard 1 over world> {
        %1 = mk.matmul %0[%arg3, :], %arg1[:, %arg4] {k_tile = 64 : i64} : !mk.tensor<[1024, 512], bf16, symmetric>, !mk.tensor<[512, 1024], bf16, shard 1 over world> -> !mk.tile<[128, 128], f32>
      }
    }
    mk.role intra_transfer ctas 1 {
      mk.tile_grid (%arg3, %arg4) over %arg0 tiles [128, :] : !mk.tensor<[1024, 512], bf16, shard 0 over world> {
        %node, %gpu = mk.place : index, index
        scf.for %arg5 = %c1 to %c5 step %c1 {
          %1 = arith.addi %gpu, %arg5 : index
          %2 = arith.remsi %1, %c4 : index
          mk.copy %arg0[%arg3, :] -> %0[%arg3, :] at gpu %2 via nvlink_bulk tile [128, 512] : !mk.tensor<[1024, 512], bf16, shard 0 over world>, !mk.tensor<[1024, 512], bf16, symmetric>
        }
        %node_0, %gpu_1 = mk.place : index, index
        scf.for %arg5 = %c1 to %c2 step %c1 {
          %1 = arith.addi %node_0, %arg5 : index
          %2 = arith.remsi %1, %c2 : index
          mk.copy %arg0[%arg3, :] -> %0[%arg3, :] at node %2 via rdma_proxy tile [128, 512] : !mk.tensor<[1024, 512], bf16, shard 0 over world>, !mk.tensor<[1024, 512], bf16, symmetric>
        }
      }
    }
    mk.role republish ctas 1 {
      %node, %gpu = mk.place : index, index
      scf.for %arg3 = %c1 to %c2 step %c1 {
        %1 = arith.addi %node, %arg3 : index
        %2 = arith.remsi %1, %c2 : index
        %node_0, %gpu_1 = mk.place : index, index
        %3 = arith.muli %2, %c4 : index
        %4 = arith.addi %3, %gpu_1 : index
        mk.tile_grid (%arg4, %arg5) over %arg0 held_by %4 tiles [128, :] : !mk.tensor<[1024, 512], bf16, shard 0 over world> {
          %node_2, %gpu_3 = mk.place : index, index
          scf.for %arg6 = %c1 to %c4 step %c1 {
            %5 = arith.addi %gpu_3, %arg6 : index
            %6 = arith.remsi %5, %c4 : index
            mk.copy %0[%arg4, :] -> %0[%arg4, :] at gpu %6 via nvlink_bulk tile [128, 512] : !mk.tensor<[1024, 512], bf16, symmetric>, !mk.tensor<[1024, 512], bf16, symmetric>
          }
        }
      }
    }
  }


// -----

// A read in one branch waits there: hoisted out of the branch, the GPU that takes the other one
// would wait for a tile nobody sends it. (The in-place all-reduce: the first writer puts its tile
// into the other GPU's staging, the other loads it.)
// CHECK-LABEL: mk.program @staged_in_a_branch
// CHECK: mk.flags @[[READY:ready[0-9]*]] [4, 4]
// CHECK: scf.if
// CHECK: mk.put
// CHECK-NEXT: mk.signal @[[READY]][%{{.*}}, %{{.*}}] at gpu
// CHECK: } else {
// CHECK-NEXT: mk.wait @[[READY]][%{{.*}}, %{{.*}}] count 1
// CHECK-NEXT: mk.load
mk.program @staged_in_a_branch [] mesh <1x2> (%c: !mk.tensor<[512, 1024], bf16, replicated>) grid 132 {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %f0 = arith.constant 0.0 : bf16
  %staging = mk.buffer : !mk.tensor<[512, 1024], bf16, symmetric>
  mk.role compute ctas 132 {
    mk.tile_grid (%m, %n) over %c tiles [128, 256] : !mk.tensor<[512, 1024], bf16, replicated> {
      %zero = mk.splat %f0 : bf16 -> !mk.tile<[128, 256], bf16>
      %node, %gpu = mk.place : index, index
      %first = arith.cmpi eq, %gpu, %c1 : index
      scf.if %first {
        mk.put %zero, %staging[%m, %n] at gpu %c2 via nvlink_store : !mk.tile<[128, 256], bf16>, !mk.tensor<[512, 1024], bf16, symmetric>
      } else {
        %other = mk.load %staging[%m, %n] : !mk.tensor<[512, 1024], bf16, symmetric> -> !mk.tile<[128, 256], bf16>
        mk.store %other, %c[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[512, 1024], bf16, replicated>
      }
    }
  }
}

// -----

// Grids bounded by the same row counts: the first's tiles have flags stamped with the launch, since
// a launch whose counts hold fewer rows skips some (the second, bounded alike, waits for none of
// those); the reader of a tile that a copy moves cannot know the counts, so the grid that writes
// it, and the one whose tiles that grid reads, produce every tile, each with an arrival.
// CHECK-LABEL: mk.program @bounded_by_row_counts
// CHECK: mk.flags @[[HIDDEN:ready[0-9]*]] [4, 2, 2]
// CHECK: mk.tile_grid {{.*}} rows %[[COUNTS:[a-z0-9]+]]
// CHECK: mk.store
// CHECK-NEXT: mk.signal @[[HIDDEN]][%{{.*}}, %{{.*}}, %{{.*}}] stamp
// CHECK: mk.tile_grid {{.*}} rows %[[COUNTS]]
// CHECK: mk.wait @[[HIDDEN]][%{{.*}}, %{{.*}}, %{{.*}}] count 1
// CHECK-LABEL: mk.program @copied_tiles_unbound
// CHECK: mk.tile_grid
// CHECK-NOT: rows
// CHECK-SAME: {
// CHECK: mk.signal @{{ready[0-9]*}}[%{{.*}}, %{{.*}}, %{{.*}}]{{$}}
// CHECK: mk.tile_grid
// CHECK-NOT: rows
// CHECK-SAME: {
// CHECK: mk.signal @{{ready[0-9]*}}[%{{.*}}, %{{.*}}, %{{.*}}]{{$}}
!H = !mk.tensor<[4, 256, 256], bf16, shard 0 over world>
!N = !mk.tensor<[4], i32, shard 0 over world>
mk.program @bounded_by_row_counts [] mesh <1x1> (%x: !H, %w: !mk.tensor<[4, 256, 256], bf16, shard 0 over world>, %n: !N, %y: !H) grid 132 {
  %h = mk.buffer : !H
  mk.role compute ctas 132 {
    mk.tile_grid (%e, %t, %c) over %h tiles [1, 128, 128] rows %n : !H, !N {
      %p = mk.matmul %x[%e, %t, :], %w[%e, :, %c] {k_tile = 64 : i64} : !H, !H -> !mk.tile<[128, 128], f32>
      %b = mk.convert %p : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
      mk.store %b, %h[%e, %t, %c] : !mk.tile<[128, 128], bf16>, !H
    }
    mk.tile_grid (%e, %t, %c) over %y tiles [1, 128, 128] rows %n : !H, !N {
      %p = mk.matmul %h[%e, %t, :], %w[%e, :, %c] {k_tile = 64 : i64} : !H, !H -> !mk.tile<[128, 128], f32>
      %b = mk.convert %p : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
      mk.store %b, %y[%e, %t, %c] : !mk.tile<[128, 128], bf16>, !H
    }
  }
}

// -----

!H = !mk.tensor<[4, 256, 256], bf16, shard 0 over world>
!N = !mk.tensor<[4], i32, shard 0 over world>
mk.program @copied_tiles_unbound [] mesh <1x2> (%x: !H, %w: !H, %n: !N) grid 132 {
  %h = mk.buffer : !H
  %y = mk.buffer : !H
  %s = mk.buffer : !mk.tensor<[4, 256, 256], bf16, symmetric>
  mk.role compute ctas 128 {
    mk.tile_grid (%e, %t, %c) over %h tiles [1, 128, 128] rows %n : !H, !N {
      %p = mk.matmul %x[%e, %t, :], %w[%e, :, %c] {k_tile = 64 : i64} : !H, !H -> !mk.tile<[128, 128], f32>
      %b = mk.convert %p : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
      mk.store %b, %h[%e, %t, %c] : !mk.tile<[128, 128], bf16>, !H
    }
    mk.tile_grid (%e, %t, %c) over %y tiles [1, 128, 128] rows %n : !H, !N {
      %p = mk.matmul %h[%e, %t, :], %w[%e, :, %c] {k_tile = 64 : i64} : !H, !H -> !mk.tile<[128, 128], f32>
      %b = mk.convert %p : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
      mk.store %b, %y[%e, %t, %c] : !mk.tile<[128, 128], bf16>, !H
    }
  }
  mk.role intra_transfer ctas 4 {
    mk.tile_grid (%e, %t, %c) over %y tiles [1, 128, 128] : !H {
      %node, %gpu = mk.place : index, index
      mk.copy %y[%e, %t, %c] -> %s[%e, %t, %c] at gpu %gpu via nvlink_bulk tile [128, 128] : !H, !mk.tensor<[4, 256, 256], bf16, symmetric>
    }
  }
}
