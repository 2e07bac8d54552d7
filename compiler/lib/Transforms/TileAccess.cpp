//===- TileAccess.cpp - the tensor regions ops read and write, tile by tile ---===//

#include "TileAccess.h"

namespace mlir::mk {

namespace {

/// An access to all of a tensor.
TileAccess wholeAccess(Operation *op, Value tensor) {
  int64_t rank = cast<DistTensorType>(tensor.getType()).getRank();
  return TileAccess{
      op, tensor, {}, llvm::to_vector(llvm::seq<int64_t>(0, rank)), SmallVector<int64_t>(rank, 0)};
}

/// The per-dim region extents of an access whose trailing dims hold `tile` (a tile shape).
SmallVector<int64_t> regionExtents(int64_t rank, ArrayRef<int64_t> wholeDims,
                                   ArrayRef<int64_t> tile) {
  SmallVector<int64_t> extents(rank, 1);
  int64_t first = rank - tile.size();
  for (int64_t d = 0; d < rank; ++d)
    extents[d] = llvm::is_contained(wholeDims, d) ? 0 : d >= first ? tile[d - first] : 1;
  return extents;
}

/// The access of `op` to the region of `tensor` whose trailing dims hold `tile`.
TileAccess tileAccess(Operation *op, Value tensor, OperandRange indices, ArrayRef<int64_t> whole,
                      ArrayRef<int64_t> tile) {
  return TileAccess{op, tensor, llvm::to_vector(indices), llvm::to_vector(whole),
                    regionExtents(cast<DistTensorType>(tensor.getType()).getRank(), whole, tile)};
}

} // namespace

SmallVector<TileAccess> writesOf(Operation *op) {
  auto access = [&](Value tensor, OperandRange indices, ArrayRef<int64_t> whole,
                    ArrayRef<int64_t> tile) {
    return tileAccess(op, tensor, indices, whole, tile);
  };
  if (auto put = dyn_cast<PutOp>(op))
    return {access(put.getDest(), put.getIndices(), put.getWholeDims(),
                   put.getValue().getType().getShape())};
  if (auto copy = dyn_cast<CopyOp>(op))
    return {access(copy.getDest(), copy.getDestIndices(), copy.getDestWholeDims(), copy.getTile())};
  if (auto store = dyn_cast<StoreOp>(op))
    return {access(store.getDest(), store.getIndices(), store.getWholeDims(),
                   store.getValue().getType().getShape())};
  // Program-level collectives (before mk-expand-collectives) write their destination's tile.
  if (auto reduce = dyn_cast<AllReduceOp>(op))
    return {access(reduce.getDest(), reduce.getIndices(), reduce.getWholeDims(),
                   reduce.getValue().getType().getShape())};
  if (auto scatter = dyn_cast<ReduceScatterOp>(op))
    return {access(scatter.getDest(), scatter.getIndices(), scatter.getWholeDims(),
                   scatter.getValue().getType().getShape())};
  return {};
}

SmallVector<TileAccess> readsOf(Operation *op) {
  auto access = [&](Value tensor, OperandRange indices, ArrayRef<int64_t> whole,
                    ArrayRef<int64_t> tile) {
    return tileAccess(op, tensor, indices, whole, tile);
  };
  SmallVector<TileAccess> reads;
  if (auto load = dyn_cast<LoadOp>(op))
    reads.push_back(access(load.getSource(), load.getIndices(), load.getWholeDims(),
                           load.getResult().getType().getShape()));
  if (auto accumulate = dyn_cast<AccumulateOp>(op))
    reads.push_back(access(accumulate.getSource(), accumulate.getIndices(),
                           accumulate.getWholeDims(), accumulate.getResult().getType().getShape()));
  if (auto copy = dyn_cast<CopyOp>(op))
    reads.push_back(access(copy.getSource(), copy.getSourceIndices(), copy.getSourceWholeDims(),
                           copy.getTile()));
  if (auto matmul = dyn_cast<MatmulOp>(op)) {
    // The panel of an operand: the result tile's rows (lhs) or columns (rhs), the whole of K.
    auto panel = [&](Value tensor, OperandRange indices, ArrayRef<int64_t> whole, int64_t extent) {
      TileAccess read = access(tensor, indices, whole, {});
      int64_t rank = read.extents.size();
      read.extents.assign(rank, 1);
      read.extents[whole[0]] = 0;
      read.extents[whole[0] == rank - 1 ? rank - 2 : rank - 1] = extent;
      reads.push_back(read);
    };
    ArrayRef<int64_t> tile = matmul.getResult().getType().getShape();
    panel(matmul.getLhs(), matmul.getLhsIndices(), matmul.getLhsWholeDims(), tile[0]);
    panel(matmul.getRhs(), matmul.getRhsIndices(), matmul.getRhsWholeDims(), tile[1]);
  }
  if (auto grid = dyn_cast<TileGridOp>(op))
    if (Value counts = grid.getRowCounts())
      reads.push_back(wholeAccess(op, counts));
  return reads;
}

} // namespace mlir::mk
