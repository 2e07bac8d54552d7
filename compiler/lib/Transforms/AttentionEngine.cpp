//===- AttentionEngine.cpp - which attention the attention engine computes ===//

#include "mk/Transforms/AttentionEngine.h"

#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <cmath>

using namespace mlir;
using namespace mlir::mk;

float AttentionPass::scale() {
  if (std::optional<APFloat> scale = step.getScale())
    return scale->convertToFloat();
  return 1.0f / std::sqrt(static_cast<float>(headDim()));
}

namespace {

/// The only user of `value`, if it has exactly one use.
Operation *soleUser(Value value) { return value.hasOneUse() ? *value.user_begin() : nullptr; }

/// Whether `load` reads a [128 x D] tile at [b, h, row, :] of a rank-4 tensor.
bool readsRows(LoadOp load, Value b, Value h, Value row) {
  return load && load.getSource().getType().getRank() == 4 &&
         load.getWholeDims() == ArrayRef<int64_t>{3} && load.getIndices().size() == 3 &&
         load.getIndices()[0] == b && load.getIndices()[1] == h && load.getIndices()[2] == row;
}

/// Whether `loop` yields `values`, exactly.
bool yields(scf::ForOp loop, ValueRange values) {
  return llvm::equal(loop.getBody()->getTerminator()->getOperands(), values);
}

/// Whether `splat` makes a tile of `value` used only by `loop`.
bool splatOf(SplatOp splat, double value, scf::ForOp loop) {
  APFloat constant(0.0);
  if (!splat || !matchPattern(splat.getValue(), m_ConstantFloat(&constant)) ||
      soleUser(splat.getResult()) != loop)
    return false;
  return constant.convertToDouble() == value;
}

/// Whether TMA reaches `type` (16-bit, S alone sharded, evenly: every rank's maps have one
/// extent) in the engine's [128 x D] boxes. Along S a tile lies where the program's numbering
/// puts it, in a shard's own rows or a gathered copy's (EngineCalls::row): a partial tile's rows
/// past its shard are clipped, or masked as keys.
bool engineTensor(DistTensorType type, Type element, int64_t headDim, ProgramOp program) {
  PlacementAttr placement = type.getPlacement();
  return type.getElementType() == element && type.getShape()[3] == headDim &&
         (!placement.isSharded() || placement.getDim() == 2) &&
         type.isEvenlySplit(program.getMesh()) && headDim * 2 % 16 == 0;
}

} // namespace

std::optional<AttentionPass> mlir::mk::attentionPassOf(AttentionBlockOp step) {
  AttentionPass pass;
  pass.step = step;
  pass.q = step.getQ().getDefiningOp<LoadOp>();
  pass.k = step.getK().getDefiningOp<LoadOp>();
  pass.v = step.getV().getDefiningOp<LoadOp>();
  pass.blocks = dyn_cast<scf::ForOp>(step->getParentOp());
  if (!pass.blocks)
    return std::nullopt;
  // Several sources, or one (its loop folded away): the blocks loop starts from the splats.
  if (!pass.blocks.getInitArgs().empty() && !pass.blocks.getInitArgs()[0].getDefiningOp<SplatOp>())
    pass.sources = dyn_cast<scf::ForOp>(pass.blocks->getParentOp());
  if (!pass.q || !pass.k || !pass.v || (!pass.sources && pass.blocks.getInitArgs().empty()) ||
      soleUser(pass.q.getResult()) != step || pass.q->getBlock() != pass.outer()->getBlock())
    return std::nullopt;

  // Q, K and V: [128 x D] tiles of one 16-bit type, D 64 or 128.
  TileType tile = pass.q.getResult().getType();
  Type element = tile.getElementType();
  int64_t d = tile.getShape()[1];
  if (!(element.isBF16() || element.isF16()) || tile.getShape()[0] != 128 ||
      (d != 64 && d != 128) || pass.k.getResult().getType() != tile ||
      pass.v.getResult().getType() != tile)
    return std::nullopt;
  ValueRange at = pass.q.getIndices();
  Value j = pass.blocks.getInductionVar();
  // K and V of one head, of any index (grouped-query heads: h / (H / Hkv)).
  ValueRange kAt = pass.k.getIndices();
  if (at.size() != 3 || !readsRows(pass.q, at[0], at[1], at[2]) || kAt.size() != 3 ||
      !readsRows(pass.k, kAt[0], kAt[1], j) || !readsRows(pass.v, kAt[0], kAt[1], j))
    return std::nullopt;
  // The step's positions: the query tile's and the block's, or their tiles of the sequence
  // (causal needs them).
  ValueRange positions = step.getPositions();
  auto sequenceOf = [](Value position, Value index) -> std::optional<SequenceTileOp> {
    if (position == index)
      return SequenceTileOp();
    auto sequence = position.getDefiningOp<SequenceTileOp>();
    if (sequence && sequence.getIndex() == index && sequence.getTile() == 128)
      return sequence;
    return std::nullopt;
  };
  if (positions.empty() && step.getCausal())
    return std::nullopt;
  if (!positions.empty()) {
    std::optional<SequenceTileOp> query = sequenceOf(positions[0], at[2]),
                                  key = sequenceOf(positions[1], j);
    if (positions.size() != 2 || !query || !key)
      return std::nullopt;
    pass.keySequence = *key;
  }
  if (std::optional<APFloat> scale = step.getScale(); scale && !(scale->convertToFloat() > 0))
    return std::nullopt;

  // The state: carried by the blocks loop from the sources loop's, which starts it from splats.
  scf::ForOp outer = pass.outer();
  if (pass.blocks.getNumRegionIterArgs() != 3 ||
      !llvm::equal(ValueRange{step.getAcc(), step.getRowMax(), step.getRowSum()},
                   pass.blocks.getRegionIterArgs()) ||
      !yields(pass.blocks, step.getResults()) || !matchPattern(pass.blocks.getStep(), m_One()) ||
      outer.getNumRegionIterArgs() != 3 || !matchPattern(outer.getStep(), m_One()))
    return std::nullopt;
  if (pass.sources && (!llvm::equal(pass.blocks.getInitArgs(), pass.sources.getRegionIterArgs()) ||
                       !yields(pass.sources, pass.blocks.getResults())))
    return std::nullopt;
  for (Value init : outer.getInitArgs())
    pass.init.push_back(init.getDefiningOp<SplatOp>());
  if (!splatOf(pass.init[0], 0.0, outer) || !splatOf(pass.init[1], -INFINITY, outer) ||
      !splatOf(pass.init[2], 0.0, outer))
    return std::nullopt;
  // The loops' bodies: waits and index arithmetic besides.
  for (Operation &op : pass.blocks.getBody()->without_terminator())
    if (&op != pass.k && &op != pass.v && &op != step && !isa<WaitOp>(op) &&
        !(isMemoryEffectFree(&op) && llvm::none_of(op.getResultTypes(), llvm::IsaPred<TileType>)))
      return std::nullopt;
  if (pass.sources)
    for (Operation &op : pass.sources.getBody()->without_terminator())
      if (&op != pass.blocks && !(isMemoryEffectFree(&op) && op.getNumRegions() == 0 &&
                                  llvm::none_of(op.getResultTypes(), llvm::IsaPred<TileType>)))
        return std::nullopt;
  if (!pass.k->hasOneUse() || !pass.v->hasOneUse())
    return std::nullopt;

  // The output: the state's output over its sum, converted to 16 bits and stored at the query's.
  ValueRange state = outer.getResults();
  pass.normalise = dyn_cast_or_null<DivOp>(soleUser(state[0]));
  pass.sum = dyn_cast_or_null<BroadcastOp>(soleUser(state[2]));
  if (!pass.normalise || !pass.sum || !state[1].use_empty() || pass.sum.getDim() != 1 ||
      pass.normalise.getLhs() != state[0] || pass.normalise.getRhs() != pass.sum.getResult() ||
      !pass.sum->hasOneUse())
    return std::nullopt;
  pass.convert = dyn_cast_or_null<ConvertOp>(soleUser(pass.normalise.getResult()));
  if (!pass.convert ||
      pass.convert.getResult().getType().getElementType().getIntOrFloatBitWidth() != 16)
    return std::nullopt;
  pass.store = dyn_cast_or_null<StoreOp>(soleUser(pass.convert.getResult()));
  if (!pass.store || pass.store.getDest().getType().getRank() != 4 ||
      pass.store.getWholeDims() != ArrayRef<int64_t>{3} ||
      !llvm::equal(pass.store.getIndices(), at))
    return std::nullopt;

  return pass;
}

std::optional<AttentionPass> mlir::mk::attentionEnginePass(AttentionBlockOp step) {
  std::optional<AttentionPass> pass = attentionPassOf(step);
  if (!pass)
    return std::nullopt;
  // A zigzag shard's blocks: all of one source's (the engine folds each of its two chunks).
  if (SequenceTileOp key = pass->keySequence;
      key && key.getTensor().getType().getPlacement().getZigzag()) {
    auto range = pass->blocks.getLowerBound().getDefiningOp<ShardRangeOp>();
    if (!range || pass->blocks.getUpperBound() != range.getHi() ||
        range.getTensor() != key.getTensor() || range.getTile() != key.getTile())
      return std::nullopt;
  }
  // Tensors TMA reaches in the engine's boxes.
  auto program = step->getParentOfType<ProgramOp>();
  Type element = pass->q.getResult().getType().getElementType();
  int64_t d = pass->headDim();
  Type out = pass->convert.getResult().getType().getElementType();
  if (!engineTensor(pass->q.getSource().getType(), element, d, program) ||
      !engineTensor(pass->k.getSource().getType(), element, d, program) ||
      !engineTensor(pass->v.getSource().getType(), element, d, program) ||
      !engineTensor(pass->store.getDest().getType(), out, d, program))
    return std::nullopt;
  return pass;
}
