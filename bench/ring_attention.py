#!/usr/bin/env python3
"""Ring attention (lib/ring_attention.mlir, lib/ring_attention_causal.mlir) through the Python
runtime, against PyTorch's attention in the same run: a benchmark, not a timed test.

At 1x1, where ring attention is flash attention, each shape of issue 25's table (B, H, S, D;
--shapes) causal and not, bf16: mkc's op against SDPA's cuDNN and flash backends, median of
--repeat samples timed with CUDA events after warm-up, each the mean of --batch calls in a row (so
that the host's cost of a launch overlaps the calls before it), inputs rotating over sets larger
than the L2 together; TFLOP/s = 4 B H S^2 D (halved when causal) / time, and the ratios. Every variant is
checked against cuDNN's output before it is timed. Several GPUs (one rank each, under torchrun)
are issue 29's runs: each rank times the op on its shard with the slowest rank's time kept, and the
baselines are an all-gather of K and V then SDPA (cuDNN) on the rank's queries, and a ring of SDPA
calls whose shards travel by P2P sends while the previous one is used.

Prints a table; --csv and --plot keep it. Exits 77 without torch or a GPU.
"""

import argparse
import math
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "bench"))

try:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)

from attention_engine import TABLE, plot_tflops, time_ms, write_csv  # noqa: E402


def allgather_sdpa(q, k, v, causal, world, rank):
    """The baseline of several GPUs: every rank's K and V gathered, then SDPA on this rank's
    queries against the keys up to them."""
    ks = [torch.empty_like(k) for _ in range(world)]
    vs = [torch.empty_like(v) for _ in range(world)]
    dist.all_gather(ks, k)
    dist.all_gather(vs, v)
    keys, values = torch.cat(ks, dim=2), torch.cat(vs, dim=2)
    if not causal:
        return F.scaled_dot_product_attention(q, keys, values)
    s = q.shape[2]
    mask = torch.ones(s, s * world, device=q.device, dtype=torch.bool).tril(rank * s)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)


def ring_sdpa(q, k, v, causal, world, rank):
    """The other baseline: the shards pass around the ring by P2P sends while SDPA folds in the
    one at hand; partial results merged by their log-sum-exp in f32."""
    out, lse = None, None
    kv = torch.stack([k, v])
    for step in range(world):
        source = (rank - step) % world
        if step + 1 < world:
            incoming = torch.empty_like(kv)
            ops = [dist.P2POp(dist.isend, kv, (rank + 1) % world),
                   dist.P2POp(dist.irecv, incoming, (rank - 1) % world)]
            requests = dist.batch_isend_irecv(ops)
        if not causal or source <= rank:
            o, l = torch.ops.aten._scaled_dot_product_cudnn_attention(
                q, kv[0], kv[1], None, True, 0.0, causal and source == rank, False)[:2]
            o, l = o.float(), l.float().unsqueeze(-1)
            if out is None:
                out, lse = o, l
            else:
                top = torch.maximum(lse, l)
                a, b = torch.exp(lse - top), torch.exp(l - top)
                out = (out * a + o * b) / (a + b)
                lse = top + torch.log(a + b)
        if step + 1 < world:
            for request in requests:
                request.wait()
            kv = incoming
    return out.to(q.dtype)


def bench(runtime, mkc, shapes, repeat, csv_path, plot_path, options, batch):
    rank, world = runtime.rank, runtime.world_size
    properties = torch.cuda.get_device_properties(runtime.device)
    baselines = (("cudnn", "flash") if world == 1 else ("allgather_sdpa", "ring_sdpa"))
    rows = []
    if rank == 0:
        print(f"{world} GPU(s), {torch.cuda.get_device_name()}, torch {torch.__version__}, "
              f"cuDNN {torch.backends.cudnn.version()}")
        print(f"{'B,H,S,D':>18} {'causal':>6} {'mkc':>7}" +
              "".join(f" {name:>14}" for name in baselines) +
              "".join(f" {'mkc/' + name:>19}" for name in baselines) + "   (TFLOP/s)")
    for B, H, S, D in shapes:
        for causal in (False, True):
            name = "ring_attention_causal" if causal else "ring_attention"
            op = runtime.compile(mkc.library_program(name), B=B, H=H, S=S, D=D, options=options)
            s = S // world
            set_bytes = 4 * B * H * s * D * 2
            sets = []
            for seed in range(max(2, -(-3 * properties.L2_cache_size // set_bytes))):
                g = torch.Generator(device="cuda").manual_seed(seed * world + rank)
                q, k, v = (torch.randn(B, H, s, D, device="cuda", dtype=torch.bfloat16,
                                       generator=g) for _ in range(3))
                handles = []
                for index, tensor in enumerate((q, k, v)):
                    if op.arguments[index].symmetric:
                        handle = runtime.empty(list(tensor.shape), tensor.dtype)
                        handle.torch().copy_(tensor)
                        tensor = handle
                    handles.append(tensor)
                o = runtime.empty([B, H, s, D], torch.bfloat16) if op.arguments[3].symmetric \
                    else torch.empty(B, H, s, D, device="cuda", dtype=torch.bfloat16)
                sets.append((q, k, v, handles, o))

            def view(o):
                return o.torch() if hasattr(o, "torch") else o

            def ours(q, k, v, handles, o):
                op(*handles, o)

            def cudnn(q, k, v, handles, o):
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            def flash(q, k, v, handles, o):
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            variants = {"mkc": ours}
            if world == 1:
                variants.update(cudnn=cudnn, flash=flash)
            else:
                variants.update(
                    allgather_sdpa=lambda q, k, v, h, o: allgather_sdpa(q, k, v, causal, world,
                                                                        rank),
                    ring_sdpa=lambda q, k, v, h, o: ring_sdpa(q, k, v, causal, world, rank))
            # Every variant right before it is timed: against the gathered cuDNN attention.
            q, k, v, handles, o = sets[0]
            view(o).fill_(float("nan"))
            runtime.barrier()
            ours(*sets[0])
            expected = cudnn(*sets[0]) if world == 1 else allgather_sdpa(q, k, v, causal, world,
                                                                          rank)
            for label, variant in variants.items():
                got = view(o) if label == "mkc" else variant(*sets[0])
                error = (got.float() - expected.float()).abs().nan_to_num(float("inf")).max()
                if not error.item() <= 0.05:
                    raise SystemExit(f"rank {rank}: {label} wrong at {B},{H},{S},{D} "
                                     f"causal={causal}: {error.item():.3g}")
            flops = 4 * B * H * S * S * D / (2 if causal else 1)
            ms = {}
            for label, variant in variants.items():
                runtime.barrier()
                mine = time_ms(variant, sets, repeat, batch=batch)
                # The slowest rank's time.
                if world > 1:
                    t = torch.tensor([mine], device="cuda")
                    dist.all_reduce(t, op=dist.ReduceOp.MAX)
                    mine = t.item()
                ms[label] = mine
            op.close()
            tflops = {label: flops / t / 1e9 for label, t in ms.items()}
            row = {"B": B, "H": H, "S": S, "D": D, "causal": int(causal), "world": world,
                   **{f"{n}_ms": round(t, 4) for n, t in ms.items()},
                   **{f"{n}_tflops": round(t, 1) for n, t in tflops.items()},
                   **{f"mkc_over_{n}": round(ms[n] / ms["mkc"], 3) for n in baselines}}
            rows.append(row)
            if rank == 0:
                print(f"{f'{B},{H},{S},{D}':>18} {'yes' if causal else 'no':>6} "
                      f"{tflops['mkc']:7.0f}" +
                      "".join(f" {tflops[n]:14.0f}" for n in baselines) +
                      "".join(f" {row['mkc_over_' + n]:19.3f}" for n in baselines), flush=True)
    if rank == 0:
        write_csv(rows, csv_path)
        plot_tflops(rows, ("mkc",) + baselines, plot_path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--batch", type=int, default=8,
                        help="calls in a row per timed sample (1: each call alone, with the "
                             "host's cost of its launch)")
    parser.add_argument("--csv")
    parser.add_argument("--plot")
    parser.add_argument("--shapes", help="B,H,S,D;... with S the whole sequence (issue 25's "
                                         "table by default)")
    parser.add_argument("--options", default="",
                        help="mkc's flags for the op, NAME=VALUE;... (sm-split=compute=132)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no GPU")
        return 77
    import mkc

    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    if runtime.world_size > 1:
        dist.init_process_group("nccl")
    shapes = TABLE if not args.shapes else [tuple(int(x) for x in s.split(","))
                                            for s in args.shapes.split(";")]
    options = dict(item.split("=", 1) for item in args.options.split(";") if item) or None
    bench(runtime, mkc, shapes, args.repeat, args.csv, args.plot, options, args.batch)
    runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
