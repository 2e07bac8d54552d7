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

#include <optional>
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
  /// In the in-place all-reduce, copy engines move the tiles between the GPUs.
  bool allReduceCopyEngine = false;
  /// Depth of the GEMM engine's ring (0: the deepest that fits the tile).
  int64_t gemmStages = 0;
  /// CTAs per cluster of the GEMM engine (0: 2 where they pair up, else 1).
  int64_t gemmCluster = 0;
};

/// What is wrong with the values of `options` that the passes would reject later, less clearly,
/// as "NAME=VALUE: why" with mkc's flag names; nothing if they are fine.
std::optional<std::string> checkPipelineOptions(const PipelineOptions &options);

/// Sets the options `text` names: `;`-separated NAME=VALUE, the names and values of mkc's flags
/// (sm-split=ROLE=CTAS,..., gemm-tile-n, gemm-stages, gemm-cluster, in-place-all-reduce=0|1,
/// all-reduce-copy-engine=0|1),
/// which is how the runtime's callers override the compiler's choices. Returns what is wrong,
/// naming the option, if anything (checkPipelineOptions included).
std::optional<std::string> parsePipelineOptions(StringRef text, PipelineOptions &options);

/// Adds the first passes of the schedule pipeline, mk-specialize and mk-tile-and-order: the
/// program at bound shapes with its tiles chosen, before any collective is expanded. mk-sim
/// evaluates it as the meaning the scheduled program must have.
void buildTilePipeline(OpPassManager &pm, const PipelineOptions &options);

/// Adds the passes from program level to the scheduled level (mk.program with roles, transfers,
/// flags) to `pm`, which runs on a module.
void buildSchedulePipeline(OpPassManager &pm, const PipelineOptions &options);

/// Adds the lowering of scheduled programs to EmitC (with the GEMM engine's stages and cluster of
/// `options`).
void buildEmitCPipeline(OpPassManager &pm, const PipelineOptions &options);

/// Prints a module lowered to EmitC as CUDA C++.
LogicalResult printCuda(ModuleOp module, raw_ostream &os);

/// Registers the dialects the pipeline creates and reads.
void registerPipelineDialects(DialectRegistry &registry);

} // namespace mlir::mk

#endif // MK_PIPELINE_H
