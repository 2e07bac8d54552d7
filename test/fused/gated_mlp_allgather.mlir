// A gated MLP after an all-gather (sequence parallelism into tensor parallelism): every rank
// gathers the token rows X while it multiplies the rows already here by its column shards of the
// gate and up projections, and keeps SwiGLU(X Wg, X Wu) for its columns: two matmuls sharing A in
// one tile body, their epilogue in registers.
// RUN: mkc %s --topology 1x1 --shape M=1024,N=1024,K=512 -o %t.1x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 1x2 --shape M=1024,N=1024,K=512 -o %t.1x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN-GATHER
// RUN: mkc %s --topology 2x1 --shape M=1024,N=1024,K=512 -o %t.2x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 2x2 --shape M=1024,N=1024,K=512 -o %t.2x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN-GATHER
// RUN: mk-sim %s --topology 1x2 --shape M=256,N=256,K=128 --seeds 2 | FileCheck %s --check-prefix=SIM
// RUN: mk-sim %s --topology 2x1 --shape M=256,N=256,K=128 --seeds 2 | FileCheck %s --check-prefix=SIM
// RUN: mkc %s --topology 2x1 --shape M=1024,N=1024,K=512 --emit=cuda | FileCheck %s --check-prefix=ENGINE
// CUBIN: mkc: gated_mlp_allgather: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// One engine pass: both B panels into one stage, SwiGLU on the consumers' registers. The rank's
// 512 columns in 64-column tiles: 64 tiles, one round (128-column ones would leave SMs idle).
// ENGINE: mk::GemmEngine<mk::GemmConfig<mk::bf16, 128,
// ENGINE: mk::gemm_load([[E:v[0-9]+]], [[A:v[0-9]+]], [[WG:v[0-9]+]], [[WU:v[0-9]+]],
// ENGINE: = mk::gemm_mma(
// ENGINE-NEXT: mk::GemmTile<64> [[GATE:v[0-9]+]] = mk::gemm_columns<0, 64>(
// ENGINE-NEXT: mk::GemmTile<64> [[UP:v[0-9]+]] = mk::gemm_columns<64, 64>(
// ENGINE-NEXT: mk::GemmTile<64> [[H:v[0-9]+]] = mk::swiglu([[GATE]], [[UP]]);
// ENGINE: mk::gemm_store<mk::bf16>({{v[0-9]+}}, [[H]],
// Where the producer also waits for the gathered rows, its 40 registers spill 20 bytes.
// CUBIN-GATHER: mkc: gated_mlp_allgather: {{[0-9]+}} registers
// SIM: mk-sim: @gated_mlp_allgather on {{.*}}: no findings

mk.program @gated_mlp_allgather [M, N, K] mesh <?x?> (
    %X: !mk.tensor<[M, K], bf16, shard 0 over world>,
    %Wg: !mk.tensor<[K, N], bf16, shard 1 over world>,
    %Wu: !mk.tensor<[K, N], bf16, shard 1 over world>,
    %H: !mk.tensor<[M, N], bf16, shard 1 over world>) {
  %Xg = mk.all_gather %X : !mk.tensor<[M, K], bf16, shard 0 over world> -> !mk.tensor<[M, K], bf16, replicated>
  mk.tile_grid (%m, %n) over %H tiles [128, 128] : !mk.tensor<[M, N], bf16, shard 1 over world> {
    %gate = mk.matmul %Xg[%m, :], %Wg[:, %n]
        : !mk.tensor<[M, K], bf16, replicated>, !mk.tensor<[K, N], bf16, shard 1 over world> -> !mk.tile<[128, 128], f32>
    %up = mk.matmul %Xg[%m, :], %Wu[:, %n]
        : !mk.tensor<[M, K], bf16, replicated>, !mk.tensor<[K, N], bf16, shard 1 over world> -> !mk.tile<[128, 128], f32>
    %h = mk.swiglu %gate, %up : !mk.tile<[128, 128], f32>
    %h16 = mk.convert %h : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
    mk.store %h16, %H[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, N], bf16, shard 1 over world>
  }
}
