// What mk-specialize says of bad options.

// RUN: not mk-opt %s -mk-specialize="topology=0x4 shapes=M=64" 2>&1 | FileCheck %s --check-prefix=TOPOLOGY
// TOPOLOGY: error: topology '0x4' is not NODESxGPUS with both at least 1, e.g. 2x4

// RUN: not mk-opt %s -mk-specialize="topology=1x2 shapes=M:64" 2>&1 | FileCheck %s --check-prefix=BINDING
// BINDING: error: shape binding 'M:64' is not NAME=VALUE with a positive VALUE

// RUN: not mk-opt %s -mk-specialize="shapes=M=64" 2>&1 | FileCheck %s --check-prefix=UNBOUND
// UNBOUND: error: the topology of @p is not bound; give topology=NODESxGPUS

// RUN: not mk-opt %s -mk-specialize="topology=1x2 rank=2 shapes=M=64" 2>&1 | FileCheck %s --check-prefix=RANK
// RANK: error: rank 2 does not exist on topology 1x2
// RUN: not mk-opt %s -mk-specialize="topology=1x2 rank=-2 shapes=M=64" 2>&1 | FileCheck %s --check-prefix=NEGATIVE-RANK
// NEGATIVE-RANK: error: rank -2 does not exist on topology 1x2

mk.program @p [M] mesh <?x?> () {}
