// RUN: mk-opt %s -split-input-file -verify-diagnostics -mk-specialize="topology=2x4 shapes=M=100" 

// What mk-specialize rejects, each with a located error.

// A binding for a symbol the program does not declare.
// expected-error @+1 {{'M' is not a shape symbol of @other (it declares [X, Y])}}
mk.program @other [X, Y] mesh <?x?> () {}

// -----

// A symbol left unbound.
// expected-error @+1 {{shape symbol 'N' of @unbound is not bound; give shapes=N=VALUE}}
mk.program @unbound [M, N] mesh <?x?> () {}

// -----

// A program bound to another topology.
// expected-error @+1 {{@fixed runs on #mk.mesh<1x8>, not on topology 2x4}}
mk.program @fixed [M] mesh <1x8> () {}

// -----

// A binding that conflicts with the program's own.
// expected-error @+1 {{shape symbol 'M' of @conflict is 64, not 100}}
mk.program @conflict [M = 64] mesh <?x?> () {}

// -----

// Grouped heads whose H is not a multiple of Hkv: the last query heads would read key heads past
// the tensor's.
mk.program @groups [M, H = 6, Hkv = 4] mesh <?x?> (
    %K: !mk.tensor<[Hkv, M], bf16, replicated>, %O: !mk.tensor<[H, M], bf16, replicated>) {
  mk.tile_grid (%h, %m) over %O tiles [1, :] : !mk.tensor<[H, M], bf16, replicated> {
    %heads = mk.shape_symbol "H" : index
    %kv_heads = mk.shape_symbol "Hkv" : index
    %group = arith.divsi %heads, %kv_heads : index
    %hk = arith.divsi %h, %group : index
    // expected-error @+1 {{'mk.load' op takes tile 5 of dim 0, which has 4 (4 in tiles of 1): a tile's index stays in its tensor}}
    %k = mk.load %K[%hk, :] : !mk.tensor<[Hkv, M], bf16, replicated> -> !mk.tile<[M], bf16>
    mk.store %k, %O[%h, :] : !mk.tile<[M], bf16>, !mk.tensor<[H, M], bf16, replicated>
  }
}

// -----

// More key heads than query heads: no group.
mk.program @no_group [M, H = 4, Hkv = 8] mesh <?x?> (
    %K: !mk.tensor<[Hkv, M], bf16, replicated>, %O: !mk.tensor<[H, M], bf16, replicated>) {
  mk.tile_grid (%h, %m) over %O tiles [1, :] : !mk.tensor<[H, M], bf16, replicated> {
    %heads = mk.shape_symbol "H" : index
    %kv_heads = mk.shape_symbol "Hkv" : index
    %group = arith.divsi %heads, %kv_heads : index
    // expected-error @+1 {{'arith.divsi' op divides by zero with the program's shapes}}
    %hk = arith.divsi %h, %group : index
    %k = mk.load %K[%hk, :] : !mk.tensor<[Hkv, M], bf16, replicated> -> !mk.tile<[M], bf16>
    mk.store %k, %O[%h, :] : !mk.tile<[M], bf16>, !mk.tensor<[H, M], bf16, replicated>
  }
}
