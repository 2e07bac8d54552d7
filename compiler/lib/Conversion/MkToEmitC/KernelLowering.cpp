//===- KernelLowering.cpp - a scheduled program as one EmitC function -----===//
//
// The kernel's entry: its tensors (the arguments, then the buffers) become mk::Tensor
// references of the launch, its flag arrays offsets into the flag region, its engine copies the
// manifest's list; then each role is lowered in turn, the CTAs the launch gives it (the split is a
// launch parameter: mk_kernel_args' roles), its branch the else of the one before.
//
//===----------------------------------------------------------------------===//

#include "mk/Conversion/MkToEmitC/EmitCBuilder.h"
#include "mk/Conversion/MkToEmitC/StructureLowering.h"
#include "mk/Conversion/MkToEmitC/TypeConverter.h"
#include "mk/Transforms/LoweringPlan.h"
#include "mk/abi.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::to_emitc;

namespace {

/// Makes each role's branch the else of the one before: a CTA takes one role, and so the paths of
/// a role's warpgroups, at the register counts their setmaxnreg gave them (240 and 24, or 232
/// and 40), meet only at the kernel's end. Where they met before the next role's branch, ptxas
/// compiled roles' code at far fewer registers than their setmaxnreg gives: two copy roles of MoE
/// at 1x1, which alone use 76 and 100 registers, at 37 and 168, and spilled.
void chainRoles(ArrayRef<scf::IfOp> branches) {
  for (size_t i = branches.size(); i-- > 1;) {
    scf::IfOp previous = branches[i - 1];
    Block *otherwise = &previous.getElseRegion().emplaceBlock();
    OpBuilder b = OpBuilder::atBlockEnd(otherwise);
    scf::YieldOp::create(b, previous.getLoc());
    // The role's condition and branch, with the roles after it already inside.
    for (Operation &op : llvm::make_early_inc_range(llvm::make_range(
             std::next(previous->getIterator()), std::next(branches[i]->getIterator()))))
      op.moveBefore(otherwise->getTerminator());
  }
}

} // namespace

FailureOr<emitc::FuncOp> StructureLowering::run() {
  MLIRContext *context = program.getContext();
  Location loc = program.getLoc();
  if (failed(checkLowerable(program)))
    return failure();
  layout.name = program.getSymName().str();
  layout.grid = *program.getGrid();
  SmallVector<RoleOp> roles = llvm::to_vector(program.getBodyBlock().getOps<RoleOp>());
  if (roles.size() > MK_MAX_ROLES)
    return program.emitError() << "has " << roles.size() << " roles, more than a kernel's manifest "
                               << "holds (" << MK_MAX_ROLES << ", MK_MAX_ROLES)";
  pooled = llvm::any_of(roles, [](RoleOp role) { return role.getPool(); });
  for (RoleOp role : roles)
    if (attentionEngineOf(role) && pooled)
      return role.emitOpError() << "runs the attention engine beside a pool role, which its CTAs "
                                   "cannot join (compile with recycle-ctas=false)";
  for (auto [index, role] : llvm::enumerate(roles)) {
    layout.split.roles.push_back({stringifyRoleKind(role.getKind()).str(),
                                  static_cast<int64_t>(role.getCtas().value_or(0))});
    if (role.getPool())
      layout.poolRole = index;
  }

  OpBuilder b(program);
  // __grid_constant__: read in place, never copied, even where indexed at run time.
  auto argsType = emitc::OpaqueType::get(context, "const __grid_constant__ mk_kernel_args");
  auto func = emitc::FuncOp::create(b, loc, program.getSymName(),
                                    FunctionType::get(context, {argsType}, {}));
  func.setSpecifiersAttr(
      b.getStrArrayAttr({"extern \"C\" __global__ __launch_bounds__(MK_CTA_THREADS, 1)"}));
  Block *entry = func.addEntryBlock();
  Value args = entry->getArgument(0);
  OpBuilder eb = OpBuilder::atBlockBegin(entry);

  // Tensors: the arguments, then the buffers, each an mk::Tensor of the launch.
  Block &body = program.getBodyBlock();
  SmallVector<Value> tensors(body.getArguments());
  for (BufferOp buffer : body.getOps<BufferOp>())
    tensors.push_back(buffer.getResult());
  if (tensors.size() > MK_MAX_TENSORS)
    return program.emitError() << "uses " << tensors.size()
                               << " tensors, more than a kernel can take (" << MK_MAX_TENSORS
                               << ", MK_MAX_TENSORS)";
  layout.arguments = body.getNumArguments();
  // What a rank holds of a tensor: an argument, the shard of the rank compiled for (the largest
  // where the rank is open); a buffer, the largest shard, the same on every rank (symmetric).
  std::optional<int64_t> rank = program.getRank();
  auto heldExtent = [&](DistTensorType type, int64_t d, bool argument) {
    PlacementAttr placement = type.getPlacement();
    if (!argument || !rank || !placement.shardsDim(d))
      return type.getLocalExtent(d, mesh);
    int64_t along = placement.getAxis() == MeshAxis::world   ? *rank
                    : placement.getAxis() == MeshAxis::nodes ? *rank / mesh.getGpus()
                                                             : *rank % mesh.getGpus();
    return type.getShardSplit(d, mesh).extentOf(along);
  };
  for (auto [index, tensor] : llvm::enumerate(tensors)) {
    auto type = cast<DistTensorType>(tensor.getType());
    bool argument = index < body.getNumArguments();
    int64_t bytes = llvm::divideCeil(type.getElementType().getIntOrFloatBitWidth(), 8);
    for (int64_t d = 0; d < type.getRank(); ++d)
      bytes *= heldExtent(type, d, argument);
    layout.tensorBytes.push_back(bytes);
    if (argument) {
      if (type.getRank() > MK_MAX_TENSOR_RANK)
        return emitError(tensor.getLoc())
               << "an argument of rank " << type.getRank() << ", more than a kernel's manifest "
               << "describes (" << MK_MAX_TENSOR_RANK << ", MK_MAX_TENSOR_RANK)";
      ArgumentType &described = layout.argumentTypes.emplace_back();
      described.element = type.getElementType();
      for (int64_t d = 0; d < type.getRank(); ++d)
        described.extents.push_back(heldExtent(type, d, /*argument=*/true));
    }
    std::string element = elementName(type.getElementType());
    if (element.empty())
      return program.emitError() << "has a tensor of " << type.getElementType()
                                 << ", which has no CUDA lowering yet";
    auto opaque = emitc::OpaqueType::get(context, "mk::Tensor<" + element + ">");
    Value ref =
        call(eb, loc, opaque, "mk::tensor", {args, std::to_string(index)}, {element}).getResult(0);
    auto cast = UnrealizedConversionCastOp::create(eb, loc, type, ref);
    tensor.replaceAllUsesWith(cast.getResult(0));
    layout.tensorIndex[cast.getResult(0)] = index;
  }
  for (BufferOp buffer : llvm::to_vector(body.getOps<BufferOp>()))
    buffer.erase();
  for (FlagsOp flags : llvm::to_vector(body.getOps<FlagsOp>())) {
    int64_t words = 1;
    for (int64_t extent : flags.getShape())
      words *= extent;
    layout.flagOffset[flags.getSymName()] = layout.flagWords;
    layout.flagShape[flags.getSymName()] = SmallVector<int64_t>(flags.getShape());
    layout.flagWords += words;
    flags.erase();
  }
  // The copies are the runtime's to issue: a list in the module.
  for (EngineCopyOp copy : llvm::to_vector(body.getOps<EngineCopyOp>())) {
    DistTensorType type = copy.getTensor().getType();
    int64_t tensor = layout.tensorIndex.lookup(copy.getTensor());
    int64_t element = type.getElementType().getIntOrFloatBitWidth() / 8;
    int64_t pitch = element * type.getLocalExtent(1, mesh);
    ArrayRef<int64_t> rows = copy.getRows(), cols = copy.getCols();
    layout.symmetricTensors |= 1u << tensor;
    layout.engineCopies.push_back(
        llvm::formatv(
            "{{{0}, {1}, {2}, {3}, {4}, {5}, {6}ull, {7}ull, {8}ull, {9}ull}", copy.getFrom(),
            copy.getTo(), tensor, layout.flagOffset.lookup(copy.getWait()) + copy.getWaitIndex(),
            copy.getCount(), layout.flagOffset.lookup(copy.getSignal()) + copy.getSignalIndex(),
            rows[0] * pitch + cols[0] * element, (cols[1] - cols[0]) * element, rows[1] - rows[0],
            pitch)
            .str());
    copy.erase();
  }

  // The epoch first; the copy engines read it after the kernel, which then leaves it alone. Where
  // waits count arrivals per CTA of a role, the roles' CTAs over the launches too, which the
  // kernel's last CTA moves on with the epoch.
  bool perCta = program
                    .walk([](WaitOp wait) {
                      return wait.getPerCtaOf() ? WalkResult::interrupt() : WalkResult::advance();
                    })
                    .wasInterrupted();
  if (perCta && !layout.engineCopies.empty())
    return program.emitError() << "waits for arrivals per CTA of a role beside copies by copy "
                                  "engines, whose epoch the kernel does not move on";
  call(eb, loc, {}, "mk::begin_launch",
       {args, layout.engineCopies.empty() ? "true" : "false",
        std::to_string(perCta ? roles.size() : 0)});
  Type sizeT = emitc::SizeTType::get(context);
  layout.cta = call(eb, loc, sizeT, "mk::cta", {}).getResult(0);
  layout.node = call(eb, loc, sizeT, "mk::node", {args}).getResult(0);
  layout.gpu = call(eb, loc, sizeT, "mk::gpu", {args}).getResult(0);
  Value cta = toIndex(eb, loc, layout.cta);
  entry->getOperations().splice(entry->end(), body.getOperations());
  OpBuilder tail = OpBuilder::atBlockEnd(entry);
  emitc::ReturnOp::create(tail, loc, Value());
  SmallVector<scf::IfOp> branches;
  for (auto [index, role] : llvm::enumerate(llvm::to_vector(func.getBody().getOps<RoleOp>()))) {
    // The pool's code comes last, run by every CTA once its own role's is done.
    if (role.getPool()) {
      role->moveBefore(func.getBody().front().getTerminator());
      if (failed(lowerRole(role, cta, static_cast<int64_t>(index))))
        return failure();
      continue;
    }
    // The role's branch takes its place.
    Operation *next = role->getNextNode();
    if (failed(lowerRole(role, cta, static_cast<int64_t>(index))))
      return failure();
    branches.push_back(cast<scf::IfOp>(next->getPrevNode()));
  }
  chainRoles(branches);
  if (layout.cluster > 1)
    func.setSpecifiersAttr(eb.getStrArrayAttr(
        {"extern \"C\" __global__ __launch_bounds__(MK_CTA_THREADS, 1) __cluster_dims__(" +
         std::to_string(layout.cluster) + ", 1, 1)"}));
  // Only the engine combines as it stores (mk-plan-lowering marks its stores).
  WalkResult uncombinable = func.walk([](PutOp put) {
    if (put.getCombine() &&
        !(loweringOf(put) == Lowering::store && put.getDest().getType().getRank() == 2)) {
      put.emitOpError() << "combines into its destination, which mkc lowers only from the GEMM "
                           "engine's epilogue into a rank-2 tensor";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (uncombinable.wasInterrupted())
    return failure();
  program.erase();
  return func;
}
