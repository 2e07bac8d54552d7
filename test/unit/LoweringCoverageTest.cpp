// Every op of the dialect (the ODS-generated list) has a CUDA lowering: a pattern of
// mk-lower-to-emitc, a part of the kernel's structure the conversion lowers itself, a collective
// intent mk-expand-collectives rewrites into those, or a query mk-specialize answers with a
// constant. A new op fails here until it has one of the four.

#include "mk/Conversion/MkToEmitC/PatternMkToEmitC.h"
#include "mk/Conversion/MkToEmitC/TypeConverter.h"
#include "mk/IR/MkOps.h"

#include "mlir/IR/MLIRContext.h"

#include <catch2/catch.hpp>

#include <set>
#include <string>

using namespace mlir;
using namespace mlir::mk;

namespace {

template <typename... Ops> std::set<std::string> opNames() {
  return {Ops::getOperationName().str()...};
}

/// The ops the conversion's patterns rewrite.
std::set<std::string> patternRoots(MLIRContext &context) {
  to_emitc::MkToEmitCTypeConverter converter;
  to_emitc::KernelLayout layout;
  RewritePatternSet patterns(&context);
  to_emitc::populateMemoryOpToEmitCPatterns(converter, patterns, layout);
  to_emitc::populateComputeOpToEmitCPatterns(converter, patterns, layout);
  to_emitc::populateRoutingOpToEmitCPatterns(converter, patterns, layout);
  to_emitc::populateSyncOpToEmitCPatterns(converter, patterns, layout);
  std::set<std::string> roots;
  for (const std::unique_ptr<RewritePattern> &pattern : patterns.getNativePatterns())
    if (std::optional<OperationName> root = pattern->getRootKind())
      roots.insert(root->getStringRef().str());
  return roots;
}

} // namespace

TEST_CASE("every op of the dialect has a CUDA lowering", "[lowering]") {
  MLIRContext context;
  context.loadDialect<MkDialect>();
  const std::set<std::string> dialect = opNames<
#define GET_OP_LIST
#include "mk/IR/MkOps.cpp.inc"
      >();
  // What StructureLowering (KernelLowering, RoleLowering, TileGridLowering) turns into the
  // kernel's loops, branches, tensors and flags before the patterns run.
  const std::set<std::string> structure =
      opNames<ProgramOp, BufferOp, TileGridOp, RoleOp, SingleCtaOp, FlagsOp, EngineCopyOp>();
  // Collective intents, rewritten into the scheduled ops by mk-expand-collectives (mk.yield is
  // mk.ring_shift's terminator).
  const std::set<std::string> expanded = opNames<AllReduceOp, ReduceScatterOp, AllGatherOp,
                                                 RingShiftOp, YieldOp, DispatchOp, CombineOp>();
  // Shape symbols read as scalars, constants once bound.
  const std::set<std::string> specialized = opNames<ShapeSymbolOp>();
  const std::set<std::string> patterns = patternRoots(context);

  CHECK(dialect.size() > 40);
  for (const std::string &op : dialect) {
    INFO(op);
    int ways = int(patterns.count(op)) + int(structure.count(op)) + int(expanded.count(op)) +
               int(specialized.count(op));
    CHECK(ways == 1);
  }
  // And nothing is claimed for an op the dialect does not have.
  for (const std::set<std::string> *claimed : {&structure, &expanded, &specialized})
    for (const std::string &op : *claimed) {
      INFO(op);
      CHECK(dialect.count(op) == 1);
    }
}
