//===- runtime/SplitSearch.cpp - a fused op's SM split, chosen from its launches' times ---===//

#include "runtime/SplitSearch.h"

#include <algorithm>
#include <cmath>

namespace mkc {

using mlir::mk::SmSplit;

SplitSearch::SplitSearch(const SmSplit &compiled, std::int64_t cluster,
                         std::optional<std::size_t> pool)
    : compiled_(compiled), best_(compiled), candidate_(compiled),
      cluster_(std::max<std::int64_t>(cluster, 1)),
      pool_(pool), directions_{{0.5, 0.25, 0.125}, {2, 4, 8}}, tried_{compiled} {
  // One role has the whole grid: nothing to choose.
  done_ = compiled.roles.size() < 2;
}

std::optional<SmSplit> SplitSearch::scaled(double factor) const {
  SmSplit split = compiled_;
  std::int64_t grid = 0, others = 0;
  for (const SmSplit::Role &role : compiled_.roles)
    grid += role.ctas;
  for (std::size_t i = 1; i < split.roles.size(); ++i) {
    const auto clusters = static_cast<std::int64_t>(
        std::lround(static_cast<double>(compiled_.roles[i].ctas) * factor / cluster_));
    split.roles[i].ctas = std::max<std::int64_t>(clusters, 1) * cluster_;
    others += split.roles[i].ctas;
  }
  split.roles[0].ctas = grid - others;
  // The best split is the last step's, which gained (or the compiler's, at a direction's first):
  // halving a role from there at most doubles its time, which was within the compiler's time.
  for (std::size_t i = 0; i < split.roles.size(); ++i)
    if (i != pool_ && 2 * split.roles[i].ctas < best_.roles[i].ctas)
      return std::nullopt;
  if (split.checkLaunch(compiled_, cluster_) ||
      std::find(tried_.begin(), tried_.end(), split) != tried_.end())
    return std::nullopt;
  return split;
}

void SplitSearch::measured(double milliseconds) {
  if (done_)
    return;
  candidateTime_ = candidateLaunches_ == 0 ? milliseconds : std::min(candidateTime_, milliseconds);
  // A candidate far slower than the best gets no second launch.
  const bool hopeless = bestTime_ && milliseconds > 2 * *bestTime_;
  if (++candidateLaunches_ < kLaunchesPerCandidate && !hopeless)
    return;
  const bool first = !bestTime_, better = first || candidateTime_ < *bestTime_;
  if (better) {
    best_ = candidate_;
    bestTime_ = candidateTime_;
  }
  // Outward while it gains; the next direction from the compiler's split once it does not.
  if (!first && better) {
    ++step_;
  } else if (!first) {
    ++direction_;
    step_ = 0;
  }
  advance();
}

void SplitSearch::advance() {
  candidateTime_ = 0;
  candidateLaunches_ = 0;
  while (direction_ < directions_.size()) {
    // A direction that gained shows which side the best split lies on: the other is not tried.
    if (step_ == 0 && direction_ > 0 && best_ != compiled_)
      break;
    if (step_ < directions_[direction_].size())
      if (std::optional<SmSplit> next = scaled(directions_[direction_][step_])) {
        candidate_ = *next;
        tried_.push_back(*next);
        return;
      }
    // This direction has no further split that fits (or differs): the next one.
    ++direction_;
    step_ = 0;
  }
  done_ = true;
  candidate_ = best_;
}

} // namespace mkc
