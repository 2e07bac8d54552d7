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
/// Rows of the GEMM engine's tiles, and the widths it runs them at, widest first, with the time
/// a tile of each takes, in hundredths of a 256-column tile's: measured on an H200
/// (docs/notes/compiler.md), 128 columns take 0.53-0.54 of 256 (less work per byte loaded); 64
/// columns, which put twice the CTAs on a grid of few tile rows (decode's M), 0.30 (estimated:
/// a quarter of the work, half the bytes; docs/notes/decode.md has what they gain at M = 128).
constexpr int64_t kEngineTileRows = 128;
struct EngineTileWidth {
  int64_t columns, time;
};
constexpr EngineTileWidth kEngineTileWidths[] = {{256, 100}, {128, 54}, {64, 30}};
/// The width the tile library multiplies where TMA cannot address the engine's tiles.
constexpr int64_t kTileLibraryWidth = 128;

bool isEngineTileWidth(int64_t columns) {
  return llvm::any_of(kEngineTileWidths,
                      [&](EngineTileWidth width) { return width.columns == columns; });
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

/// Whether TMA addresses the tiles of `grid` `width` columns wide, with its matmuls' panels, as
/// the GEMM engine needs. Where it does not, the tile library multiplies: its accumulator of a
/// 256-column tile does not fit in registers beside the rest of a kernel.
bool engineAddresses(TileGridOp grid, int64_t width, const TileNumbering &numbering) {
  MeshAttr mesh = grid->getParentOfType<ProgramOp>().getMesh();
  if (!tmaAddresses(grid.getTargetType(), {kEngineTileRows, width}, mesh, numbering))
    return false;
  return !grid.getBody()
              .walk([&](MatmulOp matmul) {
                SmallVector<int64_t> panel = bKMajor(matmul) ? SmallVector<int64_t>{width, 1}
                                                             : SmallVector<int64_t>{1, width};
                return tmaAddresses(matmul.getLhs().getType(), {kEngineTileRows, 1}, mesh,
                                    numbering) &&
                               tmaAddresses(matmul.getRhs().getType(), panel, mesh, numbering)
                           ? WalkResult::advance()
                           : WalkResult::interrupt();
              })
              .wasInterrupted();
}

/// Of the engine's tile widths that `allowed` admits (at least one), the one that takes the
/// least time for `rows` x `cols` on `ctas` CTAs: the rounds of tiles the busiest CTA walks times
/// a tile's time; the wider on a tie.
int64_t fastestTileWidth(int64_t rows, int64_t cols, int64_t ctas,
                         function_ref<bool(int64_t)> allowed) {
  int64_t best = 0, bestCost = std::numeric_limits<int64_t>::max();
  for (EngineTileWidth width : kEngineTileWidths) {
    if (!allowed(width.columns))
      continue;
    int64_t tiles = llvm::divideCeil(rows, kEngineTileRows) * llvm::divideCeil(cols, width.columns);
    int64_t cost = llvm::divideCeil(tiles, ctas) * width.time;
    if (cost < bestCost) {
      best = width.columns;
      bestCost = cost;
    }
  }
  return best;
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

/// Whether `grid`, with tiles `current` columns wide, may take tiles `width` wide and agree with
/// the accesses outside it to every tensor the program writes, which mk-insert-signals orders tile
/// by tile: where `grid` takes `current` along a dim of such a tensor (its tiles' columns: the
/// engine's rows are narrower than any width it narrows from), they take `width`, or the whole
/// dim.
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

/// Gives `grid` and its tile values tiles `width` columns wide.
void setTileWidth(TileGridOp grid, int64_t width) {
  SmallVector<int64_t> sizes(grid.getTileSizes());
  sizes[1] = width;
  grid.setTileSizes(sizes);
  for (Value value : valuesInside(grid)) {
    auto tile = dyn_cast<TileType>(value.getType());
    if (!tile)
      continue;
    // The width's symbol, if any, no longer names it.
    SmallVector<StringAttr> symbols(tile.getSymbols());
    symbols[1] = nullptr;
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

    int64_t forced = gemmTileN;
    if (forced != 0 && !isEngineTileWidth(forced)) {
      program.emitError() << "gemm-tile-n=" << forced
                          << ": the GEMM engine's tiles are 64, 128 or 256 columns wide";
      return signalPassFailure();
    }
    WalkResult widths = program.walk([&](TileGridOp grid) {
      std::optional<int64_t> width = engineTileWidth(grid);
      if (!width)
        return WalkResult::advance();
      if (forced > *width) {
        grid.emitOpError() << "has tiles " << *width << " columns wide; gemm-tile-n=" << forced
                           << " would widen them past what the program masks";
        return WalkResult::interrupt();
      }
      int64_t rows = coveredExtent(grid, 0, mesh), cols = coveredExtent(grid, 1, mesh);
      TileNumbering numbering = TileNumbering::of(program);
      int64_t chosen = forced ? forced : *width;
      if (!forced && !ShapedType::isDynamic(rows) && !ShapedType::isDynamic(cols)) {
        // The other grids' tiles of a tensor this one writes or reads may pin its width.
        ProgramAccesses accesses(program);
        const auto allowed = [&](int64_t columns) {
          return columns <= *width && agreesWithOthers(grid, *width, columns, accesses) &&
                 (columns == kTileLibraryWidth || engineAddresses(grid, columns, numbering));
        };
        // Where no width agrees, the program's own stands, for mk-insert-signals to report.
        if (llvm::any_of(kEngineTileWidths, [&](EngineTileWidth w) { return allowed(w.columns); }))
          chosen = fastestTileWidth(rows, cols, smCount, allowed);
      }
      if (chosen != *width)
        setTileWidth(grid, chosen);
      return WalkResult::advance();
    });
    if (widths.wasInterrupted())
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
