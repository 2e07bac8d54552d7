//===- EmitCBuilder.cpp - calls of the device library ---------------------===//

#include "mk/Conversion/MkToEmitC/EmitCBuilder.h"

#include "mlir/IR/BuiltinOps.h"

namespace mlir::mk::to_emitc {

emitc::CallOpaqueOp call(OpBuilder &b, Location loc, TypeRange results, StringRef callee,
                         ArrayRef<CallArg> args, ArrayRef<std::string> templateArgs) {
  SmallVector<Value> operands;
  SmallVector<Attribute> argAttrs;
  for (const CallArg &arg : args) {
    if (auto *value = std::get_if<Value>(&arg)) {
      argAttrs.push_back(b.getIndexAttr(operands.size()));
      operands.push_back(*value);
    } else {
      argAttrs.push_back(emitc::OpaqueAttr::get(b.getContext(), std::get<std::string>(arg)));
    }
  }
  SmallVector<Attribute> templateAttrs;
  for (const std::string &arg : templateArgs)
    templateAttrs.push_back(emitc::OpaqueAttr::get(b.getContext(), arg));
  return emitc::CallOpaqueOp::create(b, loc, results, callee, operands, b.getArrayAttr(argAttrs),
                                     templateAttrs.empty() ? ArrayAttr()
                                                           : b.getArrayAttr(templateAttrs));
}

Value kernelArgs(Operation *op) { return op->getParentOfType<emitc::FuncOp>().getArgument(0); }

Value roleFirst(OpBuilder &b, Location loc, Value args, int64_t role) {
  return call(b, loc, emitc::SizeTType::get(b.getContext()), "mk::role_first",
              {args, std::to_string(role)})
      .getResult(0);
}

Value roleCtas(OpBuilder &b, Location loc, Value args, int64_t role) {
  return call(b, loc, emitc::SizeTType::get(b.getContext()), "mk::role_ctas",
              {args, std::to_string(role)})
      .getResult(0);
}

Value nvlinkBytes(OpBuilder &b, Location loc, Value args) {
  auto type = emitc::PointerType::get(emitc::OpaqueType::get(b.getContext(), "mk_u64"));
  return call(b, loc, type, "mk::nvlink_bytes", {args}).getResult(0);
}

Value toIndex(OpBuilder &b, Location loc, Value v) {
  return UnrealizedConversionCastOp::create(b, loc, b.getIndexType(), v).getResult(0);
}

Value toSizeT(OpBuilder &b, Location loc, Value v) {
  return UnrealizedConversionCastOp::create(b, loc, emitc::SizeTType::get(b.getContext()), v)
      .getResult(0);
}

} // namespace mlir::mk::to_emitc
