// RUN: mk-opt %s -split-input-file -verify-diagnostics -mk-partition-roles
// RUN: not mk-opt %s -split-input-file -mk-partition-roles="sm-count=0" 2>&1 | FileCheck %s --check-prefix=SM-COUNT
// RUN: not mk-opt %s -split-input-file -mk-partition-roles="sm-count=66 gpu-sm-count=64" 2>&1 | FileCheck %s --check-prefix=GPU-SM-COUNT

// What mk-partition-roles rejects.

// An sm-count that no GPU has, on every program.
// SM-COUNT: mk-partition-roles-invalid.mlir:[[# @LINE + 6]]:1: error: sm-count=0: the persistent grid has 1 to 1024 CTAs, one per SM (an H200 has 132)
// A grid of more CTAs than its GPU has SMs.
// GPU-SM-COUNT: mk-partition-roles-invalid.mlir:[[# @LINE + 4]]:1: error: gpu-sm-count is 64, fewer than the grid's sm-count 66

// A split that leaves a role without CTAs.
// expected-error @+1 {{the sm split gives no CTAs to role intra_reduce}}
mk.program @missing [] mesh <1x2> () attributes {mk.sm_split = {compute = 100}} {
  mk.role compute {
  }
  mk.role intra_reduce {
  }
}

// -----

// A split that needs more CTAs than the grid has.
// expected-error @+1 {{the sm split needs 140 CTAs, but the grid has 132}}
mk.program @too_many [] mesh <1x2> () attributes {mk.sm_split = {compute = 100, republish = 40}} {
  mk.role compute {
  }
  mk.role republish {
  }
}

// -----

// A program that was never expanded.
// expected-error @+1 {{@flat has no roles (run mk-expand-collectives first)}}
mk.program @flat [] mesh <1x2> () {
}

// -----

// A malformed split.
// expected-error @+1 {{sm split entry 'prefetch=4' is not ROLE=CTAS with a known role and CTAS >= 1}}
mk.program @malformed [] mesh <1x2> () attributes {mk.sm_split = {prefetch = 4}} {
  mk.role compute {
  }
}
