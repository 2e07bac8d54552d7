#!/usr/bin/env python3
"""The GPU half of the random-program differential test: programs drawn from the dialect's
pieces (test/random/programs.py) compiled by mkc.Runtime and run, each checked against its
meaning computed by PyTorch in f32, with outputs poisoned with NaN before each of 3 launches.
Every program is refused with a located message or right.

The programs of seeds MKC_TEST_FIRST_SEED (0) to + MKC_TEST_PROGRAMS (240) are drawn over the
topologies of MKC_TEST_TOPOLOGIES (1x1,1x2,2x1,2x2) with dims up to 3000; each topology's
programs run in one job of its ranks (across nodes: ranks of this host told they are nodes, over
libfabric tcp for 2x1 and the emulated NIC for 2x2). With fewer GPUs than ranks the ranks take
turns (MKC_SHARE_GPU). Waits give up after MKC_WAIT_TIMEOUT, so a hang is a failure, not a stall.

Each rank prints a line per program (PASS, REFUSED or FAIL, with its seed); rank 0 of each job
the counts. Exit status: 0 if nothing failed, 77 (skipped) without torch or a GPU.

With MKC_TEST_JIT_COMPILE (the mk-jit-compile binary), every program is first compiled into the
JIT's disk cache in parallel, on every core, so that the jobs find their cubins there.
"""

import concurrent.futures
import math
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import gpu_gemm_allreduce as common  # check, close_to; also puts mkc on the path

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "random"))
import programs  # noqa: E402

MAX_DIM = 3000
LAUNCHES = 3
NETWORKS = {
    "2x1": {"MKC_NET": "fabric", "MKC_NET_PROVIDER": "tcp", "MKC_NET_ADDRESS": "127.0.0.1"},
    "2x2": {"MKC_NET": "emulated", "MKC_NET_REORDER": "1"},
}
# A refusal names where: the program's FILE:LINE:COL, or the runtime's own located check.
LOCATED = re.compile(r"(\S+:\d+:\d+: error: .+)")


def settings():
    first = int(os.environ.get("MKC_TEST_FIRST_SEED", "0"))
    count = int(os.environ.get("MKC_TEST_PROGRAMS", "240"))
    topologies = os.environ.get("MKC_TEST_TOPOLOGIES", "1x1,1x2,2x1,2x2").split(",")
    return range(first, first + count), topologies


def part(torch, value, placement, rank, nodes, gpus):
    """Rank `rank`'s part of a global tensor placed as `placement`."""
    match = re.fullmatch(r"shard (\d) over (\w+)", placement)
    if not match:
        return value
    dim, axis = int(match.group(1)), match.group(2)
    index, size = {"world": (rank, nodes * gpus), "gpus": (rank % gpus, gpus),
                   "nodes": (rank // gpus, nodes)}[axis]
    lo, hi = programs.shard_range(value.shape[dim], size, index)
    return value.narrow(dim, lo, hi - lo)


def symmetric(runtime, shape, dtype, dims, placement, nodes, gpus):
    """An empty symmetric tensor of this rank's `shape` (of a global `dims` placed as
    `placement`), in an allocation of the largest shard's elements, which every rank makes
    alike."""
    largest = list(dims)
    match = re.fullmatch(r"shard (\d) over (\w+)", placement)
    if match:
        dim, axis = int(match.group(1)), match.group(2)
        size = {"world": nodes * gpus, "gpus": gpus, "nodes": nodes}[axis]
        largest[dim] = -(-dims[dim] // size)
    return runtime.empty(shape, dtype, capacity=math.prod(largest))


def run_program(runtime, torch, mkc, spec):
    """Compiles and runs `spec` on this rank: "PASS", "REFUSED ..." or "FAIL ..."."""
    rank, world = runtime.rank, runtime.world_size
    nodes, gpus = runtime.nodes, runtime.local_world_size
    try:
        op = runtime.compile(spec.text(), shapes=spec.shapes)
    except mkc.Error as error:
        located = LOCATED.search(str(error))
        if located:
            return f"REFUSED {located.group(1)[:200]}"
        return f"FAIL unlocated refusal: {error}"
    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    generator = torch.Generator(device="cuda").manual_seed(spec.seed)
    inputs, tensors, outputs = {}, [], {}
    for index, argument in enumerate(spec.arguments()):
        dims = [spec.shapes[d] if isinstance(d, str) else d for d in argument.dims]
        dtype = dtypes[argument.dtype]
        if argument.output:
            local = list(op.arguments[index].shape)
            if op.arguments[index].symmetric:
                handle = symmetric(runtime, local, dtype, dims, argument.placement, nodes, gpus)
                view = handle.torch()
            else:
                handle = view = torch.empty(local, dtype=dtype, device="cuda")
            tensors.append(handle)
            outputs[argument.name] = view
            continue
        # Every rank draws every rank's values, so that each knows the global tensor.
        if argument.placement == "symmetric":
            values = [(torch.rand(dims, generator=generator, device="cuda") * 2 - 1).to(dtype)
                      for _ in range(world)]
            inputs[argument.name] = [v.float() for v in values]
            mine = values[rank]
        else:
            value = (torch.rand(dims, generator=generator, device="cuda") * 2 - 1).to(dtype)
            inputs[argument.name] = value.float()
            mine = part(torch, value, argument.placement, rank, nodes, gpus).contiguous()
        if op.arguments[index].symmetric:
            handle = symmetric(runtime, list(mine.shape), dtype, dims, argument.placement, nodes,
                               gpus)
            handle.torch().copy_(mine)
            mine = handle
        tensors.append(mine)
    expected = spec.reference(torch, inputs)
    failures = []
    for launch in range(1, LAUNCHES + 1):
        for view in outputs.values():
            view.fill_(float("nan"))
        torch.cuda.synchronize()
        runtime.barrier()  # no rank poisons what a peer already wrote this launch
        op(*tensors)
        torch.cuda.synchronize()
        for name, view in outputs.items():
            value, partials, slack = expected[name]
            placement = next(a.placement for a in spec.arguments() if a.name == name)
            want = part(torch, value, placement, rank, nodes, gpus)
            mine_partials = [part(torch, p, placement, rank, nodes, gpus) for p in partials]
            error = (view.float() - want).abs()
            tolerance = want.abs() * 2**-7 + want.pow(2).mean().sqrt() / 64 + 2**-10
            if mine_partials:
                tolerance = tolerance + sum(p.abs() for p in mine_partials) * (
                    len(mine_partials) * 2**-8)
            if slack is not None:
                tolerance = tolerance + part(torch, slack, placement, rank, nodes, gpus)
            if not bool((error <= tolerance).all()):  # NaN, the poison, fails
                bad = int((~(error <= tolerance)).sum())
                worst = error.nan_to_num(float("inf")).max().item()
                failures.append(f"launch {launch}: {bad} of {error.numel()} elements of {name} "
                                f"off (max error {worst:.3g})")
    op.close()
    return "FAIL " + "; ".join(failures) if failures else "PASS"


def rank_main():
    os.environ["MKC_DEVICE"] = os.environ["LOCAL_RANK"]  # one each; MKC_SHARE_GPU: modulo
    import torch

    import mkc

    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    topology = os.environ["MKC_TEST_TOPOLOGY"]
    seeds, topologies = settings()
    counts = {"PASS": 0, "REFUSED": 0, "FAIL": 0}
    for seed in seeds:
        spec = programs.draw(seed, topologies, MAX_DIM)
        if spec.topology != topology:
            continue
        try:
            outcome = run_program(runtime, torch, mkc, spec)
        except Exception as error:  # a failure of this program, reported with its seed
            outcome = f"FAIL {type(error).__name__}: {error}"
        kind = outcome.split()[0]
        counts[kind] += 1
        common.check(kind != "FAIL", f"rank {runtime.rank}: seed {seed} {spec.family} on "
                     f"{topology} {spec.shape_bindings()} tile {spec.tile}: {outcome}")
        if kind == "FAIL" and "gave up" in outcome:
            break  # the runtime refuses every launch after a wait gave up
    if runtime.rank == 0:
        print(f"{topology}: {sum(counts.values())} programs: {counts['PASS']} right, "
              f"{counts['REFUSED']} refused with a located message, {counts['FAIL']} failed",
              flush=True)
    torch.cuda.synchronize()
    runtime.close()
    return 1 if common.failures else 0


def precompile(jit_compile):
    """Compiles every program into the JIT's disk cache, on every core (refusals are the jobs' to
    report)."""
    seeds, topologies = settings()
    with tempfile.TemporaryDirectory(prefix="mkc-random-") as directory, \
            concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
        def compile_one(seed):
            spec = programs.draw(seed, topologies, MAX_DIM)
            path = pathlib.Path(directory) / f"random_{seed}.mlir"
            path.write_text(spec.text())
            return subprocess.run([jit_compile, str(path), spec.topology, spec.shape_bindings()],
                                  capture_output=True).returncode
        compiled = sum(code == 0 for code in pool.map(compile_one, seeds))
    print(f"{compiled} of {len(seeds)} programs compiled into the JIT cache", flush=True)


def main():
    """Runs each topology's programs in a job of its own."""
    def precompile_first():
        if os.environ.get("MKC_TEST_JIT_COMPILE"):
            precompile(os.environ["MKC_TEST_JIT_COMPILE"])
    return common.run_topologies(__file__, settings()[1], NETWORKS, precompile_first)


if __name__ == "__main__":
    sys.exit(common.script_main(__file__, rank_main, main))
