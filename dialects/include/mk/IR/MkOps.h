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

#endif // MK_IR_MKOPS_H
