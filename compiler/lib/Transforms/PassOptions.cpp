//===- PassOptions.cpp - checks of the passes' options --------------------===//

#include "mk/Transforms/Passes.h"

namespace mlir::mk {

std::optional<std::string> checkOptionRange(StringRef name, int64_t value, int64_t min, int64_t max,
                                            const Twine &rule) {
  if (value >= min && value <= max)
    return std::nullopt;
  return (name + "=" + Twine(value) + ": " + rule).str();
}

std::optional<std::string> checkSmCount(int64_t smCount) {
  return checkOptionRange("sm-count", smCount, 1, kMaxSmCount,
                          "the persistent grid has 1 to " + Twine(kMaxSmCount) +
                              " CTAs, one per SM (an H200 has 132)");
}

std::optional<std::string> checkGemmOptions(int64_t stages, int64_t cluster) {
  if (stages != 0)
    if (std::optional<std::string> error = checkOptionRange(
            "gemm-stages", stages, 2, kMaxGemmStages,
            "the GEMM engine's ring has 2 to " + Twine(kMaxGemmStages) +
                " stages (the deepest fits shared memory only beside 128 x 64 tiles)"))
      return error;
  return checkOptionRange("gemm-cluster", cluster, 0, 2,
                          "the GEMM engine runs in clusters of 1 or 2 CTAs");
}

} // namespace mlir::mk
