// The first linear layer of a sequence-parallel MLP: every rank gathers the token rows X while it
// multiplies the rows already here by its column shard of W, and keeps gelu(X W + bias) for its
// columns. The bias is a row repeated down the tile, loaded by the GEMM engine's consumers for
// the columns each holds, and the whole epilogue runs in their registers before the store. (Of
// 256 columns, the row's 32 registers beside the accumulator's 128 make gelu spill: see
// docs/notes/gemm-engine.md.)
// RUN: mkc %s --topology 1x1 --shape M=1024,N=1024,K=512 -o %t.1x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 1x2 --shape M=1024,N=1024,K=512 -o %t.1x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 2x1 --shape M=1024,N=1024,K=512 -o %t.2x1.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mkc %s --topology 2x2 --shape M=1000,N=1000,K=520 -o %t.2x2.cubin --ptxas-report 2>&1 | FileCheck %s --check-prefix=CUBIN
// RUN: mk-sim %s --topology 1x2 --shape M=128,N=512,K=128 --seeds 2 | FileCheck %s --check-prefix=SIM
// RUN: mk-sim %s --topology 2x1 --shape M=200,N=600,K=136 --seeds 2 | FileCheck %s --check-prefix=SIM
// RUN: mkc %s --topology 2x1 --shape M=1024,N=1024,K=512 --emit=cuda | FileCheck %s --check-prefix=ENGINE
// CUBIN: mkc: linear_bias_gelu_allgather: {{[0-9]+}} registers, 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// ENGINE: mk::GemmEngine<mk::GemmConfig<mk::bf16, 128,
// ENGINE: = mk::gemm_mma(
// ENGINE: mk::GemmRow<mk::bf16, 128> [[B16:v[0-9]+]] = mk::gemm_load_row<mk::bf16, 128>(
// ENGINE-NEXT: mk::GemmRow<float, 128, mk::bf16> [[B:v[0-9]+]] = mk::convert<float>([[B16]]);
// ENGINE-NEXT: mk::GemmTile<128> [[BB:v[0-9]+]] = mk::gemm_broadcast([[B]]);
// ENGINE-NEXT: mk::GemmTile<128> [[Z:v[0-9]+]] = mk::add(
// ENGINE-NEXT: mk::GemmTile<128> [[Y:v[0-9]+]] = mk::gelu([[Z]]);
// ENGINE: mk::gemm_store<mk::bf16>({{v[0-9]+}}, [[Y]],
// SIM: mk-sim: @linear_bias_gelu_allgather on {{.*}}: no findings

mk.program @linear_bias_gelu_allgather [M, N, K] mesh <?x?> (
    %X: !mk.tensor<[M, K], bf16, shard 0 over world>,
    %W: !mk.tensor<[K, N], bf16, shard 1 over world>,
    %bias: !mk.tensor<[N], bf16, shard 0 over world>,
    %Y: !mk.tensor<[M, N], bf16, shard 1 over world>) {
  %Xg = mk.all_gather %X : !mk.tensor<[M, K], bf16, shard 0 over world> -> !mk.tensor<[M, K], bf16, replicated>
  mk.tile_grid (%m, %n) over %Y tiles [128, 128] masked : !mk.tensor<[M, N], bf16, shard 1 over world> {
    %p = mk.matmul %Xg[%m, :], %W[:, %n]
        : !mk.tensor<[M, K], bf16, replicated>, !mk.tensor<[K, N], bf16, shard 1 over world> -> !mk.tile<[128, 128], f32>
    %b16 = mk.load %bias[%n] : !mk.tensor<[N], bf16, shard 0 over world> -> !mk.tile<[128], bf16>
    %b = mk.convert %b16 : !mk.tile<[128], bf16> -> !mk.tile<[128], f32>
    %bb = mk.broadcast %b dim 0 : !mk.tile<[128], f32> -> !mk.tile<[128, 128], f32>
    %z = mk.add %p, %bb : !mk.tile<[128, 128], f32>
    %y = mk.activation gelu %z : !mk.tile<[128, 128], f32>
    %y16 = mk.convert %y : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
    mk.store %y16, %Y[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, N], bf16, shard 1 over world>
  }
}
