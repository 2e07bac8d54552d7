// Ring attention: sequence parallelism for attention over a long sequence.
//
// Q, K and V are sharded along the sequence. Each query tile folds in every rank's K/V shard with
// online softmax; the shards travel one neighbour per step around the ring, so the next step's
// shard is in flight while this step's is used.
mk.program @ring_attention [B, H, S, D] mesh <?x?> (
    %Q: !mk.tensor<[B, H, S, D], bf16, shard 2 over world>,
    %K: !mk.tensor<[B, H, S, D], bf16, shard 2 over world>,
    %V: !mk.tensor<[B, H, S, D], bf16, shard 2 over world>,
    %O: !mk.tensor<[B, H, S, D], bf16, shard 2 over world>) {
  mk.tile_grid (%b, %h, %i, %d) over %O tiles [1, 1, 128, :] masked : !mk.tensor<[B, H, S, D], bf16, shard 2 over world> {
    %q = mk.load %Q[%b, %h, %i, :] : !mk.tensor<[B, H, S, D], bf16, shard 2 over world> -> !mk.tile<[128, D], bf16>
    %zero = arith.constant 0.0 : f32
    %minus_inf = arith.constant 0xFF800000 : f32
    %acc0 = mk.splat %zero : f32 -> !mk.tile<[128, D], f32>
    %max0 = mk.splat %minus_inf : f32 -> !mk.tile<[128], f32>
    %sum0 = mk.splat %zero : f32 -> !mk.tile<[128], f32>
    %acc, %max, %sum = mk.ring_shift %K, %V over world iter_args(%acc0, %max0, %sum0 : !mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32>)
        : !mk.tensor<[B, H, S, D], bf16, shard 2 over world>, !mk.tensor<[B, H, S, D], bf16, shard 2 over world> -> !mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32> {
    ^bb0(%src: index, %k: !mk.tensor<[B, H, S, D], bf16, shard 2 over world>, %v: !mk.tensor<[B, H, S, D], bf16, shard 2 over world>,
         %acc_in: !mk.tile<[128, D], f32>, %max_in: !mk.tile<[128], f32>, %sum_in: !mk.tile<[128], f32>):
      %first, %last = mk.shard_range %k tile 128 of %src : !mk.tensor<[B, H, S, D], bf16, shard 2 over world>
      %one = arith.constant 1 : index
      %state:3 = scf.for %j = %first to %last step %one
          iter_args(%acc_j = %acc_in, %max_j = %max_in, %sum_j = %sum_in) -> (!mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32>) {
        %kt = mk.load %k[%b, %h, %j, :] : !mk.tensor<[B, H, S, D], bf16, shard 2 over world> -> !mk.tile<[128, D], bf16>
        %vt = mk.load %v[%b, %h, %j, :] : !mk.tensor<[B, H, S, D], bf16, shard 2 over world> -> !mk.tile<[128, D], bf16>
        %acc_n, %max_n, %sum_n = mk.attention_block %q, %kt, %vt, %acc_j, %max_j, %sum_j
            : !mk.tile<[128, D], bf16>, !mk.tile<[128, D], bf16>, !mk.tile<[128, D], bf16>,
              !mk.tile<[128, D], f32>, !mk.tile<[128], f32>
        scf.yield %acc_n, %max_n, %sum_n : !mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32>
      }
      mk.yield %state#0, %state#1, %state#2 : !mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32>
    }
    %denominator = mk.broadcast %sum dim 1 : !mk.tile<[128], f32> -> !mk.tile<[128, D], f32>
    %out = mk.div %acc, %denominator : !mk.tile<[128, D], f32>
    %out_bf16 = mk.convert %out : !mk.tile<[128, D], f32> -> !mk.tile<[128, D], bf16>
    mk.store %out_bf16, %O[%b, %h, %i, :] : !mk.tile<[128, D], bf16>, !mk.tensor<[B, H, S, D], bf16, shard 2 over world>
  }
}
