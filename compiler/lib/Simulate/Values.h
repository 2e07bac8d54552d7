//===- Values.h - what mk-sim computes with ---------------------*- C++ -*-===//
//
// The simulator's values: index and scalar values of arith, tiles (dense, row-major, held in f32
// and rounded to their element type whenever one is made, as the device library rounds), and
// views of tensors. Shared by the program-level reference and the scheduled machine.
//
//===----------------------------------------------------------------------===//

#ifndef MK_SIMULATE_VALUES_H
#define MK_SIMULATE_VALUES_H

#include "mk/IR/MkOps.h"

#include <memory>
#include <variant>
#include <vector>

namespace mlir::mk::sim {

/// How an element type holds values: bf16 and f16 round to nearest even, integers truncate
/// toward zero and saturate to i32, everything else is held as f32.
enum class Precision { f32, bf16, f16, integer };
Precision precisionOf(Type type);
float roundTo(Precision precision, float value);
inline float roundTo(Type type, float value) { return roundTo(precisionOf(type), value); }

/// A tile of `shape` whose elements are of `element`.
struct Tile {
  SmallVector<int64_t, 2> shape;
  Type element;
  Precision precision;
  std::vector<float> data;
  /// How far each element may lie from what a schedule computes, from rounding upstream (the
  /// partial sums of a collective it was computed from); empty where it is exact. The program's
  /// meaning tracks it; the machine does not.
  std::vector<float> slack;

  Tile(ArrayRef<int64_t> shape, Type element, float fill = 0.0f);
  int64_t rows() const { return shape.size() < 2 ? 1 : shape[0]; }
  int64_t cols() const { return shape.back(); }
  float &at(int64_t r, int64_t c) { return data[r * cols() + c]; }
  float at(int64_t r, int64_t c) const { return data[r * cols() + c]; }
  /// Rounds every element to the tile's element type.
  void round();
};
using TilePtr = std::shared_ptr<const Tile>;

/// A tensor of the program as held by one rank (`rank`: whose memory; -1 for the evaluating
/// rank's own).
struct TensorView {
  Value tensor;
  int64_t rank = -1;
};

/// An SSA value during simulation: an integer (index, iN, i1), a float scalar, a tile or a
/// tensor.
using SimValue = std::variant<std::monostate, int64_t, double, TilePtr, TensorView>;

} // namespace mlir::mk::sim

#endif // MK_SIMULATE_VALUES_H
