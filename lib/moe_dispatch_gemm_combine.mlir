// MoE Dispatch + GEMM + Combine: expert parallelism.
//
// Every rank holds a shard of the tokens and of the experts. Each token is sent to the ranks that
// hold its top-k experts, grouped by expert (dispatch); each expert runs its FFN, SwiGLU(x Wg, x Wu)
// Wd, over the rows it received; each result row goes back to its token's rank, scaled by the
// routing weight and summed over the token's experts (combine). Tiles past an expert's row count
// are skipped, and an edge tile is masked. C, the rows an expert takes, defaults to T: a token's
// top-k experts are distinct, so an expert gets at most T rows and none drops (a smaller C saves
// memory; the copies it drops are counted in the op's routing report).
mk.program @moe_dispatch_gemm_combine [T, Hd, I, E, TopK, C default T] mesh <?x?> (
    %X: !mk.tensor<[T, Hd], bf16, shard 0 over world>,
    %experts: !mk.tensor<[T, TopK], i32, shard 0 over world>,
    %weights: !mk.tensor<[T, TopK], f32, shard 0 over world>,
    %W_gate: !mk.tensor<[E, Hd, I], bf16, shard 0 over world>,
    %W_up: !mk.tensor<[E, Hd, I], bf16, shard 0 over world>,
    %W_down: !mk.tensor<[E, I, Hd], bf16, shard 0 over world>,
    %Y: !mk.tensor<[T, Hd], bf16, shard 0 over world>) {
  %routed, %counts, %origins = mk.dispatch %X by %experts
      : !mk.tensor<[T, Hd], bf16, shard 0 over world>, !mk.tensor<[T, TopK], i32, shard 0 over world>
      -> !mk.tensor<[E, C, Hd], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world>,
         !mk.tensor<[E, C], i32, shard 0 over world>
  %H = mk.buffer : !mk.tensor<[E, C, I], bf16, shard 0 over world>
  mk.tile_grid (%e, %t, %n) over %H tiles [1, 128, 128] rows %counts masked
      : !mk.tensor<[E, C, I], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world> {
    %gate = mk.matmul %routed[%e, %t, :], %W_gate[%e, :, %n]
        : !mk.tensor<[E, C, Hd], bf16, shard 0 over world>, !mk.tensor<[E, Hd, I], bf16, shard 0 over world>
        -> !mk.tile<[128, 128], f32>
    %up = mk.matmul %routed[%e, %t, :], %W_up[%e, :, %n]
        : !mk.tensor<[E, C, Hd], bf16, shard 0 over world>, !mk.tensor<[E, Hd, I], bf16, shard 0 over world>
        -> !mk.tile<[128, 128], f32>
    %act = mk.swiglu %gate, %up : !mk.tile<[128, 128], f32>
    %act_bf16 = mk.convert %act : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
    mk.store %act_bf16, %H[%e, %t, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[E, C, I], bf16, shard 0 over world>
  }
  mk.tile_grid (%e, %t, %n) over %routed tiles [1, 128, 256] rows %counts masked
      : !mk.tensor<[E, C, Hd], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world> {
    %y = mk.matmul %H[%e, %t, :], %W_down[%e, :, %n]
        : !mk.tensor<[E, C, I], bf16, shard 0 over world>, !mk.tensor<[E, I, Hd], bf16, shard 0 over world>
        -> !mk.tile<[128, 256], f32>
    mk.combine %y from [%e, %t, %n] into %Y routed %origins weighted %weights
        : !mk.tile<[128, 256], f32>, !mk.tensor<[T, Hd], bf16, shard 0 over world>,
          !mk.tensor<[E, C], i32, shard 0 over world>, !mk.tensor<[T, TopK], f32, shard 0 over world>
  }
}
