//===- MkAttrs.td - attributes of the mk dialect -----------*- tablegen -*-===//

#ifndef MK_ATTRS_TD
#define MK_ATTRS_TD

include "mk/IR/MkDialect.td"
include "mk/IR/MkEnums.td"
include "mlir/IR/EnumAttr.td"

def Mk_MeshAttr : Mk_Attr<"Mesh", "mesh"> {
  let summary = "The topology a program runs on: nodes x GPUs per node";
  let description = [{
    Ranks are numbered node-major: rank = node * gpus + gpu. GPUs of one node talk over NVLink; nodes
    talk over the network, GPU g of one node only with GPU g of the others (rails). Either extent may
    be `?` until the program is specialized for a topology.

    ```mlir
    #mk.mesh<2x4>   // 2 nodes of 4 GPUs: 8 ranks
    #mk.mesh<?x?>   // not yet bound
    ```
  }];
  let parameters = (ins "int64_t":$nodes, "int64_t":$gpus);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Both extents are known.
    bool isBound() const;
    /// The number of ranks along `axis`, or ShapedType::kDynamic while unbound.
    int64_t getAxisSize(MeshAxis axis) const;
    int64_t getWorldSize() const { return getAxisSize(MeshAxis::world); }
  }];
}

def Mk_PlacementAttr : Mk_Attr<"Placement", "placement"> {
  let summary = "How a distributed tensor is laid out over the ranks";
  let description = [{
    - `shard D over AXIS`: split along dim D over the ranks of AXIS (`world`, `nodes` or `gpus`)
      as torch.tensor_split splits it: of an extent E over P ranks, the first E % P hold E / P + 1
      elements, the others E / P (none where E < P leaves them short). Sharding over `gpus`
      replicates across nodes, sharding over `nodes` replicates across the GPUs of a node.
    - `shard D over AXIS zigzag`: for causal attention's balance, dim D in 2P chunks of equal
      extent, rank r holding chunks r and 2P - 1 - r, in that order: stored as the shards of the
      sequence permuted so (tile coordinates are the permuted ones), while `mk.sequence_tile`
      gives a tile's place in the sequence. The chunks are whole tiles (checked where tiles are).
    - `replicated`: every rank holds the whole tensor with the same contents.
    - `symmetric`: every rank holds a whole-shape tensor of its own contents (a partial sum, a
      staging area) at the same place in symmetric memory, so peers can address it.

    Inside a tensor type the `#mk.placement` prefix is omitted:
    `!mk.tensor<[M, K], bf16, shard 1 over world>`.
  }];
  let parameters = (ins EnumParameter<Mk_PlacementKind>:$kind,
                        DefaultValuedParameter<"int64_t", "0">:$dim,
                        DefaultValuedParameter<"::mlir::mk::MeshAxis", "::mlir::mk::MeshAxis::world">:$axis,
                        DefaultValuedParameter<"bool", "false">:$zigzag);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let builders = [
    AttrBuilder<(ins "int64_t":$dim, "::mlir::mk::MeshAxis":$axis), [{
      return $_get($_ctxt, PlacementKind::shard, dim, axis, false);
    }]>,
    AttrBuilder<(ins "::mlir::mk::PlacementKind":$kind), [{
      return $_get($_ctxt, kind, 0, MeshAxis::world, false);
    }]>,
  ];
  let extraClassDeclaration = [{
    bool isSharded() const { return getKind() == PlacementKind::shard; }
    /// This placement is sharded along `d`.
    bool shardsDim(int64_t d) const { return isSharded() && getDim() == d; }
    /// Parses and prints the body without the `#mk.placement` prefix (as inside a tensor type).
    static PlacementAttr parseBody(::mlir::AsmParser &parser);
    void printBody(::llvm::raw_ostream &os) const;
    /// The body as text, e.g. "shard 1 over world", for diagnostics.
    std::string str() const;
  }];
}

def Mk_TileOrderAttr : Mk_Attr<"TileOrder", "order"> {
  let summary = "The order in which a tile grid produces its tiles";
  let description = [{
    `row_major`, `column_major`, or `swizzle G` (row-major inside bands of G tile rows, so that the
    CTAs working at one time share panels in L2). `local_first` makes tiles whose inputs are all held
    locally come before tiles that wait for data a collective is still bringing in.

    ```mlir
    #mk.order<swizzle 8, local_first>
    ```
  }];
  let parameters = (ins EnumParameter<Mk_TileOrderKind>:$kind,
                        DefaultValuedParameter<"int64_t", "1">:$group,
                        DefaultValuedParameter<"bool", "false">:$localFirst);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// What mk-plan-lowering decides, for mk-lower-to-emitc to read
//===----------------------------------------------------------------------===//

def Mk_LoweringAttr : EnumAttr<Mk_Dialect, Mk_Lowering, "lowering"> {
  let summary = "How the conversion lowers an op that is not lowered on its own";
  let description = [{
    Set by mk-plan-lowering as the discardable attribute `mk.lowering` on the matmuls, waits and
    signals of a role that runs the GEMM engine, on the reductions that are only stored, and on the
    conversions and stores that go with them: `#mk.lowering<mma>`, `#mk.lowering<tma>`, ...
  }];
  let assemblyFormat = "`<` $value `>`";
}

def Mk_GemmEngineAttr : Mk_Attr<"GemmEngine", "gemm_engine"> {
  let summary = "How a role runs its matmuls on the GEMM engine";
  let description = [{
    Set by mk-plan-lowering as the discardable attribute `mk.gemm_engine` on a role whose every
    matmul runs on the GEMM engine (runtime/device/mk/device/gemm_engine.cuh) with one
    configuration: its 16-bit `element` type, tiles of 128 x `tile_n`, a ring of `stages` K slices
    (0: the deepest that fits), B given as [N x K] (`b_k_major`) or [K x N], `staging_buffers`
    halves of the epilogue's staging area, `cluster` CTAs sharing B through TMA multicast, and
    the `a_rows` of A it loads for a tile (128; fewer where every A has fewer rows, whole 8-row
    swizzle atoms: decode's M, whose product rows past them are never stored).

    ```mlir
    mk.role compute ctas 128 attributes {mk.gemm_engine = #mk.gemm_engine<element = bf16,
        tile_n = 256, stages = 0, b_k_major = false, staging_buffers = 2, cluster = 2,
        a_rows = 128>} { ... }
    ```
  }];
  let parameters = (ins "::mlir::Type":$element, "int64_t":$tile_n, "int64_t":$stages,
                        "::mlir::BoolAttr":$b_k_major, "int64_t":$staging_buffers,
                        "int64_t":$cluster, "int64_t":$a_rows);
  let assemblyFormat = "`<` struct(params) `>`";
}

def Mk_AttentionEngineAttr : Mk_Attr<"AttentionEngine", "attention_engine"> {
  let summary = "How a role runs its attention steps on the attention engine";
  let description = [{
    Set by mk-plan-lowering as the discardable attribute `mk.attention_engine` on a role whose
    tile grid folds key blocks into 128-row query tiles with online softmax (mk.attention_block in
    a loop over each source's blocks, in a loop over the sources) and stores the normalised
    output: the attention engine (runtime/device/mk/device/attention_engine.cuh) with its 16-bit
    `element` type, head dim `head_dim` (64 or 128) and a ring of `stages` blocks of K and of V.
    With `tile_counter` (a one-word flag array), CTAs claim the tiles from it as they become
    free, longest first (causal tiles, of unequal work); without, they take them in turn.

    ```mlir
    mk.role compute ctas 132 attributes {mk.attention_engine = #mk.attention_engine<
        element = bf16, head_dim = 128, stages = 2, tile_counter = @attention_tiles>} { ... }
    ```
  }];
  let parameters = (ins "::mlir::Type":$element, "int64_t":$head_dim, "int64_t":$stages,
                        OptionalParameter<"::mlir::FlatSymbolRefAttr">:$tile_counter);
  let assemblyFormat = "`<` struct(params) `>`";
}

#endif // MK_ATTRS_TD
