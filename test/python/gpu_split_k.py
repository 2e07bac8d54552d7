#!/usr/bin/env python3
"""Split-K on the GEMM engine: a tile's K in parts computed at as many positions of the walk,
summed in the order of the parts by the one that arrives last (mk.matmul's k_splits).

One process (a world of one), lib/gemm_allreduce.mlir, whose all-reduce over one rank leaves
C = A B: for shapes a user has (decode's M = 1, 7, 64, 256; M = 1000 with N = 7000 and K = 2880;
a K of 65 blocks that 4 parts share unevenly, and one of 2 blocks in 2 parts) and the splits the
cost model chooses and 1, 2, 3, 4 and 8 parts (where K has that many 64-deep blocks), C is
poisoned with NaN and 3 launches run back to back on fresh random inputs each, the last checked
against PyTorch's f32 product; then two launches on the same inputs must give the same bits
(whichever part arrives last, the sum is in the same order); then a CUDA graph of 10 launches
replays right. Prints PASS/FAIL lines, or "SKIP: <why>" and exits 77 without torch or a GPU.
"""

import sys

import gpu_gemm_allreduce as common  # check, close_to; also puts mkc on the path

SHAPES = [(1, 4096, 4096), (7, 4096, 14336), (64, 4096, 4096), (256, 4096, 4096),
          (256, 8192, 8192), (1000, 7000, 2880), (300, 512, 4160), (128, 1000, 128)]
SPLITS = [0, 1, 2, 3, 4, 8]  # 0: the cost model's
LAUNCHES = 3
GRAPH_STEPS = 10


def check_shape(runtime, torch, mkc, M, N, K, splits):
    what = f"M={M} N={N} K={K} gemm-k-splits={splits}"
    try:
        op = runtime.compile(mkc.library_program("gemm_allreduce"), M=M, N=N, K=K,
                             options={"gemm-k-splits": splits})
    except mkc.Error as refused:
        # Only a split into more parts than K has blocks is refused, and it must say so.
        common.check(-(-K // 64) < splits and
                     "fewer than the" in str(refused), f"{what}: refused: {refused}")
        return
    generator = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K + splits)
    c = runtime.empty((M, N), torch.bfloat16)
    out = c.torch()
    out.fill_(float("nan"))
    for _ in range(LAUNCHES):  # fresh inputs every launch, on fresh epochs
        a = torch.randn(M, K, generator=generator, device="cuda").to(torch.bfloat16)
        b = torch.randn(K, N, generator=generator, device="cuda").to(torch.bfloat16)
        op(a, b, c)
    torch.cuda.synchronize()
    reference = a.float() @ b.float()
    common.close_to(out, reference, f"{what}: {LAUNCHES} launches ({op.sm_split})")
    first = out.clone()
    out.fill_(float("nan"))
    op(a, b, c)
    torch.cuda.synchronize()
    common.check(torch.equal(first.view(torch.int16), out.view(torch.int16)),
                 f"{what}: the same inputs give the same bits")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_STEPS):
            op(a, b, c)
    out.fill_(float("nan"))
    torch.cuda.synchronize()
    graph.replay()
    torch.cuda.synchronize()
    common.check(torch.equal(first.view(torch.int16), out.view(torch.int16)),
                 f"{what}: a graph of {GRAPH_STEPS} launches replays the same bits")
    op.close()


def main():
    torch = common.torch_on_gpu()
    if not torch:
        return common.SKIPPED
    import mkc

    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    for M, N, K in SHAPES:
        for splits in SPLITS:
            check_shape(runtime, torch, mkc, M, N, K, splits)
    runtime.close()
    return 1 if common.failures else 0


if __name__ == "__main__":
    sys.exit(main())
