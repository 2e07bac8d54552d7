//===- Routing.cpp - point-to-point expert routing on the machine ---------===//
//
// The scheduled routing ops as the device library runs them (mk/device/routing.cuh): a rank's
// census row to every GPU of its node, the row counts of its experts, each dispatch CTA's share of
// the rows (its own, or those a rail peer packed for this node) to their experts' slots with an
// arrival on each expert after its rows, the rows packed for other nodes, result rows back to
// their tokens' slots, and a tile of tokens' sum. Writes to other GPUs are puts that land later;
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
  DistTensorType routed = op.getRouted().getType();
  int64_t numExperts = routed.getShape()[0], capacity = routed.getShape()[1];
  int64_t hidden = routed.getShape()[2], perRank = routed.getLocalExtent(0, mesh);
  const Layout &layout = experts.data.layout;
  int64_t topK = layout.global[1], nodes = mesh.getNodes(), gpus = mesh.getGpus();
  // This rank's tokens, or those node `source`'s rail peer sent (its region of the received
  // rows, as many as it counted), routed as that peer's.
  int64_t node = rank.node, regionRows = layout.local[0], firstToken = layout.first[0];
  int64_t localTokens = regionRows;
  if (op.getSource()) {
    node = integer(thread, op.getSource());
    regionRows = layout.global[0] / nodes;
    firstToken = node * regionRows;
    int64_t at = integer(thread, op.getCountIndex());
    readBox(r, idOf(op.getCount()), Box{{at}, {at + 1}}, me, thread.clock);
    localTokens = integerAt(tensorOf(r, op.getCount()).data, {at});
  }
  int64_t source = rankOf(node, rank.gpu);
  readBox(r, idOf(op.getCensus()), census.data.layout.held(), me, thread.clock);
  for (Value v : {op.getTokens(), op.getExperts()}) {
    const Layout &held = tensorOf(r, v).data.layout;
    readBox(r, idOf(v), Box{{firstToken, 0}, {firstToken + localTokens, held.global[1]}}, me,
            thread.clock);
  }

  // This CTA's tokens, and each expert's next slot: the lower ranks' copies, then the source's
  // before the chunk.
  int64_t begin = localTokens * thread.roleCta / thread.roleCtas;
  int64_t end = localTokens * (thread.roleCta + 1) / thread.roleCtas;
  std::vector<int64_t> next(numExperts, 0);
  for (int64_t s = 0; s < source; ++s)
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
  // Rows a rail peer packed: a copy to this node comes back to the row of its index among the
  // peer's copies to this node, kept after the slots.
  int64_t nodeFirst = rankOf(rank.node, 0) * perRank, nodeEnd = nodeFirst + gpus * perRank;
  auto here = [&](int64_t t, int64_t j) {
    int64_t e = expertOf(t, j);
    return e >= nodeFirst && e < nodeEnd;
  };
  std::vector<int64_t> returnRows;
  if (op.getSource()) {
    int64_t q = 0;
    for (int64_t t = 0; t < begin; ++t)
      for (int64_t j = 0; j < topK; ++j)
        q += here(t, j);
    int64_t second = nodes * regionRows;
    writeBox(r, idOf(op.getPlacement()),
             Box{{second + firstToken + begin, 0}, {second + firstToken + end, topK}}, me,
             thread.clock, /*combine=*/false);
    for (int64_t t = begin; t < end; ++t)
      for (int64_t j = 0; j < topK; ++j) {
        returnRows.push_back(here(t, j) ? q : -1);
        if (here(t, j))
          placement.data.at({second + firstToken + t, j}) = static_cast<float>(q++);
      }
  }

  // The rows to this node's experts, expert by expert in the device's order, each expert's
  // arrival after its rows. A result comes back to this node's GPU of the source's index, into
  // the region for the source's node.
  int64_t arrivals = flagArrays.lookup(op.getArrivals()).first;
  int64_t region = op.getSource() ? nodes + node : node;
  int64_t originFirst = (rank.gpu * RouteRowsOp::returnRegions(nodes) + region) * regionRows * topK;
  for (int64_t l = 0; l < perRank; ++l)
    for (int64_t step = 1; step <= gpus; ++step) {
      int64_t gpu = (rank.gpu + step) % gpus, to = rankOf(rank.node, gpu), e = to * perRank + l;
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
          origin->at(0, 0) =
              static_cast<float>(originFirst + (op.getSource() ? returnRows[c] : t * topK + j));
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

void Machine::runRouting(Thread &thread, RoutePackOp op) {
  int64_t r = thread.rank;
  Rank &rank = ranks[r];
  Epoch me = epochOf(thread, op);
  const Tensor &tokens = tensorOf(r, op.getTokens()), &experts = tensorOf(r, op.getExperts());
  Tensor &pack = tensorOf(r, op.getPack()), &packExperts = tensorOf(r, op.getPackExperts()),
         &packed = tensorOf(r, op.getPacked()), &returnAt = tensorOf(r, op.getReturnAt());
  const Layout &layout = experts.data.layout;
  int64_t topK = layout.global[1], perRank = layout.local[0], firstToken = layout.first[0];
  int64_t hidden = tokens.data.layout.global[1], nodes = mesh.getNodes();
  int64_t nodeExperts = op.getNumExperts() / nodes, region = perRank * topK;
  int64_t begin = perRank * thread.roleCta / thread.roleCtas;
  int64_t end = perRank * (thread.roleCta + 1) / thread.roleCtas;
  bool last = thread.roleCta == thread.roleCtas - 1;
  readBox(r, idOf(op.getExperts()), Box{{firstToken, 0}, {firstToken + end, topK}}, me,
          thread.clock);
  readBox(r, idOf(op.getTokens()), Box{{firstToken + begin, 0}, {firstToken + end, hidden}}, me,
          thread.clock);
  auto nodeOf = [&](int64_t t, int64_t j) {
    int64_t x = integerAt(experts.data, {firstToken + t, j});
    return x >= 0 && x < static_cast<int64_t>(op.getNumExperts()) ? x / nodeExperts : -1;
  };
  writeBox(r, idOf(op.getReturnAt()), Box{{firstToken + begin, 0}, {firstToken + end, topK}}, me,
           thread.clock, /*combine=*/false);
  for (int64_t t = begin; t < end; ++t)
    for (int64_t j = 0; j < topK; ++j)
      returnAt.data.at({firstToken + t, j}) =
          static_cast<float>(nodeOf(t, j) == rank.node ? rank.node * region + t * topK + j : -1);
  if (last)
    writeBox(r, idOf(op.getPacked()), packed.data.layout.held(), me, thread.clock, false);
  for (int64_t m = 0; m < nodes; ++m) {
    if (m == rank.node)
      continue;
    auto bound = [&](int64_t t) {
      for (int64_t j = 0; j < topK; ++j)
        if (nodeOf(t, j) == m)
          return true;
      return false;
    };
    // The tokens bound for m before this CTA's, and their copies to m.
    int64_t p = 0, q = 0;
    for (int64_t t = 0; t < begin; ++t) {
      p += bound(t);
      for (int64_t j = 0; j < topK; ++j)
        q += nodeOf(t, j) == m;
    }
    int64_t first = p;
    for (int64_t t = begin; t < end; ++t) {
      if (!bound(t))
        continue;
      int64_t slot = m * perRank + p;
      for (int64_t k = 0; k < hidden; ++k)
        pack.data.at({slot, k}) = tokens.data.at({firstToken + t, k});
      for (int64_t j = 0; j < topK; ++j) {
        packExperts.data.at({slot, j}) = experts.data.at({firstToken + t, j});
        if (nodeOf(t, j) == m)
          returnAt.data.at({firstToken + t, j}) = static_cast<float>(m * region + q++);
      }
      ++p;
    }
    writeBox(r, idOf(op.getPack()), Box{{m * perRank + first, 0}, {m * perRank + p, hidden}}, me,
             thread.clock, false);
    writeBox(r, idOf(op.getPackExperts()), Box{{m * perRank + first, 0}, {m * perRank + p, topK}},
             me, thread.clock, false);
    if (last) {
      packed.data.at({m}) = static_cast<float>(p);
      packed.data.at({nodes + m}) = static_cast<float>(q);
    }
  }
  if (last)
    packed.data.at({rank.node}) = packed.data.at({nodes + rank.node}) = 0;
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
  // An origin is a GPU of this node times its rows of `returned`, plus a row there.
  int64_t slots = returned.getLocalExtent(0, mesh) * topK;
  int64_t width = std::min(columns, hidden - column);
  for (int64_t i = 0; i < valid; ++i) {
    int64_t origin = integerAt(origins.data, {e, first + i});
    int64_t to = rankOf(ranks[r].node, origin / slots), row = origin % slots;
    int64_t token = tensorOf(to, op.getReturned()).data.layout.first[0] + row / topK;
    int64_t j = row % topK;
    auto values = std::make_shared<Tile>(ArrayRef<int64_t>{1, width}, tile->element);
    for (int64_t k = 0; k < width; ++k)
      values->at(0, k) = tile->at(i, k);
    send(thread, op, to, op.getReturned(),
         Box{{token, j, column}, {token + 1, j + 1, column + width}}, values);
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
  readBox(r, idOf(op.getPlacement()), rows, me, thread.clock);
  readBox(r, idOf(op.getWeights()), rows, me, thread.clock);
  // Where copy (t, j)'s result lies: row t, j of `returned`, or the row `at` says.
  const Tensor *returnAt = op.getReturnAt() ? &tensorOf(r, op.getReturnAt()) : nullptr;
  int64_t slices = returned.data.layout.global[1];
  auto resultOf = [&](int64_t t, int64_t j) -> std::pair<int64_t, int64_t> {
    if (!returnAt)
      return {t, j};
    int64_t row = integerAt(returnAt->data, {t, j});
    return {row / slices, row % slices};
  };
  if (returnAt)
    readBox(r, idOf(op.getReturnAt()), rows, me, thread.clock);
  for (int64_t t = box.lo[0]; t < box.hi[0]; ++t)
    for (int64_t j = 0; j < topK; ++j)
      if (integerAt(placement.data, {t, j}) >= 0) {
        auto [row, k] = resultOf(t, j);
        readBox(r, idOf(op.getReturned()), Box{{row, k, box.lo[1]}, {row + 1, k + 1, box.hi[1]}},
                me, thread.clock);
      }
  writeBox(r, idOf(op.getDest()), box, me, thread.clock, /*combine=*/false);
  Type element = dest.data.layout.type.getElementType();
  box.forEach([&](ArrayRef<int64_t> at) {
    float sum = 0;
    for (int64_t j = 0; j < topK; ++j)
      if (integerAt(placement.data, {at[0], j}) >= 0) {
        auto [row, k] = resultOf(at[0], j);
        sum += weights.data.at({at[0], j}) * returned.data.at({row, k, at[1]});
      }
    dest.data.at(at) = roundTo(element, sum);
  });
}
