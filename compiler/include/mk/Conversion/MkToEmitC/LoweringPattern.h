//===- LoweringPattern.h - what the conversion's patterns share -*- C++ -*-===//
//
// Every pattern of mk-lower-to-emitc is a LoweringPattern: an OpConversionPattern with the layout
// of the kernel being lowered (KernelLayout.h), and the helpers that turn tile accesses into
// device memory: the address of a tile in the memory of the rank it reaches, pointers into
// tensors here or on a GPU of the node, the engine or reducer of the op's role, tensor maps,
// and what the kernel must be given (shared memory, symmetric tensors).
//
//===----------------------------------------------------------------------===//

#ifndef MK_CONVERSION_MKTOEMITC_LOWERINGPATTERN_H
#define MK_CONVERSION_MKTOEMITC_LOWERINGPATTERN_H

#include "mk/Conversion/MkToEmitC/EmitCBuilder.h"
#include "mk/Conversion/MkToEmitC/KernelLayout.h"

#include "mlir/Transforms/DialectConversion.h"

namespace mlir::mk::to_emitc {

/// Where an access lands in the memory of the rank it reaches.
struct Address {
  Value offset;             // elements from the start of that rank's part
  Value ld;                 // elements between rows of the tile
  Value rows, cols;         // the valid part of the tile
  SmallVector<Value> start; // the first element along each dim, in that rank's part
};

/// What an op lowered on its own produced (the engine's accumulator, a chunked tile), behind the
/// casts the conversion puts between it and the tile types.
Value lookThroughCasts(Value value);

/// The offset of `flags[indices]` in the flag region.
Value flagOffset(Arith &a, const KernelLayout &layout, StringRef flags, ValueRange indices);

/// The layout and helpers every pattern shares.
class PatternBase {
protected:
  explicit PatternBase(KernelLayout &layout) : layout(layout) {}

  int64_t tensorIndex(Value tensor) const { return layout.tensorIndex.lookup(tensor); }
  /// Records that `tensor` is reached through peer mappings or the network.
  void needSymmetric(Value tensor) const { layout.symmetricTensors |= 1u << tensorIndex(tensor); }
  /// Records that the kernel needs the dynamic shared memory of C++ expression `expression`.
  void needSmem(std::string expression) const;

  /// The address of `%T[indices]` (`:` at `wholeDims`) for a tile of `tile` (its trailing dims,
  /// numbered as the kernel's TileNumbering says), in the memory of the rank at (node, gpu).
  Address address(Arith &a, DistTensorType type, ValueRange indices, ArrayRef<int64_t> wholeDims,
                  ArrayRef<int64_t> tile, Value node, Value gpu) const;
  /// The extent of dim `d` of `type` that the rank at (node, gpu) holds: its shard's, which
  /// depends on the rank where shards are uneven.
  Value localExtent(Arith &a, DistTensorType type, int64_t d, Value node, Value gpu) const;

  /// The index along `axis` of the rank at (node, gpu): which shard of a tensor sharded over
  /// `axis` it holds.
  Value shardIndex(Arith &a, MeshAxis axis, Value node, Value gpu) const;

  /// A pointer into tensor `tensor` (converted) at `offset`, on this rank or GPU `gpu` of the node.
  Value pointer(OpBuilder &b, Location loc, DistTensorType type, Value tensor, Value offset,
                Value gpu = Value()) const;

  /// Of `values` (each made in a role's block), the one of the role `op` is in, or null.
  static Value ofRole(ArrayRef<Value> values, Operation *op);
  /// The GEMM engine of the role `op` is in.
  Value engineFor(Operation *op) const;
  /// A pointer to tensor map `index` (a size_t) of the launch.
  Value tensorMapPointer(OpBuilder &b, Location loc, Operation *op, Value index) const;

  KernelLayout &layout;
};

template <typename OpT>
class LoweringPattern : public OpConversionPattern<OpT>, protected PatternBase {
public:
  LoweringPattern(const TypeConverter &converter, MLIRContext *context, KernelLayout &layout,
                  PatternBenefit benefit = 1)
      : OpConversionPattern<OpT>(converter, context, benefit), PatternBase(layout) {}
};

} // namespace mlir::mk::to_emitc

#endif // MK_CONVERSION_MKTOEMITC_LOWERINGPATTERN_H
