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
#include "mk/Transforms/TileWalk.h"

#include "llvm/Support/FormatVariadic.h"

#include <map>
#include <random>
#include <set>

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

namespace detail {

//===----------------------------------------------------------------------===//
// Happens-before: vector clocks and epochs
//===----------------------------------------------------------------------===//

using Clock = std::vector<uint32_t>;

inline void join(Clock &into, const Clock &from) {
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
inline bool before(const Epoch &e, const Clock &c) { return !e.op || e.clock <= c[e.thread]; }

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
  int64_t iv = 0, ub = 0, step = 1;           // scf.for
  std::vector<SmallVector<int64_t, 4>> tiles; // mk.tile_grid
  size_t tile = 0;
  bool claims = false; // the pool's grid: its tiles are claimed one at a time
};

enum class Status { ready, blocked, done };

struct Thread {
  int64_t id, rank, cta = -1; // cta -1: the rank's copy engines
  RoleOp role;
  int64_t roleCta = 0, roleCtas = 1;
  /// Whether it has joined the pool, its own role's work done.
  bool joined = false;
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
  /// A signal that sets its flag to the launch (mk.signal's `stamp`).
  bool stamp = false;
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
  /// Positions of the pool's walk claimed in this launch.
  int64_t claimed = 0;
  bool running = false;
  std::vector<int64_t> threads, ready;
  int64_t live = 0;
  /// Each role's CTAs summed over the launches so far, this one included (the program's order).
  SmallVector<int64_t> roleCtasThrough;
  /// Transfers of this launch that its end waits for: over NVLink (the kernel's own stores and
  /// copies), and data through the proxy, whose sources the launch waits to be read
  /// (mk/queue.h, Release).
  int64_t endWaitsFor = 0;
  Clock end;
  double weight = 1;
};

/// `op`'s location as file:line:col, for a message about another op.
inline std::string location(Operation *op) {
  if (auto file = dyn_cast<FileLineColLoc>(op->getLoc()))
    return llvm::formatv("{0}:{1}:{2}", file.getFilename().getValue(), file.getLine(),
                         file.getColumn());
  std::string text;
  llvm::raw_string_ostream os(text);
  op->getLoc().print(os);
  return text;
}

/// Coordinates as "i, j", for messages.
inline std::string coordinates(ArrayRef<int64_t> at) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::interleaveComma(at, os);
  return text;
}

/// One interleaving: the state of every rank, thread and transfer, and what runs next.
class Machine {
public:
  Machine(ProgramOp program, ArrayRef<Launch> launches, ArrayRef<bool> outputs, uint64_t seed,
          const SimulationOptions &options)
      : program(program), mesh(program.getMesh()), numbering(TileNumbering::of(program)),
        launches(launches), outputs(outputs), options(options), seed(seed),
        rng(seed * 0x9e3779b97f4a7c15ull + 1) {}

  FailureOr<MachineResult> run();

private:
  // Setting up.
  LogicalResult prepare();
  /// The CTAs of each role in launch `launch` (from 1): the compiled split, or, with
  /// options.varySplit, one of the others in turn.
  SmallVector<int64_t> splitOf(int64_t launch);
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
  /// Claims the pool grid's next position that `thread`'s rank visits, appending its tile to
  /// `frame`: false once the walk is claimed out.
  bool claimTile(Thread &thread, Frame &frame, TileGridOp grid);
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
  /// `tile` into `box` of `tensor` on rank `to`: a store here, a put to a GPU of the node.
  void send(Thread &thread, Operation *op, int64_t to, Value tensor, const Box &box, TilePtr tile);
  // The point-to-point routing ops (Routing.cpp).
  void runRouting(Thread &thread, RouteCensusOp op);
  void runRouting(Thread &thread, RouteCountsOp op);
  void runRouting(Thread &thread, RouteRowsOp op);
  void runRouting(Thread &thread, RoutePackOp op);
  void runRouting(Thread &thread, ReturnRowsOp op);
  void runRouting(Thread &thread, CombineReturnedOp op);
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
  TileNumbering numbering;
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
  /// The role the others' CTAs join when done (RoleOp's pool), if any.
  RoleOp pool;
  /// The program's roles, in order.
  SmallVector<RoleOp> roles;
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

} // namespace detail

} // namespace mlir::mk::sim

#endif // MK_SIMULATE_MACHINE_H
