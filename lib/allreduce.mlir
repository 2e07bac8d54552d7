// AllReduce alone: every rank's X summed into every rank's C, tile by tile, over the same links
// and the same network proxy as the fused ops. The baseline a fused op is measured against on a
// transport no library covers (the emulated NIC), and the collective for data that is already
// computed. X lies in symmetric memory, so that peers and the network can read it.
mk.program @allreduce [M, N] mesh <?x?> (
    %X: !mk.tensor<[M, N], bf16, symmetric>,
    %C: !mk.tensor<[M, N], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %C tiles [128, 256] masked : !mk.tensor<[M, N], bf16, replicated> {
    %tile = mk.load %X[%m, %n] : !mk.tensor<[M, N], bf16, symmetric> -> !mk.tile<[128, 256], bf16>
    mk.all_reduce sum %tile into %C[%m, %n]
        : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
  }
}
