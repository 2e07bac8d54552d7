//===- TileWalk.cpp - which tiles each CTA of a role visits ---------------===//

#include "mk/Transforms/TileWalk.h"

using namespace mlir;
using namespace mlir::mk;

FailureOr<TileWalk> TileWalk::get(TileGridOp grid, MeshAttr mesh) {
  DistTensorType target = grid.getTargetType();
  PlacementAttr placement = target.getPlacement();
  TileWalk walk;
  walk.mesh = mesh;
  walk.order = grid.getOrderAttr();

  // Which shards the grid visits (each with `perShard` tiles), or the whole tensor.
  bool byShard = placement.isSharded() && (!grid.getGlobal() || grid.getDistribute());
  int64_t rank = target.getRank();
  for (int64_t d = 0; d < rank; ++d) {
    int64_t extent = byShard ? target.getLocalExtent(d, mesh) : target.getShape()[d];
    int64_t size = grid.getTileSizes()[d];
    // Tiles are numbered shard after shard, so a partial tile inside the global tensor would
    // shift every later shard's tiles (a shard that is the whole dim is the unsharded case).
    int64_t ranks = target.getShape()[d] / std::max<int64_t>(extent, 1);
    if (byShard && placement.shardsDim(d) && ranks > 1 && !ShapedType::isDynamic(size) &&
        extent % size) {
      int64_t whole = ranks * size;
      int64_t below = target.getShape()[d] / whole * whole;
      InFlightDiagnostic diag = grid.emitOpError()
                                << "masks the tiles of a shard, which has no CUDA lowering yet: "
                                   "dim "
                                << d << " (" << target.getShape()[d] << " over " << ranks
                                << " ranks) holds " << extent << " a rank, not a multiple of the "
                                << size << " of a tile; use a multiple of " << whole;
      if (below)
        diag << " (" << below << " or " << below + whole << ")";
      return diag;
    }
    walk.counts_.push_back(ShapedType::isDynamic(size) ? 1 : llvm::divideCeil(extent, size));
    walk.perShard *= walk.counts_.back();
  }

  if (byShard) {
    walk.shardAxis = placement.getAxis();
    walk.shardDim = placement.getDim();
    if (grid.getHolder()) {
      walk.shards = Shards::held;
    } else if (grid.getDistribute()) {
      if (*grid.getDistribute() != MeshAxis::gpus || walk.shardAxis != MeshAxis::world)
        return grid.emitOpError() << "distributes a sharded tensor in a way that has no CUDA "
                                     "lowering yet";
      walk.shards = Shards::ofThisGpu;
    } else {
      walk.shards = Shards::own;
    }
  } else if (std::optional<MeshAxis> axis = grid.getDistribute()) {
    if (*axis == MeshAxis::nodes)
      return grid.emitOpError() << "distributes over nodes, which has no CUDA lowering yet";
    walk.stride = mesh.getAxisSize(*axis);
    walk.strideAxis = *axis;
  }
  walk.ownedInOrder = walk.stride != 1 && walk.order &&
                      walk.order.getKind() != TileOrderKind::row_major &&
                      walk.shards == Shards::none && rank >= 2;
  walk.rotated = walk.order && walk.order.getLocalFirst() && walk.stride == 1 && rank >= 2;
  return walk;
}

bool TileWalk::pairsRows(int64_t ctas) const {
  // Round robin and the shards of this GPU index interleave rows of several owners.
  TileOrderAttr walked = stride == 1 && shards != Shards::ofThisGpu ? order : TileOrderAttr();
  if (counts_.size() != 2 || ctas % 2 || counts_[0] % 2 || !walked ||
      walked.getKind() != TileOrderKind::swizzle || walked.getGroup() % 2)
    return false;
  // The rotation of rank r is r * rows / world (tileAt).
  int64_t world = mesh.getWorldSize();
  for (int64_t rank = 0; rotated && rank < world; ++rank)
    if (rank * counts_[0] / world % 2)
      return false;
  return true;
}
