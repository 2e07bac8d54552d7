//===- MkTypes.td - types of the mk dialect ----------------*- tablegen -*-===//

#ifndef MK_TYPES_TD
#define MK_TYPES_TD

include "mk/IR/MkDialect.td"
include "mk/IR/MkAttrs.td"
include "mlir/IR/BuiltinTypeInterfaces.td"

def Mk_SymbolicShapeTypeInterface : TypeInterface<"SymbolicShapeType"> {
  let cppNamespace = "::mlir::mk";
  let description = [{
    A type whose dims are each a static extent or a named shape symbol of the enclosing program
    (`M`, `K`), bound to a number when the program is specialized. A symbolic dim has extent
    ShapedType::kDynamic and a non-null symbol; a static dim has a null symbol.
  }];
  let methods = [
    InterfaceMethod<"The extents; ShapedType::kDynamic where a dim is symbolic.",
                    "::llvm::ArrayRef<int64_t>", "getShape">,
    InterfaceMethod<"One entry per dim: its symbol, or null where the dim is static.",
                    "::llvm::ArrayRef<::mlir::StringAttr>", "getSymbols">,
    InterfaceMethod<"The element type.", "::mlir::Type", "getElementType">,
    InterfaceMethod<"This type with other dims.", "::mlir::Type", "cloneWithDims",
                    (ins "::llvm::ArrayRef<int64_t>":$shape,
                         "::llvm::ArrayRef<::mlir::StringAttr>":$symbols)>,
  ];
  let extraSharedClassDeclaration = [{
    int64_t getRank() const { return $_type.getShape().size(); }
    /// The dims of this type as (extent, symbol) pairs.
    ::mlir::mk::Dim getDim(int64_t i) const {
      return {$_type.getShape()[i], $_type.getSymbols()[i]};
    }
    bool hasStaticShape() const { return !::llvm::is_contained($_type.getShape(), ::mlir::ShapedType::kDynamic); }
  }];
}

def Mk_DistTensorType : Mk_Type<"DistTensor", "tensor", [Mk_SymbolicShapeTypeInterface]> {
  let summary = "A tensor distributed over the ranks of the topology";
  let description = [{
    The shape is the global (logical) shape; the placement says which part each rank holds. Dims are
    static extents or shape symbols of the enclosing program.

    ```mlir
    !mk.tensor<[M, K], bf16, shard 1 over world>   // K split over all ranks
    !mk.tensor<[M, N], bf16, replicated>
    !mk.tensor<[4, 8192, 8192], bf16, symmetric>  // a staging area in symmetric memory
    ```
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$shape,
                        ArrayRefParameter<"::mlir::StringAttr">:$symbols,
                        "::mlir::Type":$elementType,
                        "::mlir::mk::PlacementAttr":$placement);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let builders = [
    TypeBuilderWithInferredContext<(ins "::llvm::ArrayRef<int64_t>":$shape, "::mlir::Type":$elementType,
                                        "::mlir::mk::PlacementAttr":$placement), [{
      ::llvm::SmallVector<::mlir::StringAttr> symbols(shape.size());
      return $_get(elementType.getContext(), shape, symbols, elementType, placement);
    }]>,
  ];
  let extraClassDeclaration = [{
    ::mlir::Type cloneWithDims(::llvm::ArrayRef<int64_t> shape, ::llvm::ArrayRef<::mlir::StringAttr> symbols) const;
    DistTensorType withPlacement(PlacementAttr placement) const;
    /// The extent one rank holds along dim `d` on `mesh`: the global extent, or where `d` is
    /// sharded the largest shard's (getShardSplit). kDynamic while either is unknown.
    int64_t getLocalExtent(int64_t d, MeshAttr mesh) const;
    /// How dim `d`, sharded, splits over its axis of a bound `mesh`.
    ::mlir::mk::ShardSplit getShardSplit(int64_t d, MeshAttr mesh) const;
    /// Whether every rank holds the same extents (no dim splits unevenly) on a bound `mesh`.
    bool isEvenlySplit(MeshAttr mesh) const;
  }];
}

def Mk_TileType : Mk_Type<"Tile", "tile", [Mk_SymbolicShapeTypeInterface]> {
  let summary = "A tile: a small block of a tensor held by one CTA (rank 1 or 2)";
  let description = [{
    Tiles are the values compute and collectives work on. A matmul accumulates into an f32 tile;
    tiles are converted to a storage dtype before they are stored or communicated.

    ```mlir
    !mk.tile<[128, 256], f32>
    !mk.tile<[128, D], bf16>
    !mk.tile<[128], f32>        // a row statistic, e.g. the running max of online softmax
    ```
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$shape,
                        ArrayRefParameter<"::mlir::StringAttr">:$symbols,
                        "::mlir::Type":$elementType);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let builders = [
    TypeBuilderWithInferredContext<(ins "::llvm::ArrayRef<int64_t>":$shape, "::mlir::Type":$elementType), [{
      ::llvm::SmallVector<::mlir::StringAttr> symbols(shape.size());
      return $_get(elementType.getContext(), shape, symbols, elementType);
    }]>,
  ];
  let extraClassDeclaration = [{
    ::mlir::Type cloneWithDims(::llvm::ArrayRef<int64_t> shape, ::llvm::ArrayRef<::mlir::StringAttr> symbols) const;
    TileType withElementType(::mlir::Type elementType) const;
  }];
}

#endif // MK_TYPES_TD
