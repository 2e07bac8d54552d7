#!/usr/bin/env python3
"""GEMM+AllReduce on 2 GPUs through the Python package, with PyTorch tensors, checked against
PyTorch's f32 GEMM.

Rank r holds A_r = A[:, K_r] and B_r = B[K_r, :] (bf16, random from a seed every rank shares, so
each can compute the whole product for reference); lib/gemm_allreduce.mlir compiled by
mkc.Runtime leaves C = A B, in symmetric memory (runtime.empty), on every rank. Also checked: a
launch on another stream, replays of a CUDA graph, the op compiled not in place (a reduce role),
and tensors the op refuses (a wrong dtype: ValueError; C outside symmetric memory: mkc.Error).
MKC_TEST_COMPILER_OPTIONS compiles the op under test with mkc's flags ("NAME=VALUE;...").

Run it as is: without RANK in the environment it starts itself under torch.distributed.run, one
process per GPU, or prints "SKIP: <why>" and exits 77 without torch or 2 GPUs. With
MKC_TEST_SHARED_GPU=1 it runs only where there are fewer GPUs than ranks, which then take turns
on them (MKC_SHARE_GPU). Each rank prints PASS/FAIL lines; the exit status is non-zero if a check
failed.
"""

import os
import subprocess
import sys
import time

import support  # noqa: F401 (puts mkc on the path)

SKIPPED = 77
RANKS = 2
M, N, K = 1024, 2048, 4096
SEED = 1234

failures = 0


def check(ok, what):
    global failures
    print(f"{'PASS' if ok else 'FAIL'}: {what}", flush=True)
    failures += not ok


def check_raises(error_type, expected, call, what):
    """Whether call() raises `error_type` with `expected` in its message."""
    try:
        call()
    except error_type as error:
        check(expected in str(error), f"{what}: {error}")
        return
    check(False, f"{what}: no {error_type.__name__}")


def row_parallel_operands(torch, rank, world, M, N, K, seed):
    """Rank `rank`'s shards A[:, K_r] and B[K_r, :] of random bf16 A (M x K) and B (K x N), the
    same on every rank for `seed`, and the f32 product A B that the ranks' partials sum to."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    a_full = torch.randn(M, K, generator=generator, device="cuda").to(torch.bfloat16)
    b_full = torch.randn(K, N, generator=generator, device="cuda").to(torch.bfloat16)
    shard = slice(rank * K // world, (rank + 1) * K // world)
    return (a_full[:, shard].contiguous(), b_full[shard].contiguous(),
            a_full.float() @ b_full.float())


def torch_on_gpu():
    """PyTorch where it and a GPU are there; else None, having printed why the test skips."""
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        return None
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        print("SKIP: no GPU")
        return None
    return torch


def launch_ranks(script, ranks=RANKS, arguments=()):
    """Starts `ranks` ranks of `script` (given `arguments`) under torch.distributed.run, one per
    GPU, or, with MKC_TEST_SHARED_GPU=1 on a machine with fewer GPUs, taking turns on them;
    returns their exit status."""
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed")
        return SKIPPED
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if os.environ.get("MKC_TEST_SHARED_GPU") == "1":
        # The variant of a test for machines with too few GPUs: its ranks take turns on them.
        if gpus == 0 or gpus >= ranks:
            print(f"SKIP: {gpus} GPUs: the ranks need not share, the test without sharing runs")
            return SKIPPED
        os.environ["MKC_SHARE_GPU"] = "1"
    elif gpus < ranks:
        print(f"SKIP: needs {ranks} GPUs, this machine has {gpus}")
        return SKIPPED
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={ranks}", script, *arguments]).returncode


def run_topologies(script, topologies, networks, before=None):
    """Runs `script` once per topology ("NODESxGPUS") in a job of its own ranks (MKC_TEST_TOPOLOGY
    says which; across nodes, ranks of this host told they are nodes, with the environment
    `networks` gives the topology), the ranks taking turns on fewer GPUs; `before` runs first.
    Returns the first failing job's exit status, 0, or SKIPPED without torch or a GPU."""
    torch = torch_on_gpu()
    if not torch:
        return SKIPPED
    devices = torch.cuda.device_count()
    if before:
        before()
    status = 0
    for topology in topologies:
        nodes, gpus = (int(x) for x in topology.split("x"))
        environment = dict(os.environ, MKC_TEST_TOPOLOGY=topology,
                           MKC_TEST_SHARED_GPU="1" if devices < nodes * gpus else "0",
                           **networks.get(topology, {}))
        if nodes > 1:
            environment["MKC_GPUS_PER_NODE"] = str(gpus)
        done = subprocess.run([sys.executable, script, "--launch", str(nodes * gpus)],
                              env=environment)
        status = status or done.returncode
    return status


def script_main(script, rank_main, main):
    """What a script of run_topologies runs as: a rank (RANK set), the launcher of one job's
    ranks (--launch N; a world of one needs no launcher), or `main`."""
    if "RANK" in os.environ:
        return rank_main()
    if len(sys.argv) == 3 and sys.argv[1] == "--launch":
        ranks = int(sys.argv[2])
        if ranks == 1:
            return subprocess.run([sys.executable, script],
                                  env=dict(os.environ, RANK="0", LOCAL_RANK="0",
                                           WORLD_SIZE="1")).returncode
        return launch_ranks(script, ranks)
    return main()


LOOPBACK_FABRIC = {"MKC_NET": "fabric", "MKC_NET_PROVIDER": "tcp", "MKC_NET_ADDRESS": "127.0.0.1"}


def topologies_main(script, rank_main, default_topologies):
    """script_main for a script whose job per topology (MKC_TEST_TOPOLOGIES, else
    `default_topologies`, "1x1,1x2,...") links its nodes by libfabric tcp over loopback."""
    def main():
        topologies = os.environ.get("MKC_TEST_TOPOLOGIES", default_topologies).split(",")
        return run_topologies(script, topologies, {t: LOOPBACK_FABRIC for t in topologies})
    return script_main(script, rank_main, main)


def finish(torch, runtime):
    """A rank's exit status once its checks ran: waits for the GPU, closes the runtime."""
    torch.cuda.synchronize()
    runtime.close()
    return 1 if failures else 0


def settle(torch, runtime, what):
    """torch.cuda.synchronize() with a deadline (MKC_TEST_LAUNCH_TIMEOUT seconds, 120 unless
    set): a launch that never finishes is a FAIL naming `what` and whatever the runtime knows
    (a wait that gave up names its flag), and the rank exits at once instead of hanging its job."""
    seconds = float(os.environ.get("MKC_TEST_LAUNCH_TIMEOUT", "120"))
    done = torch.cuda.Event()
    done.record()
    deadline = time.monotonic() + seconds
    while not done.query():
        if time.monotonic() > deadline:
            try:
                runtime.check()
                known = "no wait of mkc's gave up"
            except Exception as error:  # mkc.Error, whose module the caller imported
                known = str(error)
            check(False, f"{what}: the GPU had not finished after {seconds:g} s ({known})")
            os._exit(1)
        time.sleep(0.001)


def tolerance_of(reference, partials=()):
    """Each element's tolerance: 2^-7 relative plus rms/64 absolute; a result summed from bf16
    `partials` (their f32 values) also gets 2^-8 of sum |P_i| for each of them: every rounding to
    bf16 of a partial or of a partial sum costs up to that."""
    tolerance = reference.abs() * 2**-7 + reference.pow(2).mean().sqrt() / 64
    if partials:
        tolerance += sum(partial.abs() for partial in partials) * (len(partials) * 2**-8)
    return tolerance


def within_tolerance(result, reference, partials=()):
    """Whether `result` is `reference` within tolerance_of, its largest error and least
    tolerance. NaN, the poison, is never within."""
    error = (result.float() - reference).abs()
    tolerance = tolerance_of(reference, partials)
    if error.numel() == 0:
        return True, 0.0, float("inf")
    return (bool((error <= tolerance).all()), error.nan_to_num(float("inf")).max().item(),
            tolerance.min().item())


def where_wrong(result, reference, partials=()):
    """Where `result` is out of tolerance: how many elements (how many NaN, the poison: never
    written), and which 128 x 128 blocks of a matrix, so that a failure points at tiles."""
    wrong = ~((result.float() - reference).abs() <= tolerance_of(reference, partials))
    text = f"{int(wrong.sum())} of {wrong.numel()} wrong, {int(result.float().isnan().sum())} NaN"
    if wrong.dim() == 2:
        at = wrong.nonzero() // 128
        blocks = (at[:, 0] * wrong.shape[1] + at[:, 1]).unique().tolist()  # sorted
        named = [(b // wrong.shape[1], b % wrong.shape[1]) for b in blocks[:12]]
        text += f"; {len(blocks)} 128 x 128 blocks (row, column): {named}"
    return text


def close_to(result, reference, label, partials=()):
    """Checks `result` against `reference` (within_tolerance); a failure says where."""
    ok, error, tolerance = within_tolerance(result, reference, partials)
    where = "" if ok else f"; {where_wrong(result, reference, partials)}"
    check(ok, f"{label} (max error {error:.3g}, tolerance at least {tolerance:.3g}{where})")


def same_on_every_rank(tensor, label):
    """Checks that every rank holds `tensor` bit for bit (a weighted checksum of its bits, gathered
    over gloo)."""
    import torch
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo")
    bits = tensor.contiguous().view(torch.int16).flatten().to(torch.int64)
    weights = torch.arange(1, bits.numel() + 1, device=bits.device, dtype=torch.int64) % 65521
    digest = torch.stack([bits.sum(), (bits * weights).sum()]).cpu()
    digests = [torch.empty_like(digest) for _ in range(dist.get_world_size())]
    dist.all_gather(digests, digest)
    check(all(torch.equal(d, digests[0]) for d in digests), f"{label} is the same on every rank")


def compiler_options():
    """The compiler options the op is tested with: MKC_TEST_COMPILER_OPTIONS, mkc's flags as
    "NAME=VALUE;..." ("all-reduce-copy-engine=1"), or none."""
    text = os.environ.get("MKC_TEST_COMPILER_OPTIONS", "")
    return dict(item.split("=", 1) for item in text.split(";") if item) or None


def rank_main():
    import torch

    import mkc

    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    rank, world = runtime.rank, runtime.world_size
    op = runtime.compile(mkc.library_program("gemm_allreduce"), M=M, N=N, K=K,
                         options=compiler_options())
    check(op.arguments[2].symmetric, f"rank {rank}: {op!r}")

    a, b, reference = row_parallel_operands(torch, rank, world, M, N, K, SEED)

    c = runtime.empty((M, N), torch.bfloat16)
    c_view = c.torch()
    check(c_view.dtype == torch.bfloat16 and c_view.data_ptr() == c.data_ptr()
          and tuple(c_view.shape) == (M, N), f"rank {rank}: c.torch() views the symmetric memory")
    c_view.fill_(float("nan"))
    torch.cuda.synchronize()
    runtime.barrier()  # no rank's C is poisoned after a peer wrote it

    op(a, b, c)
    torch.cuda.synchronize()
    close_to(c_view, reference, f"rank {rank}: C = A B")
    same_on_every_rank(c_view, f"rank {rank}: C")

    # 2 B is exact in bf16, so C is 2 A B.
    side = torch.cuda.Stream()
    b_twice = b * 2
    side.wait_stream(torch.cuda.current_stream())
    op(a, b_twice, c, stream=side)
    side.synchronize()
    close_to(c_view, 2 * reference, f"rank {rank}: C = A (2 B), launched on another stream")

    # Not in place: the owner GPU of each tile sums the partials staged for it in an intra_reduce
    # role and republishes the tile (with one-shot-all-reduce, every GPU sums every tile).
    roles = runtime.compile(mkc.library_program("gemm_allreduce"), M=M, N=N, K=K,
                            options={**(compiler_options() or {}), "in-place-all-reduce": False})
    check("intra_reduce" in roles.sm_split, f"rank {rank}: not in place, split {roles.sm_split}")

    def poisoned_launch(what):
        c_view.fill_(float("nan"))
        torch.cuda.synchronize()
        runtime.barrier()
        roles(a, b, c)
        torch.cuda.synchronize()
        close_to(c_view, reference, f"rank {rank}: C = A B, {what}")

    poisoned_launch("not in place")

    # The SM controller (MKC_SM_CONTROLLER=on) times the first launches at other splits: each
    # still right; then it settles, within 10 launches, and the next compile of the same kernel
    # starts at its answer, kept beside the JIT's cache.
    compiled_split = roles.roles
    for launch in range(12):
        poisoned_launch(f"launch {launch} under the SM controller, split {roles.roles}")
    settled = roles.roles
    check([kind for kind, _ in settled] == [kind for kind, _ in compiled_split] and
          sum(ctas for _, ctas in settled) == sum(ctas for _, ctas in compiled_split),
          f"rank {rank}: the controller settled at {settled} (compiled {compiled_split})")
    if os.environ.get("MKC_SM_CONTROLLER") == "on":
        again = runtime.compile(mkc.library_program("gemm_allreduce"), M=M, N=N, K=K,
                                options={**(compiler_options() or {}),
                                         "in-place-all-reduce": False})
        check(again.roles == settled, f"rank {rank}: the next compile starts at the controller's "
                                      f"answer {settled}, not {again.roles}")
        again.close()

    # The same kernel at other splits of its grid, a launch parameter (nothing compiled again):
    # every role but compute starved to one CTA (or one cluster), then the grid shared evenly,
    # then the compiler's split again; each right.
    default = [ctas for _, ctas in roles.roles]
    grid, unit = sum(default), 2 if all(ctas % 2 == 0 for ctas in default) else 1
    starved = [grid - unit * (len(default) - 1)] + [unit] * (len(default) - 1)
    share = grid // len(default) // unit * unit
    even = [grid - share * (len(default) - 1)] + [share] * (len(default) - 1)
    for split in (starved, even, default):
        roles.set_sm_split(split)
        check([ctas for _, ctas in roles.roles] == split, f"rank {rank}: split {roles.roles}")
        poisoned_launch(f"at the split {roles.roles}")
    check_raises(mkc.Error, f"the kernel's grid is {grid}",
                 lambda: roles.set_sm_split([grid] + [unit] * (len(default) - 1)),
                 f"rank {rank}: a split of more CTAs than the grid")
    roles.close()

    # Replayed from a CUDA graph: each replay is a launch with an epoch of its own.
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op(a, b, c)
    for replay in range(3):
        c_view.fill_(float("nan"))
        torch.cuda.synchronize()
        runtime.barrier()
        graph.replay()
        torch.cuda.synchronize()
        close_to(c_view, reference, f"rank {rank}: C = A B, graph replay {replay}")

    check_raises(ValueError, "gemm_allreduce argument 0: expected bf16[1024,2048], got float32",
                 lambda: op(a.float(), b, c), f"rank {rank}: a wrong dtype")
    check_raises(mkc.Error, "symmetric memory", lambda: op(a, b, torch.empty_like(c_view)),
                 f"rank {rank}: C outside symmetric memory")

    torch.cuda.synchronize()
    runtime.close()
    torch.distributed.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(rank_main() if "RANK" in os.environ else launch_ranks(__file__))
