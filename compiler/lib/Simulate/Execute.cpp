//===- Execute.cpp - what the threads of control run ----------------------===//

#include "Machine.h"

#include "Semantics.h"

#include "mk/grouped_walk.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::sim;
using namespace mlir::mk::sim::detail;

//===----------------------------------------------------------------------===//
// Control flow
//===----------------------------------------------------------------------===//

void Machine::endOfBlock(Thread &thread) {
  Frame &frame = thread.frames.back();
  if (auto grid = dyn_cast<TileGridOp>(frame.owner)) {
    if (++frame.tile < frame.tiles.size() || (frame.claims && claimTile(thread, frame, grid))) {
      for (auto [arg, coord] :
           llvm::zip(grid.getBodyBlock().getArguments(), frame.tiles[frame.tile]))
        thread.env[arg] = coord;
      frame.next = frame.block->begin();
      return;
    }
  }
  thread.frames.pop_back();
  if (!thread.frames.empty())
    return;
  // The role's block is done: its CTA joins the pool, if there is one, and is done after it.
  if (pool && thread.role != pool && !thread.joined) {
    thread.joined = true;
    Block &block = pool.getBody().front();
    thread.frames.push_back(Frame{&block, block.begin(), pool});
    return;
  }
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
  if (grid->getParentOp() == pool.getOperation()) {
    // Claimed as it goes, by the pool's CTAs and those that joined it.
    frame.claims = true;
    claimTile(thread, frame, grid);
  } else if (const std::optional<TileWalk::Grouped> &grouped = walk.grouped()) {
    // Within row counts: the grid reads them as it starts, and walks the tiles they hold.
    Value rowCounts = grid.getRowCounts();
    const Tensor &counts = tensorOf(thread.rank, rowCounts);
    readBox(thread.rank, idOf(rowCounts), counts.data.layout.held(), epochOf(thread, grid),
            thread.clock);
    std::vector<int> rows(counts.data.data.begin(), counts.data.data.end());
    ::mk::GroupedWalk tiles{rows.data(),
                            static_cast<int>(grouped->groups),
                            static_cast<int>(grouped->capacity),
                            static_cast<int>(grouped->tileRows),
                            static_cast<int>(grouped->colTiles),
                            static_cast<int>(grouped->band)};
    int64_t firstGroup = bound.firstShard ? *bound.firstShard * grouped->groups : 0;
    for (int64_t p = thread.roleCta; p < tiles.positions(); p += thread.roleCtas) {
      ::mk::GroupedTile tile = tiles.at(p);
      frame.tiles.push_back({tile.group + firstGroup, tile.row, tile.col});
    }
  } else {
    for (int64_t p = thread.roleCta; p < bound.positions; p += thread.roleCtas) {
      auto tile = walk.tileAt(ops, bound, p, place);
      if (!tile.visits || *tile.visits)
        frame.tiles.emplace_back(tile.coords.begin(), tile.coords.end());
    }
  }
  if (frame.tiles.empty())
    return Outcome::next;
  for (auto [arg, coord] : llvm::zip(grid.getBodyBlock().getArguments(), frame.tiles[0]))
    thread.env[arg] = coord;
  ++thread.frames.back().next;
  thread.frames.push_back(std::move(frame));
  return Outcome::entered;
}

bool Machine::claimTile(Thread &thread, Frame &frame, TileGridOp grid) {
  const TileWalk &walk = walks.at(grid);
  IntIndexOps ops;
  Rank &rank = ranks[thread.rank];
  TileWalk::Place<int64_t> place{rank.node, rank.gpu, std::nullopt};
  TileWalk::Bound<int64_t> bound = walk.bind(ops, place);
  while (rank.claimed < bound.positions) {
    auto tile = walk.tileAt(ops, bound, rank.claimed++, place);
    if (!tile.visits || *tile.visits) {
      frame.tiles.emplace_back(tile.coords.begin(), tile.coords.end());
      return true;
    }
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

bool Machine::held(Operation *op, Thread &thread, int64_t r, Value tensor, const Box &box) {
  const Layout &layout = tensorOf(r, tensor).data.layout;
  if (layout.holds(box) && (!box.empty() || layout.isShortShardTile(box)))
    return true;
  std::string coords;
  llvm::raw_string_ostream os(coords);
  os << "[";
  llvm::interleaveComma(box.lo, os);
  os << "] to [";
  llvm::interleaveComma(box.hi, os);
  os << ")";
  report(FindingKind::outsidePart, op->getLoc(),
         llvm::formatv("{0} reaches elements {1} of {2}, which rank {3} does not hold",
                       who(thread.id), coords, tensorName(tensorIds.lookup(tensor)), r));
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
  std::optional<AttentionRows<int64_t>> rows;
  if (auto step = dyn_cast<AttentionBlockOp>(op)) {
    IntIndexOps ops;
    rows = attentionRows<IntIndexOps>(
        ops, step, numbering, [&](Value v) { return std::get<int64_t>(valueOf(thread, v)); });
  }
  if (std::optional<SmallVector<SimValue>> results =
          evaluatePure(op, operands, rows ? &*rows : nullptr)) {
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
        auto [node, gpu] =
            tileOwner(ops, owner.getTensor().getType(), ints(owner.getIndices()), owner.getTile(),
                      owner.getRowSlices(), mesh, numbering, rank.node, rank.gpu);
        thread.env[owner.getNode()] = node;
        thread.env[owner.getGpu()] = gpu;
        return Outcome::next;
      })
      .Case([&](ShardRangeOp range) -> FailureOr<Outcome> {
        IntIndexOps ops;
        auto [lo, hi] =
            numbering.shardTiles(ops, range.getTensor().getType(), mesh, range.getTile(),
                                 std::get<int64_t>(lookup(range.getIndex())));
        thread.env[range.getLo()] = lo;
        thread.env[range.getHi()] = hi;
        return Outcome::next;
      })
      .Case([&](SequenceTileOp sequence) -> FailureOr<Outcome> {
        IntIndexOps ops;
        thread.env[sequence.getPosition()] =
            sequenceTile(ops, sequence.getTensor().getType(), mesh, sequence.getTile(),
                         std::get<int64_t>(lookup(sequence.getIndex())));
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
        Box box =
            tensor.data.layout.access(ints(store.getIndices()), store.getWholeDims(), tile->shape);
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
      .Case([&](SendRowsOp send) -> FailureOr<Outcome> {
        int64_t to = peerRank(send.getScope(), send.getPeer());
        int64_t slices = 1;
        if (Value count = send.getCount()) {
          int64_t at = integer(thread, send.getCountIndex());
          Box word{{at}, {at + 1}};
          if (!held(op, thread, thread.rank, count, word))
            return Outcome::next;
          readBox(thread.rank, idOf(count), word, me, thread.clock);
          slices = static_cast<int64_t>(tensorOf(thread.rank, count).data.at({at}));
        }
        if (slices <= 0)
          return Outcome::next;
        // Whole slices from the leading index on.
        auto slicesAt = [&](Value tensor, Value first) {
          Box box;
          ArrayRef<int64_t> shape = cast<DistTensorType>(tensor.getType()).getShape();
          int64_t from = integer(thread, first);
          box.lo.push_back(from);
          box.hi.push_back(from + slices);
          for (int64_t extent : shape.drop_front()) {
            box.lo.push_back(0);
            box.hi.push_back(extent);
          }
          return box;
        };
        Box from = slicesAt(send.getSource(), send.getFrom()),
            into = slicesAt(send.getDest(), send.getTo());
        if (!held(op, thread, thread.rank, send.getSource(), from) ||
            !held(op, thread, to, send.getDest(), into))
          return Outcome::next;
        Transfer transfer{Transfer::Kind::copy};
        transfer.to = to;
        transfer.nvlink = send.getScope() != PeerScope::node;
        transfer.op = op;
        transfer.tensor = idOf(send.getDest());
        transfer.box = into;
        transfer.sourceTensor = idOf(send.getSource());
        transfer.sourceBox = from;
        ++tensorOf(thread.rank, send.getSource()).sourcesInFlight;
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
        transfer.stamp = signal.getStamp();
        issue(std::move(transfer), thread);
        return Outcome::next;
      })
      .Case([&](WaitOp wait) -> FailureOr<Outcome> {
        std::optional<int64_t> index =
            flagIndex(thread, op, wait.getFlagsAttr(), wait.getIndices());
        if (!index)
          return Outcome::next;
        int64_t flag = *index;
        // Flags are never reset: this launch's arrivals come on top of every earlier launch's.
        uint64_t target = uint64_t(rank.launch) * wait.getCount();
        if (std::optional<RoleKind> kind = wait.getPerCtaOf()) {
          int64_t ctas = 0;
          for (auto [i, role] : llvm::enumerate(roles))
            if (role.getKind() == *kind)
              ctas += rank.roleCtasThrough[i];
          target = uint64_t(ctas) * wait.getCount();
        }
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
      .Case<RouteCensusOp, RouteCountsOp, RouteRowsOp, RoutePackOp, ReturnRowsOp,
            CombineReturnedOp>([&](auto routing) -> FailureOr<Outcome> {
        runRouting(thread, routing);
        return Outcome::next;
      })
      .Default([&](Operation *other) -> FailureOr<Outcome> {
        return other->emitOpError() << "mk-sim: does not model this op";
      });
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
