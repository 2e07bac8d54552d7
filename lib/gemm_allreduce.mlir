// GEMM + AllReduce: the row-parallel linear of tensor parallelism.
//
// Every rank holds a slice of the contraction dim K of A and B, computes a partial product of the
// whole C, and all ranks end with the sum over all ranks. Each output tile is all-reduced as soon as
// it is computed, so communication overlaps with the tiles still being multiplied. Edge tiles are
// masked, so M and N are free.
mk.program @gemm_allreduce [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, shard 1 over world>,
    %B: !mk.tensor<[K, N], bf16, shard 0 over world>,
    %C: !mk.tensor<[M, N], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %C tiles [128, 256] masked : !mk.tensor<[M, N], bf16, replicated> {
    %partial = mk.matmul %A[%m, :], %B[:, %n]
        : !mk.tensor<[M, K], bf16, shard 1 over world>, !mk.tensor<[K, N], bf16, shard 0 over world>
        -> !mk.tile<[128, 256], f32>
    %tile = mk.convert %partial : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %tile into %C[%m, %n]
        : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
  }
}
