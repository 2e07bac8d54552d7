//===- Passes.h - the mkc compiler passes -------------------------*- C++ -*-===//

#ifndef MK_TRANSFORMS_PASSES_H
#define MK_TRANSFORMS_PASSES_H

#include "mk/IR/MkOps.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Pass/Pass.h"

#include <optional>
#include <string>

namespace mlir::mk {

/// "NAME=VALUE: RULE" where `value` lies outside [min, max], else nothing: the check of every
/// bounded integer option, which the passes report on the program and checkPipelineOptions
/// (mk/Pipeline.h) as a flag error.
std::optional<std::string> checkOptionRange(StringRef name, int64_t value, int64_t min,
                                            int64_t max, const Twine &rule);

/// The most CTAs a persistent grid has: one per SM, with room to spare above every GPU so far
/// (an H200 has 132 SMs, a B200 148).
constexpr int64_t kMaxSmCount = 1024;

/// What is wrong with sm-count=`smCount` (mk-tile-and-order, mk-partition-roles), if anything.
std::optional<std::string> checkSmCount(int64_t smCount);

#define GEN_PASS_DECL
#include "mk/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mk/Transforms/Passes.h.inc"

} // namespace mlir::mk

#endif // MK_TRANSFORMS_PASSES_H
