//===- StructureLowering.h - a program's structure as one kernel -*- C++ -*-===//
//
// Before the op patterns run, a scheduled program's structure is lowered in place, into one
// EmitC function: its tensors become the launch's mk::Tensor references and its flag arrays
// offsets into the flag region (KernelLowering.cpp); each role a branch on the CTA index, running
// the GEMM or attention engine's producer and consumers or the tile library's team as
// mk-plan-lowering decided (RoleLowering.cpp); each tile grid a loop over its tiles in the chosen
// order, strided over the role's CTAs, or, in the pool role, claimed one at a time by every CTA as
// its own role's work is done (TileGridLowering.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef MK_CONVERSION_MKTOEMITC_STRUCTURELOWERING_H
#define MK_CONVERSION_MKTOEMITC_STRUCTURELOWERING_H

#include "mk/Conversion/MkToEmitC/KernelLayout.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::mk::to_emitc {

class StructureLowering {
public:
  StructureLowering(ProgramOp program, KernelLayout &layout)
      : program(program), layout(layout), mesh(program.getMesh()) {}

  /// Moves the program into an EmitC function and lowers its structure; erases the program.
  FailureOr<emitc::FuncOp> run();

private:
  /// Role `index` (the manifest's order) as a branch on `cta`: the CTAs [first, first + ctas)
  /// that the launch's mk_kernel_args give it, whatever the split.
  LogicalResult lowerRole(RoleOp role, Value cta, int64_t index);
  /// Splits an engine role's block after `engine` (the engine's construction) into a branch on
  /// `isProducer` (a device-library predicate): the role's ops become the consumers' (else) and a
  /// copy of them the producer's (then), for the caller to prune. Returns the two blocks.
  std::pair<Block *, Block *> splitProducer(Block *role, Operation *engine, StringRef isProducer);
  /// Starts an engine's producer block with `begin(engine)` and runs the rest of it in the one
  /// thread `loader` (a device-library predicate) picks, which waits, walks the tiles and loads:
  /// the producer's other threads would read what its waits order (row counts) too early.
  static void beginProducer(Block *producer, Value engine, StringRef begin, StringRef loader);
  /// Ends `team`'s block (a team's, or an engine's consumers') with mk::await_proxy_reads if it
  /// copies to other nodes: a launch must not end while the proxy still reads what its copies
  /// send, which the caller's next writes may change (mk/queue.h, Release).
  static void awaitProxyReads(Block *team);
  /// Splits a role's CTAs into the GEMM engine's producer and consumers.
  LogicalResult lowerEngineRole(scf::IfOp branch, GemmEngineAttr engine);
  /// Splits a role's `ctas` CTAs into the attention engine's producer and consumers.
  LogicalResult lowerAttentionRole(scf::IfOp branch, AttentionEngineAttr engine, Value ctas);
  /// Runs a role on the tile library's team, with its TMA reduction and bulk copies if any.
  LogicalResult lowerTeamRole(scf::IfOp branch);
  /// The grid as a loop over its tiles, from `roleCta` in steps of the role's `ctas`; the pool's
  /// (null `ctas`) over the positions the team claims (mk::claim).
  /// A grid whose matmul splits K walks each tile as that many parts (KernelLayout::splitPart), a
  /// cluster's `cluster` CTAs the same part of their tiles.
  LogicalResult lowerGrid(TileGridOp grid, Value roleCta, Value ctas, int64_t cluster);

  ProgramOp program;
  KernelLayout &layout;
  MeshAttr mesh;
  /// Whether a role is the program's pool, which every CTA joins when done with its own role's:
  /// the other roles' CTAs leave theirs with the registers split evenly again.
  bool pooled = false;
};

} // namespace mlir::mk::to_emitc

#endif // MK_CONVERSION_MKTOEMITC_STRUCTURELOWERING_H
