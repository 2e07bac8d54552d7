//===- KernelLayout.h - what the lowering of one program collects -*- C++ -*-===//
//
// The state one program's lowering builds as it goes and its patterns share: where each tensor
// and flag array is, the values computed once on entry, the per-role engines, and what the
// manifest tells the runtime (mk/abi.h's mk_kernel_manifest): shared memory, tensor bytes, tensor
// maps, engine copies, the SM split.
//
//===----------------------------------------------------------------------===//

#ifndef MK_CONVERSION_MKTOEMITC_KERNELLAYOUT_H
#define MK_CONVERSION_MKTOEMITC_KERNELLAYOUT_H

#include "mk/IR/MkOps.h"
#include "mk/Transforms/PassOptions.h"
#include "mk/Transforms/TileNumbering.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::mk::to_emitc {

/// The type of one argument, as the manifest describes it to the runtime.
struct ArgumentType {
  Type element;
  SmallVector<int64_t> extents;
};

/// What the lowering of one program decided, shared by its patterns.
struct KernelLayout {
  MeshAttr mesh;
  /// Where tile coordinates lie along each dim of the program's tensors.
  TileNumbering numbering;
  /// The mk-typed stand-in of each tensor (a cast of its mk::Tensor) and its index in the
  /// launch's tensors.
  DenseMap<Value, int64_t> tensorIndex;
  llvm::StringMap<int64_t> flagOffset;
  llvm::StringMap<SmallVector<int64_t>> flagShape;
  int64_t flagWords = 0;
  /// C++ expressions of the dynamic shared memory each call needs.
  std::vector<std::string> smemNeeds;
  /// This CTA's index and this rank's node and GPU (size_t), computed once on entry.
  Value cta, node, gpu;
  /// What the runtime must provide: the arguments, then the buffers it allocates, each with the
  /// bytes one rank holds; the tensors peers write or the network reads must be symmetric.
  int64_t arguments = 0;
  SmallVector<int64_t> tensorBytes;
  /// Each argument's element type and extents on one rank: the runtime checks what callers pass
  /// against them.
  SmallVector<ArgumentType> argumentTypes;
  uint32_t symmetricTensors = 0;
  /// The TMA tensor maps the kernel takes, as mk_tensor_map_spec initialisers (mk/abi.h).
  std::vector<std::string> tensorMaps;
  /// The copies copy engines make beside the kernel, as mk_engine_copy initialisers.
  std::vector<std::string> engineCopies;
  /// The experts the program's routing (mk.route_census) routes to (0: none),
  /// which it reports on.
  int64_t routedExperts = 0;
  /// The role (its index in `split`, whose CTAs a launch's mk_kernel_args names) of each op that
  /// shares its work among them (mk.route_rows, mk.route_pack).
  DenseMap<Operation *, int64_t> roleOf;
  /// The GEMM engine of each role that runs one (an mk::GemmEngine in the role's block) with its
  /// configuration, the TMA reduction of each role that has one (mk::TmaReduce), and
  /// the bulk-copy engine of each team that copies through it (mk::BulkCopier).
  SmallVector<Value> engines, reducers, bulkCopiers;
  /// The attention engine of each role that runs one (an mk::AttentionEngine).
  SmallVector<Value> attentionEngines;
  DenseMap<Value, GemmEngineAttr> engineConfigs;
  /// The part of its K a split-K matmul (k_splits) computes at its position of the grid's walk:
  /// an index the tile loop computes (also for the producer's copy of the loop).
  DenseMap<Operation *, Value> splitPart;
  /// The kernel's CTAs per cluster: the largest of its engines'.
  int64_t cluster = 1;
  /// The kernel's name, CTAs and their split into roles.
  std::string name;
  int64_t grid = 0;
  SmSplit split;
  /// The index in `split` of the pool role, if the kernel has one (MK_ROLE_POOL).
  std::optional<size_t> poolRole;

  /// The index of the map over tensor `index` (of `type`) held by this rank (no `gpu`) or by GPU
  /// `gpu` of the node, moving `box` (innermost first) through 128-byte swizzled shared memory.
  int64_t tensorMap(DistTensorType type, int64_t index, std::optional<int64_t> gpu,
                    ArrayRef<int64_t> box);

  /// The same over `extents` (innermost first) of `element`s: a view of the tensor's memory in
  /// other dims, as the attention engine's (D, rows, heads) of [B, H, S, D].
  int64_t tensorMap(int64_t index, std::optional<int64_t> gpu, Type element,
                    ArrayRef<int64_t> extents, ArrayRef<int64_t> box);

  /// The first of the maps over tensor `index` held by GPUs 0 .. gpus - 1 of the node, which are
  /// consecutive: the map of GPU g is that index + g.
  int64_t tensorMapsOfNode(DistTensorType type, int64_t index, ArrayRef<int64_t> box);
};

/// mk::GemmConfig's arguments for `engine`: element, tile columns, ring depth, B's layout,
/// staging buffers, cluster, A's rows.
std::string gemmConfigArguments(GemmEngineAttr engine);

} // namespace mlir::mk::to_emitc

#endif // MK_CONVERSION_MKTOEMITC_KERNELLAYOUT_H
