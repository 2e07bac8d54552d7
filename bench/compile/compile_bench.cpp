//===- compile_bench.cpp - how long mkc takes to compile the library ------===//
//
// For each library program: the time from .mlir to CUDA C++ (parse, passes, emission) in a fresh
// MLIRContext, cold and as the median of later runs, and the time NVRTC takes to compile that
// C++ to an sm_90a cubin (cold: NVRTC keeps nothing between compiles). Targets: under 100 ms for
// the passes and emission, under 5 s for NVRTC.
//
//   build/bin/mkc-compile-bench [--topology 2x4] [--runs 10]
//
//===----------------------------------------------------------------------===//

#include "mk/Pipeline.h"
#include "mk/Target/DeviceHeaders.h"
#include "mk/Target/Nvrtc.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace cl = llvm::cl;

namespace {

cl::opt<std::string> topology("topology", cl::desc("NODESxGPUS"), cl::init("2x4"));
cl::opt<int> runs("runs", cl::desc("Runs of the passes after the cold one"), cl::init(10));
cl::opt<std::string> libDir("lib", cl::desc("The library's folder"), cl::init(MKC_LIB_DIR));

struct Program {
  const char *name;
  std::vector<std::string> shapes;
  bool cuda; // has a CUDA lowering
};

using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/// Parses and compiles one program to C++ (or to the scheduled IR where it has no CUDA lowering),
/// in a fresh context; returns the milliseconds taken, and the C++ in `source`.
double compileOnce(const Program &program, std::string &source) {
  auto start = Clock::now();
  mlir::DialectRegistry registry;
  mlir::mk::registerPipelineDialects(registry);
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(libDir + "/" + program.name + ".mlir", &context);
  if (!module)
    return -1;
  mlir::PassManager pm(&context);
  mlir::mk::PipelineOptions options;
  options.topology = topology;
  options.shapes = program.shapes;
  mlir::mk::buildSchedulePipeline(pm, options);
  if (program.cuda)
    mlir::mk::buildEmitCPipeline(pm, options);
  if (mlir::failed(pm.run(*module)))
    return -1;
  source.clear();
  llvm::raw_string_ostream os(source);
  if (program.cuda && mlir::failed(mlir::mk::printCuda(*module, os)))
    return -1;
  return since(start);
}

} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "mkc compile-time benchmark\n");
  const std::vector<std::string> gemm = {"M=8192", "N=8192", "K=8192"};
  const Program programs[] = {
      {"gemm_allreduce", gemm, true},
      {"gemm_reducescatter", gemm, true},
      {"allgather_gemm", gemm, true},
      {"ring_attention", {"B=4", "H=16", "S=65536", "D=128"}, false},
      {"ring_attention_causal", {"B=4", "H=16", "S=65536", "D=128"}, false},
      {"moe_dispatch_gemm_combine",
       {"T=65536", "Hd=7168", "I=2048", "E=256", "TopK=8", "C=4096"},
       false},
  };
  llvm::outs() << llvm::formatv("mkc compile times on topology {0}, NVRTC {1} (targets: passes "
                                "and emission < 100 ms, NVRTC < 5000 ms)\n",
                                topology, mkc::nvrtc::version());
  llvm::outs() << llvm::formatv("{0,-28} {1,12} {2,14} {3,12} {4,10}\n", "program", "cold (ms)",
                                "median (ms)", "NVRTC (ms)", "cubin (KB)");
  int failures = 0;
  for (const Program &program : programs) {
    std::string source;
    double cold = compileOnce(program, source);
    std::vector<double> warm;
    for (int i = 0; i < runs && cold >= 0; ++i)
      warm.push_back(compileOnce(program, source));
    if (cold < 0 || llvm::any_of(warm, [](double ms) { return ms < 0; })) {
      llvm::errs() << program.name << ": did not compile\n";
      ++failures;
      continue;
    }
    std::sort(warm.begin(), warm.end());
    double median = warm.empty() ? cold : warm[warm.size() / 2];
    std::string nvrtcMs = "-", cubinKb = "-";
    if (program.cuda) {
      mkc::nvrtc::Result compiled =
          mkc::nvrtc::compile(source, std::string(program.name) + ".cu", {}, mkc::deviceHeaders());
      if (!compiled.ok) {
        llvm::errs() << program.name << ": NVRTC failed\n" << compiled.log;
        ++failures;
        continue;
      }
      nvrtcMs = llvm::formatv("{0:F0}", compiled.seconds * 1e3).str();
      cubinKb = llvm::formatv("{0:F0}", compiled.cubin.size() / 1024.0).str();
    }
    llvm::outs() << llvm::formatv("{0,-28} {1,12:F1} {2,14:F1} {3,12} {4,10}\n", program.name, cold,
                                  median, nvrtcMs, cubinKb);
  }
  return failures ? 1 : 0;
}
