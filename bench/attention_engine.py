#!/usr/bin/env python3
"""The attention engine (mk/device/attention_engine.cuh) beside PyTorch's attention, in one process.

    python3 bench/attention_engine.py [--library PATH] [--check] [--repeat N] [--csv FILE]
                                      [--plot FILE] [--shapes B,H,S,D;...]

The engine's plain attention forward (test/device/kernels/attention_engine.cu, through
libmkc-attention-engine.so) on [B, H, S, D] tensors. Timing (the default): per shape of the
issue's table, causal and not, the engine and F.scaled_dot_product_attention's cuDNN and flash
backends on the same inputs (three copies, rotated, so that they come from HBM), each timed with
CUDA events after a warm-up, median of --repeat; TFLOP/s = 4 B H S^2 D (halved when causal) / time,
and the engine's rate over each backend's. Every timed engine result is checked first.

--check (the gpu/attention-engine test) times nothing: against an f32 reference (the math of
softmax(scale Q K^T) V and its log-sum-exp, key heads repeated for grouped-query attention), for
S in {1, 7, 128, 1000, 3000, 4096}, D in {64, 128}, (B, H, Hkv) in {(1, 1, 1), (2, 16, 16),
(1, 32, 8)}, causal and not, bf16 and f16, with the keys folded in as two sources (as a ring's
shards are), and with keys growing along the sequence (so that rows rescale their output after the
first blocks): outputs poisoned (NaN) before each of 3 launches; then
100 launches back to back and 10 replays of a CUDA graph of one. The engine's largest error must be
at most twice PyTorch's own 16-bit attention's (SDPA's default backend, against the same reference)
plus 1e-3, and the log-sum-exp within 1e-3 (relative). Exits 77 without torch or a GPU.
"""

import argparse
import csv
import ctypes
import math
import os
import statistics
import sys

try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_LIBRARY = os.path.join(HERE, "..", "build", "bench", "attention",
                               "libmkc-attention-engine.so")
DTYPES = {torch.bfloat16: 0, torch.float16: 1}
TABLE = [(4, 16, 4096, 128), (4, 16, 8192, 128), (1, 16, 16384, 128), (4, 16, 4096, 64),
         (1, 32, 3000, 128)]


class Engine:
    """libmkc-attention-engine.so: run() launches on the current stream."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.mkc_attention_engine_run.restype = ctypes.c_int
        self.lib.mkc_attention_engine_run.argtypes = (
            [ctypes.c_void_p] * 5 + [ctypes.c_int] * 8 + [ctypes.c_float, ctypes.c_int,
                                                          ctypes.c_void_p])
        self.lib.mkc_attention_engine_error.restype = ctypes.c_char_p

    def run(self, q, k, v, o, lse, causal, scale, split=0):
        B, H, Sq, D = q.shape
        Hkv, Skv = k.shape[1], k.shape[2]
        for t in (q, k, v, o, lse):
            assert t.is_contiguous()
        status = self.lib.mkc_attention_engine_run(
            q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
            DTYPES[q.dtype], B, H, Hkv, Sq, Skv, D, int(causal), scale, split,
            torch.cuda.current_stream().cuda_stream)
        if status != 0:
            raise RuntimeError(self.lib.mkc_attention_engine_error().decode())


def inputs(B, H, Hkv, S, D, dtype, seed, growing=False):
    """Normal Q, K and V; with `growing`, keys scaled up along the sequence (to 25x), so that a
    row's largest score outgrows the engine's reference for it (by more than 2^8) after its first
    blocks, and its output is rescaled there."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, H, S, D, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(B, Hkv, S, D, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(B, Hkv, S, D, device="cuda", dtype=dtype, generator=g)
    if growing:
        k = (k.float() * (1 + 24 * torch.arange(S, device="cuda") / S)[:, None]).to(dtype)
    return q, k, v


def reference(q, k, v, causal, scale):
    """O and the log-sum-exp in f32, a few heads at a time (the scores of all would not fit)."""
    H, Hkv, S = q.shape[1], k.shape[1], q.shape[2]
    kf = k.float().repeat_interleave(H // Hkv, dim=1)
    vf = v.float().repeat_interleave(H // Hkv, dim=1)
    out = torch.empty(q.shape, device="cuda", dtype=torch.float32)
    lse = torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)
    step = max(1, (1 << 28) // (S * S))
    mask = torch.ones(S, S, device="cuda", dtype=torch.bool).triu(1) if causal else None
    for b in range(q.shape[0]):
        for h in range(0, H, step):
            s = q[b, h:h + step].float() @ kf[b, h:h + step].transpose(-1, -2) * scale
            if mask is not None:
                s.masked_fill_(mask, float("-inf"))
            lse[b, h:h + step] = torch.logsumexp(s, dim=-1)
            out[b, h:h + step] = torch.softmax(s, dim=-1) @ vf[b, h:h + step]
    return out, lse


def torch_attention(q, k, v, causal):
    H, Hkv = q.shape[1], k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=H != Hkv)


def check_case(engine, B, H, Hkv, S, D, causal, dtype, split, growing, seed):
    q, k, v = inputs(B, H, Hkv, S, D, dtype, seed, growing)
    scale = 1.0 / math.sqrt(D)
    ref, ref_lse = reference(q, k, v, causal, scale)
    theirs_diff = (torch_attention(q, k, v, causal).float() - ref).abs()
    theirs, theirs_mean = theirs_diff.max().item(), theirs_diff.mean().item()
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
    bound = 2 * theirs + 1e-3
    worst = 0.0
    for _ in range(3):
        o.fill_(float("nan"))
        lse.fill_(float("nan"))
        engine.run(q, k, v, o, lse, causal, scale, split)
        torch.cuda.synchronize()
        diff = (o.float() - ref).abs()
        error, mean = diff.max().item(), diff.mean().item()
        lse_error = ((lse - ref_lse).abs() / ref_lse.abs().clamp(min=1.0)).max().item()
        if not (error <= bound and lse_error <= 1e-3):
            return False, f"error {error:.3g} (bound {bound:.3g}), log-sum-exp {lse_error:.3g}"
        worst = max(worst, error)
    return True, (f"error {worst:.3g}, mean {mean:.3g} (PyTorch's {theirs:.3g}, "
                  f"{theirs_mean:.3g}), log-sum-exp {lse_error:.2g}")


def check_repeated(engine):
    """100 launches back to back, then 10 replays of a captured launch, each result checked."""
    B, H, Hkv, S, D = 2, 16, 8, 1000, 128
    q, k, v = inputs(B, H, Hkv, S, D, torch.bfloat16, 7)
    scale = 1.0 / math.sqrt(D)
    ref, _ = reference(q, k, v, True, scale)
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
    failures = []
    o.fill_(float("nan"))
    for _ in range(100):
        engine.run(q, k, v, o, lse, True, scale)
    torch.cuda.synchronize()
    back_to_back = (o.float() - ref).abs().max().item()
    if not back_to_back <= 0.05:
        failures.append(f"100 launches: error {back_to_back:.3g}")
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        engine.run(q, k, v, o, lse, True, scale)  # outside the capture: compiles, loads
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            engine.run(q, k, v, o, lse, True, scale)
    for _ in range(10):
        o.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        replayed = (o.float() - ref).abs().max().item()
        if not replayed <= 0.05:
            failures.append(f"graph replay: error {replayed:.3g}")
            break
    print(f"  repeated (B H Hkv S D = {B} {H} {Hkv} {S} {D}, causal): 100 launches error "
          f"{back_to_back:.3g}, 10 graph replays {'right' if not failures else 'WRONG'}")
    return failures


def check(engine):
    cases = []
    for dtype in (torch.bfloat16, torch.float16):
        for causal in (False, True):
            for S in (1, 7, 128, 1000, 3000, 4096):
                for D in (64, 128):
                    for B, H, Hkv in ((1, 1, 1), (2, 16, 16), (1, 32, 8)):
                        if dtype == torch.float16 and (B, H) != (1, 32):
                            continue
                        cases.append((B, H, Hkv, S, D, causal, dtype, 0, False))
    # The keys folded in as two sources, as a ring's shards are: the first block, or three, then
    # the rest.
    for causal in (False, True):
        for S, split in ((1000, 3), (3000, 1), (4096, 3)):
            cases.append((2, 16, 8, S, 128, causal, torch.bfloat16, split, False))
            cases.append((1, 32, 8, S, 64, causal, torch.bfloat16, split, False))
    # Keys growing along the sequence: references that move after the first blocks and sources.
    for causal in (False, True):
        for D in (64, 128):
            cases.append((2, 16, 16, 4096, D, causal, torch.bfloat16, 0, True))
            cases.append((1, 32, 8, 3000, D, causal, torch.bfloat16, 1, True))
    failures = []
    for i, (B, H, Hkv, S, D, causal, dtype, split, growing) in enumerate(cases):
        ok, what = check_case(engine, B, H, Hkv, S, D, causal, dtype, split, growing, i)
        name = (f"B={B} H={H} Hkv={Hkv} S={S} D={D} {'causal' if causal else 'full'} "
                f"{str(dtype).removeprefix('torch.')}{f' split {split}' if split else ''}"
                f"{' growing keys' if growing else ''}")
        print(f"  {'ok  ' if ok else 'FAIL'} {name}: {what}")
        if not ok:
            failures.append(name)
    failures += check_repeated(engine)
    print(f"{len(cases) + 1 - len(failures)} of {len(cases) + 1} right")
    return not failures


def time_ms(fn, sets, repeat, warmup_s=0.3, batch=1):
    """Median of `repeat` timed calls (CUDA events), inputs rotating over `sets`, after warm-up;
    each sample times `batch` calls in a row and counts their mean, so that the host's cost of
    a launch overlaps the calls before it rather than adding to the time."""
    return time_interleaved({"": fn}, sets, repeat, warmup_s, batch)[""]


def time_interleaved(fns, sets, repeat, warmup_s=0.3, batch=1):
    """time_ms of each of `fns` (name: function), their samples taken in turn, so that every
    function meets the same clocks: a GPU kept busy for seconds slows down, and functions timed
    one after the other would not share that (at MoE's shapes on an H100 the ratio to the
    baseline moved 5% with a shape's place in the table)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    calls = 0
    while True:
        for fn in fns.values():
            fn(*sets[calls % len(sets)])
        calls += 1
        end.record()
        end.synchronize()
        if start.elapsed_time(end) > warmup_s * 1000 * len(fns):
            break
    times = {name: [] for name in fns}
    for i in range(repeat):
        for name, fn in fns.items():
            start.record()
            for j in range(batch):
                fn(*sets[(i * batch + j) % len(sets)])
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / batch)
    return {name: statistics.median(samples) for name, samples in times.items()}


def bench(engine, shapes, repeat, csv_path, plot_path):
    rows = []
    print(f"{'B,H,S,D':>18} {'causal':>6} {'mkc':>7} {'cudnn':>7} {'flash':>7}"
          f" {'mkc/cudnn':>9} {'mkc/flash':>9}   (TFLOP/s)")
    for B, H, S, D in shapes:
        for causal in (False, True):
            scale = 1.0 / math.sqrt(D)
            sets = []
            for seed in range(3):
                q, k, v = inputs(B, H, H, S, D, torch.bfloat16, seed)
                o = torch.empty_like(q)
                lse = torch.empty(B, H, S, device="cuda", dtype=torch.float32)
                sets.append((q, k, v, o, lse))
            q, k, v, o, lse = sets[0]
            o.fill_(float("nan"))
            engine.run(q, k, v, o, lse, causal, scale)
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            error = (o.float() - expected.float()).abs().max().item()
            if not error <= 0.05:
                raise SystemExit(f"engine wrong at {B},{H},{S},{D} causal={causal}: {error}")
            flops = 4 * B * H * S * S * D / (2 if causal else 1)
            ms = {"mkc": time_ms(lambda q, k, v, o, l: engine.run(q, k, v, o, l, causal, scale),
                                 sets, repeat)}
            for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                                  ("flash", SDPBackend.FLASH_ATTENTION)):
                with sdpa_kernel(backend):
                    ms[name] = time_ms(
                        lambda q, k, v, o, l: F.scaled_dot_product_attention(q, k, v,
                                                                             is_causal=causal),
                        sets, repeat)
            tflops = {name: flops / t / 1e9 for name, t in ms.items()}
            row = {"B": B, "H": H, "S": S, "D": D, "causal": int(causal),
                   **{f"{n}_ms": round(t, 4) for n, t in ms.items()},
                   **{f"{n}_tflops": round(t, 1) for n, t in tflops.items()},
                   "mkc_over_cudnn": round(ms["cudnn"] / ms["mkc"], 3),
                   "mkc_over_flash": round(ms["flash"] / ms["mkc"], 3)}
            rows.append(row)
            print(f"{f'{B},{H},{S},{D}':>18} {'yes' if causal else 'no':>6} "
                  f"{tflops['mkc']:7.0f} {tflops['cudnn']:7.0f} {tflops['flash']:7.0f} "
                  f"{row['mkc_over_cudnn']:9.3f} {row['mkc_over_flash']:9.3f}")
    write_csv(rows, csv_path)
    plot_tflops(rows, ("mkc", "cudnn", "flash"), plot_path)


def write_csv(rows, path):
    """The rows (dicts of one set of keys) as CSV at `path`, if any."""
    if path and rows:
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


def attention_label(row):
    return f"{row['B']},{row['H']},{row['S']},{row['D']}{' c' if row['causal'] else ''}"


def plot_tflops(rows, names, path, label=attention_label):
    """A bar chart at `path`, if any: each row's `<name>_tflops` for each of `names`, the bars
    of a row named by `label(row)`."""
    if not path or not rows:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [label(r) for r in rows]
    x = range(len(rows))
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(12, 4))
    for i, name in enumerate(names):
        ax.bar([j + (i - (len(names) - 1) / 2) * width for j in x],
               [r[f"{name}_tflops"] for r in rows], width, label=name)
    ax.set_xticks(list(x), labels, rotation=30, ha="right")
    ax.set_ylabel("TFLOP/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--library", default=os.environ.get("MKC_ATTENTION_LIBRARY",
                                                            DEFAULT_LIBRARY))
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--csv")
    parser.add_argument("--plot")
    parser.add_argument("--shapes", help="B,H,S,D;... (the issue's table by default)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no GPU")
        return 77
    engine = Engine(args.library)
    torch.backends.cuda.matmul.allow_tf32 = False
    if args.check:
        return 0 if check(engine) else 1
    shapes = TABLE if not args.shapes else [tuple(int(x) for x in s.split(","))
                                            for s in args.shapes.split(";")]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}")
    bench(engine, shapes, args.repeat, args.csv, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
