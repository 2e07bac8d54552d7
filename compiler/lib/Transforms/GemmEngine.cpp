//===- GemmEngine.cpp - which matmuls the GEMM engine can compute ---------===//

#include "mk/Transforms/GemmEngine.h"

using namespace mlir;
using namespace mlir::mk;

bool mlir::mk::tmaAddresses(DistTensorType type, ArrayRef<int64_t> tile, MeshAttr mesh,
                            const TileNumbering &numbering) {
  int64_t bytes = llvm::divideCeil(type.getElementType().getIntOrFloatBitWidth(), 8);
  int64_t rank = type.getRank(), first = rank - tile.size();
  for (int64_t d = first; d < rank; ++d)
    if (!numbering.plain(type.getShape()[d], tile[d - first]))
      return false;
  return type.isEvenlySplit(mesh) && bytes * type.getLocalExtent(rank - 1, mesh) % 16 == 0;
}

ConvertOp mlir::mk::gemmEngineEpilogue(MatmulOp matmul) {
  TileType tile = matmul.getResult().getType();
  DistTensorType lhs = matmul.getLhs().getType(), rhs = matmul.getRhs().getType();
  Type element = lhs.getElementType();
  if (!(element.isBF16() || element.isF16()) || rhs.getElementType() != element ||
      lhs.getRank() != 2 || rhs.getRank() != 2 || tile.getShape()[0] != 128 ||
      !llvm::is_contained({64, 128, 256}, tile.getShape()[1]) || matmul.getLhsWholeDims()[0] != 1 ||
      !matmul->hasOneUse())
    return nullptr;
  // A panel: its 128 or BN tile rows by the whole of K.
  auto program = matmul->getParentOfType<ProgramOp>();
  TileNumbering numbering = TileNumbering::of(program);
  int64_t bn = tile.getShape()[1];
  bool bKMajor = matmul.getRhsWholeDims()[0] == 1;
  SmallVector<int64_t> rhsTile =
      bKMajor ? SmallVector<int64_t>{bn, 1} : SmallVector<int64_t>{1, bn};
  if (!tmaAddresses(lhs, {128, 1}, program.getMesh(), numbering) ||
      !tmaAddresses(rhs, rhsTile, program.getMesh(), numbering))
    return nullptr;
  auto convert = dyn_cast<ConvertOp>(*matmul->user_begin());
  if (!convert)
    return nullptr;
  Type out = convert.getResult().getType().getElementType();
  return out.isBF16() || out.isF16() ? convert : nullptr;
}
