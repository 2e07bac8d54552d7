#!/usr/bin/env python3
"""GEMM+AllReduce across nodes: ranks of one host told they are nodes (MKC_GPUS_PER_NODE), so
that node partials travel through the network proxy. MKC_TEST_TOPOLOGY is the job, NODESxGPUS
(default 2x1: 2 ranks, one GPU each; 2x2 needs 4 GPUs and reduces inside each pair over NVLink
first). MKC_TEST_NET picks the network: "fabric" (default; libfabric's tcp provider over loopback,
the staged protocol since it cannot register GPU memory) or "emulated" (the NIC model, 50 GB/s
and 3 us: the direct protocol, reordering writes).

Checked against PyTorch's f32 GEMM on random inputs (within a tolerance that grows with the bf16
roundings of the ranks' partials and their sums), C poisoned with NaN first; then 1,000
launches back to back without a host synchronisation, and C must still be right. Where every
tile is whole, each rank must have sent (NODES - 1) x M x N x 2 / GPUS bytes a launch across
nodes: the node partials of the tiles it owns, 1/GPUS of what a flat all-reduce sends.

Run it as is: without RANK it starts itself under torch.distributed.run, or prints "SKIP: <why>"
and exits 77 without torch or enough GPUs (with MKC_TEST_SHARED_GPU=1, as gpu_gemm_allreduce.py).
"""

import os
import re
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
    shards = [slice(r * K // world, (r + 1) * K // world) for r in range(world)]
    a, b = a_full[:, shards[rank]].contiguous(), b_full[shards[rank]].contiguous()
    c = runtime.empty((M, N), torch.bfloat16)
    c_view = c.torch()
    c_view.fill_(float("nan"))
    torch.cuda.synchronize()
    runtime.barrier()
    where = f"across {runtime.nodes} nodes of {runtime.local_world_size} GPUs"
    print(f"rank {rank}: gemm_allreduce M={M} N={N} K={K} {where} over {os.environ['MKC_NET']} "
          f"(SM split {op.sm_split}): {launches} launches", flush=True)
    before = runtime.network_statistics()
    start = time.perf_counter()
    for _ in range(launches):
        op(a, b, c)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    # Every rank's kernels have finished, so every proxy has taken every write they asked for.
    runtime.barrier()
    sent = runtime.network_statistics().bytes - before.bytes
    print(f"rank {rank}: {launches} launches in {seconds:.3f} s, {sent / launches / 1e6:.3f} MB "
          f"a launch across nodes", flush=True)
    reference = a_full.float() @ b_full.float()
    partials = [a_full[:, s].float() @ b_full[s].float() for s in shards]
    common.close_to(c_view, reference, f"rank {rank}: gemm_allreduce M={M} N={N} K={K}, "
                                       f"{launches} launches {where}", partials)
    gpus = runtime.local_world_size
    if M % 128 == 0 and N % 256 == 0 and (M // 128) * (N // 256) % gpus == 0:
        expected = (runtime.nodes - 1) * M * N * 2 // gpus
        common.check(sent == launches * expected,
                     f"rank {rank}: {sent} bytes across nodes in {launches} launches, "
                     f"{expected} a launch: 1/{gpus} of a flat all-reduce's")
    op.close()


def topology():
    """(nodes, GPUs per node) from MKC_TEST_TOPOLOGY."""
    text = os.environ.get("MKC_TEST_TOPOLOGY", "2x1")
    match = re.fullmatch(r"(\d+)x(\d+)", text)
    if not match or int(match.group(1)) < 2 or int(match.group(2)) < 1:
        sys.exit(f"MKC_TEST_TOPOLOGY={text}: expected NODESxGPUS with at least 2 nodes")
    return int(match.group(1)), int(match.group(2))


def rank_main():
    os.environ["MKC_DEVICE"] = os.environ["LOCAL_RANK"]  # one each; MKC_SHARE_GPU: modulo
    import torch

    import mkc

    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    common.check((runtime.nodes, runtime.local_world_size) == topology(),
                 f"rank {runtime.rank}: node {runtime.node} of {runtime.nodes}, "
                 f"{runtime.local_world_size} GPUs each")
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
    nodes, gpus = topology()
    os.environ["MKC_GPUS_PER_NODE"] = str(gpus)
    sys.exit(common.launch_ranks(__file__, nodes * gpus))
