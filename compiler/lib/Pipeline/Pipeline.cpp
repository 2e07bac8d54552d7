//===- Pipeline.cpp - from a tile program to CUDA C++ ---------------------===//

#include "mk/Pipeline.h"

#include "mk/IR/MkOps.h"
#include "mk/Transforms/Passes.h"

#include "mlir/Dialect/EmitC/Transforms/Passes.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "mlir/Transforms/Passes.h"

namespace mlir::mk {

void buildSchedulePipeline(OpPassManager &pm, const PipelineOptions &options) {
  OpPassManager &programs = pm.nest<ProgramOp>();
  MkSpecializeOptions specialize;
  specialize.topology = options.topology;
  specialize.rank = options.rank;
  specialize.shapes.assign(options.shapes.begin(), options.shapes.end());
  programs.addPass(createMkSpecialize(specialize));
  MkTileAndOrderOptions tiling;
  tiling.smCount = options.smCount;
  tiling.gemmTileN = options.gemmTileN;
  programs.addPass(createMkTileAndOrder(tiling));
  MkExpandCollectivesOptions expand;
  expand.inPlaceAllReduce = options.inPlaceAllReduce &&
                            !llvm::StringRef(options.smSplit).contains("intra_reduce");
  programs.addPass(createMkExpandCollectives(expand));
  MkPartitionRolesOptions partition;
  partition.smCount = options.smCount;
  partition.smSplit = options.smSplit;
  partition.explain = options.explainSplit;
  programs.addPass(createMkPartitionRoles(partition));
  programs.addPass(createMkInsertSignals());
  // The expansion leaves duplicate place queries and dead constants behind.
  programs.addPass(createCSEPass());
  programs.addPass(createCanonicalizerPass());
}

void buildEmitCPipeline(OpPassManager &pm, int64_t gemmStages, int64_t gemmCluster) {
  MkLowerToEmitCOptions lowering;
  lowering.gemmStages = gemmStages;
  lowering.gemmCluster = gemmCluster;
  pm.addPass(createMkLowerToEmitC(lowering));
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
