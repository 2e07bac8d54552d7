//===- MkDialect.cpp - the mk dialect -------------------------------------===//

#include "mk/IR/MkDialect.h"
#include "mk/IR/MkOps.h"

using namespace mlir;
using namespace mlir::mk;

#include "mk/IR/MkDialect.cpp.inc"

void MkDialect::initialize() {
  registerAttributes();
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "mk/IR/MkOps.cpp.inc"
      >();
}
