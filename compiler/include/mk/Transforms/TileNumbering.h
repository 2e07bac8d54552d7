//===- TileNumbering.h - where a tile index lies along a dim ----*- C++ -*-===//
//
// Tile coordinates are global: tile i of t elements along a dim. A sharded dim splits as
// torch.tensor_split splits it (ShardSplit), so its shards need hold neither whole tiles nor the
// same extents. Along every dim of an extent whose shards a tile grid cuts into partial tiles
// (uneven shards, or shards not a multiple of the grid's tile), tiles are numbered shard after
// shard, in every tensor of the program (specialized programs name dims by extent only: dims of
// one shape symbol have one extent, so they agree): each shard has as many tiles as the largest,
// T = ceil(largest / t), and tile i lies in shard i / T, from element i % T * t of the shard,
// clipped to the shard (empty where a shard is short). Along any other dim tile i lies at element
// i * t, clipped to the extent. So a tile never spans two shards, and every tensor indexed by the
// same coordinates agrees on which elements a tile holds.
//
// An extent that tensors shard over different numbers of ranks is not numbered by shards; grids
// whose shards of it do not hold whole tiles are refused (TileWalk).
//
// One definition for the passes, the lowering (EmitC arithmetic) and mk-sim (integers), over
// TileWalk.h's index arithmetic (Ops: c, add, sub, mul, div, rem, min).
//
//===----------------------------------------------------------------------===//

#ifndef MK_TRANSFORMS_TILENUMBERING_H
#define MK_TRANSFORMS_TILENUMBERING_H

#include "mk/IR/MkOps.h"

#include "llvm/ADT/DenseMap.h"

#include <optional>

namespace mlir::mk {

/// The index along `axis` of the rank on `node`, `gpu` of `mesh`: the shard it holds of a tensor
/// sharded over `axis`.
template <typename Ops>
typename Ops::Index axisIndex(Ops &ops, MeshAttr mesh, MeshAxis axis, typename Ops::Index node,
                              typename Ops::Index gpu) {
  switch (axis) {
  case MeshAxis::world:
    return ops.add(ops.mul(node, ops.c(mesh.getGpus())), gpu);
  case MeshAxis::nodes:
    return node;
  case MeshAxis::gpus:
    return gpu;
  }
  llvm_unreachable("unknown mesh axis");
}

/// Shard `shard`'s first element, as Ops arithmetic.
template <typename Ops>
typename Ops::Index shardStart(Ops &ops, const ShardSplit &split, typename Ops::Index shard) {
  return ops.add(ops.mul(shard, ops.c(split.base())), ops.min(shard, ops.c(split.extra())));
}

/// Shard `shard`'s extent, as Ops arithmetic.
template <typename Ops>
typename Ops::Index shardExtent(Ops &ops, const ShardSplit &split, typename Ops::Index shard) {
  if (split.even())
    return ops.c(split.base());
  return ops.sub(shardStart(ops, split, ops.add(shard, ops.c(1))), shardStart(ops, split, shard));
}

/// The shard that holds element `element`: the first extra() shards hold largest() each.
template <typename Ops>
typename Ops::Index shardOf(Ops &ops, const ShardSplit &split, typename Ops::Index element) {
  typename Ops::Index inLarger = ops.min(element, ops.c(split.extra() * split.largest()));
  return ops.add(ops.div(inLarger, ops.c(split.largest())),
                 ops.div(ops.sub(element, inLarger), ops.c(std::max<int64_t>(split.base(), 1))));
}

/// Tiles of `tile` in each of the 2P chunks of the sharded dim of `type`, placed zigzag over P
/// ranks (the verifier of mk.sequence_tile keeps the chunks whole tiles).
inline int64_t zigzagChunkTiles(DistTensorType type, MeshAttr mesh, int64_t tile) {
  ShardSplit split = type.getShardSplit(type.getPlacement().getDim(), mesh);
  return split.extent / (2 * split.parts) / tile;
}

/// Tile `index` of `tile` along the sharded dim of `type` as a tile of the sequence
/// (mk.sequence_tile): itself, but where the dim is placed zigzag, whose tiles run rank after rank
/// over chunks r and 2P - 1 - r of whole tiles (C each): tile l of rank r's 2C is tile
/// l % C of chunk r (l < C) or of chunk 2P - 1 - r.
template <typename Ops>
typename Ops::Index sequenceTile(Ops &ops, DistTensorType type, MeshAttr mesh, int64_t tile,
                                 typename Ops::Index index) {
  PlacementAttr placement = type.getPlacement();
  if (!placement.getZigzag())
    return index;
  int64_t parts = mesh.getAxisSize(placement.getAxis()), chunk = zigzagChunkTiles(type, mesh, tile);
  typename Ops::Index rank = ops.div(index, ops.c(2 * chunk)),
                      local = ops.rem(index, ops.c(2 * chunk));
  typename Ops::Index second = ops.div(local, ops.c(chunk));
  // Chunk r, or 2P - 1 - r = r + (2P - 1 - 2r) where the tile is in the second.
  typename Ops::Index chunkIndex =
      ops.add(rank, ops.mul(second, ops.sub(ops.c(2 * parts - 1), ops.mul(rank, ops.c(2)))));
  return ops.add(ops.mul(chunkIndex, ops.c(chunk)), ops.rem(local, ops.c(chunk)));
}

/// Where a tile lies along one dim: its first element (global) and how many it holds.
template <typename Index> struct TileSpan { Index start, size; };

class TileNumbering {
public:
  /// The numbering of `program`'s dims on its bound mesh.
  static TileNumbering of(ProgramOp program);

  /// The split that numbers tiles along dims of `extent`, if any.
  std::optional<ShardSplit> splitOf(int64_t extent) const;
  /// Whether tensors shard `extent` over different numbers of ranks (so it is not numbered).
  bool splitsAmbiguously(int64_t extent) const;
  /// The op of the program whose meaning takes only tiles at i * t (expert routing, row counts),
  /// if any.
  StringRef plainTilesOnly() const { return plainOnly; }

  /// Tiles of `tile` along a dim of `extent`.
  int64_t count(int64_t extent, int64_t tile) const { return count(splitOf(extent), extent, tile); }
  /// Whether tile i of `tile` lies at element i * tile along a dim of `extent`, whole but for the
  /// dim's last: as it would without shards.
  bool plain(int64_t extent, int64_t tile) const { return plain(splitOf(extent), tile); }
  /// Where tile `index` of `tile` lies along a dim of `extent`.
  template <typename Ops>
  TileSpan<typename Ops::Index> span(Ops &ops, int64_t extent, int64_t tile,
                                     typename Ops::Index index) const {
    return span(ops, splitOf(extent), extent, tile, index);
  }

  /// The same along a dim of `extent` that `split` numbers (none: not by shards).
  static int64_t count(std::optional<ShardSplit> split, int64_t extent, int64_t tile);
  static bool plain(std::optional<ShardSplit> split, int64_t tile) {
    return !split || (split->even() && split->base() % tile == 0);
  }
  template <typename Ops>
  static TileSpan<typename Ops::Index> span(Ops &ops, std::optional<ShardSplit> split,
                                            int64_t extent, int64_t tile,
                                            typename Ops::Index index) {
    if (plain(split, tile)) {
      typename Ops::Index start = ops.mul(index, ops.c(tile));
      if (extent % tile == 0)
        return {start, ops.c(tile)};
      return {start, ops.min(ops.c(tile), ops.sub(ops.c(extent), start))};
    }
    int64_t tiles = perShard(*split, tile);
    typename Ops::Index shard = ops.div(index, ops.c(tiles));
    typename Ops::Index within = ops.mul(ops.rem(index, ops.c(tiles)), ops.c(tile));
    // A shard's tiles start within it (T tiles of the largest), so `size` is never negative.
    return {ops.add(shardStart(ops, *split, shard), within),
            ops.min(ops.c(tile), ops.sub(shardExtent(ops, *split, shard), within))};
  }
  /// The tiles [lo, hi) of `tile` that shard `shard` of `type`'s sharded dim holds
  /// (mk.shard_range).
  template <typename Ops>
  std::pair<typename Ops::Index, typename Ops::Index> shardTiles(Ops &ops, DistTensorType type,
                                                                 MeshAttr mesh, int64_t tile,
                                                                 typename Ops::Index shard) const {
    int64_t d = type.getPlacement().getDim();
    ShardSplit split = type.getShardSplit(d, mesh);
    std::optional<ShardSplit> numbered = splitOf(type.getShape()[d]);
    if (plain(numbered, tile)) {
      int64_t local = type.getLocalExtent(d, mesh);
      typename Ops::Index first = ops.mul(shard, ops.c(local));
      return {ops.div(first, ops.c(tile)),
              ops.div(ops.add(first, ops.c(local + tile - 1)), ops.c(tile))};
    }
    typename Ops::Index lo = ops.mul(shard, ops.c(perShard(*numbered, tile)));
    typename Ops::Index tiles =
        ops.div(ops.add(shardExtent(ops, split, shard), ops.c(tile - 1)), ops.c(tile));
    return {lo, ops.add(lo, tiles)};
  }
  /// Tiles of `tile` per shard along a dim numbered by `split`.
  static int64_t perShard(const ShardSplit &split, int64_t tile) {
    return llvm::divideCeil(split.largest(), tile);
  }

private:
  /// The ranks each sharded extent splits over: 0 where tensors disagree, 1 where no grid cuts
  /// its shards (not numbered by shards).
  llvm::DenseMap<int64_t, int64_t> parts;
  StringRef plainOnly;
};

} // namespace mlir::mk

#endif // MK_TRANSFORMS_TILENUMBERING_H
