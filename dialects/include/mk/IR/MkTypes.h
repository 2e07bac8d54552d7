//===- MkTypes.h - types of the mk dialect ------------------------*- C++ -*-===//

#ifndef MK_IR_MKTYPES_H
#define MK_IR_MKTYPES_H

#include "mk/IR/MkAttrs.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Types.h"

namespace mlir::mk {

/// One dim of a tensor or tile: a static extent, or a shape symbol of the enclosing program.
struct Dim {
  int64_t extent = ShapedType::kDynamic;
  StringAttr symbol;

  bool isStatic() const { return !symbol; }
  friend bool operator==(const Dim &, const Dim &) = default;
};

/// Whether two dims are provably equal, provably different, or undecided until specialization.
enum class DimRelation { equal, different, unknown };
DimRelation compareDims(Dim a, Dim b);

/// `M` or `4096`, as written in types and diagnostics.
std::string formatDim(Dim dim);

} // namespace mlir::mk

#include "mk/IR/MkTypeInterfaces.h.inc"

#define GET_TYPEDEF_CLASSES
#include "mk/IR/MkTypes.h.inc"

#endif // MK_IR_MKTYPES_H
