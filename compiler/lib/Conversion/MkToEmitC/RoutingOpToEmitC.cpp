//===- RoutingOpToEmitC.cpp - expert routing: rows to experts, results back -===//
//
// Each routing op is one device-library call (mk/device/routing.cuh) on the role's team. Point to
// point: the census and the row counts by one CTA (mk.single_cta), which report the copies of
// this rank's tokens that could not be routed or were dropped (mk_routing_report); the rows by
// every CTA of the role, each its share of the tokens; results back to their tokens from a tile
// (through the GEMM engine's senders where the plan says so); their sum per tile of this rank's
// tokens. Across nodes, each CTA packs its share of the tokens bound for each other node.
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

/// What the point-to-point routing ops share: this rank's index (`me`), the first index of its
/// shards, the launch's report.
struct Routing {
  const KernelLayout &layout;
  Arith &a;
  Value me;

  /// The first index of this rank's shard of dim 0 of `type` (routing splits evenly).
  Value first(DistTensorType type) const { return a.mul(me, type.getLocalExtent(0, layout.mesh)); }
  Value report(OpBuilder &b, Location loc, Value args) const {
    auto type =
        emitc::PointerType::get(emitc::OpaqueType::get(b.getContext(), "mk_routing_report"));
    return call(b, loc, type, "mk::routing_report", {args}).getResult(0);
  }
};

struct RouteCensusLowering : LoweringPattern<RouteCensusOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(RouteCensusOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    Routing routing{layout, a, shardIndex(a, MeshAxis::world, layout.node, layout.gpu)};
    DistTensorType experts = op.getExperts().getType(), census = op.getCensus().getType();
    std::string count = std::to_string(census.getShape()[1]);
    layout.routedExperts = census.getShape()[1];
    needSymmetric(op.getCensus());
    needSmem("mk::route_smem_bytes<" + count + ">()");
    auto ref = emitc::PointerType::get(
        emitc::OpaqueType::get(rewriter.getContext(), "const mk_tensor_ref"));
    call(rewriter, loc, {}, "mk::route_census",
         {pointer(rewriter, loc, experts, adaptor.getExperts(), a.constant(0)),
          std::to_string(experts.getLocalExtent(0, layout.mesh)),
          std::to_string(experts.getShape()[1]),
          call(rewriter, loc, ref, "mk::tensor_ref", {adaptor.getCensus()}).getResult(0),
          routing.me, std::to_string(layout.mesh.getGpus()),
          routing.report(rewriter, loc, kernelArgs(op)), std::string("mk_smem")},
         {count});
    rewriter.eraseOp(op);
    return success();
  }
};

struct RouteCountsLowering : LoweringPattern<RouteCountsOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(RouteCountsOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    Routing routing{layout, a, shardIndex(a, MeshAxis::world, layout.node, layout.gpu)};
    DistTensorType census = op.getCensus().getType(), counts = op.getCounts().getType();
    std::string experts = std::to_string(census.getShape()[1]);
    auto epochType = emitc::OpaqueType::get(rewriter.getContext(), "mk_u32");
    needSmem("mk::route_smem_bytes<" + experts + ">()");
    call(rewriter, loc, {}, "mk::route_counts",
         {pointer(rewriter, loc, census, adaptor.getCensus(), a.constant(0)),
          std::to_string(census.getShape()[0]), routing.me, routing.first(counts),
          std::to_string(counts.getLocalExtent(0, layout.mesh)), std::to_string(op.getCapacity()),
          pointer(rewriter, loc, counts, adaptor.getCounts(), a.constant(0)),
          routing.report(rewriter, loc, kernelArgs(op)),
          call(rewriter, loc, epochType, "mk::epoch", {kernelArgs(op)}).getResult(0),
          std::string("mk_smem")},
         {experts});
    rewriter.eraseOp(op);
    return success();
  }
};

struct RouteRowsLowering : LoweringPattern<RouteRowsOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(RouteRowsOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    MeshAttr mesh = layout.mesh;
    DistTensorType tokens = op.getTokens().getType(), experts = op.getExperts().getType(),
                   census = op.getCensus().getType(), routed = op.getRouted().getType();
    std::string count = std::to_string(census.getShape()[1]);
    int64_t role = layout.roleOf.lookup(op);
    needSymmetric(op.getRouted());
    needSymmetric(op.getOrigins());
    needSmem("mk::route_smem_bytes<" + count + ">()");
    MLIRContext *context = rewriter.getContext();
    auto ref = emitc::PointerType::get(emitc::OpaqueType::get(context, "const mk_tensor_ref"));
    auto regions = emitc::PointerType::get(emitc::OpaqueType::get(context, "mk_u32 *const"));
    Value args = kernelArgs(op);
    Value cta = call(rewriter, loc, emitc::SizeTType::get(context), "mk::cta", {}).getResult(0);
    // The rows routed: this rank's, or those the rail peer on node `source` packed for this node
    // (region source of the received tensors), routed as that peer's (its index in the census).
    int64_t topK = experts.getShape()[1], nodes = mesh.getNodes(), gpus = mesh.getGpus();
    int64_t perRank =
        op.getSource() ? tokens.getShape()[0] / nodes : tokens.getLocalExtent(0, mesh);
    Value source = op.getSource() ? adaptor.getSource() : layout.node;
    Value first = op.getSource() ? a.mul(source, perRank) : a.constant(0);
    CallArg tokenCount = std::to_string(perRank);
    if (op.getSource())
      tokenCount = call(rewriter, loc, emitc::OpaqueType::get(context, "int"), "mk::slices",
                        {pointer(rewriter, loc, op.getCount().getType(), adaptor.getCount(),
                                 adaptor.getCountIndex())})
                       .getResult(0);
    // A result comes back to this node's GPU of the token rank's index, into the region for its
    // node (mk.route_rows's returnRegions).
    Value region = op.getSource() ? a.add(source, a.constant(nodes)) : source;
    Value originFirst = a.add(a.mul(layout.gpu, RouteRowsOp::returnRegions(nodes) * perRank * topK),
                              a.mul(region, perRank * topK));
    int64_t localExperts = routed.getLocalExtent(0, mesh);
    call(rewriter, loc, {}, "mk::route_rows",
         {pointer(rewriter, loc, tokens, adaptor.getTokens(), a.mul(first, tokens.getShape()[1])),
          pointer(rewriter, loc, experts, adaptor.getExperts(), a.mul(first, topK)),
          tokenCount,
          std::to_string(topK),
          std::to_string(tokens.getShape()[1]),
          pointer(rewriter, loc, census, adaptor.getCensus(), a.constant(0)),
          a.add(a.mul(source, gpus), layout.gpu),
          std::to_string(gpus),
          a.mul(layout.node, gpus * localExperts),
          originFirst,
          std::to_string(localExperts),
          std::to_string(routed.getShape()[1]),
          call(rewriter, loc, ref, "mk::tensor_ref", {adaptor.getRouted()}).getResult(0),
          call(rewriter, loc, ref, "mk::tensor_ref", {adaptor.getOrigins()}).getResult(0),
          pointer(rewriter, loc, op.getPlacement().getType(), adaptor.getPlacement(),
                  a.mul(first, topK)),
          op.getSource()
              ? CallArg(pointer(rewriter, loc, op.getPlacement().getType(), adaptor.getPlacement(),
                                a.mul(a.add(first, a.constant(nodes * perRank)), topK)))
              : CallArg(std::string("nullptr")),
          call(rewriter, loc, regions, "mk::flag_regions", {args}).getResult(0),
          flagOffset(a, layout, op.getArrivals(), {a.constant(0)}),
          nvlinkBytes(rewriter, loc, args),
          a.sub(cta, roleFirst(rewriter, loc, kernelArgs(op), role)),
          roleCtas(rewriter, loc, kernelArgs(op), role),
          std::string("mk_smem")},
         {count});
    rewriter.eraseOp(op);
    return success();
  }
};

struct RoutePackLowering : LoweringPattern<RoutePackOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(RoutePackOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    MeshAttr mesh = layout.mesh;
    DistTensorType tokens = op.getTokens().getType(), experts = op.getExperts().getType();
    int64_t numExperts = op.getNumExperts();
    std::string count = std::to_string(numExperts);
    int64_t role = layout.roleOf.lookup(op);
    needSmem("mk::route_smem_bytes<" + count + ">()");
    auto start = [&](Value tensor, Value converted) {
      return pointer(rewriter, loc, cast<DistTensorType>(tensor.getType()), converted,
                     a.constant(0));
    };
    Value cta = call(rewriter, loc, emitc::SizeTType::get(rewriter.getContext()), "mk::cta", {})
                    .getResult(0);
    call(rewriter, loc, {}, "mk::route_pack",
         {start(op.getTokens(), adaptor.getTokens()), start(op.getExperts(), adaptor.getExperts()),
          std::to_string(tokens.getLocalExtent(0, mesh)), std::to_string(experts.getShape()[1]),
          std::to_string(tokens.getShape()[1]), layout.node, std::to_string(mesh.getNodes()),
          std::to_string(numExperts / mesh.getNodes()), start(op.getPack(), adaptor.getPack()),
          start(op.getPackExperts(), adaptor.getPackExperts()),
          start(op.getPacked(), adaptor.getPacked()),
          start(op.getReturnAt(), adaptor.getReturnAt()),
          a.sub(cta, roleFirst(rewriter, loc, kernelArgs(op), role)),
          roleCtas(rewriter, loc, kernelArgs(op), role), std::string("mk_smem")},
         {count});
    rewriter.eraseOp(op);
    return success();
  }
};

struct ReturnRowsLowering : LoweringPattern<ReturnRowsOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(ReturnRowsOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    MLIRContext *context = rewriter.getContext();
    TileType tile = op.getValue().getType();
    DistTensorType origins = op.getOrigins().getType(), counts = op.getCounts().getType(),
                   returned = op.getReturned().getType();
    ValueRange coords = adaptor.getCoords();
    int64_t rows = tile.getShape()[0], cols = tile.getShape()[1];
    // The tile's routed rows: their origins, and how many lie below the expert's count.
    Address at = address(a, origins, coords.take_front(2), {}, {1, rows}, layout.node, layout.gpu);
    Address count = address(a, counts, coords.take_front(1), {}, {1}, layout.node, layout.gpu);
    Value valid = call(rewriter, loc, emitc::SizeTType::get(context), "mk::rows_within",
                       {pointer(rewriter, loc, counts, adaptor.getCounts(), count.offset),
                        at.start[1], std::to_string(rows)})
                      .getResult(0);
    int64_t hidden = returned.getShape()[2];
    Value column = a.mul(coords[2], cols);
    Value width = a.min(a.constant(cols), a.sub(a.constant(hidden), column));
    int64_t slots = returned.getLocalExtent(0, layout.mesh) * returned.getShape()[1];
    needSymmetric(op.getReturned());
    auto ref = emitc::PointerType::get(emitc::OpaqueType::get(context, "const mk_tensor_ref"));
    Value tensor = call(rewriter, loc, ref, "mk::tensor_ref", {adaptor.getReturned()}).getResult(0);
    Value originsAt = pointer(rewriter, loc, origins, adaptor.getOrigins(), at.offset);
    std::string element = elementName(tile.getElementType());
    if (loweringOf(op) == Lowering::store)
      call(rewriter, loc, {}, "mk::gemm_store_rows",
           {engineFor(op), lookThroughCasts(adaptor.getValue()), originsAt, valid, width, tensor,
            std::to_string(slots), std::to_string(hidden), column},
           {element});
    else {
      needSmem(tileTemplate("mk::tile_io_smem_bytes", tile));
      call(rewriter, loc, {}, "mk::return_rows",
           {adaptor.getValue(), originsAt, valid, width, tensor, std::to_string(slots),
            std::to_string(hidden), column, nvlinkBytes(rewriter, loc, kernelArgs(op)),
            std::string("mk_smem")});
    }
    rewriter.eraseOp(op);
    return success();
  }
};

struct CombineReturnedLowering : LoweringPattern<CombineReturnedOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(CombineReturnedOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    DistTensorType dest = op.getDest().getType(), returned = op.getReturned().getType(),
                   placement = op.getPlacement().getType();
    Address at = address(a, dest, adaptor.getIndices(), {}, op.getTile(), layout.node, layout.gpu);
    // The tile's tokens are rows start[0].. of this rank's routing and returned rows (or, with
    // `at`, of the rows saying where their results are).
    int64_t topK = placement.getShape()[1], hidden = returned.getShape()[2];
    Value routing = a.mul(at.start[0], topK);
    TypedValue<DistTensorType> returnAt = op.getReturnAt();
    Value firstRow = returnAt ? a.constant(0) : a.mul(routing, hidden);
    call(rewriter, loc, {}, "mk::combine_returned",
         {pointer(rewriter, loc, returned, adaptor.getReturned(), a.add(firstRow, at.start[1])),
          std::to_string(hidden),
          pointer(rewriter, loc, placement, adaptor.getPlacement(), routing),
          returnAt
              ? CallArg(pointer(rewriter, loc, returnAt.getType(), adaptor.getReturnAt(), routing))
              : CallArg(std::string("nullptr")),
          pointer(rewriter, loc, op.getWeights().getType(), adaptor.getWeights(), routing),
          std::to_string(topK), pointer(rewriter, loc, dest, adaptor.getDest(), at.offset), at.ld,
          at.rows, at.cols});
    rewriter.eraseOp(op);
    return success();
  }
};

} // namespace

void mlir::mk::to_emitc::populateRoutingOpToEmitCPatterns(const TypeConverter &converter,
                                                          RewritePatternSet &patterns,
                                                          KernelLayout &layout) {
  patterns.add<RouteCensusLowering, RouteCountsLowering, RouteRowsLowering, RoutePackLowering,
               ReturnRowsLowering, CombineReturnedLowering>(converter, patterns.getContext(),
                                                            layout);
}
