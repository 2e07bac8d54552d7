#!/usr/bin/env python3
"""The SM split of a fused op, measured with its ranks at once (issue 28): a benchmark, not a test.

Two ranks on one GPU need it run under MPS, each at its share of the SMs:

  python3 test/python/gpu_mps.py -- python3 bench/sm_split.py recycling
  python3 test/python/gpu_mps.py -- python3 bench/sm_split.py controller

recycling   GEMM+AllReduce 1x2 (not in place: a compute role and a reduction role), compiled with
            and without in-kernel recycling (recycle-ctas), each at the compiler's split, an even
            one and splits that starve the reduction role: every result checked against an f32
            GEMM, then timed; the ratio is no recycling / recycling.
controller  for each op (--ops: the tensor-parallel GEMMs at N = K = 8192, ring attention, MoE) and
            size (--sizes): every total of its roles but the first on a ladder, in the compiled
            proportions (exhaustive for the controller's purpose: it scales those roles together),
            then a fresh op with the controller on (MKC_SM_CONTROLLER=on) after its search
            launches: its settled split and the sweep's best timed in turns on that op (3
            rounds each, medians), their ratio the controller's score. --network makes the two
            ranks nodes, over the emulated NIC (--bandwidth-gbps; on one GPU its copies within
            the GPU stall: docs/notes/controller.md v4) or libfabric's tcp provider on loopback.

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


# The controller's problems: (per-rank size -> the program's shape bindings, its options).
PROBLEMS = {
    "gemm_allreduce": (lambda m, w: dict(M=m, N=8192, K=8192), {"in-place-all-reduce": False}),
    "gemm_reducescatter": (lambda m, w: dict(M=m, N=8192, K=8192), None),
    "allgather_gemm": (lambda m, w: dict(M=m, N=8192, K=8192), None),
    # S the whole sequence: each rank holds S / W of it.
    "ring_attention": (lambda s, w: dict(B=1, H=8, S=s * w, D=128), None),
    # T the tokens of all ranks: each rank routes T / W of them.
    "moe_dispatch_gemm_combine": (lambda t, w: dict(T=t * w, Hd=4096, I=2048, E=8, TopK=2), None),
}
SIZES = {"ring_attention": "4096,8192,16384,32768", "moe_dispatch_gemm_combine": "1024,2048,4096,8192"}


def operands(runtime, torch, op, shapes, g):
    """Random operands for `op`: bf16 normal, and for MoE a router's output (distinct experts per
    token, softmax weights); each argument placed where the op wants it."""
    args = []
    for argument in op.arguments:
        shape = tuple(argument.shape)
        if argument.element == "i32":  # experts [T, TopK]
            scores = torch.randn(shape[0], shapes["E"], generator=g, device="cuda")
            top, experts = scores.topk(shape[1], dim=1)
            value, weights = experts.to(torch.int32), top.softmax(dim=1)
        elif argument.element == "f32":  # the routing weights of the experts just drawn
            value = weights
        else:
            scale = shape[-2] ** -0.5 if len(shape) == 3 else 1.0  # MoE's expert weights
            value = (torch.randn(shape, generator=g, device="cuda") * scale).to(torch.bfloat16)
        if argument.symmetric:
            placed = runtime.empty(shape, value.dtype)
            placed.torch().copy_(value)
            value = placed
        args.append(value)
    return args


def spread(total, compiled, grid, unit):
    """A split of `grid` CTAs whose roles but the first have `total` CTAs among them, in the
    compiled split's proportions, whole units of at least one each."""
    rest = compiled[1:]
    counts = [max(unit, round(total * c / sum(rest) / unit) * unit) for c in rest]
    return [grid - sum(counts)] + counts if grid - sum(counts) >= unit else None


def controller(runtime, torch, dist, mkc, ops, sizes):
    rank = runtime.rank
    g = torch.Generator(device="cuda").manual_seed(5)
    for name in ops:
        bind, options = PROBLEMS[name]
        for size in sizes.get(name, sizes["default"]):
            shapes = bind(size, runtime.world_size)
            op = runtime.compile(mkc.library_program(name), shapes=shapes, options=options)
            if len(op.roles) < 2:
                if rank == 0:
                    print(f"{name} {shapes}: roles {op.roles}: nothing to split", flush=True)
                op.close()
                continue
            compiled = [c for _, c in op.roles]
            grid = sum(compiled)
            unit = 2 if all(c % 2 == 0 for c in compiled) else 1
            args = operands(runtime, torch, op, shapes, g)
            # Every total of the roles but the first on a ladder: exhaustive for the controller's
            # purpose (it scales those roles together, never past x8 or below one unit each).
            ladder = [1, 2, 4, 6, 8, 12, 16, 24, 32, grid // 2, sum(compiled[1:])]
            splits = {}
            for total in ladder:
                split = spread(total, compiled, grid, unit)
                if split:
                    splits[tuple(split)] = split
            static = {}
            for key, split in splits.items():
                op.set_sm_split(split)
                static[key] = timed(op, args, torch, dist, launches=12, warmup=2)
            op.close()
            best = min(static, key=static.get)
            # A fresh op of the same key: the controller searches over its first launches.
            again = runtime.compile(mkc.library_program(name), shapes=shapes, options=options)
            for _ in range(12):
                again(*args)
            torch.cuda.synchronize()
            settled = [c for _, c in again.roles]
            # The settled split against the sweep's best on this same op, in turns: two ops'
            # times of one split differ by a few percent (MPS's scheduling, clocks).
            pair = {"settled": settled, "best": list(best)}
            times = {label: [] for label in pair}
            for _ in range(3):
                for label, split in pair.items():
                    again.set_sm_split(split)
                    times[label].append(timed(again, args, torch, dist, launches=12, warmup=2))
            converged, again_best = (statistics.median(times[label]) for label in pair)
            again.close()
            if rank == 0:
                sweep = ", ".join(f"{'+'.join(map(str, k[1:]))}:{t:.3f}"
                                  for k, t in sorted(static.items(), key=lambda x: x[0][1:]))
                print(f"{name} {shapes} grid {grid} compiled {compiled}: sweep {{{sweep}}}; "
                      f"best {list(best)} {static[best]:.3f} ms; compiler "
                      f"{static[tuple(compiled)]:.3f}; controller {settled}; in turns on one op: "
                      f"{converged:.3f} ms against the best's {again_best:.3f} = "
                      f"{again_best / converged:.3f} of best", flush=True)


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
        # --sizes for every op, else each op's own (the GEMMs' M: 1024 to 8192).
        texts = {"default": args.sizes or "1024,2048,4096,8192", **({} if args.sizes else SIZES)}
        sizes = {name: [int(x) for x in text.split(",")] for name, text in texts.items()}
        controller(runtime, torch, dist, mkc, args.ops.split(","), sizes)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["recycling", "controller"])
    parser.add_argument("--m", type=int, default=4096, help="recycling: rows of A and C")
    parser.add_argument("--ops", default="gemm_allreduce,gemm_reducescatter,allgather_gemm")
    parser.add_argument("--sizes", help="controller: each op's per-rank sizes (M of the GEMMs, S "
                        "per rank of ring attention, T per rank of MoE; default: each op's own)")
    parser.add_argument("--network", choices=("none", "emulated", "fabric"), default="none",
                        help="the two ranks as nodes, linked by the emulated NIC or by "
                        "libfabric's tcp provider over loopback")
    parser.add_argument("--bandwidth-gbps", default="50", help="the emulated NIC's bandwidth")
    args = parser.parse_args()
    if "RANK" in os.environ:
        return rank_main(args)
    if args.what == "controller":
        os.environ["MKC_SM_CONTROLLER"] = "on"
    if args.network != "none":
        os.environ.update(MKC_GPUS_PER_NODE="1", MKC_NET=args.network)
    if args.network == "emulated":
        os.environ["MKC_NET_BANDWIDTH_GBPS"] = args.bandwidth_gbps
    if args.network == "fabric":
        os.environ.update(MKC_NET_PROVIDER="tcp", MKC_NET_ADDRESS="127.0.0.1")
    return common.launch_ranks(__file__, ranks=2, arguments=sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
