//===- Pipeline.h - from a tile program to CUDA C++ ---------------*- C++ -*-===//
//
// The pass pipeline mkc runs, shared with the runtime's JIT: specialize, tile and order, expand
// collectives, partition SM roles, insert signals; then lowering to EmitC and printing C++.
//
//===----------------------------------------------------------------------===//

#ifndef MK_PIPELINE_H
#define MK_PIPELINE_H

#include "mk/PipelineOptions.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

namespace mlir::mk {

/// Adds the first passes of the schedule pipeline, mk-specialize and mk-tile-and-order: the
/// program at bound shapes with its tiles chosen, before any collective is expanded. mk-sim
/// evaluates it as the meaning the scheduled program must have.
void buildTilePipeline(OpPassManager &pm, const PipelineOptions &options);

/// Adds the passes from program level to the scheduled level (mk.program with roles, transfers,
/// flags) to `pm`, which runs on a module.
void buildSchedulePipeline(OpPassManager &pm, const PipelineOptions &options);

/// Adds mk-plan-lowering (with the GEMM engine's stages and cluster of `options`) and the lowering
/// of scheduled programs to EmitC.
void buildEmitCPipeline(OpPassManager &pm, const PipelineOptions &options);

/// Prints a module lowered to EmitC as CUDA C++.
LogicalResult printCuda(ModuleOp module, raw_ostream &os);

/// Registers the dialects the pipeline creates and reads.
void registerPipelineDialects(DialectRegistry &registry);

} // namespace mlir::mk

#endif // MK_PIPELINE_H
