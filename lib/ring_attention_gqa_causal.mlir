// Ring attention, causal, with grouped-query heads: as ring_attention_causal.mlir, for a
// model whose H query heads share Hkv key and value heads (H a multiple of Hkv): query head h
// reads key and value head h / (H / Hkv), which are never repeated in memory.
mk.program @ring_attention_gqa_causal [B, H, Hkv, S, D] mesh <?x?> (
    %Q: !mk.tensor<[B, H, S, D], bf16, shard 2 over world>,
    %K: !mk.tensor<[B, Hkv, S, D], bf16, shard 2 over world>,
    %V: !mk.tensor<[B, Hkv, S, D], bf16, shard 2 over world>,
    %O: !mk.tensor<[B, H, S, D], bf16, shard 2 over world>) {
  mk.tile_grid (%b, %h, %i, %d) over %O tiles [1, 1, 128, :] masked : !mk.tensor<[B, H, S, D], bf16, shard 2 over world> {
    // Query head h reads key head h / (H / Hkv).
    %heads = mk.shape_symbol "H" : index
    %kv_heads = mk.shape_symbol "Hkv" : index
    %group = arith.divsi %heads, %kv_heads : index
    %hk = arith.divsi %h, %group : index
    %q = mk.load %Q[%b, %h, %i, :] : !mk.tensor<[B, H, S, D], bf16, shard 2 over world> -> !mk.tile<[128, D], bf16>
    %zero = arith.constant 0.0 : f32
    %minus_inf = arith.constant 0xFF800000 : f32
    %acc0 = mk.splat %zero : f32 -> !mk.tile<[128, D], f32>
    %max0 = mk.splat %minus_inf : f32 -> !mk.tile<[128], f32>
    %sum0 = mk.splat %zero : f32 -> !mk.tile<[128], f32>
    %acc, %max, %sum = mk.ring_shift %K, %V over world iter_args(%acc0, %max0, %sum0 : !mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32>)
        : !mk.tensor<[B, Hkv, S, D], bf16, shard 2 over world>, !mk.tensor<[B, Hkv, S, D], bf16, shard 2 over world> -> !mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32> {
    ^bb0(%src: index, %k: !mk.tensor<[B, Hkv, S, D], bf16, shard 2 over world>, %v: !mk.tensor<[B, Hkv, S, D], bf16, shard 2 over world>,
         %acc_in: !mk.tile<[128, D], f32>, %max_in: !mk.tile<[128], f32>, %sum_in: !mk.tile<[128], f32>):
      %first, %last = mk.shard_range %k tile 128 of %src : !mk.tensor<[B, Hkv, S, D], bf16, shard 2 over world>
      %one = arith.constant 1 : index
      %state:3 = scf.for %j = %first to %last step %one
          iter_args(%acc_j = %acc_in, %max_j = %max_in, %sum_j = %sum_in) -> (!mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32>) {
        %kt = mk.load %k[%b, %hk, %j, :] : !mk.tensor<[B, Hkv, S, D], bf16, shard 2 over world> -> !mk.tile<[128, D], bf16>
        %vt = mk.load %v[%b, %hk, %j, :] : !mk.tensor<[B, Hkv, S, D], bf16, shard 2 over world> -> !mk.tile<[128, D], bf16>
        %acc_n, %max_n, %sum_n = mk.attention_block %q, %kt, %vt, %acc_j, %max_j, %sum_j at (%i, %j) causal
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
