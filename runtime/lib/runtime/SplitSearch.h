//===- runtime/SplitSearch.h - a fused op's SM split, chosen from its launches' times -*- C++
//-*-===//
//
// The SM-partition controller's search (issue 28; docs/notes/controller.md). A kernel's roles share
// its grid, and the split is a launch parameter (mk_kernel_args::roles), so the controller can try
// splits on the launches an application makes anyway: every one still computes the right result.
// It starts from the compiler's split (the cost model's), then scales the CTAs of every role but
// the first (compute keeps the rest of the grid) down by 2, 4 and 8, then, unless that gained, up
// by 2, 4 and 8, in whole clusters. A direction goes a step further only where the last gained,
// and a step never leaves a role fewer than half its CTAs in that last split: a role's time grows
// at most as its CTAs shrink, so no candidate is much slower than twice the compiler's split. The
// pool (mk-pool-roles: every CTA joins it once done with its own role) has no floor, down to one
// cluster: the CTAs it gives up still do its work once theirs is done. Each
// candidate is timed on kLaunchesPerCandidate launches, the best of them counting, as the slowest
// rank took it (the caller gathers it, so every rank sees the same times and takes the same
// steps); one whose first launch took more than twice the best time gets no second; a direction
// stops at its first candidate no faster than the best so far, and the search settles on the
// fastest within 10 launches. Pure: the caller launches, times and agrees.
//
//   SplitSearch search(compiled, cluster);
//   while (!search.done()) { launch at search.current(); search.measured(slowestRankMs); }
//   keep search.best();
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_LIB_RUNTIME_SPLITSEARCH_H
#define MK_RUNTIME_LIB_RUNTIME_SPLITSEARCH_H

#include "mk/Transforms/PassOptions.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace mkc {

class SplitSearch {
public:
  static constexpr int kLaunchesPerCandidate = 2;

  /// A search from `compiled` (the kernel's split) for a kernel in clusters of `cluster` CTAs,
  /// whose role `pool`, if any, is the pool.
  SplitSearch(const mlir::mk::SmSplit &compiled, std::int64_t cluster,
              std::optional<std::size_t> pool = std::nullopt);

  /// Whether it has settled: best() is the answer.
  bool done() const { return done_; }
  /// The split the next launch takes while it searches.
  const mlir::mk::SmSplit &current() const { return candidate_; }
  /// The time of the latest launch at current(), its slowest rank's (milliseconds).
  void measured(double milliseconds);
  /// The fastest split timed so far (the compiler's until another beats it).
  const mlir::mk::SmSplit &best() const { return best_; }
  /// Its time, once timed.
  std::optional<double> bestTime() const { return bestTime_; }

private:
  /// The compiler's split with every role but the first scaled by `factor` (whole clusters, one
  /// at least; the first keeps the rest), if that differs from the splits tried, fits, and leaves
  /// every role but the pool half its CTAs in the best split or more.
  std::optional<mlir::mk::SmSplit> scaled(double factor) const;
  /// Moves on to the next candidate of the ladder, or settles.
  void advance();

  mlir::mk::SmSplit compiled_, best_, candidate_;
  std::int64_t cluster_;
  std::optional<std::size_t> pool_;
  std::optional<double> bestTime_;
  /// The candidate's best time over its launches so far, and how many.
  double candidateTime_ = 0;
  int candidateLaunches_ = 0;
  /// The ladder's position: each direction's factors, outward from the compiler's split.
  std::vector<std::vector<double>> directions_;
  std::size_t direction_ = 0, step_ = 0;
  std::vector<mlir::mk::SmSplit> tried_;
  bool done_ = false;
};

} // namespace mkc

#endif // MK_RUNTIME_LIB_RUNTIME_SPLITSEARCH_H
