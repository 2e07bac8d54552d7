//===- AttentionLowering.cpp - a role on the attention engine -------------===//
//
// A role the plan gives the attention engine runs it with all MK_CTA_THREADS threads: an
// mk::AttentionEngine in shared memory; its producer warpgroup's loading thread walks a copy of
// the role's tile loop and of the pass's loops, loading each query tile and each block of K and V
// after the waits for the block; its consumers walk the role itself, with the pass's state as
// the engine's accumulator: begun where the query tile is loaded, each source's blocks folded in
// by one engine call (one call site, so that the engine's unrolled loop is in the instruction
// cache once), normalised and stored where the output is.
//
// Tensors are 3-D maps (D, rows, B * H) of the [B, H, S, D] tensors; rows are local to the rank
// where S is sharded, positions (for the mask) global.
//
//===----------------------------------------------------------------------===//

#include "mk/Conversion/MkToEmitC/EmitCBuilder.h"
#include "mk/Conversion/MkToEmitC/StructureLowering.h"
#include "mk/Conversion/MkToEmitC/TypeConverter.h"
#include "mk/Transforms/AttentionEngine.h"
#include "mk/Transforms/LoweringPlan.h"
#include "mk/Transforms/TileWalk.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <cstdio>
#include <numbers>

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::to_emitc;

namespace {

/// An index as the size_t the device library's calls take (the conversion's casts cancel).
Value toSizeT(OpBuilder &b, Location loc, Value index) {
  return UnrealizedConversionCastOp::create(b, loc, emitc::SizeTType::get(b.getContext()), index)
      .getResult(0);
}

/// The pass of the one attention step of `block` the plan gave the engine.
AttentionPass passIn(Block *block) {
  AttentionBlockOp step;
  block->walk([&](AttentionBlockOp found) {
    if (loweringOf(found) == Lowering::mma)
      step = found;
  });
  return *attentionPassOf(step);
}

/// A loop of `loop`'s bounds without its carried values, made at `at`, into which the ops `keep`
/// selects from its body move. The old loop stays, for the caller to erase.
scf::ForOp withoutState(OpBuilder &at, scf::ForOp loop,
                        llvm::function_ref<bool(Operation &)> keep) {
  auto bare = scf::ForOp::create(at, loop.getLoc(), loop.getLowerBound(), loop.getUpperBound(),
                                 loop.getStep());
  for (Operation &op : llvm::make_early_inc_range(loop.getBody()->without_terminator()))
    if (keep(op))
      op.moveBefore(bare.getBody()->getTerminator());
  loop.getInductionVar().replaceAllUsesWith(bare.getInductionVar());
  return bare;
}

/// Whether `op` is index arithmetic, which both of the engine's sides keep.
bool indexArithmetic(Operation &op) {
  return isMemoryEffectFree(&op) && op.getNumRegions() == 0 &&
         llvm::none_of(op.getResultTypes(), llvm::IsaPred<TileType>);
}

/// Erases the pass's tile ops once their work is in the engine's calls: the output's, the loops
/// (with what was not moved out of them), the state's splats and the query's load.
void erasePass(AttentionPass &pass) {
  for (Operation *op :
       {static_cast<Operation *>(pass.store), static_cast<Operation *>(pass.convert),
        static_cast<Operation *>(pass.normalise), static_cast<Operation *>(pass.sum)})
    op->erase();
  pass.outer()->erase();
  for (SplatOp splat : pass.init)
    splat->erase();
  pass.q->erase();
}

/// Makes the tile loop of `branch` (the loop over the role's tiles around `pass`) a loop over the
/// tiles `claim` hands out, until one past the last, longest first: the walk's positions from the
/// last (its rows' last tiles, the causal ones that see the most keys, before their first).
void claimTiles(Block *branch, AttentionPass &pass,
                llvm::function_ref<Value(OpBuilder &, Value positions)> claim) {
  Operation *op = pass.outer();
  while (op->getBlock() != branch)
    op = op->getParentOp();
  auto loop = cast<scf::ForOp>(op);
  Location loc = loop.getLoc();
  OpBuilder b(loop);
  Value positions = loop.getUpperBound();
  Type index = b.getIndexType();
  auto claims = scf::WhileOp::create(b, loc, TypeRange{index}, ValueRange{claim(b, positions)});
  Block *before = b.createBlock(&claims.getBefore(), {}, {index}, {loc});
  ArithIndexOps ops{b, loc};
  scf::ConditionOp::create(b, loc, ops.lt(before->getArgument(0), positions),
                           before->getArgument(0));
  Block *after = b.createBlock(&claims.getAfter(), {}, {index}, {loc});
  Value position = ops.sub(ops.sub(positions, ops.c(1)), after->getArgument(0));
  for (Operation &inner : llvm::make_early_inc_range(loop.getBody()->without_terminator()))
    inner.moveBefore(after, after->end());
  loop.getInductionVar().replaceAllUsesWith(position);
  b.setInsertionPointToEnd(after);
  scf::YieldOp::create(b, loc, claim(b, positions));
  loop.erase();
}

/// What the engine's calls need to know of the kernel: its layout and rank.
struct EngineCalls {
  KernelLayout &layout;
  Value engine;

  /// Tensor map of the 3-D view (D, rows, B * H) of `load`'s or `store`'s tensor, in boxes of
  /// 64 x `boxRows`: a pointer into the launch's maps.
  Value map(OpBuilder &b, Location loc, Value tensor, int64_t boxRows) {
    auto type = cast<DistTensorType>(tensor.getType());
    ArrayRef<int64_t> shape = type.getShape();
    int64_t index = layout.tensorIndex.lookup(tensor);
    int64_t map = layout.tensorMap(
        index, std::nullopt, type.getElementType(),
        {shape[3], type.getLocalExtent(2, layout.mesh), shape[0] * shape[1]}, {64, boxRows, 1});
    auto pointer =
        emitc::PointerType::get(emitc::OpaqueType::get(b.getContext(), "const mk_tensor_map"));
    return call(b, loc, pointer, "mk::tensor_map",
                {kernelArgs(engine.getDefiningOp()), std::to_string(map)})
        .getResult(0);
  }

  /// The first row (this rank's) of tile `tile` of 128 rows along dim 2 of `type`.
  Value row(OpBuilder &b, Location loc, DistTensorType type, Value tile) {
    ArithIndexOps ops{b, loc};
    int64_t extent = type.getShape()[2];
    Value start = layout.numbering.span(ops, extent, 128, tile).start;
    PlacementAttr placement = type.getPlacement();
    if (placement.shardsDim(2)) {
      Value shard = axisIndex(ops, layout.mesh, placement.getAxis(), toIndex(b, loc, layout.node),
                              toIndex(b, loc, layout.gpu));
      start = ops.sub(start, shardStart(ops, type.getShardSplit(2, layout.mesh), shard));
    }
    return toSizeT(b, loc, start);
  }

  /// Head `h` of batch `b` of `type`: its index in the maps' third dim.
  Value head(OpBuilder &b, Location loc, DistTensorType type, ValueRange indices) {
    ArithIndexOps ops{b, loc};
    return toSizeT(b, loc, ops.add(ops.mul(indices[0], ops.c(type.getShape()[1])), indices[1]));
  }
};

} // namespace

LogicalResult StructureLowering::lowerAttentionRole(scf::IfOp branch,
                                                    AttentionEngineAttr engineAttr, Value ctas) {
  Location loc = branch.getLoc();
  MLIRContext *context = branch.getContext();
  Block *role = branch.thenBlock();
  OpBuilder b = OpBuilder::atBlockBegin(role);
  std::string config = "mk::AttentionConfig<" + elementName(engineAttr.getElement()) + ", " +
                       std::to_string(engineAttr.getHeadDim()) + ", 128, " +
                       std::to_string(engineAttr.getStages()) + ">";
  std::string engineType = "mk::AttentionEngine<" + config + ">";
  Operation *engineOp = call(b, loc, emitc::OpaqueType::get(context, engineType), engineType,
                             {std::string("mk_smem")});
  Value engine = engineOp->getResult(0);
  layout.attentionEngines.push_back(engine);
  layout.smemNeeds.push_back("mk::attention_smem_bytes<" + config + ">()");
  EngineCalls calls{layout, engine};

  // The role's body becomes the consumers' branch, and a copy of it the producer's.
  auto [producer, consumer] = splitProducer(role, engineOp, "mk::attention_is_producer");

  // Tiles claimed from the counter: the producer's loading thread claims, the consumers take
  // what it claimed.
  if (FlatSymbolRefAttr counter = engineAttr.getTileCounter()) {
    AttentionPass inProducer = passIn(producer), inConsumer = passIn(consumer);
    // Claims as int, the engine's, made indices by arith (SCF's while lowering takes converted
    // values only).
    auto tile = [&](OpBuilder &cb, emitc::CallOpaqueOp claimed) -> Value {
      return arith::IndexCastOp::create(cb, loc, cb.getIndexType(), claimed.getResult(0));
    };
    Type i32 = IntegerType::get(context, 32);
    int64_t offset = layout.flagOffset.lookup(counter.getValue());
    claimTiles(producer, inProducer, [&](OpBuilder &cb, Value positions) {
      auto word = emitc::PointerType::get(emitc::OpaqueType::get(context, "mk_u32"));
      Value flag =
          call(cb, loc, word, "mk::flag_local", {kernelArgs(engineOp), std::to_string(offset)})
              .getResult(0);
      return tile(cb, call(cb, loc, i32, "mk::attention_claim_tile",
                           {engine, flag, toSizeT(cb, loc, positions), toSizeT(cb, loc, ctas)}));
    });
    claimTiles(consumer, inConsumer, [&](OpBuilder &cb, Value) {
      return tile(cb, call(cb, loc, i32, "mk::attention_next_tile", {engine}));
    });
  }

  // Producer: the query tile's load, then each block's waits and load, in the pass's loops.
  {
    AttentionPass pass = passIn(producer);
    OpBuilder qb(pass.q);
    call(qb, loc, {}, "mk::attention_load_q",
         {engine, calls.map(qb, loc, pass.q.getSource(), 128),
          calls.row(qb, loc, pass.q.getSource().getType(), pass.q.getIndices()[2]),
          calls.head(qb, loc, pass.q.getSource().getType(), pass.q.getIndices())});
    // The sources loop's index arithmetic, and in it the blocks loop's waits and arithmetic.
    OpBuilder lb(pass.outer());
    scf::ForOp sources;
    if (pass.sources) {
      sources = withoutState(lb, pass.sources, indexArithmetic);
      lb.setInsertionPoint(sources.getBody()->getTerminator());
    }
    scf::ForOp blocks = withoutState(
        lb, pass.blocks, [](Operation &op) { return isa<WaitOp>(op) || indexArithmetic(op); });
    OpBuilder kb(blocks.getBody()->getTerminator());
    call(kb, loc, {}, "mk::attention_load_kv",
         {engine, calls.map(kb, loc, pass.k.getSource(), 128),
          calls.map(kb, loc, pass.v.getSource(), 128),
          calls.row(kb, loc, pass.k.getSource().getType(), blocks.getInductionVar()),
          calls.head(kb, loc, pass.k.getSource().getType(), pass.k.getIndices())});
    erasePass(pass);
  }
  // Of the rest, only index arithmetic, the loops that hold the loads, and the producer's
  // waits; one thread of the warpgroup runs them.
  SmallVector<Operation *> rest;
  producer->walk([&](Operation *op) {
    if (isa<WaitOp>(op) ? loweringOf(op) != Lowering::producer : isa<SignalOp>(op))
      rest.push_back(op);
  });
  for (Operation *op : rest)
    op->erase();
  for (Operation &op : llvm::make_early_inc_range(producer->without_terminator()))
    if (!indexArithmetic(op) &&
        !op.walk([](emitc::CallOpaqueOp) { return WalkResult::interrupt(); }).wasInterrupted())
      op.erase();
  beginProducer(producer, engine, "mk::attention_producer_begin", "mk::attention_loader");

  // Consumers: the state from the query tile, each source's blocks in one call, the output.
  {
    AttentionPass pass = passIn(consumer);
    std::string accumulator = "mk::AttentionAccumulator<" + config + ">";
    OpBuilder qb(pass.q);
    Value state =
        call(qb, loc, emitc::OpaqueType::get(context, accumulator), "mk::attention_begin", {engine})
            .getResult(0);
    OpBuilder fb(pass.outer());
    scf::ForOp sources;
    if (pass.sources) {
      sources = withoutState(fb, pass.sources, indexArithmetic);
      fb.setInsertionPoint(sources.getBody()->getTerminator());
    }
    ArithIndexOps ops{fb, loc};
    Value last = sources
                     ? ops.eq(ops.add(sources.getInductionVar(), ops.c(1)), sources.getUpperBound())
                     : arith::ConstantIntOp::create(fb, loc, fb.getI1Type(), 1).getResult();
    ValueRange positions = pass.step.getPositions();
    Value queryTile = positions.empty() ? pass.q.getIndices()[2] : positions[0];
    Value position =
        layout.numbering.span(ops, pass.q.getSource().getType().getShape()[2], 128, queryTile)
            .start;
    char scale[32];
    std::snprintf(scale, sizeof scale, "%af",
                  static_cast<double>(pass.scale() * std::numbers::log2e_v<float>));
    // Blocks [lo, hi) in one call: keys `length` from `first`, consecutive.
    auto fold = [&](OpBuilder &b, Value blocks, Value length, Value first, Value last) {
      call(b, loc, {}, "mk::attention_fold",
           {engine, state, toSizeT(b, loc, blocks), toSizeT(b, loc, length),
            std::string(pass.step.getCausal() ? "true" : "false"), toSizeT(b, loc, position),
            toSizeT(b, loc, first), std::string(scale), last});
    };
    Value lo = pass.blocks.getLowerBound(), hi = pass.blocks.getUpperBound();
    DistTensorType keysType = pass.k.getSource().getType();
    if (pass.keySequence && pass.keySequence.getTensor().getType().getPlacement().getZigzag()) {
      // A zigzag shard's blocks are two chunks of C tiles apart in the sequence: one call each,
      // from one call site.
      DistTensorType shard = pass.keySequence.getTensor().getType();
      int64_t chunk = zigzagChunkTiles(shard, layout.mesh, 128);
      auto parts = scf::ForOp::create(fb, loc, ops.c(0), ops.c(2), ops.c(1));
      OpBuilder pb(parts.getBody()->getTerminator());
      ArithIndexOps pops{pb, loc};
      Value part = parts.getInductionVar();
      Value partLo = pops.add(lo, pops.mul(part, pops.c(chunk)));
      Value partHi = pops.min(hi, pops.add(partLo, pops.c(chunk)));
      Value blocks = pops.select(pops.lt(partLo, partHi), pops.sub(partHi, partLo), pops.c(0));
      Value first = pops.mul(sequenceTile(pops, shard, layout.mesh, 128, partLo), pops.c(128));
      Value lastPart = arith::AndIOp::create(pb, loc, last, pops.eq(part, pops.c(1)));
      fold(pb, blocks, pops.mul(blocks, pops.c(128)), first, lastPart);
    } else {
      // The source's keys, from its first block's first to its last block's last (tiles of one
      // shard, consecutive), where the program's tile numbering puts them.
      Value any = ops.lt(lo, hi);
      Value blocks = ops.select(any, ops.sub(hi, lo), ops.c(0));
      auto span = [&](Value tile) {
        return layout.numbering.span(ops, keysType.getShape()[2], 128, tile);
      };
      Value first = span(lo).start;
      TileSpan<Value> lastBlock = span(ops.select(any, ops.sub(hi, ops.c(1)), lo));
      Value length =
          ops.select(any, ops.sub(ops.add(lastBlock.start, lastBlock.size), first), ops.c(0));
      fold(fb, blocks, length, first, last);
    }
    // The output, where the store was (after the waits before it).
    OpBuilder sb(pass.store);
    DistTensorType out = pass.store.getDest().getType();
    call(sb, loc, {}, "mk::attention_store",
         {engine, state, calls.map(sb, loc, pass.store.getDest(), 64),
          calls.row(sb, loc, out, pass.store.getIndices()[2]),
          calls.head(sb, loc, out, pass.store.getIndices()), std::string("nullptr"),
          std::string("0")},
         {elementName(out.getElementType())});
    erasePass(pass);
  }
  OpBuilder consumerBegin = OpBuilder::atBlockBegin(consumer);
  call(consumerBegin, loc, {}, "mk::attention_consumer_begin", {engine});
  awaitProxyReads(consumer);
  OpBuilder end(consumer->getTerminator());
  call(end, loc, {}, "mk::attention_finish", {engine});
  return success();
}
