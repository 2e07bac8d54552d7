//===- MkOps.td - program-level ops of the mk dialect ------*- tablegen -*-===//
//
// What a kernel author writes: a program over distributed tensors, tile grids, compute on tiles and
// collective intents on tiles. The scheduled-level ops that passes produce are in MkScheduleOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef MK_OPS_TD
#define MK_OPS_TD

include "mk/IR/MkDialect.td"
include "mk/IR/MkEnums.td"
include "mk/IR/MkAttrs.td"
include "mk/IR/MkTypes.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def Mk_Tensor : Type<CPred<"::llvm::isa<::mlir::mk::DistTensorType>($_self)">, "mk tensor",
                     "::mlir::mk::DistTensorType">;
def Mk_Tile : Type<CPred<"::llvm::isa<::mlir::mk::TileType>($_self)">, "mk tile",
                   "::mlir::mk::TileType">;
def Mk_FloatTile : Type<And<[Mk_Tile.predicate,
    CPred<"::llvm::isa<::mlir::FloatType>(::llvm::cast<::mlir::mk::TileType>($_self).getElementType())">]>,
    "mk tile of floats", "::mlir::mk::TileType">;

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

def Mk_ProgramOp : Mk_Op<"program", [Symbol, SymbolTable, IsolatedFromAbove, NoTerminator,
                                     SingleBlock]> {
  let summary = "A fused multi-GPU operation: distributed tensors and what happens to their tiles";
  let description = [{
    A program declares its shape symbols (bound to numbers by specialization, `M = 8192` once
    bound; `C default T` takes T's value where specialization binds no other: a default names a
    symbol declared before it), the topology it runs on (and, once specialized for one, the rank
    it is compiled for), and its distributed tensor arguments. Its body holds tile grids, collectives and, after the
    compiler's passes, the roles of one persistent kernel of `grid` CTAs. Once shapes are bound,
    the bytes of its distributed tensors (arguments, buffers, gathered tensors) must count in
    int64, and those of one rank together fit 1 TiB (`kMaxRankBytes`), above any GPU's memory.

    ```mlir
    mk.program @gemm_allreduce [M, N, K] mesh <?x?> (
        %A: !mk.tensor<[M, K], bf16, shard 1 over world>,
        %B: !mk.tensor<[K, N], bf16, shard 0 over world>,
        %C: !mk.tensor<[M, N], bf16, replicated>) {
      ...
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       StrArrayAttr:$shape_symbols,
                       DenseI64ArrayAttr:$shape_values,
                       OptionalAttr<StrArrayAttr>:$shape_defaults,
                       Mk_MeshAttr:$mesh,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntNonNegative]>>:$rank,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$grid);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
    /// The value bound to shape symbol `name`: a number, ShapedType::kDynamic while unbound, or
    /// std::nullopt where the program declares no such symbol.
    std::optional<int64_t> lookupShapeSymbol(::llvm::StringRef name);
    /// The symbol whose value shape symbol `index` takes when nothing binds it ("" if none).
    ::llvm::StringRef getShapeDefault(unsigned index);
    /// The extent of `dim`: static, or the value bound to its symbol (kDynamic while unbound).
    int64_t resolve(::mlir::mk::Dim dim);
  }];
}

def Mk_BufferOp : Mk_Op<"buffer", [HasParent<"ProgramOp">,
                                   MemoryEffects<[MemAlloc<DefaultResource>]>]> {
  let summary = "A distributed tensor the program keeps for itself (intermediate or staging)";
  let description = [{
    The runtime places it in symmetric memory, so a buffer is addressable by peers whatever its
    placement.

    ```mlir
    %H = mk.buffer : !mk.tensor<[E, C, I], bf16, shard 0 over world>
    ```
  }];
  let results = (outs Mk_Tensor:$result);
  let assemblyFormat = "attr-dict `:` qualified(type($result))";
}

def Mk_TileGridOp : Mk_Op<"tile_grid", [SingleBlock, NoTerminator, RecursiveMemoryEffects,
                                         AttrSizedOperandSegments]> {
  let summary = "The tiles of a tensor, each processed once by the body";
  let description = [{
    The body runs once per tile of `target`, with the tile's global coordinates as block arguments.
    By default the grid covers the tiles this rank holds; `global` makes it cover every tile of the
    global tensor (each rank computes a contribution to every tile, as before a reduction). A tile
    size `:` takes the whole extent of that dim. A tile size must divide its dim unless the grid is
    `masked`, which allows a partial last tile. `rows %counts` bounds the rows by routing metadata:
    tiles past `counts[i0]` rows of the second-last dim are skipped (a grid of groups in tiles
    [1, R, C] then walks only the tiles within the counts, group by group). `order` is the production
    order; the compiler picks one where the program does not.

    Two clauses distribute a grid's tiles over ranks (the compiler uses them): `held_by %i` visits
    the tiles of the shard held by index %i along the target's sharding axis instead of this
    rank's, and `distribute gpus` keeps only the tiles whose owner (mk.owner) is this rank's GPU
    index.

    ```mlir
    mk.tile_grid (%m, %n) over %C tiles [128, 256] order #mk.order<swizzle 8> : !mk.tensor<[M, N], bf16, replicated> {
      ...
    }
    ```
  }];
  let arguments = (ins Mk_Tensor:$target,
                       Optional<Index>:$holder,
                       Optional<Mk_Tensor>:$row_counts,
                       DenseI64ArrayAttr:$tile_sizes,
                       UnitAttr:$global,
                       UnitAttr:$masked,
                       OptionalAttr<Mk_TileOrderAttr>:$order,
                       OptionalAttr<Mk_MeshAxis>:$distribute);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
    ::mlir::mk::DistTensorType getTargetType() { return ::llvm::cast<::mlir::mk::DistTensorType>(getTarget().getType()); }
    /// The tile extent along dim `d` (the whole extent where the tile size is `:`).
    ::mlir::mk::Dim getTileExtent(int64_t d);
  }];
}

//===----------------------------------------------------------------------===//
// Compute on tiles
//===----------------------------------------------------------------------===//

def Mk_LoadOp : Mk_Op<"load"> {
  let summary = "Read a tile of a tensor";
  let description = [{
    Indices are global tile coordinates: the tile's trailing dims take their extents from the result
    type, every other indexed dim has extent 1. `:` takes the whole extent of a dim.

    ```mlir
    %q = mk.load %Q[%b, %h, %i, :] : !mk.tensor<[B, H, S, D], bf16, shard 2 over world> -> !mk.tile<[128, D], bf16>
    ```
  }];
  let arguments = (ins Arg<Mk_Tensor, "", [MemRead]>:$source, Variadic<Index>:$indices,
                       DenseI64ArrayAttr:$whole_dims);
  let results = (outs Mk_Tile:$result);
  let assemblyFormat = [{
    $source `` custom<TileAccess>($indices, $whole_dims) attr-dict `:` qualified(type($source)) `->` qualified(type($result))
  }];
  let hasVerifier = 1;
}

def Mk_StoreOp : Mk_Op<"store"> {
  let summary = "Write a tile into a tensor this rank holds";
  let description = [{
    ```mlir
    mk.store %c, %C[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, shard 1 over world>
    ```
  }];
  let arguments = (ins Mk_Tile:$value, Arg<Mk_Tensor, "", [MemWrite]>:$dest, Variadic<Index>:$indices,
                       DenseI64ArrayAttr:$whole_dims);
  let assemblyFormat = [{
    $value `,` $dest `` custom<TileAccess>($indices, $whole_dims) attr-dict `:` qualified(type($value)) `,` qualified(type($dest))
  }];
  let hasVerifier = 1;
}

def Mk_MatmulOp : Mk_Op<"matmul", [AttrSizedOperandSegments]> {
  let summary = "One output tile of a matrix product, accumulated in f32";
  let description = [{
    Each operand names a panel: indices on every dim but one of its last two, and `:` on the
    contracted dim (the whole extent this rank holds). The position of `:` gives the layout:
    `%A[%m, :]` is row-major A, `%A[:, %m]` is A stored transposed. When the contracted dim is sharded
    (both operands over the same axis) the result is this rank's partial sum. `k_tile` is the depth
    of one step of the main loop, a multiple of 16; where it does not divide the contracted
    extent, the last step is zero-filled past it.

    ```mlir
    %acc = mk.matmul %A[%m, :], %B[:, %n] : !mk.tensor<[M, K], bf16, shard 1 over world>,
        !mk.tensor<[K, N], bf16, shard 0 over world> -> !mk.tile<[128, 256], f32>
    ```

    `k_splits` S (split-K, chosen by mk-tile-and-order where a grid has too few tiles to keep the
    SMs busy) has the GEMM engine compute the tile in S parts, consecutive slices of the
    contracted dim's 64-deep blocks, at S positions of its grid's walk. Each part's f32 product
    goes to its slot of `partials` (mk-plan-lowering's buffer: S slots of 128 x N f32 a tile) and
    arrives on the tile's flag of `arrivals`; the part that arrives last sums the slots in the
    order of their parts (the same bits whichever is last) and alone runs the rest of the tile's
    body. The result is the tile's product either way; where the tile library multiplies, K is
    not split.

    ```mlir
    %acc = mk.matmul %A[%m, :], %B[:, %n] partials %P : !mk.tensor<[256, 8192], f32, replicated>
        {k_tile = 64, k_splits = 2, arrivals = @split_k} : ...
    ```
  }];
  let arguments = (ins Arg<Mk_Tensor, "", [MemRead]>:$lhs, Variadic<Index>:$lhs_indices,
                       DenseI64ArrayAttr:$lhs_whole_dims,
                       Arg<Mk_Tensor, "", [MemRead]>:$rhs, Variadic<Index>:$rhs_indices,
                       DenseI64ArrayAttr:$rhs_whole_dims,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$k_tile,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntMinValue<2>]>>:$k_splits,
                       Arg<Optional<Mk_Tensor>, "", [MemRead, MemWrite]>:$partials,
                       OptionalAttr<FlatSymbolRefAttr>:$arrivals);
  let results = (outs Mk_Tile:$result);
  let assemblyFormat = [{
    $lhs `` custom<TileAccess>($lhs_indices, $lhs_whole_dims) `,`
    $rhs `` custom<TileAccess>($rhs_indices, $rhs_whole_dims)
    (`partials` $partials^ `:` qualified(type($partials)))? attr-dict
    `:` qualified(type($lhs)) `,` qualified(type($rhs)) `->` qualified(type($result))
  }];
  let hasVerifier = 1;
}

def Mk_ConvertOp : Mk_Op<"convert", [Pure]> {
  let summary = "Convert the elements of a tile to another dtype (round to nearest even)";
  let arguments = (ins Mk_Tile:$source);
  let results = (outs Mk_Tile:$result);
  let assemblyFormat = "$source attr-dict `:` qualified(type($source)) `->` qualified(type($result))";
  let hasVerifier = 1;
}

class Mk_BinaryOp<string mnemonic, string what>
    : Mk_Op<mnemonic, [Pure, SameOperandsAndResultType]> {
  let summary = "Elementwise " # what # " of two tiles";
  let arguments = (ins Mk_Tile:$lhs, Mk_Tile:$rhs);
  let results = (outs Mk_Tile:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` qualified(type($result))";
}
def Mk_AddOp : Mk_BinaryOp<"add", "sum">;
def Mk_SubOp : Mk_BinaryOp<"sub", "difference">;
def Mk_MulOp : Mk_BinaryOp<"mul", "product">;
def Mk_DivOp : Mk_BinaryOp<"div", "quotient">;
def Mk_MaxOp : Mk_BinaryOp<"max", "maximum">;
def Mk_MinOp : Mk_BinaryOp<"min", "minimum">;

class Mk_UnaryOp<string mnemonic, string what>
    : Mk_Op<mnemonic, [Pure, SameOperandsAndResultType]> {
  let summary = what # " of every element, evaluated in f32 and rounded once";
  let description = [{
    ```mlir
    %y = mk.}] # mnemonic # [{ %x : !mk.tile<[128, 256], f32>
    ```
  }];
  let arguments = (ins Mk_FloatTile:$source);
  let results = (outs Mk_FloatTile:$result);
  let assemblyFormat = "$source attr-dict `:` qualified(type($result))";
}
def Mk_ExpOp : Mk_UnaryOp<"exp", "e^x">;
def Mk_LogOp : Mk_UnaryOp<"log", "The natural logarithm">;
def Mk_SqrtOp : Mk_UnaryOp<"sqrt", "The square root">;
def Mk_RsqrtOp : Mk_UnaryOp<"rsqrt", "1 / sqrt(x)">;
def Mk_ReciprocalOp : Mk_UnaryOp<"reciprocal", "1 / x">;
def Mk_TanhOp : Mk_UnaryOp<"tanh", "The hyperbolic tangent">;
def Mk_SigmoidOp : Mk_UnaryOp<"sigmoid", "1 / (1 + e^-x)">;
def Mk_NegOp : Mk_UnaryOp<"neg", "-x">;
def Mk_AbsOp : Mk_UnaryOp<"abs", "|x|">;

def Mk_ActivationOp : Mk_Op<"activation", [Pure, SameOperandsAndResultType]> {
  let summary = "An activation function applied to every element";
  let description = [{
    ```mlir
    %y = mk.activation gelu %x : !mk.tile<[128, 256], f32>
    ```
  }];
  let arguments = (ins Mk_Activation:$kind, Mk_FloatTile:$source);
  let results = (outs Mk_FloatTile:$result);
  let assemblyFormat = "$kind $source attr-dict `:` qualified(type($result))";
}

def Mk_SwigluOp : Mk_Op<"swiglu", [Pure, SameOperandsAndResultType]> {
  let summary = "silu(gate) * up, elementwise";
  let arguments = (ins Mk_FloatTile:$gate, Mk_FloatTile:$up);
  let results = (outs Mk_FloatTile:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` qualified(type($result))";
}

def Mk_BroadcastOp : Mk_Op<"broadcast", [Pure]> {
  let summary = "Repeat a rank-1 tile along a new dim";
  let description = [{
    `dim` is the position of the new dim in the result: `dim 1` repeats a column vector along the
    columns.

    ```mlir
    %l2 = mk.broadcast %l dim 1 : !mk.tile<[128], f32> -> !mk.tile<[128, D], f32>
    ```
  }];
  let arguments = (ins Mk_Tile:$source, ConfinedAttr<I64Attr, [IntNonNegative]>:$dim);
  let results = (outs Mk_Tile:$result);
  let assemblyFormat = "$source `dim` $dim attr-dict `:` qualified(type($source)) `->` qualified(type($result))";
  let hasVerifier = 1;
}

def Mk_ReduceOp : Mk_Op<"reduce", [Pure]> {
  let summary = "Reduce a rank-2 tile along one dim";
  let description = [{
    ```mlir
    %rowmax = mk.reduce max %s dim 1 : !mk.tile<[128, 128], f32> -> !mk.tile<[128], f32>
    ```
  }];
  let arguments = (ins Mk_ReduceKind:$kind, Mk_Tile:$source,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$dim);
  let results = (outs Mk_Tile:$result);
  let assemblyFormat = "$kind $source `dim` $dim attr-dict `:` qualified(type($source)) `->` qualified(type($result))";
  let hasVerifier = 1;
}

def Mk_SplatOp : Mk_Op<"splat", [Pure]> {
  let summary = "A tile with every element set to a scalar";
  let description = [{
    ```mlir
    %zero = mk.splat %c0 : f32 -> !mk.tile<[128, 128], f32>
    ```
  }];
  let arguments = (ins AnyTypeOf<[AnyFloat, AnySignlessInteger]>:$value);
  let results = (outs Mk_Tile:$result);
  let assemblyFormat = "$value attr-dict `:` qualified(type($value)) `->` qualified(type($result))";
  let hasVerifier = 1;
}

def Mk_ShapeSymbolOp : Mk_Op<"shape_symbol", [Pure]> {
  let summary = "The value a shape symbol of the program is bound to, as a scalar";
  let description = [{
    An index, integer or float (the nearest one to the value). mk-specialize replaces it with a
    constant. A mean is a sum times the reciprocal of the count: for rows of N elements,

    ```mlir
    %n = mk.shape_symbol "N" : f32
    %sum = mk.reduce sum %x dim 1 : !mk.tile<[128, 256], f32> -> !mk.tile<[128], f32>
    %count = mk.splat %n : f32 -> !mk.tile<[128], f32>
    %mean = mk.div %sum, %count : !mk.tile<[128], f32>
    ```
  }];
  let arguments = (ins StrAttr:$symbol);
  let results = (outs AnyTypeOf<[Index, AnySignlessInteger, AnyFloat]>:$result);
  let assemblyFormat = "$symbol attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Mk_AttentionBlockOp : Mk_Op<"attention_block", [Pure,
    AllTypesMatch<["acc", "new_acc"]>, AllTypesMatch<["row_max", "new_row_max"]>,
    AllTypesMatch<["row_max", "row_sum", "new_row_sum"]>]> {
  let summary = "One step of online-softmax attention: fold a K/V block into the running state";
  let description = [{
    With S = scale * q k^T, the running row max m, row sum l and output accumulator acc become
    m' = max(m, rowmax(S)), l' = l e^(m-m') + rowsum(e^(S-m')), acc' = acc e^(m-m') + e^(S-m') v.
    The result is acc / l after the last block. `causal` masks keys after the query; it needs the
    global tile coordinates of the query and key blocks along the sequence (`at (%qi, %kj)`): a q
    or k loaded from a tensor starts where the program numbers that tensor's tile (shard after
    shard where shards hold partial tiles), any other at i * rows. The rows of a loaded k past
    the end of its tensor, or of its shard, are not keys. `scale` defaults to 1/sqrt(head dim).

    ```mlir
    %acc1, %m1, %l1 = mk.attention_block %q, %k, %v, %acc, %m, %l at (%i, %j) causal
        : !mk.tile<[128, 128], bf16>, !mk.tile<[128, 128], bf16>, !mk.tile<[128, 128], bf16>,
          !mk.tile<[128, 128], f32>, !mk.tile<[128], f32>
    ```
  }];
  let arguments = (ins Mk_FloatTile:$q, Mk_FloatTile:$k, Mk_FloatTile:$v, Mk_FloatTile:$acc,
                       Mk_FloatTile:$row_max, Mk_FloatTile:$row_sum, Variadic<Index>:$positions,
                       UnitAttr:$causal, OptionalAttr<F32Attr>:$scale);
  let results = (outs Mk_FloatTile:$new_acc, Mk_FloatTile:$new_row_max, Mk_FloatTile:$new_row_sum);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $acc `,` $row_max `,` $row_sum (`at` ` ` `(` $positions^ `)`)? (`causal` $causal^)?
    attr-dict `:` qualified(type($q)) `,` qualified(type($k)) `,` qualified(type($v)) `,` qualified(type($acc)) `,` qualified(type($row_max))
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Collective intents on tiles
//===----------------------------------------------------------------------===//

def Mk_AllReduceOp : Mk_Op<"all_reduce"> {
  let summary = "Combine a tile over the ranks of an axis; every rank receives the result";
  let description = [{
    Every rank of `axis` contributes its value of the tile; each of them ends with the combination,
    stored at the given global tile coordinates of a replicated tensor. How (within the node first,
    rail-aligned across nodes, which SMs) is the compiler's choice.

    ```mlir
    mk.all_reduce sum %p into %C[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
    ```

    With a result, the combined tile is the rest of the body's: an epilogue on it (bias,
    activation, residual, a norm) follows the reduction in the same kernel. mk-split-epilogues
    moves what uses it into a grid of its own over the destination, which reads the combined
    tile back once it is there; the indices must then be the grid's own coordinates.

    ```mlir
    %sum = mk.all_reduce sum %p into %R[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated> -> !mk.tile<[128, 256], bf16>
    %y = mk.activation gelu %sum : !mk.tile<[128, 256], bf16>
    mk.store %y, %Y[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
    ```
  }];
  let arguments = (ins Mk_ReduceKind:$kind, Mk_Tile:$value,
                       Arg<Mk_Tensor, "", [MemWrite]>:$dest, Variadic<Index>:$indices,
                       DenseI64ArrayAttr:$whole_dims,
                       DefaultValuedAttr<Mk_MeshAxis, "::mlir::mk::MeshAxis::world">:$axis);
  let results = (outs Optional<Mk_Tile>:$result);
  let assemblyFormat = [{
    $kind $value `into` $dest `` custom<TileAccess>($indices, $whole_dims) (`over` $axis^)? attr-dict
    `:` qualified(type($value)) `,` qualified(type($dest)) (`->` qualified(type($result))^)?
  }];
  let hasVerifier = 1;
}

def Mk_ReduceScatterOp : Mk_Op<"reduce_scatter"> {
  let summary = "Combine a tile over the ranks; only the rank that holds the tile keeps the result";
  let description = [{
    Every rank of the destination's sharding axis contributes its value of the tile; the combination
    is stored on the rank whose shard holds the given global tile coordinates.

    ```mlir
    mk.reduce_scatter sum %p into %C[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, shard 0 over world>
    ```

    With a result, as for mk.all_reduce, the combined tile is the rest of the body's, on the
    rank that holds it: what uses it runs there, in a grid of the destination's tiles.
  }];
  let arguments = (ins Mk_ReduceKind:$kind, Mk_Tile:$value,
                       Arg<Mk_Tensor, "", [MemWrite]>:$dest, Variadic<Index>:$indices,
                       DenseI64ArrayAttr:$whole_dims);
  let results = (outs Optional<Mk_Tile>:$result);
  let assemblyFormat = [{
    $kind $value `into` $dest `` custom<TileAccess>($indices, $whole_dims) attr-dict
    `:` qualified(type($value)) `,` qualified(type($dest)) (`->` qualified(type($result))^)?
  }];
  let hasVerifier = 1;
}

def Mk_AllGatherOp : Mk_Op<"all_gather"> {
  let summary = "Make every shard of a tensor available on every rank";
  let description = [{
    The result is the replicated tensor. Its tiles arrive independently: a consumer that reads a
    tile waits for that tile only, so compute on local shards overlaps with the gather. `chunk`,
    when present, is the granularity (in elements per dim) at which arrival is tracked.

    ```mlir
    %Ag = mk.all_gather %A : !mk.tensor<[M, K], bf16, shard 0 over world> -> !mk.tensor<[M, K], bf16, replicated>
    ```
  }];
  let arguments = (ins Arg<Mk_Tensor, "", [MemRead]>:$source, OptionalAttr<DenseI64ArrayAttr>:$chunk);
  let results = (outs Mk_Tensor:$result);
  let assemblyFormat = "$source attr-dict `:` qualified(type($source)) `->` qualified(type($result))";
  let hasVerifier = 1;
}

def Mk_RingShiftOp : Mk_Op<"ring_shift", [RecursiveMemoryEffects, AttrSizedOperandSegments,
    SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "Visit every rank's shard while the shards travel between neighbours";
  let description = [{
    The body runs once for each of the n = size(axis) ranks of the axis, with the shards that
    rank holds; its index along the axis is the first block argument. The first visit is this
    rank's own shards; the order of the others is the compiler's (the order in which their shards
    arrive while the next ones are on their way), so the loop-carried values must combine in an
    order-independent way up to rounding, as online softmax does. Shards only move between
    neighbours: around a ring, or along the hierarchy of NVLink and rails. The remaining block
    arguments are the shards, then the loop-carried values, which `mk.yield` passes to the next
    visit and, after the last, to the results.

    ```mlir
    %o:3 = mk.ring_shift %K, %V over world iter_args(%acc0, %m0, %l0 : ...)
        : !mk.tensor<[B, H, S, D], bf16, shard 2 over world>, !mk.tensor<[B, H, S, D], bf16, shard 2 over world>
        -> !mk.tile<[128, D], f32>, !mk.tile<[128], f32>, !mk.tile<[128], f32> {
    ^bb0(%src: index, %k: !mk.tensor<...>, %v: !mk.tensor<...>, %acc: ..., %m: ..., %l: ...):
      ...
      mk.yield %acc1, %m1, %l1 : ...
    }
    ```
  }];
  let arguments = (ins Variadic<Mk_Tensor>:$shards, Mk_MeshAxis:$axis, Variadic<AnyType>:$inits);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $shards `over` $axis (`iter_args` `(` $inits^ `:` qualified(type($inits)) `)`)? `:` qualified(type($shards))
    (`->` qualified(type($results))^)? $body attr-dict
  }];
  let hasRegionVerifier = 1;
}

def Mk_YieldOp : Mk_Op<"yield", [Pure, Terminator, ReturnLike, HasParent<"RingShiftOp">]> {
  let summary = "Pass loop-carried values to the next ring step";
  let arguments = (ins Variadic<AnyType>:$values);
  let builders = [OpBuilder<(ins), [{ /* nothing to yield */ }]>];
  let assemblyFormat = "($values^ `:` qualified(type($values)))? attr-dict";
}

def Mk_DispatchOp : Mk_Op<"dispatch"> {
  let summary = "Route each token to the ranks that hold its experts, grouped by expert";
  let description = [{
    `experts[t, j]` is the j-th expert token t is routed to. The results are the routed rows, laid
    out expert-major with a capacity per expert, the number of rows each expert received, and for
    every routed row its origin (token * top_k + j, or -1 for an empty slot), which mk.combine uses
    to bring results back. Copies are taken in token order; one past its expert's capacity C is
    dropped, and one whose expert index lies outside [0, E) goes nowhere: neither is silent, each
    launch reports them for every rank's own tokens (the runtime's routing report, mk/abi.h's
    mk_routing_report: the dropped count, and an error naming the first index out of range). A
    program routes tokens once (one mk.dispatch). With distinct experts per token, C = T drops
    nothing, the default of the library's program.

    ```mlir
    %Xe, %count, %origin = mk.dispatch %X by %experts
        : !mk.tensor<[T, Hd], bf16, shard 0 over world>, !mk.tensor<[T, TopK], i32, shard 0 over world>
        -> !mk.tensor<[E, C, Hd], bf16, shard 0 over world>, !mk.tensor<[E], i32, shard 0 over world>,
           !mk.tensor<[E, C], i32, shard 0 over world>
    ```
  }];
  let arguments = (ins Arg<Mk_Tensor, "", [MemRead]>:$tokens, Arg<Mk_Tensor, "", [MemRead]>:$experts);
  let results = (outs Mk_Tensor:$routed, Mk_Tensor:$counts, Mk_Tensor:$origins);
  let assemblyFormat = [{
    $tokens `by` $experts attr-dict `:` qualified(type($tokens)) `,` qualified(type($experts)) `->` qualified(type($routed)) `,`
    qualified(type($counts)) `,` qualified(type($origins))
  }];
  let hasVerifier = 1;
}

def Mk_CombineOp : Mk_Op<"combine"> {
  let summary = "Return routed rows to their tokens, weighted, and sum them there";
  let description = [{
    The tile holds rows of the expert-major space at global tile coordinates `from [e, t, n]`.
    Each row goes back to the rank holding its origin token, scaled by that token's routing weight,
    and is summed into `dest[token, n-th column tile]` with the token's other experts.

    ```mlir
    mk.combine %y from [%e, %t, %n] into %Y routed %origin weighted %weights
        : !mk.tile<[128, 256], f32>, !mk.tensor<[T, Hd], bf16, shard 0 over world>,
          !mk.tensor<[E, C], i32, shard 0 over world>, !mk.tensor<[T, TopK], f32, shard 0 over world>
    ```
  }];
  let arguments = (ins Mk_FloatTile:$value, Variadic<Index>:$coords,
                       Arg<Mk_Tensor, "", [MemWrite]>:$dest,
                       Arg<Mk_Tensor, "", [MemRead]>:$origins, Arg<Mk_Tensor, "", [MemRead]>:$weights);
  let assemblyFormat = [{
    $value `from` ` ` `[` $coords `]` `into` $dest `routed` $origins `weighted` $weights attr-dict
    `:` qualified(type($value)) `,` qualified(type($dest)) `,` qualified(type($origins)) `,` qualified(type($weights))
  }];
  let hasVerifier = 1;
}

def Mk_ShardRangeOp : Mk_Op<"shard_range", [Pure]> {
  let summary = "The tile coordinates [lo, hi) a given rank's shard covers along its sharded dim";
  let description = [{
    `of %i` is the rank's index along the sharding axis (as given by mk.ring_shift).

    ```mlir
    %lo, %hi = mk.shard_range %K tile 128 of %src : !mk.tensor<[B, H, S, D], bf16, shard 2 over world>
    ```
  }];
  let arguments = (ins Mk_Tensor:$tensor, ConfinedAttr<I64Attr, [IntPositive]>:$tile, Index:$index);
  let results = (outs Index:$lo, Index:$hi);
  let assemblyFormat = "$tensor `tile` $tile `of` $index attr-dict `:` qualified(type($tensor))";
  let hasVerifier = 1;
}

def Mk_SequenceTileOp : Mk_Op<"sequence_tile", [Pure]> {
  let summary = "Where tile %i of a tensor sharded along a sequence lies in the sequence";
  let description = [{
    Tile %i of `tile` along the tensor's sharded dim is tile %p of the sequence: %i itself, but
    for a `zigzag` placement, whose tile coordinates run rank after rank over the permuted
    sequence (rank r's tiles are those of chunks r and 2P - 1 - r). A zigzag dim's chunks must be
    whole tiles. For the positions of causal attention (`mk.attention_block ... at`).

    ```mlir
    %p = mk.sequence_tile %Q tile 128 of %i : !mk.tensor<[B, H, S, D], bf16, shard 2 over world zigzag>
    ```
  }];
  let arguments = (ins Mk_Tensor:$tensor, ConfinedAttr<I64Attr, [IntPositive]>:$tile, Index:$index);
  let results = (outs Index:$position);
  let assemblyFormat = "$tensor `tile` $tile `of` $index attr-dict `:` qualified(type($tensor))";
  let hasVerifier = 1;
}

include "mk/IR/MkScheduleOps.td"

#endif // MK_OPS_TD
