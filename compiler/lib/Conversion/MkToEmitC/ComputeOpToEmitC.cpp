//===- ComputeOpToEmitC.cpp - matmuls, reductions and tile math -----------===//
//
// A matmul runs on its role's GEMM engine (the producer's TMA loads, the consumers' wgmma) or on
// the tile library; a reduction of received tiles through TMA, chunk by chunk, or into a tile;
// elementwise math and conversions are one device-library call each, except the conversions the
// engine's or a reduction's stores make; reductions of a tile's rows or columns, broadcasts and
// attention steps are calls that exchange values through shared memory, except the broadcast
// rows of the engine's epilogue (its consumers load the columns they hold).
//
//===----------------------------------------------------------------------===//

#include "mk/Conversion/MkToEmitC/LoweringPattern.h"
#include "mk/Conversion/MkToEmitC/PatternMkToEmitC.h"
#include "mk/Conversion/MkToEmitC/TypeConverter.h"
#include "mk/Transforms/AttentionEngine.h"
#include "mk/Transforms/GemmEngine.h"
#include "mk/Transforms/LoweringPlan.h"

#include <cmath>
#include <cstdio>

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::to_emitc;

namespace {

struct AccumulateLowering : LoweringPattern<AccumulateOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(AccumulateOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    TileType tile = op.getResult().getType();
    DistTensorType type = op.getSource().getType();
    int64_t slotDim = op.getWholeDims()[0];
    // The first slot's address; the others follow `stride` elements apart.
    SmallVector<Value> indices;
    SmallVector<int64_t> wholeDims(op.getWholeDims().drop_front());
    Value node = layout.node, gpu = layout.gpu;
    for (int64_t d = 0, i = 0; d < type.getRank(); ++d) {
      if (d == slotDim) {
        indices.push_back(a.constant(0));
        continue;
      }
      if (llvm::is_contained(wholeDims, d))
        continue;
      indices.push_back(adaptor.getIndices()[i++]);
    }
    Address at = address(a, type, indices, wholeDims, tile.getShape(), node, gpu);
    int64_t stride = 1;
    for (int64_t d = slotDim + 1; d < type.getRank(); ++d)
      stride *= type.getLocalExtent(d, layout.mesh);
    TileType result = tile;
    std::string element = elementName(type.getElementType());
    std::string kind = "mk::Reduce::" + stringifyReduceKind(op.getKind()).str();
    std::string rows = std::to_string(tile.getShape()[0]),
                cols = std::to_string(tile.getShape()[1]);
    std::optional<Lowering> how = loweringOf(op);
    if (how == Lowering::tma) {
      Value reducer = ofRole(layout.reducers, op);
      int64_t map = layout.tensorMap(type, tensorIndex(op.getSource()), std::nullopt,
                                     {64, tile.getShape()[0], 1});
      rewriter.replaceOp(op, call(rewriter, loc,
                                  emitc::OpaqueType::get(rewriter.getContext(), "mk::ReducedTile"),
                                  "mk::tma_reduce",
                                  {reducer, tensorMapPointer(rewriter, loc, op, a.constant(map)),
                                   at.start[2], at.start[1], at.start[0]},
                                  {kind}));
      return success();
    }
    Value src = pointer(rewriter, loc, type, adaptor.getSource(), at.offset);
    if (how == Lowering::chunks) {
      // Chunks of what the one conversion of the result produces.
      auto convert = cast<ConvertOp>(*op->user_begin());
      std::string out = elementName(convert.getResult().getType().getElementType());
      auto chunks = emitc::OpaqueType::get(rewriter.getContext(), "mk::ChunkTile<" + out + ", " +
                                                                      rows + ", " + cols + ">");
      rewriter.replaceOp(op,
                         call(rewriter, loc, chunks, "mk::accumulate_chunks",
                              {src, std::to_string(stride),
                               std::to_string(type.getShape()[slotDim]), at.ld, at.rows, at.cols},
                              {kind, out, element, rows, cols}));
      return success();
    }
    needSmem(tileTemplate("mk::tile_io_smem_bytes", result));
    rewriter.replaceOp(
        op, call(rewriter, loc, getTypeConverter()->convertType(result), "mk::accumulate_tiles",
                 {src, std::to_string(stride), std::to_string(type.getShape()[slotDim]), at.ld,
                  at.rows, at.cols, "mk_smem"},
                 {kind, element, std::to_string(tile.getShape()[0]),
                  std::to_string(tile.getShape()[1])}));
    return success();
  }
};

struct MatmulLowering : LoweringPattern<MatmulOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(MatmulOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    TileType tile = op.getResult().getType();
    int64_t tm = tile.getShape()[0], tn = tile.getShape()[1];
    int64_t kTile = *op.getKTile();
    Value node = layout.node, gpu = layout.gpu;
    DistTensorType lhsType = op.getLhs().getType(), rhsType = op.getRhs().getType();
    int64_t lhsK = op.getLhsWholeDims()[0], rhsK = op.getRhsWholeDims()[0];
    int64_t lhsRank = lhsType.getRank(), rhsRank = rhsType.getRank();
    bool aTransposed = lhsK == lhsRank - 2, bTransposed = rhsK == rhsRank - 1;
    // The panels: tm rows by the whole K, and the whole K by tn columns.
    Address lhs =
        address(a, lhsType, adaptor.getLhsIndices(), op.getLhsWholeDims(),
                aTransposed ? ArrayRef<int64_t>{1, tm} : ArrayRef<int64_t>{tm, 1}, node, gpu);
    Address rhs =
        address(a, rhsType, adaptor.getRhsIndices(), op.getRhsWholeDims(),
                bTransposed ? ArrayRef<int64_t>{tn, 1} : ArrayRef<int64_t>{1, tn}, node, gpu);
    Value rows = aTransposed ? lhs.cols : lhs.rows;
    Value cols = bTransposed ? rhs.rows : rhs.cols;
    if (std::optional<Lowering> engine = loweringOf(op)) {
      // A pass's other matmuls are its first's to lower.
      if (*engine == Lowering::fused)
        return rewriter.notifyMatchFailure(op, "a fused matmul without the pass's first");
      // The engine's tensors split evenly (mk-plan-lowering): K is the same on every rank.
      Value e = engineFor(op);
      int64_t kBlocks = llvm::divideCeil(lhsType.getLocalExtent(lhsK, layout.mesh), 64);
      SmallVector<MatmulOp> pass = {op};
      for (Operation *next = op->getNextNode(); next; next = next->getNextNode())
        if (auto matmul = dyn_cast<MatmulOp>(next)) {
          if (loweringOf(matmul) != Lowering::fused)
            break;
          pass.push_back(matmul);
        }
      // Split-K: this position's part of the K blocks, [part * blocks / splits, (part + 1) *
      // blocks / splits).
      CallArg kFirst = std::string("0"), kCount = std::to_string(kBlocks);
      int64_t splits = op.getKSplits().value_or(1);
      Value part = splits > 1 ? rewriter.getRemappedValue(layout.splitPart.lookup(op)) : Value();
      if (part) {
        Value first = a.div(a.mul(part, kBlocks), splits);
        kFirst = first;
        kCount = a.sub(a.div(a.mul(a.add(part, 1), kBlocks), splits), first);
      }
      if (*engine == Lowering::mma) {
        auto accumulator = emitc::OpaqueType::get(
            rewriter.getContext(), "mk::GemmAccumulator<mk::GemmConfig<" +
                                       gemmConfigArguments(layout.engineConfigs.lookup(e)) + ">>");
        Value product = call(rewriter, loc, accumulator, "mk::gemm_mma", {e, kCount})->getResult(0);
        if (part) {
          // The tile's slots and flag: tiles numbered row-major by their first element.
          int64_t colTiles = llvm::divideCeil(
              rhsType.getLocalExtent(bTransposed ? rhsK - 1 : rhsK + 1, layout.mesh), tn);
          Value rowTile = a.div(lhs.start[0], tm);
          Value colTile = a.div(bTransposed ? rhs.start[0] : rhs.start[1], tn);
          Value tileIndex = a.add(a.mul(rowTile, colTiles), colTile);
          int64_t slots = splits * 128 * tn * static_cast<int64_t>(pass.size());
          DistTensorType partialsType = op.getPartials().getType();
          Value partials =
              pointer(rewriter, loc, partialsType, adaptor.getPartials(), a.mul(tileIndex, slots));
          Value args = kernelArgs(op);
          auto flag =
              emitc::PointerType::get(emitc::OpaqueType::get(rewriter.getContext(), "mk_u32"));
          Value arrivals =
              call(rewriter, loc, flag, "mk::flag_local",
                   {args, flagOffset(a, layout, *op.getArrivals(), {rowTile, colTile})})
                  .getResult(0);
          Value epoch = call(rewriter, loc, emitc::OpaqueType::get(rewriter.getContext(), "mk_u32"),
                             "mk::epoch", {args})
                            .getResult(0);
          product = call(rewriter, loc, accumulator, "mk::gemm_sum_splits",
                         {e, product, partials, arrivals, part, std::to_string(splits), epoch})
                        ->getResult(0);
        }
        if (pass.size() == 1) {
          rewriter.replaceOp(op, product);
          return success();
        }
        // Each matmul's product: its columns of the pass's tile.
        std::string columns = std::to_string(tn);
        auto part = emitc::OpaqueType::get(rewriter.getContext(), "mk::GemmTile<" + columns + ">");
        for (auto [i, matmul] : llvm::enumerate(pass))
          rewriter.replaceOp(matmul, call(rewriter, loc, part, "mk::gemm_columns", {product},
                                          {std::to_string(i * tn), columns}));
        return success();
      }
      // The producer's loads: A in boxes of the engine's rows, B in 64 x 64 blocks ([K x N]) or
      // tn-row boxes ([N x K]), 64 deep in K; each matmul of the pass its B panel. Groups of
      // matrices are loaded a group (one box deep in the outer dim) at a time.
      // A [K x N] panel of one block, shared by a cluster, is loaded in parts of its K rows.
      bool grouped = groupedMatmul(op);
      GemmEngineAttr config = layout.engineConfigs.lookup(e);
      int64_t blockRows = config.getTileN() == 64 ? 64 / config.getCluster() : 64;
      SmallVector<int64_t> aBox = {64, config.getARows()},
                           bBox = {64, bTransposed ? tn : blockRows};
      if (grouped) {
        aBox.push_back(1);
        bBox.push_back(1);
      }
      int64_t aMap = layout.tensorMap(lhsType, tensorIndex(op.getLhs()), std::nullopt, aBox);
      SmallVector<CallArg> args = {e, tensorMapPointer(rewriter, loc, op, a.constant(aMap))};
      for (MatmulOp matmul : pass) {
        int64_t bMap = layout.tensorMap(rhsType, tensorIndex(matmul.getRhs()), std::nullopt, bBox);
        args.push_back(tensorMapPointer(rewriter, loc, op, a.constant(bMap)));
      }
      int64_t outer = grouped ? 1 : 0;
      args.append(
          {lhs.start[outer], bTransposed ? rhs.start[outer] : rhs.start[outer + 1], kCount});
      if (grouped)
        args.append({lhs.start[0], rhs.start[0]});
      else
        args.push_back(kFirst);
      call(rewriter, loc, {}, grouped ? "mk::gemm_load_grouped" : "mk::gemm_load", args);
      for (MatmulOp follower : llvm::drop_begin(pass))
        rewriter.eraseOp(follower);
      rewriter.eraseOp(op);
      return success();
    }
    std::string element = elementName(lhsType.getElementType());
    Value aPtr = pointer(rewriter, loc, lhsType, adaptor.getLhs(), lhs.offset);
    Value bPtr = pointer(rewriter, loc, rhsType, adaptor.getRhs(), rhs.offset);
    needSmem("mk::matmul_smem_bytes<" + element + ", " + std::to_string(tm) + ", " +
             std::to_string(tn) + ", " + std::to_string(kTile) + ">()");
    rewriter.replaceOp(
        op, call(rewriter, loc, getTypeConverter()->convertType(tile), "mk::matmul",
                 {aPtr, lhs.ld, bPtr, rhs.ld, localExtent(a, lhsType, lhsK, node, gpu), rows, cols,
                  "mk_smem"},
                 {std::to_string(tm), std::to_string(tn), std::to_string(kTile),
                  aTransposed ? "true" : "false", bTransposed ? "true" : "false", element}));
    return success();
  }
};

/// Rows or columns of a tile combined, through shared memory.
struct ReduceLowering : LoweringPattern<ReduceOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(ReduceOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    TileType source = op.getSource().getType();
    std::string dim = std::to_string(op.getDim());
    needSmem("mk::reduce_smem_bytes<" + dim + ", " + std::to_string(source.getShape()[0]) + ", " +
             std::to_string(source.getShape()[1]) + ">()");
    rewriter.replaceOp(op, call(rewriter, op.getLoc(),
                                getTypeConverter()->convertType(op.getResult().getType()),
                                "mk::reduce", {adaptor.getSource(), std::string("mk_smem")},
                                {"mk::Reduce::" + stringifyReduceKind(op.getKind()).str(), dim}));
    return success();
  }
};

/// A rank-1 tile repeated along a new dim, through shared memory; a row down the GEMM engine's
/// tile where its consumers hold both.
struct BroadcastLowering : LoweringPattern<BroadcastOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(BroadcastOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    TileType result = op.getResult().getType();
    if (loweringOf(op) == Lowering::registers) {
      auto type = emitc::OpaqueType::get(op.getContext(), engineTileName(result));
      rewriter.replaceOp(op, call(rewriter, op.getLoc(), type, "mk::gemm_broadcast",
                                  {lookThroughCasts(adaptor.getSource())}));
      return success();
    }
    needSmem("mk::broadcast_smem_bytes<" + std::to_string(op.getSource().getType().getShape()[0]) +
             ">()");
    rewriter.replaceOp(op, call(rewriter, op.getLoc(), getTypeConverter()->convertType(result),
                                "mk::broadcast", {adaptor.getSource(), std::string("mk_smem")},
                                {std::to_string(op.getDim()), std::to_string(result.getShape()[0]),
                                 std::to_string(result.getShape()[1])}));
    return success();
  }
};

/// One online-softmax step on the tile library: a state of three tiles, taken apart.
struct AttentionBlockLowering : LoweringPattern<AttentionBlockOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(AttentionBlockOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    TileType q = op.getQ().getType(), k = op.getK().getType(), v = op.getV().getType();
    int64_t rows = q.getShape()[0], keys = k.getShape()[0], dim = q.getShape()[1],
            width = v.getShape()[1];
    float scale = op.getScale() ? op.getScale()->convertToFloat() : 1.0f / std::sqrt(float(dim));
    char literal[32];
    std::snprintf(literal, sizeof literal, "%af", static_cast<double>(scale));
    SmallVector<CallArg> args(adaptor.getOperands().take_front(6));
    EmitCIndexOps ops{a};
    AttentionRows<Value> at = attentionRows<EmitCIndexOps>(
        ops, op, layout.numbering, [&](Value v) { return rewriter.getRemappedValue(v); });
    for (Value row : {at.queryFirst, at.keyFirst, at.keys})
      args.push_back(row);
    args.push_back(std::string(op.getCausal() ? "true" : "false"));
    args.push_back(std::string(literal));
    args.push_back(std::string("mk_smem"));
    std::string shape = elementName(q.getElementType()) + ", " + std::to_string(rows) + ", " +
                        std::to_string(keys) + ", " + std::to_string(dim) + ", " +
                        std::to_string(width);
    needSmem("mk::attention_block_smem_bytes<" + shape + ">()");
    auto state =
        emitc::OpaqueType::get(rewriter.getContext(), "mk::AttentionState<" + std::to_string(rows) +
                                                          ", " + std::to_string(width) + ">");
    Value next = call(rewriter, loc, state, "mk::attention_block", args).getResult(0);
    SmallVector<Value> results;
    const StringRef parts[] = {"mk::attention_acc", "mk::attention_row_max",
                               "mk::attention_row_sum"};
    for (auto [result, part] : llvm::zip(op->getResults(), parts))
      results.push_back(
          call(rewriter, loc, getTypeConverter()->convertType(result.getType()), part, {next})
              .getResult(0));
    rewriter.replaceOp(op, results);
    return success();
  }
};

/// Tile compute: one device-library call each.
template <typename OpT> struct CallLowering : LoweringPattern<OpT> {
  CallLowering(const TypeConverter &converter, MLIRContext *context, KernelLayout &layout,
               StringRef callee)
      : LoweringPattern<OpT>(converter, context, layout), callee(callee) {}

  LogicalResult matchAndRewrite(OpT op, typename OpT::Adaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    std::optional<Lowering> how = loweringOf(op.getOperation());
    // The engine converts as it stores.
    if (how == Lowering::elide) {
      rewriter.replaceOp(op, lookThroughCasts(adaptor.getOperands().front()));
      return success();
    }
    // The engine's epilogue works on its tiles where the consumers hold them.
    bool inRegisters = how == Lowering::registers;
    SmallVector<CallArg> args;
    for (Value operand : adaptor.getOperands())
      args.push_back(inRegisters ? lookThroughCasts(operand) : operand);
    SmallVector<std::string> templateArgs;
    std::string name = callee;
    if constexpr (std::is_same_v<OpT, ActivationOp>)
      name = "mk::" + stringifyActivation(op.getKind()).str();
    auto result = cast<TileType>(op->getResult(0).getType());
    std::string columns = std::to_string(result.getRank() > 1 ? result.getShape()[1] : 1);
    // A converted row of the engine's epilogue stays as loaded until it is broadcast.
    Type stored = result.getElementType();
    if constexpr (std::is_same_v<OpT, ConvertOp>) {
      templateArgs.push_back(elementName(result.getElementType()));
      stored = op.getSource().getType().getElementType();
    }
    if constexpr (std::is_same_v<OpT, SplatOp>) {
      // The engine's consumers hold 128 rows (mk::GemmTile) whatever the tile's: a 64-row tile's
      // others are never stored.
      templateArgs = {elementName(result.getElementType()),
                      inRegisters ? "128" : std::to_string(result.getShape()[0]), columns};
      if (inRegisters)
        templateArgs.push_back("mk::GemmLayout<" + columns + ">");
    }
    Type type = inRegisters
                    ? emitc::OpaqueType::get(op.getContext(), engineTileName(result, stored))
                    : this->getTypeConverter()->convertType(result);
    rewriter.replaceOp(op, call(rewriter, op.getLoc(), type, name, args, templateArgs));
    return success();
  }

  std::string callee;
};

} // namespace

void mlir::mk::to_emitc::populateComputeOpToEmitCPatterns(const TypeConverter &converter,
                                                          RewritePatternSet &patterns,
                                                          KernelLayout &layout) {
  MLIRContext *context = patterns.getContext();
  patterns.add<AccumulateLowering, MatmulLowering, ReduceLowering, BroadcastLowering,
               AttentionBlockLowering>(converter, context, layout);
  patterns.add<CallLowering<ConvertOp>>(converter, context, layout, "mk::convert");
  patterns.add<CallLowering<AddOp>>(converter, context, layout, "mk::add");
  patterns.add<CallLowering<SubOp>>(converter, context, layout, "mk::sub");
  patterns.add<CallLowering<MulOp>>(converter, context, layout, "mk::mul");
  patterns.add<CallLowering<DivOp>>(converter, context, layout, "mk::div");
  patterns.add<CallLowering<MaxOp>>(converter, context, layout, "mk::maximum");
  patterns.add<CallLowering<MinOp>>(converter, context, layout, "mk::minimum");
  patterns.add<CallLowering<ExpOp>>(converter, context, layout, "mk::exp");
  patterns.add<CallLowering<LogOp>>(converter, context, layout, "mk::log");
  patterns.add<CallLowering<SqrtOp>>(converter, context, layout, "mk::sqrt");
  patterns.add<CallLowering<RsqrtOp>>(converter, context, layout, "mk::rsqrt");
  patterns.add<CallLowering<ReciprocalOp>>(converter, context, layout, "mk::reciprocal");
  patterns.add<CallLowering<TanhOp>>(converter, context, layout, "mk::tanh");
  patterns.add<CallLowering<SigmoidOp>>(converter, context, layout, "mk::sigmoid");
  patterns.add<CallLowering<NegOp>>(converter, context, layout, "mk::neg");
  patterns.add<CallLowering<AbsOp>>(converter, context, layout, "mk::abs");
  patterns.add<CallLowering<ActivationOp>>(converter, context, layout, "");
  patterns.add<CallLowering<SwigluOp>>(converter, context, layout, "mk::swiglu");
  patterns.add<CallLowering<SplatOp>>(converter, context, layout, "mk::splat");
}
