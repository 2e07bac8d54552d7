#!/usr/bin/env python3
"""Decode's shapes: the fused ops at M = 1-256 beside cuBLAS (+ NCCL), eager and graph-captured.

    python3 bench/decode.py [--ms 1,8,32,64,128,256] [--shapes 4096x4096,...] [--ops ...]
                            [--repeat N] [--csv FILE] [--plot FILE] [--options OPTIONS]

An inference server's decode step runs the tensor-parallel GEMMs at M = the tokens in flight. Per
M and per rank's (N, K) (Llama's and Mixtral's projections: 4096x4096, 8192x8192, 28672x4096,
4096x14336), bf16:

  one process (one GPU): mkc's GEMM alone (bench/gemm_allreduce.py's program: the fused ops'
      tile loop without a collective) against torch.matmul (cuBLASLt);
  several ranks (started under torch.distributed.run; `--gpus N` starts it so): each fused op of
      --ops against cuBLAS + NCCL on the same shards:
        gemm_allreduce       A_r [M, K] B_r [K, N] -> sum_r A_r B_r on every rank; matmul, all_reduce
        gemm_reducescatter   the same sum, rows scattered; matmul, reduce_scatter_tensor
        allgather_gemm       A [M, K] gathered from row shards, times B_r [K, N]; all_gather, matmul

Each variant is checked against the baseline's result first (outputs poisoned), then timed: eager,
10 calls between two CUDA events, and graph-captured, a CUDA graph of 10 calls replayed; the
variants' samples are taken in turn (bench/attention_engine.py's time_interleaved), median of
--repeat, the slowest rank's; the operands rotate among sets that together exceed the L2 cache.
Also the host time of one call from Python with unchanged arguments (median of 10,000, the stream
synchronised every 32 calls outside the timing), for mkc and for torch.matmul. The C++ figure is
mkc-launch-cost's (build/bench/decode). Ratios are baseline time / mkc time.
"""

import argparse
import math
import os
import statistics
import subprocess
import sys
import time

for variable in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
    os.environ.setdefault(variable, "0" if variable == "NCCL_NVLS_ENABLE" else "1")

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
from attention_engine import time_interleaved, write_csv  # noqa: E402
from gemm_allreduce import GEMM_ALONE  # noqa: E402

MS = (1, 8, 32, 64, 128, 256)
SHAPES = ((4096, 4096), (8192, 8192), (28672, 4096), (4096, 14336))
OPS = ("gemm_allreduce", "gemm_reducescatter", "allgather_gemm")
CALLS = 10  # calls per timed sample, and per captured graph
L2_BYTES = 50 << 20


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ms", default=",".join(map(str, MS)))
    parser.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES),
                        help="the rank's N x K, comma-separated")
    parser.add_argument("--ops", default=",".join(OPS), help="with several ranks: of " +
                        ",".join(OPS))
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--host-calls", type=int, default=10000)
    parser.add_argument("--options", default="",
                        help="mkc's flags for the ops, NAME=VALUE;... (one-shot-all-reduce=1)")
    parser.add_argument("--gpus", type=int, default=0,
                        help="start this many ranks under torch.distributed.run")
    parser.add_argument("--csv")
    parser.add_argument("--plot")
    arguments = parser.parse_args()
    arguments.ms = [int(m) for m in arguments.ms.split(",")]
    arguments.shapes = [tuple(int(x) for x in s.split("x")) for s in arguments.shapes.split(",")]
    arguments.ops = arguments.ops.split(",")
    unknown = set(arguments.ops) - set(OPS)
    if unknown:
        parser.error(f"--ops: {','.join(sorted(unknown))} not among {','.join(OPS)}")
    if min(arguments.ms) < 1 or any(n < 1 or k < 1 for n, k in arguments.shapes):
        parser.error("M, N and K must be at least 1")
    return arguments


def host_us(call, calls):
    """Median host time of `call` in microseconds, the stream synchronised every 32 calls (so
    that the driver's queue never fills) outside the timing."""
    for _ in range(100):
        call()
    torch.cuda.synchronize()
    samples = []
    for i in range(calls):
        begin = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - begin) / 1e3)
        if i % 32 == 31:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(samples)


def graphed(fn, sets):
    """A CUDA graph of CALLS calls of `fn`, on the sets in turn, and a function replaying it."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(*sets[0])  # outside the capture: PyTorch's and NCCL's lazy set-up
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(CALLS):
            fn(*sets[i % len(sets)])
    return lambda *_: graph.replay()


class Ranks:
    """This rank's place, and the slowest rank's view of a time."""

    def __init__(self, runtime):
        self.world, self.rank = runtime.world_size, runtime.rank
        if self.world > 1:
            dist.init_process_group("nccl", device_id=torch.device("cuda", runtime.device))

    def slowest(self, value):
        if self.world == 1:
            return value
        t = torch.tensor([value], device="cuda", dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()


def shards(extent, world):
    """Row counts of `extent` split over `world` ranks as mkc splits a sharded dim: the first
    ranks get one more."""
    return [extent // world + (r < extent % world) for r in range(world)]


def problem(op, M, N, K, world, rank, seed):
    """Inputs (this rank's), the mkc output and the baseline as a function of the inputs, for one
    op at one shape: (inputs, mkc output shape, baseline)."""
    g = torch.Generator(device="cuda").manual_seed(seed * 1000 + rank)

    def randn(*shape):
        return (torch.randn(*shape, device="cuda", generator=g) / math.sqrt(shape[0])).to(
            torch.bfloat16)

    if op == "gemm":
        return (randn(M, K), randn(K, N)), (M, N), lambda a, b: torch.matmul(a, b)
    if op == "gemm_allreduce":
        def baseline(a, b):
            c = torch.matmul(a, b)
            dist.all_reduce(c)
            return c
        return (randn(M, K), randn(K, N)), (M, N), baseline
    if op == "gemm_reducescatter":
        rows = shards(M, world)
        part = max(rows)  # NCCL scatters equal parts: rank r's rows go to part r, padded

        def baseline(a, b):
            c = torch.matmul(a, b)
            if M % world:
                starts = [sum(rows[:r]) for r in range(world)]
                spread = torch.zeros(world, part, N, device="cuda", dtype=torch.bfloat16)
                for r in range(world):
                    spread[r, :rows[r]] = c[starts[r]:starts[r] + rows[r]]
                c = spread.view(world * part, N)
            out = torch.empty(part, N, device="cuda", dtype=torch.bfloat16)
            dist.reduce_scatter_tensor(out, c)
            return out[:rows[rank]]
        return (randn(M, K), randn(K, N)), (rows[rank], N), baseline
    rows = shards(M, world)

    def baseline(a, b):
        parts = torch.zeros(world, max(rows), K, device="cuda", dtype=torch.bfloat16)
        padded = torch.nn.functional.pad(a, (0, 0, 0, max(rows) - a.shape[0]))
        dist.all_gather_into_tensor(parts, padded)
        full = torch.cat([parts[r, :rows[r]] for r in range(world)])
        return torch.matmul(full, b)
    return (randn(rows[rank], K), randn(K, N)), (M, N), baseline


def compile_op(runtime, mkc, op, M, N, K, world, options):
    """The fused op at this shape: per rank N and K are the issue's; the program's are global."""
    program = GEMM_ALONE if op == "gemm" else mkc.library_program(op)
    if op in ("gemm", "gemm_allreduce", "gemm_reducescatter"):
        return runtime.compile(program, M=M, N=N, K=K * world, options=options)
    return runtime.compile(program, M=M, N=N * world, K=K, options=options)


def placed(runtime, ranks, fused, tensors):
    """`tensors`, one per argument of `fused`, each in symmetric memory where the op needs it
    there (a copy, allocated collectively with the largest rank's size)."""
    out = []
    for argument, tensor in zip(fused.arguments, tensors):
        if argument.symmetric:
            capacity = int(ranks.slowest(tensor.numel()))
            copy = runtime.empty(tuple(tensor.shape), torch.bfloat16, capacity=capacity).torch()
            tensor = copy.copy_(tensor)
        out.append(tensor)
    return tuple(out)


def operands(runtime, ranks, fused, op, M, N, K, seed):
    """One set of this rank's operands (the output uninitialised) and the baseline."""
    inputs, out_shape, baseline = problem(op, M, N, K, ranks.world, ranks.rank, seed)
    c = torch.empty(out_shape, device="cuda", dtype=torch.bfloat16)
    return placed(runtime, ranks, fused, (*inputs, c)), baseline


def bench_shape(runtime, mkc, ranks, op, M, N, K, repeat, options):
    world, rank = ranks.world, ranks.rank
    fused = compile_op(runtime, mkc, op, M, N, K, world, options)
    inputs_bytes = 2 * (M * K + K * N)
    sets = []
    for seed in range(min(8, max(2, math.ceil(3 * L2_BYTES / inputs_bytes)))):
        operand_set, baseline = operands(runtime, ranks, fused, op, M, N, K, seed)
        sets.append(operand_set)
    a, b, c = sets[0]
    c.fill_(float("nan"))
    fused(a, b, c)
    want = baseline(a, b).float()
    error = (c.float() - want).abs().max().item()
    scale = want.pow(2).mean().sqrt().item()
    if not error <= 0.02 * scale + 1e-3:
        raise SystemExit(f"decode: {op} M={M} N={N} K={K} rank {rank}: mkc's result is off by "
                         f"{error:.4g} (rms {scale:.4g})")
    fns = {"mkc": lambda a, b, c: fused(a, b, c), "baseline": lambda a, b, c: baseline(a, b)}
    eager = time_interleaved(fns, sets, repeat, batch=CALLS)
    graphs = {f"{name}_graph": graphed(fn, sets) for name, fn in fns.items()}
    replayed = {name: ms / CALLS for name, ms in
                time_interleaved(graphs, sets, repeat).items()}
    times = {name: ranks.slowest(ms) for name, ms in {**eager, **replayed}.items()}
    flops = 2 * M * N * K * world  # K over the ranks (GEMM+AR, GEMM+RS) or N (AG+GEMM)
    row = {"op": op, "M": M, "N": N, "K": K, "ranks": world}
    for name, ms in times.items():
        row[f"{name}_us"] = ms * 1e3
    row["ratio"] = times["baseline"] / times["mkc"]
    row["graph_ratio"] = times["baseline_graph"] / times["mkc_graph"]
    row["mkc_tflops"] = flops / (times["mkc"] * 1e-3) / 1e12
    fused.close()
    return row


def plot(rows, path):
    if not path or not rows:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10, 4))
    for (op, N, K) in dict.fromkeys((r["op"], r["N"], r["K"]) for r in rows):
        mine = [r for r in rows if (r["op"], r["N"], r["K"]) == (op, N, K)]
        ax.plot([r["M"] for r in mine], [r["ratio"] for r in mine], marker="o",
                label=f"{op} {N}x{K}")
        ax.plot([r["M"] for r in mine], [r["graph_ratio"] for r in mine], marker="x",
                linestyle="--", label=f"{op} {N}x{K}, graphs")
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M")
    ax.set_ylabel("baseline time / mkc time")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def main():
    arguments = parse_arguments()
    if arguments.gpus and "LOCAL_RANK" not in os.environ:
        return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                               f"--nproc-per-node={arguments.gpus}", __file__] +
                              sys.argv[1:]).returncode
    if not torch.cuda.is_available():
        print("SKIP: no GPU")
        return 77
    import mkc

    runtime = mkc.Runtime(symmetric_bytes=4 << 30)
    torch.cuda.set_device(runtime.device)
    ranks = Ranks(runtime)
    options = dict(item.split("=", 1) for item in arguments.options.split(";") if item) or None
    ops = ["gemm"] if ranks.world == 1 else arguments.ops
    say = print if ranks.rank == 0 else (lambda *a, **k: None)
    say(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {ranks.world} rank(s); "
        f"baseline: cuBLAS{' + NCCL' if ranks.world > 1 else ''}")

    # Host time of a call with unchanged arguments, at the first shape.
    N, K = arguments.shapes[0]
    for op in ops:
        fused = compile_op(runtime, mkc, op, 1, N, K, ranks.world, options)
        (a, b, c), _ = operands(runtime, ranks, fused, op, 1, N, K, 0)
        mkc_us = ranks.slowest(host_us(lambda: fused(a, b, c), arguments.host_calls))
        torch_us = ranks.slowest(host_us(lambda: torch.matmul(a, b), arguments.host_calls))
        say(f"host time per call from Python, M=1 N={N} K={K}: mkc {op} {mkc_us:.2f} us, "
            f"torch.matmul {torch_us:.2f} us (median of {arguments.host_calls})")
        fused.close()

    say(f"{'op':>18} {'M':>4} {'N':>6} {'K':>6} {'mkc us':>8} {'base us':>8} {'ratio':>6} "
        f"{'mkc graph':>9} {'base graph':>10} {'ratio':>6}")
    rows = []
    for op in ops:
        for N, K in arguments.shapes:
            for M in arguments.ms:
                row = bench_shape(runtime, mkc, ranks, op, M, N, K, arguments.repeat, options)
                rows.append(row)
                say(f"{op:>18} {M:>4} {N:>6} {K:>6} {row['mkc_us']:>8.1f} "
                    f"{row['baseline_us']:>8.1f} {row['ratio']:>6.3f} {row['mkc_graph_us']:>9.1f} "
                    f"{row['baseline_graph_us']:>10.1f} {row['graph_ratio']:>6.3f}", flush=True)
                torch.cuda.empty_cache()
    if ranks.rank == 0:
        write_csv(rows, arguments.csv)
        plot(rows, arguments.plot)
    if ranks.world > 1:
        dist.destroy_process_group()
    runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
