// AllGather + GEMM: the column-parallel linear of tensor parallelism (sequence-sharded input).
//
// Every rank holds a row shard of A and a column shard of B. Every rank needs all of A: its rows
// arrive from the other ranks tile by tile while this rank already multiplies the rows it holds.
// Edge tiles are masked.
mk.program @allgather_gemm [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, shard 0 over world>,
    %B: !mk.tensor<[K, N], bf16, shard 1 over world>,
    %C: !mk.tensor<[M, N], bf16, shard 1 over world>) {
  %A_all = mk.all_gather %A
      : !mk.tensor<[M, K], bf16, shard 0 over world> -> !mk.tensor<[M, K], bf16, replicated>
  mk.tile_grid (%m, %n) over %C tiles [128, 256] masked : !mk.tensor<[M, N], bf16, shard 1 over world> {
    %acc = mk.matmul %A_all[%m, :], %B[:, %n]
        : !mk.tensor<[M, K], bf16, replicated>, !mk.tensor<[K, N], bf16, shard 1 over world>
        -> !mk.tile<[128, 256], f32>
    %tile = mk.convert %acc : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.store %tile, %C[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, shard 1 over world>
  }
}
