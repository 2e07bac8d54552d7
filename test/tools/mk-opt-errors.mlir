// mk-opt answers malformed input with a located error and exit status 1, never a crash (`not`
// fails on a crash).

// RUN: split-file %s %t

// A library program cut off in the middle.
// RUN: head -c 700 %mkc_lib/gemm_allreduce.mlir > %t/truncated.mlir
// RUN: not mk-opt %t/truncated.mlir 2>&1 | FileCheck %s --check-prefix=TRUNCATED
// TRUNCATED: truncated.mlir:{{[0-9]+}}:{{[0-9]+}}: error:

// RUN: not mk-opt %t/unknown_op.mlir 2>&1 | FileCheck %s --check-prefix=UNKNOWN-OP
// UNKNOWN-OP: unknown_op.mlir:3:3: error: custom op 'mk.gemm_allreduce' is unknown

// RUN: not mk-opt %t/wrong_types.mlir 2>&1 | FileCheck %s --check-prefix=WRONG-TYPES
// WRONG-TYPES: wrong_types.mlir:4:8: error: 'mk.matmul' op needs float operands of one dtype, got 'i32' and 'i32'

// RUN: not mk-opt %t/not_mlir.mlir 2>&1 | FileCheck %s --check-prefix=NOT-MLIR
// NOT-MLIR: not_mlir.mlir:1:9: error: expected '=' in attribute alias definition

// RUN: not mk-opt %t/does-not-exist.mlir 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: cannot open input file '{{.*}}does-not-exist.mlir': No such file or directory

// Input that is not a tile program's file, refused before it is read: a device that never ends,
// a FIFO without a writer (stat, not opened: the open would wait for one), a directory, a file
// past 64 MiB (sparse); and standard input past 64 MiB, read up to the bound.
// RUN: rm -rf %t/io && mkdir -p %t/io/dir && mkfifo %t/io/fifo && truncate -s 65M %t/io/big.mlir
// RUN: not mk-opt /dev/zero 2>&1 | FileCheck %s --check-prefix=DEVICE
// DEVICE: mk-opt: error: /dev/zero is a character device, not a regular file; mk-opt reads tile programs from files, or from standard input as -
// RUN: not mk-opt %t/io/fifo 2>&1 | FileCheck %s --check-prefix=FIFO
// FIFO: mk-opt: error: {{.*}}fifo is a FIFO, not a regular file
// RUN: not mk-opt %t/io/dir 2>&1 | FileCheck %s --check-prefix=DIRECTORY
// DIRECTORY: mk-opt: error: {{.*}}dir is a directory, not a regular file
// RUN: not mk-opt %t/io/big.mlir 2>&1 | FileCheck %s --check-prefix=BIG
// BIG: mk-opt: error: {{.*}}big.mlir is 68157440 bytes; mk-opt reads tile programs of at most 64 MiB
// RUN: not mk-opt - < /dev/zero 2>&1 | FileCheck %s --check-prefix=STDIN
// STDIN: mk-opt: error: standard input is longer than 64 MiB; mk-opt reads tile programs of at most 64 MiB

// A write that fails names the file, and is no LLVM ERROR.
// RUN: not mk-opt %mkc_lib/gemm_allreduce.mlir -o /dev/full 2>&1 | FileCheck %s --check-prefix=FULL --implicit-check-not="LLVM ERROR"
// FULL: mk-opt: error: cannot write /dev/full: No space left on device

//--- unknown_op.mlir
// No op names a whole fused kernel.
mk.program @p [M] mesh <?x?> (%a: !mk.tensor<[M, M], bf16, replicated>) {
  mk.gemm_allreduce %a : !mk.tensor<[M, M], bf16, replicated>
}

//--- wrong_types.mlir
!T = !mk.tensor<[M, M], i32, replicated>
mk.program @p [M] mesh <?x?> (%a: !T) {
  %i = arith.constant 0 : index
  %t = mk.matmul %a[%i, :], %a[:, %i] : !T, !T -> !mk.tile<[128, 128], f32>
}

//--- not_mlir.mlir
#include <cuda.h>
__global__ void kernel() {}
