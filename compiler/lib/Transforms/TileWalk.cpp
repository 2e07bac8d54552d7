//===- TileWalk.cpp - which tiles each CTA of a role visits ---------------===//

#include "mk/Transforms/TileWalk.h"

using namespace mlir;
using namespace mlir::mk;

/// The error for a dim of `extent` over `parts` ranks whose shards do not hold whole tiles of
/// `size`, and the nearest extents that do.
static InFlightDiagnostic refuseShards(TileGridOp grid, int64_t d, int64_t extent, int64_t parts,
                                       int64_t size, StringRef why) {
  int64_t whole = parts * size;
  int64_t below = extent / whole * whole;
  InFlightDiagnostic diag =
      grid.emitOpError() << "masks the tiles of a shard, which " << why << ": dim " << d << " ("
                         << extent << " over " << parts << " ranks) holds "
                         << ShardSplit{extent, parts}.largest() << " a rank, not a multiple of the "
                         << size << " of a tile; use a multiple of " << whole;
  if (below)
    diag << " (" << below << " or " << below + whole << ")";
  return diag;
}

FailureOr<TileWalk> TileWalk::get(TileGridOp grid, MeshAttr mesh, const TileNumbering &numbering) {
  DistTensorType target = grid.getTargetType();
  PlacementAttr placement = target.getPlacement();
  TileWalk walk;
  walk.mesh = mesh;
  walk.order = grid.getOrderAttr();

  // Which shards the grid visits (each with `perShard` tiles), or the whole tensor.
  bool byShard = placement.isSharded() && (!grid.getGlobal() || grid.getDistribute());
  int64_t rank = target.getRank();
  for (int64_t d = 0; d < rank; ++d) {
    int64_t extent = target.getShape()[d];
    int64_t size = grid.getTileSizes()[d];
    if (ShapedType::isDynamic(size)) {
      walk.counts_.push_back(1);
      continue;
    }
    if (numbering.splitsAmbiguously(extent) && placement.shardsDim(d)) {
      ShardSplit split = target.getShardSplit(d, mesh);
      if (!split.even() || split.base() % size)
        return refuseShards(grid, d, extent, split.parts, size,
                            "the program's tensors split over different numbers of ranks");
    }
    std::optional<ShardSplit> split = numbering.splitOf(extent);
    if (split && !numbering.plain(extent, size) && !numbering.plainTilesOnly().empty())
      return refuseShards(grid, d, extent, split->parts, size,
                          ("'" + numbering.plainTilesOnly() + "' does not take yet").str());
    // Tiles are numbered shard after shard (TileNumbering).
    int64_t count = numbering.count(extent, size);
    if (byShard && placement.shardsDim(d))
      count = split ? TileNumbering::perShard(*split, size)
                    : llvm::divideCeil(target.getLocalExtent(d, mesh), size);
    walk.counts_.push_back(count);
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
  if (grid.getRowCounts()) {
    // The groups are this rank's (or the whole tensor's), their rows in tiles of R.
    ArrayRef<int64_t> sizes = grid.getTileSizes();
    bool ownGroups = walk.shards == Shards::own && walk.shardDim == 0;
    if (rank != 3 || sizes[0] != 1 || ShapedType::isDynamic(sizes[1]) ||
        ShapedType::isDynamic(sizes[2]) || walk.stride != 1 || walk.rotated ||
        (walk.shards != Shards::none && !ownGroups))
      return grid.emitOpError() << "is bounded by row counts, which mkc walks only for a grid of "
                                   "this rank's groups in tiles [1, R, C]";
    int64_t rowTiles = walk.counts_[1];
    TileOrderKind kind = walk.order ? walk.order.getKind() : TileOrderKind::row_major;
    int64_t band = kind == TileOrderKind::swizzle        ? walk.order.getGroup()
                   : kind == TileOrderKind::column_major ? rowTiles
                                                         : 1;
    walk.grouped_ = Grouped{walk.counts_[0], target.getLocalExtent(1, mesh), sizes[1],
                            walk.counts_[2], std::max<int64_t>(band, 1)};
  }
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
