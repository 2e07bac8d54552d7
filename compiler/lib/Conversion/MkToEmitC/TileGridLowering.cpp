//===- TileGridLowering.cpp - tile grids as loops over their tiles --------===//
//
// CTA c of a role's n takes positions c, c + n, ... of the grid's walk (TileWalk: the tiles a
// grid visits, decoded in its order, local-first rotation, round-robin ownership); the body runs
// at each, for the tiles this rank visits.
//
//===----------------------------------------------------------------------===//

#include "mk/Conversion/MkToEmitC/EmitCBuilder.h"
#include "mk/Conversion/MkToEmitC/StructureLowering.h"
#include "mk/Transforms/TileWalk.h"

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::to_emitc;

LogicalResult StructureLowering::lowerGrid(TileGridOp grid, Value roleCta, int64_t ctas) {
  Location loc = grid.getLoc();
  if (grid.getRowCounts())
    return grid.emitOpError() << "is bounded by row counts, which have no CUDA lowering yet";
  FailureOr<TileWalk> walk = TileWalk::get(grid, mesh, layout.numbering);
  if (failed(walk))
    return failure();

  OpBuilder b(grid);
  ArithIndexOps ops{b, loc};
  TileWalk::Place<Value> place{toIndex(b, loc, layout.node), toIndex(b, loc, layout.gpu),
                               grid.getHolder() ? std::optional(grid.getHolder()) : std::nullopt};
  TileWalk::Bound<Value> bound = walk->bind(ops, place);
  auto loop = scf::ForOp::create(b, loc, roleCta, bound.positions, ops.c(ctas));
  b.setInsertionPointToStart(loop.getBody());
  auto tile = walk->tileAt(ops, bound, loop.getInductionVar(), place);
  if (tile.visits) {
    auto owned = scf::IfOp::create(b, loc, *tile.visits, /*withElseRegion=*/false);
    b.setInsertionPointToStart(owned.thenBlock());
  }

  Block &body = grid.getBodyBlock();
  for (auto [arg, coord] : llvm::zip(body.getArguments(), tile.coords))
    arg.replaceAllUsesWith(coord);
  Block *tileBlock = b.getInsertionBlock(); // the loop's body, or the branch of this rank's tiles
  tileBlock->getOperations().splice(std::prev(tileBlock->end()), body.getOperations());
  grid.erase();
  return success();
}
