//===- Machine.cpp - one interleaving of a scheduled program --------------===//

#include "Machine.h"

#include "Semantics.h"

#include <cmath>

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::sim;
using namespace mlir::mk::sim::detail;

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
    else if (auto census = dyn_cast<RouteCensusOp>(op))
      mark(census.getCensus());
    else if (auto counts = dyn_cast<RouteCountsOp>(op))
      mark(counts.getCounts());
    else if (auto rows = dyn_cast<RouteRowsOp>(op))
      for (Value v : {rows.getRouted(), rows.getOrigins(), rows.getPlacement()})
        mark(v);
    else if (auto pack = dyn_cast<RoutePackOp>(op))
      for (Value v : {pack.getPack(), pack.getPackExperts(), pack.getPacked(), pack.getReturnAt()})
        mark(v);
    else if (auto send = dyn_cast<SendRowsOp>(op))
      mark(send.getDest());
    else if (auto back = dyn_cast<ReturnRowsOp>(op))
      mark(back.getReturned());
    else if (auto combine = dyn_cast<CombineReturnedOp>(op))
      mark(combine.getDest());
    else if (auto engine = dyn_cast<EngineCopyOp>(op))
      mark(engine.getTensor());
    if (auto grid = dyn_cast<TileGridOp>(op)) {
      FailureOr<TileWalk> walk = TileWalk::get(grid, mesh, numbering);
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
      Tensor &tensor = rank.tensors.emplace_back(
          Tensor{index < outputs.size()
                     ? launches[0].inputs[r][index]
                     : TensorData(Layout::of(type, mesh, numbering, rank.node, rank.gpu), NAN)});
      tensor.tracked = tracked[index];
      if (tensor.tracked) {
        tensor.shadow.resize(tensor.data.data.size());
        tensor.writtenIn.assign(tensor.data.data.size(), 0);
      }
    }
  }
  for (RoleOp role : body.getOps<RoleOp>()) {
    roles.push_back(role);
    if (role.getPool())
      pool = role;
  }
  threads.resize(total);
  for (int64_t r = 0; r < world; ++r) {
    ranks[r].roleCtasThrough.assign(roles.size(), 0);
    // Each CTA's role is the launch's (startLaunch).
    for (int64_t c = 0; c < grid; ++c) {
      Thread &t = threads[r * perRank + c];
      t.id = r * perRank + c;
      t.rank = r;
      t.cta = c;
      ranks[r].threads.push_back(t.id);
    }
    Thread &engine = threads[r * perRank + grid];
    engine.id = r * perRank + grid;
    engine.rank = r;
    if (llvm::any_of(engineCopies,
                     [&](EngineCopyOp c) { return int64_t(c.getFrom()) == ranks[r].gpu; }))
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

SmallVector<int64_t> Machine::splitOf(int64_t launch) {
  SmallVector<int64_t> compiled;
  for (RoleOp role : roles)
    compiled.push_back(*role.getCtas());
  const int64_t grid = *program.getGrid(), others = static_cast<int64_t>(roles.size()) - 1;
  const int64_t turn = options.varySplit ? (launch - 1) % 3 : 0;
  if (turn == 0 || others == 0 || grid < 2 * others + 1)
    return compiled;
  SmallVector<int64_t> split(roles.size(), 1);
  if (turn == 1) {
    split[0] = grid - others;
    return split;
  }
  // The first at one CTA; the others share the rest as the compiled split shares theirs.
  int64_t compiledOthers = 0, given = 1;
  for (int64_t i = 1; i <= others; ++i)
    compiledOthers += compiled[i];
  for (int64_t i = 1; i <= others; ++i) {
    split[i] = std::max<int64_t>(1, (grid - 1) * compiled[i] / compiledOthers);
    given += split[i];
  }
  split[1] += grid - given; // what rounding down left
  return split;
}

void Machine::startLaunch(int64_t r) {
  Rank &rank = ranks[r];
  int64_t launch = ++rank.launch;
  // The roles take their CTAs in order, as mk_kernel_args' role ranges give them.
  SmallVector<int64_t> split = splitOf(launch);
  for (int64_t i = 0, cta = 0; i < static_cast<int64_t>(roles.size()); ++i) {
    rank.roleCtasThrough[i] += split[i];
    for (int64_t c = 0; c < split[i]; ++c, ++cta) {
      Thread &t = threads[rank.threads[cta]];
      t.role = roles[i];
      t.roleCta = c;
      t.roleCtas = split[i];
    }
  }
  // The host writes this launch's inputs, after the last launch (stream order).
  const std::vector<TensorData> &inputs = launches[launch - 1].inputs[r];
  for (size_t a = 0; a < outputs.size(); ++a)
    if (!outputs[a])
      rank.tensors[a].data = inputs[a];
  rank.running = true;
  rank.claimed = 0;
  rank.live = rank.threads.size();
  rank.ready.clear();
  for (int64_t id : rank.threads) {
    Thread &t = threads[id];
    t.frames.clear();
    t.env.clear();
    t.nextCopy = 0;
    t.joined = false;
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
  if (!rank.running || rank.live || rank.endWaitsFor)
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
// Transfers
//===----------------------------------------------------------------------===//

/// Whether the launch that issues `transfer` ends only once it has landed: a signal through the
/// proxy reads nothing of the launch's.
static bool endWaits(const Transfer &transfer) {
  return transfer.nvlink || transfer.kind != Transfer::Kind::signal;
}

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
  if (endWaits(transfer))
    ++ranks[thread.rank].endWaitsFor;
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
    if (transfer.stamp)
      word.count = std::max<uint64_t>(word.count, transfer.launch);
    else
      ++word.count;
    if (word.clock.empty())
      word.clock.assign(transfer.clock.size(), 0);
    join(word.clock, transfer.clock);
    signalLanded(transfer.to, transfer.flag);
    break;
  }
  }
  if (endWaits(transfer)) {
    --ranks[transfer.from].endWaitsFor;
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

FailureOr<MachineResult> sim::runMachine(ProgramOp program, ArrayRef<Launch> launches,
                                         ArrayRef<bool> outputs, uint64_t seed,
                                         const SimulationOptions &options) {
  return detail::Machine(program, launches, outputs, seed, options).run();
}
