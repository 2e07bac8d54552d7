//===- RoutingOpToEmitC.cpp - expert routing: selection and combination ---===//
//
// mk.select_routed and mk.combine_routed are one device-library call each (mk/device/routing.cuh)
// on the role's team: the selection over every rank's tokens, by one CTA (mk.single_cta), which
// reports the copies of this rank's tokens it dropped or could not route (mk_routing_report); the
// combination per tile of this rank's tokens.
//
//===----------------------------------------------------------------------===//

#include "mk/Conversion/MkToEmitC/LoweringPattern.h"
#include "mk/Conversion/MkToEmitC/PatternMkToEmitC.h"
#include "mk/Conversion/MkToEmitC/TypeConverter.h"

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::to_emitc;

namespace {

struct SelectRoutedLowering : LoweringPattern<SelectRoutedOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(SelectRoutedOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    MeshAttr mesh = layout.mesh;
    DistTensorType tokens = op.getTokens().getType(), routed = op.getRouted().getType(),
                   placement = op.getPlacement().getType();
    auto start = [&](Value tensor, Value converted) {
      return pointer(rewriter, loc, cast<DistTensorType>(tensor.getType()), converted,
                     a.constant(0));
    };
    // The first expert and token of this rank's shards.
    auto first = [&](DistTensorType type) {
      return a.mul(shardIndex(a, type.getPlacement().getAxis(), layout.node, layout.gpu),
                   type.getLocalExtent(0, mesh));
    };
    int64_t experts = routed.getShape()[0];
    // The runtime reads the report and names the experts of an out-of-range index.
    layout.routedExperts = experts;
    Value args = kernelArgs(op);
    auto reportType =
        emitc::PointerType::get(emitc::OpaqueType::get(rewriter.getContext(), "mk_routing_report"));
    auto epochType = emitc::OpaqueType::get(rewriter.getContext(), "mk_u32");
    needSmem("mk::select_routed_smem_bytes<" + std::to_string(experts) + ">()");
    call(rewriter, loc, {}, "mk::select_routed",
         {start(op.getTokens(), adaptor.getTokens()), start(op.getExperts(), adaptor.getExperts()),
          std::to_string(tokens.getShape()[0]), std::to_string(placement.getShape()[1]),
          std::to_string(tokens.getShape()[1]), start(op.getRouted(), adaptor.getRouted()),
          start(op.getCounts(), adaptor.getCounts()), start(op.getOrigins(), adaptor.getOrigins()),
          start(op.getPlacement(), adaptor.getPlacement()), first(routed),
          std::to_string(routed.getLocalExtent(0, mesh)), std::to_string(routed.getShape()[1]),
          first(placement), std::to_string(placement.getLocalExtent(0, mesh)),
          call(rewriter, loc, reportType, "mk::routing_report", {args}).getResult(0),
          call(rewriter, loc, epochType, "mk::epoch", {args}).getResult(0), std::string("mk_smem")},
         {std::to_string(experts)});
    rewriter.eraseOp(op);
    return success();
  }
};

struct CombineRoutedLowering : LoweringPattern<CombineRoutedOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(CombineRoutedOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    DistTensorType dest = op.getDest().getType(), results = op.getResults().getType(),
                   placement = op.getPlacement().getType();
    Address at = address(a, dest, adaptor.getIndices(), {}, op.getTile(), layout.node, layout.gpu);
    // The tile's tokens are rows start[0].. of this rank's placement and weights, as of dest.
    Value routing = a.mul(at.start[0], placement.getShape()[1]);
    call(rewriter, loc, {}, "mk::combine_routed",
         {pointer(rewriter, loc, results, adaptor.getResults(), at.start[1]),
          std::to_string(results.getShape()[2]),
          pointer(rewriter, loc, placement, adaptor.getPlacement(), routing),
          pointer(rewriter, loc, op.getWeights().getType(), adaptor.getWeights(), routing),
          std::to_string(placement.getShape()[1]),
          pointer(rewriter, loc, dest, adaptor.getDest(), at.offset), at.ld, at.rows, at.cols});
    rewriter.eraseOp(op);
    return success();
  }
};

} // namespace

void mlir::mk::to_emitc::populateRoutingOpToEmitCPatterns(const TypeConverter &converter,
                                                          RewritePatternSet &patterns,
                                                          KernelLayout &layout) {
  patterns.add<SelectRoutedLowering, CombineRoutedLowering>(converter, patterns.getContext(),
                                                            layout);
}
