//===- Semantics.h - the meaning of mk's compute ops ------------*- C++ -*-===//
//
// What each op that computes computes, in f32 with the rounding of its result type: index and
// scalar arith, the tile ops (convert, elementwise, activations, broadcast, reduce, splat,
// attention blocks), matmul over panels of memory, accumulation over staging slots, and expert
// routing. The program-level reference and the scheduled machine both evaluate ops through these,
// so that they differ only in where data lives and when it moves.
//
//===----------------------------------------------------------------------===//

#ifndef MK_SIMULATE_SEMANTICS_H
#define MK_SIMULATE_SEMANTICS_H

#include "Memory.h"
#include "mk/Transforms/AttentionEngine.h"

#include <optional>

namespace mlir::mk::sim {

/// The results of `op` if it computes on values alone (arith ops, mk.convert, elementwise ops,
/// mk.activation, mk.swiglu, mk.broadcast, mk.reduce, mk.splat, and mk.attention_block given
/// where its rows lie, attentionRows); nullopt for any other op. `operands` are the op's
/// operands' values.
std::optional<SmallVector<SimValue>> evaluatePure(Operation *op, ArrayRef<SimValue> operands,
                                                  const AttentionRows<int64_t> *rows = nullptr);

/// The box of an mk.matmul operand: the panel of the result tile's rows (`lhs`) or columns, over
/// the whole contracted dim; and the matmul of two such panels (zero past the tensors' edges).
Box matmulPanel(const Layout &layout, ArrayRef<int64_t> indices, ArrayRef<int64_t> wholeDims,
                int64_t extent);
Tile matmul(MatmulOp op, const TensorData &lhs, const Box &lhsPanel, const TensorData &rhs,
            const Box &rhsPanel);

/// mk.accumulate over `box` of `source`: its leading dims beyond the tile's are the slots combined.
Tile accumulate(const TensorData &source, const Box &box, ReduceKind kind, TileType type);

/// How tokens are routed to experts (the meaning of mk.dispatch): token by
/// token, in order, each of its top_k copies takes the next slot of its expert, up to the
/// capacity; a copy past it is dropped.
struct Routing {
  /// [expert][slot]: token * top_k + j, or -1 for an empty slot.
  std::vector<std::vector<int64_t>> origins;
  /// The rows each expert received (at most the capacity).
  std::vector<int64_t> counts;
  /// [token * top_k + j]: where that copy went, expert * capacity + slot, or -1 if dropped.
  std::vector<int64_t> placement;
};
/// `experts` holds [T, top_k] expert indices in [0, numExperts), row-major.
Routing route(ArrayRef<int64_t> experts, int64_t numExperts, int64_t capacity);

} // namespace mlir::mk::sim

#endif // MK_SIMULATE_SEMANTICS_H
