//===- TileAndOrder.cpp - main-loop depth, gather chunks, tile order ------===//

#include "mk/Transforms/Passes.h"

namespace mlir::mk {
#define GEN_PASS_DEF_MKTILEANDORDER
#include "mk/Transforms/Passes.h.inc"
} // namespace mlir::mk

using namespace mlir;
using namespace mlir::mk;

namespace {

/// Tile rows that share panels of B in L2 when swizzled.
constexpr int64_t kSwizzleGroup = 8;
/// Smallest main-loop depth: one mma.sync k-step.
constexpr int64_t kMinKTile = 16;

/// The main-loop depth whose rows are 128 bytes, halved until it divides `extent`.
FailureOr<int64_t> chooseKTile(MatmulOp matmul, int64_t extent, Type element) {
  int64_t kTile = 1024 / element.getIntOrFloatBitWidth();
  while (kTile > kMinKTile && extent % kTile != 0)
    kTile /= 2;
  if (extent % kTile != 0)
    return matmul.emitOpError() << "contracts a local extent of " << extent
                                << ", which is not a multiple of " << kMinKTile;
  return kTile;
}

/// The tensors a grid's body reads that an all-gather is still filling.
bool readsGatheredTensor(TileGridOp grid) {
  WalkResult walk = grid.getBody().walk([](Operation *op) {
    for (Value operand : op->getOperands())
      if (operand.getDefiningOp<AllGatherOp>())
        return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return walk.wasInterrupted();
}

struct TileAndOrderPass : mk::impl::MkTileAndOrderBase<TileAndOrderPass> {
  void runOnOperation() override {
    ProgramOp program = getOperation();
    MeshAttr mesh = program.getMesh();

    WalkResult walk = program.walk([&](MatmulOp matmul) {
      if (matmul.getKTile())
        return WalkResult::advance();
      DistTensorType lhs = matmul.getLhs().getType();
      int64_t kDim = matmul.getLhsWholeDims()[0];
      int64_t extent = lhs.getLocalExtent(kDim, mesh);
      if (ShapedType::isDynamic(extent)) {
        matmul.emitOpError() << "needs a specialized program (run mk-specialize first)";
        return WalkResult::interrupt();
      }
      FailureOr<int64_t> kTile = chooseKTile(matmul, extent, lhs.getElementType());
      if (failed(kTile))
        return WalkResult::interrupt();
      matmul.setKTile(*kTile);
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    program.walk([&](TileGridOp grid) {
      if (grid.getOrder())
        return;
      bool computesMatmuls =
          grid.getBody().walk([](MatmulOp) { return WalkResult::interrupt(); }).wasInterrupted();
      TileOrderKind kind = computesMatmuls ? TileOrderKind::swizzle : TileOrderKind::row_major;
      int64_t group = 1;
      if (computesMatmuls) {
        // Bands of tile rows along the grid's second-last dim.
        DistTensorType target = grid.getTargetType();
        int64_t rowDim = target.getRank() - 2;
        int64_t rows = ShapedType::kDynamic;
        if (rowDim >= 0) {
          Dim extent = grid.getTileExtent(rowDim);
          int64_t held = grid.getGlobal() ? target.getShape()[rowDim]
                                          : target.getLocalExtent(rowDim, mesh);
          if (extent.isKnown() && !ShapedType::isDynamic(held))
            rows = llvm::divideCeil(held, extent.extent);
        }
        group = ShapedType::isDynamic(rows) ? kSwizzleGroup : std::min(kSwizzleGroup, rows);
      }
      grid.setOrderAttr(
          TileOrderAttr::get(&getContext(), kind, std::max<int64_t>(group, 1),
                             readsGatheredTensor(grid)));
    });

    program.walk([&](AllGatherOp gather) {
      if (!gather.getChunk())
        gather.setChunk(gatherChunk(gather));
    });
  }

  /// The granularity consumers read the gathered tensor at: the tile extents of the first
  /// matmul or load that reads it, the whole extent along the other dims.
  SmallVector<int64_t> gatherChunk(AllGatherOp gather) {
    DistTensorType type = gather.getResult().getType();
    SmallVector<int64_t> chunk(type.getShape());
    for (Operation *user : gather.getResult().getUsers()) {
      if (auto matmul = dyn_cast<MatmulOp>(user)) {
        bool lhs = matmul.getLhs() == gather.getResult();
        ArrayRef<int64_t> whole = lhs ? matmul.getLhsWholeDims() : matmul.getRhsWholeDims();
        int64_t rank = type.getRank();
        int64_t k = whole[0];
        // The tile's non-contracted dim takes the result tile's rows (lhs) or columns (rhs).
        int64_t other = k == rank - 1 ? rank - 2 : rank - 1;
        TileType result = matmul.getResult().getType();
        for (int64_t d = 0; d < rank - 2; ++d)
          chunk[d] = 1;
        chunk[other] = result.getShape()[lhs ? 0 : 1];
        return chunk;
      }
      if (auto load = dyn_cast<LoadOp>(user)) {
        TileType tile = load.getResult().getType();
        int64_t first = type.getRank() - tile.getRank();
        for (int64_t d = 0; d < first; ++d)
          chunk[d] = 1;
        for (int64_t j = 0; j < tile.getRank(); ++j)
          chunk[first + j] = tile.getShape()[j];
        return chunk;
      }
    }
    return chunk;
  }
};

} // namespace
