//===- MkTypes.h - types of the mk dialect ------------------------*- C++ -*-===//

#ifndef MK_IR_MKTYPES_H
#define MK_IR_MKTYPES_H

#include "mk/IR/MkAttrs.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Types.h"

#include <algorithm>

namespace mlir::mk {

/// One dim of a tensor or tile: an extent (ShapedType::kDynamic while unknown) and the shape symbol
/// of the enclosing program that names it, if any. In a type a dim is either static (no symbol) or
/// symbolic (unknown extent); verifiers resolve symbols bound by the program to known extents.
struct Dim {
  int64_t extent = ShapedType::kDynamic;
  StringAttr symbol;

  bool isKnown() const { return !ShapedType::isDynamic(extent); }
  friend bool operator==(const Dim &, const Dim &) = default;
};

/// Whether two dims are provably equal, provably different, or undecided until specialization.
enum class DimRelation { equal, different, unknown };
DimRelation compareDims(Dim a, Dim b);

/// `M`, `M = 4096` or `4096`, as written in types and diagnostics.
std::string formatDim(Dim dim);

/// How a dim of `extent` elements is split over `parts` ranks, as torch.tensor_split splits it:
/// shard s holds extentOf(s) elements from startOf(s), the first extent % parts shards one more
/// than the others (extents smaller than `parts` leave the last shards empty).
struct ShardSplit {
  int64_t extent = 1, parts = 1;

  int64_t base() const { return extent / parts; }
  /// The shards that hold base() + 1 elements.
  int64_t extra() const { return extent % parts; }
  bool even() const { return extra() == 0; }
  int64_t largest() const { return base() + (even() ? 0 : 1); }
  int64_t extentOf(int64_t shard) const { return base() + (shard < extra() ? 1 : 0); }
  int64_t startOf(int64_t shard) const { return shard * base() + std::min(shard, extra()); }
};

} // namespace mlir::mk

#include "mk/IR/MkTypeInterfaces.h.inc"

#define GET_TYPEDEF_CLASSES
#include "mk/IR/MkTypes.h.inc"

#endif // MK_IR_MKTYPES_H
