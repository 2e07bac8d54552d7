// Random program 724 (test/random): AG+GEMM whose A travels to other nodes through the proxy,
// straight from the caller's input (regressions.mlir, PROXY-SOURCE).
mk.program @random_724 [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, shard 0 over world>,
    %B: !mk.tensor<[K, N], bf16, shard 1 over world>,
    %C: !mk.tensor<[M, N], bf16, shard 1 over world>) {
  %A_all = mk.all_gather %A : !mk.tensor<[M, K], bf16, shard 0 over world> -> !mk.tensor<[M, K], bf16, replicated>
  mk.tile_grid (%m, %n) over %C tiles [128, 256] : !mk.tensor<[M, N], bf16, shard 1 over world> {
    %v0 = mk.matmul %A_all[%m, :], %B[:, %n] : !mk.tensor<[M, K], bf16, replicated>, !mk.tensor<[K, N], bf16, shard 1 over world> -> !mk.tile<[128, 256], f32>
    %e0 = mk.sigmoid %v0 : !mk.tile<[128, 256], f32>
    %out = mk.convert %e0 : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.store %out, %C[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, shard 1 over world>
  }
}
