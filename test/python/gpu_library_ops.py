#!/usr/bin/env python3
"""Every library op that lowers (lib/gemm_allreduce, gemm_reducescatter, allgather_gemm,
allreduce) at small shapes, 3 launches each with outputs poisoned, checked against PyTorch in f32:
the run that scripts/gpu-sanitize.sh puts under compute-sanitizer (memcheck, racecheck,
synccheck), where the kernels must also be clean.

MKC_TEST_RANKS (1 or 2) ranks; 2 take turns on one GPU when there is one (MKC_SHARE_GPU). Run it
as is: without RANK it starts its ranks, or prints "SKIP: <why>" and exits 77 without torch or a
GPU.
"""

import os
import subprocess
import sys

import gpu_gemm_allreduce as common  # check, close_to, launch_ranks; also puts mkc on the path

SHAPES = [(256, 256, 256), (200, 136, 128)]


def symmetric_or_not(runtime, op, index, value):
    """`value` where op's argument `index` must be: in symmetric memory, or as it is."""
    if not op.arguments[index].symmetric:
        return value, value
    tensor = runtime.empty(list(value.shape), value.dtype)
    tensor.torch().copy_(value)
    return tensor, tensor.torch()


def run(runtime, torch, mkc, name, shapes):
    rank, world = runtime.rank, runtime.world_size
    op = runtime.compile(mkc.library_program(name), **shapes)
    generator = torch.Generator(device="cuda").manual_seed(sum(shapes.values()) + len(name))
    M, N = shapes["M"], shapes["N"]
    rows = slice(rank * M // world, (rank + 1) * M // world)
    cols = slice(rank * N // world, (rank + 1) * N // world)
    if name == "allreduce":
        xs = [torch.randn(M, N, generator=generator, device="cuda").to(torch.bfloat16)
              for _ in range(world)]
        inputs = [xs[rank]]
        reference, partials, out_shape = sum(x.float() for x in xs), [x.float() for x in xs], (M, N)
    else:
        K = shapes["K"]
        a = torch.randn(M, K, generator=generator, device="cuda").to(torch.bfloat16)
        b = torch.randn(K, N, generator=generator, device="cuda").to(torch.bfloat16)
        shard = slice(rank * K // world, (rank + 1) * K // world)
        full = a.float() @ b.float()
        parts = [a[:, slice(r * K // world, (r + 1) * K // world)].float()
                 @ b[slice(r * K // world, (r + 1) * K // world)].float() for r in range(world)]
        if name == "gemm_allreduce":
            inputs, reference, partials = [a[:, shard], b[shard]], full, parts
        elif name == "gemm_reducescatter":
            inputs = [a[:, shard], b[shard]]
            reference, partials = full[rows], [p[rows] for p in parts]
        else:  # allgather_gemm
            inputs, reference, partials = [a[rows], b[:, cols]], full[:, cols], []
        out_shape = tuple(reference.shape)
    tensors = [symmetric_or_not(runtime, op, i, x.contiguous())[0] for i, x in enumerate(inputs)]
    out, out_view = symmetric_or_not(
        runtime, op, len(inputs), torch.empty(out_shape, dtype=torch.bfloat16, device="cuda"))
    label = f"rank {rank}: {name} {shapes}"
    for launch in range(1, 4):
        out_view.fill_(float("nan"))
        torch.cuda.synchronize()
        runtime.barrier()
        op(*tensors, out)
        torch.cuda.synchronize()
        common.close_to(out_view, reference, f"{label}, launch {launch}", partials)
    op.close()


def rank_main():
    os.environ.setdefault("MKC_DEVICE", os.environ.get("LOCAL_RANK", "0"))
    import torch

    import mkc

    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    for name in ("gemm_allreduce", "gemm_reducescatter", "allgather_gemm", "allreduce"):
        for M, N, K in SHAPES:
            shapes = {"M": M, "N": N} if name == "allreduce" else {"M": M, "N": N, "K": K}
            try:
                run(runtime, torch, mkc, name, shapes)
            except mkc.Error as error:  # refused: must say where
                common.check(":" in str(error) and "error:" in str(error),
                             f"rank {runtime.rank}: {name} {shapes} refused: {error}")
    torch.cuda.synchronize()
    runtime.close()
    return 1 if common.failures else 0


if __name__ == "__main__":
    if "RANK" in os.environ:
        sys.exit(rank_main())
    ranks = int(os.environ.get("MKC_TEST_RANKS", "1"))
    if ranks == 1:
        sys.exit(subprocess.run([sys.executable, __file__],
                                env=dict(os.environ, RANK="0", LOCAL_RANK="0",
                                         WORLD_SIZE="1")).returncode)
    sys.exit(common.launch_ranks(__file__, ranks))
