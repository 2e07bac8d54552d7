//===- TileGridLowering.cpp - tile grids as loops over their tiles --------===//
//
// CTA c of a role's n takes positions c, c + n, ... of the grid's walk (TileWalk: the tiles a
// grid visits, decoded in its order, local-first rotation, round-robin ownership; within row
// counts, the device library's grouped walk over them); the body runs at each, for the tiles this
// rank visits. The pool's grid is walked by whichever CTA's team claims the next position
// (mk::claim, an atomic count a launch), those of the other roles joining it when done.
//
//===----------------------------------------------------------------------===//

#include "mk/Conversion/MkToEmitC/EmitCBuilder.h"
#include "mk/Conversion/MkToEmitC/LoweringPattern.h"
#include "mk/Conversion/MkToEmitC/StructureLowering.h"
#include "mk/Transforms/TileWalk.h"

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::to_emitc;

LogicalResult StructureLowering::lowerGrid(TileGridOp grid, Value roleCta, Value ctas,
                                           int64_t cluster) {
  Location loc = grid.getLoc();
  FailureOr<TileWalk> walk = TileWalk::get(grid, mesh, layout.numbering);
  if (failed(walk))
    return failure();

  OpBuilder b(grid);
  ArithIndexOps ops{b, loc};
  TileWalk::Place<Value> place{toIndex(b, loc, layout.node), toIndex(b, loc, layout.gpu),
                               grid.getHolder() ? std::optional(grid.getHolder()) : std::nullopt};
  TileWalk::Bound<Value> bound = walk->bind(ops, place);
  // A grid bounded by row counts walks the tiles within them (mk::GroupedWalk over the counts).
  Value grouped;
  if (const std::optional<TileWalk::Grouped> &shape = walk->grouped()) {
    MLIRContext *context = grid.getContext();
    auto sizeT = emitc::SizeTType::get(context);
    Value counts = lookThroughCasts(grid.getRowCounts());
    Value start = emitc::ConstantOp::create(b, loc, sizeT, b.getIndexAttr(0));
    Value pointer = call(b, loc, emitc::PointerType::get(emitc::OpaqueType::get(context, "int")),
                         "mk::at", {counts, start})
                        .getResult(0);
    grouped = call(b, loc, emitc::OpaqueType::get(context, "mk::GroupedWalk"), "mk::grouped_walk",
                   {pointer, std::to_string(shape->groups), std::to_string(shape->capacity),
                    std::to_string(shape->tileRows), std::to_string(shape->colTiles),
                    std::to_string(shape->band)})
                  .getResult(0);
    bound.positions =
        toIndex(b, loc, call(b, loc, sizeT, "mk::grouped_positions", {grouped}).getResult(0));
  }
  // Split-K: each tile is walked as `splits` parts, tile t's part s at position
  // (t / C) C S + s C + t % C for clusters of C CTAs, which take their tiles' same part.
  MatmulOp split;
  grid.getBody().walk([&](MatmulOp matmul) {
    if (matmul.getPartials())
      split = matmul;
  });
  int64_t splits = split ? *split.getKSplits() : 1;
  assert((splits == 1 || (ctas && !grouped)) && "the GEMM engine's own walk splits K");
  Value parts = splits > 1 ? ops.mul(bound.positions, ops.c(splits)) : bound.positions;
  Value position;
  if (ctas) {
    auto loop = scf::ForOp::create(b, loc, roleCta, parts, ctas);
    b.setInsertionPointToStart(loop.getBody());
    position = loop.getInductionVar();
  } else {
    // while ((p = claim) < positions) { body at p }: the next claim after the tile's work.
    assert(!grouped && "mk-pool-roles pools no grid within row counts");
    Type index = b.getIndexType();
    auto loop = scf::WhileOp::create(b, loc, TypeRange{index}, ValueRange{});
    b.createBlock(&loop.getBefore());
    auto sizeT = emitc::SizeTType::get(b.getContext());
    Value claimed = toIndex(
        b, loc,
        call(b, loc, sizeT, "mk::claim", {kernelArgs(loop), toSizeT(b, loc, bound.positions)})
            .getResult(0));
    Value more = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, claimed, bound.positions);
    scf::ConditionOp::create(b, loc, more, claimed);
    Block *after = b.createBlock(&loop.getAfter(), {}, {index}, {loc});
    position = after->getArgument(0);
    scf::YieldOp::create(b, loc);
    b.setInsertionPointToStart(after);
  }
  TileWalk::Tile<Value, Value> tile;
  Value at;
  if (grouped) {
    at = call(b, loc, emitc::OpaqueType::get(grid.getContext(), "mk::GroupedTile"),
              "mk::grouped_tile", {grouped, toSizeT(b, loc, position)})
             .getResult(0);
    // A position past the walk's end names no tile: skipped, never waited on.
    tile.visits = call(b, loc, b.getI1Type(), "mk::tile_within", {at}).getResult(0);
  } else {
    Value tilePosition = position;
    if (split) {
      Value group = ops.div(position, ops.c(cluster * splits));
      Value within = ops.rem(position, ops.c(cluster));
      tilePosition = ops.add(ops.mul(group, ops.c(cluster)), within);
      layout.splitPart[split] = ops.rem(ops.div(position, ops.c(cluster)), ops.c(splits));
    }
    tile = walk->tileAt(ops, bound, tilePosition, place);
  }
  if (tile.visits) {
    auto owned = scf::IfOp::create(b, loc, *tile.visits, /*withElseRegion=*/false);
    b.setInsertionPointToStart(owned.thenBlock());
  }
  if (grouped) {
    // The tile's coordinates where it is one (kept out of the loop's live registers otherwise).
    auto sizeT = emitc::SizeTType::get(grid.getContext());
    for (StringRef coordinate : {"mk::tile_group", "mk::tile_row", "mk::tile_col"})
      tile.coords.push_back(toIndex(b, loc, call(b, loc, sizeT, coordinate, {at}).getResult(0)));
    if (bound.firstShard)
      tile.coords[0] =
          ops.add(tile.coords[0], ops.mul(*bound.firstShard, ops.c(walk->grouped()->groups)));
  }

  Block &body = grid.getBodyBlock();
  for (auto [arg, coord] : llvm::zip(body.getArguments(), tile.coords))
    arg.replaceAllUsesWith(coord);
  Block *tileBlock = b.getInsertionBlock(); // the loop's body, or the branch of this rank's tiles
  tileBlock->getOperations().splice(std::prev(tileBlock->end()), body.getOperations());
  grid.erase();
  return success();
}
