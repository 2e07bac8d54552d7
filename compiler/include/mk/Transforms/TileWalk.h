//===- TileWalk.h - which tiles each CTA of a role visits -------*- C++ -*-===//
//
// A scheduled tile grid is spread over the CTAs of its role: CTA c of n takes positions c, c + n,
// c + 2n, ... of the grid's walk, and each position names one tile (or, for round-robin tiles
// walked in their producer's order, a tile this rank may skip). TileWalk is the one definition of
// that mapping — the shards a grid visits, round-robin ownership, the local-first rotation and
// the swizzled order — written once over an abstract index arithmetic, so that the lowering emits
// it as arith ops (ArithIndexOps) and mk-sim evaluates it on integers (IntIndexOps) without the
// two ever disagreeing.
//
//   FailureOr<TileWalk> walk = TileWalk::get(grid, mesh, numbering);  // refuses walks with no
//   lowering TileWalk::Bound<int64_t> bound = walk->bind(ops, place); for (int64_t p = cta; p <
//   bound.positions; p += ctas)
//     if (auto tile = walk->tileAt(ops, bound, p, place); tile.visits.value_or(true))
//       ... tile.coords ...
//
//===----------------------------------------------------------------------===//

#ifndef MK_TRANSFORMS_TILEWALK_H
#define MK_TRANSFORMS_TILEWALK_H

#include "mk/IR/MkOps.h"
#include "mk/Transforms/TileNumbering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <optional>

namespace mlir::mk {

/// Index arithmetic on integers (signed, as the emitted arith ops are).
struct IntIndexOps {
  using Index = int64_t;
  using Bool = bool;
  Index c(int64_t v) { return v; }
  Index add(Index a, Index b) { return a + b; }
  Index sub(Index a, Index b) { return a - b; }
  Index mul(Index a, Index b) { return a * b; }
  Index div(Index a, Index b) { return a / b; }
  Index rem(Index a, Index b) { return a % b; }
  Index min(Index a, Index b) { return std::min(a, b); }
  Bool lt(Index a, Index b) { return a < b; }
  Bool eq(Index a, Index b) { return a == b; }
  Index select(Bool p, Index a, Index b) { return p ? a : b; }
};

/// Index arithmetic emitted as arith ops at a builder's insertion point.
struct ArithIndexOps {
  using Index = Value;
  using Bool = Value;
  OpBuilder &b;
  Location loc;
  Index c(int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }
  Index add(Index x, Index y) { return arith::AddIOp::create(b, loc, x, y); }
  Index sub(Index x, Index y) { return arith::SubIOp::create(b, loc, x, y); }
  Index mul(Index x, Index y) { return arith::MulIOp::create(b, loc, x, y); }
  Index div(Index x, Index y) { return arith::DivSIOp::create(b, loc, x, y); }
  Index rem(Index x, Index y) { return arith::RemSIOp::create(b, loc, x, y); }
  Bool lt(Index x, Index y) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, x, y);
  }
  Bool eq(Index x, Index y) {
    return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, x, y);
  }
  Index select(Bool p, Index x, Index y) { return arith::SelectOp::create(b, loc, p, x, y); }
  // A comparison and a select: arith.minsi has no EmitC lowering.
  Index min(Index x, Index y) { return select(lt(x, y), x, y); }
};

class TileWalk {
public:
  /// The walk of `grid` (scheduled, on a bound `mesh`, its program's tiles numbered by
  /// `numbering`), or failure, with the grid's error, for walks that have no lowering. A grid
  /// bounded by row counts (`rows`) walks only the tiles within them: see grouped().
  static FailureOr<TileWalk> get(TileGridOp grid, MeshAttr mesh, const TileNumbering &numbering);

  /// A grid bounded by row counts, over [groups, rows, columns] in tiles [1, R, C] of this rank's
  /// shard of the groups, walks its tiles as mk::GroupedWalk (mk/grouped_walk.h, the device
  /// library's) over the counts: positions, then the tile at a position, whose group is the
  /// walk's plus the shard's first (Bound::firstShard times the groups). These are that walk's
  /// parameters but for the counts.
  struct Grouped {
    int64_t groups, capacity, tileRows, colTiles, band;
  };
  const std::optional<Grouped> &grouped() const { return grouped_; }

  /// What a walk depends on at run time: this rank's node and GPU index, and the grid's `held_by`
  /// operand where it has one.
  template <typename Index> struct Place {
    Index node, gpu;
    std::optional<Index> holder;
  };

  /// What a walk computes once, before its loop: the number of positions, and the shard or
  /// round-robin offset where one is fixed for the whole loop.
  template <typename Index> struct Bound {
    Index positions;
    std::optional<Index> strideOffset, firstShard;
  };

  /// The tile at a position: its global tile coordinates and, for round-robin tiles walked in
  /// their producer's order, whether this rank visits it (nullopt: it does).
  template <typename Index, typename Bool> struct Tile {
    SmallVector<Index> coords;
    std::optional<Bool> visits;
  };

  template <typename Ops>
  Bound<typename Ops::Index> bind(Ops &ops, const Place<typename Ops::Index> &place) const;

  template <typename Ops>
  Tile<typename Ops::Index, typename Ops::Bool>
  tileAt(Ops &ops, const Bound<typename Ops::Index> &bound, typename Ops::Index position,
         const Place<typename Ops::Index> &place) const;

  /// Whether CTAs 2c and 2c + 1 of `ctas` take, in step, the two rows of a column's pair of
  /// tiles: a 2-D grid walked in swizzled bands of an even number of rows, with an even count of
  /// rows and CTAs and even local-first rotations on every rank.
  bool pairsRows(int64_t ctas) const;

  /// Tiles per dim of the grid, within one shard where the grid visits shards.
  ArrayRef<int64_t> counts() const { return counts_; }

  /// Whether some positions name a tile this rank skips (Tile::visits): round-robin tiles walked
  /// in their producer's order.
  bool skipsTiles() const { return ownedInOrder; }

private:
  /// Which shards of a sharded target the grid visits.
  enum class Shards {
    none,      // the whole tensor
    own,       // this rank's, along the placement's axis
    held,      // the one `held_by` names
    ofThisGpu, // the shards of the ranks with this GPU index, one per node
  };

  template <typename Ops>
  typename Ops::Index indexAlong(Ops &ops, MeshAxis axis,
                                 const Place<typename Ops::Index> &place) const {
    return axisIndex(ops, mesh, axis, place.node, place.gpu);
  }
  template <typename Ops>
  SmallVector<typename Ops::Index> decode(Ops &ops, typename Ops::Index pos, TileOrderAttr order,
                                          std::optional<typename Ops::Index> rotation) const;

  MeshAttr mesh;
  SmallVector<int64_t> counts_;
  int64_t perShard = 1;
  Shards shards = Shards::none;
  MeshAxis shardAxis = MeshAxis::world;
  int64_t shardDim = 0;
  /// Round robin: every `stride`-th tile (row-major) from this rank's index along `strideAxis`.
  int64_t stride = 1;
  MeshAxis strideAxis = MeshAxis::world;
  /// Round-robin tiles walked in an order of their own (their producer's): every tile is walked
  /// and this rank keeps its own, so that tiles are taken up as they are finished.
  bool ownedInOrder = false;
  TileOrderAttr order;
  bool rotated = false;
  std::optional<Grouped> grouped_;
};

/// mk.owner's meaning: the node and GPU index of the rank that owns tile `indices` (global tile
/// coordinates, tiles of `tile` elements, numbered by `numbering`) of `type` on `mesh`, seen from
/// rank (`node`, `gpu`). A sharded tensor's tile belongs to the shard holding its first element;
/// a replicated or symmetric tensor's tiles are dealt round-robin by row-major index or, with
/// `rowSlices`, in slices of tile rows, rank r owning rows [r * R / W, (r + 1) * R / W).
template <typename Ops>
std::pair<typename Ops::Index, typename Ops::Index>
tileOwner(Ops &ops, DistTensorType type, ArrayRef<typename Ops::Index> indices,
          ArrayRef<int64_t> tile, bool rowSlices, MeshAttr mesh, const TileNumbering &numbering,
          typename Ops::Index node, typename Ops::Index gpu) {
  using Index = typename Ops::Index;
  PlacementAttr placement = type.getPlacement();
  Index along;
  MeshAxis axis = MeshAxis::world;
  if (placement.isSharded()) {
    int64_t d = placement.getDim(), extent = type.getShape()[d];
    axis = placement.getAxis();
    std::optional<ShardSplit> split = numbering.splitOf(extent);
    along = split && !numbering.plain(extent, tile[d])
                ? ops.div(indices[d], ops.c(TileNumbering::perShard(*split, tile[d])))
                : shardOf(ops, type.getShardSplit(d, mesh), ops.mul(indices[d], ops.c(tile[d])));
  } else if (rowSlices) {
    // The slice of tile rows holding row m: the largest r with r * rows / W <= m.
    int64_t d = type.getRank() - 2, world = mesh.getWorldSize();
    int64_t rows = numbering.count(type.getShape()[d], tile[d]);
    along = ops.div(ops.sub(ops.mul(ops.add(indices[d], ops.c(1)), ops.c(world)), ops.c(1)),
                    ops.c(rows));
  } else {
    // Round-robin over the world by row-major tile index.
    Index linear = ops.c(0);
    for (int64_t d = 0; d < type.getRank(); ++d)
      linear =
          ops.add(ops.mul(linear, ops.c(numbering.count(type.getShape()[d], tile[d]))), indices[d]);
    along = ops.rem(linear, ops.c(mesh.getWorldSize()));
  }
  Index ownerNode = axis == MeshAxis::world   ? ops.div(along, ops.c(mesh.getGpus()))
                    : axis == MeshAxis::nodes ? along
                                              : node;
  Index ownerGpu = axis == MeshAxis::world  ? ops.rem(along, ops.c(mesh.getGpus()))
                   : axis == MeshAxis::gpus ? along
                                            : gpu;
  return {ownerNode, ownerGpu};
}

template <typename Ops>
TileWalk::Bound<typename Ops::Index> TileWalk::bind(Ops &ops,
                                                    const Place<typename Ops::Index> &place) const {
  Bound<typename Ops::Index> bound;
  if (shards == Shards::held)
    bound.firstShard = *place.holder;
  else if (shards == Shards::own)
    bound.firstShard = indexAlong(ops, shardAxis, place);
  if (stride != 1)
    bound.strideOffset = indexAlong(ops, strideAxis, place);
  int64_t total = (shards == Shards::ofThisGpu ? mesh.getNodes() : 1) * perShard;
  bound.positions =
      stride == 1 || ownedInOrder
          ? ops.c(total)
          : ops.div(ops.sub(ops.c(total + stride - 1), *bound.strideOffset), ops.c(stride));
  return bound;
}

template <typename Ops>
TileWalk::Tile<typename Ops::Index, typename Ops::Bool>
TileWalk::tileAt(Ops &ops, const Bound<typename Ops::Index> &bound, typename Ops::Index position,
                 const Place<typename Ops::Index> &place) const {
  using Index = typename Ops::Index;
  if (stride != 1 && !ownedInOrder)
    position = ops.add(ops.mul(position, ops.c(stride)), *bound.strideOffset);

  std::optional<Index> shardIndex = bound.firstShard;
  Index inShard = position;
  if (shards == Shards::ofThisGpu) {
    Index shardSlot = ops.div(position, ops.c(perShard));
    inShard = ops.rem(position, ops.c(perShard));
    shardIndex = ops.add(ops.mul(shardSlot, ops.c(mesh.getGpus())), place.gpu);
  }

  // Tiles that need nothing remote come first: rotate the rows to start at this rank's slice.
  std::optional<Index> rotation;
  int64_t rank = counts_.size();
  if (rotated) {
    Index me = indexAlong(ops, MeshAxis::world, place);
    rotation = ops.div(ops.mul(me, ops.c(counts_[rank - 2])), ops.c(mesh.getWorldSize()));
  }
  // The round-robin owner of a tile is defined on the row-major index.
  Tile<Index, typename Ops::Bool> tile;
  tile.coords =
      decode(ops, inShard, stride == 1 || ownedInOrder ? order : TileOrderAttr(), rotation);
  if (ownedInOrder) {
    Index linear = tile.coords[0];
    for (int64_t d = 1; d < rank; ++d)
      linear = ops.add(ops.mul(linear, ops.c(counts_[d])), tile.coords[d]);
    tile.visits = ops.eq(ops.rem(linear, ops.c(stride)), *bound.strideOffset);
  }
  if (shardIndex) {
    Index start = ops.mul(*shardIndex, ops.c(counts_[shardDim]));
    tile.coords[shardDim] = ops.add(tile.coords[shardDim], start);
  }
  return tile;
}

template <typename Ops>
SmallVector<typename Ops::Index>
TileWalk::decode(Ops &ops, typename Ops::Index pos, TileOrderAttr order,
                 std::optional<typename Ops::Index> rotation) const {
  using Index = typename Ops::Index;
  int64_t rank = counts_.size();
  SmallVector<Index> coords(rank, pos);
  // The last two dims are ordered; the leading dims are outer loops.
  int64_t inner = rank >= 2 ? counts_[rank - 2] * counts_[rank - 1] : counts_[rank - 1];
  Index rest = ops.div(pos, ops.c(inner));
  Index within = ops.rem(pos, ops.c(inner));
  for (int64_t d = rank - 3; d >= 0; --d) {
    coords[d] = ops.rem(rest, ops.c(counts_[d]));
    rest = ops.div(rest, ops.c(counts_[d]));
  }
  if (rank == 1) {
    coords[0] = within;
    return coords;
  }
  int64_t rows = counts_[rank - 2], cols = counts_[rank - 1];
  TileOrderKind kind = order ? order.getKind() : TileOrderKind::row_major;
  Index row = within, col = within;
  switch (kind) {
  case TileOrderKind::row_major:
    row = ops.div(within, ops.c(cols));
    col = ops.rem(within, ops.c(cols));
    break;
  case TileOrderKind::column_major:
    col = ops.div(within, ops.c(rows));
    row = ops.rem(within, ops.c(rows));
    break;
  case TileOrderKind::swizzle: {
    // Bands of `group` tile rows, walked column by column.
    int64_t group = order.getGroup();
    Index band = ops.div(within, ops.c(group * cols));
    Index inBand = ops.rem(within, ops.c(group * cols));
    Index firstRow = ops.mul(band, ops.c(group));
    Index rowsLeft = ops.sub(ops.c(rows), firstRow);
    Index bandRows = ops.select(ops.lt(rowsLeft, ops.c(group)), rowsLeft, ops.c(group));
    row = ops.add(firstRow, ops.rem(inBand, bandRows));
    col = ops.div(inBand, bandRows);
    break;
  }
  }
  if (rotation)
    row = ops.rem(ops.add(row, *rotation), ops.c(rows));
  coords[rank - 2] = row;
  coords[rank - 1] = col;
  return coords;
}

} // namespace mlir::mk

#endif // MK_TRANSFORMS_TILEWALK_H
