//===- MkAttrs.h - enums and attributes of the mk dialect ---------*- C++ -*-===//

#ifndef MK_IR_MKATTRS_H
#define MK_IR_MKATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypeInterfaces.h"
#include "mlir/IR/DialectImplementation.h"

#include "mk/IR/MkEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "mk/IR/MkAttrs.h.inc"

#endif // MK_IR_MKATTRS_H
