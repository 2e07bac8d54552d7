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
std::optional<std::string> checkOptionRange(StringRef name, int64_t value, int64_t min, int64_t max,
                                            const Twine &rule);

/// The most CTAs a persistent grid has: one per SM, with room to spare above every GPU so far
/// (an H200 has 132 SMs, a B200 148).
constexpr int64_t kMaxSmCount = 1024;

/// What is wrong with sm-count=`smCount` (mk-tile-and-order, mk-partition-roles), if anything.
std::optional<std::string> checkSmCount(int64_t smCount);

/// The deepest ring of the GEMM engine: 8 stages of 64-deep K slices fit a CTA's 227 KiB of
/// shared memory beside the epilogue only with the narrowest tile, 128 x 64 (gemm_max_stages in
/// runtime/device/mk/device/impl/gemm_engine__funcs.cuh; 128 x 256 fits 4). Whether a ring fits
/// a wider tile is left to the engine's static_assert.
constexpr int64_t kMaxGemmStages = 8;

/// What is wrong with gemm-stages=`stages` and gemm-cluster=`cluster` (mk-lower-to-emitc), if
/// anything; 0 lets the lowering choose either.
std::optional<std::string> checkGemmOptions(int64_t stages, int64_t cluster);

#define GEN_PASS_DECL
#include "mk/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "mk/Transforms/Passes.h.inc"

} // namespace mlir::mk

#endif // MK_TRANSFORMS_PASSES_H
