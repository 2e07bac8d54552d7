#!/usr/bin/env python3
"""A process that no launcher started is a world of one: mkc.Runtime() needs no variables.

Run as is, it starts two such processes at once on GPU 0, each a job of its own (their node
sockets must not collide), or prints "SKIP: <why>" and exits 77 without torch or a GPU. Each
compiles lib/gemm_allreduce.mlir, whose all-reduce over one rank leaves C = A B, on a shape with
ragged edges, and checks it against PyTorch's f32 GEMM with C poisoned. Each prints PASS/FAIL
lines; the exit status is non-zero if a check failed in either.
"""

import os
import subprocess
import sys

import gpu_gemm_allreduce as common  # check, close_to; also puts mkc on the path

PROCESSES = 2
M, N, K = 3000, 5000, 4608
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                      "MASTER_PORT", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
                      "OMPI_COMM_WORLD_SIZE")


def alone(seed):
    import torch

    import mkc

    runtime = mkc.Runtime()
    common.check((runtime.rank, runtime.world_size, runtime.nodes) == (0, 1, 1),
                 f"process {seed}: rank {runtime.rank} of {runtime.world_size}, "
                 f"{runtime.nodes} node")
    torch.cuda.set_device(runtime.device)
    op = runtime.compile(mkc.library_program("gemm_allreduce"), M=M, N=N, K=K)

    generator = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, K, generator=generator, device="cuda").to(torch.bfloat16)
    b = torch.randn(K, N, generator=generator, device="cuda").to(torch.bfloat16)
    c = runtime.empty((M, N), torch.bfloat16)
    c.torch().fill_(float("nan"))
    op(a, b, c)
    torch.cuda.synchronize()
    common.close_to(c.torch(), a.float() @ b.float(), f"process {seed}: C = A B, {op.sm_split}")
    runtime.close()
    return 1 if common.failures else 0


def start_processes():
    if not common.torch_on_gpu():
        return common.SKIPPED
    kept = ("MKC_LIBRARY", "MKC_WAIT_TIMEOUT")
    environment = {name: value for name, value in os.environ.items()
                   if name in kept or (name not in LAUNCHER_VARIABLES
                                       and not name.startswith("MKC_"))}
    first_gpu = environment.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    environment["CUDA_VISIBLE_DEVICES"] = first_gpu
    processes = [subprocess.Popen([sys.executable, __file__, str(seed)], env=environment)
                 for seed in range(PROCESSES)]
    statuses = [process.wait(timeout=240) for process in processes]
    print(f"exit statuses {statuses}")
    return 0 if statuses == [0] * PROCESSES else 1


if __name__ == "__main__":
    sys.exit(alone(int(sys.argv[1])) if len(sys.argv) > 1 else start_processes())
