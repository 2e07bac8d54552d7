//===- PipelineFlags.cpp - the compiler's flags of mkc and mk-sim ---------===//

#include "PipelineFlags.h"

#include "mk/Support/BoundedNumber.h"

namespace cl = llvm::cl;

llvm::cl::OptionCategory mkc::tools::pipelineCategory("compiler options");

namespace {

using mkc::tools::pipelineCategory;

cl::opt<std::string> topology("topology", cl::desc("Nodes x GPUs per node, e.g. 2x4"),
                              cl::value_desc("NODESxGPUS"), cl::cat(pipelineCategory));
cl::opt<int64_t> rank("rank", cl::desc("Rank to compile for, 0 to WORLD-1 (default: any)"),
                      cl::init(-1), cl::cat(pipelineCategory));
cl::list<std::string> shapes("shape", cl::desc("Shape symbol bindings, e.g. M=8192,N=8192"),
                             cl::value_desc("NAME=V,..."), cl::CommaSeparated,
                             cl::cat(pipelineCategory));
// The diagnostics of an unbound symbol say "give shapes=...", as Python and mk-opt spell it.
cl::alias shapesAlias("shapes", cl::desc("Alias for --shape"), cl::aliasopt(shapes),
                      cl::CommaSeparated, cl::cat(pipelineCategory));
cl::opt<std::string> smSplit("sm-split", cl::desc("CTAs per role instead of the cost model"),
                             cl::value_desc("ROLE=CTAS,..."), cl::cat(pipelineCategory));
cl::opt<int64_t> smCount("sm-count",
                         cl::desc("CTAs of the persistent grid, 1 to 1024 (one per SM)"),
                         cl::init(132), cl::cat(pipelineCategory));
cl::opt<int64_t> gpuSmCount("gpu-sm-count",
                            cl::desc("SMs of the whole GPU, whose compute rate the cost model "
                                     "shares among them (default: --sm-count); more where the "
                                     "grid has a share of the GPU (MPS)"),
                            cl::init(0), cl::cat(pipelineCategory));
cl::opt<bool> explainSplit("explain-sm-split", cl::desc("Explain the SM split chosen"),
                           cl::cat(pipelineCategory));
cl::opt<bool> inPlaceAllReduce("in-place-all-reduce",
                               cl::desc("All-reduce in place on one node of two GPUs, in the "
                                        "compute role (default; =false keeps a reduce role)"),
                               cl::init(true), cl::cat(pipelineCategory));
cl::opt<bool> recycleCtas("recycle-ctas",
                          cl::desc("CTAs whose role's work is done join a reduction role's tiles "
                                   "(default; =false keeps every CTA to its role)"),
                          cl::init(true), cl::cat(pipelineCategory));
cl::opt<bool> allReduceCopyEngine("all-reduce-copy-engine",
                                  cl::desc("In the in-place all-reduce, move the tiles between "
                                           "the GPUs with copy engines, not the SMs"),
                                  cl::cat(pipelineCategory));
cl::opt<cl::boolOrDefault>
    oneShotAllReduce("one-shot-all-reduce",
                     cl::desc("All-reduce within a node in one shot where it does not run in "
                              "place: every GPU gets every partial and sums every tile (default: "
                              "where the cost model finds it faster; =false: never)"),
                     cl::cat(pipelineCategory));
cl::opt<int64_t> gemmTileN("gemm-tile-n",
                           cl::desc("Columns of the GEMM engine's matmul tiles, 64, 128 or 256 "
                                    "(default: chosen per shape)"),
                           cl::init(0), cl::cat(pipelineCategory));
cl::opt<int64_t> gemmTileM("gemm-tile-m",
                           cl::desc("Rows of the GEMM engine's matmul tiles, 64 or 128 (default: "
                                    "chosen per shape)"),
                           cl::init(0), cl::cat(pipelineCategory));
cl::opt<int64_t> gemmKSplits("gemm-k-splits",
                             cl::desc("Parts the GEMM engine splits each tile's K in, 1 to 8, "
                                      "summed in a fixed order (default 1: none; 0: as the cost "
                                      "model chooses per shape)"),
                             cl::init(1), cl::cat(pipelineCategory));
cl::opt<int64_t> gemmStages("gemm-stages",
                            cl::desc("Depth of the GEMM engine's ring of K slices, 2 to 8 "
                                     "(default: the deepest that fits the tile)"),
                            cl::init(0), cl::cat(pipelineCategory));
cl::opt<int64_t> gemmCluster("gemm-cluster",
                             cl::desc("CTAs per cluster of the GEMM engine, sharing B through TMA "
                                      "multicast: 1 or 2 (default: 2 where they pair up)"),
                             cl::init(0), cl::cat(pipelineCategory));

} // namespace

std::optional<mlir::mk::PipelineOptions> mkc::tools::pipelineOptions(llvm::StringRef tool) {
  if (!topology.empty()) {
    auto [nodes, gpus] = llvm::StringRef(topology).split('x');
    if (!mkc::parseBoundedInt(nodes, 1, INT64_MAX) || !mkc::parseBoundedInt(gpus, 1, INT64_MAX)) {
      llvm::errs() << tool << ": error: --topology=" << topology
                   << " is not NODESxGPUS with both at least 1, e.g. 2x4\n";
      return std::nullopt;
    }
  }
  // -1, the default, leaves the rank open; mk-specialize checks a rank against the topology.
  if (rank.getNumOccurrences() && rank < 0) {
    llvm::errs() << tool << ": error: --rank=" << rank
                 << ": ranks count from 0; leave --rank out to compile for any rank\n";
    return std::nullopt;
  }
  mlir::mk::PipelineOptions options;
  options.topology = topology;
  options.rank = rank;
  options.shapes.assign(shapes.begin(), shapes.end());
  if (std::optional<std::string> error = mlir::mk::SmSplit::parse(smSplit, options.smSplit)) {
    llvm::errs() << tool << ": error: --sm-split=" << smSplit << ": " << *error << "\n";
    return std::nullopt;
  }
  options.smCount = smCount;
  options.gpuSmCount = gpuSmCount;
  options.gemmTileN = gemmTileN;
  options.gemmTileM = gemmTileM;
  options.gemmKSplits = gemmKSplits;
  options.explainSplit = explainSplit;
  options.inPlaceAllReduce = inPlaceAllReduce;
  options.allReduceCopyEngine = allReduceCopyEngine;
  options.recycleCtas = recycleCtas;
  using mlir::mk::OneShotAllReduce;
  options.oneShotAllReduce = oneShotAllReduce == cl::BOU_TRUE    ? OneShotAllReduce::always
                             : oneShotAllReduce == cl::BOU_FALSE ? OneShotAllReduce::never
                                                                 : OneShotAllReduce::costModel;
  options.gemmStages = gemmStages;
  options.gemmCluster = gemmCluster;
  if (std::optional<std::string> error = mlir::mk::checkPipelineOptions(options)) {
    llvm::errs() << tool << ": error: --" << *error << "\n";
    return std::nullopt;
  }
  return options;
}
