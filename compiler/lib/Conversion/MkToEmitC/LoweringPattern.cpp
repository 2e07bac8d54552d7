//===- LoweringPattern.cpp - addresses, pointers and needs of tile accesses ===//

#include "mk/Conversion/MkToEmitC/LoweringPattern.h"

#include "mk/Conversion/MkToEmitC/TypeConverter.h"
#include "mk/Transforms/TileNumbering.h"

namespace mlir::mk::to_emitc {

Value lookThroughCasts(Value value) {
  while (auto cast = value.getDefiningOp<UnrealizedConversionCastOp>())
    value = cast.getInputs().front();
  return value;
}

Value flagOffset(Arith &a, const KernelLayout &layout, StringRef flags, ValueRange indices) {
  const SmallVector<int64_t> &shape = layout.flagShape.find(flags)->second;
  Value linear = a.constant(0);
  for (auto [extent, index] : llvm::zip(shape, indices))
    linear = a.add(a.mul(linear, extent), index);
  return a.add(linear, layout.flagOffset.lookup(flags));
}

void PatternBase::needSmem(std::string expression) const {
  if (!llvm::is_contained(layout.smemNeeds, expression))
    layout.smemNeeds.push_back(std::move(expression));
}

Value PatternBase::localExtent(Arith &a, DistTensorType type, int64_t d, Value node,
                               Value gpu) const {
  PlacementAttr placement = type.getPlacement();
  if (!placement.shardsDim(d))
    return a.constant(type.getShape()[d]);
  ShardSplit split = type.getShardSplit(d, layout.mesh);
  EmitCIndexOps ops{a};
  return shardExtent(ops, split, shardIndex(a, placement.getAxis(), node, gpu));
}

Address PatternBase::address(Arith &a, DistTensorType type, ValueRange indices,
                             ArrayRef<int64_t> wholeDims, ArrayRef<int64_t> tile, Value node,
                             Value gpu) const {
  MeshAttr mesh = layout.mesh;
  PlacementAttr placement = type.getPlacement();
  EmitCIndexOps ops{a};
  int64_t rank = type.getRank();
  SmallVector<Value> local, strides(rank);
  for (int64_t d = 0; d < rank; ++d)
    local.push_back(localExtent(a, type, d, node, gpu));
  strides[rank - 1] = a.constant(1);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[d] = a.mul(strides[d + 1], local[d + 1]);

  int64_t first = rank - tile.size();
  Address address;
  address.offset = a.constant(0);
  auto index = indices.begin();
  SmallVector<Value> start(rank), valid(rank);
  for (int64_t d = 0; d < rank; ++d) {
    if (llvm::is_contained(wholeDims, d)) {
      start[d] = a.constant(0);
      valid[d] = local[d];
      continue;
    }
    // Leading dims index single elements; tile dims are numbered (TileNumbering). Either is
    // global: a sharded one counts from the rank's shard.
    int64_t size = d < first ? 1 : tile[d - first];
    if (d < first) {
      start[d] = *index++;
      valid[d] = a.constant(1);
    } else {
      TileSpan<Value> span = layout.numbering.span(ops, type.getShape()[d], size, *index++);
      start[d] = span.start;
      valid[d] = span.size;
    }
    if (placement.shardsDim(d)) {
      ShardSplit split = type.getShardSplit(d, mesh);
      Value shard = shardIndex(a, placement.getAxis(), node, gpu);
      start[d] = a.sub(start[d], shardStart(ops, split, shard));
      // The numbering keeps a tile in its shard; without it, the shard's end clips it.
      if (d >= first && !layout.numbering.splitOf(type.getShape()[d]) &&
          !(split.even() && split.base() % size == 0))
        valid[d] = a.min(valid[d], a.sub(local[d], start[d]));
    }
    address.offset = a.add(address.offset, a.mul(start[d], strides[d]));
  }
  address.start = start;
  int64_t colDim = rank - 1, rowDim = rank - 2;
  address.cols = valid[colDim];
  if (tile.size() >= 2 && rowDim >= 0) {
    address.rows = valid[rowDim];
    address.ld = strides[rowDim];
  } else {
    address.rows = a.constant(1);
    address.ld = local[colDim];
  }
  return address;
}

Value PatternBase::shardIndex(Arith &a, MeshAxis axis, Value node, Value gpu) const {
  EmitCIndexOps ops{a};
  return axisIndex(ops, layout.mesh, axis, node, gpu);
}

Value PatternBase::pointer(OpBuilder &b, Location loc, DistTensorType type, Value tensor,
                           Value offset, Value gpu) const {
  auto ptr = emitc::PointerType::get(
      emitc::OpaqueType::get(b.getContext(), elementName(type.getElementType())));
  if (gpu)
    return call(b, loc, ptr, "mk::at_peer", {tensor, gpu, offset}).getResult(0);
  return call(b, loc, ptr, "mk::at", {tensor, offset}).getResult(0);
}

Value PatternBase::ofRole(ArrayRef<Value> values, Operation *op) {
  // The value's scope is what follows it in its block: the pool's, which every CTA runs after
  // the roles' branches, holds none of theirs.
  for (Value value : values) {
    Operation *definition = value.getDefiningOp();
    Operation *ancestor = definition->getBlock()->findAncestorOpInBlock(*op);
    if (ancestor && definition->isBeforeInBlock(ancestor))
      return value;
  }
  return Value();
}

Value PatternBase::engineFor(Operation *op) const {
  Value engine = ofRole(layout.engines, op);
  assert(engine && "an op marked for the engine outside an engine role");
  return engine;
}

Value PatternBase::tensorMapPointer(OpBuilder &b, Location loc, Operation *op, Value index) const {
  auto type =
      emitc::PointerType::get(emitc::OpaqueType::get(b.getContext(), "const mk_tensor_map"));
  return call(b, loc, type, "mk::tensor_map", {kernelArgs(op), index}).getResult(0);
}

} // namespace mlir::mk::to_emitc
