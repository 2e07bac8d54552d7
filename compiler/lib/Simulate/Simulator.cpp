//===- Simulator.cpp - the scheduled level run on the CPU -----------------===//
//
// Makes every launch's inputs, evaluates what the program means for them, then runs one machine
// per seed over all the launches.
//
//===----------------------------------------------------------------------===//

#include "mk/Simulate/Simulator.h"

#include "Machine.h"

#include "mk/Transforms/TileWalk.h"

#include <cmath>
#include <limits>
#include <numeric>
#include <random>

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::sim;

std::string_view sim::stringify(FindingKind kind) {
  switch (kind) {
  case FindingKind::deadlock:
    return "deadlock";
  case FindingKind::unguardedRead:
    return "unguarded read";
  case FindingKind::outsidePart:
    return "access outside a rank's part";
  case FindingKind::unwritten:
    return "unwritten output";
  case FindingKind::wrongResult:
    return "wrong result";
  case FindingKind::notEnding:
    return "no end";
  }
  llvm_unreachable("unknown finding");
}

namespace {

/// The threads of control mk-sim models at most: their vector clocks take threads^2 words.
constexpr int64_t kMaxThreads = 8192;

/// What an argument is to the program, for its random values.
enum class Role { values, experts, weights };

/// The values of argument `index` of every rank for one launch: one global tensor for sharded and
/// replicated arguments (each rank its part), one per rank for symmetric ones. Expert indices
/// are top_k distinct experts per token; routing weights lie in (0, 1]; other values in [-1, 1);
/// outputs are NaN.
std::vector<TensorData> inputsOf(DistTensorType type, MeshAttr mesh, const TileNumbering &numbering,
                                 Role role, int64_t numExperts, bool output, std::mt19937_64 &rng) {
  int64_t world = mesh.getWorldSize();
  Layout whole = Layout::of(type, mesh, numbering, 0, 0);
  whole.local = whole.global;
  whole.first.assign(whole.rank(), 0);
  auto fill = [&](TensorData &t) {
    Type element = t.layout.type.getElementType();
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    if (output) {
      std::fill(t.data.begin(), t.data.end(), NAN);
    } else if (role == Role::experts) {
      int64_t topK = t.layout.global[1];
      std::vector<int64_t> experts(numExperts);
      for (size_t row = 0; row < t.data.size() / topK; ++row) {
        std::iota(experts.begin(), experts.end(), 0);
        std::shuffle(experts.begin(), experts.end(), rng);
        for (int64_t j = 0; j < topK; ++j)
          t.data[row * topK + j] = float(experts[j % numExperts]);
      }
    } else if (role == Role::weights) {
      std::uniform_real_distribution<float> weight(0.0625f, 1.0f);
      for (float &v : t.data)
        v = roundTo(element, weight(rng));
    } else if (element.isInteger()) {
      std::uniform_int_distribution<int> small(0, 7);
      for (float &v : t.data)
        v = float(small(rng));
    } else {
      for (float &v : t.data)
        v = roundTo(element, value(rng));
    }
  };
  auto part = [&](const TensorData &global, int64_t r) {
    TensorData local(Layout::of(type, mesh, numbering, r / mesh.getGpus(), r % mesh.getGpus()));
    local.layout.held().forEach([&](ArrayRef<int64_t> at) { local.at(at) = global.at(at); });
    return local;
  };
  std::vector<TensorData> ranks;
  if (type.getPlacement().getKind() == PlacementKind::symmetric) {
    for (int64_t r = 0; r < world; ++r) {
      TensorData global(whole);
      fill(global);
      ranks.push_back(part(global, r));
    }
    return ranks;
  }
  TensorData global(whole);
  fill(global);
  for (int64_t r = 0; r < world; ++r)
    ranks.push_back(part(global, r));
  return ranks;
}

} // namespace

FailureOr<SimulationReport> sim::simulate(ProgramOp reference, ProgramOp scheduled,
                                          const SimulationOptions &options) {
  MeshAttr mesh = scheduled.getMesh();
  Block &body = reference.getBodyBlock(), &scheduledBody = scheduled.getBodyBlock();
  if (body.getArgumentTypes() != scheduledBody.getArgumentTypes())
    return scheduled.emitError() << "mk-sim: @" << scheduled.getSymName()
                                 << " does not take the arguments of the program it simulates";
  // Every thread of control keeps a vector clock over all of them.
  int64_t threads = mesh.getWorldSize() * (*scheduled.getGrid() + 1);
  if (threads > kMaxThreads || options.launches > std::numeric_limits<uint16_t>::max())
    return scheduled.emitError() << "mk-sim: models at most " << kMaxThreads
                                 << " threads of control (CTAs and copy engines of every rank) "
                                    "and 65535 launches; this program has "
                                 << threads << " and " << options.launches;
  SimulationReport report;
  TileNumbering scheduledNumbering = TileNumbering::of(scheduled);
  WalkResult walks = scheduled.walk([&](TileGridOp grid) {
    return failed(TileWalk::get(grid, mesh, scheduledNumbering)) ? WalkResult::interrupt()
                                                                 : WalkResult::advance();
  });
  if (walks.wasInterrupted()) {
    report.refused = true;
    return report;
  }

  // What each argument holds: expert indices and routing weights need values of their own.
  int64_t arguments = body.getNumArguments();
  std::vector<Role> roles(arguments, Role::values);
  std::vector<int64_t> numExperts(arguments, 0);
  reference.walk([&](Operation *op) {
    if (auto dispatch = dyn_cast<DispatchOp>(op))
      if (auto arg = dyn_cast<BlockArgument>(dispatch.getExperts())) {
        roles[arg.getArgNumber()] = Role::experts;
        numExperts[arg.getArgNumber()] = dispatch.getRouted().getType().getShape()[0];
      }
    if (auto combine = dyn_cast<CombineOp>(op))
      if (auto arg = dyn_cast<BlockArgument>(combine.getWeights()))
        roles[arg.getArgNumber()] = Role::weights;
  });

  // The arguments the program writes are its outputs; the others its inputs.
  SmallVector<bool> outputs(arguments, false);
  reference.walk([&](Operation *op) {
    auto effects = dyn_cast<MemoryEffectOpInterface>(op);
    if (!effects)
      return;
    for (BlockArgument arg : body.getArguments())
      if (effects.getEffectOnValue<MemoryEffects::Write>(arg))
        outputs[arg.getArgNumber()] = true;
  });

  TileNumbering numbering = TileNumbering::of(reference);
  std::vector<Launch> launches;
  for (int64_t l = 0; l < options.launches; ++l) {
    Launch &launch = launches.emplace_back();
    launch.inputs.resize(mesh.getWorldSize());
    for (int64_t a = 0; a < arguments; ++a) {
      std::mt19937_64 rng(options.dataSeed * 1000003 + l * 1009 + a);
      auto type = cast<DistTensorType>(body.getArgument(a).getType());
      std::vector<TensorData> values =
          inputsOf(type, mesh, numbering, roles[a], numExperts[a], outputs[a], rng);
      for (int64_t r = 0; r < mesh.getWorldSize(); ++r)
        launch.inputs[r].push_back(std::move(values[r]));
    }
    FailureOr<ReferenceResult> expected = evaluateReference(reference, launch.inputs);
    if (failed(expected))
      return failure();
    launch.expected = std::move(*expected);
  }

  for (int64_t s = 0; s < options.seeds; ++s) {
    FailureOr<MachineResult> machine =
        runMachine(scheduled, launches, outputs, options.firstSeed + s, options);
    if (failed(machine))
      return failure();
    ++report.interleavings;
    report.steps += machine->steps;
    llvm::append_range(report.findings, machine->findings);
    if (!report.findings.empty())
      break;
  }
  return report;
}
