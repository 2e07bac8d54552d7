//===- mk-opt.cpp - the mk optimizer driver -------------------------------===//
//
// Parses, verifies, transforms and prints mk programs: the lit tests' driver, and a tool to inspect
// what each compiler pass does.
//
//===----------------------------------------------------------------------===//

#include "mk/IR/MkDialect.h"
#include "mk/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::mk::registerMkPasses();

  mlir::DialectRegistry registry;
  registry.insert<mlir::mk::MkDialect, mlir::arith::ArithDialect, mlir::scf::SCFDialect,
                  mlir::func::FuncDialect, mlir::emitc::EmitCDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "mk tile-program optimizer driver\n", registry));
}
