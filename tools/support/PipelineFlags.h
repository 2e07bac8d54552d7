//===- PipelineFlags.h - the compiler's flags of mkc and mk-sim -*- C++ -*-===//
//
// The command-line flags that choose how a tile program is compiled (topology, rank, shapes, the
// SM split and the GEMM engine's choices), defined once for the tools that compile: mkc and
// mk-sim take them with the same names, values and checks.
//
//   cl::HideUnrelatedOptions({&toolCategory, &mkc::tools::pipelineCategory});
//   cl::ParseCommandLineOptions(argc, argv, "...");
//   std::optional<mlir::mk::PipelineOptions> options = mkc::tools::pipelineOptions("mk-sim");
//
//===----------------------------------------------------------------------===//

#ifndef MK_TOOLS_PIPELINEFLAGS_H
#define MK_TOOLS_PIPELINEFLAGS_H

#include "mk/Pipeline.h"

#include "llvm/Support/CommandLine.h"

#include <optional>

namespace mkc::tools {

extern llvm::cl::OptionCategory pipelineCategory;

/// The pipeline's options as the flags give them, checked: or nullopt, after printing
/// "TOOL: error: --FLAG=VALUE: why".
std::optional<mlir::mk::PipelineOptions> pipelineOptions(llvm::StringRef tool);

} // namespace mkc::tools

#endif // MK_TOOLS_PIPELINEFLAGS_H
