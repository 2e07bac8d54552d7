#!/usr/bin/env python3
"""GEMM + AllReduce, side by side: mkc's fused kernel against cuBLAS and NCCL.

The row-parallel linear of tensor parallelism: rank r holds A_r = A[:, K_r] and B_r = B[K_r, :]
(bf16) and every rank ends with C = sum_r A_r B_r. Timed in the same processes, the same way:

  mkc         lib/gemm_allreduce.mlir, one persistent kernel, compiled by mkc's runtime
  sequential  torch.matmul (cuBLAS), then torch.distributed.all_reduce (NCCL)
  overlap     the GEMM in row chunks, each chunk's all-reduce on a second stream as soon as it
              is computed; the fastest of 2, 4 and 8 chunks
  gemm, allreduce  each alone, for the bound max(gemm, allreduce) that overlap can reach
  mkc_gemm    the fused program's tile loop without its all-reduce (each rank stores its partial):
              mkc's own bound, to see what the communication costs the fused kernel

With --network emulated|fabric, the ranks act as nodes of --gpus-per-node GPUs each (default 1;
MKC_GPUS_PER_NODE), so that mkc's tiles cross the network proxy, after the GPUs of a node have
reduced them over NVLink: the emulated NIC (--bandwidth-gbps, --latency-us) or
libfabric's tcp provider over loopback. Two more variants then use the same transport as mkc:

  mkc_sequential  torch.matmul, then lib/allreduce.mlir (mkc's all-reduce alone) over it
  mkc_allreduce   that all-reduce alone

and with fabric, NCCL is forced onto its socket transport (NCCL_P2P_DISABLE=1,
NCCL_SHM_DISABLE=1 over lo), so that cuBLAS -> NCCL crosses loopback TCP too.

Each variant waits `--cooldown-s` seconds idle (default 0), runs for `--warmup-s` seconds (0.5;
at least `--warmup` times), then `--iters` times back to back, each iteration between two CUDA
events; the time is the median, taken on the slowest rank. Under the board's power cap the
clocks fall as the GPU heats for a few hundred milliseconds: by default every variant is timed
at the clocks of a sustained load; with --cooldown-s 1 --warmup-s 0, at those of a burst after
a pause. Either way no variant gains from its place in line. Inputs rotate among as many
sets as make 3x the L2 cache. The fused result is checked against the sequential one first.
Each --variant LABEL:OPTIONS (repeatable) times the fused program once more, compiled with other
compiler options (mkc's flags: 'c1:gemm-cluster=1', 'roles:sm-split=compute=120,intra_reduce=12'),
in the same processes and regime, checked first; it is printed as "M=...: mkc LABEL: ... ms".

    python3 bench/gemm_allreduce.py [--sizes 2048,4096,8192,16384] [--network ...] [--out DIR]

starts itself under torch.distributed.run, one rank per GPU (--gpus), and writes
gemm_allreduce[_NETWORK].csv and .png to --out (default bench/results).
"""

import argparse
import csv
import datetime
import os
import statistics
import subprocess
import sys
import time

# NVLink multicast (NVLS) stays off on the shared GPU machines.
for variable in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
    os.environ.setdefault(variable, "0" if variable == "NCCL_NVLS_ENABLE" else "1")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# lib/gemm_allreduce.mlir with its all-reduce left out: the same tiles, order and engine.
GEMM_ALONE = """
mk.program @gemm_alone [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, shard 1 over world>,
    %B: !mk.tensor<[K, N], bf16, shard 0 over world>,
    %C: !mk.tensor<[M, N], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %C tiles [128, 256] masked : !mk.tensor<[M, N], bf16, replicated> {
    %partial = mk.matmul %A[%m, :], %B[:, %n]
        : !mk.tensor<[M, K], bf16, shard 1 over world>, !mk.tensor<[K, N], bf16, shard 0 over world>
        -> !mk.tile<[128, 256], f32>
    %tile = mk.convert %partial : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.store %tile, %C[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
  }
}
"""
sys.path.insert(0, os.path.join(REPO, "python"))


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="2048,4096,8192,16384", help="values of M")
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--k", type=int, default=8192, help="K over all ranks")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--warmup-s", type=float, default=0.5,
                        help="seconds each variant runs before it is timed")
    parser.add_argument("--cooldown-s", type=float, default=0,
                        help="seconds idle before each variant's warm-up")
    parser.add_argument("--trace", default=None,
                        help="CSV of when each variant ran (rank 0), to line up with a log of "
                             "clocks and power (nvidia-smi --query-gpu=timestamp,...)")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--unchecked", action="store_true",
                        help="time a fused result that is off too (a library variant that leaves "
                             "a stage out, to see what the stage costs), saying by how much")
    parser.add_argument("--gpus", type=int, default=None, help="ranks (default: every GPU)")
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    parser.add_argument("--network", choices=("none", "emulated", "fabric"), default="none",
                        help="run the ranks as nodes of --gpus-per-node GPUs, over this network")
    parser.add_argument("--gpus-per-node", type=int, default=1,
                        help="with --network: GPUs of each node, which reduce over NVLink first "
                             "(default 1)")
    parser.add_argument("--bandwidth-gbps", default="50", help="emulated NIC's bandwidth")
    parser.add_argument("--latency-us", default="3", help="emulated NIC's latency")
    parser.add_argument("--timeout", type=float, default=0,
                        help="seconds after which a rank prints every thread's stack and exits "
                             "(0: never)")
    parser.add_argument("--variant", action="append", default=[], type=variant,
                        metavar="LABEL:OPTIONS",
                        help="also time mkc compiled with these compiler options (mkc's flags, "
                             "';'-separated NAME=VALUE), checked first; repeatable (e.g. "
                             "'c1:gemm-cluster=1', 'roles:sm-split=compute=120,intra_reduce=12')")
    return parser.parse_args()


def launch(arguments):
    """Runs this script under torch.distributed.run, one rank per GPU."""
    import torch

    gpus = arguments.gpus or torch.cuda.device_count()
    if gpus < 2:
        sys.exit(f"gemm_allreduce: needs 2 or more GPUs, this machine has {gpus}")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={gpus}", __file__] + sys.argv[1:]
    environment = dict(os.environ)
    if arguments.network != "none":
        if arguments.gpus_per_node < 1 or gpus % arguments.gpus_per_node or \
                gpus == arguments.gpus_per_node:
            sys.exit(f"gemm_allreduce: --gpus-per-node {arguments.gpus_per_node} must divide "
                     f"the {gpus} ranks into 2 or more nodes")
        environment.update(MKC_GPUS_PER_NODE=str(arguments.gpus_per_node),
                           MKC_NET=arguments.network)
    if arguments.network == "emulated":
        environment.update(MKC_NET_BANDWIDTH_GBPS=arguments.bandwidth_gbps,
                           MKC_NET_LATENCY_US=arguments.latency_us)
    if arguments.network == "fabric":
        environment.update(MKC_NET_PROVIDER="tcp", MKC_NET_ADDRESS="127.0.0.1",
                           NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1", NCCL_SOCKET_IFNAME="lo")
    return subprocess.run(command, env=environment).returncode


class Bench:
    """The timing shared by every variant, on this rank's current stream."""

    def __init__(self, torch, dist, arguments):
        self.torch, self.dist = torch, dist
        self.warmup, self.warmup_s = arguments.warmup, arguments.warmup_s
        self.cooldown_s, self.iters = arguments.cooldown_s, arguments.iters
        # Rank 0's record of when each variant ran (idle, warm-up and timed runs), to line up
        # with a log of the GPUs' clocks and power.
        self.trace = None
        if arguments.trace and int(os.environ["RANK"]) == 0:
            self.trace = open(arguments.trace, "w", buffering=1)
            self.trace.write("variant,start_unix_s,end_unix_s\n")

    def medians_ms(self, steps, label):
        """{name: the median over ranks' slowest of `step(i)`'s time, iteration i back to back},
        for each of `steps` ({name: step}); with --trace, when each ran ("label name")."""
        times = {}
        for name, step in steps.items():
            began = time.time()
            times[name] = self.median_ms(step)
            if self.trace:
                self.trace.write(f"{label} {name},{began:.3f},{time.time():.3f}\n")
        return times

    def median_ms(self, step):
        """The median over ranks' slowest of `step(i)`'s time, iteration i back to back, after
        the idle time and warm-up that --cooldown-s and --warmup-s ask for."""
        torch = self.torch
        torch.cuda.synchronize()
        time.sleep(self.cooldown_s)
        # Batches of warmup runs until every rank has run for warmup_s.
        begin = time.monotonic()
        while True:
            for i in range(self.warmup):
                step(i)
            torch.cuda.synchronize()
            enough = torch.tensor([int(time.monotonic() - begin >= self.warmup_s)], device="cuda")
            self.dist.all_reduce(enough, op=self.dist.ReduceOp.MIN)
            if enough.item():
                break
        self.dist.barrier()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(self.iters)]
        for i, (start, stop) in enumerate(events):
            start.record()
            step(i)
            stop.record()
        torch.cuda.synchronize()
        median = torch.tensor([statistics.median(s.elapsed_time(e) for s, e in events)],
                              device="cuda")
        self.dist.all_reduce(median, op=self.dist.ReduceOp.MAX)
        return median.item()


def variant(text):
    """--variant's LABEL:NAME=VALUE;... as (label, {name: value})."""
    label, colon, options = text.partition(":")
    if not colon or not label or not options:
        raise argparse.ArgumentTypeError(f"{text!r} is not LABEL:NAME=VALUE;...")
    pairs = {}
    for item in filter(None, options.split(";")):
        name, equals, value = item.partition("=")
        if not equals:
            raise argparse.ArgumentTypeError(f"{item!r} in {text!r} is not NAME=VALUE")
        pairs[name] = value
    return label, pairs


def rank_main(arguments):
    import faulthandler

    import torch
    import torch.distributed as dist

    if arguments.timeout:
        faulthandler.dump_traceback_later(arguments.timeout, exit=True)

    if arguments.network != "none":
        os.environ["MKC_DEVICE"] = os.environ["LOCAL_RANK"]  # the host's GPUs, one per rank
    import mkc

    runtime = mkc.Runtime(symmetric_bytes=8 << 30)
    torch.cuda.set_device(runtime.device)
    device = torch.device("cuda", runtime.device)
    dist.init_process_group("nccl", device_id=device)
    # NCCL connects on its first collective, with CUDA calls that may wait for the device: done
    # here, before a fused kernel can be waiting for the proxy's own CUDA calls.
    dist.all_reduce(torch.ones(1, device=device))
    torch.cuda.synchronize()
    rank, world = runtime.rank, runtime.world_size
    bench = Bench(torch, dist, arguments)
    properties = torch.cuda.get_device_properties(device)
    n, k = arguments.n, arguments.k
    k_rank = k // world
    rows = []
    for m in (int(size) for size in arguments.sizes.split(",")):
        set_bytes = (m * k_rank + k_rank * n) * 2
        sets = max(2, -(-3 * properties.L2_cache_size // set_bytes))
        generator = torch.Generator(device=device).manual_seed(1000 * rank + m)
        inputs = [(torch.randn(m, k_rank, device=device, dtype=torch.bfloat16,
                               generator=generator),
                   torch.randn(k_rank, n, device=device, dtype=torch.bfloat16,
                               generator=generator)) for _ in range(sets)]
        op = runtime.compile(mkc.library_program("gemm_allreduce"), M=m, N=n, K=k)
        fused_c = runtime.empty((m, n), torch.bfloat16)
        c = torch.empty(m, n, device=device, dtype=torch.bfloat16)
        stream = torch.cuda.current_stream()
        communication = torch.cuda.Stream(device=device)

        def on_inputs(compiled_op):
            """A step that runs `compiled_op` on input set i into fused_c."""
            return lambda i: compiled_op(*inputs[i % sets], fused_c, stream=stream)

        fused = on_inputs(op)

        def gemm(i):
            a, b = inputs[i % sets]
            torch.matmul(a, b, out=c)

        def allreduce(i):
            dist.all_reduce(c)

        def sequential(i):
            gemm(i)
            dist.all_reduce(c)

        def overlap(chunks):
            def step(i):
                a, b = inputs[i % sets]
                # The chunks' all-reduces queue on the second stream, each after its GEMM.
                for j in range(chunks):
                    lo, hi = m * j // chunks, m * (j + 1) // chunks
                    torch.matmul(a[lo:hi], b, out=c[lo:hi])
                    communication.wait_stream(stream)
                    with torch.cuda.stream(communication):
                        dist.all_reduce(c[lo:hi])
                stream.wait_stream(communication)
            return step

        # Correctness first: the fused result against cuBLAS + NCCL on the same inputs; and what
        # one launch sends across nodes, once every rank's launch is done (so is every write).
        torch.cuda.synchronize()
        before = runtime.network_statistics().bytes
        fused(0)
        torch.cuda.synchronize()
        dist.barrier()
        network_mb = (runtime.network_statistics().bytes - before) / 1e6
        sequential(0)
        torch.cuda.synchronize()
        result = fused_c.torch().float()
        error = ((result - c.float()).norm() / c.float().norm()).item()
        if not error < 1e-2:
            message = f"rank {rank}: M={m}: the fused result is off by {error:.3g} (relative to cuBLAS + NCCL)"
            if not arguments.unchecked:
                raise SystemExit(message)
            print(f"{message}; timed anyway (--unchecked)", flush=True)

        steps = {"mkc": fused, "sequential": sequential, "gemm": gemm, "allreduce": allreduce}
        compiled = []  # closed once timed
        # The same program with other compiler choices, each checked like the default first.
        for label, options in arguments.variant:
            other = runtime.compile(mkc.library_program("gemm_allreduce"), M=m, N=n, K=k,
                                    options=options)
            a, b = inputs[0]
            other(a, b, fused_c, stream=stream)
            torch.cuda.synchronize()
            other_error = ((fused_c.torch().float() - c.float()).norm() / c.float().norm()).item()
            if not other_error < 1e-2:
                raise SystemExit(f"rank {rank}: M={m}, variant {label}: off by {other_error:.3g}")
            steps[f"mkc {label}"] = on_inputs(other)
            compiled.append(other)

        if arguments.network != "none":
            # The same transport as the fused op: cuBLAS into symmetric memory, then mkc's
            # all-reduce alone; checked like the fused op first.
            reduce = runtime.compile(mkc.library_program("allreduce"), M=m, N=n)
            partial, reduced = runtime.empty((m, n), torch.bfloat16), runtime.empty(
                (m, n), torch.bfloat16)

            def transport_allreduce(i):
                reduce(partial, reduced, stream=stream)

            def transport_sequential(i):
                a, b = inputs[i % sets]
                torch.matmul(a, b, out=partial.torch())
                reduce(partial, reduced, stream=stream)

            transport_sequential(0)
            torch.cuda.synchronize()
            sequential(0)  # the reference again: timing the all-reduce alone summed into c
            torch.cuda.synchronize()
            reduce_error = ((reduced.torch().float() - c.float()).norm() / c.float().norm()).item()
            if not reduce_error < 1e-2:
                raise SystemExit(f"rank {rank}: M={m}: mkc's all-reduce is off by "
                                 f"{reduce_error:.3g}")
            steps["mkc_sequential"] = transport_sequential
            steps["mkc_allreduce"] = transport_allreduce
            compiled.append(reduce)
        alone = runtime.compile(GEMM_ALONE, M=m, N=n, K=k)
        steps["mkc_gemm"] = on_inputs(alone)
        compiled.append(alone)
        for chunks in (2, 4, 8):
            steps[f"overlap{chunks}"] = overlap(chunks)
        times = bench.medians_ms(steps, f"M={m}")
        for other in compiled:
            other.close()
        if rank == 0:
            for name in steps:
                if name.startswith("mkc "):
                    print(f"M={m}: {name}: {times[name]:.3f} ms", flush=True)
        best_chunks = min((2, 4, 8), key=lambda chunks: times[f"overlap{chunks}"])
        times["overlap"] = times[f"overlap{best_chunks}"]
        split = ",".join(f"{role}={ctas}" for role, ctas in op.sm_split.items())
        rows.append({"M": m, "N": n, "K": k, "ranks": world, "error": error,
                     "overlap_chunks": best_chunks, "sm_split": split,
                     "network_mb": network_mb, **times})
        if rank == 0:
            print(f"M={m}: mkc {times['mkc']:.3f} ms ({split}"
                  + (f", {network_mb:.1f} MB a launch across nodes from rank 0" if network_mb
                     else "")
                  + f"), sequential {times['sequential']:.3f} ms, "
                  f"overlap({best_chunks}) {times['overlap']:.3f} ms", flush=True)
        op.close()
        del inputs
    if rank == 0:
        regime = f"{arguments.cooldown_s:g} s idle, {arguments.warmup_s:g} s warm-up"
        report(rows, arguments.out, properties.name, runtime.nodes, runtime.local_world_size,
               arguments.network, regime)
    dist.barrier()
    dist.destroy_process_group()
    runtime.close()


def report(rows, out, gpu, nodes, gpus_per_node, network, regime):
    """Writes the CSV and the plot, and prints the table with the ratios."""
    os.makedirs(out, exist_ok=True)
    across = network != "none"
    columns = ["M", "N", "K", "ranks", "mkc", "sequential", "overlap", "overlap_chunks", "gemm",
               "allreduce", "mkc_gemm"]
    columns += (["mkc_sequential", "mkc_allreduce", "network_mb"] if across else [])
    columns += ["sm_split", "error"]
    name = "gemm_allreduce" + (f"_{network}" if across else "")
    if across and gpus_per_node > 1:
        name += f"_{nodes}x{gpus_per_node}"
    path = os.path.join(out, f"{name}.csv")
    where = (f"{nodes} nodes x {gpus_per_node} {gpu} over {network}" if across
             else f"{gpus_per_node} x {gpu}")
    with open(path, "w", newline="") as file:
        file.write(f"# {datetime.date.today()} {where}; times in ms (median after {regime})\n")
        writer = csv.DictWriter(file, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)

    print(f"\nGEMM+AllReduce, {where}, N={rows[0]['N']}, K={rows[0]['K']} (ms after {regime}; "
          f"ratio = baseline / mkc, > 1: mkc is faster)")
    header = (f"{'M':>6} {'mkc':>8} {'seq':>8} {'overlap':>8} {'gemm':>8} {'AR':>8} "
              f"{'mkc gemm':>8} {'seq/mkc':>8} {'ovl/mkc':>8} {'bound/mkc':>9} {'mkc TF/s':>9}")
    print(header)
    for row in rows:
        bound = max(row["gemm"], row["allreduce"])
        flops = 2 * row["M"] * row["N"] * row["K"] / row["ranks"]
        print(f"{row['M']:>6} {row['mkc']:>8.3f} {row['sequential']:>8.3f} "
              f"{row['overlap']:>8.3f} {row['gemm']:>8.3f} {row['allreduce']:>8.3f} "
              f"{row['mkc_gemm']:>8.3f} {row['sequential'] / row['mkc']:>8.2f} "
              f"{row['overlap'] / row['mkc']:>8.2f} {bound / row['mkc']:>9.2f} "
              f"{flops / row['mkc'] / 1e9:>9.1f}")
    if across:
        print(f"same transport as mkc: {'M':>6} {'mkc seq':>8} {'mkc AR':>8} {'mseq/mkc':>8}")
        for row in rows:
            print(f"{'':>22}{row['M']:>6} {row['mkc_sequential']:>8.3f} "
                  f"{row['mkc_allreduce']:>8.3f} {row['mkc_sequential'] / row['mkc']:>8.2f}")
    print(f"\nwrote {path}")
    plot(rows, os.path.join(out, f"{name}.png"), where,
         ("mkc_sequential",) if across else ())


def plot(rows, path, where, transport_baselines):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [row["M"] for row in rows]
    figure, (times, ratios) = plt.subplots(1, 2, figsize=(11, 4))
    for variant in ("mkc", "sequential", "overlap", "gemm", "allreduce") + transport_baselines:
        times.plot(sizes, [row[variant] for row in rows], marker="o", label=variant)
    times.set(yscale="log", xlabel="M", ylabel="ms (median)", title=f"GEMM+AllReduce, {where}")
    for baseline in ("sequential", "overlap") + transport_baselines:
        ratios.plot(sizes, [row[baseline] / row["mkc"] for row in rows], marker="o",
                    label=f"{baseline} / mkc")
    ratios.axhline(1.0, color="gray", linewidth=0.8)
    ratios.set(xlabel="M", ylabel="speed-up of mkc", title="> 1: mkc is faster")
    for axes in (times, ratios):
        axes.set_xscale("log", base=2)
        axes.minorticks_off()
        axes.set_xticks(sizes, [str(size) for size in sizes])
        axes.legend()
        axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    arguments = parse_arguments()
    sys.exit(rank_main(arguments) if "RANK" in os.environ else launch(arguments))
