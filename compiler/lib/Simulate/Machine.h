//===- Machine.h - one interleaving of a scheduled program ------*- C++ -*-===//
//
// The scheduled level run as Simulator.h describes: every rank's CTAs (and copy engines) as
// threads of control, transfers in flight, flags, launches back to back, and the checks. One
// machine runs one seed's interleaving over all launches.
//
//===----------------------------------------------------------------------===//

#ifndef MK_SIMULATE_MACHINE_H
#define MK_SIMULATE_MACHINE_H

#include "Reference.h"

#include "mk/Simulate/Simulator.h"

namespace mlir::mk::sim {

/// What the host gives one launch and what the program means for it.
struct Launch {
  /// Every rank's arguments as the launch starts: its inputs (outputs are taken from the first
  /// launch only, poisoned).
  RankArguments inputs;
  ReferenceResult expected;
};

struct MachineResult {
  std::vector<Finding> findings;
  uint64_t steps = 0;
};

/// Runs the interleaving of `seed` of `program` over `launches`; `outputs` marks the arguments
/// the program writes. Fails, with an error at the op, on what the machine does not model.
FailureOr<MachineResult> runMachine(ProgramOp program, ArrayRef<Launch> launches,
                                    ArrayRef<bool> outputs, uint64_t seed,
                                    const SimulationOptions &options);

} // namespace mlir::mk::sim

#endif // MK_SIMULATE_MACHINE_H
