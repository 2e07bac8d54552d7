//===- Pipeline.h - from a tile program to CUDA C++ ---------------*- C++ -*-===//
//
// The pass pipeline mkc runs, shared with the runtime's JIT: specialize, tile and order, expand
// collectives, partition SM roles, insert signals; then lowering to EmitC and printing C++.
//
//===----------------------------------------------------------------------===//

#ifndef MK_PIPELINE_H
#define MK_PIPELINE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

#include <string>
#include <vector>

namespace mlir::mk {

struct PipelineOptions {
  /// NODESxGPUS; empty keeps the program's own mesh.
  std::string topology;
  /// The rank compiled for, or -1 for any.
  int64_t rank = -1;
  /// NAME=VALUE shape bindings.
  std::vector<std::string> shapes;
  /// ROLE=CTAS,... overriding the cost model; empty lets it choose.
  std::string smSplit;
  /// CTAs of the persistent grid.
  int64_t smCount = 132;
  /// Columns of the GEMM engine's matmul tiles (0: chosen per shape, see mk-tile-and-order).
  int64_t gemmTileN = 0;
  /// Report the SM split as a remark.
  bool explainSplit = false;
  /// All-reduce in place where mk-expand-collectives can; an SM split that gives CTAs to an
  /// `intra_reduce` role asks for that role instead.
  bool inPlaceAllReduce = true;
};

/// Adds the passes from program level to the scheduled level (mk.program with roles, transfers,
/// flags) to `pm`, which runs on a module.
void buildSchedulePipeline(OpPassManager &pm, const PipelineOptions &options);

/// Adds the lowering of scheduled programs to EmitC; `gemmStages` overrides the GEMM engine's
/// pipeline depth (0: the deepest that fits), `gemmCluster` its CTAs per cluster (0: 2 where
/// they pair up, else 1).
void buildEmitCPipeline(OpPassManager &pm, int64_t gemmStages = 0, int64_t gemmCluster = 0);

/// Prints a module lowered to EmitC as CUDA C++.
LogicalResult printCuda(ModuleOp module, raw_ostream &os);

/// Registers the dialects the pipeline creates and reads.
void registerPipelineDialects(DialectRegistry &registry);

} // namespace mlir::mk

#endif // MK_PIPELINE_H
