//===- Machine.cpp - one interleaving of a scheduled program --------------===//

#include "Machine.h"

#include "Semantics.h"

#include "mk/Transforms/TileWalk.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::sim;

namespace {

//===----------------------------------------------------------------------===//
// Happens-before: vector clocks and epochs
//===----------------------------------------------------------------------===//

using Clock = std::vector<uint32_t>;

void join(Clock &into, const Clock &from) {
  for (size_t i = 0; i < from.size(); ++i)
    into[i] = std::max(into[i], from[i]);
}

/// An access: the op (its index in the machine's table of ops, 0 for none), the thread and its
/// launch, and the thread's clock then. Small, as every element of a tensor holds two.
struct Epoch {
  uint32_t op = 0;
  uint16_t thread = 0, launch = 0;
  uint32_t clock = 0;
};

/// Whether the access `e` happened before any access of a thread whose clock is `c`.
bool before(const Epoch &e, const Clock &c) { return !e.op || e.clock <= c[e.thread]; }

/// What the machine knows of an element's accesses since its last plain write.
struct Shadow {
  Epoch write, read;
  int32_t extra = -1; // index of the element's further reads and combining writes
};
struct Extra {
  SmallVector<Epoch, 2> reads, combines;
};

struct Tensor {
  TensorData data;
  /// Whether kernels write it (only such tensors need their accesses ordered).
  bool tracked = false;
  std::vector<Shadow> shadow;
  std::vector<Extra> extras;
  /// The launch that last wrote each element (for outputs).
  std::vector<int32_t> writtenIn;
  /// Copies in flight that have yet to read part of it.
  int64_t sourcesInFlight = 0;
};

struct FlagWord {
  uint64_t count = 0;
  Clock clock;
};

//===----------------------------------------------------------------------===//
// Threads of control and transfers
//===----------------------------------------------------------------------===//

/// Where a thread is: a block of a role, a tile grid, a loop or a branch.
struct Frame {
  Block *block;
  Block::iterator next;
  Operation *owner;
  int64_t iv = 0, ub = 0, step = 1;               // scf.for
  std::vector<SmallVector<int64_t, 4>> tiles;     // mk.tile_grid
  size_t tile = 0;
};

enum class Status { ready, blocked, done };

struct Thread {
  int64_t id, rank, cta = -1; // cta -1: the rank's copy engines
  RoleOp role;
  int64_t roleCta = 0, roleCtas = 1;
  std::vector<Frame> frames;
  DenseMap<Value, SimValue> env;
  Status status = Status::done;
  Clock clock;
  /// Transfers this thread issued that may not have landed: over NVLink, and to each node.
  std::vector<uint64_t> nvlinkInFlight;
  std::map<int64_t, std::vector<uint64_t>> proxyInFlight;
  /// The copy engine's next copy.
  size_t nextCopy = 0;
  /// What it waits for: the op, the flag word, the count.
  Operation *waitOp = nullptr;
  int64_t waitFlag = -1;
  uint64_t waitCount = 0;
};

struct Transfer {
  enum class Kind { put, copy, signal } kind;
  uint64_t id;
  int64_t thread, from, to;
  bool nvlink;
  Operation *op;
  int64_t launch;
  TilePtr tile;
  bool combine = false;
  int64_t tensor = -1, sourceTensor = -1, flag = -1;
  Box box, sourceBox;
  Clock clock;
  Epoch epoch;
  /// Transfers that must land first.
  std::vector<uint64_t> after;
};

struct Rank {
  int64_t node, gpu;
  std::vector<Tensor> tensors;
  std::vector<FlagWord> flags;
  int64_t launch = 0;
  bool running = false;
  std::vector<int64_t> threads, ready;
  int64_t live = 0;
  int64_t nvlinkInFlight = 0;
  Clock end;
  double weight = 1;
};

/// `op`'s location as file:line:col, for a message about another op.
std::string location(Operation *op) {
  if (auto file = dyn_cast<FileLineColLoc>(op->getLoc()))
    return llvm::formatv("{0}:{1}:{2}", file.getFilename().getValue(), file.getLine(),
                         file.getColumn());
  std::string text;
  llvm::raw_string_ostream os(text);
  op->getLoc().print(os);
  return text;
}

std::string coordinates(ArrayRef<int64_t> at) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleaveComma(at, os);
  return text;
}

class Machine {
public:
  Machine(ProgramOp program, ArrayRef<Launch> launches, ArrayRef<bool> outputs, uint64_t seed,
          const SimulationOptions &options)
      : program(program), mesh(program.getMesh()), launches(launches), outputs(outputs),
        options(options), seed(seed), rng(seed * 0x9e3779b97f4a7c15ull + 1) {}

  FailureOr<MachineResult> run();

private:
  // Setting up.
  LogicalResult prepare();
  void startLaunch(int64_t r);
  void completeIfDone(int64_t r);

  // Choosing what happens next.
  bool step();
  void runThread(Thread &thread);
  void land(uint64_t id);

  // Executing ops.
  enum class Outcome { next, blocked, entered };
  FailureOr<Outcome> execute(Thread &thread, Operation *op);
  void endOfBlock(Thread &thread);
  LogicalResult yield(Thread &thread, Operation *terminator);
  FailureOr<Outcome> enterGrid(Thread &thread, TileGridOp grid);
  void engineStep(Thread &thread);

  // Memory.
  Tensor &tensorOf(int64_t r, Value tensor) { return ranks[r].tensors[tensorIds.lookup(tensor)]; }
  int64_t idOf(Value tensor) { return tensorIds.lookup(tensor); }
  int64_t rankOf(int64_t node, int64_t gpu) const { return node * mesh.getGpus() + gpu; }
  bool held(Operation *op, Thread &thread, int64_t r, Value tensor, const Box &box);
  /// Checks and records reads and writes of `box` of tensor `id` of rank `r`.
  void readBox(int64_t r, int64_t id, const Box &box, const Epoch &epoch, const Clock &clock);
  void writeBox(int64_t r, int64_t id, const Box &box, const Epoch &epoch, const Clock &clock,
                bool combine);
  void readElement(Tensor &tensor, int64_t r, int64_t id, int64_t offset, const Epoch &epoch,
                   const Clock &clock);
  void writeElement(Tensor &tensor, int64_t r, int64_t id, int64_t offset, const Epoch &epoch,
                    const Clock &clock, bool combine);
  /// "element [i, j] of TENSOR on rank R", for messages.
  std::string element(const Tensor &tensor, int64_t r, int64_t id, int64_t offset) const;
  Epoch epochOf(Thread &thread, Operation *op) {
    return {opIndex.lookup(op), uint16_t(thread.id), uint16_t(ranks[thread.rank].launch),
            thread.clock[thread.id]};
  }
  Operation *opOf(const Epoch &e) const { return ops[e.op]; }
  /// The word of `flags[indices]`, or nullopt (reported) outside the array.
  std::optional<int64_t> flagIndex(Thread &thread, Operation *op, FlatSymbolRefAttr flags,
                                   ValueRange indices);
  void issue(Transfer transfer, Thread &thread);
  void signalLanded(int64_t r, int64_t flag);

  // Reports.
  void report(FindingKind kind, Location loc, std::string message);
  /// Thread `id` in `launch` (0: its rank's current one), for messages.
  std::string who(int64_t id, int64_t launch = 0) const;
  std::string tensorName(int64_t id) const;
  void checkOutputs(int64_t r);
  void reportDeadlock();

  /// `v` as the thread sees it: its own value, or one of the program's constants.
  SimValue valueOf(Thread &thread, Value v) {
    auto found = thread.env.find(v);
    return found != thread.env.end() ? found->second : constants.lookup(v);
  }
  int64_t integer(Thread &thread, Value v) { return std::get<int64_t>(valueOf(thread, v)); }
  SmallVector<int64_t> integers(Thread &thread, ValueRange values) {
    SmallVector<int64_t> out;
    for (Value v : values)
      out.push_back(integer(thread, v));
    return out;
  }

  ProgramOp program;
  MeshAttr mesh;
  ArrayRef<Launch> launches;
  ArrayRef<bool> outputs;
  const SimulationOptions &options;
  uint64_t seed;
  std::mt19937_64 rng;
  // The seed's way of interleaving.
  double deliverChance = 0.3;
  int64_t burst = 1;
  bool syncLaunches = false;

  DenseMap<Value, int64_t> tensorIds;
  /// The program's ops by index (from 1), for the epochs that name them.
  SmallVector<Operation *> ops{nullptr};
  DenseMap<Operation *, uint32_t> opIndex;
  SmallVector<Value> tensorValues;
  llvm::StringMap<std::pair<int64_t, SmallVector<int64_t>>> flagArrays;
  int64_t flagWords = 0;
  DenseMap<Operation *, TileWalk> walks;
  SmallVector<EngineCopyOp> engineCopies;
  DenseMap<Value, SimValue> constants;

  std::vector<Rank> ranks;
  std::vector<Thread> threads;
  std::map<uint64_t, Transfer> pending;
  std::vector<uint64_t> pendingIds;
  uint64_t nextTransfer = 1;
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> waiters;

  MachineResult result;
  std::set<std::tuple<int, Operation *, Operation *>> reported;
  bool stopped = false;
};

//===----------------------------------------------------------------------===//
// Setting up
//===----------------------------------------------------------------------===//

LogicalResult Machine::prepare() {
  Block &body = program.getBodyBlock();
  program.walk([&](Operation *op) {
    opIndex[op] = ops.size();
    ops.push_back(op);
  });
  for (BlockArgument arg : body.getArguments()) {
    tensorIds[arg] = tensorValues.size();
    tensorValues.push_back(arg);
  }
  for (BufferOp buffer : body.getOps<BufferOp>()) {
    tensorIds[buffer.getResult()] = tensorValues.size();
    tensorValues.push_back(buffer.getResult());
  }
  for (FlagsOp flags : body.getOps<FlagsOp>()) {
    int64_t words = 1;
    for (int64_t e : flags.getShape())
      words *= e;
    flagArrays[flags.getSymName()] = {flagWords, SmallVector<int64_t>(flags.getShape())};
    flagWords += words;
  }
  for (EngineCopyOp copy : body.getOps<EngineCopyOp>())
    engineCopies.push_back(copy);

  // The tensors kernels write, whose accesses need ordering.
  std::vector<bool> tracked(tensorValues.size());
  for (auto [index, output] : llvm::enumerate(outputs))
    tracked[index] = output;
  WalkResult walked = program.walk([&](Operation *op) {
    auto mark = [&](Value v) {
      int64_t id = tensorIds.lookup(v);
      tracked[id] = true;
      if (id < static_cast<int64_t>(outputs.size()) && !outputs[id])
        report(FindingKind::wrongResult, op->getLoc(),
               llvm::formatv("writes argument #{0}, which the program only reads", id));
    };
    if (auto put = dyn_cast<PutOp>(op))
      mark(put.getDest());
    else if (auto copy = dyn_cast<CopyOp>(op))
      mark(copy.getDest());
    else if (auto store = dyn_cast<StoreOp>(op))
      mark(store.getDest());
    else if (auto select = dyn_cast<SelectRoutedOp>(op))
      for (Value v : {select.getRouted(), select.getCounts(), select.getOrigins(),
                      select.getPlacement()})
        mark(v);
    else if (auto combine = dyn_cast<CombineRoutedOp>(op))
      mark(combine.getDest());
    else if (auto engine = dyn_cast<EngineCopyOp>(op))
      mark(engine.getTensor());
    if (auto grid = dyn_cast<TileGridOp>(op)) {
      FailureOr<TileWalk> walk = TileWalk::get(grid, mesh);
      if (failed(walk))
        return WalkResult::interrupt();
      walks.try_emplace(grid, *walk);
    }
    return WalkResult::advance();
  });
  if (walked.wasInterrupted())
    return failure();

  // Values the program computes outside its roles: constants.
  for (Operation &op : body) {
    if (isa<RoleOp, FlagsOp, BufferOp, EngineCopyOp>(op))
      continue;
    SmallVector<SimValue> operands;
    for (Value v : op.getOperands())
      operands.push_back(constants.lookup(v));
    std::optional<SmallVector<SimValue>> values = evaluatePure(&op, operands);
    if (!values)
      return op.emitOpError() << "mk-sim: does not model this op outside a role";
    for (auto [result, value] : llvm::zip(op.getResults(), *values))
      constants[result] = value;
  }

  int64_t world = mesh.getWorldSize(), grid = *program.getGrid();
  int64_t perRank = grid + 1, total = world * perRank;
  if (total > std::numeric_limits<uint16_t>::max() ||
      static_cast<int64_t>(launches.size()) > std::numeric_limits<uint16_t>::max())
    return program.emitError() << "mk-sim: models at most 65535 CTAs and launches";
  std::uniform_real_distribution<double> weight(0.05, 1.0);
  for (int64_t r = 0; r < world; ++r) {
    Rank &rank = ranks.emplace_back();
    rank.node = r / mesh.getGpus();
    rank.gpu = r % mesh.getGpus();
    rank.flags.resize(flagWords);
    rank.end.assign(total, 0);
    rank.weight = weight(rng);
    for (auto [index, value] : llvm::enumerate(tensorValues)) {
      auto type = cast<DistTensorType>(value.getType());
      Tensor &tensor = rank.tensors.emplace_back(Tensor{
          index < outputs.size() ? launches[0].inputs[r][index]
                                 : TensorData(Layout::of(type, mesh, rank.node, rank.gpu), NAN)});
      tensor.tracked = tracked[index];
      if (tensor.tracked) {
        tensor.shadow.resize(tensor.data.data.size());
        tensor.writtenIn.assign(tensor.data.data.size(), 0);
      }
    }
  }
  threads.resize(total);
  for (int64_t r = 0; r < world; ++r) {
    int64_t begin = 0;
    for (RoleOp role : body.getOps<RoleOp>()) {
      int64_t ctas = *role.getCtas();
      for (int64_t c = 0; c < ctas; ++c) {
        Thread &t = threads[r * perRank + begin + c];
        t.id = r * perRank + begin + c;
        t.rank = r;
        t.cta = begin + c;
        t.role = role;
        t.roleCta = c;
        t.roleCtas = ctas;
        ranks[r].threads.push_back(t.id);
      }
      begin += ctas;
    }
    Thread &engine = threads[r * perRank + grid];
    engine.id = r * perRank + grid;
    engine.rank = r;
    if (llvm::any_of(engineCopies, [&](EngineCopyOp c) { return int64_t(c.getFrom()) == ranks[r].gpu; }))
      ranks[r].threads.push_back(engine.id);
  }
  for (Thread &t : threads)
    t.clock.assign(total, 0);

  // The seed's way of interleaving: how soon transfers land, how long a thread runs at once,
  // how far ahead a rank may get (its weight), and whether the host synchronises launches.
  constexpr double chances[] = {0.02, 0.2, 0.5, 0.9};
  constexpr int64_t bursts[] = {1, 8, 64};
  deliverChance = chances[seed % 4];
  burst = bursts[seed / 4 % 3];
  syncLaunches = seed % 5 == 4;
  return success();
}

void Machine::startLaunch(int64_t r) {
  Rank &rank = ranks[r];
  int64_t launch = ++rank.launch;
  // The host writes this launch's inputs, after the last launch (stream order).
  const std::vector<TensorData> &inputs = launches[launch - 1].inputs[r];
  for (size_t a = 0; a < outputs.size(); ++a)
    if (!outputs[a])
      rank.tensors[a].data = inputs[a];
  rank.running = true;
  rank.live = rank.threads.size();
  rank.ready.clear();
  for (int64_t id : rank.threads) {
    Thread &t = threads[id];
    t.frames.clear();
    t.env.clear();
    t.nextCopy = 0;
    t.clock = rank.end;
    ++t.clock[id];
    t.status = Status::ready;
    if (t.cta >= 0) {
      Block &block = t.role.getBody().front();
      t.frames.push_back(Frame{&block, block.begin(), t.role});
    }
    rank.ready.push_back(id);
  }
  if (rank.threads.empty())
    completeIfDone(r);
}

void Machine::completeIfDone(int64_t r) {
  Rank &rank = ranks[r];
  if (!rank.running || rank.live || rank.nvlinkInFlight)
    return;
  rank.running = false;
  for (int64_t id : rank.threads)
    join(rank.end, threads[id].clock);
  checkOutputs(r);
}

//===----------------------------------------------------------------------===//
// Choosing what happens next
//===----------------------------------------------------------------------===//

FailureOr<MachineResult> Machine::run() {
  if (failed(prepare()))
    return failure();
  for (int64_t r = 0; r < static_cast<int64_t>(ranks.size()); ++r)
    startLaunch(r);
  while (!stopped && step())
    if (++result.steps > options.maxSteps) {
      report(FindingKind::notEnding, program.getLoc(),
             llvm::formatv("the simulation did not end within {0} steps", options.maxSteps));
      break;
    }
  if (stopped && result.findings.empty())
    return failure();
  return std::move(result);
}

bool Machine::step() {
  int64_t launchCount = launches.size();
  // Ranks whose next launch the host may start: at once, or, where the host synchronises,
  // once every rank has finished this one and its transfers have landed.
  SmallVector<int64_t> startable;
  for (auto [r, rank] : llvm::enumerate(ranks)) {
    if (rank.running || rank.launch >= launchCount)
      continue;
    if (syncLaunches &&
        (llvm::any_of(ranks,
                      [&](const Rank &q) {
                        return q.launch < rank.launch || (q.launch == rank.launch && q.running);
                      }) ||
         llvm::any_of(pending, [&](const auto &p) { return p.second.launch <= rank.launch; })))
      continue;
    startable.push_back(r);
  }
  double readyWeight = 0;
  for (Rank &rank : ranks)
    if (!rank.ready.empty())
      readyWeight += rank.weight;

  std::uniform_real_distribution<double> unit(0, 1);
  if (readyWeight == 0 && pending.empty() && startable.empty()) {
    if (llvm::any_of(ranks, [&](const Rank &r) { return r.running || r.launch < launchCount; }))
      reportDeadlock();
    return false;
  }
  if (!pending.empty() && (readyWeight == 0 || unit(rng) < deliverChance)) {
    uint64_t id = pendingIds[rng() % pendingIds.size()];
    // A transfer that must wait for others: land the first of those instead.
    for (uint64_t first : pending.at(id).after)
      if (pending.count(first)) {
        id = first;
        break;
      }
    land(id);
    return true;
  }
  if (!startable.empty() && (readyWeight == 0 || unit(rng) < 0.05)) {
    startLaunch(startable[rng() % startable.size()]);
    return true;
  }
  double pick = unit(rng) * readyWeight;
  for (Rank &rank : ranks) {
    if (rank.ready.empty())
      continue;
    pick -= rank.weight;
    if (pick <= 0 || &rank == &ranks.back()) {
      runThread(threads[rank.ready[rng() % rank.ready.size()]]);
      return true;
    }
  }
  return true;
}

void Machine::runThread(Thread &thread) {
  for (int64_t n = 0; n < burst && thread.status == Status::ready && !stopped; ++n) {
    if (thread.cta < 0) {
      engineStep(thread);
      continue;
    }
    Frame &frame = thread.frames.back();
    if (frame.next == frame.block->end()) {
      endOfBlock(thread);
      continue;
    }
    Operation *op = &*frame.next;
    if (op->hasTrait<OpTrait::IsTerminator>()) {
      if (failed(yield(thread, op)))
        stopped = true;
      continue;
    }
    FailureOr<Outcome> outcome = execute(thread, op);
    if (failed(outcome)) {
      stopped = true;
      return;
    }
    if (*outcome == Outcome::next)
      ++thread.frames.back().next;
  }
  if (thread.status != Status::ready) {
    std::vector<int64_t> &ready = ranks[thread.rank].ready;
    auto it = llvm::find(ready, thread.id);
    std::swap(*it, ready.back());
    ready.pop_back();
  }
}

//===----------------------------------------------------------------------===//
// Control flow
//===----------------------------------------------------------------------===//

void Machine::endOfBlock(Thread &thread) {
  Frame &frame = thread.frames.back();
  if (auto grid = dyn_cast<TileGridOp>(frame.owner)) {
    if (++frame.tile < frame.tiles.size()) {
      for (auto [arg, coord] : llvm::zip(grid.getBodyBlock().getArguments(), frame.tiles[frame.tile]))
        thread.env[arg] = coord;
      frame.next = frame.block->begin();
      return;
    }
  }
  thread.frames.pop_back();
  if (!thread.frames.empty())
    return;
  // The role's block is done: so is the thread.
  thread.status = Status::done;
  Rank &rank = ranks[thread.rank];
  --rank.live;
  completeIfDone(thread.rank);
}

LogicalResult Machine::yield(Thread &thread, Operation *terminator) {
  Frame &frame = thread.frames.back();
  SmallVector<SimValue> values;
  for (Value v : terminator->getOperands())
    values.push_back(valueOf(thread, v));
  if (auto loop = dyn_cast<scf::ForOp>(frame.owner)) {
    frame.iv += frame.step;
    if (frame.iv < frame.ub) {
      thread.env[loop.getInductionVar()] = frame.iv;
      for (auto [arg, value] : llvm::zip(loop.getRegionIterArgs(), values))
        thread.env[arg] = value;
      frame.next = frame.block->begin();
      return success();
    }
  }
  for (auto [result, value] : llvm::zip(frame.owner->getResults(), values))
    thread.env[result] = value;
  thread.frames.pop_back();
  return success();
}

FailureOr<Machine::Outcome> Machine::enterGrid(Thread &thread, TileGridOp grid) {
  const TileWalk &walk = walks.at(grid);
  IntIndexOps ops;
  Rank &rank = ranks[thread.rank];
  TileWalk::Place<int64_t> place{rank.node, rank.gpu, std::nullopt};
  if (Value holder = grid.getHolder())
    place.holder = integer(thread, holder);
  TileWalk::Bound<int64_t> bound = walk.bind(ops, place);
  Frame frame{&grid.getBodyBlock(), grid.getBodyBlock().begin(), grid};
  // Rows past an expert's count are skipped: the grid reads the counts as it starts.
  const Tensor *counts = nullptr;
  SmallVector<int64_t> sizes(grid.getTileSizes());
  if (Value rowCounts = grid.getRowCounts()) {
    counts = &tensorOf(thread.rank, rowCounts);
    readBox(thread.rank, idOf(rowCounts), counts->data.layout.held(), epochOf(thread, grid),
            thread.clock);
  }
  int64_t rowDim = grid.getTargetType().getRank() - 2;
  for (int64_t p = thread.roleCta; p < bound.positions; p += thread.roleCtas) {
    auto tile = walk.tileAt(ops, bound, p, place);
    if (tile.visits && !*tile.visits)
      continue;
    if (counts && tile.coords[rowDim] * sizes[rowDim] >= counts->data.at({tile.coords[0]}))
      continue;
    frame.tiles.emplace_back(tile.coords.begin(), tile.coords.end());
  }
  if (frame.tiles.empty())
    return Outcome::next;
  for (auto [arg, coord] : llvm::zip(grid.getBodyBlock().getArguments(), frame.tiles[0]))
    thread.env[arg] = coord;
  ++thread.frames.back().next;
  thread.frames.push_back(std::move(frame));
  return Outcome::entered;
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

bool Machine::held(Operation *op, Thread &thread, int64_t r, Value tensor, const Box &box) {
  const Layout &layout = tensorOf(r, tensor).data.layout;
  if (layout.holds(box) && !box.empty())
    return true;
  std::string coords;
  llvm::raw_string_ostream os(coords);
  os << "[";
  llvm::interleaveComma(box.lo, os);
  os << "] to [";
  llvm::interleaveComma(box.hi, os);
  os << ")";
  report(FindingKind::outsidePart, op->getLoc(),
         llvm::formatv("{0} reaches elements {1} of {2}, which rank {3} does not hold", who(thread.id),
                       coords, tensorName(tensorIds.lookup(tensor)), r));
  return false;
}

std::optional<int64_t> Machine::flagIndex(Thread &thread, Operation *op, FlatSymbolRefAttr flags,
                                          ValueRange indices) {
  const auto &[offset, shape] = flagArrays.find(flags.getValue())->second;
  int64_t linear = 0;
  SmallVector<int64_t> at = integers(thread, indices);
  for (auto [index, extent] : llvm::zip(at, shape)) {
    if (index < 0 || index >= extent) {
      report(FindingKind::outsidePart, op->getLoc(),
             llvm::formatv("{0} names flag [{1}] of {2}, which has shape [{3}]", who(thread.id),
                           coordinates(at), flags, coordinates(shape)));
      stopped = true;
      return std::nullopt;
    }
    linear = linear * extent + index;
  }
  return offset + linear;
}

FailureOr<Machine::Outcome> Machine::execute(Thread &thread, Operation *op) {
  Rank &rank = ranks[thread.rank];
  SmallVector<SimValue> operands;
  for (Value v : op->getOperands())
    operands.push_back(valueOf(thread, v));
  if (std::optional<SmallVector<SimValue>> results = evaluatePure(op, operands)) {
    for (auto [result, value] : llvm::zip(op->getResults(), *results))
      thread.env[result] = value;
    return Outcome::next;
  }
  auto lookup = [&](Value v) { return valueOf(thread, v); };
  auto ints = [&](ValueRange values) { return integers(thread, values); };
  auto tileOf = [&](Value v) { return std::get<TilePtr>(lookup(v)); };
  auto peerRank = [&](PeerScope scope, Value peer) {
    if (scope == PeerScope::self)
      return thread.rank;
    int64_t p = std::get<int64_t>(lookup(peer));
    return scope == PeerScope::gpu ? rankOf(rank.node, p) : rankOf(p, rank.gpu);
  };
  Epoch me = epochOf(thread, op);

  return llvm::TypeSwitch<Operation *, FailureOr<Outcome>>(op)
      .Case([&](scf::ForOp loop) -> FailureOr<Outcome> {
        int64_t lb = std::get<int64_t>(lookup(loop.getLowerBound()));
        int64_t ub = std::get<int64_t>(lookup(loop.getUpperBound()));
        int64_t stepSize = std::get<int64_t>(lookup(loop.getStep()));
        if (lb >= ub) {
          for (auto [result, init] : llvm::zip(loop.getResults(), loop.getInitArgs()))
            thread.env[result] = lookup(init);
          return Outcome::next;
        }
        thread.env[loop.getInductionVar()] = lb;
        for (auto [arg, init] : llvm::zip(loop.getRegionIterArgs(), loop.getInitArgs()))
          thread.env[arg] = lookup(init);
        ++thread.frames.back().next;
        Frame frame{loop.getBody(), loop.getBody()->begin(), loop};
        frame.iv = lb;
        frame.ub = ub;
        frame.step = stepSize;
        thread.frames.push_back(std::move(frame));
        return Outcome::entered;
      })
      .Case([&](scf::IfOp branch) -> FailureOr<Outcome> {
        bool taken = std::get<int64_t>(lookup(branch.getCondition()));
        Region &region = taken ? branch.getThenRegion() : branch.getElseRegion();
        if (region.empty())
          return Outcome::next;
        ++thread.frames.back().next;
        thread.frames.push_back(Frame{&region.front(), region.front().begin(), branch});
        return Outcome::entered;
      })
      .Case([&](SingleCtaOp single) -> FailureOr<Outcome> {
        if (thread.roleCta != 0)
          return Outcome::next;
        ++thread.frames.back().next;
        Block &block = single.getBody().front();
        thread.frames.push_back(Frame{&block, block.begin(), single});
        return Outcome::entered;
      })
      .Case([&](TileGridOp grid) { return enterGrid(thread, grid); })
      .Case([&](PlaceOp place) -> FailureOr<Outcome> {
        thread.env[place.getNode()] = rank.node;
        thread.env[place.getGpu()] = rank.gpu;
        return Outcome::next;
      })
      .Case([&](OwnerOp owner) -> FailureOr<Outcome> {
        IntIndexOps ops;
        auto [node, gpu] = tileOwner(ops, owner.getTensor().getType(), ints(owner.getIndices()),
                                     owner.getTile(), owner.getRowSlices(), mesh, rank.node,
                                     rank.gpu);
        thread.env[owner.getNode()] = node;
        thread.env[owner.getGpu()] = gpu;
        return Outcome::next;
      })
      .Case([&](ShardRangeOp range) -> FailureOr<Outcome> {
        auto [lo, hi] = shardRange(range.getTensor().getType(), mesh, range.getTile(),
                                   std::get<int64_t>(lookup(range.getIndex())));
        thread.env[range.getLo()] = lo;
        thread.env[range.getHi()] = hi;
        return Outcome::next;
      })
      .Case([&](LoadOp load) -> FailureOr<Outcome> {
        Tensor &tensor = tensorOf(thread.rank, load.getSource());
        TileType type = load.getResult().getType();
        Box box = tensor.data.layout.access(ints(load.getIndices()), load.getWholeDims(),
                                            type.getShape());
        if (!held(op, thread, thread.rank, load.getSource(), box))
          return Outcome::next;
        readBox(thread.rank, idOf(load.getSource()), box, me, thread.clock);
        thread.env[load.getResult()] = std::make_shared<Tile>(readTile(tensor.data, box, type));
        return Outcome::next;
      })
      .Case([&](StoreOp store) -> FailureOr<Outcome> {
        Tensor &tensor = tensorOf(thread.rank, store.getDest());
        TilePtr tile = tileOf(store.getValue());
        Box box = tensor.data.layout.access(ints(store.getIndices()), store.getWholeDims(),
                                            tile->shape);
        if (!held(op, thread, thread.rank, store.getDest(), box))
          return Outcome::next;
        writeBox(thread.rank, idOf(store.getDest()), box, me, thread.clock, /*combine=*/false);
        writeTile(tensor.data, box, *tile);
        return Outcome::next;
      })
      .Case([&](MatmulOp matmul) -> FailureOr<Outcome> {
        TileType type = matmul.getResult().getType();
        Tensor &lhs = tensorOf(thread.rank, matmul.getLhs());
        Tensor &rhs = tensorOf(thread.rank, matmul.getRhs());
        Box lhsPanel = matmulPanel(lhs.data.layout, ints(matmul.getLhsIndices()),
                                   matmul.getLhsWholeDims(), type.getShape()[0]);
        Box rhsPanel = matmulPanel(rhs.data.layout, ints(matmul.getRhsIndices()),
                                   matmul.getRhsWholeDims(), type.getShape()[1]);
        if (!held(op, thread, thread.rank, matmul.getLhs(), lhsPanel) ||
            !held(op, thread, thread.rank, matmul.getRhs(), rhsPanel))
          return Outcome::next;
        readBox(thread.rank, idOf(matmul.getLhs()), lhsPanel, me, thread.clock);
        readBox(thread.rank, idOf(matmul.getRhs()), rhsPanel, me, thread.clock);
        thread.env[matmul.getResult()] =
            std::make_shared<Tile>(sim::matmul(matmul, lhs.data, lhsPanel, rhs.data, rhsPanel));
        return Outcome::next;
      })
      .Case([&](AccumulateOp accumulate) -> FailureOr<Outcome> {
        Tensor &tensor = tensorOf(thread.rank, accumulate.getSource());
        TileType type = accumulate.getResult().getType();
        Box box = tensor.data.layout.access(ints(accumulate.getIndices()),
                                            accumulate.getWholeDims(), type.getShape());
        if (!held(op, thread, thread.rank, accumulate.getSource(), box))
          return Outcome::next;
        readBox(thread.rank, idOf(accumulate.getSource()), box, me, thread.clock);
        thread.env[accumulate.getResult()] =
            std::make_shared<Tile>(sim::accumulate(tensor.data, box, accumulate.getKind(), type));
        return Outcome::next;
      })
      .Case([&](PutOp put) -> FailureOr<Outcome> {
        TilePtr tile = tileOf(put.getValue());
        int64_t to = peerRank(put.getScope(), put.getPeer());
        Tensor &dest = tensorOf(to, put.getDest());
        Box box = dest.data.layout.access(ints(put.getIndices()), put.getWholeDims(), tile->shape);
        if (!held(op, thread, to, put.getDest(), box))
          return Outcome::next;
        if (put.getScope() == PeerScope::self) {
          bool combine = put.getCombine().has_value();
          writeBox(to, idOf(put.getDest()), box, me, thread.clock, combine);
          writeTile(dest.data, box, *tile, combine);
          return Outcome::next;
        }
        Transfer transfer{Transfer::Kind::put};
        transfer.to = to;
        transfer.nvlink = put.getScope() == PeerScope::gpu;
        transfer.op = op;
        transfer.tile = tile;
        transfer.combine = put.getCombine().has_value();
        transfer.tensor = tensorIds.lookup(put.getDest());
        transfer.box = box;
        issue(std::move(transfer), thread);
        return Outcome::next;
      })
      .Case([&](CopyOp copy) -> FailureOr<Outcome> {
        int64_t to = peerRank(copy.getScope(), copy.getPeer());
        Tensor &source = tensorOf(thread.rank, copy.getSource());
        Tensor &dest = tensorOf(to, copy.getDest());
        Box from = source.data.layout.access(ints(copy.getSourceIndices()),
                                             copy.getSourceWholeDims(), copy.getTile());
        Box into = dest.data.layout.access(ints(copy.getDestIndices()), copy.getDestWholeDims(),
                                           copy.getTile());
        if (!held(op, thread, thread.rank, copy.getSource(), from) ||
            !held(op, thread, to, copy.getDest(), into))
          return Outcome::next;
        if (from.elements() != into.elements()) {
          report(FindingKind::outsidePart, op->getLoc(),
                 llvm::formatv("{0} copies {1} elements into a region of {2}", who(thread.id),
                               from.elements(), into.elements()));
          return Outcome::next;
        }
        Transfer transfer{Transfer::Kind::copy};
        transfer.to = to;
        transfer.nvlink = copy.getScope() != PeerScope::node;
        transfer.op = op;
        transfer.tensor = tensorIds.lookup(copy.getDest());
        transfer.box = into;
        transfer.sourceTensor = tensorIds.lookup(copy.getSource());
        transfer.sourceBox = from;
        ++source.sourcesInFlight;
        issue(std::move(transfer), thread);
        return Outcome::next;
      })
      .Case([&](SignalOp signal) -> FailureOr<Outcome> {
        Transfer transfer{Transfer::Kind::signal};
        transfer.to = peerRank(signal.getScope(), signal.getPeer());
        transfer.nvlink = signal.getScope() != PeerScope::node;
        transfer.op = op;
        std::optional<int64_t> flag =
            flagIndex(thread, op, signal.getFlagsAttr(), signal.getIndices());
        if (!flag)
          return Outcome::next;
        transfer.flag = *flag;
        issue(std::move(transfer), thread);
        return Outcome::next;
      })
      .Case([&](WaitOp wait) -> FailureOr<Outcome> {
        std::optional<int64_t> index =
            flagIndex(thread, op, wait.getFlagsAttr(), wait.getIndices());
        if (!index)
          return Outcome::next;
        int64_t flag = *index;
        uint64_t target = uint64_t(rank.launch) * wait.getCount();
        FlagWord &word = rank.flags[flag];
        if (word.count >= target) {
          if (!word.clock.empty())
            join(thread.clock, word.clock);
          return Outcome::next;
        }
        thread.status = Status::blocked;
        thread.waitOp = op;
        thread.waitFlag = flag;
        thread.waitCount = target;
        waiters[{thread.rank, flag}].push_back(thread.id);
        return Outcome::blocked;
      })
      .Case([&](SelectRoutedOp select) -> FailureOr<Outcome> {
        Tensor &tokens = tensorOf(thread.rank, select.getTokens());
        Tensor &experts = tensorOf(thread.rank, select.getExperts());
        readBox(thread.rank, idOf(select.getTokens()), tokens.data.layout.held(), me, thread.clock);
        readBox(thread.rank, idOf(select.getExperts()), experts.data.layout.held(), me,
                thread.clock);
        DistTensorType routedType = select.getRouted().getType();
        int64_t numExperts = routedType.getShape()[0], capacity = routedType.getShape()[1];
        std::vector<int64_t> routes;
        for (float e : experts.data.data)
          routes.push_back(static_cast<int64_t>(e));
        if (!llvm::all_of(routes, [&](int64_t e) { return e >= 0 && e < numExperts; })) {
          report(FindingKind::wrongResult, op->getLoc(),
                 llvm::formatv("{0} routes to an expert outside [0, {1})", who(thread.id),
                               numExperts));
          return Outcome::next;
        }
        Routing routing = route(routes, numExperts, capacity);
        int64_t topK = experts.data.layout.global[1];
        auto fill = [&](Value v, llvm::function_ref<float(ArrayRef<int64_t>)> f) {
          Tensor &tensor = tensorOf(thread.rank, v);
          Box all = tensor.data.layout.held();
          writeBox(thread.rank, idOf(v), all, me, thread.clock, false);
          all.forEach([&](ArrayRef<int64_t> at) {
            tensor.data.at(at) = roundTo(tensor.data.layout.type.getElementType(), f(at));
          });
        };
        fill(select.getRouted(), [&](ArrayRef<int64_t> at) {
          int64_t origin = routing.origins[at[0]][at[1]];
          return origin < 0 ? 0.0f : tokens.data.at({origin / topK, at[2]});
        });
        fill(select.getCounts(), [&](ArrayRef<int64_t> at) { return float(routing.counts[at[0]]); });
        fill(select.getOrigins(),
             [&](ArrayRef<int64_t> at) { return float(routing.origins[at[0]][at[1]]); });
        fill(select.getPlacement(), [&](ArrayRef<int64_t> at) {
          return float(routing.placement[at[0] * topK + at[1]]);
        });
        return Outcome::next;
      })
      .Case([&](CombineRoutedOp combine) -> FailureOr<Outcome> {
        Tensor &results = tensorOf(thread.rank, combine.getResults());
        Tensor &placement = tensorOf(thread.rank, combine.getPlacement());
        Tensor &weights = tensorOf(thread.rank, combine.getWeights());
        Tensor &dest = tensorOf(thread.rank, combine.getDest());
        Box box = dest.data.layout.access(ints(combine.getIndices()), {}, combine.getTile());
        if (!held(op, thread, thread.rank, combine.getDest(), box))
          return Outcome::next;
        Box rows{{box.lo[0], 0}, {box.hi[0], placement.data.layout.global[1]}};
        readBox(thread.rank, idOf(combine.getResults()), results.data.layout.held(), me,
                thread.clock);
        readBox(thread.rank, idOf(combine.getPlacement()), rows, me, thread.clock);
        readBox(thread.rank, idOf(combine.getWeights()), rows, me, thread.clock);
        writeBox(thread.rank, idOf(combine.getDest()), box, me, thread.clock, false);
        int64_t topK = placement.data.layout.global[1];
        int64_t capacity = results.data.layout.global[1];
        Type element = dest.data.layout.type.getElementType();
        box.forEach([&](ArrayRef<int64_t> at) {
          float sum = 0;
          for (int64_t j = 0; j < topK; ++j) {
            int64_t slot = static_cast<int64_t>(placement.data.at({at[0], j}));
            if (slot < 0)
              continue;
            sum += weights.data.at({at[0], j}) *
                   results.data.at({slot / capacity, slot % capacity, at[1]});
          }
          dest.data.at(at) = roundTo(element, sum);
        });
        return Outcome::next;
      })
      .Default([&](Operation *other) -> FailureOr<Outcome> {
        return other->emitOpError() << "mk-sim: does not model this op";
      });
}

//===----------------------------------------------------------------------===//
// Transfers
//===----------------------------------------------------------------------===//

void Machine::issue(Transfer transfer, Thread &thread) {
  transfer.id = nextTransfer++;
  transfer.thread = thread.id;
  transfer.from = thread.rank;
  transfer.launch = ranks[thread.rank].launch;
  transfer.clock = thread.clock;
  transfer.epoch = epochOf(thread, transfer.op);
  auto live = [&](std::vector<uint64_t> &ids) {
    llvm::erase_if(ids, [&](uint64_t id) { return !pending.count(id); });
  };
  int64_t destNode = ranks[transfer.to].node;
  if (transfer.kind == Transfer::Kind::signal) {
    // A signal lands after the data this thread sent before it over the same link: over
    // NVLink, to any GPU; through the proxy, to the same node; to this rank, its own stores.
    std::vector<uint64_t> &inFlight =
        transfer.nvlink ? thread.nvlinkInFlight : thread.proxyInFlight[destNode];
    live(inFlight);
    transfer.after = inFlight;
    // A release: what the thread does next is after it.
    ++thread.clock[thread.id];
  } else {
    std::vector<uint64_t> &inFlight =
        transfer.nvlink ? thread.nvlinkInFlight : thread.proxyInFlight[destNode];
    live(inFlight);
    inFlight.push_back(transfer.id);
  }
  if (transfer.nvlink)
    ++ranks[thread.rank].nvlinkInFlight;
  pendingIds.push_back(transfer.id);
  pending.emplace(transfer.id, std::move(transfer));
}

void Machine::land(uint64_t id) {
  Transfer transfer = std::move(pending.at(id));
  pending.erase(id);
  auto it = llvm::find(pendingIds, id);
  std::swap(*it, pendingIds.back());
  pendingIds.pop_back();

  switch (transfer.kind) {
  case Transfer::Kind::put: {
    Tensor &dest = ranks[transfer.to].tensors[transfer.tensor];
    writeBox(transfer.to, transfer.tensor, transfer.box, transfer.epoch, transfer.clock,
             transfer.combine);
    writeTile(dest.data, transfer.box, *transfer.tile, transfer.combine);
    break;
  }
  case Transfer::Kind::copy: {
    Tensor &source = ranks[transfer.from].tensors[transfer.sourceTensor];
    Tensor &dest = ranks[transfer.to].tensors[transfer.tensor];
    --source.sourcesInFlight;
    readBox(transfer.from, transfer.sourceTensor, transfer.sourceBox, transfer.epoch,
            transfer.clock);
    writeBox(transfer.to, transfer.tensor, transfer.box, transfer.epoch, transfer.clock, false);
    copyBox(source.data, transfer.sourceBox, dest.data, transfer.box);
    break;
  }
  case Transfer::Kind::signal: {
    FlagWord &word = ranks[transfer.to].flags[transfer.flag];
    ++word.count;
    if (word.clock.empty())
      word.clock.assign(transfer.clock.size(), 0);
    join(word.clock, transfer.clock);
    signalLanded(transfer.to, transfer.flag);
    break;
  }
  }
  if (transfer.nvlink) {
    --ranks[transfer.from].nvlinkInFlight;
    completeIfDone(transfer.from);
  }
}

void Machine::signalLanded(int64_t r, int64_t flag) {
  auto found = waiters.find({r, flag});
  if (found == waiters.end())
    return;
  FlagWord &word = ranks[r].flags[flag];
  std::vector<int64_t> still;
  for (int64_t id : found->second) {
    Thread &t = threads[id];
    if (word.count < t.waitCount) {
      still.push_back(id);
      continue;
    }
    if (!word.clock.empty())
      join(t.clock, word.clock);
    t.status = Status::ready;
    t.waitOp = nullptr;
    if (t.cta >= 0)
      ++t.frames.back().next;
    ranks[r].ready.push_back(id);
  }
  if (still.empty())
    waiters.erase(found);
  else
    found->second = std::move(still);
}

/// The copy engines of a rank's GPU: each copy after the one before, once its flag holds its
/// count; then the flag it signals is set to the epoch and the one it waited on is cleared.
void Machine::engineStep(Thread &thread) {
  Rank &rank = ranks[thread.rank];
  while (thread.nextCopy < engineCopies.size() &&
         int64_t(engineCopies[thread.nextCopy].getFrom()) != rank.gpu)
    ++thread.nextCopy;
  if (thread.nextCopy == engineCopies.size()) {
    thread.status = Status::done;
    --rank.live;
    completeIfDone(thread.rank);
    return;
  }
  EngineCopyOp copy = engineCopies[thread.nextCopy];
  int64_t wait = flagArrays.lookup(copy.getWait()).first + copy.getWaitIndex();
  FlagWord &word = rank.flags[wait];
  if (word.count < copy.getCount()) {
    thread.status = Status::blocked;
    thread.waitOp = copy;
    thread.waitFlag = wait;
    thread.waitCount = copy.getCount();
    waiters[{thread.rank, wait}].push_back(thread.id);
    return;
  }
  if (!word.clock.empty())
    join(thread.clock, word.clock);
  word.count = 0;
  int64_t to = rankOf(rank.node, copy.getTo());
  Tensor &source = tensorOf(thread.rank, copy.getTensor());
  Tensor &dest = tensorOf(to, copy.getTensor());
  Box box{{copy.getRows()[0], copy.getCols()[0]}, {copy.getRows()[1], copy.getCols()[1]}};
  Epoch me = epochOf(thread, copy);
  readBox(thread.rank, idOf(copy.getTensor()), box, me, thread.clock);
  writeBox(to, idOf(copy.getTensor()), box, me, thread.clock, false);
  copyBox(source.data, box, dest.data, box);
  int64_t signal = flagArrays.lookup(copy.getSignal()).first + copy.getSignalIndex();
  FlagWord &arrived = ranks[to].flags[signal];
  arrived.count = rank.launch;
  if (arrived.clock.empty())
    arrived.clock.assign(thread.clock.size(), 0);
  join(arrived.clock, thread.clock);
  ++thread.clock[thread.id];
  signalLanded(to, signal);
  ++thread.nextCopy;
}

//===----------------------------------------------------------------------===//
// Memory and its ordering
//===----------------------------------------------------------------------===//

void Machine::readBox(int64_t r, int64_t id, const Box &box, const Epoch &epoch,
                      const Clock &clock) {
  Tensor &tensor = ranks[r].tensors[id];
  if (!tensor.tracked)
    return;
  const Layout &layout = tensor.data.layout;
  box.forEachRow([&](ArrayRef<int64_t> start, int64_t n) {
    int64_t base = layout.offset(start);
    for (int64_t offset = base; offset < base + n; ++offset)
      readElement(tensor, r, id, offset, epoch, clock);
  });
}

void Machine::readElement(Tensor &tensor, int64_t r, int64_t id, int64_t offset,
                          const Epoch &epoch, const Clock &clock) {
  Shadow &shadow = tensor.shadow[offset];
  Extra *extra = shadow.extra >= 0 ? &tensor.extras[shadow.extra] : nullptr;
  auto check = [&](const Epoch &write) {
    if (before(write, clock) || write.thread == epoch.thread ||
        !reported.insert({int(FindingKind::unguardedRead), opOf(epoch), opOf(write)}).second)
      return;
    report(FindingKind::unguardedRead, opOf(epoch)->getLoc(),
           llvm::formatv("{0} reads {1} before the write by {2} at {3} is ordered before it: no "
                         "wait covers that write",
                         who(epoch.thread, epoch.launch), element(tensor, r, id, offset),
                         who(write.thread, write.launch), location(opOf(write))));
  };
  check(shadow.write);
  if (extra)
    for (const Epoch &write : extra->combines)
      check(write);
  // Record the read: one epoch while reads are ordered, all of them once they are not.
  if (!extra && (!shadow.read.op || shadow.read.thread == epoch.thread ||
                 before(shadow.read, clock))) {
    shadow.read = epoch;
    return;
  }
  if (!extra) {
    shadow.extra = tensor.extras.size();
    extra = &tensor.extras.emplace_back();
    extra->reads.push_back(shadow.read);
  }
  auto same = llvm::find_if(extra->reads, [&](const Epoch &e) { return e.thread == epoch.thread; });
  if (same != extra->reads.end())
    *same = epoch;
  else
    extra->reads.push_back(epoch);
}

void Machine::writeBox(int64_t r, int64_t id, const Box &box, const Epoch &epoch,
                       const Clock &clock, bool combine) {
  Tensor &tensor = ranks[r].tensors[id];
  if (!tensor.tracked)
    return;
  // A copy reads its source as it lands: writing there first changes what it carries.
  if (tensor.sourcesInFlight)
    for (const auto &[pendingId, transfer] : pending) {
      if (transfer.kind != Transfer::Kind::copy || transfer.from != r ||
          transfer.sourceTensor != id)
        continue;
      bool overlaps = true;
      for (size_t d = 0; d < box.lo.size(); ++d)
        overlaps &= box.lo[d] < transfer.sourceBox.hi[d] && transfer.sourceBox.lo[d] < box.hi[d];
      if (overlaps &&
          reported.insert({int(FindingKind::unguardedRead), opOf(epoch), transfer.op}).second)
        report(FindingKind::unguardedRead, opOf(epoch)->getLoc(),
               llvm::formatv("{0} writes {1} on rank {2} over the source of the copy at {3} by "
                             "{4}, still in flight",
                             who(epoch.thread, epoch.launch), tensorName(id), r,
                             location(transfer.op), who(transfer.thread, transfer.launch)));
    }
  const Layout &layout = tensor.data.layout;
  box.forEachRow([&](ArrayRef<int64_t> start, int64_t n) {
    int64_t base = layout.offset(start);
    for (int64_t offset = base; offset < base + n; ++offset)
      writeElement(tensor, r, id, offset, epoch, clock, combine);
  });
}

void Machine::writeElement(Tensor &tensor, int64_t r, int64_t id, int64_t offset,
                           const Epoch &epoch, const Clock &clock, bool combine) {
  Shadow &shadow = tensor.shadow[offset];
  Extra *extra = shadow.extra >= 0 ? &tensor.extras[shadow.extra] : nullptr;
  auto check = [&](const Epoch &other, bool isRead) {
    if (before(other, clock) || other.thread == epoch.thread)
      return;
    Operation *where = opOf(isRead ? other : epoch);
    if (!reported.insert({int(FindingKind::unguardedRead), where, opOf(isRead ? epoch : other)})
             .second)
      return;
    report(FindingKind::unguardedRead, where->getLoc(),
           isRead ? llvm::formatv("{0} reads {1}, which the write by {2} at {3} then changes: no "
                                  "wait orders the two",
                                  who(other.thread, other.launch), element(tensor, r, id, offset),
                                  who(epoch.thread, epoch.launch), location(opOf(epoch)))
                        .str()
                  : llvm::formatv("{0} writes {1}, which the write by {2} at {3} also writes: no "
                                  "wait orders the two",
                                  who(epoch.thread, epoch.launch), element(tensor, r, id, offset),
                                  who(other.thread, other.launch), location(opOf(other)))
                        .str());
  };
  check(shadow.write, false);
  check(shadow.read, true);
  if (extra) {
    // Adds into the same element commute; a plain write must be ordered with them.
    if (!combine)
      for (const Epoch &other : extra->combines)
        check(other, false);
    for (const Epoch &other : extra->reads)
      check(other, true);
  }
  shadow.read = Epoch();
  if (combine) {
    if (!extra) {
      shadow.extra = tensor.extras.size();
      extra = &tensor.extras.emplace_back();
    }
    extra->reads.clear();
    extra->combines.push_back(epoch);
  } else {
    shadow.write = epoch;
    if (extra) {
      extra->reads.clear();
      extra->combines.clear();
    }
  }
  tensor.writtenIn[offset] = epoch.launch;
}

//===----------------------------------------------------------------------===//
// Reports
//===----------------------------------------------------------------------===//

void Machine::report(FindingKind kind, Location loc, std::string message) {
  if (static_cast<int64_t>(result.findings.size()) >= options.maxFindings) {
    stopped = true;
    return;
  }
  result.findings.push_back(Finding{kind, loc, std::move(message), seed});
}

std::string Machine::who(int64_t id, int64_t launch) const {
  const Thread &t = threads[id];
  if (!launch)
    launch = ranks[t.rank].launch;
  if (t.cta < 0)
    return llvm::formatv("the copy engines of rank {0} (launch {1})", t.rank, launch);
  RoleOp role = t.role;
  return llvm::formatv("rank {0} (CTA {1}, {2} {3} of {4}, launch {5})", t.rank, t.cta,
                       stringifyRoleKind(role.getKind()), t.roleCta, t.roleCtas, launch);
}

std::string Machine::element(const Tensor &tensor, int64_t r, int64_t id, int64_t offset) const {
  return llvm::formatv("element [{0}] of {1} on rank {2}",
                       coordinates(tensor.data.layout.coordsOf(offset)), tensorName(id), r);
}

std::string Machine::tensorName(int64_t id) const {
  if (id < static_cast<int64_t>(outputs.size()))
    return llvm::formatv("argument #{0}", id);
  return llvm::formatv("the buffer made at {0}", location(tensorValues[id].getDefiningOp()));
}

void Machine::checkOutputs(int64_t r) {
  Rank &rank = ranks[r];
  const ReferenceResult &expected = launches[rank.launch - 1].expected;
  for (size_t a = 0; a < outputs.size(); ++a) {
    if (!outputs[a])
      continue;
    const Tensor &tensor = rank.tensors[a];
    const TensorData &want = expected.arguments[r][a];
    const std::vector<bool> &written = expected.written[r][a];
    const std::vector<float> &slack = expected.slack[r][a];
    // Rounding: relative to the element and to the tensor's size, and of partial sums.
    double squares = 0;
    int64_t count = 0;
    for (size_t k = 0; k < want.data.size(); ++k)
      if (written[k] && std::isfinite(want.data[k])) {
        squares += double(want.data[k]) * want.data[k];
        ++count;
      }
    double rms = count ? std::sqrt(squares / count) : 0;
    int64_t unwritten = 0, wrong = 0, firstUnwritten = -1, firstWrong = -1;
    for (size_t k = 0; k < want.data.size(); ++k) {
      bool mine = tensor.writtenIn[k] == rank.launch;
      if (written[k] && !mine) {
        if (!unwritten++)
          firstUnwritten = k;
        continue;
      }
      float got = tensor.data.data[k], ref = want.data[k];
      double tolerance = std::fabs(ref) * 0x1p-7 + rms / 64 + slack[k];
      bool close = written[k] ? std::isnan(ref) || std::fabs(got - ref) <= tolerance : !mine;
      if (!close && !wrong++)
        firstWrong = k;
    }
    auto at = [&](int64_t k) { return coordinates(tensor.data.layout.coordsOf(k)); };
    Location loc = program.getBodyBlock().getArgument(a).getLoc();
    if (unwritten)
      report(FindingKind::unwritten, loc,
             llvm::formatv("launch {0} left {1} elements of argument #{2} unwritten on rank {3} "
                           "(the first at [{4}])",
                           rank.launch, unwritten, a, r, at(firstUnwritten)));
    if (wrong)
      report(FindingKind::wrongResult, loc,
             llvm::formatv("launch {0} got {1} elements of argument #{2} wrong on rank {3}: the "
                           "first at [{4}] is {5:e3}, the program means {6:e3}",
                           rank.launch, wrong, a, r, at(firstWrong),
                           tensor.data.data[firstWrong], want.data[firstWrong]));
  }
}

void Machine::reportDeadlock() {
  // One line per blocked wait op and rank.
  std::map<std::pair<Operation *, int64_t>, std::vector<const Thread *>> blocked;
  for (const Thread &t : threads)
    if (t.status == Status::blocked)
      blocked[{t.waitOp, t.rank}].push_back(&t);
  std::string message = "no thread can go on and nothing is in flight;";
  if (blocked.empty())
    message += " no thread waits, but launches were left to run";
  for (const auto &[key, list] : blocked) {
    const Thread &t = *list.front();
    std::string flag;
    for (const auto &entry : flagArrays)
      if (t.waitFlag >= entry.second.first) {
        int64_t words = 1;
        for (int64_t e : entry.second.second)
          words *= e;
        if (t.waitFlag < entry.second.first + words)
          flag = llvm::formatv("@{0} word {1}", entry.first(), t.waitFlag - entry.second.first);
      }
    message += llvm::formatv(" {0}{1} waits at {2} for {3} of {4}, which holds {5};", who(t.id),
                             list.size() > 1 ? llvm::formatv(" and {0} more", list.size() - 1).str()
                                             : std::string(),
                             location(key.first), t.waitCount, flag,
                             ranks[t.rank].flags[t.waitFlag].count);
  }
  Operation *first = blocked.empty() ? program.getOperation() : blocked.begin()->first.first;
  report(FindingKind::deadlock, first->getLoc(), std::move(message));
}

} // namespace

FailureOr<MachineResult> sim::runMachine(ProgramOp program, ArrayRef<Launch> launches,
                                         ArrayRef<bool> outputs, uint64_t seed,
                                         const SimulationOptions &options) {
  return Machine(program, launches, outputs, seed, options).run();
}
