#!/usr/bin/env python3
"""GEMM+AllReduce across two nodes: 2 ranks on one host, one GPU each, told they are two nodes
(MKC_GPUS_PER_NODE=1), so that partial tiles travel through the network proxy. MKC_TEST_NET picks
the network: "fabric" (default; libfabric's tcp provider over loopback, the staged protocol since
it cannot register GPU memory) or "emulated" (the NIC model, 50 GB/s and 3 us: the direct
protocol, reordering writes).

Checked against PyTorch's f32 GEMM on random inputs, C poisoned with NaN first; then 1,000
launches back to back without a host synchronisation, and C must still be right.

Run it as is: without RANK it starts itself under torch.distributed.run, or prints "SKIP: <why>"
and exits 77 without torch or 2 GPUs.
"""

import os
import sys
import time

import gpu_gemm_allreduce as common  # check, close_to, the launch; also puts mkc on the path

SEED = 2468
NETWORKS = {
    "fabric": {"MKC_NET": "fabric", "MKC_NET_PROVIDER": "tcp", "MKC_NET_ADDRESS": "127.0.0.1"},
    "emulated": {"MKC_NET": "emulated", "MKC_NET_REORDER": "1"},
}


def gemm_allreduce(runtime, torch, mkc, M, N, K, launches):
    rank, world = runtime.rank, runtime.world_size
    op = runtime.compile(mkc.library_program("gemm_allreduce"), M=M, N=N, K=K)
    generator = torch.Generator(device="cuda").manual_seed(SEED + M + N + K)
    a_full = torch.randn(M, K, generator=generator, device="cuda").to(torch.bfloat16)
    b_full = torch.randn(K, N, generator=generator, device="cuda").to(torch.bfloat16)
    shard = slice(rank * K // world, (rank + 1) * K // world)
    a, b = a_full[:, shard].contiguous(), b_full[shard].contiguous()
    c = runtime.empty((M, N), torch.bfloat16)
    c_view = c.torch()
    c_view.fill_(float("nan"))
    torch.cuda.synchronize()
    runtime.barrier()
    print(f"rank {rank}: gemm_allreduce M={M} N={N} K={K} across 2 nodes over "
          f"{os.environ['MKC_NET']}: {launches} launches", flush=True)
    start = time.perf_counter()
    for _ in range(launches):
        op(a, b, c)
    torch.cuda.synchronize()
    print(f"rank {rank}: {launches} launches in {time.perf_counter() - start:.3f} s", flush=True)
    reference = a_full.float() @ b_full.float()
    common.close_to(c_view, reference, f"rank {rank}: gemm_allreduce M={M} N={N} K={K}, "
                                       f"{launches} launches across 2 nodes")
    op.close()


def rank_main():
    os.environ["MKC_DEVICE"] = os.environ["LOCAL_RANK"]  # one node per rank, one GPU each
    import torch

    import mkc

    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    gemm_allreduce(runtime, torch, mkc, 257, 304, 512, 3)
    gemm_allreduce(runtime, torch, mkc, 3000, 5000, 4608, 3)
    gemm_allreduce(runtime, torch, mkc, 8192, 8192, 8192, 3)
    gemm_allreduce(runtime, torch, mkc, 1024, 1024, 1024, int(os.environ.get("MKC_TEST_LAUNCHES",
                                                                            "1000")))
    torch.cuda.synchronize()
    runtime.close()
    return 1 if common.failures else 0


if __name__ == "__main__":
    if "RANK" in os.environ:
        sys.exit(rank_main())
    os.environ.update(NETWORKS[os.environ.get("MKC_TEST_NET", "fabric")])
    os.environ["MKC_GPUS_PER_NODE"] = "1"
    sys.exit(common.launch_ranks(__file__))
