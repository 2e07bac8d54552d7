//===- PartitionRoles.cpp - split the persistent grid into roles ----------===//

#include "mk/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir::mk {
#define GEN_PASS_DEF_MKPARTITIONROLES
#include "mk/Transforms/Passes.h.inc"
} // namespace mlir::mk

using namespace mlir;
using namespace mlir::mk;

namespace {

/// What one role does per launch on one rank.
struct RoleWork {
  RoleOp role;
  RoleKind kind;
  double flops = 0;        // matmul work
  double ctaBytes = 0;     // bytes its CTAs load and store
  double nvlinkBytes = 0;  // bytes it sends over NVLink
  double networkBytes = 0; // bytes it hands to the proxy
  double proxyPushes = 0;  // transfers it hands to the proxy, each holding its CTA a while
  int64_t handoffs = 1;    // pieces in which it hands compute its work, in order
  int64_t ctas = 1;

  bool isCompute() const { return kind == RoleKind::compute; }
};

struct CostModel {
  double smFlops, ctaBytesPerSecond, nvlinkBytesPerSecond, networkBytesPerSecond, pushSeconds;

  /// Seconds per launch with `ctas` CTAs: compute scales with CTAs; transfers scale with CTAs
  /// until the link they use is the limit.
  double seconds(const RoleWork &work, int64_t ctas) const {
    double compute = work.flops / (smFlops * ctas);
    double copy = (work.ctaBytes / ctaBytesPerSecond + work.proxyPushes * pushSeconds) / ctas;
    double links = std::max(work.nvlinkBytes / nvlinkBytesPerSecond,
                            work.networkBytes / networkBytesPerSecond);
    return std::max(compute + copy, links);
  }

  /// Seconds until compute's last tile where `feeder` hands it its work in `handoffs` pieces, in
  /// order, and compute's tiles of a piece wait for it (a pipeline of two stages): compute waits
  /// for the first piece, and the last piece's tiles come after it.
  double pipelined(const RoleWork &feeder, const RoleWork &compute) const {
    double feed = seconds(feeder, feeder.ctas), work = seconds(compute, compute.ctas);
    return std::max(feed / feeder.handoffs + work, feed + work / feeder.handoffs);
  }
};

int64_t bytesOf(Type element, ArrayRef<int64_t> shape) {
  int64_t elements = 1;
  for (int64_t extent : shape)
    elements *= extent;
  return elements * llvm::divideCeil(element.getIntOrFloatBitWidth(), 8);
}

class Partitioner {
public:
  Partitioner(ProgramOp program) : program(program), mesh(program.getMesh()) {}

  /// The work of each role, counting each op once per tile it runs for.
  SmallVector<RoleWork> estimate() {
    SmallVector<RoleWork> works;
    for (RoleOp role : program.getBodyBlock().getOps<RoleOp>()) {
      RoleWork work{role, role.getKind()};
      role.getBody().walk([&](Operation *op) { account(op, work); });
      works.push_back(work);
    }
    return works;
  }

  /// The fewest CTAs, of the same parity as `ctas` (clusters pair CTAs), that walk each of
  /// `role`'s tile grids in as many rounds as `ctas` do: the CTA with the most tiles has as many
  /// either way, and the CTAs left out would only contend for memory and power (on an H200 the
  /// GEMM engine's 2,048 tiles of 8192 x 8192 x 4096 ran 0.5-2% faster on 128 CTAs than on 132).
  /// `ctas` where a grid's tile count is not known. A tile whose K is split (split-K) is walked
  /// as that many parts.
  int64_t fewestCtasForRounds(RoleOp role, int64_t ctas) {
    SmallVector<int64_t> tileCounts;
    bool known = true;
    role.getBody().walk([&](TileGridOp grid) {
      std::optional<int64_t> tiles = staticTiles(grid);
      known = known && tiles;
      int64_t parts = 1;
      grid.getBody().walk([&](MatmulOp matmul) { parts = matmul.getKSplits().value_or(1); });
      if (tiles)
        tileCounts.push_back(*tiles * parts);
    });
    if (!known || tileCounts.empty())
      return ctas;
    const int64_t step = ctas % 2 == 0 ? 2 : 1;
    auto sameRounds = [&](int64_t fewer) {
      return llvm::all_of(tileCounts, [&](int64_t tiles) {
        return llvm::divideCeil(tiles, fewer) == llvm::divideCeil(tiles, ctas);
      });
    };
    int64_t fewest = ctas;
    while (fewest > step && sameRounds(fewest - step))
      fewest -= step;
    return fewest;
  }

private:
  /// How many times `op` runs per launch on this rank: the tiles of its enclosing grids times the
  /// trip counts of its enclosing loops, times the share of tiles a branch on the tile's owner
  /// takes.
  double repetitions(Operation *op) {
    double times = 1;
    Operation *child = op;
    for (Operation *parent = op->getParentOp(); parent && !isa<RoleOp>(parent);
         child = parent, parent = parent->getParentOp()) {
      if (auto grid = dyn_cast<TileGridOp>(parent))
        times *= tilesOf(grid);
      else if (auto loop = dyn_cast<scf::ForOp>(parent))
        times *= tripCount(loop);
      else if (auto branch = dyn_cast<scf::IfOp>(parent))
        times *= ownerShare(branch, branch.getThenRegion().isAncestor(child->getParentRegion()));
    }
    return times;
  }

  /// The share of tiles that take one side of a branch on whether this rank owns the tile
  /// (mk.owner's GPU or node against mk.place's): one in the axis size, or the rest; 1 for a
  /// branch on anything else.
  double ownerShare(scf::IfOp branch, bool thenSide) {
    auto compare = branch.getCondition().getDefiningOp<arith::CmpIOp>();
    if (!compare || (compare.getPredicate() != arith::CmpIPredicate::eq &&
                     compare.getPredicate() != arith::CmpIPredicate::ne))
      return 1;
    auto axisOf = [&](Value v) -> std::optional<MeshAxis> {
      auto result = dyn_cast<OpResult>(v);
      if (!result || !isa<OwnerOp, PlaceOp>(result.getOwner()))
        return std::nullopt;
      return result.getResultNumber() == 0 ? MeshAxis::nodes : MeshAxis::gpus;
    };
    std::optional<MeshAxis> lhs = axisOf(compare.getLhs()), rhs = axisOf(compare.getRhs());
    bool ownerAndPlace =
        compare.getLhs().getDefiningOp<OwnerOp>() != compare.getRhs().getDefiningOp<OwnerOp>();
    if (!lhs || lhs != rhs || !ownerAndPlace)
      return 1;
    double mine = 1.0 / mesh.getAxisSize(*lhs);
    bool equalSide = thenSide == (compare.getPredicate() == arith::CmpIPredicate::eq);
    return equalSide ? mine : 1 - mine;
  }

  /// The tiles of `grid` along each dim (over every rank of a distributed grid): one where the
  /// tile takes the whole dim (`:`), none where the extent is not bound.
  SmallVector<std::optional<int64_t>> tilesAlongDims(TileGridOp grid) {
    DistTensorType target = grid.getTargetType();
    SmallVector<std::optional<int64_t>> tiles;
    for (int64_t d = 0; d < target.getRank(); ++d) {
      int64_t extent = grid.getGlobal() ? target.getShape()[d] : target.getLocalExtent(d, mesh);
      int64_t size = grid.getTileSizes()[d];
      if (ShapedType::isDynamic(size))
        tiles.push_back(1);
      else if (ShapedType::isDynamic(extent))
        tiles.push_back(std::nullopt);
      else
        tiles.push_back(llvm::divideCeil(extent, size));
    }
    return tiles;
  }

  /// The rows a group of a grid bounded by the row counts `counts` holds on average: routing
  /// that spreads every rank's copies evenly over the experts (mk.route_counts fills the counts
  /// from its census, which mk.route_rows routes by), at most the capacity. None where no
  /// routing fills them.
  std::optional<double> expectedRows(Value counts) {
    RouteCountsOp fill;
    program.walk([&](RouteCountsOp op) {
      if (op.getCounts() == counts)
        fill = op;
    });
    RouteRowsOp route;
    program.walk([&](RouteRowsOp op) {
      if (fill && op.getCensus() == fill.getCensus() && !op.getSource())
        route = op;
    });
    if (!route)
      return std::nullopt;
    DistTensorType experts = route.getExperts().getType();
    double copies = double(experts.getShape()[0]) * experts.getShape()[1];
    return std::min<double>(fill.getCapacity(), copies / route.getRouted().getType().getShape()[0]);
  }

  /// The tiles of `grid` this rank walks on average (an unbound extent counts one tile; a grid
  /// bounded by row counts, the tiles of their expected rows).
  double tilesOf(TileGridOp grid) {
    SmallVector<std::optional<int64_t>> along = tilesAlongDims(grid);
    double tiles = 1;
    for (std::optional<int64_t> count : along)
      tiles *= count.value_or(1);
    if (Value counts = grid.getRowCounts())
      if (std::optional<double> rows = expectedRows(counts); rows && along[1])
        tiles = tiles / *along[1] * std::ceil(*rows / grid.getTileSizes()[1]);
    if (std::optional<MeshAxis> axis = grid.getDistribute())
      tiles /= mesh.getAxisSize(*axis);
    return tiles;
  }

  /// The tiles of `grid` this rank walks at most; none where an extent is not bound or row
  /// counts decide.
  std::optional<int64_t> staticTiles(TileGridOp grid) {
    if (grid.getRowCounts())
      return std::nullopt;
    int64_t tiles = 1;
    for (std::optional<int64_t> along : tilesAlongDims(grid)) {
      if (!along)
        return std::nullopt;
      tiles *= *along;
    }
    if (std::optional<MeshAxis> axis = grid.getDistribute())
      tiles = llvm::divideCeil(tiles, mesh.getAxisSize(*axis));
    return tiles;
  }

  static double tripCount(scf::ForOp loop) {
    auto constant = [](Value v) -> std::optional<int64_t> {
      if (auto op = v.getDefiningOp<arith::ConstantIndexOp>())
        return op.value();
      return std::nullopt;
    };
    std::optional<int64_t> lb = constant(loop.getLowerBound()), ub = constant(loop.getUpperBound()),
                           step = constant(loop.getStep());
    if (!lb || !ub || !step || *step <= 0)
      return 1;
    return std::max<int64_t>(0, llvm::divideCeil(*ub - *lb, *step));
  }

  /// The share of a transfer's runs that reach another GPU: a loop over every GPU of the node
  /// (peer (g + i) mod G, G trips) reaches this one once.
  double remoteShare(Operation *op, Value peer) {
    auto loop = op->getParentOfType<scf::ForOp>();
    auto rem = peer ? peer.getDefiningOp<arith::RemSIOp>() : arith::RemSIOp();
    auto sum = rem ? rem.getLhs().getDefiningOp<arith::AddIOp>() : arith::AddIOp();
    auto modulus =
        rem ? rem.getRhs().getDefiningOp<arith::ConstantIndexOp>() : arith::ConstantIndexOp();
    if (!loop || !sum || !modulus || sum.getRhs() != loop.getInductionVar() ||
        !sum.getLhs().getDefiningOp<PlaceOp>() || tripCount(loop) != modulus.value())
      return 1;
    return double(modulus.value() - 1) / modulus.value();
  }

  void account(Operation *op, RoleWork &work) {
    double times = repetitions(op);
    auto linkBytes = [&](std::optional<Link> link, PeerScope scope, double bytes) {
      if (scope == PeerScope::node) {
        work.networkBytes += bytes;
        work.proxyPushes += times;
      } else if (scope == PeerScope::gpu)
        work.nvlinkBytes += bytes * remoteShare(op, peerOf(op));
      // Stores and SM copies go through the CTA; bulk and proxy copies do not.
      if (!link || *link == Link::nvlink_store)
        work.ctaBytes += 2 * bytes;
    };
    if (auto matmul = dyn_cast<MatmulOp>(op)) {
      TileType tile = matmul.getResult().getType();
      DistTensorType lhs = matmul.getLhs().getType();
      int64_t k = lhs.getLocalExtent(matmul.getLhsWholeDims()[0], mesh);
      work.flops += times * 2.0 * tile.getShape()[0] * tile.getShape()[1] * k;
    } else if (auto put = dyn_cast<PutOp>(op)) {
      TileType tile = put.getValue().getType();
      linkBytes(put.getLink(), put.getScope(),
                times * bytesOf(tile.getElementType(), tile.getShape()));
    } else if (auto copy = dyn_cast<CopyOp>(op)) {
      Type element = copy.getSource().getType().getElementType();
      linkBytes(copy.getLink(), copy.getScope(), times * bytesOf(element, copy.getTile()));
    } else if (auto accumulate = dyn_cast<AccumulateOp>(op)) {
      DistTensorType source = accumulate.getSource().getType();
      int64_t slots = source.getShape()[accumulate.getWholeDims()[0]];
      work.ctaBytes +=
          times * slots *
          bytesOf(source.getElementType(), accumulate.getResult().getType().getShape());
    } else if (auto store = dyn_cast<StoreOp>(op)) {
      TileType tile = store.getValue().getType();
      work.ctaBytes += times * bytesOf(tile.getElementType(), tile.getShape());
    } else if (auto load = dyn_cast<LoadOp>(op)) {
      TileType tile = load.getResult().getType();
      work.ctaBytes += times * bytesOf(tile.getElementType(), tile.getShape());
    } else if (auto route = dyn_cast<RouteRowsOp>(op)) {
      // Every copy's row to an expert of this node (routing spread evenly: 1/N of a rank's, its
      // own or a rail peer's), read here and written where its expert is.
      DistTensorType tokens = route.getTokens().getType();
      int64_t nodes = mesh.getNodes();
      int64_t rows =
          route.getSource() ? tokens.getShape()[0] / nodes : tokens.getLocalExtent(0, mesh);
      double bytes = times * route.getExperts().getType().getShape()[1] *
                     bytesOf(tokens.getElementType(), {rows, tokens.getShape()[1]}) / nodes;
      work.ctaBytes += 2 * bytes;
      work.nvlinkBytes += bytes * (1 - 1.0 / mesh.getGpus());
      // Each expert's rows are signalled as they arrive, expert by expert.
      work.handoffs = std::max(work.handoffs, flagsSize(route.getArrivals()));
    } else if (auto pack = dyn_cast<RoutePackOp>(op)) {
      // The rows bound for the other nodes, at most every token's for each.
      DistTensorType tokens = pack.getTokens().getType();
      int64_t nodes = mesh.getNodes();
      double share = std::min(1.0, double(pack.getExperts().getType().getShape()[1]) / nodes);
      work.ctaBytes +=
          2 * times * (nodes - 1) * share *
          bytesOf(tokens.getElementType(), {tokens.getLocalExtent(0, mesh), tokens.getShape()[1]});
    } else if (auto back = dyn_cast<ReturnRowsOp>(op)) {
      TileType tile = back.getValue().getType();
      double bytes = times * bytesOf(tile.getElementType(), tile.getShape());
      work.ctaBytes += bytes;
      work.nvlinkBytes += bytes * (1 - 1.0 / mesh.getWorldSize());
    } else if (auto combine = dyn_cast<CombineReturnedOp>(op)) {
      // The token's returned rows, and the sum.
      DistTensorType returned = combine.getReturned().getType();
      work.ctaBytes += times * (returned.getShape()[1] + 1) *
                       bytesOf(returned.getElementType(), combine.getTile());
    }
  }

  /// The flags of the array `name` declares.
  int64_t flagsSize(StringRef name) {
    for (FlagsOp flags : program.getBodyBlock().getOps<FlagsOp>())
      if (flags.getSymName() == name)
        return llvm::product_of(flags.getShape());
    return 1;
  }

  static Value peerOf(Operation *op) {
    if (auto put = dyn_cast<PutOp>(op))
      return put.getPeer();
    if (auto copy = dyn_cast<CopyOp>(op))
      return copy.getPeer();
    return Value();
  }

  ProgramOp program;
  MeshAttr mesh;
};

struct PartitionRolesPass : mk::impl::MkPartitionRolesBase<PartitionRolesPass> {
  using MkPartitionRolesBase::MkPartitionRolesBase;

  void runOnOperation() override {
    ProgramOp program = getOperation();
    if (std::optional<std::string> error = checkSmCount(smCount)) {
      program.emitError() << *error;
      return signalPassFailure();
    }
    if (gpuSmCount && gpuSmCount < smCount) {
      program.emitError() << "gpu-sm-count is " << static_cast<int64_t>(gpuSmCount)
                          << ", fewer than the grid's sm-count " << static_cast<int64_t>(smCount);
      return signalPassFailure();
    }
    auto roles = program.getBodyBlock().getOps<RoleOp>();
    if (roles.empty()) {
      program.emitError() << "@" << program.getSymName()
                          << " has no roles (run mk-expand-collectives first)";
      return signalPassFailure();
    }
    if (llvm::any_of(roles, [](RoleOp role) { return role.getCtas().has_value(); }))
      return; // split by the author

    Partitioner partitioner(program);
    SmallVector<RoleWork> works = partitioner.estimate();
    if (smCount < static_cast<int64_t>(works.size())) {
      program.emitError() << "needs at least " << works.size() << " CTAs, one per role, but "
                          << "sm-count is " << static_cast<int64_t>(smCount);
      return signalPassFailure();
    }
    // A CTA computes at its SM's share of the whole GPU's rate, however many the grid has.
    CostModel model{computeTflops * 1e12 / (gpuSmCount ? gpuSmCount : smCount), ctaCopyGBps * 1e9,
                    nvlinkGBps * 1e9, networkGBps * 1e9, proxyPushUs * 1e-6};

    std::string source;
    if (failed(split(program, partitioner, works, model, source)))
      return signalPassFailure();

    // The grid is what the roles take: CTAs of none would only exit.
    OpBuilder b(program);
    int64_t grid = 0;
    for (RoleWork &work : works) {
      work.role.setCtasAttr(b.getI64IntegerAttr(work.ctas));
      grid += work.ctas;
    }
    program.setGridAttr(b.getI64IntegerAttr(grid));
    if (explain)
      program.emitRemark() << describe(program, works, model, source);
  }

  /// Fills in each role's CTA count: from an override if there is one, else by giving the next
  /// CTA to the role that would finish last, as long as a CTA makes it faster; the CTAs no role
  /// can use go to compute, as far as they take rounds of tiles off it.
  LogicalResult split(ProgramOp program, Partitioner &partitioner, SmallVector<RoleWork> &works,
                      const CostModel &model, std::string &source) {
    SmSplit override;
    if (auto dict = program->getAttrOfType<DictionaryAttr>("mk.sm_split");
        smSplit.empty() && dict) {
      for (NamedAttribute entry : dict) {
        auto count = dyn_cast<IntegerAttr>(entry.getValue());
        override.roles.push_back({entry.getName().str(), count ? count.getInt() : 0});
      }
      source = "the program's mk.sm_split";
    } else if (!smSplit.empty()) {
      if (std::optional<std::string> error = SmSplit::parse(smSplit, override))
        return program.emitError() << *error;
      source = "sm-split";
    }
    if (!override.empty())
      return applyOverride(program, works, override);

    source = "the cost model";
    int64_t spare = give(works, model, smCount - static_cast<int64_t>(works.size()), 1);
    auto compute = llvm::find_if(works, [](const RoleWork &work) { return work.isCompute(); });
    if (compute == works.end())
      return success();
    compute->ctas += spare;
    const double computeSeconds = model.seconds(*compute, compute->ctas);
    const int64_t fewest = partitioner.fewestCtasForRounds(compute->role, compute->ctas);
    spare = compute->ctas - fewest;
    compute->ctas = fewest;
    // Roles slower than compute may still use them, in steps that keep pairs of CTAs paired.
    const int64_t step = fewest % 2 == 0 ? 2 : 1;
    give(works, model, spare, step, computeSeconds);
    for (RoleWork &feeder : works)
      if (!feeder.isCompute() && feeder.handoffs > 1)
        feedSooner(feeder, *compute, model, step);
    return success();
  }

  /// Moves CTAs from compute to `feeder`, `step` at a time, as long as compute's last tile comes
  /// sooner: compute balanced against the feeder's total time still waits for its first piece
  /// (one dispatch CTA's first expert at Mixtral's shapes, an eighth of 3.7 ms).
  static void feedSooner(RoleWork &feeder, RoleWork &compute, const CostModel &model,
                         int64_t step) {
    while (compute.ctas > step) {
      const double before = model.pipelined(feeder, compute);
      compute.ctas -= step;
      feeder.ctas += step;
      if (model.pipelined(feeder, compute) < before)
        continue;
      compute.ctas += step;
      feeder.ctas -= step;
      return;
    }
  }

  /// Gives up to `spare` CTAs, `step` at a time, each time to the role that would finish last,
  /// as long as `step` more CTAs make it faster; with `slowerThan`, only to the roles other than
  /// compute that take longer than that. Returns the CTAs left.
  static int64_t give(MutableArrayRef<RoleWork> works, const CostModel &model, int64_t spare,
                      int64_t step, std::optional<double> slowerThan = std::nullopt) {
    for (; spare >= step; spare -= step) {
      RoleWork *slowest = nullptr;
      double worst = slowerThan.value_or(-1);
      for (RoleWork &work : works) {
        if (work.isCompute() && slowerThan)
          continue;
        double seconds = model.seconds(work, work.ctas);
        if (seconds > worst && model.seconds(work, work.ctas + step) < seconds) {
          worst = seconds;
          slowest = &work;
        }
      }
      if (!slowest)
        break;
      slowest->ctas += step;
    }
    return spare;
  }

  LogicalResult applyOverride(ProgramOp program, SmallVector<RoleWork> &works,
                              const SmSplit &split) {
    if (std::optional<std::string> error = split.check())
      return program.emitError() << *error;
    int64_t total = 0;
    for (RoleWork &work : works) {
      StringRef kind = stringifyRoleKind(work.kind);
      std::optional<int64_t> ctas = split.ctasOf(kind);
      if (!ctas)
        return program.emitError() << "the sm split gives no CTAs to role " << kind;
      work.ctas = *ctas;
      total += work.ctas;
    }
    if (total > smCount)
      return program.emitError() << "the sm split needs " << total << " CTAs, but the grid has "
                                 << static_cast<int64_t>(smCount);
    return success();
  }

  std::string describe(ProgramOp program, ArrayRef<RoleWork> works, const CostModel &model,
                       StringRef source) {
    std::string text;
    llvm::raw_string_ostream os(text);
    int64_t grid = 0;
    for (const RoleWork &work : works)
      grid += work.ctas;
    os << "SM split of @" << program.getSymName() << " on " << grid << " CTAs (of "
       << static_cast<int64_t>(smCount) << " SMs";
    if (gpuSmCount > smCount)
      os << ", a share of the GPU's " << static_cast<int64_t>(gpuSmCount);
    os << "), from " << source << ":";
    for (const RoleWork &work : works) {
      os << "\n  " << stringifyRoleKind(work.kind) << " " << work.ctas
         << " CTAs: " << llvm::formatv("{0:F3} ms", 1e3 * model.seconds(work, work.ctas));
      if (work.flops)
        os << llvm::formatv(" for {0:F1} GFLOP", work.flops / 1e9);
      if (work.ctaBytes)
        os << llvm::formatv(", {0:F1} MB through CTAs", work.ctaBytes / 1e6);
      if (work.nvlinkBytes)
        os << llvm::formatv(", {0:F1} MB over NVLink", work.nvlinkBytes / 1e6);
      if (work.networkBytes)
        os << llvm::formatv(", {0:F1} MB over the network", work.networkBytes / 1e6);
    }
    auto compute = llvm::find_if(works, [](const RoleWork &work) { return work.isCompute(); });
    for (const RoleWork &work : compute == works.end() ? ArrayRef<RoleWork>() : works)
      if (!work.isCompute() && work.handoffs > 1)
        os << llvm::formatv(
            "\n  compute's last tile at {0:F3} ms: {1} hands it {2} pieces in order",
            1e3 * model.pipelined(work, *compute), stringifyRoleKind(work.kind), work.handoffs);
    // Copy engines move these beside the kernel: they take no CTA, and the model leaves them out.
    double engineBytes = 0;
    for (EngineCopyOp copy : program.getBodyBlock().getOps<EngineCopyOp>()) {
      double element = copy.getTensor().getType().getElementType().getIntOrFloatBitWidth() / 8;
      engineBytes += element * (copy.getRows()[1] - copy.getRows()[0]) *
                     (copy.getCols()[1] - copy.getCols()[0]);
    }
    if (engineBytes)
      os << llvm::formatv("\n  copy engines: {0:F1} MB over NVLink, beside the kernel (not "
                          "modelled)",
                          engineBytes / 1e6 / program.getMesh().getGpus());
    return text;
  }
};

} // namespace
