//===- PoolRoles.cpp - a reduction role that done CTAs join ---------------===//

#include "mk/Transforms/Passes.h"

namespace mlir::mk {
#define GEN_PASS_DEF_MKPOOLROLES
#include "mk/Transforms/Passes.h.inc"
} // namespace mlir::mk

using namespace mlir;
using namespace mlir::mk;

namespace {

/// Whether the other roles' CTAs can join `role`, claiming its tiles one by one: a reduction within
/// the node whose body is one grid walked whole, so that any CTA may take any of its positions.
/// (Not yet the reduction across nodes: decode's shapes on 2x1 hung on a GPU with it pooled, the
/// cause not yet isolated; docs/notes/controller.md v2.)
bool poolable(RoleOp role) {
  if (role.getKind() != RoleKind::intra_reduce)
    return false;
  Block &body = role.getBody().front();
  auto grid = dyn_cast<TileGridOp>(body.front());
  return llvm::hasSingleElement(body) && grid && !grid.getRowCounts() && !grid.getHolder();
}

struct PoolRolesPass : mk::impl::MkPoolRolesBase<PoolRolesPass> {
  void runOnOperation() override {
    auto roles = getOperation().getBodyBlock().getOps<RoleOp>();
    if (llvm::hasSingleElement(roles) || llvm::any_of(roles, [](RoleOp r) { return r.getPool(); }))
      return;
    for (RoleOp role : roles)
      if (poolable(role)) {
        role.setPool(true);
        return;
      }
  }
};

} // namespace
