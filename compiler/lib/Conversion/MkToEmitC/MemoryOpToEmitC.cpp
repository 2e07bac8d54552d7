//===- MemoryOpToEmitC.cpp - tile loads, stores, puts and copies ----------===//
//
// Loads and stores of tiles go through the tile library (mk::load_tile, mk::store_tile, and
// mk::load_vector, mk::store_vector for rank-1 tiles) on the role's team; the GEMM engine's stores
// and a TMA reduction's through TMA, to this rank or a GPU of the node, several at once where the
// plan says; copies of regions through SM stores, the bulk copy engine, or the network proxy
// (mk::remote_put), with a following signal to the same node riding on the copy; slices counted
// on the GPU (mk.send_rows) the same ways.
//
//===----------------------------------------------------------------------===//

#include "mk/Conversion/MkToEmitC/LoweringPattern.h"
#include "mk/Conversion/MkToEmitC/PatternMkToEmitC.h"
#include "mk/Conversion/MkToEmitC/TypeConverter.h"
#include "mk/Transforms/LoweringPlan.h"
#include "mk/Transforms/TileWalk.h"

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::to_emitc;

namespace {

struct PlaceLowering : LoweringPattern<PlaceOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(PlaceOp op, OpAdaptor,
                                ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, {layout.node, layout.gpu});
    return success();
  }
};

struct OwnerLowering : LoweringPattern<OwnerOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(OwnerOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Arith a(rewriter, op.getLoc());
    EmitCIndexOps ops{a};
    auto [node, gpu] = tileOwner(
        ops, op.getTensor().getType(), llvm::to_vector(adaptor.getIndices()), op.getTile(),
        op.getRowSlices(), layout.mesh, layout.numbering, layout.node, layout.gpu);
    rewriter.replaceOp(op, {node, gpu});
    return success();
  }
};

/// The tile coordinates a rank's shard covers, as the program numbers its tiles.
struct ShardRangeLowering : LoweringPattern<ShardRangeOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(ShardRangeOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Arith a(rewriter, op.getLoc());
    EmitCIndexOps ops{a};
    auto [lo, hi] =
        layout.numbering.shardTiles(ops, op.getTensor().getType(), layout.mesh,
                                    static_cast<int64_t>(op.getTile()), adaptor.getIndex());
    rewriter.replaceOp(op, {lo, hi});
    return success();
  }
};

struct SequenceTileLowering : LoweringPattern<SequenceTileOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(SequenceTileOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Arith a(rewriter, op.getLoc());
    EmitCIndexOps ops{a};
    rewriter.replaceOp(op, sequenceTile(ops, op.getTensor().getType(), layout.mesh,
                                        static_cast<int64_t>(op.getTile()), adaptor.getIndex()));
    return success();
  }
};

struct LoadLowering : LoweringPattern<LoadOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(LoadOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    TileType tile = op.getResult().getType();
    Value node = layout.node, gpu = layout.gpu;
    Address at = address(a, op.getSource().getType(), adaptor.getIndices(), op.getWholeDims(),
                         tile.getShape(), node, gpu);
    Value src = pointer(rewriter, loc, op.getSource().getType(), adaptor.getSource(), at.offset);
    Type result = getTypeConverter()->convertType(tile);
    if (tile.getRank() == 1) {
      // A row of the GEMM engine's epilogue: each consumer thread loads the columns it holds.
      bool inRegisters = loweringOf(op) == Lowering::registers;
      if (inRegisters)
        result = emitc::OpaqueType::get(op.getContext(), engineTileName(tile));
      rewriter.replaceOp(
          op, call(rewriter, loc, result, inRegisters ? "mk::gemm_load_row" : "mk::load_vector",
                   {src, a.mul(at.rows, at.cols)},
                   {elementName(tile.getElementType()), std::to_string(tile.getShape()[0])}));
      return success();
    }
    needSmem(tileTemplate("mk::tile_io_smem_bytes", tile));
    rewriter.replaceOp(
        op, call(rewriter, loc, result, "mk::load_tile", {src, at.ld, at.rows, at.cols, "mk_smem"},
                 {elementName(tile.getElementType()), std::to_string(tile.getShape()[0]),
                  std::to_string(tile.getShape()[1])}));
    return success();
  }
};

/// mk.store and mk.put: a tile to this rank's memory or to a GPU of the node.
template <typename OpT> struct StoreLowering : LoweringPattern<OpT> {
  using LoweringPattern<OpT>::LoweringPattern;
  LogicalResult matchAndRewrite(OpT op, typename OpT::Adaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    TileType tile = op.getValue().getType();
    std::optional<Lowering> how = loweringOf(op.getOperation());
    Value node = this->layout.node, gpu = this->layout.gpu;
    Value peer;
    if constexpr (std::is_same_v<OpT, PutOp>) {
      if (op.getScope() == PeerScope::gpu) {
        peer = gpu = adaptor.getPeer();
        this->needSymmetric(op.getDest());
      }
    }
    DistTensorType type = op.getDest().getType();
    Address at =
        this->address(a, type, adaptor.getIndices(), op.getWholeDims(), tile.getShape(), node, gpu);
    if (how == Lowering::store || how == Lowering::tma)
      return tmaStore(op, adaptor, rewriter, at, peer);
    Value dst = this->pointer(rewriter, loc, type, adaptor.getDest(), at.offset, peer);
    if (how == Lowering::chunks) {
      call(rewriter, loc, {}, "mk::store_chunks",
           {lookThroughCasts(adaptor.getValue()), dst, at.ld, at.rows, at.cols});
      rewriter.eraseOp(op);
      return success();
    }
    if (tile.getRank() == 1) {
      call(rewriter, loc, {}, "mk::store_vector",
           {adaptor.getValue(), dst, a.mul(at.rows, at.cols)});
      rewriter.eraseOp(op);
      return success();
    }
    this->needSmem(tileTemplate("mk::tile_io_smem_bytes", tile));
    call(rewriter, loc, {}, "mk::store_tile",
         {adaptor.getValue(), dst, at.ld, at.rows, at.cols, "mk_smem"});
    rewriter.eraseOp(op);
    return success();
  }

  /// Stores a tile staged in shared memory (the engine's, or a TMA reduction's) through TMA, 64
  /// columns at a time; to a peer through that peer's map.
  LogicalResult tmaStore(OpT op, typename OpT::Adaptor adaptor, ConversionPatternRewriter &rewriter,
                         const Address &at, Value peer) const {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    DistTensorType type = op.getDest().getType();
    int64_t rank = type.getRank(), tensor = this->tensorIndex(op.getDest());
    SmallVector<int64_t> box = {64, op.getValue().getType().getShape()[0]};
    box.append(rank - 2, 1);
    std::optional<std::pair<int64_t, int64_t>> gpuOffsets = gpuOffsetsOf(op);
    Value map = gpuOffsets ? a.constant(this->layout.tensorMapsOfNode(type, tensor, box))
                : peer ? a.add(a.constant(this->layout.tensorMapsOfNode(type, tensor, box)), peer)
                       : a.constant(this->layout.tensorMap(type, tensor, std::nullopt, box));
    Value tile = lookThroughCasts(adaptor.getValue());
    bool engine = loweringOf(op.getOperation()) == Lowering::store;
    Value owner = engine ? this->engineFor(op) : this->ofRole(this->layout.reducers, op);
    SmallVector<CallArg> args = {owner, tile, this->tensorMapPointer(rewriter, loc, op, map)};
    if (gpuOffsets) {
      args.push_back(this->layout.gpu);
      args.push_back(std::to_string(gpuOffsets->first));
      args.push_back(std::to_string(gpuOffsets->second));
      args.push_back(std::to_string(this->layout.mesh.getGpus()));
      // Whole tiles reach the peers through the engine's senders, by the tensor's peer mappings.
      auto ref = emitc::PointerType::get(
          emitc::OpaqueType::get(rewriter.getContext(), "const mk_tensor_ref"));
      args.push_back(call(rewriter, loc, ref, "mk::tensor_ref", {adaptor.getDest()}).getResult(0));
      args.append({at.offset, at.ld, at.rows, at.cols});
    }
    for (int64_t d = rank - 1; d >= 0; --d)
      args.push_back(at.start[d]);
    bool combine = false;
    if constexpr (std::is_same_v<OpT, PutOp>)
      combine = op.getCombine().has_value();
    std::string callee = combine ? "mk::gemm_store_add" : "mk::gemm_store";
    if (gpuOffsets)
      callee += "_gpus";
    if (engine)
      call(rewriter, loc, {}, callee, args,
           {elementName(op.getValue().getType().getElementType())});
    else
      call(rewriter, loc, {}, "mk::tma_store_reduced", args);
    rewriter.eraseOp(op);
    return success();
  }
};

/// A signal to the same node right after a transfer across nodes rides on it: one command to
/// the proxy, whose flag follows this put's data and every earlier put's, as the signal's would.
/// The flag's offset (erasing the signal), or MK_NO_FLAG.
static CallArg ridingSignal(Operation *op, Value peer, Arith &a, const KernelLayout &layout,
                            ConversionPatternRewriter &rewriter) {
  auto signal = dyn_cast_or_null<SignalOp>(op->getNextNode());
  if (!signal || signal.getScope() != PeerScope::node || signal.getPeer() != peer)
    return std::string("MK_NO_FLAG");
  SmallVector<Value> indices;
  for (Value index : signal.getIndices())
    indices.push_back(rewriter.getRemappedValue(index));
  Value flag = flagOffset(a, layout, signal.getFlags(), indices);
  rewriter.eraseOp(signal);
  return flag;
}

struct CopyLowering : LoweringPattern<CopyOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(CopyOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    Value args = kernelArgs(op);
    Value myNode = layout.node, myGpu = layout.gpu;
    DistTensorType sourceType = op.getSource().getType(), destType = op.getDest().getType();
    Address from = address(a, sourceType, adaptor.getSourceIndices(), op.getSourceWholeDims(),
                           op.getTile(), myNode, myGpu);
    Value destNode = myNode, destGpu = myGpu;
    if (op.getScope() == PeerScope::node)
      destNode = adaptor.getPeer();
    if (op.getScope() == PeerScope::gpu)
      destGpu = adaptor.getPeer();
    Address to = address(a, destType, adaptor.getDestIndices(), op.getDestWholeDims(), op.getTile(),
                         destNode, destGpu);
    int64_t bytes = sourceType.getElementType().getIntOrFloatBitWidth() / 8;

    if (op.getScope() != PeerScope::self)
      needSymmetric(op.getDest());
    if (op.getScope() == PeerScope::node) {
      needSymmetric(op.getSource());
      CallArg flag = ridingSignal(op, op.getPeer(), a, layout, rewriter);
      call(rewriter, loc, {}, "mk::remote_put",
           {args, adaptor.getPeer(), std::to_string(tensorIndex(op.getSource())),
            a.mul(from.offset, bytes), std::to_string(tensorIndex(op.getDest())),
            a.mul(to.offset, bytes), from.rows, a.mul(from.cols, bytes), a.mul(from.ld, bytes),
            a.mul(to.ld, bytes), flag});
      rewriter.eraseOp(op);
      return success();
    }
    Value src = pointer(rewriter, loc, sourceType, adaptor.getSource(), from.offset);
    Value dst = pointer(rewriter, loc, destType, adaptor.getDest(), to.offset,
                        op.getScope() == PeerScope::gpu ? adaptor.getPeer() : Value());
    SmallVector<CallArg> callArgs = {src, from.ld, dst, to.ld, from.rows, from.cols};
    StringRef callee = "mk::copy_region";
    if (op.getLink() == Link::nvlink_bulk) {
      Value copier = ofRole(layout.bulkCopiers, op);
      if (!copier)
        return op.emitOpError("copies through the bulk-copy engine outside a team role");
      callee = "mk::copy_region_bulk";
      callArgs.append({std::string("mk_smem"), copier});
      needSmem("mk::copy_region_bulk_smem_bytes()");
    }
    call(rewriter, loc, {}, callee, callArgs);
    rewriter.eraseOp(op);
    return success();
  }
};

struct SendRowsLowering : LoweringPattern<SendRowsOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(SendRowsOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    DistTensorType source = op.getSource().getType(), dest = op.getDest().getType();
    int64_t slice = 1;
    for (int64_t extent : source.getShape().drop_front())
      slice *= extent;
    Value count = op.getCount() ? pointer(rewriter, loc, op.getCount().getType(),
                                          adaptor.getCount(), adaptor.getCountIndex())
                                : Value();
    CallArg slices = call(rewriter, loc, emitc::OpaqueType::get(rewriter.getContext(), "int"),
                          "mk::slices", {count ? CallArg(count) : CallArg(std::string("nullptr"))})
                         .getResult(0);
    needSymmetric(op.getDest());
    if (op.getScope() == PeerScope::node) {
      // Offsets and rows in bytes.
      needSymmetric(op.getSource());
      int64_t bytes = slice * (source.getElementType().getIntOrFloatBitWidth() / 8);
      CallArg flag = ridingSignal(op, op.getPeer(), a, layout, rewriter);
      call(rewriter, loc, {}, "mk::remote_put",
           {kernelArgs(op), adaptor.getPeer(), std::to_string(tensorIndex(op.getSource())),
            a.mul(adaptor.getFrom(), bytes), std::to_string(tensorIndex(op.getDest())),
            a.mul(adaptor.getTo(), bytes), slices, std::to_string(bytes), std::to_string(bytes),
            std::to_string(bytes), flag});
    } else {
      call(rewriter, loc, {}, "mk::copy_region",
           {pointer(rewriter, loc, source, adaptor.getSource(), a.mul(adaptor.getFrom(), slice)),
            std::to_string(slice),
            pointer(rewriter, loc, dest, adaptor.getDest(), a.mul(adaptor.getTo(), slice),
                    adaptor.getPeer()),
            std::to_string(slice), slices, std::to_string(slice)});
    }
    rewriter.eraseOp(op);
    return success();
  }
};

} // namespace

void mlir::mk::to_emitc::populateMemoryOpToEmitCPatterns(const TypeConverter &converter,
                                                         RewritePatternSet &patterns,
                                                         KernelLayout &layout) {
  patterns.add<PlaceLowering, OwnerLowering, ShardRangeLowering, SequenceTileLowering, LoadLowering,
               StoreLowering<StoreOp>, StoreLowering<PutOp>, CopyLowering, SendRowsLowering>(
      converter, patterns.getContext(), layout);
}
