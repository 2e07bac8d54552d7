//===- EmitCBuilder.h - EmitC expressions and device-library calls -*- C++ -*-===//
//
// What every part of the lowering builds EmitC with: index arithmetic on size_t, folded where it
// is constant (Arith, and EmitCIndexOps for TileWalk.h's definitions), and calls of the device
// library whose arguments mix operands and C++ literals:
//
//   Arith a(rewriter, loc);
//   Value offset = a.add(a.mul(row, ld), col);                  // folds constants
//   call(rewriter, loc, {}, "mk::signal_local", {kernelArgs(op), offset});
//
//===----------------------------------------------------------------------===//

#ifndef MK_CONVERSION_MKTOEMITC_EMITCBUILDER_H
#define MK_CONVERSION_MKTOEMITC_EMITCBUILDER_H

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/IR/Builders.h"

#include <optional>
#include <string>
#include <variant>

namespace mlir::mk::to_emitc {

/// Index arithmetic on size_t, in EmitC, folded where it is constant. Used inside conversion
/// patterns, whose operands are already converted.
class Arith {
public:
  Arith(OpBuilder &b, Location loc)
      : b(b), loc(loc), sizeT(emitc::SizeTType::get(b.getContext())) {}

  Value constant(int64_t value) {
    return emitc::ConstantOp::create(b, loc, sizeT, b.getIndexAttr(value));
  }
  Value add(Value x, Value y) {
    return fold(x, y, std::plus<int64_t>(), 0, 0,
                [&] { return emitc::AddOp::create(b, loc, sizeT, x, y).getResult(); });
  }
  Value sub(Value x, Value y) {
    return fold(x, y, std::minus<int64_t>(), std::nullopt, 0,
                [&] { return emitc::SubOp::create(b, loc, sizeT, x, y).getResult(); });
  }
  Value mul(Value x, Value y) {
    return fold(x, y, std::multiplies<int64_t>(), 1, 1,
                [&] { return emitc::MulOp::create(b, loc, sizeT, x, y).getResult(); });
  }
  Value div(Value x, Value y) {
    return fold(x, y, std::divides<int64_t>(), std::nullopt, 1,
                [&] { return emitc::DivOp::create(b, loc, sizeT, x, y).getResult(); });
  }
  Value rem(Value x, Value y) {
    return fold(x, y, std::modulus<int64_t>(), std::nullopt, std::nullopt,
                [&] { return emitc::RemOp::create(b, loc, sizeT, x, y).getResult(); });
  }
  Value min(Value x, Value y) {
    auto smaller = [](int64_t p, int64_t q) { return std::min(p, q); };
    return fold(x, y, smaller, std::nullopt, std::nullopt, [&] {
      Value less = emitc::CmpOp::create(b, loc, b.getI1Type(), emitc::CmpPredicate::lt, x, y);
      return emitc::ConditionalOp::create(b, loc, sizeT, less, x, y).getResult();
    });
  }
  Value add(Value x, int64_t y) { return add(x, constant(y)); }
  Value mul(Value x, int64_t y) { return mul(x, constant(y)); }
  Value div(Value x, int64_t y) { return div(x, constant(y)); }
  Value rem(Value x, int64_t y) { return rem(x, constant(y)); }

private:
  static std::optional<int64_t> valueOf(Value v) {
    if (auto c = v.getDefiningOp<emitc::ConstantOp>())
      if (auto value = dyn_cast<IntegerAttr>(c.getValue()))
        return value.getInt();
    return std::nullopt;
  }

  /// Folds two constants, and a neutral element on the right (or on the left, for add and mul).
  template <typename F, typename G>
  Value fold(Value x, Value y, F f, std::optional<int64_t> leftNeutral,
             std::optional<int64_t> rightNeutral, G build) {
    std::optional<int64_t> cx = valueOf(x), cy = valueOf(y);
    if (cx && cy)
      return constant(f(*cx, *cy));
    if (cy && rightNeutral && *cy == *rightNeutral)
      return x;
    if (cx && leftNeutral && *cx == *leftNeutral)
      return y;
    return build();
  }

  OpBuilder &b;
  Location loc;
  Type sizeT;
};

/// Arith as the index arithmetic of TileWalk.h's and TileNumbering.h's definitions.
struct EmitCIndexOps {
  using Index = Value;
  Arith &a;
  Index c(int64_t v) { return a.constant(v); }
  Index add(Index x, Index y) { return a.add(x, y); }
  Index sub(Index x, Index y) { return a.sub(x, y); }
  Index mul(Index x, Index y) { return a.mul(x, y); }
  Index div(Index x, Index y) { return a.div(x, y); }
  Index rem(Index x, Index y) { return a.rem(x, y); }
  Index min(Index x, Index y) { return a.min(x, y); }
};

/// An argument of a device-library call: an operand, or a C++ literal.
using CallArg = std::variant<Value, std::string>;

/// Calls function `callee` of the device library, with `templateArgs` if any.
emitc::CallOpaqueOp call(OpBuilder &b, Location loc, TypeRange results, StringRef callee,
                         ArrayRef<CallArg> args, ArrayRef<std::string> templateArgs = {});

/// The kernel's mk_kernel_args, from inside it.
Value kernelArgs(Operation *op);

/// The first CTA and the CTAs of role `role` (the manifest's order) in the launch of `args`: its
/// split, which the caller may change between launches (mk_role_range), as size_t.
Value roleFirst(OpBuilder &b, Location loc, Value args, int64_t role);
Value roleCtas(OpBuilder &b, Location loc, Value args, int64_t role);

/// Where the kernel of `args` counts the bytes of routed rows and results it stores on other
/// GPUs of the node (mk_op_counters).
Value nvlinkBytes(OpBuilder &b, Location loc, Value args);

/// A size_t as an index, and an index as a size_t, for the structure lowered before the
/// conversion.
Value toIndex(OpBuilder &b, Location loc, Value v);
Value toSizeT(OpBuilder &b, Location loc, Value v);

} // namespace mlir::mk::to_emitc

#endif // MK_CONVERSION_MKTOEMITC_EMITCBUILDER_H
