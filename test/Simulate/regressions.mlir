// The wrong answers mk-sim found or was built to find, each now refused or right, and each caught
// by mk-sim in the program as the passes scheduled it before the fix.

// An epilogue grid after the 1x2 in-place all-reduce waited for one arrival of the two each tile
// gets: it read partial sums, and from the second launch on did not wait at all.
// RUN: mk-sim %S/../Pipeline/gemm_allreduce_epilogue.mlir --topology 1x2 --shape M=300,N=512,K=256 --gemm-tile-n 256 | FileCheck %s --check-prefix=EPILOGUE
// EPILOGUE: @gemm_allreduce_epilogue on #mk.mesh<1x2>: 3 launches x 8 interleavings (seeds 0-7), {{[0-9]+}} steps: no findings
// RUN: not mk-sim %S/../Pipeline/gemm_allreduce_epilogue.mlir --topology 1x2 --shape M=300,N=512,K=256 --gemm-tile-n 256 --scheduled %S/Inputs/epilogue_signals_both_puts.mlir 2>&1 | FileCheck %s --check-prefix=EPILOGUE-BEFORE
// EPILOGUE-BEFORE: epilogue_signals_both_puts.mlir:51:14: error: unguarded read: rank {{[01]}} ({{.*}}) reads element [{{.*}}] of the buffer made at {{.*}} which the write by rank {{[01]}} ({{.*}}) at {{.*}}epilogue_signals_both_puts.mlir:44:13 then changes

// The MoE expert grids skipped the tiles past an expert's row count, whose flags the gather of
// the results and the combine waited for. (Results no longer travel by gather: the scheduled
// program that deadlocked used ops mkc has since dropped.)
// RUN: mk-sim %mkc_lib/moe_dispatch_gemm_combine.mlir --topology 1x2 --shape T=256,Hd=256,I=256,E=4,TopK=2,C=256 | FileCheck %s --check-prefix=MOE
// MOE: @moe_dispatch_gemm_combine on #mk.mesh<1x2>: 3 launches x 8 interleavings (seeds 0-7), {{[0-9]+}} steps: no findings

// A 1x2 reduce-scatter whose shards are not a multiple of the tile left rows 500-511 unwritten
// (M = 1000), numbering the second shard's tiles from row 512; it was refused, and now numbers
// tiles shard by shard (TileNumbering), as do uneven shards (1000 rows over 3 ranks) and empty
// ones (one row over 2).
// RUN: mk-sim %mkc_lib/gemm_reducescatter.mlir --topology 1x2 --shape M=1000,N=512,K=256 --seeds 4 | FileCheck %s --check-prefix=SHARDS
// RUN: mk-sim %mkc_lib/gemm_reducescatter.mlir --topology 3x1 --shape M=1000,N=300,K=96 --seeds 4 | FileCheck %s --check-prefix=SHARDS
// RUN: mk-sim %mkc_lib/gemm_reducescatter.mlir --topology 1x2 --shape M=1,N=300,K=96 --seeds 4 | FileCheck %s --check-prefix=SHARDS
// SHARDS: @gemm_reducescatter on #mk.mesh<{{.*}}>: 3 launches x 4 interleavings (seeds 0-3), {{[0-9]+}} steps: no findings

// AG+GEMM on 3x1 sends A's rows to the other nodes through the proxy, straight from the caller's
// input; a launch counted as done before the proxy had read them, so the host's next write of A
// changed what it sent (random program 724: rank 2's rows 192-255 of C wrong at seed 0). A launch
// now ends once the proxy is done with its commands' sources (mk/queue.h, Release), in mk-sim as
// in the runtime.
// RUN: mk-sim %S/Inputs/allgather_gemm_proxy_source.mlir --topology 3x1 --shape M=384,N=768,K=48 --seeds 2 | FileCheck %s --check-prefix=PROXY-SOURCE
// PROXY-SOURCE: @random_724 on #mk.mesh<3x1>: 3 launches x 2 interleavings (seeds 0-1), {{[0-9]+}} steps: no findings
