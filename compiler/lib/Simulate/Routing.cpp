//===- Routing.cpp - point-to-point expert routing on the machine ---------===//
//
// The scheduled routing ops as the device library runs them (mk/device/routing.cuh): a rank's
// census row to every GPU of its node, the row counts of its experts, each dispatch CTA's share of
// the rows to their experts' slots with an arrival on each expert after its rows, result rows back
// to their tokens' slots, and a tile of tokens' sum. Writes to other GPUs are puts that land later;
// a CTA's arrivals follow what it sent before them.
//
//===----------------------------------------------------------------------===//

#include "Machine.h"

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::sim;
using namespace mlir::mk::sim::detail;

void Machine::send(Thread &thread, Operation *op, int64_t to, Value tensor, const Box &box,
                   TilePtr tile) {
  if (!held(op, thread, to, tensor, box))
    return;
  if (to == thread.rank) {
    writeBox(to, idOf(tensor), box, epochOf(thread, op), thread.clock, /*combine=*/false);
    writeTile(tensorOf(to, tensor).data, box, *tile);
    return;
  }
  Transfer transfer{Transfer::Kind::put};
  transfer.to = to;
  transfer.nvlink = true;
  transfer.op = op;
  transfer.tile = std::move(tile);
  transfer.tensor = idOf(tensor);
  transfer.box = box;
  issue(std::move(transfer), thread);
}

/// The element at `at` of an integer tensor.
static int64_t integerAt(const TensorData &tensor, ArrayRef<int64_t> at) {
  return static_cast<int64_t>(tensor.at(at));
}

void Machine::runRouting(Thread &thread, RouteCensusOp op) {
  Rank &rank = ranks[thread.rank];
  const Tensor &experts = tensorOf(thread.rank, op.getExperts());
  readBox(thread.rank, idOf(op.getExperts()), experts.data.layout.held(), epochOf(thread, op),
          thread.clock);
  DistTensorType census = op.getCensus().getType();
  int64_t numExperts = census.getShape()[1];
  auto row = std::make_shared<Tile>(ArrayRef<int64_t>{1, numExperts}, census.getElementType());
  for (float x : experts.data.data) {
    int64_t e = static_cast<int64_t>(x);
    if (e < 0 || e >= numExperts) {
      report(FindingKind::wrongResult, op->getLoc(),
             llvm::formatv("{0} routes to an expert outside [0, {1})", who(thread.id), numExperts));
      return;
    }
    row->at(0, e) += 1;
  }
  int64_t me = rankOf(rank.node, rank.gpu);
  Box box{{me, 0}, {me + 1, numExperts}};
  for (int64_t g = 0; g < mesh.getGpus(); ++g)
    send(thread, op, rankOf(rank.node, g), op.getCensus(), box, row);
}

void Machine::runRouting(Thread &thread, RouteCountsOp op) {
  const Tensor &census = tensorOf(thread.rank, op.getCensus());
  Tensor &counts = tensorOf(thread.rank, op.getCounts());
  Epoch me = epochOf(thread, op);
  readBox(thread.rank, idOf(op.getCensus()), census.data.layout.held(), me, thread.clock);
  Box mine = counts.data.layout.held();
  writeBox(thread.rank, idOf(op.getCounts()), mine, me, thread.clock, /*combine=*/false);
  int64_t ranksOf = census.data.layout.global[0];
  mine.forEach([&](ArrayRef<int64_t> at) {
    int64_t total = 0;
    for (int64_t r = 0; r < ranksOf; ++r)
      total += integerAt(census.data, {r, at[0]});
    counts.data.at(at) = static_cast<float>(std::min<int64_t>(total, op.getCapacity()));
  });
}

void Machine::runRouting(Thread &thread, RouteRowsOp op) {
  int64_t r = thread.rank;
  Rank &rank = ranks[r];
  Epoch me = epochOf(thread, op);
  const Tensor &tokens = tensorOf(r, op.getTokens()), &experts = tensorOf(r, op.getExperts()),
               &census = tensorOf(r, op.getCensus());
  Tensor &placement = tensorOf(r, op.getPlacement());
  for (Value v : {op.getTokens(), op.getExperts(), op.getCensus()})
    readBox(r, idOf(v), tensorOf(r, v).data.layout.held(), me, thread.clock);
  DistTensorType routed = op.getRouted().getType();
  int64_t numExperts = routed.getShape()[0], capacity = routed.getShape()[1];
  int64_t hidden = routed.getShape()[2], perRank = routed.getLocalExtent(0, mesh);
  const Layout &layout = experts.data.layout;
  int64_t topK = layout.global[1], localTokens = layout.local[0], firstToken = layout.first[0];
  int64_t world = rankOf(rank.node, rank.gpu), gpus = mesh.getGpus();

  // This CTA's tokens, and each expert's next slot: the lower ranks' copies, then this rank's
  // before the chunk.
  int64_t begin = localTokens * thread.roleCta / thread.roleCtas;
  int64_t end = localTokens * (thread.roleCta + 1) / thread.roleCtas;
  std::vector<int64_t> next(numExperts, 0);
  for (int64_t s = 0; s < world; ++s)
    for (int64_t e = 0; e < numExperts; ++e)
      next[e] += integerAt(census.data, {s, e});
  auto expertOf = [&](int64_t t, int64_t j) {
    return integerAt(experts.data, {firstToken + t, j});
  };
  for (int64_t t = 0; t < begin; ++t)
    for (int64_t j = 0; j < topK; ++j)
      ++next[expertOf(t, j)];
  Box chunk{{firstToken + begin, 0}, {firstToken + end, topK}};
  writeBox(r, idOf(op.getPlacement()), chunk, me, thread.clock, /*combine=*/false);
  std::vector<int64_t> slots;
  for (int64_t t = begin; t < end; ++t)
    for (int64_t j = 0; j < topK; ++j) {
      int64_t e = expertOf(t, j), slot = next[e]++;
      slots.push_back(slot < capacity ? slot : -1);
      placement.data.at({firstToken + t, j}) =
          static_cast<float>(slot < capacity ? e * capacity + slot : -1);
    }

  // The rows, expert by expert in the device's order, each expert's arrival after its rows.
  int64_t arrivals = flagArrays.lookup(op.getArrivals()).first;
  for (int64_t l = 0; l < perRank; ++l)
    for (int64_t step = 1; step <= gpus; ++step) {
      int64_t gpu = (rank.gpu + step) % gpus, e = rankOf(rank.node, gpu) * perRank + l;
      int64_t to = rankOf(rank.node, gpu);
      for (int64_t t = begin, c = 0; t < end; ++t)
        for (int64_t j = 0; j < topK; ++j, ++c) {
          int64_t slot = slots[c];
          if (expertOf(t, j) != e || slot < 0)
            continue;
          auto row = std::make_shared<Tile>(ArrayRef<int64_t>{1, hidden}, routed.getElementType());
          for (int64_t k = 0; k < hidden; ++k)
            row->at(0, k) = tokens.data.at({firstToken + t, k});
          send(thread, op, to, op.getRouted(), Box{{e, slot, 0}, {e + 1, slot + 1, hidden}}, row);
          auto origin = std::make_shared<Tile>(ArrayRef<int64_t>{1, 1},
                                               op.getOrigins().getType().getElementType());
          origin->at(0, 0) = static_cast<float>((firstToken + t) * topK + j);
          send(thread, op, to, op.getOrigins(), Box{{e, slot}, {e + 1, slot + 1}}, origin);
        }
      Transfer transfer{Transfer::Kind::signal};
      transfer.to = to;
      transfer.nvlink = true;
      transfer.op = op;
      transfer.flag = arrivals + e;
      issue(std::move(transfer), thread);
    }
}

void Machine::runRouting(Thread &thread, ReturnRowsOp op) {
  int64_t r = thread.rank;
  Epoch me = epochOf(thread, op);
  TilePtr tile = std::get<TilePtr>(valueOf(thread, op.getValue()));
  SmallVector<int64_t> coords = integers(thread, op.getCoords());
  int64_t e = coords[0], rowTiles = tile->rows(), columns = tile->cols();
  int64_t first = coords[1] * rowTiles, column = coords[2] * columns;
  const Tensor &counts = tensorOf(r, op.getCounts()), &origins = tensorOf(r, op.getOrigins());
  readBox(r, idOf(op.getCounts()), Box{{e}, {e + 1}}, me, thread.clock);
  int64_t valid = std::clamp<int64_t>(integerAt(counts.data, {e}) - first, 0, rowTiles);
  readBox(r, idOf(op.getOrigins()), Box{{e, first}, {e + 1, first + valid}}, me, thread.clock);
  DistTensorType returned = op.getReturned().getType();
  int64_t topK = returned.getShape()[1], hidden = returned.getShape()[2];
  int64_t perRank = returned.getLocalExtent(0, mesh);
  int64_t width = std::min(columns, hidden - column);
  for (int64_t i = 0; i < valid; ++i) {
    int64_t origin = integerAt(origins.data, {e, first + i});
    int64_t token = origin / topK, j = origin % topK;
    auto row = std::make_shared<Tile>(ArrayRef<int64_t>{1, width}, tile->element);
    for (int64_t k = 0; k < width; ++k)
      row->at(0, k) = tile->at(i, k);
    send(thread, op, token / perRank, op.getReturned(),
         Box{{token, j, column}, {token + 1, j + 1, column + width}}, row);
  }
}

void Machine::runRouting(Thread &thread, CombineReturnedOp op) {
  int64_t r = thread.rank;
  Epoch me = epochOf(thread, op);
  const Tensor &returned = tensorOf(r, op.getReturned()),
               &placement = tensorOf(r, op.getPlacement()), &weights = tensorOf(r, op.getWeights());
  Tensor &dest = tensorOf(r, op.getDest());
  Box box = dest.data.layout.access(integers(thread, op.getIndices()), {}, op.getTile());
  if (!held(op, thread, r, op.getDest(), box))
    return;
  int64_t topK = placement.data.layout.global[1];
  Box rows{{box.lo[0], 0}, {box.hi[0], topK}};
  readBox(r, idOf(op.getReturned()), Box{{box.lo[0], 0, box.lo[1]}, {box.hi[0], topK, box.hi[1]}},
          me, thread.clock);
  readBox(r, idOf(op.getPlacement()), rows, me, thread.clock);
  readBox(r, idOf(op.getWeights()), rows, me, thread.clock);
  writeBox(r, idOf(op.getDest()), box, me, thread.clock, /*combine=*/false);
  Type element = dest.data.layout.type.getElementType();
  box.forEach([&](ArrayRef<int64_t> at) {
    float sum = 0;
    for (int64_t j = 0; j < topK; ++j)
      if (integerAt(placement.data, {at[0], j}) >= 0)
        sum += weights.data.at({at[0], j}) * returned.data.at({at[0], j, at[1]});
    dest.data.at(at) = roundTo(element, sum);
  });
}
