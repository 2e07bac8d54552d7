//===- mkc.cpp - the mkc compiler -----------------------------------------===//
//
// Compiles a tile program to a persistent CUDA kernel: the scheduled IR (--emit=mlir), its CUDA
// C++ (--emit=cuda), or, through NVRTC (in a child process), PTX or a cubin. Needs no GPU.
//
//===----------------------------------------------------------------------===//

#include "mk/Pipeline.h"
#include "mk/Target/DeviceHeaders.h"
#include "mk/Target/Nvrtc.h"

#include "PipelineFlags.h"
#include "ToolFiles.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

using namespace mlir;
namespace cl = llvm::cl;

namespace {

enum class Emit { mlir, cuda, ptx, cubin };

cl::OptionCategory category("mkc options");
cl::opt<std::string> inputFile(cl::Positional, cl::desc("<tile program .mlir>"), cl::Required,
                               cl::cat(category));
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: standard output)"),
                                cl::value_desc("file"), cl::init("-"), cl::cat(category));
cl::opt<std::string> arch("arch",
                          cl::desc("GPU architecture for NVRTC: sm_90a, or compute_90a for PTX"),
                          cl::init("sm_90a"), cl::cat(category));
cl::opt<Emit> emit("emit", cl::desc("What to produce"), cl::init(Emit::cubin),
                   cl::values(clEnumValN(Emit::mlir, "mlir", "the scheduled mk IR"),
                              clEnumValN(Emit::cuda, "cuda", "CUDA C++"),
                              clEnumValN(Emit::ptx, "ptx", "PTX, through NVRTC"),
                              clEnumValN(Emit::cubin, "cubin", "a cubin, through NVRTC")),
                   cl::cat(category));
cl::opt<bool> printIRAfterAll("print-ir-after-all", cl::desc("Print the IR after every pass"),
                              cl::cat(category));
cl::opt<bool> ptxasReport("ptxas-report",
                          cl::desc("Print registers and spills of each kernel (PTX, cubin)"),
                          cl::cat(category));
cl::list<std::string> cudaInclude("cuda-include",
                                  cl::desc("Directories with CUDA's headers (default: "
                                           "$MKC_CUDA_INCLUDE, else /usr/local/cuda/include and "
                                           "include/cccl)"),
                                  cl::value_desc("dir"), cl::cat(category));

/// Checks flags that the passes would otherwise reject later, less clearly.
LogicalResult checkFlags() {
  if (emit == Emit::cubin && outputFile == "-") {
    llvm::errs() << "mkc: error: --emit=cubin writes a binary; give an output file with -o\n";
    return failure();
  }
  // The device library uses wgmma, TMA and setmaxnreg: Hopper's arch-specific target only.
  if (arch != "sm_90a" && arch != "compute_90a") {
    llvm::errs() << "mkc: error: --arch=" << arch
                 << ": mkc targets sm_90a (the kernels use wgmma and TMA), or compute_90a for "
                    "PTX alone\n";
    return failure();
  }
  if (emit == Emit::cubin && arch == "compute_90a") {
    llvm::errs() << "mkc: error: --arch=compute_90a gives PTX alone, no cubin; use --arch=sm_90a "
                    "or --emit=ptx\n";
    return failure();
  }
  for (const std::string &dir : cudaInclude)
    if (!llvm::sys::fs::is_directory(dir)) {
      llvm::errs() << "mkc: error: --cuda-include=" << dir << ": no such directory\n";
      return failure();
    }
  const auto hasBf16 = [](StringRef dir) {
    SmallString<256> header(dir);
    llvm::sys::path::append(header, "cuda_bf16.h");
    return llvm::sys::fs::exists(header);
  };
  if (!cudaInclude.empty() && llvm::none_of(cudaInclude, hasBf16)) {
    llvm::errs() << "mkc: error: --cuda-include=" << llvm::join(cudaInclude, ",")
                 << ": has no cuda_bf16.h, which the device library includes\n";
    return failure();
  }
  return success();
}

int run() {
  std::optional<mlir::mk::PipelineOptions> options = mkc::tools::pipelineOptions("mkc");
  if (!options || failed(checkFlags()))
    return 1;

  DialectRegistry registry;
  mlir::mk::registerPipelineDialects(registry);
  // No thread pool: NVRTC runs in a forked child, which must inherit no lock another thread held.
  MLIRContext context(registry, MLIRContext::Threading::DISABLED);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false);

  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
  std::unique_ptr<llvm::MemoryBuffer> input = mkc::tools::readInput("mkc", inputFile);
  if (!input)
    return 1;
  sourceMgr.AddNewSourceBuffer(std::move(input), SMLoc());
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!module)
    return 1;

  PassManager pm(&context);
  if (printIRAfterAll)
    pm.enableIRPrinting();
  mlir::mk::buildSchedulePipeline(pm, *options);
  if (emit != Emit::mlir)
    mlir::mk::buildEmitCPipeline(pm, *options);
  if (failed(pm.run(*module)))
    return 1;

  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> output = openOutputFile(outputFile, &error);
  if (!output) {
    llvm::errs() << "mkc: error: " << error << "\n";
    return 1;
  }
  const auto close = [&] {
    return failed(mkc::tools::closeOutput("mkc", outputFile, *output)) ? 1 : 0;
  };
  if (emit == Emit::mlir) {
    module->print(output->os());
    return close();
  }
  std::string source;
  llvm::raw_string_ostream sourceStream(source);
  if (failed(mlir::mk::printCuda(*module, sourceStream)))
    return 1;
  if (emit == Emit::cuda) {
    output->os() << source;
    return close();
  }

  mkc::nvrtc::Options nvrtcOptions;
  nvrtcOptions.arch = arch;
  if (!cudaInclude.empty())
    nvrtcOptions.includeDirs.assign(cudaInclude.begin(), cudaInclude.end());
  std::string name = (llvm::sys::path::stem(inputFile) + ".cu").str();
  mkc::nvrtc::Result compiled =
      mkc::nvrtc::compile(source, name, nvrtcOptions, mkc::deviceHeaders());
  if (!compiled.ok) {
    llvm::errs() << "mkc: error: NVRTC could not compile the CUDA C++ generated from " << inputFile
                 << " (rerun with --emit=cuda to see all of it):\n"
                 << compiled.log;
    return 1;
  }
  if (ptxasReport)
    for (const mkc::nvrtc::KernelResources &kernel : compiled.kernels)
      llvm::errs() << "mkc: " << kernel.name << ": " << kernel.registers << " registers, "
                   << kernel.stackFrameBytes << " bytes stack frame, " << kernel.spillStoreBytes
                   << " bytes spill stores, " << kernel.spillLoadBytes << " bytes spill loads\n";
  output->os() << (emit == Emit::ptx ? compiled.ptx : compiled.cubin);
  return close();
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions({&category, &mkc::tools::pipelineCategory});
  cl::ParseCommandLineOptions(
      argc, argv, "mkc: compile a tile program to a persistent multi-GPU CUDA kernel\n");
  return run();
}
