#!/usr/bin/env python3
"""The wrong answers of "Never a wrong answer", on the GPU: each refused with a located message
or right, over 3 launches with outputs poisoned, on 1x2 (two ranks, taking turns on one GPU
where there is one).

1. lib/gemm_reducescatter.mlir where M / 2 is not a multiple of the 128-row tile (M = 1000,
   N = 7000, K = 2880 left rows 500-511 unwritten; M = 128 left rank 1 nothing): refused, then
   numbering tiles shard by shard, right, as M = 1024 is.
2. test/Pipeline/gemm_allreduce_epilogue.mlir: an epilogue grid (bias, GeLU) reading the output
   of the in-place all-reduce, which read partial sums: right.
3. test/Pipeline/gemm_allreduce_bias.mlir at M = 128, whose GEMM tiles the compiler narrowed to
   128 columns against a 256-column reader (refused before): right.

Run it as is: without RANK it starts its 2 ranks, or prints "SKIP: <why>" and exits 77.
"""

import os
import pathlib
import sys

import gpu_gemm_allreduce as common  # check, close_to, launch_ranks; also puts mkc on the path

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "random"))
import programs  # noqa: E402 (shard_range: torch.tensor_split's shards)

PIPELINE = pathlib.Path(__file__).resolve().parents[1] / "Pipeline"


def poisoned(runtime, torch, shape, capacity=None):
    tensor = runtime.empty(list(shape), torch.bfloat16, capacity=capacity)
    return tensor, tensor.torch()


def launches(runtime, torch, op, tensors, out, reference, label, partials=()):
    for launch in range(1, 4):
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        runtime.barrier()
        op(*tensors)
        torch.cuda.synchronize()
        common.close_to(out, reference, f"{label}, launch {launch}", partials)


def reduce_scatter(runtime, torch, mkc):
    rank, world = runtime.rank, runtime.world_size
    for M, N, K in [(1000, 7000, 2880), (128, 8192, 8192), (1024, 7000, 2880)]:
        op = runtime.compile(mkc.library_program("gemm_reducescatter"), M=M, N=N, K=K)
        generator = torch.Generator(device="cuda").manual_seed(11 + M)
        a = torch.randn(M, K, generator=generator, device="cuda").to(torch.bfloat16)
        b = torch.randn(K, N, generator=generator, device="cuda").to(torch.bfloat16)
        shards = [slice(*programs.shard_range(K, world, r)) for r in range(world)]
        rows = slice(*programs.shard_range(M, world, rank))
        c, c_view = poisoned(runtime, torch, (rows.stop - rows.start, N), -(-M // world) * N)
        partials = [(a[:, s].float() @ b[s].float())[rows] for s in shards]
        launches(runtime, torch, op,
                 [a[:, shards[rank]].contiguous(), b[shards[rank]].contiguous(), c], c_view,
                 (a.float() @ b.float())[rows], f"rank {rank}: gemm_reducescatter M={M}",
                 partials)
        op.close()


def epilogue(runtime, torch, mkc, program, M, N, K, finish):
    """GEMM + all-reduce into a buffer, then a second grid: Y = finish(A B, bias)."""
    rank, world = runtime.rank, runtime.world_size
    op = runtime.compile(str(PIPELINE / program), M=M, N=N, K=K)
    generator = torch.Generator(device="cuda").manual_seed(M + N + K)
    a = torch.randn(M, K, generator=generator, device="cuda").to(torch.bfloat16)
    b = torch.randn(K, N, generator=generator, device="cuda").to(torch.bfloat16)
    bias = torch.randn(M, N, generator=generator, device="cuda").to(torch.bfloat16)
    shards = [slice(r * K // world, (r + 1) * K // world) for r in range(world)]
    # The all-reduced tile is rounded to bf16 before the epilogue, as the program says.
    reduced = (a.float() @ b.float()).to(torch.bfloat16).float()
    reference = finish(torch, reduced, bias.float())
    partials = [a[:, s].float() @ b[s].float() for s in shards]
    bias_arg = bias
    if op.arguments[2].symmetric:
        bias_arg = runtime.empty([M, N], torch.bfloat16)
        bias_arg.torch().copy_(bias)
    y, y_view = poisoned(runtime, torch, (M, N))
    launches(runtime, torch, op, [a[:, shards[rank]].contiguous(), b[shards[rank]].contiguous(),
                                  bias_arg, y],
             y_view, reference, f"rank {rank}: {program} M={M} N={N} K={K} ({op.sm_split})",
             partials)
    op.close()


def rank_main():
    os.environ["MKC_DEVICE"] = os.environ["LOCAL_RANK"]  # one each; MKC_SHARE_GPU: modulo
    import torch

    import mkc

    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    reduce_scatter(runtime, torch, mkc)
    for M, N, K in [(1000, 1024, 512), (3000, 5000, 4608)]:
        epilogue(runtime, torch, mkc, "gemm_allreduce_epilogue.mlir", M, N, K,
                 lambda torch, x, bias: torch.nn.functional.gelu(x + bias, approximate="tanh"))
    epilogue(runtime, torch, mkc, "gemm_allreduce_bias.mlir", 128, 1024, 512,
             lambda torch, x, bias: x + bias)
    torch.cuda.synchronize()
    runtime.close()
    return 1 if common.failures else 0


if __name__ == "__main__":
    sys.exit(rank_main() if "RANK" in os.environ else common.launch_ranks(__file__, 2))
