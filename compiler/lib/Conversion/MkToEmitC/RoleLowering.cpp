//===- RoleLowering.cpp - roles as branches on the CTA index --------------===//
//
// A role takes the CTAs [first, first + ctas) of the grid that the launch gives it
// (mk_kernel_args' roles: the compiler's split, or one the caller chose). One the plan gives the
// GEMM engine runs it
// (one it gives the attention engine, AttentionLowering.cpp, runs that) with all MK_CTA_THREADS
// threads: an mk::GemmEngine in shared memory, its producer warpgroup
// walking a copy of the role's tile loops pruned to their loads, its consumers the role itself.
// Any other runs the tile library on a team of MK_TEAM_THREADS threads (the other warpgroup
// idles, or publishes the role's TMA reduction), with the barriers of its bulk copies set up once.
//
//===----------------------------------------------------------------------===//

#include "mk/Conversion/MkToEmitC/EmitCBuilder.h"
#include "mk/Conversion/MkToEmitC/StructureLowering.h"
#include "mk/Conversion/MkToEmitC/TypeConverter.h"
#include "mk/Transforms/LoweringPlan.h"
#include "mk/abi.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::to_emitc;

namespace {

/// The mk::TmaReduce arguments for `accumulate` (marked Lowering::tma): slots, source and result
/// elements, tile shape.
std::string tmaReduceConfig(AccumulateOp accumulate) {
  TileType tile = accumulate.getResult().getType();
  DistTensorType source = accumulate.getSource().getType();
  auto convert = cast<ConvertOp>(*accumulate->user_begin());
  return std::to_string(source.getShape()[0]) + ", " + elementName(source.getElementType()) + ", " +
         elementName(convert.getResult().getType().getElementType()) + ", " +
         std::to_string(tile.getShape()[0]) + ", " + std::to_string(tile.getShape()[1]);
}

/// Whether the tile library's copies can move [rows x cols] slices of `bytes`-byte elements
/// (mk::detail::TileCopy): rows of whole 16-byte chunks, a number of chunks a row that divides
/// the team, and as many chunks in all as a multiple of the team's threads.
bool tileLibraryCopies(int64_t rows, int64_t cols, int64_t bytes) {
  int64_t rowBytes = cols * bytes;
  if (rowBytes % 16)
    return false;
  int64_t rowChunks = rowBytes / 16;
  return MK_TEAM_THREADS % rowChunks == 0 && rows * rowChunks % MK_TEAM_THREADS == 0;
}

/// The tile library's matmul loads k slices of A and B through those copies: a slice too small or
/// too wide for them is refused here, naming the smallest k slice that fits, rather than by
/// NVRTC's static assertion.
LogicalResult checkTileLibraryMatmul(MatmulOp matmul) {
  TileType tile = matmul.getResult().getType();
  int64_t tm = tile.getShape()[0], tn = tile.getShape()[1];
  DistTensorType lhs = matmul.getLhs().getType(), rhs = matmul.getRhs().getType();
  bool aTransposed = matmul.getLhsWholeDims()[0] == lhs.getRank() - 2;
  bool bTransposed = matmul.getRhsWholeDims()[0] == rhs.getRank() - 1;
  int64_t bytes = llvm::divideCeil(lhs.getElementType().getIntOrFloatBitWidth(), 8);
  auto fits = [&](int64_t kTile) {
    return tileLibraryCopies(aTransposed ? kTile : tm, aTransposed ? tm : kTile, bytes) &&
           tileLibraryCopies(bTransposed ? tn : kTile, bTransposed ? kTile : tn, bytes);
  };
  int64_t kTile = *matmul.getKTile();
  if (fits(kTile))
    return success();
  int64_t need = 16;
  while (need <= 1024 && !fits(need))
    need *= 2;
  InFlightDiagnostic diag = matmul.emitOpError()
                            << "runs on the tile library, which cannot copy its k slices of "
                            << kTile << " (A " << (aTransposed ? kTile : tm) << " x "
                            << (aTransposed ? tm : kTile) << ", B " << (bTransposed ? tn : kTile)
                            << " x " << (bTransposed ? kTile : tn) << " of " << bytes
                            << "-byte elements): slices of 4 KiB or more, in rows of at most 4 KiB";
  if (need <= 1024)
    diag << "; its tile needs k slices of " << need << " or more, so a contracted dim on each rank "
         << "that is a multiple of " << need;
  return diag;
}

/// Register tiles of rank 2 are spread over the team's warps in whole 16 x 16 blocks
/// (mk::TileLayout): a tile of another shape is refused here, naming the nearest that fits, rather
/// than by NVRTC's static assertion. Rank-1 tiles fit at any length.
LogicalResult checkRegisterTile(Operation *op, TileType tile) {
  if (tile.getRank() != 2)
    return success();
  constexpr int64_t warps = MK_TEAM_THREADS / 32;
  auto fits = [](int64_t rows, int64_t cols) {
    for (int64_t warpRows = 1; warpRows <= warps; warpRows *= 2)
      if (rows % (16 * warpRows) == 0 && cols % (16 * (warps / warpRows)) == 0)
        return true;
    return false;
  };
  int64_t rows = tile.getShape()[0], cols = tile.getShape()[1];
  if (fits(rows, cols))
    return success();
  int64_t nearRows = std::max<int64_t>(16, llvm::alignTo(rows, 16)),
          nearCols = std::max<int64_t>(16, llvm::alignTo(cols, 16));
  while (!fits(nearRows, nearCols))
    (nearRows <= nearCols ? nearRows : nearCols) *= 2;
  return op->emitOpError() << "makes a register tile of " << rows << " x " << cols
                           << ", which does not split into whole 16 x 16 blocks over the team's "
                           << warps << " warps (both dims multiples of 16, at least "
                           << 16 * 16 * warps << " elements); the nearest tile that does is "
                           << nearRows << " x " << nearCols << " (a masked grid covers the edges)";
}

/// Whether `op` is a wait of the engine's producer, or a loop of only such waits.
bool producerWaitsOnly(Operation *op) {
  if (isa<WaitOp>(op))
    return loweringOf(op) == Lowering::producer;
  auto loop = dyn_cast<scf::ForOp>(op);
  return loop && llvm::all_of(loop.getBody()->without_terminator(),
                              [](Operation &inner) { return producerWaitsOnly(&inner); });
}

} // namespace

LogicalResult StructureLowering::lowerRole(RoleOp role, Value cta, int64_t index) {
  Location loc = role.getLoc();
  OpBuilder b(role);
  const bool pool = role.getPool();
  // The launch's split, not the compiler's: one kernel runs any (FusedOp::setSmSplit). The pool
  // is every CTA's, its tiles claimed.
  Value args = kernelArgs(role);
  Value first, ctas, inRole;
  if (pool) {
    inRole = arith::ConstantIntOp::create(b, loc, 1, 1);
  } else {
    first = toIndex(b, loc, roleFirst(b, loc, args, index));
    ctas = toIndex(b, loc, roleCtas(b, loc, args, index));
    Value end = arith::AddIOp::create(b, loc, first, ctas);
    inRole = arith::AndIOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, cta, first),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, cta, end));
  }
  auto branch = scf::IfOp::create(b, loc, inRole, /*withElseRegion=*/false);
  Block *then = branch.thenBlock();
  then->getOperations().splice(then->begin(), role.getBody().front().getOperations());
  GemmEngineAttr engine = gemmEngineOf(role);
  AttentionEngineAttr attention = attentionEngineOf(role);
  role.erase();

  OpBuilder tb = OpBuilder::atBlockBegin(then);
  Value roleCta = pool ? Value() : arith::SubIOp::create(tb, loc, cta, first).getResult();
  branch.getThenRegion().walk([&](Operation *op) {
    if (isa<RouteRowsOp, RoutePackOp>(op))
      layout.roleOf[op] = index;
  });
  SmallVector<Operation *> nested;
  branch.getThenRegion().walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (isa<TileGridOp, SingleCtaOp>(op))
      nested.push_back(op);
  });
  for (Operation *op : nested) {
    if (auto single = dyn_cast<SingleCtaOp>(op)) {
      OpBuilder sb(single);
      Value zero = arith::ConstantIndexOp::create(sb, loc, 0);
      Value isFirst = arith::CmpIOp::create(sb, loc, arith::CmpIPredicate::eq, roleCta, zero);
      auto once = scf::IfOp::create(sb, loc, isFirst, /*withElseRegion=*/false);
      once.thenBlock()->getOperations().splice(once.thenBlock()->begin(),
                                               single.getBody().front().getOperations());
      single.erase();
    } else if (failed(lowerGrid(cast<TileGridOp>(op), roleCta, ctas,
                                engine ? engine.getCluster() : 1))) {
      return failure();
    }
  }

  if (engine) {
    if (pool)
      return emitError(loc) << "is a pool role given the GEMM engine: its tiles are claimed on "
                               "the tile library's team";
    layout.cluster = std::max(layout.cluster, engine.getCluster());
    return lowerEngineRole(branch, engine);
  }
  if (attention)
    return lowerAttentionRole(branch, attention, ctas);
  if (failed(lowerTeamRole(branch)))
    return failure();
  if (pooled && !pool) {
    OpBuilder end(branch.thenBlock()->getTerminator());
    call(end, loc, {}, "mk::team_leave", {});
  }
  if (pool) {
    // Every CTA's: the branch's code in its place.
    Block *then = branch.thenBlock();
    then->getTerminator()->erase();
    branch->getBlock()->getOperations().splice(branch->getIterator(), then->getOperations());
    branch.erase();
  }
  return success();
}

void StructureLowering::awaitProxyReads(Block *team) {
  auto toNode = [](Operation *op) {
    if (auto copy = dyn_cast<CopyOp>(op))
      return copy.getScope() == PeerScope::node;
    auto send = dyn_cast<SendRowsOp>(op);
    return send && send.getScope() == PeerScope::node;
  };
  if (!team->walk([&](Operation *op) {
             return toNode(op) ? WalkResult::interrupt() : WalkResult::advance();
           })
           .wasInterrupted())
    return;
  Operation *end = team->getTerminator();
  OpBuilder b(end);
  call(b, end->getLoc(), {}, "mk::await_proxy_reads", {kernelArgs(end)});
}

LogicalResult StructureLowering::lowerTeamRole(scf::IfOp branch) {
  Location loc = branch.getLoc();
  WalkResult unfit = branch.getThenRegion().walk([](Operation *op) {
    if (auto matmul = dyn_cast<MatmulOp>(op); matmul && failed(checkTileLibraryMatmul(matmul)))
      return WalkResult::interrupt();
    for (Type type : op->getResultTypes())
      if (auto tile = dyn_cast<TileType>(type); tile && failed(checkRegisterTile(op, tile)))
        return WalkResult::interrupt();
    return WalkResult::advance();
  });
  if (unfit.wasInterrupted())
    return failure();
  OpBuilder b(branch.getContext());
  // The team takes the registers of the warpgroup that has nothing to do.
  Block *body = branch.thenBlock();
  b.setInsertionPoint(body->getTerminator());
  Operation *member = call(b, loc, b.getI1Type(), "mk::team_member", {});
  auto team = scf::IfOp::create(b, loc, member->getResult(0), /*withElseRegion=*/true);
  for (Operation &op :
       llvm::make_early_inc_range(llvm::make_range(body->begin(), member->getIterator())))
    op.moveBefore(team.thenBlock()->getTerminator());
  OpBuilder teamBegin = OpBuilder::atBlockBegin(team.thenBlock());
  call(teamBegin, loc, {}, "mk::team_begin", {});
  // Its bulk copies' barriers, set up once before the first.
  if (team.getThenRegion()
          .walk([](CopyOp copy) {
            return copy.getLink() == Link::nvlink_bulk ? WalkResult::interrupt()
                                                       : WalkResult::advance();
          })
          .wasInterrupted()) {
    auto type = emitc::OpaqueType::get(branch.getContext(), "mk::BulkCopier");
    layout.bulkCopiers.push_back(call(teamBegin, loc, type, "mk::BulkCopier", {}).getResult(0));
  }
  OpBuilder idle(team.elseBlock()->getTerminator());
  call(idle, loc, {}, "mk::team_idle", {});
  // The role's TMA reduction (one configuration: mk-plan-lowering sees to it), built by every
  // thread: the team reduces, the other warpgroup publishes.
  AccumulateOp reduction;
  team.getThenRegion().walk([&](AccumulateOp accumulate) {
    if (!reduction && loweringOf(accumulate) == Lowering::tma)
      reduction = accumulate;
  });
  if (reduction) {
    std::string type = "mk::TmaReduce<" + tmaReduceConfig(reduction) + ">";
    b.setInsertionPoint(member);
    Value reducer = call(b, loc, emitc::OpaqueType::get(branch.getContext(), type), type,
                         {std::string("mk_smem")})
                        .getResult(0);
    layout.reducers.push_back(reducer);
    layout.smemNeeds.push_back(type + "::kBytes");
    call(idle, loc, {}, "mk::tma_publish", {reducer});
    // Each reduced tile's batch goes to the publisher at the end of the block that reduces it.
    team.getThenRegion().walk([&](AccumulateOp accumulate) {
      OpBuilder end(accumulate->getBlock()->getTerminator());
      call(end, loc, {}, "mk::tma_commit", {reducer});
    });
    OpBuilder teamEnd(team.thenBlock()->getTerminator());
    call(teamEnd, loc, {}, "mk::tma_reduce_finish", {reducer});
  }
  awaitProxyReads(team.thenBlock());
  return success();
}

std::pair<Block *, Block *> StructureLowering::splitProducer(Block *role, Operation *engine,
                                                             StringRef isProducer) {
  Location loc = engine->getLoc();
  OpBuilder b(role->getTerminator());
  Operation *predicate = call(b, loc, b.getI1Type(), isProducer, {});
  auto split = scf::IfOp::create(b, loc, predicate->getResult(0), /*withElseRegion=*/true);
  Block *producer = split.thenBlock(), *consumer = split.elseBlock();
  for (Operation &op : llvm::make_early_inc_range(
           llvm::make_range(std::next(engine->getIterator()), predicate->getIterator())))
    op.moveBefore(consumer->getTerminator());
  OpBuilder pb(producer->getTerminator());
  IRMapping copies;
  for (Operation &op : consumer->without_terminator())
    pb.clone(op, copies);
  for (auto [matmul, part] : llvm::to_vector(layout.splitPart))
    if (Operation *copy = copies.lookupOrNull(matmul))
      layout.splitPart[copy] = copies.lookupOrDefault(part);
  return {producer, consumer};
}

void StructureLowering::beginProducer(Block *producer, Value engine, StringRef begin,
                                      StringRef loader) {
  Location loc = engine.getLoc();
  OpBuilder b = OpBuilder::atBlockBegin(producer);
  call(b, loc, {}, begin, {engine});
  Value loads = call(b, loc, b.getI1Type(), loader, {}).getResult(0);
  auto branch = scf::IfOp::create(b, loc, loads, /*withElseRegion=*/false);
  for (Operation &op : llvm::make_early_inc_range(llvm::make_range(
           std::next(branch->getIterator()), producer->without_terminator().end())))
    op.moveBefore(branch.thenBlock()->getTerminator());
}

/// The block of a tile loop that holds its tile: the loop's body, or the branch that guards the
/// tile where a position may name none (a grouped walk's end, a round-robin tile of another rank).
static Block *tileBlock(scf::ForOp loop) {
  Block *body = loop.getBody();
  for (auto guard : body->getOps<scf::IfOp>())
    if (!guard.thenBlock()->getOps<MatmulOp>().empty())
      return guard.thenBlock();
  return body;
}

LogicalResult StructureLowering::lowerEngineRole(scf::IfOp branch, GemmEngineAttr engineAttr) {
  Location loc = branch.getLoc();
  MLIRContext *context = branch.getContext();
  Block *role = branch.thenBlock();
  OpBuilder b = OpBuilder::atBlockBegin(role);
  std::string config = gemmConfigArguments(engineAttr);
  std::string engineType = "mk::GemmEngine<mk::GemmConfig<" + config + ">>";
  // Its senders count the bytes of the routed rows they return to other GPUs (mk_op_counters).
  SmallVector<CallArg> engineArgs = {std::string("mk_smem")};
  bool returnsRows = role->walk([](ReturnRowsOp op) {
                           return loweringOf(op) == Lowering::store ? WalkResult::interrupt()
                                                                    : WalkResult::advance();
                         })
                         .wasInterrupted();
  if (returnsRows)
    engineArgs.push_back(nvlinkBytes(b, loc, kernelArgs(branch)));
  Operation *engineOp =
      call(b, loc, emitc::OpaqueType::get(context, engineType), engineType, engineArgs);
  Value engine = engineOp->getResult(0);
  layout.engines.push_back(engine);
  layout.engineConfigs[engine] = engineAttr;
  layout.smemNeeds.push_back("mk::gemm_smem_bytes<mk::GemmConfig<" + config + ">>()");

  // The role's body becomes the consumers' branch; the producer's is a copy of it pruned to the
  // tile loops' loads.
  auto [producer, consumer] = splitProducer(role, engineOp, "mk::gemm_is_producer");

  // Producer: each tile loop keeps what leads to its matmul (index arithmetic, the waits the plan
  // gave it), which becomes the loads; everything else goes.
  SmallVector<Operation *> producerOps =
      llvm::map_to_vector(producer->without_terminator(), [](Operation &op) { return &op; });
  for (Operation *op : llvm::reverse(producerOps)) {
    auto loop = dyn_cast<scf::ForOp>(op);
    // The loop's engine pass, by its first matmul, which loads the others' B panels too.
    MatmulOp matmul;
    Block *body = loop ? tileBlock(loop) : nullptr;
    if (body)
      for (MatmulOp candidate : body->getOps<MatmulOp>())
        if (loweringOf(candidate) != Lowering::fused)
          matmul = candidate;
    // (What the kept loops use stays: the walk of a grid bounded by row counts reads them; so do
    // the producer's waits before them, for what it reads there.)
    if (!matmul) {
      if (!isMemoryEffectFree(op) && op->use_empty() &&
          !(isa<WaitOp>(op) && loweringOf(op) == Lowering::producer))
        op->erase();
      continue;
    }
    SmallVector<Operation *> after;
    for (Operation *op = matmul->getNextNode(); op != body->getTerminator(); op = op->getNextNode())
      if (loweringOf(op) != Lowering::fused)
        after.push_back(op);
    for (Operation *op : llvm::reverse(after))
      op->erase();
    for (Operation &before : llvm::make_early_inc_range(llvm::reverse(*body))) {
      if (&before == matmul || isa<scf::YieldOp>(before) || isMemoryEffectFree(&before) ||
          !before.use_empty() ||
          (isa<MatmulOp>(before) && loweringOf(&before) == Lowering::fused) ||
          producerWaitsOnly(&before))
        continue;
      before.erase();
    }
    setLowering(matmul, Lowering::load);
  }
  // Consumers: the producer's waits are not theirs.
  SmallVector<WaitOp> producerWaits;
  consumer->walk([&](WaitOp wait) {
    if (loweringOf(wait) == Lowering::producer)
      producerWaits.push_back(wait);
  });
  for (WaitOp wait : producerWaits)
    wait.erase();
  // Split-K: the rest of a tile's body is the part's that arrives last (gemm_sum_splits).
  SmallVector<MatmulOp> splits;
  consumer->walk([&](MatmulOp matmul) {
    if (matmul.getPartials())
      splits.push_back(matmul);
  });
  for (MatmulOp matmul : splits) {
    Operation *last = matmul;
    while (isa_and_nonnull<MatmulOp>(last->getNextNode()) &&
           loweringOf(last->getNextNode()) == Lowering::fused)
      last = last->getNextNode();
    Block *tile = matmul->getBlock();
    OpBuilder after(context);
    after.setInsertionPointAfter(last);
    Value complete =
        call(after, loc, after.getI1Type(), "mk::gemm_tile_complete", {engine})->getResult(0);
    auto whole = scf::IfOp::create(after, loc, complete, /*withElseRegion=*/false);
    for (Operation &op : llvm::make_early_inc_range(
             llvm::make_range(std::next(whole->getIterator()), tile->without_terminator().end())))
      op.moveBefore(whole.thenBlock()->getTerminator());
  }
  // Consumers raise what a tile loop's last tiles hold back as they leave the loop: a producer
  // waiting for it, past the loop, loads nothing more until then.
  for (Operation &op : *consumer)
    if (auto loop = dyn_cast<scf::ForOp>(op);
        loop &&
        loop.getBody()->walk([](MatmulOp) { return WalkResult::interrupt(); }).wasInterrupted()) {
      OpBuilder after(context);
      after.setInsertionPointAfter(loop);
      call(after, loc, {}, "mk::gemm_flush_signals", {engine});
    }
  beginProducer(producer, engine, "mk::gemm_producer_begin", "mk::gemm_loader");
  OpBuilder consumerBegin = OpBuilder::atBlockBegin(consumer);
  call(consumerBegin, loc, {}, "mk::gemm_consumer_begin", {engine});
  awaitProxyReads(consumer);
  OpBuilder end(consumer->getTerminator());
  call(end, loc, {}, "mk::gemm_finish", {engine});
  if (pooled) {
    OpBuilder leave(role->getTerminator());
    call(leave, loc, {}, "mk::gemm_leave", {engine});
  }
  return success();
}
