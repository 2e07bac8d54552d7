// Ring attention, causal, balanced: as ring_attention_causal.mlir, with the sequence placed zigzag
// (mkc.zigzag): in 2W chunks, rank r holding chunks r and 2W - 1 - r, so that every rank's queries
// see as many keys as every other's (with contiguous shards the last rank does W times the
// first's work). A tile's place in the sequence (mk.sequence_tile) gives the mask; the chunks are
// whole tiles (S a multiple of 256 W).
mk.program @ring_attention_zigzag [B, H, S, D] mesh <?x?> (
    %Q: !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag>,
    %K: !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag>,
    %V: !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag>,
    %O: !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag>) {
  mk.tile_grid (%b, %h, %i, %d) over %O tiles [1, 1, 128, :] masked : !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag> {
    %qi = mk.sequence_tile %Q tile 128 of %i : !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag>
    %q = mk.load %Q[%b, %h, %i, :] : !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag> -> !mk.tile<[128, D], bf16>
    %zero = arith.constant 0.0 : f32
    %minus_inf = arith.constant 0xFF800000 : f32
    %acc0 = mk.splat %zero : f32 -> !mk.tile<[128, D], f32>
    %max0 = mk.splat %minus_inf : f32 -> !mk.tile<[128], f32>
    %sum0 = mk.splat %zero : f32 -> !mk.tile<[128], f32>
    %acc, %max, %sum = mk.ring_shift %K, %V over world iter_args(%acc0, %max0, %sum0 : !mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32>)
        : !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag>, !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag> -> !mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32> {
    ^bb0(%src: index, %k: !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag>, %v: !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag>,
         %acc_in: !mk.tile<[128, D], f32>, %max_in: !mk.tile<[128], f32>, %sum_in: !mk.tile<[128], f32>):
      %first, %last = mk.shard_range %k tile 128 of %src : !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag>
      %one = arith.constant 1 : index
      %state:3 = scf.for %j = %first to %last step %one
          iter_args(%acc_j = %acc_in, %max_j = %max_in, %sum_j = %sum_in) -> (!mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32>) {
        %kj = mk.sequence_tile %k tile 128 of %j : !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag>
        %kt = mk.load %k[%b, %h, %j, :] : !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag> -> !mk.tile<[128, D], bf16>
        %vt = mk.load %v[%b, %h, %j, :] : !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag> -> !mk.tile<[128, D], bf16>
        %acc_n, %max_n, %sum_n = mk.attention_block %q, %kt, %vt, %acc_j, %max_j, %sum_j at (%qi, %kj) causal
            : !mk.tile<[128, D], bf16>, !mk.tile<[128, D], bf16>, !mk.tile<[128, D], bf16>,
              !mk.tile<[128, D], f32>, !mk.tile<[128], f32>
        scf.yield %acc_n, %max_n, %sum_n : !mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32>
      }
      mk.yield %state#0, %state#1, %state#2 : !mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32>
    }
    %denominator = mk.broadcast %sum dim 1 : !mk.tile<[128], f32> -> !mk.tile<[128, D], f32>
    %out = mk.div %acc, %denominator : !mk.tile<[128, D], f32>
    %out_bf16 = mk.convert %out : !mk.tile<[128, D], f32> -> !mk.tile<[128, D], bf16>
    mk.store %out_bf16, %O[%b, %h, %i, :] : !mk.tile<[128, D], bf16>, !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag>
  }
}
