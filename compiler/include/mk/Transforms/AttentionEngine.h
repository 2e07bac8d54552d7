//===- AttentionEngine.h - which attention the attention engine computes -*- C++ -*-===//
//
// The attention engine (runtime/device/mk/device/attention_engine.cuh) computes a 128-row query
// tile's attention over key blocks of 128 rows with online softmax, from 16-bit Q, K and V of head
// dim 64 or 128, and stores the normalised output in 16 bits. In a tile program that is a query
// tile's load, a state of three splats (output 0, maximum -inf, sum 0) carried through a loop
// over the sources (a ring's shards) and, inside it, a loop over one source's key blocks, each
// loading a block of K and of V and folding it in with mk.attention_block; then the output divided
// by the sum, converted and stored. The engine's producer walks the same loops to load, waiting
// where the program waits; its consumers fold each source's blocks in one engine call.
//
//===----------------------------------------------------------------------===//

#ifndef MK_TRANSFORMS_ATTENTIONENGINE_H
#define MK_TRANSFORMS_ATTENTIONENGINE_H

#include "mk/IR/MkOps.h"
#include "mk/Transforms/TileNumbering.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::mk {

/// Where an attention step's rows lie in the sequence (the dim before the last): its first query's
/// and first key's positions, and how many of k's rows are keys.
template <typename Index> struct AttentionRows { Index queryFirst, keyFirst, keys; };

/// The rows of `step` (mk.attention_block), `valueOf` giving the index values it depends on. Its
/// `at` coordinates are tiles of its q and k: where those are loaded from a tensor, at the places
/// the program's tile numbering gives that tensor's tiles, else at i * rows. The rows of a loaded
/// k past its tensor's end, or its shard's (a partial tile's), are not keys.
template <typename Ops>
AttentionRows<typename Ops::Index>
attentionRows(Ops &ops, AttentionBlockOp step, const TileNumbering &numbering,
              llvm::function_ref<typename Ops::Index(Value)> valueOf) {
  using Index = typename Ops::Index;
  // The span of tile `at` (the load's own where none is given) of `tile`'s rows.
  auto along = [&](Value tile, std::optional<Value> at) -> TileSpan<Index> {
    int64_t rows = cast<TileType>(tile.getType()).getShape()[0];
    auto load = tile.getDefiningOp<LoadOp>();
    if (!load)
      return {at ? ops.mul(valueOf(*at), ops.c(rows)) : ops.c(0), ops.c(rows)};
    DistTensorType type = load.getSource().getType();
    int64_t d = type.getRank() - 2;
    ArrayRef<int64_t> whole = load.getWholeDims();
    if (llvm::is_contained(whole, d))
      return {ops.c(0), ops.c(type.getShape()[d])};
    Value index = load.getIndices()[d - llvm::count_if(whole, [&](int64_t w) { return w < d; })];
    return numbering.span(ops, type.getShape()[d], rows, valueOf(at ? *at : index));
  };
  ValueRange positions = step.getPositions();
  auto at = [&](int64_t i) {
    return positions.empty() ? std::nullopt : std::optional<Value>(positions[i]);
  };
  TileSpan<Index> query = along(step.getQ(), at(0)), key = along(step.getK(), at(1));
  return {query.start, key.start, along(step.getK(), std::nullopt).size};
}

/// The ops of one query tile's attention on the engine, found from its step.
struct AttentionPass {
  LoadOp q;                     // Q[b, h, i, :], [128 x D]
  SmallVector<SplatOp, 3> init; // the state before any key: output, maximum, sum
  scf::ForOp sources;           // carries the state over the sources, in steps of 1 (none where
                                // there is one source)
  scf::ForOp blocks;            // over one source's key blocks, in steps of 1
  LoadOp k, v;                  // K[b', g, j, :] and V[b', g, j, :] of block j: one head of
                                // any index (g = h / (H / Hkv) for grouped-query heads)
  AttentionBlockOp step;
  SequenceTileOp keySequence; // the block's tile of the sequence, where it is not j
  BroadcastOp sum;            // the sum down the output's columns
  DivOp normalise;
  ConvertOp convert; // to 16 bits
  StoreOp store;     // O[b, h, i, :]

  /// The outermost loop: over the sources, or the blocks of the one.
  scf::ForOp outer() { return sources ? sources : blocks; }
  /// The head dim D.
  int64_t headDim() { return q.getResult().getType().getShape()[1]; }
  /// The softmax scale: the step's, or 1 / sqrt(D).
  float scale();
};

/// The pass `step` is the step of, if it has the engine's shape: the ops above, in one block
/// but for the loops' bodies, each used only as described; the loops' bodies otherwise only waits
/// and index arithmetic; 16-bit [B, H, S, D] tensors (S alone sharded) that TMA addresses in
/// [128 x D] tiles; D 64 or 128; a causal step at the query tile's and the block's coordinates, or
/// their tiles of the sequence (mk.sequence_tile).
std::optional<AttentionPass> attentionEnginePass(AttentionBlockOp step);

/// The same without the tensors' checks, which need the program: the lowering's view of a pass
/// the plan chose, once the program's body has moved into the kernel.
std::optional<AttentionPass> attentionPassOf(AttentionBlockOp step);

} // namespace mlir::mk

#endif // MK_TRANSFORMS_ATTENTIONENGINE_H
