//===- mk-opt.cpp - the mk optimizer driver -------------------------------===//
//
// Parses, verifies, transforms and prints mk programs: the lit tests' driver, and a tool to inspect
// what each compiler pass does.
//
//===----------------------------------------------------------------------===//

#include "mk/IR/MkDialect.h"
#include "mk/Transforms/Passes.h"

#include "ToolFiles.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::mk::registerMkPasses();

  mlir::DialectRegistry registry;
  registry.insert<mlir::mk::MkDialect, mlir::arith::ArithDialect, mlir::scf::SCFDialect,
                  mlir::func::FuncDialect, mlir::emitc::EmitCDialect>();
  auto [inputFile, outputFile] =
      mlir::registerAndParseCLIOptions(argc, argv, "mk tile-program optimizer driver\n", registry);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();

  // What MlirOptMain(argc, argv, ...) does, but reading the input within bounds (it would read
  // /dev/zero until memory ran out) and reporting a failed write naming the file. Listing
  // dialects or passes reads no input.
  std::unique_ptr<llvm::MemoryBuffer> input =
      config.shouldShowDialects() || config.shouldListPasses()
          ? llvm::MemoryBuffer::getMemBuffer("")
          : mkc::tools::readInput("mk-opt", inputFile);
  if (!input)
    return 1;
  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> output = mlir::openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << error << "\n";
    return 1;
  }
  bool processed = succeeded(mlir::MlirOptMain(output->os(), std::move(input), registry, config));
  return failed(mkc::tools::closeOutput("mk-opt", outputFile, *output, processed)) ? 1 : 0;
}
