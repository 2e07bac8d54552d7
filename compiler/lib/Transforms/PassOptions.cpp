//===- PassOptions.cpp - checks of the passes' options --------------------===//

#include "mk/Transforms/Passes.h"

namespace mlir::mk {

std::optional<std::string> checkOptionRange(StringRef name, int64_t value, int64_t min,
                                            int64_t max, const Twine &rule) {
  if (value >= min && value <= max)
    return std::nullopt;
  return (name + "=" + Twine(value) + ": " + rule).str();
}

std::optional<std::string> checkSmCount(int64_t smCount) {
  return checkOptionRange("sm-count", smCount, 1, kMaxSmCount,
                          "the persistent grid has 1 to " + Twine(kMaxSmCount) +
                              " CTAs, one per SM (an H200 has 132)");
}

} // namespace mlir::mk
