//===- mk-sim.cpp - run a scheduled tile program on the CPU ---------------===//
//
// Compiles a tile program to the scheduled level as mkc does (same flags), or takes a scheduled
// program given with --scheduled, and simulates it for every rank of its topology over several
// launches and random interleavings (mk/Simulate/Simulator.h), comparing with the program's
// meaning. Exit status: 0 when every interleaving is clean, 1 on a finding or an error, 2 when
// the passes refuse the program (which is not a finding: mkc refuses it too).
//
//   mk-sim lib/gemm_allreduce.mlir --topology 1x2 --shape M=300,N=512,K=256 --seeds 16
//
//===----------------------------------------------------------------------===//

#include "PipelineFlags.h"
#include "ToolFiles.h"
#include "mk/Pipeline.h"
#include "mk/Simulate/Simulator.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"

#include <malloc.h>

using namespace mlir;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("mk-sim options");
cl::opt<std::string> inputFile(cl::Positional, cl::desc("<tile program .mlir>"), cl::Required,
                               cl::cat(category));
cl::opt<std::string> scheduledFile("scheduled",
                                   cl::desc("Simulate this scheduled program (mkc --emit=mlir) "
                                            "instead of compiling the input"),
                                   cl::value_desc("file"), cl::cat(category));
cl::opt<int64_t> launches("launches", cl::desc("Launches back to back"), cl::init(3),
                          cl::cat(category));
cl::opt<int64_t> seeds("seeds", cl::desc("Interleavings to try"), cl::init(8), cl::cat(category));
cl::opt<uint64_t> firstSeed("seed", cl::desc("The first interleaving's seed"), cl::init(0),
                            cl::cat(category));
cl::opt<uint64_t> dataSeed("data-seed", cl::desc("The seed of the inputs' values"), cl::init(1),
                           cl::cat(category));
cl::opt<bool> varySplit("vary-split",
                        cl::desc("Launches split the grid into the roles in other ways, as the "
                                 "SM controller does: the compiled split, every role but the "
                                 "first at one CTA, the first at one CTA, in turn"),
                        cl::cat(category));
cl::opt<uint64_t> maxSteps("max-steps",
                           cl::desc("Steps of one interleaving before it is "
                                    "reported as not ending"),
                           cl::init(50'000'000), cl::cat(category));

int run() {
  std::optional<mlir::mk::PipelineOptions> options = mkc::tools::pipelineOptions("mk-sim");
  if (!options)
    return 1;
  if (launches < 1 || seeds < 1) {
    llvm::errs() << "mk-sim: error: --launches and --seeds must be at least 1\n";
    return 1;
  }
  DialectRegistry registry;
  mlir::mk::registerPipelineDialects(registry);
  MLIRContext context(registry);
  context.loadAllAvailableDialects();
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);

  auto parse = [&](StringRef file) -> OwningOpRef<ModuleOp> {
    std::unique_ptr<llvm::MemoryBuffer> input = mkc::tools::readInput("mk-sim", file);
    if (!input)
      return nullptr;
    // Kept in the source manager for the diagnostics' excerpts, parsed by name.
    StringRef text = input->getBuffer();
    sourceMgr.AddNewSourceBuffer(std::move(input), SMLoc());
    return parseSourceString<ModuleOp>(text, &context, file);
  };
  OwningOpRef<ModuleOp> reference = parse(inputFile);
  if (!reference)
    return 1;

  // The scheduled program: given, or compiled here from a copy of the input.
  OwningOpRef<ModuleOp> scheduled;
  if (!scheduledFile.empty()) {
    scheduled = parse(scheduledFile);
    if (!scheduled)
      return 1;
  } else {
    scheduled = reference->clone();
    PassManager pm(&context);
    mlir::mk::buildSchedulePipeline(pm, *options);
    if (failed(pm.run(*scheduled))) {
      llvm::errs() << "mk-sim: the passes refuse " << inputFile << "; nothing to simulate\n";
      return 2;
    }
  }
  // The meaning: the input specialized and tiled alike, its collectives not expanded.
  PassManager tiling(&context);
  mlir::mk::buildTilePipeline(tiling, *options);
  if (failed(tiling.run(*reference)))
    return 1;

  mlir::mk::sim::SimulationOptions simulation;
  simulation.launches = launches;
  simulation.seeds = seeds;
  simulation.firstSeed = firstSeed;
  simulation.dataSeed = dataSeed;
  simulation.maxSteps = maxSteps;
  simulation.varySplit = varySplit;
  bool found = false, refused = false;
  for (auto program : scheduled->getOps<mlir::mk::ProgramOp>()) {
    auto meaning = reference->lookupSymbol<mlir::mk::ProgramOp>(program.getSymNameAttr());
    if (!meaning) {
      program.emitError() << "mk-sim: @" << program.getSymName() << " is not in " << inputFile;
      return 1;
    }
    FailureOr<mlir::mk::sim::SimulationReport> report =
        mlir::mk::sim::simulate(meaning, program, simulation);
    if (failed(report))
      return 1;
    if (report->refused) {
      llvm::errs() << "mk-sim: the lowering refuses @" << program.getSymName()
                   << "; nothing to simulate\n";
      refused = true;
      continue;
    }
    for (const mlir::mk::sim::Finding &finding : report->findings)
      emitError(finding.loc) << mlir::mk::sim::stringify(finding.kind) << ": " << finding.message
                             << " (seed " << finding.seed << ")";
    if (!report->findings.empty()) {
      found = true;
      continue;
    }
    llvm::outs() << "mk-sim: @" << program.getSymName() << " on " << program.getMesh() << ": "
                 << simulation.launches << " launches x " << report->interleavings
                 << " interleavings (seeds " << simulation.firstSeed << "-"
                 << simulation.firstSeed + report->interleavings - 1 << "), " << report->steps
                 << " steps: no findings\n";
  }
  return found ? 1 : refused ? 2 : 0;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  // Each interleaving allocates the tensors and their shadows anew: keep the freed memory in the
  // heap rather than handing it back and faulting it in again.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  cl::HideUnrelatedOptions({&category, &mkc::tools::pipelineCategory});
  cl::ParseCommandLineOptions(argc, argv,
                              "mk-sim: run a scheduled tile program on the CPU and check it\n");
  return run();
}
