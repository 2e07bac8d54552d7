//===- SyncOpToEmitC.cpp - signals and waits on per-tile flags ------------===//
//
// A signal raises a flag here, on a GPU of the node or, through the proxy, on another node; the
// GEMM engine's consumers leave theirs to the engine's senders, and a TMA reduction's role to its
// publisher, so that each follows the stores before it. A wait spins on its flag, on the
// engine's producer (the attention engine's loading thread) or consumers as the plan says; the
// GEMM engine producer's loop of waits over a panel's flags is one call.
//
//===----------------------------------------------------------------------===//

#include "mk/Conversion/MkToEmitC/LoweringPattern.h"
#include "mk/Conversion/MkToEmitC/PatternMkToEmitC.h"
#include "mk/Conversion/MkToEmitC/TypeConverter.h"
#include "mk/Transforms/LoweringPlan.h"

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::to_emitc;

namespace {

struct SignalLowering : LoweringPattern<SignalOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(SignalOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    Value offset = flagOffset(a, layout, op.getFlags(), adaptor.getIndices());
    Value args = kernelArgs(op);
    // Under a TMA reduction, the publisher raises the flag after the stores before it.
    // (mk-plan-lowering runs no TMA reduction in a role that stamps flags.)
    if (Value reducer = ofRole(layout.reducers, op)) {
      auto flag = emitc::PointerType::get(emitc::OpaqueType::get(rewriter.getContext(), "mk_u32"));
      Value pointer =
          op.getScope() == PeerScope::gpu
              ? call(rewriter, loc, flag, "mk::flag_gpu", {args, adaptor.getPeer(), offset})
                    .getResult(0)
              : call(rewriter, loc, flag, "mk::flag_local", {args, offset}).getResult(0);
      call(rewriter, loc, {}, "mk::tma_signal", {reducer, pointer});
      rewriter.eraseOp(op);
      return success();
    }
    // The engine's consumers raise it after the tile's stores land, without waiting for them.
    bool deferred = loweringOf(op) == Lowering::deferred;
    std::string how = op.getStamp() ? "stamp" : "signal";
    switch (op.getScope()) {
    case PeerScope::self:
      if (deferred)
        call(rewriter, loc, {}, "mk::gemm_" + how + "_local", {engineFor(op), args, offset});
      else
        call(rewriter, loc, {}, "mk::" + how + "_local", {args, offset});
      break;
    case PeerScope::gpu:
      if (deferred)
        call(rewriter, loc, {}, "mk::gemm_" + how + "_gpu",
             {engineFor(op), args, adaptor.getPeer(), offset});
      else
        call(rewriter, loc, {}, "mk::" + how + "_gpu", {args, adaptor.getPeer(), offset});
      break;
    case PeerScope::node:
      call(rewriter, loc, {}, "mk::signal_node", {args, adaptor.getPeer(), offset});
      break;
    }
    rewriter.eraseOp(op);
    return success();
  }
};

/// The arrivals `wait`'s flag holds once this launch's have come (flags are never reset): its
/// count each launch (mk::due), or, `per_cta_of` a kind, its count for each CTA the roles of that
/// kind had over every launch through this one, the split being the launch's.
Value targetOf(WaitOp wait, Arith &a, OpBuilder &b, const KernelLayout &layout) {
  Location loc = wait.getLoc();
  Value args = kernelArgs(wait);
  auto sizeT = emitc::SizeTType::get(b.getContext());
  std::string count = std::to_string(wait.getCount());
  std::optional<RoleKind> kind = wait.getPerCtaOf();
  if (!kind)
    return call(b, loc, sizeT, "mk::due", {args, count}).getResult(0);
  Value ctas;
  for (auto [index, role] : llvm::enumerate(layout.split.roles))
    if (role.kind == stringifyRoleKind(*kind)) {
      Value these =
          call(b, loc, sizeT, "mk::role_ctas_through", {args, std::to_string(index)}).getResult(0);
      ctas = ctas ? a.add(ctas, these) : these;
    }
  return a.mul(a.constant(static_cast<int64_t>(wait.getCount())), ctas);
}

struct WaitLowering : LoweringPattern<WaitOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(WaitOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Arith a(rewriter, op.getLoc());
    Value offset = flagOffset(a, layout, op.getFlags(), adaptor.getIndices());
    std::optional<Lowering> how = loweringOf(op);
    Value target = targetOf(op, a, rewriter, layout);
    if (how == Lowering::producer && ofRole(layout.attentionEngines, op))
      call(rewriter, op.getLoc(), {}, "mk::producer_wait_arrivals",
           {kernelArgs(op), offset, target});
    else if (how == Lowering::producer)
      call(rewriter, op.getLoc(), {}, "mk::gemm_wait_arrivals",
           {engineFor(op), kernelArgs(op), offset, target});
    else if (how == Lowering::consumer)
      call(rewriter, op.getLoc(), {}, "mk::gemm_consumer_wait_arrivals",
           {engineFor(op), kernelArgs(op), offset, target});
    else if (how == Lowering::deferred)
      call(rewriter, op.getLoc(), {}, "mk::gemm_consumer_defer_arrivals",
           {engineFor(op), kernelArgs(op), offset, target});
    else
      call(rewriter, op.getLoc(), {}, "mk::wait_arrivals", {kernelArgs(op), offset, target});
    rewriter.eraseOp(op);
    return success();
  }
};

/// A loop of the GEMM engine producer's waits on every flag along the last dim of a flag array
/// (InsertSignals' wait for the tiles of a panel that a tile reads): one call, whose loads are
/// in flight together, where the loop's waits would each take a round trip ahead of the tile's
/// loads (its SCF lowering's benefit is 1).
struct ProducerWaitLoopLowering : LoweringPattern<scf::ForOp> {
  ProducerWaitLoopLowering(const TypeConverter &converter, MLIRContext *context,
                           KernelLayout &layout)
      : LoweringPattern(converter, context, layout, /*benefit=*/2) {}
  LogicalResult matchAndRewrite(scf::ForOp loop, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Block *body = loop.getBody();
    auto wait = dyn_cast<WaitOp>(body->front());
    if (!wait || loop.getNumResults() || !llvm::hasSingleElement(body->without_terminator()) ||
        loweringOf(wait) != Lowering::producer || ofRole(layout.attentionEngines, wait))
      return failure();
    std::optional<int64_t> first = getConstantIntValue(loop.getLowerBound());
    std::optional<int64_t> end = getConstantIntValue(loop.getUpperBound());
    std::optional<int64_t> step = getConstantIntValue(loop.getStep());
    OperandRange indices = wait.getIndices();
    Value flag = loop.getInductionVar();
    if (!first || !end || step != 1 || *end <= *first || indices.empty() ||
        indices.back() != flag || llvm::is_contained(indices.drop_back(), flag))
      return failure();
    Location loc = wait.getLoc();
    Arith a(rewriter, loc);
    SmallVector<Value> from;
    for (Value index : indices.drop_back())
      from.push_back(rewriter.getRemappedValue(index));
    from.push_back(a.constant(*first));
    call(rewriter, loc, {}, "mk::gemm_wait_arrivals_span",
         {engineFor(wait), kernelArgs(wait), flagOffset(a, layout, wait.getFlags(), from),
          std::to_string(*end - *first), targetOf(wait, a, rewriter, layout)});
    rewriter.eraseOp(loop);
    return success();
  }
};

} // namespace

void mlir::mk::to_emitc::populateSyncOpToEmitCPatterns(const TypeConverter &converter,
                                                       RewritePatternSet &patterns,
                                                       KernelLayout &layout) {
  patterns.add<SignalLowering, WaitLowering, ProducerWaitLoopLowering>(
      converter, patterns.getContext(), layout);
}
