//===- SmSplitTest.cpp - which splits a compiled kernel may be launched with ----===//

#include "mk/Transforms/PassOptions.h"

#include <catch2/catch.hpp>

using mlir::mk::SmSplit;

namespace {

SmSplit split(std::vector<SmSplit::Role> roles) { return SmSplit{std::move(roles)}; }

/// The message of launching `compiled`'s kernel as `asked` in clusters of `cluster`, or "".
std::string launchError(const SmSplit &asked, const SmSplit &compiled, int64_t cluster = 1) {
  return asked.checkLaunch(compiled, cluster).value_or("");
}

} // namespace

TEST_CASE("a kernel runs any split of its grid into its roles", "[split]") {
  SmSplit compiled = split({{"compute", 120}, {"intra_reduce", 12}});
  CHECK(launchError(compiled, compiled).empty());
  CHECK(launchError(split({{"compute", 131}, {"intra_reduce", 1}}), compiled).empty());
  CHECK(launchError(split({{"compute", 1}, {"intra_reduce", 131}}), compiled).empty());
  // Several roles of a kind (ring attention's two transfers) each take their own count.
  SmSplit ring = split({{"compute", 128}, {"intra_transfer", 2}, {"intra_transfer", 2}});
  CHECK(launchError(split({{"compute", 126}, {"intra_transfer", 1}, {"intra_transfer", 5}}), ring)
            .empty());
}

TEST_CASE("a split that a kernel cannot run says which rule it breaks", "[split]") {
  SmSplit compiled = split({{"compute", 120}, {"intra_reduce", 12}});
  CHECK(launchError(split({{"compute", 120}, {"intra_reduce", 13}}), compiled) ==
        "the split gives 133 CTAs; the kernel's grid is 132 (the compiler's split: "
        "compute=120,intra_reduce=12)");
  CHECK(launchError(split({{"compute", 132}, {"intra_reduce", 0}}), compiled) ==
        "role intra_reduce has 0 CTAs: every role needs one or more");
  CHECK(launchError(split({{"intra_reduce", 12}, {"compute", 120}}), compiled) ==
        "the kernel's roles are compute,intra_reduce, in that order; the split names "
        "intra_reduce,compute");
  CHECK(launchError(split({{"compute", 132}}), compiled) ==
        "the kernel's roles are compute,intra_reduce, in that order; the split names compute");
  CHECK(launchError(split({{"compute", 121}, {"intra_reduce", 11}}), compiled, 2) ==
        "role compute has 121 CTAs: the kernel runs in clusters of 2, whose CTAs are one role's, "
        "so every role's count is a multiple of it");
  CHECK(launchError(split({{"compute", 122}, {"intra_reduce", 10}}), compiled, 2).empty());
}
