//===- Passes.h - the mkc compiler passes -------------------------*- C++ -*-===//

#ifndef MK_TRANSFORMS_PASSES_H
#define MK_TRANSFORMS_PASSES_H

#include "mk/IR/MkOps.h"
#include "mk/Transforms/PassOptions.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Pass/Pass.h"

namespace mlir::mk {

#define GEN_PASS_DECL
#include "mk/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mk/Transforms/Passes.h.inc"

} // namespace mlir::mk

#endif // MK_TRANSFORMS_PASSES_H
