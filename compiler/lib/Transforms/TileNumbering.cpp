//===- TileNumbering.cpp - where a tile index lies along a dim ------------===//

#include "mk/Transforms/TileNumbering.h"

#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace mlir::mk;

TileNumbering TileNumbering::of(ProgramOp program) {
  TileNumbering numbering;
  MeshAttr mesh = program.getMesh();
  auto note = [&](Type type) {
    auto tensor = dyn_cast<DistTensorType>(type);
    if (!tensor || !tensor.getPlacement().isSharded() || !mesh.isBound())
      return;
    ShardSplit split = tensor.getShardSplit(tensor.getPlacement().getDim(), mesh);
    if (ShapedType::isDynamic(split.extent) || split.parts == 1)
      return;
    auto [it, inserted] = numbering.parts.try_emplace(split.extent, split.parts);
    if (!inserted && it->second != split.parts)
      it->second = 0;
  };
  for (BlockArgument argument : program.getBodyBlock().getArguments())
    note(argument.getType());
  program.getBody().walk([&](Operation *op) {
    auto grid = dyn_cast<TileGridOp>(op);
    if (isa<DispatchOp, CombineOp, RouteCensusOp, RouteCountsOp, RouteRowsOp, RoutePackOp,
            ReturnRowsOp, CombineReturnedOp>(op) ||
        (grid && grid.getRowCounts()))
      numbering.plainOnly = op->getName().getStringRef();
    for (Type type : op->getResultTypes())
      note(type);
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument argument : block.getArguments())
          note(argument.getType());
  });
  // Only the extents whose shards the tiles of the program cut (a grid's over the sharded dim,
  // or a gather's chunks of it) are numbered by shards: along the others, and along every dim
  // of another extent, tile i stays at i * t.
  llvm::DenseSet<int64_t> cut;
  auto tiledBy = [&](DistTensorType type, ArrayRef<int64_t> sizes) {
    PlacementAttr placement = type.getPlacement();
    if (!placement.isSharded() || !mesh.isBound())
      return;
    int64_t d = placement.getDim();
    if (!ShapedType::isDynamic(sizes[d]) && !plain(type.getShardSplit(d, mesh), sizes[d]))
      cut.insert(type.getShape()[d]);
  };
  program.getBody().walk([&](Operation *op) {
    if (auto grid = dyn_cast<TileGridOp>(op))
      tiledBy(grid.getTargetType(), grid.getTileSizes());
    if (auto gather = dyn_cast<AllGatherOp>(op); gather && gather.getChunk())
      tiledBy(gather.getSource().getType(), *gather.getChunk());
  });
  for (auto &[extent, parts] : numbering.parts)
    if (parts && !cut.contains(extent))
      parts = 1;
  return numbering;
}

std::optional<ShardSplit> TileNumbering::splitOf(int64_t extent) const {
  auto it = parts.find(extent);
  if (it == parts.end() || it->second <= 1)
    return std::nullopt;
  return ShardSplit{extent, it->second};
}

bool TileNumbering::splitsAmbiguously(int64_t extent) const {
  auto it = parts.find(extent);
  return it != parts.end() && it->second == 0;
}

int64_t TileNumbering::count(std::optional<ShardSplit> split, int64_t extent, int64_t tile) {
  if (plain(split, tile))
    return llvm::divideCeil(extent, tile);
  return split->parts * perShard(*split, tile);
}
