//===- Reference.h - what a program means -----------------------*- C++ -*-===//
//
// The program level evaluated directly, in f32, for every rank of its topology at once: tile
// grids visit their tiles, collectives combine their contributions by fiat once the grid is done
// on every rank (all-reduce and reduce-scatter sum over the ranks of their axis, all-gather and
// ring shifts read other ranks' shards, dispatch and combine route rows), and nothing is
// scheduled. This is the meaning the scheduled machine's results are compared with.
//
//===----------------------------------------------------------------------===//

#ifndef MK_SIMULATE_REFERENCE_H
#define MK_SIMULATE_REFERENCE_H

#include "Memory.h"

namespace mlir::mk::sim {

/// Every rank's arguments, rank-major.
using RankArguments = std::vector<std::vector<TensorData>>;

struct ReferenceResult {
  /// Every rank's arguments after the program.
  RankArguments arguments;
  /// [rank][argument][element]: whether the program wrote it.
  std::vector<std::vector<std::vector<bool>>> written;
  /// [rank][argument][element]: how far a schedule's rounding may take it from the reference:
  /// for the sum of n contributions of a collective, n roundings of partial sums at most as large
  /// as the sum of their magnitudes (0 elsewhere).
  std::vector<std::vector<std::vector<float>>> slack;
};

/// Evaluates `program` (specialized: shapes and mesh bound) on `arguments`. Fails, with the op's
/// error, on what the reference cannot evaluate or an access outside the part a rank holds.
FailureOr<ReferenceResult> evaluateReference(ProgramOp program, RankArguments arguments);

} // namespace mlir::mk::sim

#endif // MK_SIMULATE_REFERENCE_H
