//===- SplitSearchTest.cpp - the SM split chosen from launches' times ------===//

#include "runtime/SplitSearch.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <optional>

using mkc::SplitSearch;
using mlir::mk::SmSplit;

namespace {

SmSplit split(std::int64_t compute, std::int64_t reduce) {
  return SmSplit{{{"compute", compute}, {"intra_reduce", reduce}}};
}

struct Run {
  SmSplit settled;
  int launches = 0;
  double worst = 0; // the slowest launch while searching
};

/// The search driven to its end by `time` (the slowest rank's milliseconds at a split), as a
/// runtime's launches would.
Run search(const SmSplit &compiled, std::int64_t cluster,
           const std::function<double(const SmSplit &)> &time,
           std::optional<std::size_t> pool = std::nullopt) {
  SplitSearch search(compiled, cluster, pool);
  Run run;
  while (!search.done() && run.launches < 100) {
    const SmSplit &at = search.current();
    CHECK_FALSE(at.checkLaunch(compiled, cluster));
    const double ms = time(at);
    run.worst = std::max(run.worst, ms);
    search.measured(ms);
    ++run.launches;
  }
  run.settled = search.best();
  return run;
}

/// A GEMM+AR-like op whose reduce role is best at `best` CTAs: each CTA off it costs time, the
/// farther the more.
std::function<double(const SmSplit &)> bestAt(std::int64_t best) {
  return [best](const SmSplit &at) {
    const double reduce = static_cast<double>(at.roles[1].ctas);
    return 1.0 + 0.1 * std::abs(std::log2(reduce / static_cast<double>(best)));
  };
}

} // namespace

TEST_CASE("the search settles on the best split within 10 launches", "[controller]") {
  const SmSplit compiled = split(120, 12);
  SECTION("fewer reduce CTAs, halving while it gains") {
    Run run = search(compiled, 1, bestAt(3));
    CHECK(run.settled == split(129, 3));
    CHECK(run.launches <= 10);
  }
  SECTION("more") {
    Run run = search(compiled, 1, bestAt(48));
    CHECK(run.settled == split(84, 48));
    CHECK(run.launches <= 10);
  }
  SECTION("the compiler's") {
    Run run = search(compiled, 1, bestAt(12));
    CHECK(run.settled == compiled);
    // One step each way, then settled: 3 candidates, 2 launches each.
    CHECK(run.launches == 3 * SplitSearch::kLaunchesPerCandidate);
  }
}

TEST_CASE("a pool role goes on down to one cluster, within 10 launches", "[controller]") {
  // GEMM+AR with recycling, ranks at once on an H100 (notes/controller.md v3): the fewer CTAs of
  // its own the reduction pool keeps, the faster.
  const auto fewerFaster = [](const SmSplit &at) { return 1.0 + 0.01 * at.roles[1].ctas; };
  Run pooled = search(split(46, 10), 1, fewerFaster, 1);
  CHECK(pooled.settled == split(55, 1));
  CHECK(pooled.launches <= 10);
  Run clustered = search(split(44, 12), 2, fewerFaster, 1);
  CHECK(clustered.settled == split(54, 2));
  CHECK(clustered.launches <= 10);
  // Without a pool, a step keeps half the CTAs of the last (10, 5, 3): never 1 from 3.
  CHECK(search(split(46, 10), 1, fewerFaster).settled == split(53, 3));
}

TEST_CASE("a role the cost model starves grows up to 8 times, within 10 launches", "[controller]") {
  // AG+GEMM's transfer role, ranks at once on an H100 (notes/controller.md v3): compiled at one
  // CTA, best at 8.
  const auto transfer = [](const SmSplit &at) {
    const double ctas = static_cast<double>(at.roles[1].ctas);
    return 1.0 / std::min(ctas, 8.0) + 0.01 * ctas;
  };
  Run run = search(split(52, 1), 1, transfer);
  CHECK(run.settled == split(45, 8));
  CHECK(run.launches <= 10);
}

TEST_CASE("the search never settles on a split slower than the compiler's", "[controller]") {
  // Noise: each launch of a split 5% slower or faster in turn; the compiler's split is best.
  int launch = 0;
  const auto noisy = [&](const SmSplit &at) {
    return bestAt(12)(at) * (launch++ % 2 ? 1.05 : 0.95);
  };
  Run run = search(split(120, 12), 1, noisy);
  CHECK(run.settled == split(120, 12));
}

TEST_CASE("exploring stays under twice the compiler's time where time grows away from it",
          "[controller]") {
  // Each role's time its work over its CTAs, the launch's the slower role's: the compiler gave
  // the reduce role 4 times what it needs, and the search halves it while that gains, then stops
  // at the step that starves it, twice the time at most.
  const auto roles = [](const SmSplit &at) {
    return std::max(120.0 / static_cast<double>(at.roles[0].ctas),
                    3.0 / static_cast<double>(at.roles[1].ctas));
  };
  Run starved = search(split(116, 16), 1, roles);
  CHECK(starved.settled == split(128, 4));
  CHECK(starved.worst <= 2 * roles(split(116, 16)));
  // A reduce role starved below 6 CTAs is 3x slower: the search never takes a role below half its
  // compiled CTAs, so it never gets there.
  const auto cliff = [](const SmSplit &at) { return at.roles[1].ctas < 6 ? 3.0 : 1.0; };
  Run run = search(split(120, 12), 1, cliff);
  CHECK(run.settled == split(120, 12));
  CHECK(run.worst < 2.0);
  CHECK(run.launches <= 10);
  // Nor compute below half its CTAs: from 66 and 66, the reduce role may grow to 99 at most.
  const auto slowCompute = [](const SmSplit &at) { return 66.0 / at.roles[0].ctas; };
  Run even = search(split(66, 66), 1, slowCompute);
  CHECK(even.worst <= 2.0);
  // A candidate over twice the best is launched once, not twice.
  const auto wall = [](const SmSplit &at) { return at.roles[1].ctas > 12 ? 5.0 : 1.0; };
  Run walled = search(split(120, 12), 1, wall);
  CHECK(walled.settled == split(120, 12));
  CHECK(walled.launches == 2 * SplitSearch::kLaunchesPerCandidate + 1);
}

TEST_CASE("a split in clusters keeps whole clusters, one op of one role has nothing to search",
          "[controller]") {
  SplitSearch clusters(split(124, 8), 2);
  while (!clusters.done()) {
    for (const SmSplit::Role &role : clusters.current().roles)
      CHECK(role.ctas % 2 == 0);
    clusters.measured(1.0);
  }
  SplitSearch alone(SmSplit{{{"compute", 132}}}, 1);
  CHECK(alone.done());
  CHECK(alone.best() == SmSplit{{{"compute", 132}}});
}
