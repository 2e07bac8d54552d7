// The MoE layer's expert FFN alone, on rows already grouped by expert: out[e, r] =
// SwiGLU(rows[e, r] W_gate[e], rows[e, r] W_up[e]) W_down[e] for the first counts[e] rows of each
// expert (the other rows of out are left as they are, or overwritten up to the next multiple of
// 128). The same grids as lib/moe_dispatch_gemm_combine.mlir's, without dispatch and combine:
// bench/moe.py times it against torch._grouped_mm on the same rows (the grouped GEMM per FLOP).
mk.program @moe_expert_ffn [E, C, Hd, I] mesh <?x?> (
    %rows: !mk.tensor<[E, C, Hd], bf16, shard 0 over world>,
    %counts: !mk.tensor<[E], i32, shard 0 over world>,
    %W_gate: !mk.tensor<[E, Hd, I], bf16, shard 0 over world>,
    %W_up: !mk.tensor<[E, Hd, I], bf16, shard 0 over world>,
    %W_down: !mk.tensor<[E, I, Hd], bf16, shard 0 over world>,
    %out: !mk.tensor<[E, C, Hd], bf16, shard 0 over world>) {
  %H = mk.buffer : !mk.tensor<[E, C, I], bf16, shard 0 over world>
  mk.tile_grid (%e, %t, %n) over %H tiles [1, 128, 128] rows %counts masked
      : !mk.tensor<[E, C, I], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world> {
    %gate = mk.matmul %rows[%e, %t, :], %W_gate[%e, :, %n]
        : !mk.tensor<[E, C, Hd], bf16, shard 0 over world>, !mk.tensor<[E, Hd, I], bf16, shard 0 over world>
        -> !mk.tile<[128, 128], f32>
    %up = mk.matmul %rows[%e, %t, :], %W_up[%e, :, %n]
        : !mk.tensor<[E, C, Hd], bf16, shard 0 over world>, !mk.tensor<[E, Hd, I], bf16, shard 0 over world>
        -> !mk.tile<[128, 128], f32>
    %act = mk.swiglu %gate, %up : !mk.tile<[128, 128], f32>
    %act_bf16 = mk.convert %act : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
    mk.store %act_bf16, %H[%e, %t, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[E, C, I], bf16, shard 0 over world>
  }
  mk.tile_grid (%e, %t, %n) over %out tiles [1, 128, 256] rows %counts masked
      : !mk.tensor<[E, C, Hd], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world> {
    %y = mk.matmul %H[%e, %t, :], %W_down[%e, :, %n]
        : !mk.tensor<[E, C, I], bf16, shard 0 over world>, !mk.tensor<[E, I, Hd], bf16, shard 0 over world>
        -> !mk.tile<[128, 256], f32>
    %y_bf16 = mk.convert %y : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.store %y_bf16, %out[%e, %t, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[E, C, Hd], bf16, shard 0 over world>
  }
}
