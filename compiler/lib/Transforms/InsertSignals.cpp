//===- InsertSignals.cpp - per-tile flags between transfers and readers ---===//

#include "TileAccess.h"

#include "mk/Transforms/Passes.h"
#include "mk/Transforms/TileNumbering.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"

namespace mlir::mk {
#define GEN_PASS_DEF_MKINSERTSIGNALS
#include "mk/Transforms/Passes.h.inc"
} // namespace mlir::mk

using namespace mlir;
using namespace mlir::mk;

namespace {

/// The flags that order the writes of one tensor with its reads.
struct FlagPlan {
  FlatSymbolRefAttr flags;
  SmallVector<int64_t> flagDims; // the tensor dims a flag is per
  SmallVector<int64_t> slotDims; // dims whose slots a combining read waits for together
  SmallVector<int64_t> extents;  // the write granularity
};

class SignalInserter {
public:
  SignalInserter(ProgramOp program)
      : program(program), mesh(program.getMesh()), numbering(TileNumbering::of(program)),
        nodes(mesh.getNodes()), gpus(mesh.getGpus()) {}

  LogicalResult run() {
    if (program.getBodyBlock().getOps<RoleOp>().empty())
      return program.emitError() << "@" << program.getSymName()
                                 << " has no roles (run mk-expand-collectives first)";
    SmallVector<TileAccess> writes;
    DenseMap<Value, SmallVector<TileAccess>> readsByTensor;
    llvm::SetVector<Value> transferred;
    collect(writes, readsByTensor, transferred);
    // A grid bounded by row counts visits no tile past them, and so signals none of those: its
    // tiles' flags are stamped with the launch (the tiles a launch skips keep an older stamp, which
    // no reader of that launch waits for), where every reader is bounded by the same counts.
    // Another reader (a transfer of every tile) cannot know the counts: the grid then produces
    // every tile, so that each is signalled (the rows past the count are empty slots).
    while (unboundTilesReadByOthers(writes, readsByTensor, transferred)) {
      writes.clear();
      readsByTensor.clear();
      transferred.clear();
      collect(writes, readsByTensor, transferred);
    }

    for (Value tensor : transferred) {
      FailureOr<FlagPlan> plan = planFlags(tensor, writes, readsByTensor[tensor], "ready");
      if (failed(plan))
        return failure();
      for (const TileAccess &write : signalling(tensor, writes))
        signalAfter(write, *plan);
      for (const TileAccess &read : readsByTensor[tensor])
        if (!producedInPlace(read, writes))
          if (failed(waitBefore(read, *plan)))
            return failure();
    }
    for (BlockArgument argument : program.getBodyBlock().getArguments())
      if (failed(awaitOutput(argument, writes)))
        return failure();
    if (nodes * gpus > 1)
      announceLaunch();
    return success();
  }

private:
  /// The program's writes and reads, and the tensors whose writes and reads need ordering:
  /// those transfers write, and those roles produce that other roles read (their other writers
  /// join in).
  void collect(SmallVector<TileAccess> &writes,
               DenseMap<Value, SmallVector<TileAccess>> &readsByTensor,
               llvm::SetVector<Value> &transferred) {
    program.walk([&](Operation *op) {
      llvm::append_range(writes, writesOf(op));
      for (TileAccess &read : readsOf(op))
        readsByTensor[read.tensor].push_back(read);
    });
    for (const TileAccess &write : writes) {
      auto reads = readsByTensor.find(write.tensor);
      if (reads == readsByTensor.end())
        continue;
      // A tile one grid stores and another reads comes from another CTA.
      auto grid = write.op->getParentOfType<TileGridOp>();
      bool readElsewhere = llvm::any_of(reads->second, [&](const TileAccess &read) {
        return read.op->getParentOfType<TileGridOp>() != grid;
      });
      if (transfers(write.op) || readElsewhere)
        transferred.insert(write.tensor);
    }
  }

  /// The row counts that bound the grid around `op`, if any.
  static Value rowCountsAround(Operation *op) {
    auto grid = op->getParentOfType<TileGridOp>();
    return grid ? grid.getRowCounts() : Value();
  }

  /// Unbounds the grids bounded by row counts whose written tiles are transferred, or read outside
  /// a grid bounded by the same counts; whether there were any.
  static bool unboundTilesReadByOthers(ArrayRef<TileAccess> writes,
                                       DenseMap<Value, SmallVector<TileAccess>> &readsByTensor,
                                       const llvm::SetVector<Value> &transferred) {
    bool unbounded = false;
    for (const TileAccess &write : writes) {
      Value counts = rowCountsAround(write.op);
      if (!counts || !transferred.contains(write.tensor))
        continue;
      bool others = transfers(write.op) ||
                    llvm::any_of(readsByTensor[write.tensor], [&](const TileAccess &read) {
                      return rowCountsAround(read.op) != counts;
                    });
      if (others) {
        write.op->getParentOfType<TileGridOp>().getRowCountsMutable().clear();
        unbounded = true;
      }
    }
    return unbounded;
  }

  /// Whether `op` moves a tile to where another rank or CTA reads it: every put and copy but a
  /// put to this rank's own memory, which is a store.
  static bool transfers(Operation *op) {
    if (auto put = dyn_cast<PutOp>(op))
      return put.getScope() != PeerScope::self;
    return isa<CopyOp>(op);
  }

  /// Flags named `prefix`N for the tiles of `tensor` that `writes` write and `reads` read.
  FailureOr<FlagPlan> planFlags(Value tensor, ArrayRef<TileAccess> writes,
                                ArrayRef<TileAccess> reads, StringRef prefix) {
    auto type = cast<DistTensorType>(tensor.getType());
    FlagPlan plan;
    const TileAccess *first = nullptr;
    for (const TileAccess &write : writes)
      if (write.tensor == tensor && (!first || transfers(write.op)))
        first = &write;
    plan.extents = first->extents;
    for (const TileAccess &read : reads)
      if (isa<AccumulateOp>(read.op))
        for (int64_t d : read.wholeDims)
          if (plan.extents[d] == 1 && !llvm::is_contained(plan.slotDims, d))
            plan.slotDims.push_back(d);

    SmallVector<int64_t> shape;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      if (llvm::is_contained(plan.slotDims, d) || plan.extents[d] == 0)
        continue;
      plan.flagDims.push_back(d);
      shape.push_back(numbering.count(type.getShape()[d], plan.extents[d]));
    }
    if (shape.empty())
      shape.push_back(1);

    // Reads and writes of tiles must match the flags' tiles; a read of a whole dim waits for
    // every flag along it.
    auto check = [&](const TileAccess &access, bool read) -> LogicalResult {
      if (access.tensor != tensor)
        return success();
      for (int64_t d : plan.flagDims)
        if (access.extents[d] != plan.extents[d] && !(read && access.extents[d] == 0))
          return access.op->emitOpError()
                 << "accesses tiles of " << access.extents[d] << " along dim " << d
                 << " of a tensor others write in tiles of " << plan.extents[d]
                 << "; mkc orders transfers tile by tile, so both must match";
      return success();
    };
    for (const TileAccess &write : writes)
      if (failed(check(write, /*read=*/false)))
        return failure();
    for (const TileAccess &read : reads)
      if (failed(check(read, /*read=*/true)))
        return failure();

    OpBuilder b = OpBuilder::atBlockBegin(&program.getBodyBlock());
    std::string name = (prefix + Twine(flagCount++)).str();
    flagShapes[name] = shape;
    FlagsOp::create(b, tensor.getLoc(), b.getStringAttr(name), b.getDenseI64ArrayAttr(shape));
    plan.flags = FlatSymbolRefAttr::get(b.getContext(), name);
    return plan;
  }

  static SmallVector<Value> flagIndices(OpBuilder &b, const TileAccess &access,
                                        const FlagPlan &plan) {
    SmallVector<Value> indices;
    for (int64_t d : plan.flagDims)
      indices.push_back(access.indexOf(d));
    if (indices.empty())
      indices.push_back(arith::ConstantIndexOp::create(b, access.op->getLoc(), 0));
    return indices;
  }

  /// The signal follows the data to the rank it was written to, over the same link.
  void signalAfter(const TileAccess &write, const FlagPlan &plan) {
    OpBuilder b(write.op->getContext());
    b.setInsertionPointAfter(write.op);
    PeerScope scope = PeerScope::self;
    Value peer;
    LinkAttr link;
    if (auto put = dyn_cast<PutOp>(write.op)) {
      scope = put.getScope();
      peer = put.getPeer();
      link = put.getLinkAttr();
    } else if (auto copy = dyn_cast<CopyOp>(write.op)) {
      scope = copy.getScope();
      peer = copy.getPeer();
      link = copy.getLinkAttr();
      // A bulk copy completes asynchronously; its signal is a plain NVLink store after it.
      if (link && link.getValue() == Link::nvlink_bulk)
        link = LinkAttr::get(b.getContext(), Link::nvlink_store);
    }
    SignalOp::create(b, write.op->getLoc(), plan.flags, flagIndices(b, write, plan),
                     PeerScopeAttr::get(b.getContext(), scope), peer, link,
                     rowCountsAround(write.op) ? b.getUnitAttr() : UnitAttr());
  }

  /// A read of data the same body wrote just before (a node partial sent on from its slot) needs
  /// no wait.
  static bool producedInPlace(const TileAccess &read, ArrayRef<TileAccess> writes) {
    return llvm::any_of(writes, [&](const TileAccess &write) {
      if (write.tensor != read.tensor || !isa<StoreOp>(write.op) ||
          !llvm::equal(write.indices, read.indices))
        return false;
      Operation *readHere = write.op->getBlock()->findAncestorOpInBlock(*read.op);
      return readHere && write.op->isBeforeInBlock(readHere);
    });
  }

  /// Waits before `read` for the flags of the tiles it reads, hoisted out of the loops around it
  /// that do not change which flags those are (not out of branches: a branch not taken must not
  /// wait). A read of a whole dim waits for each flag along it.
  LogicalResult waitBefore(const TileAccess &read, const FlagPlan &plan) {
    auto type = cast<DistTensorType>(read.tensor.getType());
    int64_t count = 1;
    for (int64_t d : plan.slotDims)
      if (llvm::is_contained(read.wholeDims, d))
        count *= type.getShape()[d];

    SmallVector<Value> indexValues;
    for (int64_t d : plan.flagDims)
      if (Value index = read.indexOf(d))
        indexValues.push_back(index);
    Operation *anchor = read.op;
    while (isa<scf::ForOp>(anchor->getParentOp()) && llvm::all_of(indexValues, [&](Value v) {
             return !anchor->getParentOp()->isAncestor(v.getParentBlock()->getParentOp()) ||
                    v.getParentBlock()->getParentOp() == anchor->getParentOp()->getParentOp();
           }))
      anchor = anchor->getParentOp();

    OpBuilder b(anchor);
    Location loc = read.op->getLoc();
    SmallVector<int64_t> flagShape = flagShapes.lookup(plan.flags.getValue());
    SmallVector<Value> indices;
    std::function<void(OpBuilder &, size_t)> waitFrom = [&](OpBuilder &nb, size_t i) {
      if (i == plan.flagDims.size()) {
        if (indices.empty())
          indices.push_back(arith::ConstantIndexOp::create(nb, loc, 0));
        if (!alreadyWaited(nb, plan.flags, indices, count))
          WaitOp::create(nb, loc, plan.flags, indices, nb.getI64IntegerAttr(count));
        return;
      }
      if (Value index = read.indexOf(plan.flagDims[i])) {
        indices.push_back(index);
        waitFrom(nb, i + 1);
        indices.pop_back();
        return;
      }
      Value zero = arith::ConstantIndexOp::create(nb, loc, 0);
      Value one = arith::ConstantIndexOp::create(nb, loc, 1);
      Value extent = arith::ConstantIndexOp::create(nb, loc, flagShape[i]);
      scf::ForOp::create(nb, loc, zero, extent, one, ValueRange{},
                         [&](OpBuilder &lb, Location l, Value flag, ValueRange) {
                           indices.push_back(flag);
                           waitFrom(lb, i + 1);
                           indices.pop_back();
                           scf::YieldOp::create(lb, l);
                         });
    };
    waitFrom(b, 0);
    return success();
  }

  /// An identical wait earlier in the block makes another one redundant.
  static bool alreadyWaited(OpBuilder &b, FlatSymbolRefAttr flags, ArrayRef<Value> indices,
                            int64_t count) {
    Block *block = b.getInsertionBlock();
    for (Operation &op : llvm::make_range(block->begin(), b.getInsertionPoint()))
      if (auto wait = dyn_cast<WaitOp>(op))
        if (wait.getFlagsAttr() == flags && static_cast<int64_t>(wait.getCount()) == count &&
            llvm::equal(wait.getIndices(), indices, [](Value a, Value b) {
              return a == b || (matchPattern(a, m_Zero()) && matchPattern(b, m_Zero()));
            }))
          return true;
    return false;
  }

  /// The writes of `tensor` that signal its flags: all of them, but where puts combine into a
  /// tile, only those. The program has already ordered them after the tile's first contribution
  /// (one combining rank per tile), so their signal is the tile's last arrival of a launch, and a
  /// reader waits for one signal per launch whatever the number of writes.
  static SmallVector<TileAccess> signalling(Value tensor, ArrayRef<TileAccess> writes) {
    auto combines = [](const TileAccess &write) {
      auto put = dyn_cast<PutOp>(write.op);
      return put && put.getCombine();
    };
    SmallVector<TileAccess> of;
    for (const TileAccess &write : writes)
      if (write.tensor == tensor)
        of.push_back(write);
    if (llvm::any_of(of, combines))
      llvm::erase_if(of, [&](const TileAccess &write) { return !combines(write); });
    return of;
  }

  /// What peers put into an argument is output the caller reads once the launch completes, and a
  /// rank's kernel may finish before the peers' last puts land. So each write into such an
  /// argument signals a per-tile flag where it lands, and the role that puts waits, after its own
  /// tiles, for every tile of its rank (each is written once per launch, by one rank).
  LogicalResult awaitOutput(BlockArgument argument, ArrayRef<TileAccess> allWrites) {
    SmallVector<TileAccess> writes = signalling(argument, allWrites);
    const TileAccess *remote = nullptr;
    for (const TileAccess &write : writes)
      if (isa<PutOp, CopyOp>(write.op) && transfers(write.op))
        remote = &write;
    if (!remote)
      return success();
    if (cast<DistTensorType>(argument.getType()).getPlacement().getKind() !=
        PlacementKind::replicated)
      return remote->op->emitOpError()
             << "writes into argument #" << argument.getArgNumber()
             << " on other ranks, which is not replicated; mkc awaits the tiles peers write only "
                "in replicated outputs, which every rank receives whole";
    FailureOr<FlagPlan> plan = planFlags(argument, writes, {}, "arrived");
    if (failed(plan))
      return failure();
    for (const TileAccess &write : writes)
      signalAfter(write, *plan);

    // The waits: a copy of the putting grid, over every tile rather than this rank's share.
    auto grid = remote->op->getParentOfType<TileGridOp>();
    IRMapping mapping;
    OpBuilder b(grid);
    b.setInsertionPointAfter(grid);
    auto arrivals = cast<TileGridOp>(b.clone(*grid, mapping));
    arrivals.removeDistributeAttr();
    Block &body = arrivals.getBodyBlock();
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if (!op.hasTrait<OpTrait::IsTerminator>())
        op.erase();
    b.setInsertionPointToStart(&body);
    SmallVector<Value> indices;
    for (Value index : flagIndices(b, *remote, *plan)) {
      Value mapped = mapping.lookupOrNull(index);
      if (!mapped || mapped.getParentBlock() != &body)
        return remote->op->emitOpError()
               << "writes into argument #" << argument.getArgNumber()
               << " at a tile computed inside its grid; mkc awaits the tiles peers write only "
                  "where the grid's own coordinates name them";
      indices.push_back(mapped);
    }
    WaitOp::create(b, remote->op->getLoc(), plan->flags, indices, b.getI64IntegerAttr(1));
    return success();
  }

  /// Each launch starts with an announcement to the ranks this one exchanges data with (the GPUs
  /// of its node and its rail peers), and each tile waits for theirs before its first write they
  /// can see: a peer still in the previous launch may be reading what would be overwritten.
  void announceLaunch() {
    Location loc = program.getLoc();
    OpBuilder b = OpBuilder::atBlockBegin(&program.getBodyBlock());
    FlagsOp::create(b, loc, b.getStringAttr("launched"), b.getDenseI64ArrayAttr({1}));
    auto launched = FlatSymbolRefAttr::get(b.getContext(), "launched");
    MLIRContext *context = b.getContext();

    RoleOp first = *program.getBodyBlock().getOps<RoleOp>().begin();
    b.setInsertionPointToStart(&first.getBody().front());
    auto single = SingleCtaOp::create(b, loc);
    b.createBlock(&single.getBody());
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    auto place = PlaceOp::create(b, loc, b.getIndexType(), b.getIndexType());
    auto signalAll = [&](int64_t count, Value mine, PeerScope scope, Link link, bool self) {
      if (count == 1 && !self)
        return;
      Value size = arith::ConstantIndexOp::create(b, loc, count);
      Value start = self ? zero : one;
      scf::ForOp::create(
          b, loc, start, size, one, ValueRange{},
          [&](OpBuilder &nb, Location l, Value offset, ValueRange) {
            Value peer =
                arith::RemSIOp::create(nb, l, arith::AddIOp::create(nb, l, mine, offset), size);
            SignalOp::create(nb, l, launched, ValueRange{zero}, PeerScopeAttr::get(context, scope),
                             peer, LinkAttr::get(context, link));
            scf::YieldOp::create(nb, l);
          });
    };
    signalAll(gpus, place.getGpu(), PeerScope::gpu, Link::nvlink_store, /*self=*/true);
    signalAll(nodes, place.getNode(), PeerScope::node, Link::rdma_proxy, /*self=*/false);

    int64_t expected = gpus + nodes - 1;
    // Routing ops outside tile grids write to peers at once.
    program.walk([&](Operation *op) {
      if (isa<RouteCensusOp, RouteRowsOp, SendRowsOp>(op)) {
        OpBuilder wb(op);
        WaitOp::create(wb, loc, launched, ValueRange{arith::ConstantIndexOp::create(wb, loc, 0)},
                       wb.getI64IntegerAttr(expected));
      }
    });
    program.walk([&](TileGridOp grid) {
      Operation *firstWrite = nullptr;
      for (Operation &op : grid.getBodyBlock()) {
        bool writes = op.walk([](Operation *inner) {
                          return isa<PutOp, CopyOp, StoreOp, SignalOp, ReturnRowsOp>(inner)
                                     ? WalkResult::interrupt()
                                     : WalkResult::advance();
                        }).wasInterrupted();
        if (writes) {
          firstWrite = &op;
          break;
        }
      }
      if (!firstWrite)
        return;
      OpBuilder wb(firstWrite);
      Value index = arith::ConstantIndexOp::create(wb, loc, 0);
      WaitOp::create(wb, loc, launched, ValueRange{index}, wb.getI64IntegerAttr(expected));
    });
  }

  ProgramOp program;
  MeshAttr mesh;
  TileNumbering numbering;
  int64_t nodes, gpus;
  int64_t flagCount = 0;
  llvm::StringMap<SmallVector<int64_t>> flagShapes;
};

struct InsertSignalsPass : mk::impl::MkInsertSignalsBase<InsertSignalsPass> {
  void runOnOperation() override {
    if (failed(SignalInserter(getOperation()).run()))
      signalPassFailure();
  }
};

} // namespace
