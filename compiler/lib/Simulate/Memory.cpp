//===- Memory.cpp - the part of a tensor one rank holds -------------------===//

#include "Memory.h"

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::sim;

int64_t Box::elements() const {
  int64_t n = 1;
  for (size_t d = 0; d < lo.size(); ++d)
    n *= std::max<int64_t>(hi[d] - lo[d], 0);
  return n;
}

Layout Layout::of(DistTensorType type, MeshAttr mesh, const TileNumbering &numbering, int64_t node,
                  int64_t gpu) {
  Layout layout;
  layout.type = type;
  layout.precision = precisionOf(type.getElementType());
  PlacementAttr placement = type.getPlacement();
  for (int64_t d = 0; d < type.getRank(); ++d) {
    int64_t extent = type.getShape()[d];
    layout.global.push_back(extent);
    layout.numbered.push_back(numbering.splitOf(extent));
    if (!placement.shardsDim(d)) {
      layout.local.push_back(extent);
      layout.first.push_back(0);
      continue;
    }
    int64_t index = placement.getAxis() == MeshAxis::world   ? node * mesh.getGpus() + gpu
                    : placement.getAxis() == MeshAxis::nodes ? node
                                                             : gpu;
    ShardSplit split = type.getShardSplit(d, mesh);
    layout.local.push_back(split.extentOf(index));
    layout.first.push_back(split.startOf(index));
  }
  return layout;
}

int64_t Layout::elements() const {
  int64_t n = 1;
  for (int64_t e : local)
    n *= e;
  return n;
}

bool Layout::holds(const Box &box) const {
  for (int64_t d = 0; d < rank(); ++d)
    if (box.lo[d] < first[d] || box.hi[d] > first[d] + local[d])
      return false;
  return true;
}

bool Layout::isShortShardTile(const Box &box) const {
  for (int64_t d = 0; d < rank(); ++d) {
    if (!numbered[d] || box.lo[d] != box.hi[d])
      continue;
    for (int64_t s = 0; s < numbered[d]->parts; ++s)
      if (box.lo[d] == numbered[d]->startOf(s) + numbered[d]->extentOf(s))
        return true;
  }
  return false;
}

int64_t Layout::offset(ArrayRef<int64_t> coords) const {
  int64_t offset = 0;
  for (int64_t d = 0; d < rank(); ++d)
    offset = offset * local[d] + coords[d] - first[d];
  return offset;
}

SmallVector<int64_t, 4> Layout::coordsOf(int64_t offset) const {
  SmallVector<int64_t, 4> coords(rank());
  for (int64_t d = rank() - 1; d >= 0; --d) {
    coords[d] = first[d] + offset % local[d];
    offset /= local[d];
  }
  return coords;
}

Box Layout::held() const {
  Box box;
  for (int64_t d = 0; d < rank(); ++d) {
    box.lo.push_back(first[d]);
    box.hi.push_back(first[d] + local[d]);
  }
  return box;
}

Box Layout::access(ArrayRef<int64_t> indices, ArrayRef<int64_t> wholeDims,
                   ArrayRef<int64_t> tile) const {
  Box box;
  int64_t firstTileDim = rank() - tile.size();
  auto index = indices.begin();
  for (int64_t d = 0; d < rank(); ++d) {
    if (llvm::is_contained(wholeDims, d)) {
      box.lo.push_back(first[d]);
      box.hi.push_back(first[d] + local[d]);
      continue;
    }
    // Leading dims index single elements; tile dims are numbered (TileNumbering).
    if (d < firstTileDim) {
      box.lo.push_back(*index);
      box.hi.push_back(std::min(*index++ + 1, global[d]));
      continue;
    }
    IntIndexOps ops;
    TileSpan<int64_t> span =
        TileNumbering::span(ops, numbered[d], global[d], tile[d - firstTileDim], *index++);
    box.lo.push_back(span.start);
    box.hi.push_back(span.start + span.size);
  }
  return box;
}

TensorData::TensorData(Layout layout, float fill)
    : layout(std::move(layout)), data(this->layout.elements(), fill) {}

/// Calls `f(tensorOffset, tileOffset, n)` for each run of `box` along its last dim: where the
/// run starts in the tensor's part and in a tile of `shape` over the box's trailing dims.
template <typename F>
static void forEachTileRow(const Layout &layout, const Box &box, ArrayRef<int64_t> shape, F f) {
  int64_t rank = box.lo.size(), tileRank = shape.size();
  box.forEachRow([&](ArrayRef<int64_t> at, int64_t n) {
    int64_t offset = 0;
    for (int64_t j = 0; j < tileRank; ++j) {
      int64_t d = rank - tileRank + j;
      offset = offset * shape[j] + at[d] - box.lo[d];
    }
    f(layout.offset(at), offset, n);
  });
}

Tile sim::readTile(const TensorData &tensor, const Box &box, TileType type) {
  Tile tile(type.getShape(), type.getElementType());
  forEachTileRow(tensor.layout, box, tile.shape, [&](int64_t from, int64_t to, int64_t n) {
    std::copy_n(&tensor.data[from], n, &tile.data[to]);
  });
  return tile;
}

void sim::writeTile(TensorData &tensor, const Box &box, const Tile &tile, bool combine) {
  Precision precision = tensor.layout.precision;
  forEachTileRow(tensor.layout, box, tile.shape, [&](int64_t to, int64_t from, int64_t n) {
    float *out = &tensor.data[to];
    const float *in = &tile.data[from];
    for (int64_t i = 0; i < n; ++i)
      out[i] = roundTo(precision, combine ? out[i] + in[i] : in[i]);
  });
}

void sim::copyBox(const TensorData &source, const Box &from, TensorData &dest, const Box &to) {
  // Element i of one box, row-major, goes to element i of the other.
  std::vector<float> values;
  values.reserve(from.elements());
  from.forEachRow([&](ArrayRef<int64_t> at, int64_t n) {
    const float *row = &source.data[source.layout.offset(at)];
    values.insert(values.end(), row, row + n);
  });
  size_t next = 0;
  to.forEach([&](ArrayRef<int64_t> at) { dest.at(at) = values[next++]; });
}
