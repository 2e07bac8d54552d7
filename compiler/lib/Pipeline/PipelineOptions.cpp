//===- PipelineOptions.cpp - the pipeline's options from text, checked ----===//

#include "mk/PipelineOptions.h"
#include "mk/Support/BoundedNumber.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"

namespace mlir::mk {

using llvm::SmallVector;
using llvm::StringRef;

std::optional<std::string> checkPipelineOptions(const PipelineOptions &options) {
  if (std::optional<std::string> error = checkSmCount(options.smCount))
    return error;
  return checkGemmOptions(options.gemmStages, options.gemmCluster);
}

std::optional<std::string> parsePipelineOptions(std::string_view text, PipelineOptions &options) {
  SmallVector<StringRef> items;
  StringRef(text.data(), text.size()).split(items, ';', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
  for (StringRef item : items) {
    auto [name, value] = item.trim().split('=');
    const auto malformed = [&](StringRef want) {
      return (name + "=" + value + ": not " + want).str();
    };
    if (name == "sm-split") {
      if (std::optional<std::string> error = SmSplit::parse(value, options.smSplit))
        return ("sm-split=" + value + ": " + *error).str();
    } else if (name == "gemm-tile-n" || name == "gemm-tile-m" || name == "gemm-k-splits" ||
               name == "gemm-stages" || name == "gemm-cluster") {
      int64_t &field = name == "gemm-tile-n"     ? options.gemmTileN
                       : name == "gemm-tile-m"   ? options.gemmTileM
                       : name == "gemm-k-splits" ? options.gemmKSplits
                       : name == "gemm-stages"   ? options.gemmStages
                                                 : options.gemmCluster;
      const std::optional<int64_t> parsed = mkc::parseBoundedInt(value, INT64_MIN, INT64_MAX);
      if (!parsed)
        return malformed("an integer");
      field = *parsed;
    } else if (name == "in-place-all-reduce" || name == "all-reduce-copy-engine" ||
               name == "recycle-ctas" || name == "one-shot-all-reduce") {
      if (value != "0" && value != "1")
        return malformed("0 or 1");
      if (name == "one-shot-all-reduce")
        options.oneShotAllReduce =
            value == "1" ? OneShotAllReduce::always : OneShotAllReduce::never;
      else
        (name == "in-place-all-reduce" ? options.inPlaceAllReduce
         : name == "recycle-ctas"      ? options.recycleCtas
                                       : options.allReduceCopyEngine) = value == "1";
    } else {
      return ("unknown compiler option '" + name +
              "' (known: sm-split, gemm-tile-n, gemm-tile-m, gemm-k-splits, gemm-stages, "
              "gemm-cluster, "
              "in-place-all-reduce, all-reduce-copy-engine, recycle-ctas, one-shot-all-reduce)")
          .str();
    }
  }
  return checkPipelineOptions(options);
}

} // namespace mlir::mk
