//===- TileAndOrder.cpp - main-loop depth, gather chunks, tile order ------===//

#include "TileAccess.h"

#include "mk/Transforms/GemmEngine.h"
#include "mk/Transforms/Passes.h"

namespace mlir::mk {
#define GEN_PASS_DEF_MKTILEANDORDER
#include "mk/Transforms/Passes.h.inc"
} // namespace mlir::mk

using namespace mlir;
using namespace mlir::mk;

namespace {

/// Tile rows that share panels of B in L2 when swizzled.
constexpr int64_t kSwizzleGroup = 8;
/// Smallest main-loop depth taken where it divides the contracted extent: the tile library's
/// copies take slices of 32 of every tile (of 16, not of 64-row ones).
constexpr int64_t kMinKTile = 32;
/// The GEMM engine's tile shapes, largest first, with the time a tile of each takes, in
/// hundredths of a 128 x 256 tile's: measured on an H200 (docs/notes/compiler.md), 128 columns
/// take 0.53-0.54 of 256 (less work per byte loaded); 64 columns, which put twice the CTAs on a
/// grid of few tile rows (decode's M), 0.30 (estimated: a quarter of the work, half the bytes);
/// 64 x 64, one MMA warpgroup's rows, which put twice the CTAs again on a grid of two tile rows
/// of 64 (M = 65 to 128), 0.20 (estimated: two thirds of 128 x 64's bytes, which bound it there;
/// docs/notes/decode.md has what they gain at M = 128).
struct EngineTileShape {
  int64_t rows, columns, time;
};
constexpr EngineTileShape kEngineTileShapes[] = {
    {128, 256, 100}, {128, 128, 54}, {128, 64, 30}, {64, 64, 20}};
/// Where K may be split (gemm-k-splits other than 1), a tile part's time is instead the longer
/// of its multiplication (in hundredths of a 128 x 256 tile's) and its loads: the bytes of A's
/// rows and B's columns over its share of K, taking this much of a 128 x 256 tile's time per
/// share of its bytes (128 x 128 tiles take 0.54 of 128 x 256: half the work, two thirds of the
/// bytes). Not the default until its choices are measured on a GPU.
constexpr double kLoadTime = 0.81;
/// Parts of K a tile may be split in (split-K), each at least this many 64-deep blocks, and how
/// much faster than the best unsplit tiling the model must find a split to take it: each part's
/// product goes through memory to the part that arrives last, which the model counts, and that
/// part sums them after its own, which it does not.
constexpr int64_t kMaxKSplits = 4, kMinSplitBlocks = 16;
/// The most parts `gemm-k-splits` asks for.
constexpr int64_t kMaxForcedKSplits = 8;
constexpr double kSplitGain = 0.9;
/// The rows of the engine's tiles, and of one MMA warpgroup's.
constexpr int64_t kEngineTileRows = 128, kWarpgroupRows = 64;
/// The width the tile library multiplies where TMA cannot address the engine's tiles.
constexpr int64_t kTileLibraryWidth = 128;

bool isEngineTileWidth(int64_t columns) {
  return llvm::any_of(kEngineTileShapes,
                      [&](EngineTileShape shape) { return shape.columns == columns; });
}

/// The main-loop depth whose rows are 128 bytes, halved (down to kMinKTile) until it divides
/// `extent`; where none does, the 128-byte one, its last slice zero-filled past the extent.
int64_t chooseKTile(int64_t extent, Type element) {
  int64_t widest = 1024 / element.getIntOrFloatBitWidth();
  for (int64_t kTile = widest; kTile >= kMinKTile; kTile /= 2)
    if (extent % kTile == 0)
      return kTile;
  return widest;
}

/// The extent of `grid`'s target along `d` that its tiles cover: the whole tensor or this rank's
/// shard.
int64_t coveredExtent(TileGridOp grid, int64_t d, MeshAttr mesh) {
  DistTensorType target = grid.getTargetType();
  return grid.getGlobal() ? target.getShape()[d] : target.getLocalExtent(d, mesh);
}

/// Whether `grid`'s tiles run matmuls.
bool computesMatmuls(TileGridOp grid) {
  return grid.getBody().walk([](MatmulOp) { return WalkResult::interrupt(); }).wasInterrupted();
}

/// Whether every matmul of `grid` multiplies 16-bit operands, as the GEMM engine does.
bool engineOperands(TileGridOp grid) {
  return !grid.getBody()
              .walk([](MatmulOp matmul) {
                Type element = matmul.getLhs().getType().getElementType();
                return element.isBF16() || element.isF16() ? WalkResult::advance()
                                                           : WalkResult::interrupt();
              })
              .wasInterrupted();
}

/// Every value defined inside `grid`'s body: the results of its ops and the arguments of their
/// regions' blocks.
SmallVector<Value> valuesInside(TileGridOp grid) {
  SmallVector<Value> values;
  grid.getBody().walk([&](Operation *op) {
    for (Region &region : op->getRegions())
      for (Block &block : region)
        llvm::append_range(values, block.getArguments());
    llvm::append_range(values, op->getResults());
  });
  return values;
}

/// The tile width `grid` can take instead of its own, if it is a 2-D grid of the GEMM engine's
/// matmul tiles whose every tile value has the grid's tile shape; else nullopt.
std::optional<int64_t> engineTileWidth(TileGridOp grid) {
  ArrayRef<int64_t> sizes = grid.getTileSizes();
  if (sizes.size() != 2 || sizes[0] != kEngineTileRows || !isEngineTileWidth(sizes[1]))
    return std::nullopt;
  bool uniform = llvm::all_of(valuesInside(grid), [&](Value value) {
    auto tile = dyn_cast<TileType>(value.getType());
    return !tile || tile.getShape() == sizes;
  });
  if (!computesMatmuls(grid) || !uniform)
    return std::nullopt;
  return sizes[1];
}

/// Whether TMA addresses the tiles of `grid` `rows` x `width`, with its matmuls' panels, as the
/// GEMM engine needs. Where it does not, the tile library multiplies: its accumulator of a
/// 256-column tile does not fit in registers beside the rest of a kernel.
bool engineAddresses(TileGridOp grid, int64_t rows, int64_t width, const TileNumbering &numbering) {
  MeshAttr mesh = grid->getParentOfType<ProgramOp>().getMesh();
  if (!tmaAddresses(grid.getTargetType(), {rows, width}, mesh, numbering))
    return false;
  return !grid.getBody()
              .walk([&](MatmulOp matmul) {
                SmallVector<int64_t> panel = bKMajor(matmul) ? SmallVector<int64_t>{width, 1}
                                                             : SmallVector<int64_t>{1, width};
                return tmaAddresses(matmul.getLhs().getType(), {rows, 1}, mesh, numbering) &&
                               tmaAddresses(matmul.getRhs().getType(), panel, mesh, numbering)
                           ? WalkResult::advance()
                           : WalkResult::interrupt();
              })
              .wasInterrupted();
}

/// A tiling of a grid for the GEMM engine: its tile shape and the parts each tile's K is split in.
struct EngineTiling {
  EngineTileShape shape;
  int64_t kSplits;
};

/// What the engine's tiling of a `rows` x `cols` grid, contracting `k`, costs on `ctas` CTAs: the
/// rounds of tile parts the busiest CTA walks times a part's time, EngineTileShape's unless
/// `splitting`; then kLoadTime's model: A's rows that exist (decode's M: the engine loads only
/// those, mk-plan-lowering's a_rows) and B's columns over K / splits and, split, the part's f32
/// product written; then the last part's reads of the others' products, which hold up its tile.
double tilingCost(EngineTiling tiling, int64_t rows, int64_t cols, int64_t k, int64_t ctas,
                  bool splitting) {
  EngineTileShape shape = tiling.shape;
  int64_t splits = tiling.kSplits;
  int64_t tiles = llvm::divideCeil(rows, shape.rows) * llvm::divideCeil(cols, shape.columns);
  int64_t rounds = llvm::divideCeil(tiles * splits, ctas);
  if (!splitting)
    return rounds * shape.time;
  int64_t aRows = std::min<int64_t>(shape.rows, llvm::alignTo(rows, 8));
  int64_t mmaRows = aRows > kWarpgroupRows ? 128 : 64;
  double product = 4.0 * std::min<int64_t>(shape.rows, llvm::alignTo(rows, 16)) * shape.columns;
  double multiply = 100.0 * mmaRows * shape.columns / (128 * 256) / splits;
  double bytes = 2.0 * (aRows + shape.columns) * k / splits + (splits > 1 ? product : 0);
  // Hundredths of a 128 x 256 tile's time per byte one CTA moves.
  double perByte = kLoadTime * 100.0 / (2.0 * (128 + 256) * k);
  return rounds * std::max(multiply, perByte * bytes) + perByte * product * (splits - 1);
}

/// Of the engine's tilings that `allowed` admits (a shape at least), the one the model finds
/// fastest for `rows` x `cols` contracting `k` on `ctas` CTAs: K split in `forcedSplits` parts
/// where that is set (1, the default: never), else unsplit unless a split is kSplitGain faster
/// (parts of at least kMinSplitBlocks of the `kBlocks`); the larger shape on a tie. 64-row tiles
/// only where there are more rows: on fewer, the engine loads only A's rows of a 128-row tile, the
/// same work.
EngineTiling fastestTiling(int64_t rows, int64_t cols, int64_t k, int64_t ctas,
                           int64_t forcedSplits, function_ref<bool(EngineTileShape)> allowed) {
  const auto best = [&](int64_t splits) -> std::pair<EngineTiling, double> {
    EngineTiling found = {{0, 0, 0}, splits};
    double cost = std::numeric_limits<double>::infinity();
    for (EngineTileShape shape : kEngineTileShapes) {
      if (!allowed(shape) || (shape.rows < kEngineTileRows && rows <= shape.rows))
        continue;
      double c = tilingCost({shape, splits}, rows, cols, k, ctas, forcedSplits != 1);
      if (c < cost) {
        found.shape = shape;
        cost = c;
      }
    }
    return {found, cost};
  };
  if (forcedSplits)
    return best(forcedSplits).first;
  auto [chosen, cost] = best(1);
  int64_t kBlocks = llvm::divideCeil(k, 64);
  for (int64_t splits = 2; splits <= kMaxKSplits && kBlocks / splits >= kMinSplitBlocks; ++splits)
    if (auto [split, splitCost] = best(splits); splitCost < kSplitGain * cost)
      std::tie(chosen, cost) = std::tie(split, splitCost);
  return chosen;
}

/// The tile accesses of a program's ops, and the tensors among them that it writes.
struct ProgramAccesses {
  explicit ProgramAccesses(ProgramOp program) {
    program.walk([&](Operation *op) {
      for (TileAccess &write : writesOf(op)) {
        written.insert(write.tensor);
        accesses.push_back(std::move(write));
      }
      llvm::append_range(accesses, readsOf(op));
    });
  }

  SmallVector<TileAccess> accesses;
  llvm::SmallDenseSet<Value> written;
};

/// Whether `grid`, with tiles `current` long along one of its dims, may take tiles `width` long
/// there and agree with the accesses outside it to every tensor the program writes, which
/// mk-insert-signals orders tile by tile: where `grid` takes `current` along a dim of such a
/// tensor (any such dim: where the tiles' rows and columns are equal, both), they take `width`,
/// or the whole dim.
bool agreesWithOthers(TileGridOp grid, int64_t current, int64_t width,
                      const ProgramAccesses &program) {
  const auto inside = [&](const TileAccess &access) { return grid->isProperAncestor(access.op); };
  for (const TileAccess &mine : llvm::make_filter_range(program.accesses, inside)) {
    if (!program.written.contains(mine.tensor))
      continue;
    for (auto [d, extent] : llvm::enumerate(mine.extents))
      if (extent == current && llvm::any_of(program.accesses, [&](const TileAccess &other) {
            return other.tensor == mine.tensor && !inside(other) && other.extents[d] != 0 &&
                   other.extents[d] != width;
          }))
        return false;
  }
  return true;
}

/// The contracted extent of `grid`'s matmuls where the GEMM engine may split it (split-K): one
/// pass of matrices (every matmul multiplies the same A, the engine's pass of two), K the same
/// on every rank.
std::optional<int64_t> splittableK(TileGridOp grid) {
  SmallVector<MatmulOp> matmuls;
  grid.getBody().walk([&](MatmulOp matmul) { matmuls.push_back(matmul); });
  MeshAttr mesh = grid->getParentOfType<ProgramOp>().getMesh();
  if (matmuls.empty() || matmuls.size() > 2)
    return std::nullopt;
  MatmulOp leader = matmuls.front();
  DistTensorType lhs = leader.getLhs().getType();
  int64_t kDim = leader.getLhsWholeDims()[0];
  if (lhs.getRank() != 2 || !lhs.isEvenlySplit(mesh) || llvm::any_of(matmuls, [&](MatmulOp matmul) {
        return matmul.getLhs() != leader.getLhs() ||
               !llvm::equal(matmul.getLhsIndices(), leader.getLhsIndices());
      }))
    return std::nullopt;
  int64_t k = lhs.getLocalExtent(kDim, mesh);
  return ShapedType::isDynamic(k) ? std::nullopt : std::optional(k);
}

/// Gives `grid` and its tile values tiles of `rows` x `width`.
void setTileShape(TileGridOp grid, int64_t rows, int64_t width) {
  SmallVector<int64_t> old(grid.getTileSizes()), sizes = {rows, width};
  grid.setTileSizes(sizes);
  for (Value value : valuesInside(grid)) {
    auto tile = dyn_cast<TileType>(value.getType());
    if (!tile)
      continue;
    // A changed extent's symbol, if any, no longer names it.
    SmallVector<StringAttr> symbols(tile.getSymbols());
    for (int64_t d = 0; d < 2; ++d)
      if (sizes[d] != old[d])
        symbols[d] = nullptr;
    value.setType(tile.cloneWithDims(sizes, symbols));
  }
}

/// The tensors a grid's body reads that an all-gather is still filling.
bool readsGatheredTensor(TileGridOp grid) {
  WalkResult walk = grid.getBody().walk([](Operation *op) {
    for (Value operand : op->getOperands())
      if (operand.getDefiningOp<AllGatherOp>())
        return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return walk.wasInterrupted();
}

struct TileAndOrderPass : mk::impl::MkTileAndOrderBase<TileAndOrderPass> {
  using MkTileAndOrderBase::MkTileAndOrderBase;

  void runOnOperation() override {
    ProgramOp program = getOperation();
    MeshAttr mesh = program.getMesh();
    if (std::optional<std::string> error = checkSmCount(smCount)) {
      program.emitError() << *error;
      return signalPassFailure();
    }

    WalkResult walk = program.walk([&](MatmulOp matmul) {
      if (matmul.getKTile())
        return WalkResult::advance();
      DistTensorType lhs = matmul.getLhs().getType();
      int64_t kDim = matmul.getLhsWholeDims()[0];
      int64_t extent = lhs.getLocalExtent(kDim, mesh);
      if (ShapedType::isDynamic(extent)) {
        matmul.emitOpError() << "needs a specialized program (run mk-specialize first)";
        return WalkResult::interrupt();
      }
      matmul.setKTile(chooseKTile(extent, lhs.getElementType()));
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return signalPassFailure();

    int64_t forcedWidth = gemmTileN, forcedRows = gemmTileM;
    if (forcedWidth != 0 && !isEngineTileWidth(forcedWidth)) {
      program.emitError() << "gemm-tile-n=" << forcedWidth
                          << ": the GEMM engine's tiles are 64, 128 or 256 columns wide";
      return signalPassFailure();
    }
    if (forcedRows != 0 && forcedRows != kWarpgroupRows && forcedRows != kEngineTileRows) {
      program.emitError() << "gemm-tile-m=" << forcedRows
                          << ": the GEMM engine's tiles are 64 or 128 rows";
      return signalPassFailure();
    }
    int64_t forcedSplits = gemmKSplits;
    if (forcedSplits < 0 || forcedSplits > kMaxForcedKSplits) {
      program.emitError() << "gemm-k-splits=" << forcedSplits
                          << ": the GEMM engine splits a tile's K in 1 to " << kMaxForcedKSplits
                          << " parts (0: as the cost model finds fastest)";
      return signalPassFailure();
    }
    WalkResult shapes = program.walk([&](TileGridOp grid) {
      std::optional<int64_t> width = engineTileWidth(grid);
      if (!width)
        return WalkResult::advance();
      if (forcedWidth > *width) {
        grid.emitOpError() << "has tiles " << *width << " columns wide; gemm-tile-n=" << forcedWidth
                           << " would widen them past what the program masks";
        return WalkResult::interrupt();
      }
      int64_t rows = coveredExtent(grid, 0, mesh), cols = coveredExtent(grid, 1, mesh);
      TileNumbering numbering = TileNumbering::of(program);
      EngineTileShape chosen = {forcedRows ? forcedRows : kEngineTileRows,
                                forcedWidth ? forcedWidth : *width, 0};
      std::optional<int64_t> k = splittableK(grid);
      if (forcedSplits > 1 && k && llvm::divideCeil(*k, 64) < forcedSplits) {
        grid.emitOpError() << "contracts " << *k << " elements: " << llvm::divideCeil(*k, 64)
                           << " of the engine's 64-deep blocks, fewer than the " << forcedSplits
                           << " parts of gemm-k-splits=" << forcedSplits;
        return WalkResult::interrupt();
      }
      int64_t splits = 1;
      if (!ShapedType::isDynamic(rows) && !ShapedType::isDynamic(cols)) {
        // The other grids' tiles of a tensor this one writes or reads may pin its shape.
        ProgramAccesses accesses(program);
        const auto allowed = [&](EngineTileShape shape) {
          if ((forcedRows && shape.rows != forcedRows) ||
              (forcedWidth && shape.columns != forcedWidth) || shape.columns > *width ||
              !agreesWithOthers(grid, *width, shape.columns, accesses) ||
              (shape.rows != kEngineTileRows &&
               (!engineOperands(grid) ||
                !agreesWithOthers(grid, kEngineTileRows, shape.rows, accesses))))
            return false;
          return (shape.rows == kEngineTileRows && shape.columns == kTileLibraryWidth) ||
                 engineAddresses(grid, shape.rows, shape.columns, numbering);
        };
        // Where no shape agrees, the program's own stands, for mk-insert-signals to report.
        EngineTiling fastest = fastestTiling(rows, cols, k.value_or(64), smCount,
                                             !k || forcedSplits == 1 ? 1 : forcedSplits, allowed);
        if (fastest.shape.rows) {
          chosen = fastest.shape;
          splits = fastest.kSplits;
        }
      }
      if (chosen.rows != kEngineTileRows || chosen.columns != *width)
        setTileShape(grid, chosen.rows, chosen.columns);
      if (splits > 1)
        grid.walk([&](MatmulOp matmul) { matmul.setKSplits(splits); });
      return WalkResult::advance();
    });
    if (shapes.wasInterrupted())
      return signalPassFailure();

    program.walk([&](TileGridOp grid) {
      if (grid.getOrder())
        return;
      bool matmuls = computesMatmuls(grid);
      TileOrderKind kind = matmuls ? TileOrderKind::swizzle : TileOrderKind::row_major;
      int64_t group = 1;
      if (matmuls) {
        // Bands of tile rows along the grid's second-last dim.
        DistTensorType target = grid.getTargetType();
        int64_t rowDim = target.getRank() - 2;
        int64_t rows = ShapedType::kDynamic;
        if (rowDim >= 0) {
          Dim extent = grid.getTileExtent(rowDim);
          int64_t held = coveredExtent(grid, rowDim, mesh);
          if (extent.isKnown() && !ShapedType::isDynamic(held))
            rows = llvm::divideCeil(held, extent.extent);
        }
        group = ShapedType::isDynamic(rows) ? kSwizzleGroup : std::min(kSwizzleGroup, rows);
      }
      grid.setOrderAttr(TileOrderAttr::get(&getContext(), kind, std::max<int64_t>(group, 1),
                                           readsGatheredTensor(grid)));
    });

    program.walk([&](AllGatherOp gather) {
      if (!gather.getChunk())
        gather.setChunk(gatherChunk(gather));
    });
  }

  /// The granularity consumers read the gathered tensor at: the tile extents of the first
  /// matmul or load that reads it, the whole extent along the other dims.
  SmallVector<int64_t> gatherChunk(AllGatherOp gather) {
    DistTensorType type = gather.getResult().getType();
    SmallVector<int64_t> chunk(type.getShape());
    for (Operation *user : gather.getResult().getUsers()) {
      if (auto matmul = dyn_cast<MatmulOp>(user)) {
        bool lhs = matmul.getLhs() == gather.getResult();
        ArrayRef<int64_t> whole = lhs ? matmul.getLhsWholeDims() : matmul.getRhsWholeDims();
        int64_t rank = type.getRank();
        int64_t k = whole[0];
        // The tile's non-contracted dim takes the result tile's rows (lhs) or columns (rhs).
        int64_t other = k == rank - 1 ? rank - 2 : rank - 1;
        TileType result = matmul.getResult().getType();
        for (int64_t d = 0; d < rank - 2; ++d)
          chunk[d] = 1;
        chunk[other] = result.getShape()[lhs ? 0 : 1];
        return chunk;
      }
      if (auto load = dyn_cast<LoadOp>(user)) {
        TileType tile = load.getResult().getType();
        int64_t first = type.getRank() - tile.getRank();
        for (int64_t d = 0; d < first; ++d)
          chunk[d] = 1;
        for (int64_t j = 0; j < tile.getRank(); ++j)
          chunk[first + j] = tile.getShape()[j];
        return chunk;
      }
    }
    return chunk;
  }
};

} // namespace
