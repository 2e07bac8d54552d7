// What mkc's flags do, on lib/gemm_allreduce.mlir.

// --emit=ptx: the PTX of an sm_90a kernel.
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --emit=ptx | FileCheck %s --check-prefix=PTX
// PTX: .target sm_90a
// PTX: .visible .entry gemm_allreduce(

// --arch compute_90a gives PTX; a cubin needs a real architecture.
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --arch compute_90a --emit=ptx | FileCheck %s --check-prefix=PTX
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --arch compute_90a -o %t.cubin 2>&1 | FileCheck %s --check-prefix=VIRTUAL
// VIRTUAL: mkc: error: --arch=compute_90a gives PTX alone, no cubin; use --arch=sm_90a or --emit=ptx

// --rank binds the rank; --sm-split overrides the cost model; --explain-sm-split says why.
// --shapes (as the diagnostics of an unbound symbol spell it) is --shape.
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x4 --rank 5 --shapes M=1024,N=1024,K=1024 --sm-split compute=100,intra_reduce=16,inter_reduce=16 --emit=mlir | FileCheck %s --check-prefix=SPLIT
// SPLIT: mk.program @gemm_allreduce {{.*}} mesh <2x4> rank 5 ({{.*}}) grid 132 {
// SPLIT: mk.role compute ctas 100
// SPLIT: mk.role intra_reduce ctas 16
// SPLIT: mk.role inter_reduce ctas 16
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 2x4 --shape M=1024,N=1024,K=1024 --explain-sm-split --emit=mlir -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXPLAIN
// EXPLAIN: gemm_allreduce.mlir:{{[0-9]+}}:1: remark: SM split of @gemm_allreduce on {{[0-9]+}} CTAs (of 132 SMs), from the cost model:
// EXPLAIN-NEXT: compute {{[0-9]+}} CTAs: {{.*}} GFLOP
// EXPLAIN-NEXT: intra_reduce {{[0-9]+}} CTAs:
// EXPLAIN-NEXT: inter_reduce {{[0-9]+}} CTAs:
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 2x4 --shape M=1024,N=1024,K=1024 --sm-split compute=200 --emit=mlir 2>&1 | FileCheck %s --check-prefix=BADSPLIT
// BADSPLIT: error: the sm split gives no CTAs to role intra_reduce

// --print-ir-after-all shows every pass.
// RUN: mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --print-ir-after-all --emit=mlir -o /dev/null 2>&1 | FileCheck %s --check-prefix=PRINT
// PRINT: IR Dump After MkSpecialize
// PRINT: IR Dump After MkTileAndOrder
// PRINT: IR Dump After MkExpandCollectives
// PRINT: IR Dump After MkPartitionRoles
// PRINT: IR Dump After MkInsertSignals

// An NVRTC failure (here: a cuda_bf16.h that is not CUDA's where --cuda-include points) is
// reported with NVRTC's log, and mkc exits with status 1.
// RUN: rm -rf %t.include && mkdir %t.include && echo '#error not the CUDA toolkit' > %t.include/cuda_bf16.h
// RUN: not mkc %mkc_lib/gemm_allreduce.mlir --topology 1x2 --shape M=1024,N=1024,K=1024 --cuda-include %t.include -o %t.cubin 2>&1 | FileCheck %s --check-prefix=NVRTC
// NVRTC: mkc: error: NVRTC could not compile the CUDA C++ generated from {{.*}}gemm_allreduce.mlir (rerun with --emit=cuda to see all of it):
// NVRTC: cuda_bf16.h{{.*}}not the CUDA toolkit
