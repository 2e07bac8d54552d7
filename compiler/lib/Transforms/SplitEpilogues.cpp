//===- SplitEpilogues.cpp - a collective's combined tile, in a grid of its own ===//
//
// What a tile body does with the combined tile of an mk.all_reduce or mk.reduce_scatter runs
// where that tile is, once it is there: in a grid over the collective's destination, placed right
// after the grid, which reads the tile back. The epilogue's ops move there; what they need from
// the body besides (reads, pure ops) is recomputed there.
//
//===----------------------------------------------------------------------===//

#include "mk/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::mk {
#define GEN_PASS_DEF_MKSPLITEPILOGUES
#include "mk/Transforms/Passes.h.inc"
} // namespace mlir::mk

using namespace mlir;
using namespace mlir::mk;

namespace {

/// The op of `body` that holds the definition of `value`, if `value` is defined in it.
Operation *definerIn(Block &body, Value value) {
  Operation *def = value.getDefiningOp();
  return def ? body.findAncestorOpInBlock(*def) : nullptr;
}

/// Calls f on every operand of `op` and of the ops nested in it.
void forEachOperand(Operation *op, function_ref<void(Value)> f) {
  op->walk([&](Operation *inner) {
    for (Value operand : inner->getOperands())
      f(operand);
  });
}

/// Whether `op` (and what it holds) at most reads memory: recomputing it elsewhere changes nothing.
bool onlyReads(Operation *op) {
  std::optional<SmallVector<MemoryEffects::EffectInstance>> effects = getEffectsRecursively(op);
  return effects && llvm::all_of(*effects, [](const MemoryEffects::EffectInstance &effect) {
           return isa<MemoryEffects::Read>(effect.getEffect());
         });
}

struct SplitEpiloguesPass : mk::impl::MkSplitEpiloguesBase<SplitEpiloguesPass> {
  void runOnOperation() override {
    SmallVector<Operation *> collectives;
    getOperation().walk([&](Operation *op) {
      if (isa<AllReduceOp, ReduceScatterOp>(op) && op->getNumResults() == 1)
        collectives.push_back(op);
    });
    for (Operation *collective : collectives) {
      LogicalResult done =
          llvm::TypeSwitch<Operation *, LogicalResult>(collective)
              .Case<AllReduceOp, ReduceScatterOp>([&](auto op) { return split(op); });
      if (failed(done))
        return signalPassFailure();
    }
  }

  /// The grid whose body `collective` is in, if it stores the grid's own tile there.
  static FailureOr<TileGridOp> gridOf(Operation *collective, TypedValue<TileType> value,
                                      TypedValue<DistTensorType> dest, ValueRange indices,
                                      ArrayRef<int64_t> wholeDims) {
    auto grid = dyn_cast<TileGridOp>(collective->getParentOp());
    auto refuse = [&](const Twine &why) {
      return collective->emitOpError()
             << "gives its combined tile to the rest of the body, so it " << why;
    };
    if (!grid || !isa<ProgramOp>(grid->getParentOp()))
      return refuse("must be directly in the body of a tile grid of the program");
    Block &body = grid.getBodyBlock();
    if (!wholeDims.empty() || !llvm::equal(indices, body.getArguments()))
      return refuse("must store at the grid's own tile coordinates, in the order of the grid's");
    ArrayRef<int64_t> shape = value.getType().getShape(), sizes = grid.getTileSizes();
    int64_t leading = dest.getType().getRank() - int64_t(shape.size());
    bool sameTile = leading >= 0 && int64_t(sizes.size()) == dest.getType().getRank();
    for (int64_t d = 0; sameTile && d < int64_t(sizes.size()); ++d)
      sameTile = sizes[d] == (d < leading ? 1 : shape[d - leading]);
    if (!sameTile)
      return refuse("must combine the grid's own tile (of its tile sizes)");
    return grid;
  }

  template <typename OpT> static OpT withoutResult(OpT op) {
    OpBuilder b(op);
    OperationState state(op.getLoc(), op->getName(), op->getOperands(), TypeRange(),
                         op->getAttrs());
    auto bare = cast<OpT>(b.create(state));
    op.erase();
    return bare;
  }

  template <typename OpT> LogicalResult split(OpT op) {
    Operation *collective = op;
    TypedValue<TileType> value = op.getValue();
    TypedValue<DistTensorType> dest = op.getDest();
    FailureOr<TileGridOp> found =
        gridOf(collective, value, dest, op.getIndices(), op.getWholeDims());
    if (failed(found))
      return failure();
    TileGridOp grid = *found;
    Block &body = grid.getBodyBlock();
    Value combined = collective->getResult(0);

    // The epilogue: the ops of the body that depend on the combined tile, in order.
    llvm::SetVector<Operation *> epilogue;
    for (Operation &op : body) {
      bool depends = false;
      forEachOperand(&op, [&](Value operand) {
        Operation *def = definerIn(body, operand);
        depends |= operand == combined || (def && def != &op && epilogue.contains(def));
      });
      if (depends)
        epilogue.insert(&op);
    }
    // What it needs from the rest of the body, recomputed in the new grid.
    llvm::SetVector<Operation *> needed;
    SmallVector<Operation *> worklist(epilogue.begin(), epilogue.end());
    while (!worklist.empty()) {
      Operation *op = worklist.pop_back_val();
      bool failedOp = false;
      forEachOperand(op, [&](Value operand) {
        Operation *def = definerIn(body, operand);
        if (!def || def == op || def == collective || epilogue.contains(def) ||
            needed.contains(def))
          return;
        if (!onlyReads(def)) {
          InFlightDiagnostic diag = def->emitOpError()
                                    << "writes memory, and the epilogue of a collective's "
                                       "combined tile needs its result: compute it after";
          diag.attachNote(collective->getLoc()) << "the collective";
          failedOp = true;
          return;
        }
        needed.insert(def);
        worklist.push_back(def);
      });
      if (failedOp)
        return failure();
    }

    OpBuilder b(grid->getContext());
    b.setInsertionPointAfter(grid);
    Location loc = collective->getLoc();
    auto epilogueGrid = TileGridOp::create(
        b, loc, dest, /*holder=*/Value(), /*row_counts=*/Value(), grid.getTileSizesAttr(),
        /*global=*/UnitAttr(), grid.getMaskedAttr(), /*order=*/TileOrderAttr(),
        /*distribute=*/MeshAxisAttr());
    Block *block = b.createBlock(&epilogueGrid.getBody(), {}, body.getArgumentTypes(),
                                 SmallVector<Location>(body.getNumArguments(), loc));
    IRMapping mapping;
    mapping.map(body.getArguments(), block->getArguments());
    mapping.map(combined, LoadOp::create(b, loc, value.getType(), dest, block->getArguments(),
                                         b.getDenseI64ArrayAttr({}))
                              .getResult());
    for (Operation &op : body)
      if (needed.contains(&op) || epilogue.contains(&op))
        b.clone(op, mapping);
    for (Operation *op : llvm::reverse(epilogue))
      op->erase();
    // What only the epilogue used is dead in the first grid.
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if (needed.contains(&op) && op.use_empty())
        op.erase();
    withoutResult(op);
    return success();
  }
};

} // namespace
