#!/usr/bin/env python3
"""A rank of the node dies: the other's kernel gives up instead of hanging, and its runtime says
which rank, and refuses to launch again.

Two ranks run lib/gemm_allreduce.mlir once together (checked against PyTorch's f32 GEMM), then
rank 1 dies (os._exit) and rank 0 launches alone with MKC_WAIT_TIMEOUT=3. Its kernel waits for
rank 1's launch, gives up after 3 s (the stream drains well before the 60 s a hang would take);
then runtime.check() and the next launch raise mkc.Error naming rank 1 and the limit, and
closing the runtime returns.

Run it as is, like gpu_gemm_allreduce.py (which it shares the launch with): under
torch.distributed.run, a GPU per rank, or with MKC_TEST_SHARED_GPU=1 taking turns on one.
"""

import os
import sys
import time

import gpu_gemm_allreduce as common  # check, close_to, the launch; also puts mkc on the path

M, N, K = 512, 1024, 1024
TIMEOUT_S = 3


def rank_main():
    import torch

    import mkc

    os.environ["MKC_WAIT_TIMEOUT"] = str(TIMEOUT_S)
    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    rank, world = runtime.rank, runtime.world_size
    op = runtime.compile(mkc.library_program("gemm_allreduce"), M=M, N=N, K=K)
    generator = torch.Generator(device="cuda").manual_seed(common.SEED)
    a_full = torch.randn(M, K, generator=generator, device="cuda").to(torch.bfloat16)
    b_full = torch.randn(K, N, generator=generator, device="cuda").to(torch.bfloat16)
    shard = slice(rank * K // world, (rank + 1) * K // world)
    a, b = a_full[:, shard].contiguous(), b_full[shard].contiguous()
    c = runtime.empty((M, N), torch.bfloat16)
    c.torch().fill_(float("nan"))
    torch.cuda.synchronize()
    runtime.barrier()
    op(a, b, c)
    torch.cuda.synchronize()
    common.close_to(c.torch(), a_full.float() @ b_full.float(), f"rank {rank}: C = A B, together")
    runtime.check()  # raises if it cannot vouch for that launch
    runtime.barrier()
    if rank == 1:
        print("rank 1: dies", flush=True)
        os._exit(1 if common.failures else 0)

    started = time.monotonic()
    op(a, b, c)
    torch.cuda.synchronize()
    waited = time.monotonic() - started
    common.check(TIMEOUT_S <= waited < 60,
                 f"rank 0: the launch without rank 1 ended after {waited:.1f} s")
    # Flag word 0 is the launch barrier, which rank 1's launch would have counted.
    common.check_raises(mkc.Error, "for flag word 0 of gemm_allreduce to count", runtime.check,
                        "rank 0: runtime.check() after it")
    common.check_raises(mkc.Error, "(rank 1) died", lambda: op(a, b, c),
                        "rank 0: the next launch is refused")
    started = time.monotonic()
    try:
        runtime.close()
    except mkc.Error as error:
        print(f"rank 0: closing: {error}", flush=True)
    common.check(time.monotonic() - started < 60, "rank 0: the runtime closes")
    sys.stdout.flush()
    os._exit(1 if common.failures else 0)


if __name__ == "__main__":
    sys.exit(rank_main() if "RANK" in os.environ else common.launch_ranks(__file__))
