//===- MkTypes.h - types of the mk dialect ------------------------*- C++ -*-===//

#ifndef MK_IR_MKTYPES_H
#define MK_IR_MKTYPES_H

#include "mk/IR/MkAttrs.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Types.h"

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

} // namespace mlir::mk

#include "mk/IR/MkTypeInterfaces.h.inc"

#define GET_TYPEDEF_CLASSES
#include "mk/IR/MkTypes.h.inc"

#endif // MK_IR_MKTYPES_H
