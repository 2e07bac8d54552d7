//===- Simulator.h - the scheduled level run on the CPU ---------*- C++ -*-===//
//
// mk-sim executes a scheduled program (after mk-insert-signals) for every rank of its topology,
// at the shapes it was specialized for, and compares what it computes with the program's meaning
// (the same program, specialized, evaluated directly). It models what the scheduled level
// promises and nothing below it:
//
//   - every CTA of every role is an independent thread of control, walking its tiles as the
//     lowering walks them (TileWalk);
//   - a store lands at once; a put or a copy to a GPU or a node lands after a random delay, but
//     before any signal the same thread issues after it over NVLink (to any GPU of the node:
//     the device code's system-scope release) or through the proxy to the same node; a copy reads
//     its source when it lands;
//   - flags count arrivals and are never reset; a wait of launch e for `count c` waits for e x c;
//     the copy engines wait for their flag's count, copy, set their flag to the epoch and clear
//     the one they waited on;
//   - launches follow each other on each rank without host synchronisation (or, for some seeds,
//     with it); a rank's launch ends when its CTAs have and its NVLink transfers have landed;
//     inputs change every launch, and, with varySplit, the CTAs each role takes (a wait counting
//     arrivals per CTA of a role counts that role's CTAs over the launches so far).
//
// Each seed is one random interleaving (which thread runs, when transfers land, how far a rank
// runs ahead). It reports, located at the op: a deadlock (no thread can run and nothing is in
// flight), an unguarded read (a read not ordered after a write of the same element, or a write
// landing on an element an unordered read has read: vector clocks over signals and waits), an
// access outside the part of a tensor a rank holds, output elements a launch did not write, and
// results that differ from the program's meaning beyond bf16 rounding. Timing, caches and the
// GPU's memory model below the scheduled level (TMA, fences) are not modelled.
//
//   SimulationOptions options;
//   FailureOr<SimulationReport> report = simulate(reference, scheduled, options);
//   for (const Finding &f : report->findings) emitError(f.loc) << f.message;
//
//===----------------------------------------------------------------------===//

#ifndef MK_SIMULATE_SIMULATOR_H
#define MK_SIMULATE_SIMULATOR_H

#include "mk/IR/MkOps.h"

#include <string>
#include <vector>

namespace mlir::mk::sim {

struct SimulationOptions {
  /// Launches run back to back on every rank.
  int64_t launches = 3;
  /// Interleavings: seeds [firstSeed, firstSeed + seeds).
  uint64_t firstSeed = 0;
  int64_t seeds = 8;
  /// The inputs' random values (the same for every interleaving).
  uint64_t dataSeed = 1;
  /// Steps of one interleaving before it is reported as not ending.
  uint64_t maxSteps = 50'000'000;
  /// Findings reported per interleaving, at most.
  int64_t maxFindings = 8;
  /// Whether the launches split the grid into the roles in other ways, as the runtime's SM
  /// controller does between launches of one kernel: the compiled split, then every role but the
  /// first at one CTA, then the first at one CTA and the others sharing the rest, in turn.
  bool varySplit = false;
};

enum class FindingKind {
  deadlock,
  unguardedRead,
  outsidePart,
  unwritten,
  wrongResult,
  notEnding,
};

/// The report's name of a kind: "deadlock", "unguarded read", ...
std::string_view stringify(FindingKind kind);

struct Finding {
  FindingKind kind;
  Location loc;
  std::string message;
  uint64_t seed;
};

struct SimulationReport {
  /// The program has a tile walk no lowering defines (TileWalk's error was emitted): it is
  /// refused, not simulated.
  bool refused = false;
  std::vector<Finding> findings;
  int64_t interleavings = 0;
  uint64_t steps = 0;
};

/// Simulates `scheduled` and compares it with `reference`, the same program specialized for the
/// same topology and shapes but not scheduled. Fails, with an error at the op, on what the
/// simulator does not model.
FailureOr<SimulationReport> simulate(ProgramOp reference, ProgramOp scheduled,
                                     const SimulationOptions &options);

} // namespace mlir::mk::sim

#endif // MK_SIMULATE_SIMULATOR_H
