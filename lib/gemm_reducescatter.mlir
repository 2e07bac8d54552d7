// GEMM + ReduceScatter: a row-parallel linear whose output stays sharded by rows.
//
// Every rank computes a partial product of every tile of C (hence `global`); each tile is summed
// over all ranks on the rank whose row shard holds it. Edge tiles are masked, so M and N are free.
mk.program @gemm_reducescatter [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, shard 1 over world>,
    %B: !mk.tensor<[K, N], bf16, shard 0 over world>,
    %C: !mk.tensor<[M, N], bf16, shard 0 over world>) {
  mk.tile_grid (%m, %n) over %C global tiles [128, 256] masked : !mk.tensor<[M, N], bf16, shard 0 over world> {
    %partial = mk.matmul %A[%m, :], %B[:, %n]
        : !mk.tensor<[M, K], bf16, shard 1 over world>, !mk.tensor<[K, N], bf16, shard 0 over world>
        -> !mk.tile<[128, 256], f32>
    %tile = mk.convert %partial : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.reduce_scatter sum %tile into %C[%m, %n]
        : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, shard 0 over world>
  }
}
