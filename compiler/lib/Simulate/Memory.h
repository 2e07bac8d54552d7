//===- Memory.h - the part of a tensor one rank holds -----------*- C++ -*-===//
//
// A distributed tensor's elements on one rank: which global elements the rank holds (its shard,
// or all of a replicated or symmetric tensor), and the box of global elements an access names
// (global tile coordinates, `:` dims, a tile over the trailing dims), cut by the tensor's edges
// as masked tiles are.
//
//===----------------------------------------------------------------------===//

#ifndef MK_SIMULATE_MEMORY_H
#define MK_SIMULATE_MEMORY_H

#include "Values.h"

#include "mk/Transforms/TileWalk.h"

#include <functional>

namespace mlir::mk::sim {

/// Global element coordinates [lo[d], hi[d]) along each dim.
struct Box {
  SmallVector<int64_t, 4> lo, hi;
  int64_t extent(int64_t d) const { return hi[d] - lo[d]; }
  int64_t elements() const;
  bool empty() const { return elements() == 0; }
  /// Calls `f(start, n)` on every run of elements along the last dim, row-major: the run's first
  /// element's coordinates and its length.
  template <typename F> void forEachRow(F f) const {
    if (empty())
      return;
    SmallVector<int64_t, 4> at(lo);
    int64_t last = lo.size() - 1, n = hi[last] - lo[last];
    while (true) {
      f(ArrayRef<int64_t>(at), n);
      int64_t d = last - 1;
      while (d >= 0 && ++at[d] == hi[d]) {
        at[d] = lo[d];
        --d;
      }
      if (d < 0)
        return;
    }
  }
  /// Calls `f` on every element, row-major, with its coordinates.
  template <typename F> void forEach(F f) const {
    SmallVector<int64_t, 4> at;
    int64_t last = lo.size() - 1;
    forEachRow([&](ArrayRef<int64_t> start, int64_t n) {
      at.assign(start.begin(), start.end());
      for (int64_t i = 0; i < n; ++i, ++at[last])
        f(ArrayRef<int64_t>(at));
    });
  }
};

/// Which elements of a tensor a rank holds.
struct Layout {
  DistTensorType type;
  Precision precision;
  SmallVector<int64_t, 4> global, local, first;
  /// The split that numbers the tiles along each dim, if any (TileNumbering).
  SmallVector<std::optional<ShardSplit>, 4> numbered;

  /// The part of `type` rank (`node`, `gpu`) of `mesh` holds, its tiles numbered by `numbering`.
  static Layout of(DistTensorType type, MeshAttr mesh, const TileNumbering &numbering, int64_t node,
                   int64_t gpu);
  int64_t rank() const { return global.size(); }
  int64_t elements() const;
  /// Whether every element of `box` is held here.
  bool holds(const Box &box) const;
  /// Whether `box` is an empty tile of a short shard: empty along a dim numbered by shards, at
  /// the end of a shard (TileNumbering).
  bool isShortShardTile(const Box &box) const;
  /// The offset of global element `coords` (held here) in the rank's row-major part.
  int64_t offset(ArrayRef<int64_t> coords) const;
  /// The global coordinates of the element at `offset`.
  SmallVector<int64_t, 4> coordsOf(int64_t offset) const;
  /// All the elements held here.
  Box held() const;
  /// The box an access names: `indices` are global tile coordinates of the dims not in
  /// `wholeDims`, the trailing dims take their extents from `tile` (where TileNumbering puts
  /// them) and the others extent 1; a whole dim is the part held here. Cut by the tensor's
  /// global edges, and by shards where they number the tiles.
  Box access(ArrayRef<int64_t> indices, ArrayRef<int64_t> wholeDims, ArrayRef<int64_t> tile) const;
};

/// A tensor's elements on one rank, in f32 (rounded to the tensor's element type).
struct TensorData {
  Layout layout;
  std::vector<float> data;

  explicit TensorData(Layout layout, float fill = 0.0f);
  float &at(ArrayRef<int64_t> coords) { return data[layout.offset(coords)]; }
  float at(ArrayRef<int64_t> coords) const { return data[layout.offset(coords)]; }
};

/// The tile of `type` at `box` (whose trailing dims the tile's are, the others of extent 1):
/// zero where the box is cut.
Tile readTile(const TensorData &tensor, const Box &box, TileType type);
/// Writes the part of `tile` inside `box`, or adds it where `combine` (rounded to the tensor's
/// element type).
void writeTile(TensorData &tensor, const Box &box, const Tile &tile, bool combine = false);
/// Copies box `from` of `source` to box `to` of `dest`, which has as many elements: element i of
/// one, row-major, to element i of the other.
void copyBox(const TensorData &source, const Box &from, TensorData &dest, const Box &to);

} // namespace mlir::mk::sim

#endif // MK_SIMULATE_MEMORY_H
