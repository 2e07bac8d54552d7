//===- PassOptions.h - what callers set on the passes, without MLIR -*- C++ -*-===//
//
// The options that reach the passes from outside the compiler (mkc's flags, the runtime's
// "NAME=VALUE;..." string, Python through the C ABI) and their checks. Free of MLIR and LLVM
// headers on purpose: the runtime's public headers include it, and an application that embeds
// the runtime has no MLIR include path.
//
// The SM split has one representation (SmSplit: role kinds and CTAs), one parser
// (SmSplit::parse) and one printer (SmSplit::str), shared by mkc's --sm-split, the runtime's
// sm-split= option, mk-partition-roles' option and a compiled kernel's manifest:
//
//   SmSplit split;
//   if (std::optional<std::string> error = SmSplit::parse("compute=120,intra_reduce=12", split))
//     fail(*error);                      // "sm split entry 'x=1' is not ROLE=CTAS ..."
//   split.ctasOf("intra_reduce");        // 12
//   split.str();                         // "compute=120,intra_reduce=12"
//
//===----------------------------------------------------------------------===//

#ifndef MK_TRANSFORMS_PASSOPTIONS_H
#define MK_TRANSFORMS_PASSOPTIONS_H

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlir::mk {

/// The most CTAs a persistent grid has: one per SM, with room to spare above every GPU so far
/// (an H200 has 132 SMs, a B200 148).
constexpr int64_t kMaxSmCount = 1024;

/// What is wrong with sm-count=`smCount` (mk-tile-and-order, mk-partition-roles), if anything.
std::optional<std::string> checkSmCount(int64_t smCount);

/// The deepest ring of the GEMM engine a user asks for: 8 stages of 64-deep K slices fit a CTA's
/// 227 KiB of shared memory beside the epilogue only with the narrowest tile, 128 x 64
/// (gemm_max_stages in runtime/device/mk/device/impl/gemm_engine__funcs.cuh; 128 x 256 fits 4;
/// the engine's own choice goes to 12 where A's rows fit one warpgroup). Whether a ring fits a
/// wider tile is left to the engine's static_assert.
constexpr int64_t kMaxGemmStages = 8;

/// What is wrong with gemm-stages=`stages` and gemm-cluster=`cluster` (mk-plan-lowering), if
/// anything; 0 lets the planner choose either.
std::optional<std::string> checkGemmOptions(int64_t stages, int64_t cluster);

/// How mk-expand-collectives sends an all-reduce within a node that does not run in place: in
/// one shot (every GPU gets every partial) or in two hops (to the tile's owner, then from it),
/// chosen per all-reduce by its cost model of latency and bytes, or forced.
enum class OneShotAllReduce { costModel, always, never };

/// The CTAs each role of a persistent grid takes, in the order given.
struct SmSplit {
  struct Role {
    /// A role kind as mk.role spells it: compute, intra_reduce, inter_send, ...
    std::string kind;
    int64_t ctas = 0;
    bool operator==(const Role &) const = default;
  };
  std::vector<Role> roles;

  bool empty() const { return roles.empty(); }
  /// The CTAs the split gives role `kind`, if it names it.
  std::optional<int64_t> ctasOf(std::string_view kind) const;
  /// What is wrong with the first role that is not a known kind with at least one CTA; nothing
  /// if every role is fine. A kernel's own split (its manifest) may have several roles of a kind.
  std::optional<std::string> checkRoles() const;
  /// checkRoles, and that no kind is named twice: what a requested split must be, since it gives
  /// each role of a kind the CTAs it names for it.
  std::optional<std::string> check() const;
  /// What is wrong with launching a kernel compiled with split `compiled`, whose engine runs in
  /// clusters of `cluster` CTAs, with this split instead (mk_kernel_args' roles): the same roles
  /// in the same order, at least one CTA each, `compiled`'s grid in all, and, in clusters of 2,
  /// even counts (a cluster's two CTAs are one role's); nothing if it may run.
  std::optional<std::string> checkLaunch(const SmSplit &compiled, int64_t cluster) const;
  /// "ROLE=CTAS,..." in the split's order; empty for no split.
  std::string str() const;
  /// Parses "ROLE=CTAS,..." (empty: no split) into `split` and checks it; returns what is wrong,
  /// naming the entry, if anything.
  static std::optional<std::string> parse(std::string_view text, SmSplit &split);

  bool operator==(const SmSplit &) const = default;
};

} // namespace mlir::mk

#endif // MK_TRANSFORMS_PASSOPTIONS_H
