//===- Pipeline.cpp - from a tile program to CUDA C++ ---------------------===//

#include "mk/Pipeline.h"

#include "mk/IR/MkOps.h"
#include "mk/Transforms/Passes.h"

#include "mlir/Dialect/EmitC/Transforms/Passes.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "mlir/Transforms/Passes.h"

namespace mlir::mk {

static void addTiling(OpPassManager &programs, const PipelineOptions &options) {
  MkSpecializeOptions specialize;
  specialize.topology = options.topology;
  specialize.rank = options.rank;
  specialize.shapes.assign(options.shapes.begin(), options.shapes.end());
  programs.addPass(createMkSpecialize(specialize));
  programs.addPass(createMkSplitEpilogues());
  MkTileAndOrderOptions tiling;
  tiling.smCount = options.smCount;
  tiling.gemmTileN = options.gemmTileN;
  tiling.gemmTileM = options.gemmTileM;
  tiling.gemmKSplits = options.gemmKSplits;
  programs.addPass(createMkTileAndOrder(tiling));
}

void buildTilePipeline(OpPassManager &pm, const PipelineOptions &options) {
  addTiling(pm.nest<ProgramOp>(), options);
}

void buildSchedulePipeline(OpPassManager &pm, const PipelineOptions &options) {
  OpPassManager &programs = pm.nest<ProgramOp>();
  addTiling(programs, options);
  MkExpandCollectivesOptions expand;
  expand.inPlaceAllReduce = options.inPlaceAllReduce && !options.smSplit.ctasOf("intra_reduce");
  expand.copyEngineAllReduce = options.allReduceCopyEngine;
  expand.oneShotAllReduce = options.oneShotAllReduce;
  programs.addPass(createMkExpandCollectives(expand));
  MkPartitionRolesOptions partition;
  partition.smCount = options.smCount;
  partition.gpuSmCount = options.gpuSmCount;
  partition.smSplit = options.smSplit.str();
  partition.explain = options.explainSplit;
  programs.addPass(createMkPartitionRoles(partition));
  programs.addPass(createMkInsertSignals());
  // The expansion leaves duplicate place queries and dead constants behind.
  programs.addPass(createCSEPass());
  programs.addPass(createCanonicalizerPass());
  if (options.recycleCtas)
    programs.addPass(createMkPoolRoles());
}

void buildEmitCPipeline(OpPassManager &pm, const PipelineOptions &options) {
  MkPlanLoweringOptions plan;
  plan.gemmStages = options.gemmStages;
  plan.gemmCluster = options.gemmCluster;
  pm.nest<ProgramOp>().addPass(createMkPlanLowering(plan));
  pm.addPass(createMkLowerToEmitC());
  // Folds single-use arithmetic into the expressions that use it: fewer temporaries in the C++.
  pm.addPass(emitc::createFormExpressionsPass());
}

LogicalResult printCuda(ModuleOp module, raw_ostream &os) {
  return emitc::translateToCpp(module, os);
}

void registerPipelineDialects(DialectRegistry &registry) {
  registry.insert<MkDialect, arith::ArithDialect, scf::SCFDialect, emitc::EmitCDialect>();
}

} // namespace mlir::mk
