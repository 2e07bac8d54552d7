//===- PipelineOptions.h - what the pipeline is asked to do, without MLIR -*- C++ -*-===//
//
// The options of the pass pipeline (mk/Pipeline.h) as mkc's flags, the runtime's JIT and its
// callers set them. Free of MLIR and LLVM headers, as mk/Transforms/PassOptions.h is: the
// runtime's public headers include it.
//
//   PipelineOptions options;
//   options.topology = "2x4";
//   if (std::optional<std::string> error = parsePipelineOptions("gemm-stages=3", options))
//     fail(*error);                      // "gemm-stages=9: the GEMM engine's ring has ..."
//
//===----------------------------------------------------------------------===//

#ifndef MK_PIPELINEOPTIONS_H
#define MK_PIPELINEOPTIONS_H

#include "mk/Transforms/PassOptions.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlir::mk {

struct PipelineOptions {
  /// NODESxGPUS; empty keeps the program's own mesh.
  std::string topology;
  /// The rank compiled for, or -1 for any.
  int64_t rank = -1;
  /// NAME=VALUE shape bindings.
  std::vector<std::string> shapes;
  /// CTAs per role overriding the cost model; empty lets it choose.
  SmSplit smSplit;
  /// CTAs of the persistent grid.
  int64_t smCount = 132;
  /// SMs of the whole GPU, whose compute rate the cost model divides among them (0: smCount);
  /// more than smCount where the grid has a share of the GPU (MPS).
  int64_t gpuSmCount = 0;
  /// Columns of the GEMM engine's matmul tiles (0: chosen per shape, see mk-tile-and-order).
  int64_t gemmTileN = 0;
  /// Rows of the GEMM engine's matmul tiles (0: chosen per shape, see mk-tile-and-order).
  int64_t gemmTileM = 0;
  /// Parts the GEMM engine splits each tile's K in (1: none; 0: chosen per shape, see
  /// mk-tile-and-order, not the default until its choices are measured on a GPU).
  int64_t gemmKSplits = 1;
  /// Report the SM split as a remark.
  bool explainSplit = false;
  /// All-reduce in place where mk-expand-collectives can; an SM split that gives CTAs to an
  /// `intra_reduce` role asks for that role instead.
  bool inPlaceAllReduce = true;
  /// In the in-place all-reduce, copy engines move the tiles between the GPUs.
  bool allReduceCopyEngine = false;
  /// CTAs whose role's work is done join a reduction role's tiles (mk-partition-roles' pool).
  bool recycleCtas = true;
  /// Whether an all-reduce within a node that does not run in place goes in one shot (every GPU
  /// gets every partial and sums every tile): the cost model's choice unless forced.
  OneShotAllReduce oneShotAllReduce = OneShotAllReduce::costModel;
  /// Depth of the GEMM engine's ring (0: the deepest that fits the tile).
  int64_t gemmStages = 0;
  /// CTAs per cluster of the GEMM engine (0: 2 where they pair up, else 1).
  int64_t gemmCluster = 0;
};

/// What is wrong with the values of `options` that the passes would reject later, less clearly,
/// as "NAME=VALUE: why" with mkc's flag names; nothing if they are fine.
std::optional<std::string> checkPipelineOptions(const PipelineOptions &options);

/// Sets the options `text` names: `;`-separated NAME=VALUE, the names and values of mkc's flags
/// (sm-split=ROLE=CTAS,..., gemm-tile-n, gemm-tile-m, gemm-k-splits, gemm-stages, gemm-cluster,
/// in-place-all-reduce=0|1, all-reduce-copy-engine=0|1, recycle-ctas=0|1, one-shot-all-reduce=0|1
/// (absent: the cost model's choice)), which is how the runtime's callers override the compiler's
/// choices. Returns what is wrong, naming the option, if anything (checkPipelineOptions included).
std::optional<std::string> parsePipelineOptions(std::string_view text, PipelineOptions &options);

} // namespace mlir::mk

#endif // MK_PIPELINEOPTIONS_H
