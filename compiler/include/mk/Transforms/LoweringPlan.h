//===- LoweringPlan.h - what mk-plan-lowering decides, as mk-lower-to-emitc reads it -*- C++
//-*-===//
//
// How a scheduled program becomes CUDA is decided in one place, mk-plan-lowering, before any code
// is generated, and carried on the program as the mk dialect's typed discardable attributes:
//   - `mk.gemm_engine` (#mk.gemm_engine<...>) on a role whose matmuls run on the GEMM engine: its
//     configuration and cluster size;
//   - `mk.attention_engine` (#mk.attention_engine<...>) on a role whose attention steps run on the
//     attention engine: its configuration;
//   - `mk.lowering` (#mk.lowering<...>) on the ops that are not lowered on their own: the engine
//     role's matmuls, conversions, stores, signals and waits, and the reductions that are only
//     stored (through TMA or chunk by chunk) with their conversions and stores;
//   - `mk.gpu_offsets` on an engine store that sends one staged tile to several GPUs of the node.
// mk-lower-to-emitc (compiler/lib/Conversion/MkToEmitC) only reads them, through these accessors;
// a program it lowers without a plan runs every role on the tile library.
//
//===----------------------------------------------------------------------===//

#ifndef MK_TRANSFORMS_LOWERINGPLAN_H
#define MK_TRANSFORMS_LOWERINGPLAN_H

#include "mk/IR/MkOps.h"

#include <optional>
#include <utility>

namespace mlir::mk {

/// How `op` is lowered when it is not lowered on its own, if the plan says.
std::optional<Lowering> loweringOf(Operation *op);
void setLowering(Operation *op, Lowering how);

/// The GEMM engine a role runs, if it runs one.
GemmEngineAttr gemmEngineOf(RoleOp role);
void setGemmEngine(RoleOp role, GemmEngineAttr engine);

/// The attention engine a role runs, if it runs one.
AttentionEngineAttr attentionEngineOf(RoleOp role);
void setAttentionEngine(RoleOp role, AttentionEngineAttr engine);

/// The offsets [begin, end) of the GPUs an engine store goes to at once: GPU (this one + offset)
/// mod the node's GPUs; nothing for a store to one GPU.
std::optional<std::pair<int64_t, int64_t>> gpuOffsetsOf(Operation *op);
void setGpuOffsets(Operation *op, int64_t begin, int64_t end);

/// Refuses, with a located message, a program mkc cannot lower to CUDA: not scheduled or not
/// specialized, ops without a CUDA lowering, puts across nodes, matmuls without a k tile. Both
/// passes check it, so that each refuses on its own what the other would.
LogicalResult checkLowerable(ProgramOp program);

} // namespace mlir::mk

#endif // MK_TRANSFORMS_LOWERINGPLAN_H
