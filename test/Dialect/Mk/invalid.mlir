// RUN: mk-opt %s -split-input-file -verify-diagnostics

// Every diagnostic of the mk dialect's parsers and verifiers, one case each.

//===----------------------------------------------------------------------===//
// Attributes and types
//===----------------------------------------------------------------------===//

// expected-error @+1 {{a mesh needs at least one node and one GPU per node, got 0x4}}
mk.program @mesh_zero [] mesh <0x4> () {}

// -----

// expected-error @+1 {{a mesh has at most 8 GPUs per node, whose memory a kernel maps, and fewer than 2^32 ranks, got 1x9}}
mk.program @mesh_wide [] mesh <1x9> () {}

// -----

// expected-error @+1 {{a mesh has at most 8 GPUs per node, whose memory a kernel maps, and fewer than 2^32 ranks, got 536870912x8}}
mk.program @mesh_ranks [] mesh <536870912x8> () {}

// -----

// expected-error @+1 {{expected a mesh as NODESxGPUS, e.g. <2x4>}}
mk.program @mesh_rank [] mesh <2x4x2> () {}

// -----

// expected-error @+1 {{unknown placement 'sharded'; expected 'shard D over AXIS', 'replicated' or 'symmetric'}}
mk.program @placement [M] mesh <?x?> (%a: !mk.tensor<[M], bf16, sharded 0 over world>) {}

// -----

// expected-error @+1 {{unknown mesh axis 'rack'; expected world, nodes or gpus}}
mk.program @axis [M] mesh <?x?> (%a: !mk.tensor<[M], bf16, shard 0 over rack>) {}

// -----

// expected-error @+1 {{shard dim must be non-negative, got -1}}
mk.program @shard_dim [M] mesh <?x?> (%a: !mk.tensor<[M], bf16, shard -1 over world>) {}

// -----

// expected-error @+1 {{unknown tile order 'hilbert'; expected row_major, column_major or swizzle}}
mk.program @order [] mesh <?x?> () attributes {o = #mk.order<hilbert>} {}

// -----

// expected-error @+1 {{a swizzle group must be at least 1 tile row, got 0}}
mk.program @order_group [] mesh <?x?> () attributes {o = #mk.order<swizzle 0>} {}

// -----

// expected-error @+1 {{dim 1 has extent 0; extents must be positive}}
mk.program @extent [] mesh <?x?> (%a: !mk.tensor<[4, 0], f32, replicated>) {}

// -----

// expected-error @+1 {{element type must be a float (bf16, f16, f32, f8) or a signless integer, got 'index'}}
mk.program @element [] mesh <?x?> (%a: !mk.tensor<[4], index, replicated>) {}

// -----

// expected-error @+1 {{a tensor needs at least one dim}}
mk.program @rank0 [] mesh <?x?> (%a: !mk.tensor<[], f32, replicated>) {}

// -----

// expected-error @+1 {{shard dim 2 is out of range for a rank-2 tensor}}
mk.program @shard_range [M] mesh <?x?> (%a: !mk.tensor<[M, 4], f32, shard 2 over world>) {}

// -----

mk.program @tile_rank [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  // expected-error @+1 {{tiles have rank 1 or 2, not 3}}
  %t = mk.splat %zero : f32 -> !mk.tile<[2, 2, 2], f32>
}

//===----------------------------------------------------------------------===//
// mk.program
//===----------------------------------------------------------------------===//

// -----

// expected-error @+1 {{'mk.program' op declares shape symbol 'M' twice}}
mk.program @twice [M, M] mesh <?x?> () {}

// -----

// expected-error @+1 {{'mk.program' op binds shape symbol 'M' to 0; extents must be positive}}
mk.program @zero [M = 0] mesh <?x?> () {}

// -----

// expected-error @+1 {{'mk.program' op gives shape symbol 'C' the default 'T', which is not a shape symbol declared before it}}
mk.program @later_default [C default T, T] mesh <?x?> () {}

// -----

// expected-error @+1 {{'mk.program' op gives shape symbol 'C' the default 'C', which is not a shape symbol declared before it}}
mk.program @own_default [C default C] mesh <?x?> () {}

// -----

// expected-error @+1 {{'mk.program' op binds 1 values to 2 shape symbols}}
"mk.program"() <{sym_name = "bindings", shape_symbols = ["M", "N"], shape_values = array<i64: 4>, mesh = #mk.mesh<?x?>}> ({
^bb0:
}) : () -> ()

// -----

// expected-error @+1 {{'mk.program' op takes distributed tensors only; argument #1 is 'index'}}
mk.program @args [] mesh <?x?> (%a: !mk.tensor<[4], f32, replicated>, %i: index) {}

// -----

// expected-error @+1 {{'mk.program' op uses shape symbol 'K', which @undeclared does not declare (it declares [M, N])}}
mk.program @undeclared [M, N] mesh <?x?> (%a: !mk.tensor<[M, K], bf16, replicated>) {}

// -----

mk.program @undeclared_in_body [M] mesh <?x?> () {
  // expected-error @+1 {{'mk.buffer' op uses shape symbol 'N', which @undeclared_in_body does not declare (it declares [M])}}
  %b = mk.buffer : !mk.tensor<[M, N], f32, symmetric>
}

// -----

// A tensor whose bytes int64 cannot count.
// expected-error @+1 {{tensor '!mk.tensor<[4611686018427387904, 4], bf16, replicated>' (argument #0 of @int64) has more bytes than int64 counts (2^63 - 1)}}
mk.program @int64 [] mesh <?x?> (%a: !mk.tensor<[4611686018427387904, 4], bf16, replicated>) {}

// -----

// A shard of 4 TiB: more than the 1 TiB a rank may hold.
// expected-error @+1 {{tensor '!mk.tensor<[2199023255552, 2], bf16, shard 0 over world>' (argument #0 of @rank_bytes) holds 4398046511104 bytes on each rank, more than the 1 TiB a rank may hold (above any GPU's memory: an H200 has 141 GB)}}
mk.program @rank_bytes [] mesh <1x2> (%a: !mk.tensor<[2199023255552, 2], bf16, shard 0 over world>) {}

// -----

// Buffers count as well.
mk.program @buffer_bytes [] mesh <1x1> () {
  // expected-error @+1 {{tensor '!mk.tensor<[1099511627776, 2], f32, symmetric>' ('mk.buffer' of @buffer_bytes) holds 8796093022208 bytes on each rank}}
  %b = mk.buffer : !mk.tensor<[1099511627776, 2], f32, symmetric>
}

// -----

// Two tensors of 1 TiB each (shards of 4 TiB on 4 ranks): each fits a rank, both do not.
// expected-error @+1 {{'mk.program' op keeps more than 1 TiB of tensors and buffers on each rank, the most a rank may hold (above any GPU's memory: an H200 has 141 GB)}}
mk.program @total_bytes [] mesh <1x4> (%a: !mk.tensor<[274877906944, 2], bf16, replicated>,
                                      %b: !mk.tensor<[1099511627776, 2], bf16, shard 0 over world>) {}

// -----

// expected-error @+1 {{'mk.program' op has SM roles but no grid size}}
mk.program @no_grid [] mesh <?x?> () {
  mk.role compute ctas 8 {}
}

// -----

// expected-error @+1 {{'mk.program' op gives CTA counts to 1 of its 2 roles; either all or none have one}}
mk.program @partial_counts [] mesh <1x2> () grid 132 {
  mk.role compute ctas 8 {}
  mk.role intra_reduce {}
}

// -----

// expected-error @+1 {{'mk.program' op is compiled for rank 8, but mesh #mk.mesh<2x4> has 8 ranks}}
mk.program @rank_range [] mesh <2x4> rank 8 () {}

// -----

// A role count that exceeds the grid.
// expected-error @+1 {{'mk.program' op assigns 140 CTAs to its roles, but the grid has 132}}
mk.program @too_many_ctas [] mesh <1x2> () grid 132 {
  mk.role compute ctas 120 {}
  mk.role intra_reduce ctas 20 {}
}

// -----

mk.program @pool_of_two_ops [] mesh <1x2> (%c: !mk.tensor<[256, 256], bf16, replicated>) grid 132 {
  mk.role compute ctas 120 {}
  // expected-error @+1 {{'mk.role' op is a pool, whose body must be a single mk.tile_grid (its tiles are claimed at run time by any CTA)}}
  mk.role intra_reduce ctas 12 pool {
    mk.single_cta {}
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[256, 256], bf16, replicated> {}
  }
}

// -----

mk.program @two_pools [] mesh <1x2> (%c: !mk.tensor<[256, 256], bf16, replicated>) grid 132 {
  // expected-error @+1 {{'mk.role' op is a pool beside another: a program has one at most}}
  mk.role intra_reduce ctas 120 pool {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[256, 256], bf16, replicated> {}
  }
  mk.role inter_reduce ctas 12 pool {
    mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[256, 256], bf16, replicated> {}
  }
}

// -----

mk.program @grid_outside_role [] mesh <1x2> (%c: !mk.tensor<[256, 256], bf16, replicated>) grid 132 {
  mk.role compute ctas 120 {}
  // expected-error @+1 {{'mk.tile_grid' op is outside every role of a scheduled program}}
  mk.tile_grid (%m, %n) over %c tiles [128, 128] : !mk.tensor<[256, 256], bf16, replicated> {}
}

// -----

mk.program @zero_ctas [] mesh <1x2> () grid 132 {
  // expected-error @+1 {{'mk.role' op attribute 'ctas' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  mk.role compute ctas 0 {}
}

// -----

mk.program @role_kind [] mesh <1x2> () grid 132 {
  // expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'kind' [compute, intra_transfer, intra_reduce, inter_send, inter_reduce, republish, dispatch, combine]}}
  mk.role prefetch ctas 4 {}
}

// -----

mk.program @buffer_outside [] mesh <?x?> () {}
// expected-error @+1 {{'mk.buffer' op expects parent op 'mk.program'}}
%b = mk.buffer : !mk.tensor<[4], f32, symmetric>

//===----------------------------------------------------------------------===//
// mk.tile_grid
//===----------------------------------------------------------------------===//

// -----

mk.program @coords [M, N] mesh <?x?> (%c: !mk.tensor<[M, N], bf16, replicated>) {
  // expected-error @+1 {{'mk.tile_grid' op over a rank-2 tensor takes 2 tile coordinates, got 1}}
  mk.tile_grid (%m) over %c tiles [128, 128] : !mk.tensor<[M, N], bf16, replicated> {}
}

// -----

mk.program @sizes [M, N] mesh <?x?> (%c: !mk.tensor<[M, N], bf16, replicated>) {
  // expected-error @+1 {{'mk.tile_grid' op needs one tile size per dim of its rank-2 tensor, got 1}}
  mk.tile_grid (%m, %n) over %c tiles [128] : !mk.tensor<[M, N], bf16, replicated> {}
}

// -----

mk.program @size_zero [M, N] mesh <?x?> (%c: !mk.tensor<[M, N], bf16, replicated>) {
  // expected-error @+1 {{'mk.tile_grid' op has tile size 0 on dim 1; tile sizes must be positive}}
  mk.tile_grid (%m, %n) over %c tiles [128, 0] : !mk.tensor<[M, N], bf16, replicated> {}
}

// -----

// A tile size that does not divide a dim without declared masking.
mk.program @divide [] mesh <?x?> (%c: !mk.tensor<[4096, 4096], bf16, replicated>) {
  // expected-error @+1 {{'mk.tile_grid' op tile size 96 does not divide dim 0 (extent 4096); declare 'masked' to allow a partial last tile}}
  mk.tile_grid (%m, %n) over %c tiles [96, 128] : !mk.tensor<[4096, 4096], bf16, replicated> {}
}

// -----

// The same for the rows one rank holds: 4096 / 8 = 512 local rows.
mk.program @divide_local [M = 4096] mesh <2x4> (%c: !mk.tensor<[M, 4096], bf16, shard 0 over world>) {
  // expected-error @+1 {{'mk.tile_grid' op tile size 384 does not divide the shards of dim 0 (4096 over 8 ranks: shards of 512); declare 'masked' to allow partial tiles, or use a multiple of 3072 (3072 or 6144)}}
  mk.tile_grid (%m, %n) over %c tiles [384, 128] : !mk.tensor<[M, 4096], bf16, shard 0 over world> {}
}

// -----

// Uneven shards (as torch.tensor_split: 1024 rows over 3 ranks are 342, 341 and 341) never hold
// whole tiles of more than one row, even in a global grid.
mk.program @divide_uneven [M = 1024] mesh <1x3> (%c: !mk.tensor<[M, 4096], bf16, shard 0 over world>) {
  // expected-error @+1 {{'mk.tile_grid' op tile size 128 does not divide the shards of dim 0 (1024 over 3 ranks: shards of 342 and 341); declare 'masked' to allow partial tiles, or use a multiple of 384 (768 or 1152)}}
  mk.tile_grid (%m, %n) over %c global tiles [128, 128] : !mk.tensor<[M, 4096], bf16, shard 0 over world> {}
}

// -----

mk.program @row_counts_type [E] mesh <?x?> (%r: !mk.tensor<[E, 256, 64], bf16, replicated>, %c: !mk.tensor<[E, 2], i32, replicated>) {
  // expected-error @+1 {{'mk.tile_grid' op takes row counts as a rank-1 integer tensor, got '!mk.tensor<[E, 2], i32, replicated>'}}
  mk.tile_grid (%e, %t, %n) over %r tiles [1, 128, 64] rows %c : !mk.tensor<[E, 256, 64], bf16, replicated>, !mk.tensor<[E, 2], i32, replicated> {}
}

// -----

mk.program @row_counts_rank [E] mesh <?x?> (%r: !mk.tensor<[E, 64], bf16, replicated>, %c: !mk.tensor<[E], i32, replicated>) {
  // expected-error @+1 {{'mk.tile_grid' op bounds rows by counts per index of dim 0, which needs a tensor of rank 3 or more}}
  mk.tile_grid (%e, %n) over %r tiles [1, 64] rows %c : !mk.tensor<[E, 64], bf16, replicated>, !mk.tensor<[E], i32, replicated> {}
}

// -----

mk.program @row_counts_extent [] mesh <?x?> (%r: !mk.tensor<[8, 256, 64], bf16, replicated>, %c: !mk.tensor<[4], i32, replicated>) {
  // expected-error @+1 {{'mk.tile_grid' op row counts and dim 0 of the tensor differ: 4 vs 8}}
  mk.tile_grid (%e, %t, %n) over %r tiles [1, 128, 64] rows %c : !mk.tensor<[8, 256, 64], bf16, replicated>, !mk.tensor<[4], i32, replicated> {}
}

// -----

mk.program @held_by_replicated [] mesh <?x?> (%r: !mk.tensor<[256, 64], bf16, replicated>) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.tile_grid' op visits the shard held by another rank, so its tensor must be sharded and the grid not global}}
  mk.tile_grid (%t, %n) over %r held_by %i tiles [128, 64] : !mk.tensor<[256, 64], bf16, replicated> {}
}

// -----

mk.program @distribute_axis [] mesh <?x?> (%r: !mk.tensor<[256, 64], bf16, replicated>) {
  // expected-error @+1 {{unknown mesh axis 'racks'; expected world, nodes or gpus}}
  mk.tile_grid (%t, %n) over %r tiles [128, 64] distribute racks : !mk.tensor<[256, 64], bf16, replicated> {}
}

// -----

mk.program @grid_types [] mesh <?x?> (%r: !mk.tensor<[8, 256, 64], bf16, replicated>, %c: !mk.tensor<[8], i32, replicated>) {
  // expected-error @+1 {{expected the type of the tensor and of the row counts}}
  mk.tile_grid (%e, %t, %n) over %r tiles [1, 128, 64] rows %c : !mk.tensor<[8, 256, 64], bf16, replicated> {}
}

//===----------------------------------------------------------------------===//
// Tile accesses: mk.load, mk.store
//===----------------------------------------------------------------------===//

// -----

!T = !mk.tensor<[M, K], bf16, replicated>
mk.program @access_count [M, K] mesh <?x?> (%a: !T) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.load' op indexes 3 dims of its source, which has rank 2}}
  %t = mk.load %a[%i, %i, :] : !T -> !mk.tile<[128, K], bf16>
}

// -----

!T = !mk.tensor<[M, K], bf16, replicated>
mk.program @whole_dims [M, K] mesh <?x?> (%a: !T) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.load' op has malformed whole dims in its source access}}
  %t = "mk.load"(%a, %i) <{whole_dims = array<i64: 7>}> : (!T, index) -> !mk.tile<[128, K], bf16>
}

// -----

!T = !mk.tensor<[K], bf16, replicated>
mk.program @tile_too_big [K] mesh <?x?> (%a: !T) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.load' op cannot hold a rank-2 tile of its rank-1 source}}
  %t = mk.load %a[%i] : !T -> !mk.tile<[1, 128], bf16>
}

// -----

!T = !mk.tensor<[B, S, D], bf16, replicated>
mk.program @whole_leading [B, S, D] mesh <?x?> (%a: !T) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.load' op takes ':' on a dim of its source that is not a tile dim; only the last 2 dims can be whole}}
  %t = mk.load %a[:, %i, %i] : !T -> !mk.tile<[128, 64], bf16>
}

// -----

!T = !mk.tensor<[S, D], bf16, replicated>
mk.program @whole_extent [S, D = 128] mesh <?x?> (%a: !T) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.load' op has a tile dim of 64 where dim 1 of its source is whole with extent D = 128}}
  %t = mk.load %a[%i, :] : !T -> !mk.tile<[128, 64], bf16>
}

// -----

// A whole sharded dim is the extent one rank holds: 1024 / 2 nodes.
!T = !mk.tensor<[128, 1024], bf16, shard 1 over nodes>
mk.program @whole_local [] mesh <2x4> (%a: !T) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.load' op has a tile dim of 1024 where dim 1 of its source is whole with extent 512}}
  %t = mk.load %a[%i, :] : !T -> !mk.tile<[128, 1024], bf16>
}

// -----

!T = !mk.tensor<[M, N], bf16, replicated>
mk.program @load_dtype [M, N] mesh <?x?> (%a: !T) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.load' op dtype mismatch: the tile holds 'f32' but its source holds 'bf16'; convert with mk.convert}}
  %t = mk.load %a[%i, %i] : !T -> !mk.tile<[128, 128], f32>
}

// -----

!T = !mk.tensor<[M, N], bf16, replicated>
mk.program @store_dtype [M, N] mesh <?x?> (%c: !T) {
  mk.tile_grid (%m, %n) over %c tiles [128, 128] : !T {
    %zero = arith.constant 0.0 : f32
    %t = mk.splat %zero : f32 -> !mk.tile<[128, 128], f32>
    // expected-error @+1 {{'mk.store' op dtype mismatch: the tile holds 'f32' but its destination holds 'bf16'; convert with mk.convert}}
    mk.store %t, %c[%m, %n] : !mk.tile<[128, 128], f32>, !T
  }
}

//===----------------------------------------------------------------------===//
// mk.matmul
//===----------------------------------------------------------------------===//

// -----

!A = !mk.tensor<[M, K], bf16, replicated>
!B = !mk.tensor<[K, N], bf16, replicated>
mk.program @contracted_mark [M, N, K] mesh <?x?> (%a: !A, %b: !B) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.matmul' op must mark the contracted dim of its lhs with ':' on one of its last two dims}}
  %acc = mk.matmul %a[%i, %i], %b[:, %i] : !A, !B -> !mk.tile<[128, 128], f32>
}

// -----

!A = !mk.tensor<[K], bf16, replicated>
!B = !mk.tensor<[K, N], bf16, replicated>
mk.program @matmul_rank [N, K] mesh <?x?> (%a: !A, %b: !B) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.matmul' op needs an lhs of rank 2 or more}}
  %acc = mk.matmul %a[:], %b[:, %i] : !A, !B -> !mk.tile<[128, 128], f32>
}

// -----

!A = !mk.tensor<[M, K], bf16, replicated>
!B = !mk.tensor<[K, N], bf16, replicated>
mk.program @matmul_result_rank [M, N, K] mesh <?x?> (%a: !A, %b: !B) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.matmul' op produces a rank-2 tile, not '!mk.tile<[128], f32>'}}
  %acc = mk.matmul %a[%i, :], %b[:, %i] : !A, !B -> !mk.tile<[128], f32>
}

// -----

!A = !mk.tensor<[M, K], bf16, replicated>
!B = !mk.tensor<[K, N], bf16, replicated>
mk.program @accumulate_f32 [M, N, K] mesh <?x?> (%a: !A, %b: !B) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.matmul' op accumulates in f32, not 'bf16'; convert the result to store another dtype}}
  %acc = mk.matmul %a[%i, :], %b[:, %i] : !A, !B -> !mk.tile<[128, 128], bf16>
}

// -----

!A = !mk.tensor<[M, K], bf16, replicated>
!B = !mk.tensor<[K, N], f16, replicated>
mk.program @operand_dtypes [M, N, K] mesh <?x?> (%a: !A, %b: !B) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.matmul' op needs float operands of one dtype, got 'bf16' and 'f16'}}
  %acc = mk.matmul %a[%i, :], %b[:, %i] : !A, !B -> !mk.tile<[128, 128], f32>
}

// -----

// A shape mismatch: the contracted dims of A [M, K] and B [N, N] differ once bound.
!A = !mk.tensor<[M, K], bf16, replicated>
!B = !mk.tensor<[N, N], bf16, replicated>
mk.program @contracted_dims [M, N = 256, K = 512] mesh <?x?> (%a: !A, %b: !B) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.matmul' op contracted dims of lhs and rhs differ: K = 512 vs N = 256}}
  %acc = mk.matmul %a[%i, :], %b[:, %i] : !A, !B -> !mk.tile<[128, 128], f32>
}

// -----

!A = !mk.tensor<[M, K], bf16, shard 1 over world>
!B = !mk.tensor<[K, N], bf16, replicated>
mk.program @contracted_placement [M, N, K] mesh <?x?> (%a: !A, %b: !B) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.matmul' op contracts a dim that is sharded over world in the lhs but not sharded in the rhs; both must hold the same slice}}
  %acc = mk.matmul %a[%i, :], %b[:, %i] : !A, !B -> !mk.tile<[128, 128], f32>
}

// -----

!A = !mk.tensor<[M, 4096], bf16, shard 1 over world>
!B = !mk.tensor<[4096, N], bf16, shard 0 over world>
mk.program @k_tile [M, N] mesh <1x8> (%a: !A, %b: !B) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.matmul' op k_tile 40 is not a multiple of 16, the depth of one mma step}}
  %acc = mk.matmul %a[%i, :], %b[:, %i] {k_tile = 40} : !A, !B -> !mk.tile<[128, 128], f32>
}

// -----

// Split-K's parts meet in f32 slots and a flag a tile of the program's.
!A = !mk.tensor<[256, 4096], bf16, replicated>
!B = !mk.tensor<[4096, 256], bf16, replicated>
mk.program @split_k_partials [] mesh <1x1> (%a: !A, %b: !B) {
  %p = mk.buffer : !mk.tensor<[512, 128], f32, replicated>
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.matmul' op takes partials and arrivals together, and only with k_splits}}
  %acc = mk.matmul %a[%i, :], %b[:, %i] partials %p : !mk.tensor<[512, 128], f32, replicated> {k_splits = 2} : !A, !B -> !mk.tile<[128, 128], f32>
}

// -----

!A = !mk.tensor<[256, 4096], bf16, replicated>
!B = !mk.tensor<[4096, 256], bf16, replicated>
mk.program @split_k_element [] mesh <1x1> (%a: !A, %b: !B) {
  mk.flags @split_k [2, 2]
  %p = mk.buffer : !mk.tensor<[512, 128], bf16, replicated>
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.matmul' op sums its split-K parts in f32: partials of 'bf16'}}
  %acc = mk.matmul %a[%i, :], %b[:, %i] partials %p : !mk.tensor<[512, 128], bf16, replicated> {k_splits = 2, arrivals = @split_k} : !A, !B -> !mk.tile<[128, 128], f32>
}

// -----

!A = !mk.tensor<[256, 4096], bf16, replicated>
!B = !mk.tensor<[4096, 256], bf16, replicated>
mk.program @split_k_flags [] mesh <1x1> (%a: !A, %b: !B) {
  %p = mk.buffer : !mk.tensor<[512, 128], f32, replicated>
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.matmul' op counts its split-K parts on @missing, which is not an mk.flags of the program}}
  %acc = mk.matmul %a[%i, :], %b[:, %i] partials %p : !mk.tensor<[512, 128], f32, replicated> {k_splits = 2, arrivals = @missing} : !A, !B -> !mk.tile<[128, 128], f32>
}

//===----------------------------------------------------------------------===//
// Tile compute
//===----------------------------------------------------------------------===//

// -----

mk.program @convert_shape [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %t = mk.splat %zero : f32 -> !mk.tile<[128, 128], f32>
  // expected-error @+1 {{'mk.convert' op changes the dtype only; the shapes differ: '!mk.tile<[128, 128], f32>' vs '!mk.tile<[128, 64], bf16>'}}
  %c = mk.convert %t : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 64], bf16>
}

// -----

mk.program @elementwise_types [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %a = mk.splat %zero : f32 -> !mk.tile<[128, 128], f32>
  %b = mk.splat %zero : f32 -> !mk.tile<[128, 64], f32>
  // expected-error @+1 {{'mk.add' op requires the same type for all operands and results}}
  %c = "mk.add"(%a, %b) : (!mk.tile<[128, 128], f32>, !mk.tile<[128, 64], f32>) -> !mk.tile<[128, 128], f32>
}

// -----

mk.program @activation_int [] mesh <?x?> () {
  %zero = arith.constant 0 : i32
  %a = mk.splat %zero : i32 -> !mk.tile<[128], i32>
  // expected-error @+1 {{'mk.activation' op operand #0 must be mk tile of floats}}
  %c = mk.activation relu %a : !mk.tile<[128], i32>
}

// -----

mk.program @activation_kind [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %a = mk.splat %zero : f32 -> !mk.tile<[128], f32>
  // expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'kind' [relu, gelu, silu]}}
  %c = mk.activation tanh %a : !mk.tile<[128], f32>
}

// -----

mk.program @broadcast_ranks [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %a = mk.splat %zero : f32 -> !mk.tile<[128, 128], f32>
  // expected-error @+1 {{'mk.broadcast' op broadcasts a rank-1 tile to a rank-2 tile}}
  %b = mk.broadcast %a dim 0 : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], f32>
}

// -----

mk.program @broadcast_dim [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %a = mk.splat %zero : f32 -> !mk.tile<[128], f32>
  // expected-error @+1 {{'mk.broadcast' op inserts dim 0 or 1, not 2}}
  %b = mk.broadcast %a dim 2 : !mk.tile<[128], f32> -> !mk.tile<[128, 128], f32>
}

// -----

mk.program @broadcast_dtype [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %a = mk.splat %zero : f32 -> !mk.tile<[128], f32>
  // expected-error @+1 {{'mk.broadcast' op keeps the dtype: 'f32' vs 'bf16'}}
  %b = mk.broadcast %a dim 1 : !mk.tile<[128], f32> -> !mk.tile<[128, 64], bf16>
}

// -----

mk.program @broadcast_extent [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %a = mk.splat %zero : f32 -> !mk.tile<[128], f32>
  // expected-error @+1 {{'mk.broadcast' op the source dim and the kept result dim differ: 128 vs 64}}
  %b = mk.broadcast %a dim 0 : !mk.tile<[128], f32> -> !mk.tile<[128, 64], f32>
}

// -----

mk.program @reduce_ranks [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %a = mk.splat %zero : f32 -> !mk.tile<[128], f32>
  // expected-error @+1 {{'mk.reduce' op reduces a rank-2 tile to a rank-1 tile}}
  %b = mk.reduce sum %a dim 0 : !mk.tile<[128], f32> -> !mk.tile<[128], f32>
}

// -----

mk.program @reduce_dim [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %a = mk.splat %zero : f32 -> !mk.tile<[128, 64], f32>
  // expected-error @+1 {{'mk.reduce' op reduces dim 0 or 1, not 3}}
  %b = mk.reduce sum %a dim 3 : !mk.tile<[128, 64], f32> -> !mk.tile<[128], f32>
}

// -----

mk.program @reduce_dtype [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %a = mk.splat %zero : f32 -> !mk.tile<[128, 64], f32>
  // expected-error @+1 {{'mk.reduce' op keeps the dtype: 'f32' vs 'f16'}}
  %b = mk.reduce max %a dim 1 : !mk.tile<[128, 64], f32> -> !mk.tile<[128], f16>
}

// -----

mk.program @reduce_extent [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %a = mk.splat %zero : f32 -> !mk.tile<[128, 64], f32>
  // expected-error @+1 {{'mk.reduce' op the kept source dim and the result dim differ: 128 vs 64}}
  %b = mk.reduce sum %a dim 1 : !mk.tile<[128, 64], f32> -> !mk.tile<[64], f32>
}

// -----

mk.program @splat_dtype [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  // expected-error @+1 {{'mk.splat' op dtype mismatch: a 'f32' scalar cannot fill '!mk.tile<[128], bf16>'}}
  %a = mk.splat %zero : f32 -> !mk.tile<[128], bf16>
}

// -----

mk.program @attention_ranks [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %q = mk.splat %zero : f32 -> !mk.tile<[64], f32>
  %acc = mk.splat %zero : f32 -> !mk.tile<[64, 64], f32>
  // expected-error @+1 {{'mk.attention_block' op needs rank-2 q, k, v and accumulator tiles, got '!mk.tile<[64], f32>'}}
  %a, %m, %l = mk.attention_block %q, %q, %q, %acc, %q, %q : !mk.tile<[64], f32>, !mk.tile<[64], f32>, !mk.tile<[64], f32>, !mk.tile<[64, 64], f32>, !mk.tile<[64], f32>
}

// -----

mk.program @attention_stats [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %t = mk.splat %zero : f32 -> !mk.tile<[64, 64], f32>
  // expected-error @+1 {{'mk.attention_block' op keeps its row max and row sum in rank-1 tiles, got '!mk.tile<[64, 64], f32>'}}
  %a, %m, %l = mk.attention_block %t, %t, %t, %t, %t, %t : !mk.tile<[64, 64], f32>, !mk.tile<[64, 64], f32>, !mk.tile<[64, 64], f32>, !mk.tile<[64, 64], f32>, !mk.tile<[64, 64], f32>
}

// -----

mk.program @attention_dtypes [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %zb = arith.constant 0.0 : bf16
  %t = mk.splat %zero : f32 -> !mk.tile<[64, 64], f32>
  %b = mk.splat %zb : bf16 -> !mk.tile<[64, 64], bf16>
  %s = mk.splat %zero : f32 -> !mk.tile<[64], f32>
  // expected-error @+1 {{'mk.attention_block' op needs q, k and v of one dtype}}
  %a, %m, %l = mk.attention_block %b, %t, %t, %t, %s, %s : !mk.tile<[64, 64], bf16>, !mk.tile<[64, 64], f32>, !mk.tile<[64, 64], f32>, !mk.tile<[64, 64], f32>, !mk.tile<[64], f32>
}

// -----

mk.program @attention_state [] mesh <?x?> () {
  %zb = arith.constant 0.0 : bf16
  %b = mk.splat %zb : bf16 -> !mk.tile<[64, 64], bf16>
  %s = mk.splat %zb : bf16 -> !mk.tile<[64], bf16>
  // expected-error @+1 {{'mk.attention_block' op keeps its running state in f32}}
  %a, %m, %l = mk.attention_block %b, %b, %b, %b, %s, %s : !mk.tile<[64, 64], bf16>, !mk.tile<[64, 64], bf16>, !mk.tile<[64, 64], bf16>, !mk.tile<[64, 64], bf16>, !mk.tile<[64], bf16>
}

// -----

mk.program @attention_head_dims [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %zb = arith.constant 0.0 : bf16
  %q = mk.splat %zb : bf16 -> !mk.tile<[64, 128], bf16>
  %k = mk.splat %zb : bf16 -> !mk.tile<[64, 64], bf16>
  %acc = mk.splat %zero : f32 -> !mk.tile<[64, 64], f32>
  %s = mk.splat %zero : f32 -> !mk.tile<[64], f32>
  // expected-error @+1 {{'mk.attention_block' op query and key head dims differ: 128 vs 64}}
  %a, %m, %l = mk.attention_block %q, %k, %k, %acc, %s, %s : !mk.tile<[64, 128], bf16>, !mk.tile<[64, 64], bf16>, !mk.tile<[64, 64], bf16>, !mk.tile<[64, 64], f32>, !mk.tile<[64], f32>
}

// -----

mk.program @attention_positions [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %zb = arith.constant 0.0 : bf16
  %i = arith.constant 0 : index
  %q = mk.splat %zb : bf16 -> !mk.tile<[64, 64], bf16>
  %acc = mk.splat %zero : f32 -> !mk.tile<[64, 64], f32>
  %s = mk.splat %zero : f32 -> !mk.tile<[64], f32>
  // expected-error @+1 {{'mk.attention_block' op takes two positions (query tile, key tile), got 1}}
  %a, %m, %l = mk.attention_block %q, %q, %q, %acc, %s, %s at (%i) : !mk.tile<[64, 64], bf16>, !mk.tile<[64, 64], bf16>, !mk.tile<[64, 64], bf16>, !mk.tile<[64, 64], f32>, !mk.tile<[64], f32>
}

// -----

mk.program @attention_causal [] mesh <?x?> () {
  %zero = arith.constant 0.0 : f32
  %zb = arith.constant 0.0 : bf16
  %q = mk.splat %zb : bf16 -> !mk.tile<[64, 64], bf16>
  %acc = mk.splat %zero : f32 -> !mk.tile<[64, 64], f32>
  %s = mk.splat %zero : f32 -> !mk.tile<[64], f32>
  // expected-error @+1 {{'mk.attention_block' op is causal, so it needs the query and key tile coordinates: add 'at (%qi, %kj)'}}
  %a, %m, %l = mk.attention_block %q, %q, %q, %acc, %s, %s causal : !mk.tile<[64, 64], bf16>, !mk.tile<[64, 64], bf16>, !mk.tile<[64, 64], bf16>, !mk.tile<[64, 64], f32>, !mk.tile<[64], f32>
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

// -----

!C = !mk.tensor<[M, N], bf16, shard 0 over world>
mk.program @all_reduce_sharded [M, N] mesh <?x?> (%c: !C) {
  mk.tile_grid (%m, %n) over %c global tiles [128, 128] : !C {
    %zero = arith.constant 0.0 : bf16
    %t = mk.splat %zero : bf16 -> !mk.tile<[128, 128], bf16>
    // expected-error @+1 {{'mk.all_reduce' op leaves every rank of world with the result, so its destination must be replicated, not shard 0 over world; use mk.reduce_scatter for a sharded one}}
    mk.all_reduce sum %t into %c[%m, %n] : !mk.tile<[128, 128], bf16>, !C
  }
}

// -----

!C = !mk.tensor<[M, N], bf16, replicated>
mk.program @all_reduce_dtype [M, N] mesh <?x?> (%c: !C) {
  mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {
    %zero = arith.constant 0.0 : f32
    %t = mk.splat %zero : f32 -> !mk.tile<[128, 128], f32>
    // expected-error @+1 {{'mk.all_reduce' op dtype mismatch: the tile holds 'f32' but its destination holds 'bf16'; convert with mk.convert}}
    mk.all_reduce sum %t into %c[%m, %n] : !mk.tile<[128, 128], f32>, !C
  }
}

// -----

!C = !mk.tensor<[M, N], bf16, replicated>
mk.program @reduce_scatter_replicated [M, N] mesh <?x?> (%c: !C) {
  mk.tile_grid (%m, %n) over %c tiles [128, 128] : !C {
    %zero = arith.constant 0.0 : bf16
    %t = mk.splat %zero : bf16 -> !mk.tile<[128, 128], bf16>
    // expected-error @+1 {{'mk.reduce_scatter' op leaves the result on the rank that holds the tile, so its destination must be sharded; use mk.all_reduce for a replicated one}}
    mk.reduce_scatter sum %t into %c[%m, %n] : !mk.tile<[128, 128], bf16>, !C
  }
}

// -----

mk.program @all_gather_source [M] mesh <?x?> (%a: !mk.tensor<[M, 64], bf16, replicated>) {
  // expected-error @+1 {{'mk.all_gather' op gathers the shards of a sharded tensor, not of '!mk.tensor<[M, 64], bf16, replicated>'}}
  %g = mk.all_gather %a : !mk.tensor<[M, 64], bf16, replicated> -> !mk.tensor<[M, 64], bf16, replicated>
}

// -----

mk.program @all_gather_result [M] mesh <?x?> (%a: !mk.tensor<[M, 64], bf16, shard 0 over world>) {
  // expected-error @+1 {{'mk.all_gather' op produces a replicated tensor, not '!mk.tensor<[M, 64], bf16, symmetric>'}}
  %g = mk.all_gather %a : !mk.tensor<[M, 64], bf16, shard 0 over world> -> !mk.tensor<[M, 64], bf16, symmetric>
}

// -----

mk.program @all_gather_shape [M] mesh <?x?> (%a: !mk.tensor<[M, 64], bf16, shard 0 over world>) {
  // expected-error @+1 {{'mk.all_gather' op keeps shape and dtype: '!mk.tensor<[M, 64], bf16, shard 0 over world>' vs '!mk.tensor<[M, 64], f32, replicated>'}}
  %g = mk.all_gather %a : !mk.tensor<[M, 64], bf16, shard 0 over world> -> !mk.tensor<[M, 64], f32, replicated>
}

// -----

mk.program @all_gather_chunk [M] mesh <?x?> (%a: !mk.tensor<[M, 64], bf16, shard 0 over world>) {
  // expected-error @+1 {{'mk.all_gather' op needs a positive chunk extent per dim}}
  %g = mk.all_gather %a {chunk = array<i64: 128>} : !mk.tensor<[M, 64], bf16, shard 0 over world> -> !mk.tensor<[M, 64], bf16, replicated>
}

// -----

!K = !mk.tensor<[S, 64], bf16, shard 0 over gpus>
mk.program @ring_axis [S] mesh <?x?> (%k: !K) {
  // expected-error @+1 {{'mk.ring_shift' op moves shards over world, but shard #0 is '!mk.tensor<[S, 64], bf16, shard 0 over gpus>'}}
  mk.ring_shift %k over world : !K {
  ^bb0(%src: index, %shard: !K):
  }
}

// -----

!K = !mk.tensor<[S, 64], bf16, shard 0 over world>
mk.program @ring_arguments [S] mesh <?x?> (%k: !K) {
  // expected-error @+1 {{'mk.ring_shift' op body takes the source index, the shards and the loop-carried values (2 arguments), got 1}}
  mk.ring_shift %k over world : !K {
  ^bb0(%shard: !K):
  }
}

// -----

!K = !mk.tensor<[S, 64], bf16, shard 0 over world>
mk.program @ring_source [S] mesh <?x?> (%k: !K) {
  // expected-error @+1 {{'mk.ring_shift' op body's first argument is the source index, of type index}}
  mk.ring_shift %k over world : !K {
  ^bb0(%src: i32, %shard: !K):
  }
}

// -----

!K = !mk.tensor<[S, 64], bf16, shard 0 over world>
!K2 = !mk.tensor<[S, 32], bf16, shard 0 over world>
mk.program @ring_shard_types [S] mesh <?x?> (%k: !K) {
  // expected-error @+1 {{'mk.ring_shift' op body's shard arguments must have the types of the shards}}
  mk.ring_shift %k over world : !K {
  ^bb0(%src: index, %shard: !K2):
  }
}

// -----

!K = !mk.tensor<[S, 64], bf16, shard 0 over world>
mk.program @ring_carried [S] mesh <?x?> (%k: !K) {
  %zero = arith.constant 0.0 : f32
  %init = mk.splat %zero : f32 -> !mk.tile<[64], f32>
  // expected-error @+1 {{'mk.ring_shift' op body's loop-carried arguments must have the types of the initial values}}
  %r = mk.ring_shift %k over world iter_args(%init : !mk.tile<[64], f32>) : !K -> !mk.tile<[64], f32> {
  ^bb0(%src: index, %shard: !K, %c: !mk.tile<[32], f32>):
    mk.yield %init : !mk.tile<[64], f32>
  }
}

// -----

!K = !mk.tensor<[S, 64], bf16, shard 0 over world>
mk.program @ring_results [S] mesh <?x?> (%k: !K) {
  %zero = arith.constant 0.0 : f32
  %init = mk.splat %zero : f32 -> !mk.tile<[64], f32>
  // expected-error @+1 {{'mk.ring_shift' op results must have the types of the initial values}}
  %r = mk.ring_shift %k over world iter_args(%init : !mk.tile<[64], f32>) : !K -> !mk.tile<[32], f32> {
  ^bb0(%src: index, %shard: !K, %c: !mk.tile<[64], f32>):
    mk.yield %c : !mk.tile<[64], f32>
  }
}

// -----

!K = !mk.tensor<[S, 64], bf16, shard 0 over world>
mk.program @ring_yield [S] mesh <?x?> (%k: !K) {
  %zero = arith.constant 0.0 : f32
  %init = mk.splat %zero : f32 -> !mk.tile<[64], f32>
  %r = mk.ring_shift %k over world iter_args(%init : !mk.tile<[64], f32>) : !K -> !mk.tile<[64], f32> {
  ^bb0(%src: index, %shard: !K, %c: !mk.tile<[64], f32>):
    // expected-error @+1 {{'mk.yield' op must pass values of the loop-carried types to the next step}}
    mk.yield
  }
}

// -----

mk.program @yield_parent [] mesh <?x?> () {
  // expected-error @+1 {{'mk.yield' op expects parent op 'mk.ring_shift'}}
  mk.yield
}

// -----

!X = !mk.tensor<[T, H], bf16, shard 0 over world>
mk.program @dispatch_ranks [T, H, E, C] mesh <?x?> (%x: !X) {
  // expected-error @+1 {{'mk.dispatch' op takes tokens [T, H] and experts [T, top_k] and produces routed rows [E, C, H], counts [E] and origins [E, C]}}
  %r, %c, %o = mk.dispatch %x by %x : !X, !X -> !X, !mk.tensor<[E], i32, shard 0 over world>, !mk.tensor<[E, C], i32, shard 0 over world>
}

// -----

!X = !mk.tensor<[T, H], bf16, shard 1 over world>
!I = !mk.tensor<[T, 2], i32, shard 1 over world>
mk.program @dispatch_tokens [T, H, E, C] mesh <?x?> (%x: !X, %i: !I) {
  // expected-error @+1 {{'mk.dispatch' op takes tokens sharded along dim 0, not '!mk.tensor<[T, H], bf16, shard 1 over world>'}}
  %r, %c, %o = mk.dispatch %x by %i : !X, !I -> !mk.tensor<[E, C, H], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world>, !mk.tensor<[E, C], i32, shard 0 over world>
}

// -----

!X = !mk.tensor<[T, H], bf16, shard 0 over world>
!I = !mk.tensor<[T, 2], i32, shard 0 over gpus>
mk.program @dispatch_placement [T, H, E, C] mesh <?x?> (%x: !X, %i: !I) {
  // expected-error @+1 {{'mk.dispatch' op needs all of its tensors placed like the tokens (shard 0 over world), not '!mk.tensor<[T, 2], i32, shard 0 over gpus>'}}
  %r, %c, %o = mk.dispatch %x by %i : !X, !I -> !mk.tensor<[E, C, H], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world>, !mk.tensor<[E, C], i32, shard 0 over world>
}

// -----

!X = !mk.tensor<[T, H], bf16, shard 0 over world>
!I = !mk.tensor<[T, 2], i64, shard 0 over world>
mk.program @dispatch_metadata [T, H, E, C] mesh <?x?> (%x: !X, %i: !I) {
  // expected-error @+1 {{'mk.dispatch' op carries routing metadata as i32, not 'i64'}}
  %r, %c, %o = mk.dispatch %x by %i : !X, !I -> !mk.tensor<[E, C, H], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world>, !mk.tensor<[E, C], i32, shard 0 over world>
}

// -----

!X = !mk.tensor<[T, H], bf16, shard 0 over world>
!I = !mk.tensor<[T, 2], i32, shard 0 over world>
mk.program @dispatch_dtype [T, H, E, C] mesh <?x?> (%x: !X, %i: !I) {
  // expected-error @+1 {{'mk.dispatch' op dtype mismatch: tokens are 'bf16' but routed rows are 'f16'}}
  %r, %c, %o = mk.dispatch %x by %i : !X, !I -> !mk.tensor<[E, C, H], f16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world>, !mk.tensor<[E, C], i32, shard 0 over world>
}

// -----

!X = !mk.tensor<[T, 1024], bf16, shard 0 over world>
!I = !mk.tensor<[T, 2], i32, shard 0 over world>
mk.program @dispatch_hidden [T, E, C] mesh <?x?> (%x: !X, %i: !I) {
  // expected-error @+1 {{'mk.dispatch' op hidden sizes differ: 1024 vs 512}}
  %r, %c, %o = mk.dispatch %x by %i : !X, !I -> !mk.tensor<[E, C, 512], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world>, !mk.tensor<[E, C], i32, shard 0 over world>
}

// -----

!Y = !mk.tensor<[T, H], bf16, shard 0 over world>
!O = !mk.tensor<[E, C], i32, shard 0 over world>
!W = !mk.tensor<[T, 2], f32, shard 0 over world>
mk.program @combine_coords [T, H, E, C] mesh <?x?> (%y: !Y, %o: !O, %w: !W) {
  %zero = arith.constant 0.0 : f32
  %i = arith.constant 0 : index
  %t = mk.splat %zero : f32 -> !mk.tile<[128, 128], f32>
  // expected-error @+1 {{'mk.combine' op takes the tile's coordinates [expert, row tile, column tile], got 2}}
  mk.combine %t from [%i, %i] into %y routed %o weighted %w : !mk.tile<[128, 128], f32>, !Y, !O, !W
}

// -----

!Y = !mk.tensor<[T, H], bf16, shard 0 over world>
!O = !mk.tensor<[E, C], i32, shard 0 over world>
!W = !mk.tensor<[T, 2], f32, shard 0 over world>
mk.program @combine_ranks [T, H, E, C] mesh <?x?> (%y: !Y, %o: !O, %w: !W) {
  %zero = arith.constant 0.0 : f32
  %i = arith.constant 0 : index
  %t = mk.splat %zero : f32 -> !mk.tile<[128], f32>
  // expected-error @+1 {{'mk.combine' op takes a rank-2 tile, a destination [T, H], origins [E, C] and weights [T, top_k]}}
  mk.combine %t from [%i, %i, %i] into %y routed %o weighted %w : !mk.tile<[128], f32>, !Y, !O, !W
}

// -----

!Y = !mk.tensor<[T, H], bf16, shard 0 over world>
!O = !mk.tensor<[E, C], i64, shard 0 over world>
!W = !mk.tensor<[T, 2], f32, shard 0 over world>
mk.program @combine_origins [T, H, E, C] mesh <?x?> (%y: !Y, %o: !O, %w: !W) {
  %zero = arith.constant 0.0 : f32
  %i = arith.constant 0 : index
  %t = mk.splat %zero : f32 -> !mk.tile<[128, 128], f32>
  // expected-error @+1 {{'mk.combine' op takes origins as i32, not 'i64'}}
  mk.combine %t from [%i, %i, %i] into %y routed %o weighted %w : !mk.tile<[128, 128], f32>, !Y, !O, !W
}

// -----

!Y = !mk.tensor<[T, H], bf16, shard 0 over world>
!O = !mk.tensor<[E, C], i32, shard 0 over world>
!W = !mk.tensor<[T, 2], i32, shard 0 over world>
mk.program @combine_weights [T, H, E, C] mesh <?x?> (%y: !Y, %o: !O, %w: !W) {
  %zero = arith.constant 0.0 : f32
  %i = arith.constant 0 : index
  %t = mk.splat %zero : f32 -> !mk.tile<[128, 128], f32>
  // expected-error @+1 {{'mk.combine' op needs float weights and a float destination}}
  mk.combine %t from [%i, %i, %i] into %y routed %o weighted %w : !mk.tile<[128, 128], f32>, !Y, !O, !W
}

// -----

!Y = !mk.tensor<[T, H], bf16, replicated>
!O = !mk.tensor<[E, C], i32, shard 0 over world>
!W = !mk.tensor<[T, 2], f32, shard 0 over world>
mk.program @combine_dest [T, H, E, C] mesh <?x?> (%y: !Y, %o: !O, %w: !W) {
  %zero = arith.constant 0.0 : f32
  %i = arith.constant 0 : index
  %t = mk.splat %zero : f32 -> !mk.tile<[128, 128], f32>
  // expected-error @+1 {{'mk.combine' op returns rows to the ranks holding their tokens, so its destination must be sharded along dim 0, not '!mk.tensor<[T, H], bf16, replicated>'}}
  mk.combine %t from [%i, %i, %i] into %y routed %o weighted %w : !mk.tile<[128, 128], f32>, !Y, !O, !W
}

// -----

!Y = !mk.tensor<[1024, H], bf16, shard 0 over world>
!O = !mk.tensor<[E, C], i32, shard 0 over world>
!W = !mk.tensor<[2048, 2], f32, shard 0 over world>
mk.program @combine_tokens [H, E, C] mesh <?x?> (%y: !Y, %o: !O, %w: !W) {
  %zero = arith.constant 0.0 : f32
  %i = arith.constant 0 : index
  %t = mk.splat %zero : f32 -> !mk.tile<[128, 128], f32>
  // expected-error @+1 {{'mk.combine' op token counts of destination and weights differ: 1024 vs 2048}}
  mk.combine %t from [%i, %i, %i] into %y routed %o weighted %w : !mk.tile<[128, 128], f32>, !Y, !O, !W
}

// -----

mk.program @shard_range_replicated [S] mesh <?x?> (%k: !mk.tensor<[S, 64], bf16, replicated>) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.shard_range' op needs a sharded tensor, not '!mk.tensor<[S, 64], bf16, replicated>'}}
  %lo, %hi = mk.shard_range %k tile 64 of %i : !mk.tensor<[S, 64], bf16, replicated>
}

// -----

mk.program @sequence_tile_replicated [S] mesh <?x?> (%k: !mk.tensor<[S, 64], bf16, replicated>) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.sequence_tile' op needs a sharded tensor, not '!mk.tensor<[S, 64], bf16, replicated>'}}
  %p = mk.sequence_tile %k tile 64 of %i : !mk.tensor<[S, 64], bf16, replicated>
}

// -----

// A zigzag layout of 1000 over 2 ranks: chunks of 250, not whole tiles.
mk.program @zigzag_chunks [S = 1000] mesh <1x2> (%k: !mk.tensor<[S, 64], bf16, shard 0 over world zigzag>) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.sequence_tile' op places dim 0 (1000) zigzag in 4 chunks, which must be whole tiles of 128: use a multiple of 512 (512 or 1024)}}
  %p = mk.sequence_tile %k tile 128 of %i : !mk.tensor<[S, 64], bf16, shard 0 over world zigzag>
}

//===----------------------------------------------------------------------===//
// Scheduled level
//===----------------------------------------------------------------------===//

// -----

mk.program @flags_shape [] mesh <1x2> () {
  // expected-error @+1 {{'mk.flags' op needs a non-empty shape of positive extents}}
  mk.flags @f [4, 0]
}

// -----

mk.program @flags_parent [] mesh <1x2> () {}
// expected-error @+1 {{'mk.flags' op expects parent op 'mk.program'}}
mk.flags @f [4]

// -----

mk.program @unknown_flags [] mesh <1x2> () {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.signal' op names @missing, which is not an mk.flags array}}
  mk.signal @missing[%i]
}

// -----

mk.program @flags_rank [] mesh <1x2> () {
  mk.flags @f [4, 4]
  %i = arith.constant 0 : index
  mk.signal @f[%i, %i]
  // expected-error @+1 {{'mk.wait' op indexes @f with 1 indices, but it has rank 2}}
  mk.wait @f[%i] count 1
}

// -----

// A wait that no signal can satisfy.
mk.program @unsatisfiable [] mesh <1x2> () {
  mk.flags @ready [4]
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.wait' op can never be satisfied: nothing in @unsatisfiable signals @ready}}
  mk.wait @ready[%i] count 1
}

// -----

mk.program @wait_count [] mesh <1x2> () {
  mk.flags @ready [4]
  %i = arith.constant 0 : index
  mk.signal @ready[%i]
  // expected-error @+1 {{'mk.wait' op attribute 'count' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  mk.wait @ready[%i] count 0
}

// -----

// An unknown link.
mk.program @unknown_link [] mesh <1x2> () {
  mk.flags @ready [4]
  %i = arith.constant 0 : index
  // expected-error @+1 {{unknown link 'pcie'; expected nvlink_store, nvlink_bulk or rdma_proxy}}
  mk.signal @ready[%i] at gpu %i via pcie
}

// -----

mk.program @unknown_scope [] mesh <1x2> () {
  mk.flags @ready [4]
  %i = arith.constant 0 : index
  // expected-error @+1 {{expected 'gpu' or 'node' after 'at', got 'rack'}}
  mk.signal @ready[%i] at rack %i via rdma_proxy
}

// -----

mk.program @rdma_in_node [] mesh <2x2> () {
  mk.flags @ready [4]
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.signal' op cannot reach a GPU of this node through rdma_proxy; use nvlink_store or nvlink_bulk}}
  mk.signal @ready[%i] at gpu %i via rdma_proxy
}

// -----

mk.program @nvlink_across_nodes [] mesh <2x2> () {
  mk.flags @ready [4]
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.signal' op cannot reach another node through nvlink_store; transfers across nodes go through rdma_proxy, to the same GPU index (rail)}}
  mk.signal @ready[%i] at node %i via nvlink_store
}

// -----

mk.program @self_with_link [] mesh <2x2> () {
  mk.flags @ready [4]
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.signal' op reaches this rank, so it names no peer and no link}}
  "mk.signal"(%i) <{flags = @ready, scope = 0 : i32, link = 0 : i32, operandSegmentSizes = array<i32: 1, 0>}> : (index) -> ()
}

// -----

mk.program @peer_without_link [] mesh <2x2> () {
  mk.flags @ready [4]
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.signal' op reaches a peer, so it needs a peer index and a link}}
  "mk.signal"(%i, %i) <{flags = @ready, scope = 1 : i32, operandSegmentSizes = array<i32: 1, 1>}> : (index, index) -> ()
}

// -----

!S = !mk.tensor<[4, 256, 256], bf16, symmetric>
mk.program @put_access [] mesh <1x4> (%s: !S) {
  %i = arith.constant 0 : index
  %zero = arith.constant 0.0 : bf16
  %t = mk.splat %zero : bf16 -> !mk.tile<[128, 128], bf16>
  // expected-error @+1 {{'mk.put' op indexes 2 dims of its destination, which has rank 3}}
  mk.put %t, %s[%i, %i] at gpu %i via nvlink_store : !mk.tile<[128, 128], bf16>, !S
}

// -----

!S = !mk.tensor<[4, 256, 256], bf16, symmetric>
mk.program @put_dtype [] mesh <1x4> (%s: !S) {
  %i = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %t = mk.splat %zero : f32 -> !mk.tile<[128, 128], f32>
  // expected-error @+1 {{'mk.put' op dtype mismatch: the tile holds 'f32' but its destination holds 'bf16'; convert with mk.convert}}
  mk.put %t, %s[%i, %i, %i] at gpu %i via nvlink_store : !mk.tile<[128, 128], f32>, !S
}

// -----

!S = !mk.tensor<[4, 256, 256], bf16, symmetric>
mk.program @put_link [] mesh <2x4> (%s: !S) {
  %i = arith.constant 0 : index
  %zero = arith.constant 0.0 : bf16
  %t = mk.splat %zero : bf16 -> !mk.tile<[128, 128], bf16>
  // expected-error @+1 {{'mk.put' op cannot reach another node through nvlink_bulk; transfers across nodes go through rdma_proxy, to the same GPU index (rail)}}
  mk.put %t, %s[%i, %i, %i] at node %i via nvlink_bulk : !mk.tile<[128, 128], bf16>, !S
}

// -----

!S = !mk.tensor<[4, 256, 256], bf16, symmetric>
mk.program @put_combine_max [] mesh <1x4> (%s: !S) {
  %i = arith.constant 0 : index
  %zero = arith.constant 0.0 : bf16
  %t = mk.splat %zero : bf16 -> !mk.tile<[128, 128], bf16>
  // expected-error @+1 {{'mk.put' op combines with max; a put combines only by sum}}
  mk.put %t, %s[%i, %i, %i] at gpu %i via nvlink_store combine max : !mk.tile<[128, 128], bf16>, !S
}

// -----

!S = !mk.tensor<[4, 256, 256], i32, symmetric>
mk.program @put_combine_int [] mesh <1x4> (%s: !S) {
  %i = arith.constant 0 : index
  %zero = arith.constant 0 : i32
  %t = mk.splat %zero : i32 -> !mk.tile<[128, 128], i32>
  // expected-error @+1 {{'mk.put' op adds into 'i32' where the memory is, which takes bf16, f16 or f32}}
  mk.put %t, %s[%i, %i, %i] at gpu %i via nvlink_store combine sum : !mk.tile<[128, 128], i32>, !S
}

// -----

!S = !mk.tensor<[4, 256, 256], bf16, symmetric>
mk.program @put_combine_node [] mesh <2x4> (%s: !S) {
  %i = arith.constant 0 : index
  %zero = arith.constant 0.0 : bf16
  %t = mk.splat %zero : bf16 -> !mk.tile<[128, 128], bf16>
  // expected-error @+1 {{'mk.put' op adds into another node's memory, which the proxy cannot; combine within the node}}
  mk.put %t, %s[%i, %i, %i] at node %i via rdma_proxy combine sum : !mk.tile<[128, 128], bf16>, !S
}

// -----

!S = !mk.tensor<[1024, 1024], bf16, shard 0 over world>
mk.program @owner_row_slices_sharded [] mesh <1x4> (%s: !S) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.owner' op deals row slices of a tensor every rank holds whole, of rank 2 or more, not '!mk.tensor<[1024, 1024], bf16, shard 0 over world>'}}
  %node, %gpu = mk.owner %s[%i, %i] tile [128, 128] row_slices : !S
}

// -----

!S = !mk.tensor<[4, 256, 256], bf16, symmetric>
!F = !mk.tensor<[4, 256, 256], f32, symmetric>
mk.program @copy_dtype [] mesh <2x4> (%s: !S, %f: !F) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.copy' op dtype mismatch: copies 'bf16' into 'f32'}}
  mk.copy %s[%i, %i, %i] -> %f[%i, %i, %i] at node %i via rdma_proxy tile [128, 128] : !S, !F
}

// -----

!S = !mk.tensor<[4, 256, 256], bf16, symmetric>
mk.program @copy_tile [] mesh <2x4> (%s: !S) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.copy' op needs a tile of positive extents over the trailing dims of both tensors}}
  mk.copy %s[%i, %i, %i] -> %s[%i, %i, %i] at node %i via rdma_proxy tile [128, 0] : !S, !S
}

// -----

!S = !mk.tensor<[4, 256, 256], bf16, symmetric>
mk.program @copy_source [] mesh <2x4> (%s: !S) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.copy' op indexes 4 dims of its source, which has rank 3}}
  mk.copy %s[%i, %i, %i, %i] -> %s[%i, %i, %i] tile [128, 128] : !S, !S
}

// -----

!S = !mk.tensor<[4, 256, 256], bf16, symmetric>
mk.program @accumulate_slots [] mesh <1x4> (%s: !S) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.accumulate' op needs exactly 1 ':' on the leading dims of its source, got 0}}
  %t = mk.accumulate sum %s[%i, %i, %i] : !S -> !mk.tile<[128, 128], f32>
}

// -----

!S = !mk.tensor<[4, 256, 256], i32, symmetric>
mk.program @accumulate_float [] mesh <1x4> (%s: !S) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.accumulate' op accumulates into a float tile, not '!mk.tile<[128, 128], i32>'}}
  %t = mk.accumulate sum %s[:, %i, %i] : !S -> !mk.tile<[128, 128], i32>
}

// -----

mk.program @owner_coords [] mesh <1x4> (%c: !mk.tensor<[256, 256], bf16, shard 0 over world>) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.owner' op needs a coordinate and a tile extent per dim of '!mk.tensor<[256, 256], bf16, shard 0 over world>'}}
  %n, %g = mk.owner %c[%i] tile [128, 128] : !mk.tensor<[256, 256], bf16, shard 0 over world>
}

// -----

!X = !mk.tensor<[64, 32], bf16, shard 0 over world>
!E = !mk.tensor<[64, 2], i32, shard 0 over world>
!PE = !mk.tensor<[64, 2], i32, symmetric>
!N = !mk.tensor<[2], i32, symmetric>
mk.program @route_pack_regions [] mesh <2x1> (%x: !X, %e: !E, %n: !N) {
  // expected-error @+1 {{'mk.route_pack' op takes the packed rows as a symmetric rank-2 tensor of a region a node, not '!mk.tensor<[64, 32], bf16, shard 0 over world>'}}
  mk.route_pack %x, %e into %x, %e, %n, %e experts 8 : !X, !E, !X, !E, !N, !E
}

// -----

!X = !mk.tensor<[64, 32], bf16, shard 0 over world>
!E = !mk.tensor<[64, 2], i32, shard 0 over world>
!P = !mk.tensor<[64, 32], f32, symmetric>
!PE = !mk.tensor<[64, 2], i32, symmetric>
!N = !mk.tensor<[2], i32, symmetric>
mk.program @route_pack_dtype [] mesh <2x1> (%x: !X, %e: !E, %p: !P, %pe: !PE, %n: !N) {
  // expected-error @+1 {{'mk.route_pack' op dtype mismatch: tokens are 'bf16' but packed rows are 'f32'}}
  mk.route_pack %x, %e into %p, %pe, %n, %e experts 8 : !X, !E, !P, !PE, !N, !E
}

// -----

!P = !mk.tensor<[64, 32], bf16, symmetric>
!N = !mk.tensor<[2], i32, shard 0 over world>
mk.program @send_rows_count [] mesh <2x1> (%p: !P, %n: !mk.tensor<[2, 1], i32, symmetric>) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.send_rows' op reads its count from a rank-1 tensor, not '!mk.tensor<[2, 1], i32, symmetric>'}}
  mk.send_rows %p[%i] -> %p[%i] count %n[%i] at node %i via rdma_proxy : !P, !P, !mk.tensor<[2, 1], i32, symmetric>
}

// -----

mk.program @send_rows_sharded [] mesh <2x1> (%p: !mk.tensor<[64, 32], bf16, shard 0 over world>, %q: !mk.tensor<[64, 32], bf16, symmetric>) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.send_rows' op sends between symmetric tensors, and its source is '!mk.tensor<[64, 32], bf16, shard 0 over world>'}}
  mk.send_rows %p[%i] -> %q[%i] at node %i via rdma_proxy : !mk.tensor<[64, 32], bf16, shard 0 over world>, !mk.tensor<[64, 32], bf16, symmetric>
}

// -----

mk.program @send_rows_slices [] mesh <2x1> (%p: !mk.tensor<[64, 32], bf16, symmetric>, %q: !mk.tensor<[64, 16], bf16, symmetric>) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.send_rows' op slice shapes differ: 32 vs 16}}
  mk.send_rows %p[%i] -> %q[%i] at node %i via rdma_proxy : !mk.tensor<[64, 32], bf16, symmetric>, !mk.tensor<[64, 16], bf16, symmetric>
}

// -----

mk.program @send_rows_link [] mesh <2x2> (%p: !mk.tensor<[64, 32], bf16, symmetric>) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.send_rows' op cannot reach another node through nvlink_store; transfers across nodes go through rdma_proxy, to the same GPU index (rail)}}
  mk.send_rows %p[%i] -> %p[%i] at node %i via nvlink_store : !mk.tensor<[64, 32], bf16, symmetric>, !mk.tensor<[64, 32], bf16, symmetric>
}

// -----

!P = !mk.tensor<[64, 32], bf16, symmetric>
!PE = !mk.tensor<[64, 2], i32, symmetric>
!C = !mk.tensor<[2, 8], i32, symmetric>
mk.program @route_rows_forwarded [] mesh <2x1> (%p: !P, %pe: !PE, %c: !C, %r: !mk.tensor<[8, 16, 32], bf16, shard 0 over world>,
                                                %o: !mk.tensor<[8, 16], i32, shard 0 over world>,
                                                %n: !mk.tensor<[2], i32, shard 0 over world>) {
  mk.flags @arrived [8]
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.route_rows' op takes the token counts as a symmetric [N] tensor, not '!mk.tensor<[2], i32, shard 0 over world>'}}
  mk.route_rows %p, %pe, %c into %r, %o, %pe arrivals @arrived from node %i count %n[%i] : !P, !PE, !C, !mk.tensor<[8, 16, 32], bf16, shard 0 over world>, !mk.tensor<[8, 16], i32, shard 0 over world>, !PE, !mk.tensor<[2], i32, shard 0 over world>
}

// -----

mk.program @send_rows_dtype [] mesh <2x1> (%p: !mk.tensor<[64, 32], bf16, symmetric>, %q: !mk.tensor<[64, 32], f32, symmetric>) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.send_rows' op dtype mismatch: sends 'bf16' into 'f32'}}
  mk.send_rows %p[%i] -> %q[%i] at node %i via rdma_proxy : !mk.tensor<[64, 32], bf16, symmetric>, !mk.tensor<[64, 32], f32, symmetric>
}

// -----

mk.program @send_rows_rank [] mesh <2x1> (%p: !mk.tensor<[64, 32], bf16, symmetric>, %q: !mk.tensor<[64, 32, 1], bf16, symmetric>) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.send_rows' op sends slices of '!mk.tensor<[64, 32], bf16, symmetric>' into slices of another shape, '!mk.tensor<[64, 32, 1], bf16, symmetric>'}}
  mk.send_rows %p[%i] -> %q[%i] at node %i via rdma_proxy : !mk.tensor<[64, 32], bf16, symmetric>, !mk.tensor<[64, 32, 1], bf16, symmetric>
}

// -----

mk.program @send_rows_self [] mesh <2x1> (%p: !mk.tensor<[64, 32], bf16, symmetric>) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.send_rows' op sends to a peer: a GPU of this node or another node}}
  mk.send_rows %p[%i] -> %p[%i] : !mk.tensor<[64, 32], bf16, symmetric>, !mk.tensor<[64, 32], bf16, symmetric>
}

// -----

mk.program @send_rows_count_index [] mesh <2x1> (%p: !mk.tensor<[64, 32], bf16, symmetric>, %n: !mk.tensor<[2], i32, symmetric>) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.send_rows' op reads its count at an index of a tensor}}
  "mk.send_rows"(%p, %i, %p, %i, %n, %i) <{scope = 2 : i32, link = 2 : i32, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 0, 1>}> : (!mk.tensor<[64, 32], bf16, symmetric>, index, !mk.tensor<[64, 32], bf16, symmetric>, index, !mk.tensor<[2], i32, symmetric>, index) -> ()
}

// -----

!P = !mk.tensor<[64, 32], bf16, symmetric>
!PE = !mk.tensor<[64, 2], i32, symmetric>
!C = !mk.tensor<[2, 8], i32, symmetric>
mk.program @route_rows_source [] mesh <2x1> (%p: !P, %pe: !PE, %c: !C, %r: !mk.tensor<[8, 16, 32], bf16, shard 0 over world>,
                                             %o: !mk.tensor<[8, 16], i32, shard 0 over world>) {
  mk.flags @arrived [8]
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.route_rows' op names the source node and its count together}}
  "mk.route_rows"(%p, %pe, %c, %r, %o, %pe, %i) <{arrivals = @arrived, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 0, 0>}> : (!P, !PE, !C, !mk.tensor<[8, 16, 32], bf16, shard 0 over world>, !mk.tensor<[8, 16], i32, shard 0 over world>, !PE, index) -> ()
}

// -----

!R = !mk.tensor<[64, 2, 32], bf16, shard 0 over world>
!P = !mk.tensor<[64, 2], i32, shard 0 over world>
!W = !mk.tensor<[64, 2], f32, shard 0 over world>
!Y = !mk.tensor<[64, 32], bf16, shard 0 over world>
mk.program @combine_returned_coords [] mesh <1x2> (%r: !R, %p: !P, %w: !W, %y: !Y) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.combine_returned' op needs the destination tile's coordinates and extents}}
  mk.combine_returned %r, %p, %w into %y[%i] tile [16, 32] : !R, !P, !W, !Y
}

// -----

!R = !mk.tensor<[64, 2, 32], bf16, shard 0 over world>
!P = !mk.tensor<[64, 2], i32, shard 0 over world>
!W = !mk.tensor<[64, 2], f32, shard 0 over world>
!Y = !mk.tensor<[64, 32], bf16, shard 0 over world>
mk.program @combine_returned_at [] mesh <2x1> (%r: !R, %p: !P, %w: !W, %y: !Y) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.combine_returned' op finds results through `at` in a symmetric [rows, K, H] tensor, not '!mk.tensor<[64, 2, 32], bf16, shard 0 over world>'}}
  mk.combine_returned %r, %p, %w into %y[%i, %i] tile [16, 32] at %p : !R, !P, !W, !Y, !P
}

// -----

!C = !mk.tensor<[1024, 256], bf16, replicated>
mk.program @engine_copy_rows [] mesh <1x2> (%c: !C) {
  mk.flags @ready [2]
  // expected-error @+1 {{'mk.engine_copy' op copies rows [512, 2048], not a range within the 1024 rows of the tensor}}
  mk.engine_copy %c rows [512, 2048] cols [0, 256] from gpu 0 to gpu 1 after @ready[0] count 4 signal @ready[1] : !C
}

// -----

!C = !mk.tensor<[1024, 256], bf16, replicated>
mk.program @engine_copy_gpus [] mesh <1x2> (%c: !C) {
  mk.flags @ready [2]
  // expected-error @+1 {{'mk.engine_copy' op copies from GPU 1 to GPU 1: two different GPUs of a node of 2}}
  mk.engine_copy %c rows [0, 512] cols [0, 256] from gpu 1 to gpu 1 after @ready[0] count 4 signal @ready[1] : !C
}

// -----

!C = !mk.tensor<[1024, 256], bf16, shard 0 over world>
mk.program @engine_copy_sharded [] mesh <1x2> (%c: !C) {
  mk.flags @ready [2]
  // expected-error @+1 {{'mk.engine_copy' op copies a tensor that is not replicated or symmetric: a GPU's copy must be where the other GPU's is}}
  mk.engine_copy %c rows [0, 512] cols [0, 256] from gpu 0 to gpu 1 after @ready[0] count 4 signal @ready[1] : !C
}

// -----

!C = !mk.tensor<[1024, 256], bf16, replicated>
mk.program @engine_copy_flag [] mesh <1x2> (%c: !C) {
  mk.flags @ready [2]
  // expected-error @+1 {{'mk.engine_copy' op uses flag 2 of @ready, which has 2}}
  mk.engine_copy %c rows [0, 512] cols [0, 256] from gpu 0 to gpu 1 after @ready[2] count 4 signal @ready[1] : !C
}

// -----

!C = !mk.tensor<[M, 256], bf16, replicated>
mk.program @engine_copy_dynamic [M] mesh <1x2> (%c: !C) {
  mk.flags @ready [2]
  // expected-error @+1 {{'mk.engine_copy' op copies a block of a tensor that is not a matrix of static shape}}
  mk.engine_copy %c rows [0, 512] cols [0, 256] from gpu 0 to gpu 1 after @ready[0] count 4 signal @ready[1] : !C
}

// -----

!C = !mk.tensor<[1024, 256], bf16, replicated>
mk.program @engine_copy_cols [] mesh <1x2> (%c: !C) {
  mk.flags @ready [2]
  // expected-error @+1 {{'mk.engine_copy' op copies cols [256, 128], not a range within the 256 cols of the tensor}}
  mk.engine_copy %c rows [0, 512] cols [256, 128] from gpu 0 to gpu 1 after @ready[0] count 4 signal @ready[1] : !C
}

// -----

mk.program @symbol [M] mesh <?x?> () {
  // expected-error @+1 {{'mk.shape_symbol' op reads shape symbol 'N', which @symbol does not declare}}
  %n = mk.shape_symbol "N" : f32
}

// -----

mk.program @narrow_symbol [M = 300] mesh <?x?> () {
  // expected-error @+1 {{'mk.shape_symbol' op reads 'M' = 300 into 'i8', which cannot hold it}}
  %n = mk.shape_symbol "M" : i8
}

// -----

mk.program @unary_int [] mesh <?x?> () {
  %c = arith.constant 1 : i32
  %t = mk.splat %c : i32 -> !mk.tile<[16, 16], i32>
  // expected-error @+1 {{'mk.exp' op operand #0 must be mk tile of floats}}
  %e = mk.exp %t : !mk.tile<[16, 16], i32>
}

// -----

mk.program @combined_type [] mesh <?x?> (%r: !mk.tensor<[256, 256], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %r tiles [128, 128] : !mk.tensor<[256, 256], bf16, replicated> {
    %t = mk.load %r[%m, %n] : !mk.tensor<[256, 256], bf16, replicated> -> !mk.tile<[128, 128], bf16>
    // expected-error @+1 {{'mk.all_reduce' op gives the combined tile, of the value's type '!mk.tile<[128, 128], bf16>', not '!mk.tile<[128, 128], f32>'}}
    %s = mk.all_reduce sum %t into %r[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[256, 256], bf16, replicated> -> !mk.tile<[128, 128], f32>
  }
}

// -----

// expected-error @+1 {{'mk.shape_symbol' op reads a shape symbol, so it must be inside an mk.program}}
%n = mk.shape_symbol "N" : f32

// -----

mk.program @stamp_across_nodes [] mesh <2x1> () grid 4 {
  mk.flags @f [1]
  mk.role compute ctas 4 {
    %i = arith.constant 0 : index
    // expected-error @+1 {{'mk.signal' op stamps a flag on another node, which the proxy only counts; a stamp reaches this rank or a GPU of this node}}
    mk.signal @f[%i] at node %i via rdma_proxy stamp
  }
}

// -----

mk.program @per_cta_of_absent [] mesh <1x1> () grid 4 {
  mk.flags @f [1]
  mk.role compute ctas 4 {
    %i = arith.constant 0 : index
    mk.signal @f[%i]
    // expected-error @+1 {{'mk.wait' op counts arrivals per CTA of the dispatch role, which the program does not have}}
    mk.wait @f[%i] count 1 per_cta_of dispatch
  }
}

// -----

!E = !mk.tensor<[64, 2], i32, shard 0 over world>
mk.program @census_placement [] mesh <1x2> (%e: !E, %c: !mk.tensor<[2, 8], i32, shard 0 over world>) {
  // expected-error @+1 {{'mk.route_census' op takes the census as a symmetric [ranks, E] tensor, not '!mk.tensor<[2, 8], i32, shard 0 over world>'}}
  mk.route_census %e into %c : !E, !mk.tensor<[2, 8], i32, shard 0 over world>
}

// -----

!E = !mk.tensor<[64, 2], i32, shard 0 over world>
mk.program @census_rows [] mesh <1x2> (%e: !E, %c: !mk.tensor<[4, 8], i32, symmetric>) {
  // expected-error @+1 {{'mk.route_census' op takes a census of 4 rows, but the mesh has 2 ranks: a row a rank}}
  mk.route_census %e into %c : !E, !mk.tensor<[4, 8], i32, symmetric>
}

// -----

!C = !mk.tensor<[2, 8], i32, symmetric>
mk.program @route_counts_placement [] mesh <1x2> (%c: !C, %n: !mk.tensor<[8], i32, replicated>) {
  // expected-error @+1 {{'mk.route_counts' op fills counts [E] sharded along dim 0, not '!mk.tensor<[8], i32, replicated>'}}
  mk.route_counts %c into %n capacity 16 : !C, !mk.tensor<[8], i32, replicated>
}

// -----

!X = !mk.tensor<[64, 32], bf16, shard 0 over world>
!E = !mk.tensor<[64, 2], i32, shard 0 over world>
!C = !mk.tensor<[2, 8], i32, symmetric>
mk.program @route_rows_routed [] mesh <1x2> (%x: !X, %e: !E, %c: !C, %r: !mk.tensor<[8, 16, 32], bf16, replicated>,
                                             %o: !mk.tensor<[8, 16], i32, shard 0 over world>) {
  mk.flags @arrived [8]
  // expected-error @+1 {{'mk.route_rows' op fills routed rows [E, C, H] and origins [E, C], sharded along dim 0 alike, not '!mk.tensor<[8, 16, 32], bf16, replicated>' and '!mk.tensor<[8, 16], i32, shard 0 over world>'}}
  mk.route_rows %x, %e, %c into %r, %o, %e arrivals @arrived : !X, !E, !C, !mk.tensor<[8, 16, 32], bf16, replicated>, !mk.tensor<[8, 16], i32, shard 0 over world>, !E
}

// -----

!O = !mk.tensor<[8, 16], i32, shard 0 over world>
!N = !mk.tensor<[8], i32, shard 0 over world>
!R = !mk.tensor<[64, 2, 32], bf16, shard 0 over world>
mk.program @return_rows_coords [] mesh <1x2> (%o: !O, %n: !N, %r: !R) {
  %i = arith.constant 0 : index
  %z = arith.constant 0.0 : bf16
  %t = mk.splat %z : bf16 -> !mk.tile<[16, 32], bf16>
  // expected-error @+1 {{'mk.return_rows' op takes a rank-2 tile and its coordinates [expert, row tile, column tile]}}
  mk.return_rows %t, [%i, %i] via %o, %n into %r : !mk.tile<[16, 32], bf16>, !O, !N, !R
}

// -----

!N = !mk.tensor<[8], i32, shard 0 over world>
!R = !mk.tensor<[64, 2, 32], bf16, shard 0 over world>
mk.program @return_rows_origins [] mesh <1x2> (%n: !N, %r: !R) {
  %i = arith.constant 0 : index
  %z = arith.constant 0.0 : bf16
  %t = mk.splat %z : bf16 -> !mk.tile<[16, 32], bf16>
  // expected-error @+1 {{'mk.return_rows' op takes origins [E, C] and counts [E]}}
  mk.return_rows %t, [%i, %i, %i] via %n, %n into %r : !mk.tile<[16, 32], bf16>, !N, !N, !R
}

// -----

!O = !mk.tensor<[8, 16], i32, shard 0 over world>
!N = !mk.tensor<[8], i32, shard 0 over world>
mk.program @return_rows_into [] mesh <1x2> (%o: !O, %n: !N, %r: !mk.tensor<[64, 32], bf16, shard 0 over world>) {
  %i = arith.constant 0 : index
  %z = arith.constant 0.0 : bf16
  %t = mk.splat %z : bf16 -> !mk.tile<[16, 32], bf16>
  // expected-error @+1 {{'mk.return_rows' op returns rows into a [T, K, H] tensor sharded along dim 0 (or symmetric, across nodes), not '!mk.tensor<[64, 32], bf16, shard 0 over world>'}}
  mk.return_rows %t, [%i, %i, %i] via %o, %n into %r : !mk.tile<[16, 32], bf16>, !O, !N, !mk.tensor<[64, 32], bf16, shard 0 over world>
}

// -----

!O = !mk.tensor<[8, 16], i32, shard 0 over world>
!N = !mk.tensor<[8], i32, shard 0 over world>
!R = !mk.tensor<[64, 2, 32], bf16, shard 0 over world>
mk.program @return_rows_dtype [] mesh <1x2> (%o: !O, %n: !N, %r: !R) {
  %i = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  %t = mk.splat %z : f32 -> !mk.tile<[16, 32], f32>
  // expected-error @+1 {{'mk.return_rows' op dtype mismatch: the tile is 'f32' but the returned rows are 'bf16'}}
  mk.return_rows %t, [%i, %i, %i] via %o, %n into %r : !mk.tile<[16, 32], f32>, !O, !N, !R
}

// -----

!P = !mk.tensor<[64, 2], i32, shard 0 over world>
!W = !mk.tensor<[64, 2], f32, shard 0 over world>
!Y = !mk.tensor<[64, 32], bf16, shard 0 over world>
mk.program @combine_returned_ranks [] mesh <1x2> (%p: !P, %w: !W, %y: !Y) {
  %i = arith.constant 0 : index
  // expected-error @+1 {{'mk.combine_returned' op takes returned rows [T, K, H], placements and weights [T, K] and a destination [T, H]}}
  mk.combine_returned %y, %p, %w into %y[%i, %i] tile [16, 32] : !Y, !P, !W, !Y
}
