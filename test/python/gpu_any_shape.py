#!/usr/bin/env python3
"""The three tensor-parallel ops of the library at shapes users have, on one GPU whose ranks take
turns on it (MKC_SHARE_GPU): lib/allgather_gemm.mlir, lib/gemm_reducescatter.mlir and
lib/gemm_allreduce.mlir for M in {1, 128, 1000, 8192} and (N, K) in {(7000, 2880), (4096, 4096)},
on 1x1, 1x2, 2x1, 3x1, 2x2 and 1x4 (ranks of more than one node talk over libfabric's tcp
provider on loopback). Among them: dims that do not split evenly over the ranks (torch.tensor_split's
shards: 1000 rows over 3 ranks are 334, 333 and 333; one row over 2 is 1 and 0), shards that are
not a multiple of the tile, a local K that is not a multiple of 16 (2880 over 8 is 360; over 3,
960) and rows that are not whole 16-byte pieces (7000 columns over 4 ranks are 1750).

Each rank holds its torch.tensor_split shards of random bf16 inputs every rank draws alike;
outputs are poisoned with NaN, the op runs 3 times back to back, and each rank's part is checked
against PyTorch's f32 product (within a tolerance that grows with the bf16 roundings of the ranks'
partials); then, poisoned again, a CUDA graph of 10 launches (a decode step's worth), captured
once, replays and is checked the same way. Prints a table: op, topology, M, N, K, the largest
error over the ranks, ok.

Run it as is: it starts the ranks of each topology under torch.distributed.run, or prints
"SKIP: <why>" and exits 77 without torch or a GPU. MKC_TEST_TOPOLOGIES and MKC_TEST_ROWS
(comma-separated) run other topologies and values of M (decode's: 1,7,64,128,256).
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

import gpu_gemm_allreduce as common  # within_tolerance; also puts mkc on the path

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "random"))
import programs  # noqa: E402 (shard_range: torch.tensor_split's shards)

SEED = 97
LAUNCHES = 3
OPS = ["allgather_gemm", "gemm_reducescatter", "gemm_allreduce"]
ROWS = [1, 128, 1000, 8192]
GRAPH_STEPS = 10
COLUMNS_AND_DEPTHS = [(7000, 2880), (4096, 4096)]
TOPOLOGIES = ["1x1", "1x2", "2x1", "3x1", "2x2", "1x4"]
NETWORK = {"MKC_NET": "fabric", "MKC_NET_PROVIDER": "tcp", "MKC_NET_ADDRESS": "127.0.0.1"}


def shard(value, dim, world, rank):
    """Rank `rank`'s piece of `value` along `dim`, as torch.tensor_split gives it."""
    lo, hi = programs.shard_range(value.shape[dim], world, rank)
    return value.narrow(dim, lo, hi - lo)


def placed(runtime, torch, argument, value, largest):
    """What to pass the op for `argument`, and a torch view of it: `value` (this rank's shard,
    or None for an output) dense, or in symmetric memory where the op needs it there, in an
    allocation of the largest shard's `largest` elements, alike on every rank."""
    if argument.symmetric:
        tensor = runtime.empty(argument.shape, torch.bfloat16, capacity=largest)
        view = tensor.torch()
    else:
        tensor = view = torch.empty(argument.shape, dtype=torch.bfloat16, device="cuda")
    if value is not None:
        view.copy_(value)
    return tensor, view


def run_op(runtime, torch, mkc, name, M, N, K):
    """Runs op `name` at M x N x K on this rank: (ok, largest error)."""
    rank, world = runtime.rank, runtime.world_size
    op = runtime.compile(mkc.library_program(name), M=M, N=N, K=K)
    generator = torch.Generator(device="cuda").manual_seed(SEED + M + N + K)
    a = torch.randn(M, K, generator=generator, device="cuda").to(torch.bfloat16)
    b = torch.randn(K, N, generator=generator, device="cuda").to(torch.bfloat16)
    largest = -(-M // world), -(-N // world), -(-K // world)  # the first shards' extents
    partials = []
    if name == "allgather_gemm":  # A by rows, B and C by columns
        inputs = [(shard(a, 0, world, rank), largest[0] * K),
                  (shard(b, 1, world, rank), K * largest[1])]
        out_capacity = M * largest[1]
        reference = a.float() @ shard(b, 1, world, rank).float()
    else:  # A by columns, B by rows: the partials of K's shards
        inputs = [(shard(a, 1, world, rank), M * largest[2]),
                  (shard(b, 0, world, rank), largest[2] * N)]
        partials = [shard(a, 1, world, r).float() @ shard(b, 0, world, r).float()
                    for r in range(world)]
        reference = a.float() @ b.float()
        out_capacity = M * N
        if name == "gemm_reducescatter":  # C by rows
            reference = shard(reference, 0, world, rank)
            partials = [shard(p, 0, world, rank) for p in partials]
            out_capacity = largest[0] * N
    tensors = [placed(runtime, torch, op.arguments[i], value, capacity)[0]
               for i, (value, capacity) in enumerate(inputs)]
    out, out_view = placed(runtime, torch, op.arguments[2], None, out_capacity)
    tensors.append(out)
    out_view.fill_(float("nan"))
    torch.cuda.synchronize()
    runtime.barrier()  # no rank poisons what a peer already wrote
    for _ in range(LAUNCHES):  # back to back: each launch on a fresh epoch
        op(*tensors)
    torch.cuda.synchronize()
    ok, error, _ = common.within_tolerance(out_view, reference, partials)
    # The same launches captured in a graph: each replayed launch takes a fresh epoch too.
    runtime.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_STEPS):
            op(*tensors)
    out_view.fill_(float("nan"))
    torch.cuda.synchronize()
    runtime.barrier()
    graph.replay()
    torch.cuda.synchronize()
    replay_ok, replay_error, _ = common.within_tolerance(out_view, reference, partials)
    ok, error = ok and replay_ok, max(error, replay_error)
    runtime.barrier()  # every rank is done with the peers' memory before the op goes
    op.close()
    return ok, error


def rows_to_run():
    return [int(m) for m in os.environ.get("MKC_TEST_ROWS", ",".join(map(str, ROWS))).split(",")]


def rank_main():
    import torch

    import mkc

    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    topology = os.environ["MKC_TEST_TOPOLOGY"]
    rows = []
    for name in OPS:
        for M in rows_to_run():
            for N, K in COLUMNS_AND_DEPTHS:
                try:
                    ok, error = run_op(runtime, torch, mkc, name, M, N, K)
                except mkc.Error as refused:
                    ok, error = False, float("nan")
                    print(f"rank {runtime.rank}: {name} M={M} N={N} K={K}: {refused}",
                          flush=True)
                rows.append({"op": name, "topology": topology, "M": M, "N": N, "K": K,
                             "error": error, "ok": ok})
    path = pathlib.Path(os.environ["MKC_TEST_RESULTS"]) / f"{topology}-rank{runtime.rank}.json"
    path.write_text(json.dumps(rows))
    runtime.close()
    return 0


def run_topology(topology, results):
    """Starts the ranks of `topology`, their GPUs shared; their exit status."""
    nodes, gpus = (int(x) for x in topology.split("x"))
    # The heap hands out and never takes back: room for every op's buffers and flags.
    environment = dict(os.environ, MKC_SHARE_GPU="1", MKC_TEST_TOPOLOGY=topology,
                       MKC_TEST_RESULTS=str(results), MKC_GPUS_PER_NODE=str(gpus),
                       MKC_SYMMETRIC_BYTES="4G", MKC_FLAG_WORDS="4M")
    if nodes > 1:
        environment.update(NETWORK)
    print(f"{topology}: {nodes * gpus} ranks", flush=True)
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={nodes * gpus}", __file__],
                          env=environment).returncode


def main():
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        return common.SKIPPED
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print("SKIP: no GPU")
        return common.SKIPPED
    topologies = os.environ.get("MKC_TEST_TOPOLOGIES", ",".join(TOPOLOGIES)).split(",")
    failed = []
    table = {}
    with tempfile.TemporaryDirectory(prefix="mkc-any-shape-") as folder:
        results = pathlib.Path(folder)
        for topology in topologies:
            if run_topology(topology, results) != 0:
                failed.append(f"{topology}: the ranks exited with an error")
        for path in sorted(results.glob("*.json")):
            for row in json.loads(path.read_text()):
                key = (row["op"], row["topology"], row["M"], row["N"], row["K"])
                error, ok = table.get(key, (0.0, True))
                table[key] = (max(error, row["error"]), ok and row["ok"])
    print(f"\n{'op':20} {'topology':8} {'M':>5} {'N':>5} {'K':>5} {'max error':>10}  ok")
    for topology in topologies:
        for name in OPS:
            for M in rows_to_run():
                for N, K in COLUMNS_AND_DEPTHS:
                    error, ok = table.get((name, topology, M, N, K), (float("nan"), False))
                    print(f"{name:20} {topology:8} {M:5} {N:5} {K:5} {error:10.3g}  "
                          f"{'ok' if ok else 'FAIL'}")
                    if not ok:
                        failed.append(f"{name} on {topology} M={M} N={N} K={K}")
    for failure in failed:
        print(f"FAIL: {failure}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(rank_main() if "RANK" in os.environ else main())
