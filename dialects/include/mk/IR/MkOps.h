//===- MkOps.h - ops of the mk dialect ----------------------------*- C++ -*-===//

#ifndef MK_IR_MKOPS_H
#define MK_IR_MKOPS_H

#include "mk/IR/MkDialect.h"
#include "mk/IR/MkTypes.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "mk/IR/MkOps.h.inc"

namespace mlir::mk {

/// The most bytes of tensors and buffers a program may keep on one rank: 1 TiB, above the memory
/// of any GPU (an H200 has 141 GB), and far enough below int64's limit that no size, offset or
/// product the compiler derives from them overflows.
constexpr int64_t kMaxRankBytes = int64_t(1) << 40;

} // namespace mlir::mk

#endif // MK_IR_MKOPS_H
