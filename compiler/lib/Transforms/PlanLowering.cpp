//===- PlanLowering.cpp - decide how a scheduled program becomes CUDA -----===//
//
// Everything mk-lower-to-emitc needs to know about a program that is not the code itself is
// decided here and recorded as typed attributes (mk/Transforms/LoweringPlan.h), in this order:
//   1. the reductions that are only converted to 16 bits and stored: through the bulk tensor copy
//      engine, or combined and stored chunk by chunk;
//   2. for each role, whether it runs the attention engine (one query tile's attention in its
//      shape) or the GEMM engine (every matmul can, with one
//      configuration), in clusters of how many CTAs, and how its CTAs split into the engine's
//      producer and consumers: which waits the producer keeps, which signals and waits the
//      consumers leave to the engine's senders; where a matmul's K is split, the buffer and flags
//      its parts meet in;
//   3. loops that put a staged tile to each GPU and signal each: every put, then every signal;
//   4. loops whose only effect is an engine store to each GPU of the node: one store to all;
//   5. causal attention steps skip the key blocks their mask removes.
//
//===----------------------------------------------------------------------===//

#include "mk/Transforms/AttentionEngine.h"
#include "mk/Transforms/GemmEngine.h"
#include "mk/Transforms/LoweringPlan.h"
#include "mk/Transforms/Passes.h"
#include "mk/Transforms/TileWalk.h"
#include "mk/abi.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::mk {
#define GEN_PASS_DEF_MKPLANLOWERING
#include "mk/Transforms/Passes.h.inc"
} // namespace mlir::mk

using namespace mlir;
using namespace mlir::mk;

namespace {

/// The upper bound of the blocks loop of a causal step whose keys are a zigzag shard's (positions
/// mk.sequence_tile of the query tile and of block j, tiles of as many rows as keys): the
/// shard's blocks in its two chunks, c and 2P - 1 - c (C tiles each), that the query tile
/// sees, a prefix of them (the second chunk's are seen only once all of the first's are).
std::optional<Value> seenOfZigzag(ArithIndexOps &ops, scf::ForOp loop, Value query,
                                  SequenceTileOp key, MeshAttr mesh) {
  auto range = loop.getLowerBound().getDefiningOp<ShardRangeOp>();
  DistTensorType type = key.getTensor().getType();
  PlacementAttr placement = type.getPlacement();
  if (!range || loop.getUpperBound() != range.getHi() || range.getTensor() != key.getTensor() ||
      range.getTile() != key.getTile())
    return std::nullopt;
  int64_t parts = mesh.getAxisSize(placement.getAxis()),
          chunk = zigzagChunkTiles(type, mesh, key.getTile());
  // The chunk's tiles the query tile sees: clamp(query - first + 1, 0, C).
  auto seenOf = [&](Value chunkIndex) {
    Value seen = ops.add(ops.sub(query, ops.mul(chunkIndex, ops.c(chunk))), ops.c(1));
    seen = ops.select(ops.lt(seen, ops.c(0)), ops.c(0), seen);
    return ops.min(seen, ops.c(chunk));
  };
  Value source = range.getIndex();
  Value mirror = ops.sub(ops.c(2 * parts - 1), source);
  return ops.add(range.getLo(), ops.add(seenOf(source), seenOf(mirror)));
}

/// A causal step's key blocks after every query of its tile are masked for all of its rows: its
/// loop over the blocks stops after the last one the tile's last query sees. Tiles at i * t, or
/// numbered shard after shard with as many rows as keys (block j is seen where j <= i), or in
/// zigzag shards.
void skipMaskedBlocks(ProgramOp program) {
  TileNumbering numbering = TileNumbering::of(program);
  program.walk([&](AttentionBlockOp step) {
    auto loop = dyn_cast<scf::ForOp>(step->getParentOp());
    ValueRange positions = step.getPositions();
    if (!step.getCausal() || !loop || positions.size() != 2 ||
        !loop.isDefinedOutsideOfLoop(positions[0]) || !matchPattern(loop.getStep(), m_One()))
      return;
    int64_t rows = step.getQ().getType().getShape()[0], keys = step.getK().getType().getShape()[0];
    OpBuilder b(loop);
    Location loc = loop.getLoc();
    ArithIndexOps ops{b, loc};
    auto sequence = positions[1].getDefiningOp<SequenceTileOp>();
    if (sequence && sequence.getIndex() == loop.getInductionVar() &&
        sequence.getTensor().getType().getPlacement().getZigzag()) {
      if (rows != keys || static_cast<int64_t>(sequence.getTile()) != keys)
        return;
      if (std::optional<Value> seen =
              seenOfZigzag(ops, loop, positions[0], sequence, program.getMesh()))
        loop.getUpperBoundMutable().assign(*seen);
      return;
    }
    if (positions[1] != loop.getInductionVar())
      return;
    auto kLoad = step.getK().getDefiningOp<LoadOp>();
    bool plain = !kLoad || numbering.plain(kLoad.getSource().getType().getShape()[2], keys);
    if (!plain && rows != keys)
      return;
    // Block j's first key, j * keys, is at most the tile's last query, i * rows + rows - 1.
    Value seen = plain
                     ? ops.add(ops.div(ops.add(ops.mul(positions[0], ops.c(rows)), ops.c(rows - 1)),
                                       ops.c(keys)),
                               ops.c(1))
                     : ops.add(positions[0], ops.c(1));
    loop.getUpperBoundMutable().assign(ops.min(loop.getUpperBound(), seen));
  });
}

/// Whether two reductions marked for TMA need the same mk::TmaReduce: slots, source and result
/// elements, tile shape.
bool sameTmaReduction(AccumulateOp a, AccumulateOp b) {
  auto resultElement = [](AccumulateOp accumulate) {
    return cast<ConvertOp>(*accumulate->user_begin()).getResult().getType().getElementType();
  };
  DistTensorType sa = a.getSource().getType(), sb = b.getSource().getType();
  return sa.getShape()[0] == sb.getShape()[0] && sa.getElementType() == sb.getElementType() &&
         resultElement(a) == resultElement(b) &&
         a.getResult().getType().getShape() == b.getResult().getType().getShape();
}

/// Marks the reductions that are only converted to 16 bits and stored (to this GPU or one of the
/// node): through the bulk tensor copy engine (tma: copies of a tile in the leading dim of a
/// rank-3 buffer, at most 3, in boxes of 64 columns, which with the result fit a CTA's shared
/// memory), else combined and stored chunk by chunk
/// (chunks), without a tile in registers or shared memory.
void markReductions(ProgramOp program) {
  MeshAttr mesh = program.getMesh();
  TileNumbering numbering = TileNumbering::of(program);
  program.walk([&](AccumulateOp accumulate) {
    TileType tile = accumulate.getResult().getType();
    Type source = accumulate.getSource().getType().getElementType();
    if (tile.getRank() != 2 || source.getIntOrFloatBitWidth() != 16 || !accumulate->hasOneUse())
      return;
    int64_t rowChunks = tile.getShape()[1] * 2 / 16;
    if (tile.getShape()[1] * 2 % 16 || tile.getShape()[0] * rowChunks % MK_TEAM_THREADS)
      return;
    auto convert = dyn_cast<ConvertOp>(*accumulate->user_begin());
    if (!convert || convert.getResult().getType().getElementType().getIntOrFloatBitWidth() != 16)
      return;
    for (Operation *user : convert->getUsers()) {
      auto store = dyn_cast<StoreOp>(user);
      auto put = dyn_cast<PutOp>(user);
      if (!(store && store.getWholeDims().empty()) &&
          !(put && put.getScope() == PeerScope::gpu && put.getWholeDims().empty()))
        return;
    }
    DistTensorType buffer = accumulate.getSource().getType();
    // mk::TmaReduce holds every slot's tile and the result in shared memory, with 2 KiB of
    // alignment, barriers and publish batches.
    int64_t tmaBytes = (buffer.getShape()[0] + 1) * tile.getShape()[0] * tile.getShape()[1] * 2;
    bool tma = buffer.getRank() == 3 && accumulate.getWholeDims() == ArrayRef<int64_t>{0} &&
               buffer.getShape()[0] <= 3 && tile.getShape()[0] <= 256 &&
               tile.getShape()[1] % 64 == 0 && tmaBytes + 2048 <= MK_CTA_SMEM_BYTES &&
               tmaAddresses(buffer, tile.getShape(), mesh, numbering) &&
               llvm::all_of(convert->getUsers(), [&](Operation *user) {
                 auto dest = cast<DistTensorType>(user->getOperand(1).getType());
                 return (dest.getRank() == 2 || dest.getRank() == 3) &&
                        tmaAddresses(dest, tile.getShape(), mesh, numbering);
               });
    // The role's publisher raises flags on this node only, by arrivals, and serves one
    // configuration.
    auto role = accumulate->getParentOfType<RoleOp>();
    if (tma && role) {
      bool unpublished =
          role.walk([](Operation *op) {
                auto signal = dyn_cast<SignalOp>(op);
                auto copy = dyn_cast<CopyOp>(op);
                return (signal && (signal.getScope() == PeerScope::node || signal.getStamp())) ||
                               (copy && copy.getScope() == PeerScope::node)
                           ? WalkResult::interrupt()
                           : WalkResult::advance();
              })
              .wasInterrupted();
      bool other = role.walk([&](AccumulateOp sibling) {
                         return loweringOf(sibling) == Lowering::tma &&
                                        !sameTmaReduction(sibling, accumulate)
                                    ? WalkResult::interrupt()
                                    : WalkResult::advance();
                       })
                       .wasInterrupted();
      tma = !unpublished && !other;
    }
    Lowering how = tma ? Lowering::tma : Lowering::chunks;
    setLowering(accumulate, how);
    setLowering(convert, Lowering::elide);
    for (Operation *user : convert->getUsers())
      setLowering(user, how);
  });
}

/// Whether all a consumer does after `wait` in its tile grid's body is engine stores, deferred
/// signals, waits and index arithmetic: ops that reach memory or flags through the engine's send
/// ring, in order, or through TMA stores that wait for the ring.
bool onlyEngineWritesFollow(WaitOp wait, ArrayRef<MatmulOp> matmuls) {
  const MatmulOp *matmul =
      llvm::find_if(matmuls, [&](MatmulOp m) { return m->getParentOp()->isAncestor(wait); });
  if (matmul == matmuls.end())
    return false;
  auto throughEngine = [](Operation *op) {
    return !op->walk([](Operation *inner) {
                std::optional<Lowering> how = loweringOf(inner);
                bool engine = how == Lowering::store || how == Lowering::deferred;
                return isMemoryEffectFree(inner) ||
                               isa<scf::IfOp, scf::ForOp, scf::YieldOp, WaitOp>(inner) ||
                               (isa<PutOp, StoreOp, SignalOp>(inner) && engine)
                           ? WalkResult::advance()
                           : WalkResult::interrupt();
              }).wasInterrupted();
  };
  Operation *body = (*matmul)->getParentOp();
  for (Operation *op = wait; op != body; op = op->getParentOp())
    for (Operation *next = op->getNextNode(); next; next = next->getNextNode())
      if (!throughEngine(next))
        return false;
  return true;
}

/// The ops of a loop's body that touch memory or flags.
SmallVector<Operation *> effectsOf(scf::ForOp loop) {
  SmallVector<Operation *> effects;
  for (Operation &op : loop.getBody()->without_terminator())
    if (!isMemoryEffectFree(&op))
      effects.push_back(&op);
  return effects;
}

/// A loop that puts a tile staged for TMA (the engine's or a TMA reduction's) to each GPU and
/// signals each after its put would wait for each put to complete before the next one starts (a
/// signal follows its data): split it in two, every put then every signal, so that the puts are
/// in flight together and one wait covers them.
void signalAfterAllPuts(ProgramOp program) {
  SmallVector<scf::ForOp> loops;
  program.walk([&](scf::ForOp loop) {
    SmallVector<Operation *> effects = effectsOf(loop);
    std::optional<Lowering> how = effects.empty() ? std::nullopt : loweringOf(effects[0]);
    if (effects.size() == 2 && isa<PutOp>(effects[0]) && isa<SignalOp>(effects[1]) &&
        (how == Lowering::tma || how == Lowering::store))
      loops.push_back(loop);
  });
  for (scf::ForOp loop : loops) {
    OpBuilder b(loop->getContext());
    b.setInsertionPointAfter(loop);
    auto signals = cast<scf::ForOp>(b.clone(*loop));
    (*loop.getBody()->getOps<SignalOp>().begin())->erase();
    (*signals.getBody()->getOps<PutOp>().begin())->erase();
  }
}

/// A loop over the GPUs of the node (forEachGpu's: GPU (g + i) mod G) whose only effect is an
/// engine store of one tile to each would stage the tile in shared memory once per GPU: make it
/// one store that stages the tile once and sends each chunk to every GPU.
void storeToGpusAtOnce(ProgramOp program, int64_t gpus) {
  struct Merge {
    scf::ForOp loop;
    int64_t begin, end;
  };
  SmallVector<Merge> merges;
  program.walk([&](scf::ForOp loop) {
    SmallVector<Operation *> effects = effectsOf(loop);
    auto put = effects.size() == 1 ? dyn_cast<PutOp>(effects[0]) : PutOp();
    DistTensorType dest = put ? put.getDest().getType() : DistTensorType();
    if (!put || loweringOf(put) != Lowering::store || put.getScope() != PeerScope::gpu ||
        dest.getPlacement().isSharded() || dest.getRank() != 2)
      return;
    auto rem = put.getPeer().getDefiningOp<arith::RemSIOp>();
    auto sum = rem ? rem.getLhs().getDefiningOp<arith::AddIOp>() : arith::AddIOp();
    APInt modulus, begin, end, step;
    if (sum && matchPattern(rem.getRhs(), m_ConstantInt(&modulus)) && modulus == gpus &&
        sum.getRhs() == loop.getInductionVar() &&
        !loop->isAncestor(sum.getLhs().getParentBlock()->getParentOp()) &&
        matchPattern(loop.getLowerBound(), m_ConstantInt(&begin)) &&
        matchPattern(loop.getUpperBound(), m_ConstantInt(&end)) &&
        matchPattern(loop.getStep(), m_ConstantInt(&step)) && step == 1)
      merges.push_back({loop, begin.getSExtValue(), end.getSExtValue()});
  });
  for (Merge &merge : merges) {
    OpBuilder b(merge.loop);
    IRMapping mapping;
    mapping.map(merge.loop.getInductionVar(), merge.loop.getLowerBound());
    for (Operation &op : merge.loop.getBody()->without_terminator())
      if (Operation *copy = b.clone(op, mapping); isa<PutOp>(copy))
        setGpuOffsets(copy, merge.begin, merge.end);
    merge.loop.erase();
  }
}

/// A flag array of `program` named `base` (or `base` and a number, where that is taken).
FlagsOp createFlags(ProgramOp program, Location loc, StringRef base, ArrayRef<int64_t> shape) {
  OpBuilder b = OpBuilder::atBlockBegin(&program.getBodyBlock());
  auto taken = [&](StringRef name) {
    return llvm::any_of(program.getBodyBlock().getOps<FlagsOp>(),
                        [&](FlagsOp flags) { return flags.getSymName() == name; });
  };
  std::string name = base.str();
  for (int i = 1; taken(name); ++i)
    name = base.str() + std::to_string(i);
  return FlagsOp::create(b, loc, name, shape);
}

/// Where the GEMM engine runs a matmul whose K is split (mk-tile-and-order's k_splits), the
/// memory its parts meet in: a buffer of `k_splits` slots of 128 x N f32 per tile (the engine's
/// accumulator, whatever the tile's rows) and a flag per tile that counts the parts. Where the
/// tile library multiplies, K is not split.
void provideSplitParts(ProgramOp program) {
  MeshAttr mesh = program.getMesh();
  program.walk([&](MatmulOp matmul) {
    std::optional<int64_t> splits = matmul.getKSplits();
    std::optional<Lowering> how = loweringOf(matmul);
    if (!splits || how == Lowering::fused)
      return;
    if (how != Lowering::mma) {
      matmul.removeKSplitsAttr();
      return;
    }
    TileType tile = matmul.getResult().getType();
    DistTensorType lhs = matmul.getLhs().getType();
    int64_t rows = lhs.getLocalExtent(0, mesh);
    int64_t cols = bKMajor(matmul) ? matmul.getRhs().getType().getLocalExtent(0, mesh)
                                   : matmul.getRhs().getType().getLocalExtent(1, mesh);
    int64_t rowTiles = llvm::divideCeil(rows, tile.getShape()[0]);
    int64_t colTiles = llvm::divideCeil(cols, tile.getShape()[1]);
    // A pass of two matmuls multiplies them side by side: its accumulator is their columns.
    int64_t columns = 0;
    for (Operation *op = matmul; op; op = op->getNextNode())
      if (auto next = dyn_cast<MatmulOp>(op);
          next && (next == matmul || loweringOf(next) == Lowering::fused))
        columns += next.getResult().getType().getShape()[1];
    Location loc = matmul.getLoc();
    OpBuilder b(matmul->getParentOfType<RoleOp>());
    auto type = DistTensorType::get(
        {rowTiles * colTiles * *splits * 128, columns}, Float32Type::get(program.getContext()),
        PlacementAttr::get(program.getContext(), PlacementKind::replicated));
    Value partials = BufferOp::create(b, loc, type);
    FlagsOp arrivals = createFlags(program, loc, "split_k", {rowTiles, colTiles});
    matmul.getPartialsMutable().assign(partials);
    matmul.setArrivalsAttr(FlatSymbolRefAttr::get(arrivals.getSymNameAttr()));
  });
}

struct PlanLoweringPass : mk::impl::MkPlanLoweringBase<PlanLoweringPass> {
  using MkPlanLoweringBase::MkPlanLoweringBase;

  void runOnOperation() override {
    ProgramOp program = getOperation();
    if (std::optional<std::string> error = checkGemmOptions(gemmStages, gemmCluster)) {
      program.emitError() << *error;
      return signalPassFailure();
    }
    if (failed(checkLowerable(program)))
      return signalPassFailure();
    mesh = program.getMesh();
    numbering = TileNumbering::of(program);
    markReductions(program);
    rolesPairUp = llvm::all_of(program.getBodyBlock().getOps<RoleOp>(),
                               [](RoleOp role) { return role.getCtas().value_or(1) % 2 == 0; });
    for (RoleOp role : program.getBodyBlock().getOps<RoleOp>())
      if (!planAttentionRole(role) && failed(planRole(role)))
        return signalPassFailure();
    provideSplitParts(program);
    // After the roles' plans, which take the program's own loops.
    skipMaskedBlocks(program);
    signalAfterAllPuts(program);
    storeToGpusAtOnce(program, mesh.getGpus());
  }

private:
  /// The engine's configuration for `pass` (cluster 0, chosen with the role's), if it can run
  /// there: its conversion only feeds stores and puts to a GPU of the node (rank 2 or 3
  /// destinations that TMA addresses); its matmuls directly in a tile grid of the role, which
  /// visits each of its tiles, whose body has no other tile work, only index arithmetic, nested
  /// loops and branches, waits, signals and copies across nodes.
  FailureOr<GemmEngineAttr> engineFor(const std::optional<EnginePass> &pass) {
    if (!pass)
      return GemmEngineAttr();
    MatmulOp leader = pass->matmuls.front();
    ConvertOp convert = pass->convert;
    Type element = leader.getLhs().getType().getElementType();
    TileType out = convert.getResult().getType();
    for (Operation *user : convert->getUsers()) {
      // Rows going back to their tokens leave through the senders, 16 bytes at a time.
      if (auto back = dyn_cast<ReturnRowsOp>(user)) {
        DistTensorType returned = back.getReturned().getType();
        if (!tmaAddresses(returned, {1, 1}, mesh, numbering))
          return GemmEngineAttr();
        continue;
      }
      DistTensorType dest;
      if (auto store = dyn_cast<StoreOp>(user); store && store.getWholeDims().empty())
        dest = store.getDest().getType();
      else if (auto put = dyn_cast<PutOp>(user);
               put && put.getScope() != PeerScope::node && put.getWholeDims().empty())
        dest = put.getDest().getType();
      else
        return GemmEngineAttr();
      if (dest.getRank() < 2 || dest.getRank() > 3 ||
          !tmaAddresses(dest, out.getShape(), mesh, numbering))
        return GemmEngineAttr();
    }
    // The producer walks the role's tile grids, loading for every tile it visits (within a
    // grid's row counts: the grouped walk of its matmuls' groups).
    auto grid = dyn_cast<TileGridOp>(leader->getParentOp());
    if (!grid || !isa<RoleOp>(grid->getParentOp()) ||
        (grid.getRowCounts() && !groupedMatmul(leader)))
      return GemmEngineAttr();
    FailureOr<TileWalk> walk = TileWalk::get(grid, mesh, numbering);
    if (failed(walk))
      return failure();
    if (walk->skipsTiles())
      return GemmEngineAttr();
    WalkResult other = grid.getBodyBlock().walk([&](Operation *op) {
      bool tileWork = llvm::any_of(op->getResultTypes(), llvm::IsaPred<TileType>);
      if (llvm::is_contained(pass->matmuls, op) || llvm::is_contained(pass->epilogue, op) ||
          op == convert || llvm::is_contained(convert->getUsers(), op) ||
          isa<WaitOp, SignalOp, SingleCtaOp, scf::ForOp, scf::IfOp, scf::YieldOp>(op) ||
          // The proxy's copies across nodes use no shared memory.
          (isa<CopyOp>(op) && cast<CopyOp>(op).getScope() == PeerScope::node) ||
          (isMemoryEffectFree(op) && !tileWork))
        return WalkResult::advance();
      return WalkResult::interrupt();
    });
    if (other.wasInterrupted())
      return GemmEngineAttr();
    // Stores to a peer drain slowly: stage a 256-column tile whole, so that they hold up the
    // next tile's epilogue (a mainloop later) rather than this tile's later chunks.
    bool toPeer = llvm::any_of(convert->getUsers(), llvm::IsaPred<PutOp>);
    MLIRContext *context = leader.getContext();
    return GemmEngineAttr::get(context, element, pass->tileColumns(), gemmStages,
                               BoolAttr::get(context, bKMajor(leader)),
                               toPeer && out.getShape()[1] == 256 ? 4 : 2, /*cluster=*/0,
                               /*a_rows=*/0);
  }

  /// The rows of A the engine loads for a tile: its tile's rows (128, or 64 for one MMA
  /// warpgroup), or, in one CTA (not a cluster) where a matrix A has fewer, its rows rounded up to
  /// a whole 8-row swizzle atom; the most over `passes`. The product's rows past them are left
  /// unset: every tensor a tile is stored to must then have no more rows than its A.
  int64_t engineARows(ArrayRef<EnginePass> passes, int64_t cluster) {
    auto rowsOf = [&](DistTensorType type) {
      return type.getLocalExtent(type.getRank() - 2, mesh);
    };
    const auto passRows = [&](const EnginePass &pass) -> int64_t {
      MatmulOp leader = pass.matmuls.front();
      int64_t tileRows = leader.getResult().getType().getShape()[0];
      int64_t extent = rowsOf(leader.getLhs().getType());
      if (cluster != 1 || groupedMatmul(leader))
        return 128;
      if (ShapedType::isDynamic(extent) || extent >= tileRows)
        return tileRows;
      for (Operation *user : pass.convert->getUsers()) {
        DistTensorType dest;
        if (auto store = dyn_cast<StoreOp>(user))
          dest = store.getDest().getType();
        else if (auto put = dyn_cast<PutOp>(user))
          dest = put.getDest().getType();
        if (!dest || ShapedType::isDynamic(rowsOf(dest)) || rowsOf(dest) > extent)
          return tileRows;
      }
      return llvm::alignTo(extent, 8);
    };
    int64_t rows = 8;
    for (const EnginePass &pass : passes)
      rows = std::max(rows, passRows(pass));
    return rows;
  }

  /// The CTAs per cluster of the engine that runs `matmuls` in `role`: 2 where asked or by
  /// default, if the roles and the tile grids pair CTAs up, the tiles are 128 rows and B is
  /// [K x N] (a panel of one 64-column block shared in halves of its K rows); else 1, or an error
  /// if 2 was asked.
  FailureOr<int64_t> engineCluster(RoleOp role, ArrayRef<EnginePass> passes) {
    if (gemmCluster == 1)
      return 1;
    std::string why;
    if (!rolesPairUp)
      why = "a role has an odd number of CTAs";
    for (const EnginePass &pass : passes) {
      if (!why.empty())
        break;
      MatmulOp leader = pass.matmuls.front();
      FailureOr<TileWalk> walk =
          TileWalk::get(cast<TileGridOp>(leader->getParentOp()), mesh, numbering);
      if (failed(walk))
        return failure();
      if (leader.getResult().getType().getShape()[0] != 128)
        why = "its tiles are 64 rows, one MMA warpgroup's, and a cluster's CTAs multiply 128";
      else if (!walk->pairsRows(*role.getCtas()))
        why = "the tile loop does not give CTAs 2c and 2c + 1 the two rows of a pair of tiles";
      else if (bKMajor(leader))
        why = "B is [N x K]";
    }
    if (why.empty())
      return 2;
    if (gemmCluster == 2)
      return emitError(role.getLoc())
             << "the GEMM engine cannot run in clusters of 2 CTAs: " << why;
    return 1;
  }

  /// A role of one tile grid over the query tiles of the output, each the attention pass of the
  /// engine's shape (attentionEnginePass), and of single-CTA work, runs the attention engine: its
  /// producer walks the grid loading Q and each block of K and V, after the waits for the block;
  /// its consumers fold each source's blocks and store the normalised output, after the waits of
  /// the tile's body. Whether it does.
  bool planAttentionRole(RoleOp role) {
    SmallVector<AttentionBlockOp> steps;
    role.walk([&](AttentionBlockOp step) { steps.push_back(step); });
    bool matmuls = role.walk([](MatmulOp) { return WalkResult::interrupt(); }).wasInterrupted();
    std::optional<AttentionPass> pass =
        steps.size() == 1 && !matmuls ? attentionEnginePass(steps[0]) : std::nullopt;
    if (!pass)
      return false;
    auto grid = dyn_cast<TileGridOp>(pass->outer()->getParentOp());
    if (!grid || grid->getParentOp() != role || grid.getRowCounts() ||
        grid.getTarget() != pass->store.getDest() ||
        grid.getTileSizes() != ArrayRef<int64_t>{1, 1, 128, ShapedType::kDynamic} ||
        !llvm::equal(pass->q.getIndices(), grid.getBodyBlock().getArguments().take_front(3)))
      return false;
    for (Operation &op : role.getBody().front().without_terminator())
      if (&op != grid && !isa<SingleCtaOp>(op))
        return false;
    SmallVector<Operation *> tail = {pass->sum, pass->normalise, pass->convert, pass->store};
    for (Operation &op : grid.getBodyBlock().without_terminator())
      if (&op != pass->q && &op != pass->outer() && !llvm::is_contained(pass->init, &op) &&
          !llvm::is_contained(tail, &op) && !isa<WaitOp>(op) &&
          !(isMemoryEffectFree(&op) && op.getNumRegions() == 0 &&
            llvm::none_of(op.getResultTypes(), llvm::IsaPred<TileType>)))
        return false;

    int64_t d = pass->headDim();
    // Causal tiles, of unequal work, are claimed from a counter of the role's own where a rank's
    // keys are its own (one source), so that the order alone balances them. (With several, the
    // claiming loop costs the consumers 8-20 bytes of spills at 232 registers.)
    FlatSymbolRefAttr counter;
    if (pass->step.getCausal() && !pass->sources) {
      FlagsOp flags =
          createFlags(role->getParentOfType<ProgramOp>(), role.getLoc(), "attention_tiles", {1});
      counter = FlatSymbolRefAttr::get(flags.getSymNameAttr());
    }
    // D = 128: two stages of K and V fill shared memory with Q and the output's staging.
    setAttentionEngine(role, AttentionEngineAttr::get(
                                 role.getContext(), pass->q.getResult().getType().getElementType(),
                                 d, d == 128 ? 2 : 4, counter));
    setLowering(pass->q, Lowering::load);
    setLowering(pass->k, Lowering::load);
    setLowering(pass->v, Lowering::fused);
    setLowering(pass->step, Lowering::mma);
    for (Operation *op : {pass->init[0], pass->init[1], pass->init[2]})
      setLowering(op, Lowering::registers);
    setLowering(pass->sum, Lowering::registers);
    setLowering(pass->normalise, Lowering::registers);
    setLowering(pass->convert, Lowering::elide);
    setLowering(pass->store, Lowering::store);
    for (WaitOp wait : pass->blocks.getBody()->getOps<WaitOp>())
      setLowering(wait, Lowering::producer);
    // The tile's other waits go to the producer too, before it loads the query tile, which the
    // consumers' stores follow: the consumers hold no state for them across their tiles.
    for (WaitOp wait : llvm::to_vector(grid.getBodyBlock().getOps<WaitOp>())) {
      bool before = llvm::all_of(wait->getOperands(), [&](Value operand) {
        Operation *def = operand.getDefiningOp();
        return !def || def->getBlock() != &grid.getBodyBlock() || def->isBeforeInBlock(pass->q);
      });
      if (before) {
        wait->moveBefore(pass->q);
        setLowering(wait, Lowering::producer);
      }
    }
    return true;
  }

  /// A role whose every matmul can run on the GEMM engine, in passes of one configuration, runs
  /// it with all MK_CTA_THREADS threads; any other runs the tile library on its team.
  LogicalResult planRole(RoleOp role) {
    SmallVector<EnginePass> passes;
    GemmEngineAttr engine;
    bool oneEngine = true, anyMatmul = false;
    WalkResult failedWalk = role.walk([&](MatmulOp matmul) {
      anyMatmul = true;
      if (llvm::any_of(passes, [&](const EnginePass &pass) {
            return llvm::is_contained(pass.matmuls, matmul);
          }))
        return WalkResult::advance();
      std::optional<EnginePass> pass = gemmEnginePass(matmul);
      FailureOr<GemmEngineAttr> config = engineFor(pass);
      if (failed(config))
        return WalkResult::interrupt();
      oneEngine = oneEngine && *config && (!engine || engine == *config);
      engine = *config;
      if (pass)
        passes.push_back(std::move(*pass));
      return WalkResult::advance();
    });
    if (failedWalk.wasInterrupted())
      return failure();
    if (!anyMatmul || !oneEngine)
      return success();
    FailureOr<int64_t> cluster = engineCluster(role, passes);
    if (failed(cluster))
      return failure();
    setGemmEngine(role, GemmEngineAttr::get(role.getContext(), engine.getElement(),
                                            engine.getTileN(), engine.getStages(),
                                            engine.getBKMajor(), engine.getStagingBuffers(),
                                            *cluster, engineARows(passes, *cluster)));
    splitEngineRole(role, passes);
    return success();
  }

  /// How the engine role's CTAs share its work: its producer warpgroup walks the tile grids,
  /// keeps the waits before each pass and loads; its consumers multiply, apply the epilogue in
  /// registers, convert and store through the engine, and run the rest.
  void splitEngineRole(RoleOp role, ArrayRef<EnginePass> passes) {
    SmallVector<MatmulOp> leaders = llvm::map_to_vector(
        passes, [](const EnginePass &pass) -> MatmulOp { return pass.matmuls.front(); });
    // The role's waits before its first tile grid order what both sides read (row counts that
    // bound its grids): the producer waits too, with a copy of its own.
    Block &body = role.getBody().front();
    for (Operation &op : llvm::make_early_inc_range(body)) {
      if (isa<TileGridOp>(op))
        break;
      if (auto wait = dyn_cast<WaitOp>(op)) {
        OpBuilder b(wait);
        setLowering(b.clone(*wait), Lowering::producer);
        setLowering(wait, Lowering::consumer);
      }
    }
    // Signals after a tile grid of the role, outside grids, follow what the senders wrote there:
    // they raise them.
    bool afterGrid = false;
    for (Operation &op : body) {
      afterGrid = afterGrid || isa<TileGridOp>(op);
      if (afterGrid && !isa<TileGridOp, SingleCtaOp>(op))
        op.walk([&](SignalOp signal) {
          if (signal.getScope() != PeerScope::node)
            setLowering(signal, Lowering::deferred);
        });
    }
    bool producerWaits = false;
    for (const EnginePass &pass : passes) {
      MatmulOp leader = pass.matmuls.front();
      // Its waits, and loops of waits (for every tile of a panel), before it.
      for (Operation *op = leader->getPrevNode(); op; op = op->getPrevNode()) {
        auto loop = dyn_cast<scf::ForOp>(op);
        bool waitsOnly =
            loop && llvm::all_of(loop.getBody()->without_terminator(), llvm::IsaPred<WaitOp>);
        if (!isa<WaitOp>(op) && !waitsOnly)
          continue;
        op->walk([&](WaitOp wait) { setLowering(wait, Lowering::producer); });
        producerWaits = true;
      }
      setLowering(leader, Lowering::mma);
      for (MatmulOp follower : ArrayRef(pass.matmuls).drop_front())
        setLowering(follower, Lowering::fused);
      for (Operation *op : pass.epilogue)
        setLowering(op, Lowering::registers);
      ConvertOp convert = pass.convert;
      setLowering(convert, Lowering::elide);
      for (Operation *store : convert->getUsers())
        setLowering(store, Lowering::store);
    }
    // The consumers' signals in a tile grid wait for the tile's stores to land only at the next
    // tile's epilogue, a wait, or the end of the grid's loop. Not where the grid's producer waits
    // for a flag the grid raises: a CTA's producer, held up by a signal that consumers hold back
    // until it loads their next tile, would never load it.
    for (MatmulOp leader : leaders) {
      Operation *grid = leader->getParentOp();
      llvm::DenseSet<StringRef> producerFlags;
      grid->walk([&](WaitOp wait) {
        if (loweringOf(wait) == Lowering::producer)
          producerFlags.insert(wait.getFlags());
      });
      grid->walk([&](SignalOp signal) {
        if (signal.getScope() != PeerScope::node && !producerFlags.contains(signal.getFlags()))
          setLowering(signal, Lowering::deferred);
      });
    }
    // The consumers' waits first raise what they hold back. One in a tile grid that only the
    // engine's stores and signals follow is left to the senders, which serve those in order (on
    // one node: across nodes, flags count what the proxy delivers, and the consumers watch for it
    // stopping).
    role.walk([&](WaitOp wait) {
      if (loweringOf(wait))
        return;
      bool defer = !producerWaits && mesh.getNodes() == 1 && onlyEngineWritesFollow(wait, leaders);
      setLowering(wait, defer ? Lowering::deferred : Lowering::consumer);
    });
  }

  MeshAttr mesh;
  TileNumbering numbering;
  /// Whether every role has an even number of CTAs, so that no cluster of 2 spans two roles.
  bool rolesPairUp = false;
};

} // namespace
