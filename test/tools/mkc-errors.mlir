// mkc answers bad input and bad flags with a clear message and exit status 1, never a crash
// (`not` fails on a crash).

// RUN: split-file %s %t

// Malformed IR, located.
// RUN: not mkc %t/malformed.mlir --topology 1x2 --emit=mlir 2>&1 | FileCheck %s --check-prefix=MALFORMED
// MALFORMED: malformed.mlir:2:3: error: custom op 'mk.tile' is unknown

// A topology that is not NODESxGPUS with both at least 1.
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 0x4 --shape M=1024,N=1024,K=1024 2>&1 | FileCheck %s --check-prefix=TOPOLOGY
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 2by4 --shape M=1024,N=1024,K=1024 2>&1 | FileCheck %s --check-prefix=TOPOLOGY
// TOPOLOGY: mkc: error: --topology={{.*}} is not NODESxGPUS with both at least 1, e.g. 2x4
// A topology past the ABI's bounds (its world size once overflowed, and crashed the verifier).
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 4611686018427387904x4 --shape M=1024,N=1024,K=1024 --emit=mlir 2>&1 | FileCheck %s --check-prefix=MESH
// MESH: gemm_allreduce.mlir:7:1: error: a mesh has at most 8 GPUs per node, whose memory a kernel maps, and fewer than 2^32 ranks, got 4611686018427387904x4

// A GEMM engine ring of one stage, one deeper than any tile leaves shared memory for, and one
// too deep for this tile's (NVRTC says why).
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --gemm-stages=1 --emit=cuda 2>&1 | FileCheck %s --check-prefix=STAGES -DSTAGES=1
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --gemm-stages=99 --emit=cuda 2>&1 | FileCheck %s --check-prefix=STAGES -DSTAGES=99
// STAGES: mkc: error: --gemm-stages=[[STAGES]]: the GEMM engine's ring has 2 to 8 stages (the deepest fits shared memory only beside 128 x 64 tiles)
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --gemm-tile-n=256 --gemm-stages=5 -o %t/deep.cubin 2>&1 | FileCheck %s --check-prefix=DEEP
// DEEP: the GEMM engine's ring and epilogue do not fit a CTA's shared memory (227 KiB): use fewer stages
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --gemm-cluster=4 --emit=cuda 2>&1 | FileCheck %s --check-prefix=CLUSTER
// CLUSTER: mkc: error: --gemm-cluster=4: the GEMM engine runs in clusters of 1 or 2 CTAs
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --gemm-tile-n=96 --emit=cuda 2>&1 | FileCheck %s --check-prefix=WIDTH
// WIDTH: error: gemm-tile-n=96: the GEMM engine's tiles are 64, 128 or 256 columns wide

// A rank that does not exist: -1 given (leaving --rank out compiles for any rank), or past the
// topology's.
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --rank -1 --emit=mlir 2>&1 | FileCheck %s --check-prefix=RANK
// RANK: mkc: error: --rank=-1: ranks count from 0; leave --rank out to compile for any rank
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --rank 2 --emit=mlir 2>&1 | FileCheck %s --check-prefix=RANK-HIGH
// RANK-HIGH: gemm_allreduce.mlir:7:1: error: rank 2 does not exist on topology 1x2

// A persistent grid of no CTAs, or of more than any GPU has SMs.
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --sm-count 0 --emit=mlir 2>&1 | FileCheck %s --check-prefix=SM-COUNT
// SM-COUNT: mkc: error: --sm-count=0: the persistent grid has 1 to 1024 CTAs, one per SM (an H200 has 132)
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --sm-count 99999 --emit=mlir 2>&1 | FileCheck %s --check-prefix=SM-COUNT-HIGH
// SM-COUNT-HIGH: mkc: error: --sm-count=99999: the persistent grid has 1 to 1024 CTAs, one per SM (an H200 has 132)

// An unknown --emit.
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --emit=sass 2>&1 | FileCheck %s --check-prefix=EMIT
// EMIT: Cannot find option named 'sass'!

// A shape the compiler refuses: 6 query heads cannot share 4 key heads (the last two would read
// key heads past the tensor's).
// RUN: not mkc %mkc_lib/ring_attention_gqa.mlir --topology 1x2 --shape B=1,H=6,Hkv=4,S=256,D=64 --emit=cuda 2>&1 | FileCheck %s --check-prefix=SHAPE
// SHAPE: ring_attention_gqa.mlir:{{[0-9]+}}:15: error: 'mk.load' op takes tile 5 of dim 1, which has 4 (4 in tiles of 1): a tile's index stays in its tensor

// Shape bindings that are not positive integers.
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=0,N=1024,K=1024 --emit=mlir 2>&1 | FileCheck %s --check-prefix=ZERO
// ZERO: gemm_allreduce.mlir:7:1: error: shape binding 'M=0' is not NAME=VALUE with a positive VALUE
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=-1024,N=1024,K=1024 --emit=mlir 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// NEGATIVE: gemm_allreduce.mlir:7:1: error: shape binding 'M=-1024' is not NAME=VALUE with a positive VALUE
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1k,N=1024,K=1024 --emit=mlir 2>&1 | FileCheck %s --check-prefix=NOT-NUMBER
// NOT-NUMBER: gemm_allreduce.mlir:7:1: error: shape binding 'M=1k' is not NAME=VALUE with a positive VALUE
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=99999999999999999999,N=1024,K=1024 --emit=mlir 2>&1 | FileCheck %s --check-prefix=PAST-INT64
// PAST-INT64: gemm_allreduce.mlir:7:1: error: shape binding 'M=99999999999999999999' is not NAME=VALUE with a positive VALUE

// Shapes no GPU holds: A of 10^14 rows is 102 PB on each rank; 2^62 rows overflow int64 (the
// CUDA then listed tensor_bytes of 0); three tensors of 0.36-0.72 TB fit a rank alone, not
// together.
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=99999999999999,N=1024,K=1024 --emit=cuda 2>&1 | FileCheck %s --check-prefix=RANK-BYTES
// RANK-BYTES: gemm_allreduce.mlir:8:5: error: tensor '!mk.tensor<[99999999999999, 1024], bf16, shard 1 over world>' (argument #0 of @gemm_allreduce) holds 102399999999998976 bytes on each rank, more than the 1 TiB a rank may hold (above any GPU's memory: an H200 has 141 GB)
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=4611686018427387904,N=4611686018427387904,K=1024 --emit=cuda 2>&1 | FileCheck %s --check-prefix=INT64
// INT64: gemm_allreduce.mlir:8:5: error: tensor '!mk.tensor<[4611686018427387904, 1024], bf16, shard 1 over world>' (argument #0 of @gemm_allreduce) has more bytes than int64 counts (2^63 - 1)
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=600000,N=600000,K=600000 --emit=cuda 2>&1 | FileCheck %s --check-prefix=TOTAL-BYTES
// TOTAL-BYTES: gemm_allreduce.mlir:7:1: error: 'mk.program' op keeps more than 1 TiB of tensors and buffers on each rank

// A shape that breaks a tile size: 1000 rows in tiles of 128, not masked.
// RUN: not mkc %t/unmasked.mlir --topology 1x2 --shape M=1000 --emit=mlir 2>&1 | FileCheck %s --check-prefix=TILE
// TILE: unmasked.mlir:2:3: error: 'mk.tile_grid' op tile size 128 does not divide dim 0 (extent 1000); declare 'masked' to allow a partial last tile

// A shape symbol left unbound, and one the program does not have.
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024 --emit=mlir 2>&1 | FileCheck %s --check-prefix=UNBOUND
// UNBOUND: error: shape symbol 'K' of @gemm_allreduce is not bound; give shapes=K=VALUE
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024,Q=3 --emit=mlir 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// UNKNOWN: error: 'Q' is not a shape symbol of @gemm_allreduce (it declares [M, N, K])

// A cubin to the terminal, a missing input.
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --emit=cubin 2>&1 | FileCheck %s --check-prefix=CUBIN
// CUBIN: mkc: error: --emit=cubin writes a binary; give an output file with -o
// RUN: not mkc %t/missing.mlir --emit=mlir 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: mkc: error: cannot open input file '{{.*}}missing.mlir': No such file or directory

// Input that is not a tile program's file, refused before it is read: a device that never ends,
// a FIFO without a writer (stat, not opened: the open would wait for one), a directory, a file
// past 64 MiB (sparse); and standard input past 64 MiB, read up to the bound.
// RUN: rm -rf %t/io && mkdir -p %t/io/dir && mkfifo %t/io/fifo && truncate -s 65M %t/io/big.mlir
// RUN: not mkc /dev/zero --emit=mlir 2>&1 | FileCheck %s --check-prefix=DEVICE
// DEVICE: mkc: error: /dev/zero is a character device, not a regular file; mkc reads tile programs from files, or from standard input as -
// RUN: not mkc %t/io/fifo --emit=mlir 2>&1 | FileCheck %s --check-prefix=FIFO
// FIFO: mkc: error: {{.*}}fifo is a FIFO, not a regular file
// RUN: not mkc %t/io/dir --emit=mlir 2>&1 | FileCheck %s --check-prefix=DIRECTORY
// DIRECTORY: mkc: error: {{.*}}dir is a directory, not a regular file
// RUN: not mkc %t/io/big.mlir --emit=mlir 2>&1 | FileCheck %s --check-prefix=BIG
// BIG: mkc: error: {{.*}}big.mlir is 68157440 bytes; mkc reads tile programs of at most 64 MiB
// RUN: not mkc - --emit=mlir < /dev/zero 2>&1 | FileCheck %s --check-prefix=STDIN
// STDIN: mkc: error: standard input is longer than 64 MiB; mkc reads tile programs of at most 64 MiB

// Targets the kernels cannot run on (they use wgmma and TMA), and CUDA headers that are not there:
// flag errors before NVRTC runs.
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --arch sm_80 -o %t/arch.cubin 2>&1 | FileCheck %s --check-prefix=ARCH -DARCH=sm_80
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --arch sm_90 -o %t/arch.cubin 2>&1 | FileCheck %s --check-prefix=ARCH -DARCH=sm_90
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --arch sm_100a -o %t/arch.cubin 2>&1 | FileCheck %s --check-prefix=ARCH -DARCH=sm_100a
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --arch bogus --emit=ptx 2>&1 | FileCheck %s --check-prefix=ARCH -DARCH=bogus
// ARCH: mkc: error: --arch=[[ARCH]]: mkc targets sm_90a (the kernels use wgmma and TMA), or compute_90a for PTX alone
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --cuda-include %t/nowhere -o %t/include.cubin 2>&1 | FileCheck %s --check-prefix=NO-INCLUDE
// NO-INCLUDE: mkc: error: --cuda-include={{.*}}nowhere: no such directory
// RUN: rm -rf %t/empty && mkdir %t/empty
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --cuda-include %t/empty -o %t/include.cubin 2>&1 | FileCheck %s --check-prefix=NO-BF16
// NO-BF16: mkc: error: --cuda-include={{.*}}empty: has no cuda_bf16.h, which the device library includes

// A write that fails names the file, and is no LLVM ERROR.
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --emit=mlir -o /dev/full 2>&1 | FileCheck %s --check-prefix=FULL --implicit-check-not="LLVM ERROR"
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --emit=cuda -o /dev/full 2>&1 | FileCheck %s --check-prefix=FULL --implicit-check-not="LLVM ERROR"
// FULL: mkc: error: cannot write /dev/full: No space left on device

// A program the CUDA lowering refuses, when CUDA is asked for: located, naming the rule.
// RUN: not mkc %t/narrow.mlir --topology 1x1 --emit=cuda 2>&1 | FileCheck %s --check-prefix=LOWERING
// LOWERING: narrow.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'mk.load' op makes a register tile of 8 x 64, which does not split into whole 16 x 16 blocks

//--- malformed.mlir
mk.program @p [M] mesh <?x?> (%a: !mk.tensor<[M], bf16, replicated>) {
  mk.tile %a : !mk.tensor<[M], bf16, replicated>
}

//--- unmasked.mlir
mk.program @p [M] mesh <?x?> (%c: !mk.tensor<[M, 256], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [128, 256] : !mk.tensor<[M, 256], bf16, replicated> {
  }
}

//--- narrow.mlir
mk.program @p [] mesh <?x?> (%c: !mk.tensor<[64, 64], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %c tiles [8, 64] : !mk.tensor<[64, 64], bf16, replicated> {
    %t = mk.load %c[%m, %n] : !mk.tensor<[64, 64], bf16, replicated> -> !mk.tile<[8, 64], bf16>
    mk.store %t, %c[%m, %n] : !mk.tile<[8, 64], bf16>, !mk.tensor<[64, 64], bf16, replicated>
  }
}
