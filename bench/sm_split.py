#!/usr/bin/env python3
"""The SM split of a fused op, measured with its ranks at once (issue 28): a benchmark, not a test.

Two ranks on one GPU need it run under MPS, each at its share of the SMs:

  python3 test/python/gpu_mps.py -- python3 bench/sm_split.py recycling
  python3 test/python/gpu_mps.py -- python3 bench/sm_split.py controller

recycling   GEMM+AllReduce 1x2 (not in place: a compute role and a reduction role), compiled with
            and without in-kernel recycling (recycle-ctas), each at the compiler's split, an even
            one and splits that starve the reduction role: every result checked against an f32
            GEMM, then timed; the ratio is no recycling / recycling.
controller  for each op (--ops) and M (--ms, N = K = 8192): every split of its second role on a
            ladder (exhaustive for the controller's purpose: it never goes below half the compiled
            CTAs), then a fresh op with the controller on (MKC_SM_CONTROLLER=on) after its search
            launches; its settled time against the best static split and the compiler's.

The controller's sweep compiles two ops per shape, whose symmetric buffers stay in the heap until
the runtime ends: give it room (MKC_SYMMETRIC_BYTES=8G; the default 1G lasts about 12 ops of
8192 x 8192).

Times: medians of launches between CUDA events after warm-up launches, the slowest rank's. With
ranks sharing one GPU, "NVLink" is the GPU's own memory and every rank's grid is smaller than the
GPU (the runtime leaves part of its share free under MPS): read the ratios, not the times.
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "python"))
import gpu_gemm_allreduce as common  # noqa: E402


def timed(op, args, torch, dist, launches=25, warmup=5):
    times = []
    for i in range(launches):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        op(*args)
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    median = torch.tensor([statistics.median(times)])
    dist.all_reduce(median, op=dist.ReduceOp.MAX)
    return median.item()


def recycling(runtime, torch, dist, mkc, M, N, K):
    rank = runtime.rank
    a, b, reference = common.row_parallel_operands(torch, rank, runtime.world_size, M, N, K, 3)
    c = runtime.empty((M, N), torch.bfloat16)
    view = c.torch()
    ops = {label: runtime.compile(mkc.library_program("gemm_allreduce"), M=M, N=N, K=K,
                                  options=dict(options, **{"in-place-all-reduce": False}))
           for label, options in [("recycling", {}), ("none", {"recycle-ctas": False})]}
    compiled = [ctas for _, ctas in ops["recycling"].roles]
    grid = sum(compiled)
    unit = 2 if all(x % 2 == 0 for x in compiled) else 1
    half = grid // 2 // unit * unit
    splits = {"compiler": compiled, "even": [half, grid - half],
              "starved": [grid - unit, unit], "starved x2": [grid - 2 * unit, 2 * unit]}
    results = {}
    for split_name, split in splits.items():
        for label, op in ops.items():
            op.set_sm_split(split)
            view.fill_(float("nan"))
            torch.cuda.synchronize()
            runtime.barrier()
            op(a, b, c)
            torch.cuda.synchronize()
            common.close_to(view, reference, f"rank {rank}: {label} at {split_name} {op.roles}")
            runtime.barrier()
            results[(split_name, label)] = timed(op, (a, b, c), torch, dist)
    for op in ops.values():
        op.close()
    if rank == 0:
        for split_name, split in splits.items():
            on, off = results[(split_name, "recycling")], results[(split_name, "none")]
            print(f"gemm_allreduce M={M} N={N} K={K} split {split_name} {split}: recycling "
                  f"{on:.3f} ms, none {off:.3f} ms, ratio {off / on:.3f}", flush=True)


def controller(runtime, torch, dist, mkc, ops, ms, N, K):
    rank = runtime.rank
    g = torch.Generator(device="cuda").manual_seed(5)
    for name in ops:
        for M in ms:
            options = {"in-place-all-reduce": False} if name == "gemm_allreduce" else None
            op = runtime.compile(mkc.library_program(name), M=M, N=N, K=K, options=options)
            if len(op.roles) != 2:
                if rank == 0:
                    print(f"{name} M={M}: roles {op.roles}, not two: nothing to split", flush=True)
                op.close()
                continue
            compiled = [c for _, c in op.roles]
            grid = sum(compiled)
            unit = 2 if all(c % 2 == 0 for c in compiled) else 1
            args = []
            for argument in op.arguments:
                shape = tuple(argument.shape)
                if argument.symmetric:
                    args.append(runtime.empty(shape, torch.bfloat16))
                else:
                    args.append(torch.randn(shape, generator=g, device="cuda").to(torch.bfloat16))
            ladder = [1, 2, 4, 6, 8, 12, 16, 24, 32, grid // 2, compiled[1]]
            seconds = sorted({max(unit, min(grid - unit, x // unit * unit)) for x in ladder})
            static = {}
            for count in seconds:
                op.set_sm_split([grid - count, count])
                static[count] = timed(op, args, torch, dist, launches=12, warmup=2)
            op.close()
            best = min(static, key=static.get)
            # A fresh op of the same key: the controller searches over its first launches.
            again = runtime.compile(mkc.library_program(name), M=M, N=N, K=K, options=options)
            for _ in range(12):
                again(*args)
            torch.cuda.synchronize()
            settled = again.roles
            converged = timed(again, args, torch, dist, launches=12, warmup=2)
            again.close()
            if rank == 0:
                sweep = ", ".join(f"{c}:{t:.3f}" for c, t in sorted(static.items()))
                print(f"{name} M={M} N={N} K={K} grid {grid} compiled {compiled}: sweep "
                      f"{{{sweep}}}; best {best} {static[best]:.3f} ms; compiler "
                      f"{static[compiled[1]]:.3f}; controller {settled} {converged:.3f} ms = "
                      f"{static[best] / converged:.3f} of best", flush=True)


def rank_main(args):
    import torch
    import torch.distributed as dist

    import mkc

    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    dist.init_process_group("gloo")
    if args.what == "recycling":
        recycling(runtime, torch, dist, mkc, args.m, 8192, 8192)
    else:
        controller(runtime, torch, dist, mkc, args.ops.split(","),
                   [int(m) for m in args.ms.split(",")], 8192, 8192)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["recycling", "controller"])
    parser.add_argument("--m", type=int, default=4096, help="recycling: rows of A and C")
    parser.add_argument("--ops", default="gemm_allreduce,gemm_reducescatter,allgather_gemm")
    parser.add_argument("--ms", default="1024,2048,4096,8192")
    args = parser.parse_args()
    if "RANK" in os.environ:
        return rank_main(args)
    if args.what == "controller":
        os.environ["MKC_SM_CONTROLLER"] = "on"
    return common.launch_ranks(__file__, ranks=2, arguments=sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
