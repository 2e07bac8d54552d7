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
  MkTileAndOrderOptions tiling;
  tiling.smCount = options.smCount;
  tiling.gemmTileN = options.gemmTileN;
  programs.addPass(createMkTileAndOrder(tiling));
}

void buildTilePipeline(OpPassManager &pm, const PipelineOptions &options) {
  addTiling(pm.nest<ProgramOp>(), options);
}

void buildSchedulePipeline(OpPassManager &pm, const PipelineOptions &options) {
  OpPassManager &programs = pm.nest<ProgramOp>();
  addTiling(programs, options);
  MkExpandCollectivesOptions expand;
  expand.inPlaceAllReduce =
      options.inPlaceAllReduce && !llvm::StringRef(options.smSplit).contains("intra_reduce");
  expand.copyEngineAllReduce = options.allReduceCopyEngine;
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

std::optional<std::string> checkPipelineOptions(const PipelineOptions &options) {
  if (std::optional<std::string> error = checkSmCount(options.smCount))
    return error;
  return checkGemmOptions(options.gemmStages, options.gemmCluster);
}

std::optional<std::string> parsePipelineOptions(StringRef text, PipelineOptions &options) {
  SmallVector<StringRef> items;
  text.split(items, ';', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (StringRef item : items) {
    auto [name, value] = item.trim().split('=');
    const auto malformed = [&](StringRef want) {
      return (name + "=" + value + ": not " + want).str();
    };
    if (name == "sm-split") {
      options.smSplit = value.str();
    } else if (name == "gemm-tile-n" || name == "gemm-stages" || name == "gemm-cluster") {
      int64_t &field = name == "gemm-tile-n"   ? options.gemmTileN
                       : name == "gemm-stages" ? options.gemmStages
                                               : options.gemmCluster;
      if (value.getAsInteger(10, field))
        return malformed("an integer");
    } else if (name == "in-place-all-reduce" || name == "all-reduce-copy-engine") {
      if (value != "0" && value != "1")
        return malformed("0 or 1");
      (name == "in-place-all-reduce" ? options.inPlaceAllReduce : options.allReduceCopyEngine) =
          value == "1";
    } else {
      return ("unknown compiler option '" + name +
              "' (known: sm-split, gemm-tile-n, gemm-stages, gemm-cluster, in-place-all-reduce, "
              "all-reduce-copy-engine)")
          .str();
    }
  }
  return checkPipelineOptions(options);
}

void buildEmitCPipeline(OpPassManager &pm, const PipelineOptions &options) {
  MkLowerToEmitCOptions lowering;
  lowering.gemmStages = options.gemmStages;
  lowering.gemmCluster = options.gemmCluster;
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
