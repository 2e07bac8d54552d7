//===- GemmEngine.cpp - which matmuls the GEMM engine can compute ---------===//

#include "mk/Transforms/GemmEngine.h"

using namespace mlir;
using namespace mlir::mk;

bool mlir::mk::tmaAddresses(DistTensorType type, ArrayRef<int64_t> tile, MeshAttr mesh,
                            const TileNumbering &numbering) {
  int64_t bytes = llvm::divideCeil(type.getElementType().getIntOrFloatBitWidth(), 8);
  int64_t rank = type.getRank(), first = rank - tile.size();
  for (int64_t d = first; d < rank; ++d)
    if (!numbering.plain(type.getShape()[d], tile[d - first]))
      return false;
  return type.isEvenlySplit(mesh) && bytes * type.getLocalExtent(rank - 1, mesh) % 16 == 0;
}

int64_t EnginePass::tileColumns() const {
  MatmulOp leader = matmuls.front();
  return matmuls.size() * leader.getResult().getType().getShape()[1];
}

/// Whether `op` is elementwise math on tiles (every operand and the result of one type).
static bool isElementwise(Operation *op) {
  return op->hasTrait<OpTrait::SameOperandsAndResultType>() && op->getNumResults() == 1 &&
         isa<TileType>(op->getResult(0).getType());
}

/// Whether `follower` multiplies the same A rows as `leader` by a B of the same type at the same
/// columns, into a tile of the same type.
static bool sharesA(MatmulOp leader, MatmulOp follower) {
  return follower.getLhs() == leader.getLhs() &&
         llvm::equal(follower.getLhsIndices(), leader.getLhsIndices()) &&
         follower.getLhsWholeDims() == leader.getLhsWholeDims() &&
         follower.getRhs().getType() == leader.getRhs().getType() &&
         llvm::equal(follower.getRhsIndices(), leader.getRhsIndices()) &&
         follower.getRhsWholeDims() == leader.getRhsWholeDims() &&
         follower.getResult().getType() == leader.getResult().getType() &&
         follower.getKTile() == leader.getKTile();
}

/// Whether a kernel writes `tensor`: a consumer reading it in the epilogue does not wait with the
/// producer, so it may read only what stays as the launch found it.
static bool writtenInProgram(Value tensor, ProgramOp program) {
  return program
      .walk([&](Operation *op) {
        return hasEffect<MemoryEffects::Write>(op, tensor) ? WalkResult::interrupt()
                                                           : WalkResult::advance();
      })
      .wasInterrupted();
}

/// The ops that make `value` a row vector repeated down an engine tile's rows, in order: a load of
/// `tile`'s columns from a rank-1 tensor the kernel does not write, converted to f32 where it is
/// 16-bit, broadcast along dim 0; each used only by the next, the broadcast only by elementwise
/// ops. A bias: the consumers load the columns they hold, no shared memory between.
static std::optional<SmallVector<Operation *, 3>> broadcastRow(Value value, TileType tile,
                                                               ProgramOp program) {
  auto broadcast = value.getDefiningOp<BroadcastOp>();
  if (!broadcast || broadcast.getDim() != 0 || broadcast.getResult().getType() != tile ||
      !llvm::all_of(broadcast->getUsers(), isElementwise))
    return std::nullopt;
  SmallVector<Operation *, 3> chain = {broadcast};
  Value row = broadcast.getSource();
  if (auto convert = row.getDefiningOp<ConvertOp>()) {
    chain.insert(chain.begin(), convert);
    row = convert.getSource();
  }
  auto load = row.getDefiningOp<LoadOp>();
  if (!load ||
      !isa<BFloat16Type, Float16Type, Float32Type>(load.getResult().getType().getElementType()) ||
      writtenInProgram(load.getSource(), program))
    return std::nullopt;
  chain.insert(chain.begin(), load);
  for (Operation *op : chain)
    if (op->getBlock() != broadcast->getBlock() ||
        (op != broadcast && !op->getResult(0).hasOneUse()))
      return std::nullopt;
  return chain;
}

bool mlir::mk::groupedMatmul(MatmulOp matmul) { return matmul.getLhs().getType().getRank() == 3; }

bool mlir::mk::bKMajor(MatmulOp matmul) {
  return matmul.getRhsWholeDims()[0] == matmul.getRhs().getType().getRank() - 1;
}

std::optional<EnginePass> mlir::mk::gemmEnginePass(MatmulOp leader) {
  TileType tile = leader.getResult().getType();
  DistTensorType lhs = leader.getLhs().getType(), rhs = leader.getRhs().getType();
  Type element = lhs.getElementType();
  // Matrices, or groups of them (the outer dim indexed): A row-major, its K innermost.
  int64_t rank = lhs.getRank();
  if (!(element.isBF16() || element.isF16()) || rhs.getElementType() != element ||
      (rank != 2 && rank != 3) || rhs.getRank() != rank ||
      !llvm::is_contained({64, 128}, tile.getShape()[0]) ||
      !llvm::is_contained({64, 128, 256}, tile.getShape()[1]) ||
      leader.getLhsWholeDims()[0] != rank - 1 || leader.getRhsWholeDims()[0] < rank - 2)
    return std::nullopt;
  // A matmul after another that shares its A is that one's follower, not a leader.
  for (Operation *op = leader->getPrevNode(); op; op = op->getPrevNode())
    if (auto before = dyn_cast<MatmulOp>(op); before && sharesA(before, leader))
      return std::nullopt;
  // A panel: its tile rows (A's) or BN (B's) by the whole of K.
  auto program = leader->getParentOfType<ProgramOp>();
  TileNumbering numbering = TileNumbering::of(program);
  int64_t bm = tile.getShape()[0], bn = tile.getShape()[1];
  SmallVector<int64_t> rhsTile =
      bKMajor(leader) ? SmallVector<int64_t>{bn, 1} : SmallVector<int64_t>{1, bn};
  if (!tmaAddresses(lhs, {bm, 1}, program.getMesh(), numbering) ||
      !tmaAddresses(rhs, rhsTile, program.getMesh(), numbering))
    return std::nullopt;

  EnginePass pass;
  pass.matmuls.push_back(leader);
  // The products, and what the epilogue computes from them: every use of one must be the
  // epilogue's or the conversion.
  llvm::SmallPtrSet<Value, 8> inRegisters = {leader.getResult()};
  for (Operation *op = leader->getNextNode(); op; op = op->getNextNode()) {
    auto matmul = dyn_cast<MatmulOp>(op);
    if (matmul && sharesA(leader, matmul) && bn <= 128 && pass.matmuls.size() < 2) {
      pass.matmuls.push_back(matmul);
      inRegisters.insert(matmul.getResult());
      continue;
    }
    if (llvm::none_of(op->getOperands(), [&](Value v) { return inRegisters.contains(v); }))
      continue;
    if (auto convert = dyn_cast<ConvertOp>(op); convert && !pass.convert) {
      Type out = convert.getResult().getType().getElementType();
      if (!out.isBF16() && !out.isF16())
        return std::nullopt;
      pass.convert = convert;
      continue;
    }
    if (!isElementwise(op) || op->getResult(0).getType() != tile)
      return std::nullopt;
    for (Value operand : op->getOperands()) {
      if (inRegisters.contains(operand))
        continue;
      if (auto row = broadcastRow(operand, tile, program)) {
        for (Operation *made : *row)
          if (!llvm::is_contained(pass.epilogue, made))
            pass.epilogue.push_back(made);
        continue;
      }
      // A splat the epilogue alone uses is made in its layout.
      auto splat = operand.getDefiningOp<SplatOp>();
      if (!splat || splat->getBlock() != op->getBlock() ||
          !llvm::all_of(splat->getUsers(), [&](Operation *user) {
            return isElementwise(user) && user->getBlock() == op->getBlock();
          }))
        return std::nullopt;
      if (!llvm::is_contained(pass.epilogue, splat.getOperation()))
        pass.epilogue.push_back(splat);
    }
    pass.epilogue.push_back(op);
    inRegisters.insert(op->getResult(0));
  }
  if (!pass.convert || pass.matmuls.size() * bn > 256)
    return std::nullopt;
  // Nothing else may read a product or the epilogue's values: they are only in registers.
  for (Value value : inRegisters)
    for (Operation *user : value.getUsers())
      if (user != pass.convert && !llvm::is_contained(pass.epilogue, user))
        return std::nullopt;
  // Splats and broadcast rows used beside the epilogue, by elementwise ops outside it, are not its.
  for (Operation *op : pass.epilogue)
    if (isa<SplatOp, BroadcastOp>(op))
      for (Operation *user : op->getUsers())
        if (!llvm::is_contained(pass.epilogue, user))
          return std::nullopt;
  return pass;
}
