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
  BroadcastOp sum; // the sum down the output's columns
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
/// [128 x D] tiles; D 64 or 128; a causal step at the query tile's and the block's coordinates.
std::optional<AttentionPass> attentionEnginePass(AttentionBlockOp step);

/// The same without the tensors' checks, which need the program: the lowering's view of a pass
/// the plan chose, once the program's body has moved into the kernel.
std::optional<AttentionPass> attentionPassOf(AttentionBlockOp step);

} // namespace mlir::mk

#endif // MK_TRANSFORMS_ATTENTIONENGINE_H
