//===- Reference.cpp - what a program means -------------------------------===//

#include "Reference.h"

#include "Semantics.h"

#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <map>

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::sim;

namespace {

using Env = DenseMap<Value, SimValue>;

/// The ranks of `axis` that rank `rank` combines with: the key they share.
int64_t groupOf(MeshAttr mesh, MeshAxis axis, int64_t rank) {
  switch (axis) {
  case MeshAxis::world:
    return 0;
  case MeshAxis::nodes: // one rank per node: the rail of a GPU index
    return rank % mesh.getGpus();
  case MeshAxis::gpus:
    return rank / mesh.getGpus();
  }
  llvm_unreachable("unknown axis");
}

/// Rank `rank`'s index along `axis`, and the rank at index `index` of its group.
int64_t indexAlong(MeshAttr mesh, MeshAxis axis, int64_t rank) {
  return axis == MeshAxis::world   ? rank
         : axis == MeshAxis::nodes ? rank / mesh.getGpus()
                                   : rank % mesh.getGpus();
}
int64_t rankAt(MeshAttr mesh, MeshAxis axis, int64_t rank, int64_t index) {
  return axis == MeshAxis::world   ? index
         : axis == MeshAxis::nodes ? index * mesh.getGpus() + rank % mesh.getGpus()
                                   : rank / mesh.getGpus() * mesh.getGpus() + index;
}

/// The sum (or max, min) of the contributions to one tile of a collective, in f32.
struct Combination {
  Value dest;
  Tile value;
  std::vector<float> magnitude; // the sum of the contributions' magnitudes
  int64_t contributions = 0;
  SmallVector<int64_t> indices, wholeDims;
  std::vector<int64_t> ranks; // the ranks that store the result
};

class Reference {
public:
  Reference(ProgramOp program, RankArguments arguments)
      : program(program), mesh(program.getMesh()), numbering(TileNumbering::of(program)),
        ranks(mesh.getWorldSize()) {
    int64_t world = mesh.getWorldSize();
    Block &body = program.getBodyBlock();
    for (int64_t r = 0; r < world; ++r)
      for (auto [arg, data] : llvm::zip(body.getArguments(), arguments[r]))
        define(r, arg, std::move(data));
  }

  FailureOr<ReferenceResult> run() {
    for (Operation &op : program.getBodyBlock())
      if (failed(runTopLevel(&op)))
        return failure();
    ReferenceResult result;
    Block &body = program.getBodyBlock();
    for (Rank &rank : ranks) {
      auto &arguments = result.arguments.emplace_back();
      auto &written = result.written.emplace_back();
      auto &slack = result.slack.emplace_back();
      for (BlockArgument arg : body.getArguments()) {
        slack.push_back(rank.slack.lookup(arg));
        slack.back().resize(rank.tensors[arg]->data.size());
        arguments.push_back(std::move(*rank.tensors[arg]));
        written.push_back(std::move(rank.written[arg]));
      }
    }
    return result;
  }

private:
  struct Rank {
    DenseMap<Value, std::unique_ptr<TensorData>> tensors;
    DenseMap<Value, std::vector<bool>> written;
    DenseMap<Value, std::vector<float>> slack;
    Env env;
  };

  int64_t world() const { return ranks.size(); }
  int64_t nodeOf(int64_t r) const { return r / mesh.getGpus(); }
  int64_t gpuOf(int64_t r) const { return r % mesh.getGpus(); }

  void define(int64_t r, Value tensor, TensorData data) {
    ranks[r].written[tensor].assign(data.data.size(), false);
    ranks[r].tensors[tensor] = std::make_unique<TensorData>(std::move(data));
    ranks[r].env[tensor] = TensorView{tensor, r};
  }
  /// A tensor the program makes (a buffer, a gathered or routed tensor), not yet written.
  void allocate(Value tensor) {
    auto type = cast<DistTensorType>(tensor.getType());
    for (int64_t r = 0; r < world(); ++r)
      define(r, tensor, TensorData(Layout::of(type, mesh, numbering, nodeOf(r), gpuOf(r)), NAN));
  }

  TensorData &data(const TensorView &view) {
    return *ranks[view.rank].tensors.find(view.tensor)->second;
  }
  void markWritten(const TensorView &view, const Box &box) {
    TensorData &tensor = data(view);
    std::vector<bool> &written = ranks[view.rank].written[view.tensor];
    box.forEach([&](ArrayRef<int64_t> at) { written[tensor.layout.offset(at)] = true; });
  }

  /// The slack of `box` of `view`'s tensor, shaped as `type`; empty where the tensor has none.
  std::vector<float> slackOf(const TensorView &view, const Box &box, TileType type) {
    auto found = ranks[view.rank].slack.find(view.tensor);
    if (found == ranks[view.rank].slack.end())
      return {};
    TensorData slack(data(view).layout);
    slack.data = found->second;
    slack.data.resize(slack.layout.elements());
    return readTile(slack, box, type).data;
  }
  /// Records the slack of a tile stored at `box` of `view`'s tensor.
  void storeSlack(const TensorView &view, const Box &box, const Tile &tile) {
    std::vector<float> &slack = ranks[view.rank].slack[view.tensor];
    if (tile.slack.empty() && slack.empty())
      return;
    TensorData into(data(view).layout);
    into.data = std::move(slack);
    into.data.resize(into.layout.elements());
    Tile bound = tile;
    bound.data = tile.slack;
    bound.data.resize(tile.data.size());
    writeTile(into, box, bound);
    slack = std::move(into.data);
  }

  /// A pure op's results, with slack: each operand with slack moved by it, up and down, one at a
  /// time; a result's slack is the sum over the operands of the larger change it sees.
  std::optional<SmallVector<SimValue>> evaluateWithSlack(Operation *op, ArrayRef<SimValue> operands,
                                                         Env &env) {
    std::optional<AttentionRows<int64_t>> rows;
    if (auto step = dyn_cast<AttentionBlockOp>(op)) {
      IntIndexOps ops;
      rows = attentionRows<IntIndexOps>(ops, step, numbering,
                                        [&](Value v) { return std::get<int64_t>(env.lookup(v)); });
    }
    auto evaluate = [&](ArrayRef<SimValue> in) {
      return evaluatePure(op, in, rows ? &*rows : nullptr);
    };
    std::optional<SmallVector<SimValue>> results = evaluate(operands);
    if (!results)
      return results;
    SmallVector<std::vector<float>> slack(results->size());
    for (auto [index, operand] : llvm::enumerate(operands)) {
      auto *tile = std::get_if<TilePtr>(&operand);
      if (!tile || (*tile)->slack.empty())
        continue;
      SmallVector<std::vector<float>> change(results->size());
      for (float direction : {1.0f, -1.0f}) {
        auto moved = std::make_shared<Tile>(**tile);
        for (size_t k = 0; k < moved->data.size(); ++k)
          moved->data[k] += direction * moved->slack[k];
        SmallVector<SimValue> shifted(operands);
        shifted[index] = TilePtr(moved);
        SmallVector<SimValue> other = *evaluate(shifted);
        for (auto [i, result] : llvm::enumerate(*results)) {
          auto *base = std::get_if<TilePtr>(&result);
          if (!base)
            continue;
          const Tile &changed = *std::get<TilePtr>(other[i]);
          change[i].resize((*base)->data.size());
          for (size_t k = 0; k < change[i].size(); ++k)
            change[i][k] = std::max(change[i][k], std::fabs(changed.data[k] - (*base)->data[k]));
        }
      }
      for (auto [bound, moved] : llvm::zip(slack, change)) {
        bound.resize(moved.size());
        for (size_t k = 0; k < moved.size(); ++k)
          bound[k] += moved[k];
      }
    }
    for (auto [result, bound] : llvm::zip(*results, slack))
      if (!bound.empty()) {
        auto tile = std::make_shared<Tile>(*std::get<TilePtr>(result));
        tile->slack = std::move(bound);
        result = TilePtr(tile);
      }
    return results;
  }

  LogicalResult outside(Operation *op, const TensorView &view, const Box &box) {
    InFlightDiagnostic diag = op->emitError()
                              << "mk-sim: the program's meaning reaches elements from [";
    llvm::interleaveComma(box.lo, diag);
    return diag << "] on, which rank " << view.rank << " does not hold";
  }

  LogicalResult runTopLevel(Operation *op) {
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case([&](BufferOp buffer) {
          allocate(buffer.getResult());
          return success();
        })
        .Case([&](AllGatherOp gather) { return allGather(gather); })
        .Case([&](DispatchOp dispatch) { return routeTokens(dispatch); })
        .Case([&](TileGridOp grid) { return runGrid(grid); })
        .Default([&](Operation *other) {
          for (int64_t r = 0; r < world(); ++r)
            if (failed(evalOp(other, r, ranks[r].env)))
              return failure();
          return success();
        });
  }

  LogicalResult allGather(AllGatherOp gather) {
    allocate(gather.getResult());
    // Every element comes from the rank whose shard holds it.
    for (int64_t r = 0; r < world(); ++r)
      for (int64_t s = 0; s < world(); ++s) {
        TensorView to{gather.getResult(), r}, from{gather.getSource(), s};
        Box shard = data(from).layout.held();
        copyBox(data(from), shard, data(to), shard);
        markWritten(to, shard);
      }
    return success();
  }

  LogicalResult routeTokens(DispatchOp dispatch) {
    for (Value result : dispatch.getResults())
      allocate(result);
    DistTensorType tokens = dispatch.getTokens().getType();
    DistTensorType routedType = dispatch.getRouted().getType();
    int64_t numExperts = routedType.getShape()[0], capacity = routedType.getShape()[1];
    // Every rank's tokens and routing, in global order.
    int64_t numTokens = tokens.getShape()[0], hidden = tokens.getShape()[1];
    std::vector<int64_t> experts;
    std::vector<float> rows(numTokens * hidden);
    for (int64_t r = 0; r < world(); ++r) {
      const TensorData &x = data({dispatch.getTokens(), r});
      const TensorData &e = data({dispatch.getExperts(), r});
      x.layout.held().forEach(
          [&](ArrayRef<int64_t> at) { rows[at[0] * hidden + at[1]] = x.at(at); });
      for (float v : e.data)
        experts.push_back(static_cast<int64_t>(v));
    }
    if (!llvm::all_of(experts, [&](int64_t e) { return e >= 0 && e < numExperts; }))
      return dispatch.emitOpError()
             << "internal error: mk-sim made an expert index outside [0, " << numExperts << ")";
    Routing routing = route(experts, numExperts, capacity);
    for (int64_t r = 0; r < world(); ++r) {
      TensorView routed{dispatch.getRouted(), r}, counts{dispatch.getCounts(), r},
          origins{dispatch.getOrigins(), r};
      TensorData &routedData = data(routed);
      int64_t topK = experts.size() / numTokens;
      routedData.layout.held().forEach([&](ArrayRef<int64_t> at) {
        int64_t origin = routing.origins[at[0]][at[1]];
        routedData.at(at) = origin < 0 ? 0.0f : rows[origin / topK * hidden + at[2]];
      });
      markWritten(routed, routedData.layout.held());
      TensorData &countData = data(counts);
      countData.layout.held().forEach(
          [&](ArrayRef<int64_t> at) { countData.at(at) = float(routing.counts[at[0]]); });
      markWritten(counts, countData.layout.held());
      TensorData &originData = data(origins);
      originData.layout.held().forEach(
          [&](ArrayRef<int64_t> at) { originData.at(at) = float(routing.origins[at[0]][at[1]]); });
      markWritten(origins, originData.layout.held());
    }
    return success();
  }

  /// The tiles of `grid` that rank `r` visits: all of the global tensor, or those of the shard
  /// the rank holds (TileNumbering); past the row counts, none.
  std::vector<SmallVector<int64_t>> tilesOf(TileGridOp grid, int64_t r) {
    DistTensorType type = grid.getTargetType();
    PlacementAttr placement = type.getPlacement();
    Layout layout = Layout::of(type, mesh, numbering, nodeOf(r), gpuOf(r));
    SmallVector<int64_t> sizes;
    Box tiles;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      int64_t size =
          ShapedType::isDynamic(grid.getTileSizes()[d]) ? layout.global[d] : grid.getTileSizes()[d];
      sizes.push_back(size);
      std::optional<ShardSplit> split = layout.numbered[d];
      if (grid.getGlobal() || !placement.shardsDim(d)) {
        tiles.lo.push_back(0);
        tiles.hi.push_back(TileNumbering::count(split, layout.global[d], size));
      } else if (!TileNumbering::plain(split, size)) {
        int64_t perShard = TileNumbering::perShard(*split, size);
        int64_t shard = placement.getAxis() == MeshAxis::world   ? r
                        : placement.getAxis() == MeshAxis::nodes ? nodeOf(r)
                                                                 : gpuOf(r);
        tiles.lo.push_back(shard * perShard);
        tiles.hi.push_back((shard + 1) * perShard);
      } else {
        tiles.lo.push_back(llvm::divideCeil(layout.first[d], size));
        tiles.hi.push_back(llvm::divideCeil(layout.first[d] + layout.local[d], size));
      }
    }
    const TensorData *counts = grid.getRowCounts() ? &data({grid.getRowCounts(), r}) : nullptr;
    std::vector<SmallVector<int64_t>> visits;
    int64_t rowDim = type.getRank() - 2;
    tiles.forEach([&](ArrayRef<int64_t> at) {
      if (counts && at[rowDim] * sizes[rowDim] >= counts->at({at[0]}))
        return;
      visits.emplace_back(at.begin(), at.end());
    });
    return visits;
  }

  LogicalResult runGrid(TileGridOp grid) {
    combinations.clear();
    combined.clear();
    for (int64_t r = 0; r < world(); ++r) {
      Block &body = grid.getBodyBlock();
      for (const SmallVector<int64_t> &tile : tilesOf(grid, r)) {
        Env env = ranks[r].env;
        for (auto [arg, coord] : llvm::zip(body.getArguments(), tile))
          env[arg] = coord;
        if (failed(evalBlock(body, r, env, nullptr)))
          return failure();
      }
    }
    // The collectives of the grid, now that every rank contributed: each rank that keeps a
    // tile stores the part of it that it holds.
    for (auto &[key, combination] : combinations)
      for (int64_t r : combination.ranks) {
        TensorView view{combination.dest, r};
        TensorData &tensor = data(view);
        const Tile &value = combination.value;
        Box whole = tensor.layout.access(combination.indices, combination.wholeDims, value.shape);
        Box held = whole;
        for (int64_t d = 0; d < tensor.layout.rank(); ++d) {
          held.lo[d] = std::max(whole.lo[d], tensor.layout.first[d]);
          held.hi[d] = std::min(whole.hi[d], tensor.layout.first[d] + tensor.layout.local[d]);
        }
        int64_t rank = whole.lo.size(), tileRank = value.shape.size();
        Type element = tensor.layout.type.getElementType();
        std::vector<float> &slack = ranks[r].slack[combination.dest];
        slack.resize(tensor.data.size());
        held.forEach([&](ArrayRef<int64_t> at) {
          int64_t offset = 0;
          for (int64_t j = 0; j < tileRank; ++j) {
            int64_t d = rank - tileRank + j;
            offset = offset * value.shape[j] + at[d] - whole.lo[d];
          }
          tensor.at(at) = roundTo(element, value.data[offset]);
          slack[tensor.layout.offset(at)] =
              combination.magnitude[offset] * combination.contributions * 0x1p-8f;
        });
        markWritten(view, held);
      }
    for (auto &[dest, into] : combined)
      for (int64_t r = 0; r < world(); ++r) {
        TensorView view{dest, r};
        TensorData &tensor = data(view);
        std::vector<float> &sum = into.sums[r], &magnitude = into.magnitudes[r];
        if (sum.empty()) {
          sum.assign(tensor.data.size(), 0.0f);
          magnitude.assign(tensor.data.size(), 0.0f);
        }
        std::vector<float> &slack = ranks[r].slack[dest];
        slack.resize(tensor.data.size());
        for (size_t k = 0; k < sum.size(); ++k) {
          tensor.data[k] = roundTo(tensor.layout.precision, sum[k]);
          slack[k] = magnitude[k] * into.topK * 0x1p-8f;
        }
        markWritten(view, tensor.layout.held());
      }
    return success();
  }

  /// Evaluates `block` for rank `r`; a terminator's values go to `yielded`.
  LogicalResult evalBlock(Block &block, int64_t r, Env &env, SmallVector<SimValue> *yielded) {
    for (Operation &op : block) {
      if (op.hasTrait<OpTrait::IsTerminator>()) {
        if (yielded)
          for (Value v : op.getOperands())
            yielded->push_back(env.lookup(v));
        continue;
      }
      if (failed(evalOp(&op, r, env)))
        return failure();
    }
    return success();
  }

  SmallVector<SimValue> operandsOf(Operation *op, Env &env) {
    SmallVector<SimValue> values;
    for (Value v : op->getOperands())
      values.push_back(env.lookup(v));
    return values;
  }
  static SmallVector<int64_t> ints(Env &env, ValueRange values) {
    SmallVector<int64_t> out;
    for (Value v : values)
      out.push_back(std::get<int64_t>(env.lookup(v)));
    return out;
  }
  TensorView viewOf(Env &env, Value tensor) { return std::get<TensorView>(env.lookup(tensor)); }

  LogicalResult evalOp(Operation *op, int64_t r, Env &env) {
    SmallVector<SimValue> operands = operandsOf(op, env);
    if (std::optional<SmallVector<SimValue>> results = evaluateWithSlack(op, operands, env)) {
      for (auto [result, value] : llvm::zip(op->getResults(), *results))
        env[result] = value;
      return success();
    }
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case([&](LoadOp load) {
          TensorView view = viewOf(env, load.getSource());
          TensorData &tensor = data(view);
          TileType type = load.getResult().getType();
          Box box = tensor.layout.access(ints(env, load.getIndices()), load.getWholeDims(),
                                         type.getShape());
          if (!tensor.layout.holds(box))
            return outside(op, view, box);
          auto tile = std::make_shared<Tile>(readTile(tensor, box, type));
          tile->slack = slackOf(view, box, type);
          env[load.getResult()] = TilePtr(tile);
          return success();
        })
        .Case([&](StoreOp store) {
          TensorView view = viewOf(env, store.getDest());
          TensorData &tensor = data(view);
          const Tile &tile = *std::get<TilePtr>(env.lookup(store.getValue()));
          Box box =
              tensor.layout.access(ints(env, store.getIndices()), store.getWholeDims(), tile.shape);
          if (!tensor.layout.holds(box))
            return outside(op, view, box);
          writeTile(tensor, box, tile);
          storeSlack(view, box, tile);
          markWritten(view, box);
          return success();
        })
        .Case([&](MatmulOp matmul) {
          TileType type = matmul.getResult().getType();
          TensorView lhs = viewOf(env, matmul.getLhs()), rhs = viewOf(env, matmul.getRhs());
          Box lhsPanel = matmulPanel(data(lhs).layout, ints(env, matmul.getLhsIndices()),
                                     matmul.getLhsWholeDims(), type.getShape()[0]);
          Box rhsPanel = matmulPanel(data(rhs).layout, ints(env, matmul.getRhsIndices()),
                                     matmul.getRhsWholeDims(), type.getShape()[1]);
          if (!data(lhs).layout.holds(lhsPanel))
            return outside(op, lhs, lhsPanel);
          if (!data(rhs).layout.holds(rhsPanel))
            return outside(op, rhs, rhsPanel);
          env[matmul.getResult()] =
              std::make_shared<Tile>(sim::matmul(matmul, data(lhs), lhsPanel, data(rhs), rhsPanel));
          return success();
        })
        .Case([&](AllReduceOp reduce) {
          contribute(reduce.getDest(), reduce.getKind(), reduce.getAxis(), reduce.getValue(),
                     reduce.getIndices(), reduce.getWholeDims(), r, env, /*scatter=*/false);
          return success();
        })
        .Case([&](ReduceScatterOp reduce) {
          DistTensorType dest = reduce.getDest().getType();
          MeshAxis axis =
              dest.getPlacement().isSharded() ? dest.getPlacement().getAxis() : MeshAxis::world;
          contribute(reduce.getDest(), reduce.getKind(), axis, reduce.getValue(),
                     reduce.getIndices(), reduce.getWholeDims(), r, env, /*scatter=*/true);
          return success();
        })
        .Case([&](CombineOp combine) { return combineRows(combine, r, env); })
        .Case([&](RingShiftOp ring) { return ringShift(ring, r, env); })
        .Case([&](ShardRangeOp range) {
          IntIndexOps ops;
          auto [lo, hi] =
              numbering.shardTiles(ops, range.getTensor().getType(), mesh, range.getTile(),
                                   std::get<int64_t>(env.lookup(range.getIndex())));
          env[range.getLo()] = lo;
          env[range.getHi()] = hi;
          return success();
        })
        .Case([&](SequenceTileOp sequence) {
          IntIndexOps ops;
          env[sequence.getPosition()] =
              sequenceTile(ops, sequence.getTensor().getType(), mesh, sequence.getTile(),
                           std::get<int64_t>(env.lookup(sequence.getIndex())));
          return success();
        })
        .Case([&](scf::ForOp loop) {
          int64_t lb = std::get<int64_t>(env.lookup(loop.getLowerBound()));
          int64_t ub = std::get<int64_t>(env.lookup(loop.getUpperBound()));
          int64_t step = std::get<int64_t>(env.lookup(loop.getStep()));
          SmallVector<SimValue> carried;
          for (Value init : loop.getInitArgs())
            carried.push_back(env.lookup(init));
          for (int64_t iv = lb; iv < ub; iv += step) {
            env[loop.getInductionVar()] = iv;
            for (auto [arg, value] : llvm::zip(loop.getRegionIterArgs(), carried))
              env[arg] = value;
            SmallVector<SimValue> next;
            if (failed(evalBlock(*loop.getBody(), r, env, &next)))
              return failure();
            carried = std::move(next);
          }
          for (auto [result, value] : llvm::zip(loop.getResults(), carried))
            env[result] = value;
          return success();
        })
        .Case([&](scf::IfOp branch) {
          bool taken = std::get<int64_t>(env.lookup(branch.getCondition()));
          Region &region = taken ? branch.getThenRegion() : branch.getElseRegion();
          SmallVector<SimValue> results;
          if (!region.empty() && failed(evalBlock(region.front(), r, env, &results)))
            return failure();
          for (auto [result, value] : llvm::zip(branch.getResults(), results))
            env[result] = value;
          return success();
        })
        .Case([&](FlagsOp) { return success(); })
        .Default([&](Operation *other) {
          return other->emitOpError() << "mk-sim: has no meaning at the program level";
        });
  }

  void contribute(Value dest, ReduceKind kind, MeshAxis axis, Value value, ValueRange indices,
                  ArrayRef<int64_t> wholeDims, int64_t r, Env &env, bool scatter) {
    SmallVector<int64_t> coords = ints(env, indices);
    int64_t group = groupOf(mesh, axis, r);
    const Tile &tile = *std::get<TilePtr>(env.lookup(value));
    CombinationKey key{dest.getAsOpaquePointer(), group, {coords.begin(), coords.end()}};
    auto [it, first] =
        combinations.try_emplace(key, Combination{dest,
                                                  tile,
                                                  std::vector<float>(tile.data.size(), 0.0f),
                                                  0,
                                                  coords,
                                                  SmallVector<int64_t>(wholeDims),
                                                  {}});
    Combination &c = it->second;
    ++c.contributions;
    for (size_t k = 0; k < tile.data.size(); ++k)
      c.magnitude[k] += std::fabs(tile.data[k]);
    if (!first)
      for (size_t k = 0; k < tile.data.size(); ++k)
        c.value.data[k] = kind == ReduceKind::sum   ? c.value.data[k] + tile.data[k]
                          : kind == ReduceKind::max ? std::max(c.value.data[k], tile.data[k])
                                                    : std::min(c.value.data[k], tile.data[k]);
    if (!first)
      return;
    // Who keeps the result: every rank of the group, or those whose shard holds part of it.
    for (int64_t s = 0; s < world(); ++s) {
      if (groupOf(mesh, axis, s) != group)
        continue;
      if (scatter) {
        const Layout &layout = data({dest, s}).layout;
        Box box = layout.access(coords, wholeDims, tile.shape);
        bool overlaps = true;
        for (int64_t d = 0; d < layout.rank(); ++d)
          overlaps &= box.lo[d] < layout.first[d] + layout.local[d] && box.hi[d] > layout.first[d];
        if (!overlaps)
          continue;
      }
      c.ranks.push_back(s);
    }
  }

  /// mk.combine: each routed row, weighted, is added to its token's row on the token's rank.
  LogicalResult combineRows(CombineOp combine, int64_t r, Env &env) {
    const Tile &tile = *std::get<TilePtr>(env.lookup(combine.getValue()));
    SmallVector<int64_t> coords = ints(env, combine.getCoords());
    const TensorData &origins = data({combine.getOrigins(), r});
    DistTensorType dest = combine.getDest().getType();
    DistTensorType weights = combine.getWeights().getType();
    int64_t topK = weights.getShape()[1], hidden = dest.getShape()[1];
    Combined &into = combined[combine.getDest()];
    into.sums.resize(world());
    into.magnitudes.resize(world());
    into.topK = topK;
    for (int64_t i = 0; i < tile.rows(); ++i) {
      int64_t slot = coords[1] * tile.rows() + i;
      if (slot >= origins.layout.global[1])
        break;
      int64_t origin = static_cast<int64_t>(origins.at({coords[0], slot}));
      if (origin < 0)
        continue;
      int64_t token = origin / topK, j = origin % topK;
      // The token's rank: the shard of the destination holding its row.
      for (int64_t s = 0; s < world(); ++s) {
        const TensorData &y = data({combine.getDest(), s});
        if (token < y.layout.first[0] || token >= y.layout.first[0] + y.layout.local[0])
          continue;
        float weight = data({combine.getWeights(), s}).at({token, j});
        std::vector<float> &sum = into.sums[s], &magnitude = into.magnitudes[s];
        if (sum.empty()) {
          sum.assign(y.data.size(), 0.0f);
          magnitude.assign(y.data.size(), 0.0f);
        }
        for (int64_t c = 0; c < tile.cols(); ++c) {
          int64_t col = coords[2] * tile.cols() + c;
          if (col >= hidden)
            continue;
          int64_t offset = y.layout.offset({token, col});
          sum[offset] += weight * tile.at(i, c);
          magnitude[offset] += std::fabs(weight * tile.at(i, c));
        }
      }
    }
    return success();
  }

  /// mk.ring_shift: the body once per rank of the axis, with that rank's shards.
  LogicalResult ringShift(RingShiftOp ring, int64_t r, Env &env) {
    Block &body = ring.getBody().front();
    MeshAxis axis = ring.getAxis();
    int64_t size = mesh.getAxisSize(axis), mine = indexAlong(mesh, axis, r);
    SmallVector<SimValue> carried;
    for (Value init : ring.getInits())
      carried.push_back(env.lookup(init));
    for (int64_t step = 0; step < size; ++step) {
      int64_t index = (mine + step) % size, holder = rankAt(mesh, axis, r, index);
      env[body.getArgument(0)] = index;
      for (auto [arg, shard] :
           llvm::zip(body.getArguments().slice(1, ring.getShards().size()), ring.getShards()))
        env[arg] = TensorView{viewOf(env, shard).tensor, holder};
      for (auto [arg, value] :
           llvm::zip(body.getArguments().drop_front(1 + ring.getShards().size()), carried))
        env[arg] = value;
      SmallVector<SimValue> next;
      if (failed(evalBlock(body, r, env, &next)))
        return failure();
      carried = std::move(next);
    }
    for (auto [result, value] : llvm::zip(ring.getResults(), carried))
      env[result] = value;
    return success();
  }

  ProgramOp program;
  MeshAttr mesh;
  TileNumbering numbering;
  std::vector<Rank> ranks;
  /// The current grid's all-reduce and reduce-scatter tiles, by destination, group and tile.
  using CombinationKey = std::tuple<const void *, int64_t, std::vector<int64_t>>;
  std::map<CombinationKey, Combination> combinations;
  /// The current grid's mk.combine sums by destination: each rank's part, in f32, and the sums
  /// of their terms' magnitudes.
  struct Combined {
    std::vector<std::vector<float>> sums, magnitudes;
    int64_t topK = 1;
  };
  DenseMap<Value, Combined> combined;
};

} // namespace

FailureOr<ReferenceResult> sim::evaluateReference(ProgramOp program, RankArguments arguments) {
  return Reference(program, std::move(arguments)).run();
}
