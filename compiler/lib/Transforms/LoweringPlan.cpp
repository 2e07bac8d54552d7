//===- LoweringPlan.cpp - the plan's attributes, and what cannot be lowered ===//

#include "mk/Transforms/LoweringPlan.h"

using namespace mlir;
using namespace mlir::mk;

static MkDialect *dialectOf(Operation *op) {
  return op->getContext()->getLoadedDialect<MkDialect>();
}

std::optional<Lowering> mlir::mk::loweringOf(Operation *op) {
  if (LoweringAttr how = dialectOf(op)->getLoweringAttrHelper().getAttr(op))
    return how.getValue();
  return std::nullopt;
}

void mlir::mk::setLowering(Operation *op, Lowering how) {
  dialectOf(op)->getLoweringAttrHelper().setAttr(op, LoweringAttr::get(op->getContext(), how));
}

GemmEngineAttr mlir::mk::gemmEngineOf(RoleOp role) {
  return dialectOf(role)->getGemmEngineAttrHelper().getAttr(role);
}

void mlir::mk::setGemmEngine(RoleOp role, GemmEngineAttr engine) {
  dialectOf(role)->getGemmEngineAttrHelper().setAttr(role, engine);
}

AttentionEngineAttr mlir::mk::attentionEngineOf(RoleOp role) {
  return dialectOf(role)->getAttentionEngineAttrHelper().getAttr(role);
}

void mlir::mk::setAttentionEngine(RoleOp role, AttentionEngineAttr engine) {
  dialectOf(role)->getAttentionEngineAttrHelper().setAttr(role, engine);
}

std::optional<std::pair<int64_t, int64_t>> mlir::mk::gpuOffsetsOf(Operation *op) {
  DenseI64ArrayAttr offsets = dialectOf(op)->getGpuOffsetsAttrHelper().getAttr(op);
  if (!offsets || offsets.size() != 2)
    return std::nullopt;
  return std::pair(offsets[0], offsets[1]);
}

void mlir::mk::setGpuOffsets(Operation *op, int64_t begin, int64_t end) {
  dialectOf(op)->getGpuOffsetsAttrHelper().setAttr(
      op, DenseI64ArrayAttr::get(op->getContext(), {begin, end}));
}

LogicalResult mlir::mk::checkLowerable(ProgramOp program) {
  if (!program.getGrid())
    return program.emitError() << "@" << program.getSymName()
                               << " is not scheduled (run the mkc pipeline up to "
                                  "mk-insert-signals first)";
  if (!program.getMesh().isBound())
    return program.emitError() << "@" << program.getSymName() << " is not specialized";
  WalkResult unsupported = program.walk([&](Operation *op) {
    if (isa<AllReduceOp, ReduceScatterOp, AllGatherOp, RingShiftOp, DispatchOp, CombineOp>(op)) {
      op->emitOpError() << "is a collective intent, which the CUDA lowering does not take (run "
                           "mk-expand-collectives first)";
      return WalkResult::interrupt();
    }
    if (auto put = dyn_cast<PutOp>(op); put && put.getScope() == PeerScope::node) {
      put.emitOpError() << "puts a tile across nodes; the proxy copies memory, so store the tile "
                           "and mk.copy it";
      return WalkResult::interrupt();
    }
    if (auto matmul = dyn_cast<MatmulOp>(op); matmul && !matmul.getKTile()) {
      matmul.emitOpError() << "has no k_tile (run mk-tile-and-order first)";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  return failure(unsupported.wasInterrupted());
}
