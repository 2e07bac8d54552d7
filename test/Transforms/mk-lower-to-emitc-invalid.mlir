// RUN: mk-opt %s -split-input-file -verify-diagnostics -mk-lower-to-emitc

// What mk-lower-to-emitc rejects (what mk-plan-lowering decides is refused in
// mk-plan-lowering-invalid.mlir).

// A program that was not scheduled.
// expected-error @+1 {{@flat is not scheduled (run the mkc pipeline up to mk-insert-signals first)}}
mk.program @flat [] mesh <1x2> () {
}

// -----

// A collective intent left in a scheduled program.
!R = !mk.tensor<[256, 256], bf16, replicated>
mk.program @intent [] mesh <1x2> (%r: !R) grid 132 {
  mk.role compute ctas 132 {
    mk.tile_grid (%m, %n) over %r tiles [128, 128] : !R {
      %t = mk.load %r[%m, %n] : !R -> !mk.tile<[128, 128], bf16>
      // expected-error @+1 {{'mk.all_reduce' op is a collective intent, which the CUDA lowering does not take (run mk-expand-collectives first)}}
      mk.all_reduce sum %t into %r[%m, %n] : !mk.tile<[128, 128], bf16>, !R
    }
  }
}

// -----

// A register tile that does not split over the team's warps.
mk.program @narrow [] mesh <1x1> () grid 132 {
  mk.role compute ctas 132 {
    %zero = arith.constant 0.0 : f32
    // expected-error @+1 {{'mk.splat' op makes a register tile of 8 x 64, which does not split into whole 16 x 16 blocks over the team's 8 warps (both dims multiples of 16, at least 2048 elements); the nearest tile that does is 32 x 64 (a masked grid covers the edges)}}
    %t = mk.splat %zero : f32 -> !mk.tile<[8, 64], f32>
  }
}

// -----

// expected-error @+1 {{has a tensor of 'f8E4M3FN', which has no CUDA lowering yet}}
mk.program @fp8 [] mesh <1x1> (%a: !mk.tensor<[128, 128], f8E4M3FN, replicated>) grid 132 {
  mk.role compute ctas 132 {
  }
}

// -----

// A grid bounded by row counts walks one group's tiles at a time.
!R = !mk.tensor<[4, 128, 64], bf16, replicated>
!N = !mk.tensor<[4], i32, replicated>
mk.program @row_counts [] mesh <1x1> (%r: !R, %n: !N) grid 132 {
  mk.role compute ctas 132 {
    // expected-error @+1 {{'mk.tile_grid' op is bounded by row counts, which mkc walks only for a grid of this rank's groups in tiles [1, R, C]}}
    mk.tile_grid (%e, %t, %c) over %r tiles [2, 64, 64] rows %n : !R, !N {
    }
  }
}

// -----

// Shards that do not hold whole tiles are numbered shard by shard, along every dim of their
// extent (TileNumbering), unless the program splits that extent over different numbers of ranks:
// 1000 rows over the 4 ranks and over the 2 GPUs of a node.
!C = !mk.tensor<[1000, 64], bf16, shard 0 over world>
!D = !mk.tensor<[1000, 64], bf16, shard 0 over gpus>
mk.program @masked_shard_two_ways [] mesh <2x2> (%c: !C, %d: !D) grid 132 {
  mk.role compute ctas 132 {
    // expected-error @+1 {{'mk.tile_grid' op masks the tiles of a shard, which the program's tensors split over different numbers of ranks: dim 0 (1000 over 4 ranks) holds 250 a rank, not a multiple of the 128 of a tile; use a multiple of 512 (512 or 1024)}}
    mk.tile_grid (%i, %j) over %c tiles [128, 64] masked : !C {
    }
  }
}

// -----

!C = !mk.tensor<[1024, 64], bf16, shard 0 over gpus>
mk.program @distribute_sharded [] mesh <2x2> (%c: !C) grid 132 {
  mk.role compute ctas 132 {
    // expected-error @+1 {{'mk.tile_grid' op distributes a sharded tensor in a way that has no CUDA lowering yet}}
    mk.tile_grid (%i, %j) over %c global tiles [128, 64] distribute gpus : !C {
    }
  }
}

// -----

!C = !mk.tensor<[1024, 64], bf16, replicated>
mk.program @distribute_nodes [] mesh <2x2> (%c: !C) grid 132 {
  mk.role compute ctas 132 {
    // expected-error @+1 {{'mk.tile_grid' op distributes over nodes, which has no CUDA lowering yet}}
    mk.tile_grid (%i, %j) over %c tiles [128, 64] distribute nodes : !C {
    }
  }
}

// -----

!S = !mk.tensor<[2, 128, 128], bf16, symmetric>
mk.program @put_across_nodes [] mesh <2x1> (%s: !S) grid 132 {
  mk.role compute ctas 132 {
    %i = arith.constant 0 : index
    %zero = arith.constant 0.0 : bf16
    %t = mk.splat %zero : bf16 -> !mk.tile<[128, 128], bf16>
    // expected-error @+1 {{'mk.put' op puts a tile across nodes; the proxy copies memory, so store the tile and mk.copy it}}
    mk.put %t, %s[%i, %i, %i] at node %i via rdma_proxy : !mk.tile<[128, 128], bf16>, !S
  }
}

// -----

!A = !mk.tensor<[128, 128], bf16, replicated>
mk.program @no_k_tile [] mesh <1x1> (%a: !A) grid 132 {
  mk.role compute ctas 132 {
    mk.tile_grid (%m, %n) over %a tiles [128, 128] : !A {
      // expected-error @+1 {{'mk.matmul' op has no k_tile (run mk-tile-and-order first)}}
      %acc = mk.matmul %a[%m, :], %a[:, %n] : !A, !A -> !mk.tile<[128, 128], f32>
    }
  }
}

// -----

// A put that combines a tile the GEMM engine did not produce.
!S = !mk.tensor<[256, 256], bf16, replicated>
mk.program @combine_splat [] mesh <1x2> (%s: !S) grid 132 {
  mk.role compute ctas 132 {
    %i = arith.constant 0 : index
    %zero = arith.constant 0.0 : bf16
    %t = mk.splat %zero : bf16 -> !mk.tile<[128, 128], bf16>
    // expected-error @+1 {{'mk.put' op combines into its destination, which mkc lowers only from the GEMM engine's epilogue into a rank-2 tensor}}
    mk.put %t, %s[%i, %i] at gpu %i via nvlink_store combine sum : !mk.tile<[128, 128], bf16>, !S
  }
}

// -----

// A matmul on the tile library whose k slices its copies cannot move: B's [16 x 64] f16 slice is
// 2 KiB, and 16 is the only slice of 16 or more that divides a contracted dim of 48.
!A = !mk.tensor<[128, 48], f16, replicated>
!B = !mk.tensor<[48, 64], f16, replicated>
!C = !mk.tensor<[128, 64], f32, replicated>
mk.program @small_slices [] mesh <1x1> (%a: !A, %b: !B, %c: !C) grid 1 {
  mk.role compute ctas 1 {
    mk.tile_grid (%m, %n) over %c tiles [128, 64] : !C {
      // expected-error @+1 {{'mk.matmul' op runs on the tile library, which cannot copy its k slices of 16 (A 128 x 16, B 16 x 64 of 2-byte elements): slices of 4 KiB or more, in rows of at most 4 KiB; its tile needs k slices of 32 or more, so a contracted dim on each rank that is a multiple of 32}}
      %acc = mk.matmul %a[%m, :], %b[:, %n] {k_tile = 16 : i64} : !A, !B -> !mk.tile<[128, 64], f32>
      mk.store %acc, %c[%m, %n] : !mk.tile<[128, 64], f32>, !C
    }
  }
}

// -----

// An argument of more dims than the kernel's manifest describes to the runtime.
// expected-error @+1 {{an argument of rank 9, more than a kernel's manifest describes (8, MK_MAX_TENSOR_RANK)}}
mk.program @deep [] mesh <1x1> (%t: !mk.tensor<[1, 1, 1, 1, 1, 1, 1, 1, 8], bf16, replicated>) grid 1 {
  mk.role compute ctas 1 {
  }
}


// -----

// A wait per CTA of a role beside copies by copy engines: the copies' kernel leaves the epoch to
// the runtime, and the roles' CTAs over the launches with it.
!C = !mk.tensor<[256, 256], bf16, replicated>
// expected-error @+1 {{waits for arrivals per CTA of a role beside copies by copy engines, whose epoch the kernel does not move on}}
mk.program @copies_and_per_cta [] mesh <1x2> (%c: !C) grid 4 {
  mk.flags @ready [2]
  mk.flags @arrived [2]
  mk.engine_copy %c rows [0, 128] cols [0, 256] from gpu 0 to gpu 1 after @ready[0] count 1 signal @arrived[0] : !C
  mk.role compute ctas 2 {
    %zero = arith.constant 0 : index
    mk.wait @arrived[%zero] count 1 per_cta_of dispatch
  }
  mk.role dispatch ctas 2 {
  }
}

// -----

// The pool's tiles are claimed by every CTA's team: never the GEMM engine's (mk-plan-lowering
// gives it only roles that multiply, which mk-pool-roles never pools).
!C = !mk.tensor<[256, 256], bf16, replicated>
mk.program @pool_on_the_engine [] mesh <1x2> (%c: !C) grid 4 {
  mk.role compute ctas 2 {
  }
  // expected-error @+1 {{is a pool role given the GEMM engine: its tiles are claimed on the tile library's team}}
  mk.role intra_reduce ctas 2 pool attributes {mk.gemm_engine = #mk.gemm_engine<element = bf16, tile_n = 128, stages = 0, b_k_major = false, staging_buffers = 2, cluster = 1, a_rows = 128>} {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {
    }
  }
}

// -----

// The attention engine's CTAs do not leave it for a pool.
!C = !mk.tensor<[256, 256], bf16, replicated>
mk.program @attention_and_pool [] mesh <1x2> (%c: !C) grid 4 {
  // expected-error @+1 {{runs the attention engine beside a pool role, which its CTAs cannot join (compile with recycle-ctas=false)}}
  mk.role compute ctas 2 attributes {mk.attention_engine = #mk.attention_engine<element = bf16, head_dim = 128, stages = 2>} {
  }
  mk.role intra_reduce ctas 2 pool {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {
    }
  }
}
