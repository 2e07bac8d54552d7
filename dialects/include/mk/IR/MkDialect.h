//===- MkDialect.h - the mk dialect -------------------------------*- C++ -*-===//

#ifndef MK_IR_MKDIALECT_H
#define MK_IR_MKDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Dialect.h"

// The dialect's discardable attributes are of its own attribute types.
#include "mk/IR/MkAttrs.h"

#include "mk/IR/MkDialect.h.inc"

#endif // MK_IR_MKDIALECT_H
