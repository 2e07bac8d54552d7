//===- GemmEngine.cpp - which matmuls the GEMM engine can compute ---------===//

#include "mk/Transforms/GemmEngine.h"

using namespace mlir;
using namespace mlir::mk;

bool mlir::mk::tmaAddresses(DistTensorType type, MeshAttr mesh) {
  int64_t bytes = llvm::divideCeil(type.getElementType().getIntOrFloatBitWidth(), 8);
  return bytes * type.getLocalExtent(type.getRank() - 1, mesh) % 16 == 0;
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
  MeshAttr mesh = matmul->getParentOfType<ProgramOp>().getMesh();
  if (!tmaAddresses(lhs, mesh) || !tmaAddresses(rhs, mesh))
    return nullptr;
  auto convert = dyn_cast<ConvertOp>(*matmul->user_begin());
  if (!convert)
    return nullptr;
  Type out = convert.getResult().getType().getElementType();
  return out.isBF16() || out.isF16() ? convert : nullptr;
}
