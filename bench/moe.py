#!/usr/bin/env python3
"""MoE dispatch + expert FFN + combine (lib/moe_dispatch_gemm_combine.mlir) through the Python
runtime, against PyTorch's grouped-GEMM path in the same run: a benchmark, not a timed test.

    python3 bench/moe.py [--repeat N] [--batch N] [--tokens 128,1024,...] [--models deepseek,...]
                         [--csv FILE] [--plot FILE] [--options NAME=VALUE;...]
                         [--variants mkc,pytorch,grouped_mm,mkc_ffn]

At 1x1, per model shape (per GPU: DeepSeek-V3's Hd 7168, I 2048, 16 experts, top-8; Mixtral's
Hd 4096, I 14336, 8 experts, top-2) and tokens (128, 1024, 4096, 16384), bf16, uniform routing
(distinct experts per token, softmax weights): mkc's op against PyTorch's path (tokens sorted by
expert, one torch._grouped_mm for gate and up together (weights K-major), SwiGLU,
torch._grouped_mm for down, the routing weights applied and summed per token in f32 by
index_add_) and that path's grouped GEMMs alone; and mkc's expert FFN alone
(bench/moe_expert_ffn.mlir: the op's two grids over the same rows, grouped by expert with
per-expert counts) against those grouped GEMMs, per FLOP. --variants picks some of the four. mkc's
op is checked against PyTorch's path, and its FFN against the grouped GEMMs, before they are
timed; median of --repeat samples with CUDA events after warm-up, each the mean of --batch calls
in a row, the variants' samples taken in turn (the same clocks for each), the tokens and routing
rotating over 3 sets (the weights, far larger than the L2, are read from HBM every call). TFLOP/s = 6 tokens k Hd I / time; the ratios are mkc's rate over each
baseline's, and its FFN's over the grouped GEMMs'. The symmetric heap is 12 GiB unless
MKC_SYMMETRIC_BYTES says otherwise.

Several GPUs (all_to_all_single + the same grouped GEMMs + all_to_all) are issue 29's runs; this
script refuses a world of more than one rank until that comparison exists. Prints a table; --csv
and --plot keep it. Exits 77 without torch or a GPU.
"""

import argparse
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.join(REPO, "bench"))

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: no torch")
    sys.exit(77)

from attention_engine import plot_tflops, time_interleaved, write_csv  # noqa: E402

MODELS = {  # per GPU: hidden, intermediate, local experts, top-k
    "deepseek": (7168, 2048, 16, 8),
    "mixtral": (4096, 14336, 8, 2),
}
TOKENS = (128, 1024, 4096, 16384)
SETS = 3
EXPERT_FFN = os.path.join(REPO, "bench", "moe_expert_ffn.mlir")
VARIANTS = ("mkc", "pytorch", "grouped_mm", "mkc_ffn")
RATIOS = {  # column: (ours, baseline), the baseline's time over ours
    "mkc_over_pytorch": ("mkc", "pytorch"),
    "mkc_over_grouped_mm": ("mkc", "grouped_mm"),
    "ffn_over_grouped_mm": ("mkc_ffn", "grouped_mm"),
}


def routing(T, E, top_k, g):
    """A router's output: distinct experts per token (int32) and their softmax weights (f32)."""
    scores = torch.randn(T, E, generator=g, device="cuda")
    top, experts = scores.topk(top_k, dim=1)
    return experts.to(torch.int32), top.softmax(dim=1)


def sort_by_expert(experts, E):
    """The copies (token x choice) in expert order, stably, and the groups' end offsets."""
    flat = experts.flatten()
    order = flat.argsort(stable=True)
    ends = torch.bincount(flat, minlength=E).cumsum(0).to(torch.int32)
    return order, ends


def grouped_ffn(rows, ends, w_gate_up, w_down):
    """Gate and up as one grouped GEMM over [Hd, 2I] per expert, SwiGLU, then down."""
    gate, up = torch._grouped_mm(rows, w_gate_up, offs=ends).chunk(2, dim=1)
    return torch._grouped_mm(F.silu(gate) * up, w_down, offs=ends)


def torch_moe(x, experts, weights, w_gate_up, w_down):
    """PyTorch's MoE layer on one GPU: sort, grouped FFN, weighted sum per token in f32."""
    top_k = experts.shape[1]
    order, ends = sort_by_expert(experts, w_down.shape[0])
    tokens = order // top_k
    out = grouped_ffn(x[tokens], ends, w_gate_up, w_down)
    y = torch.zeros(x.shape, device="cuda", dtype=torch.float32)
    y.index_add_(0, tokens, out.float() * weights.flatten()[order, None])
    return y.to(torch.bfloat16)


def by_expert(rows, ends, capacity):
    """Rows grouped by expert (contiguous, groups ending at `ends`) as [E, capacity, Hd], each
    expert's first, and the rows each expert has."""
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    padded = torch.zeros(len(ends), capacity, rows.shape[1], device="cuda", dtype=rows.dtype)
    starts = (ends - counts).tolist()
    for e, (start, count) in enumerate(zip(starts, counts.tolist())):
        padded[e, :count] = rows[start:start + count]
    return padded, counts


def k_major(w):
    """[E, K, N] with the same values, each expert's matrix stored column-major."""
    return w.transpose(1, 2).contiguous().transpose(1, 2)


def bench_shape(runtime, mkc, model, T, repeat, batch, options, chosen):
    Hd, I, E, top_k = MODELS[model]
    g = torch.Generator(device="cuda").manual_seed(T)

    def weight(*shape):
        return (torch.randn(*shape, generator=g, device="cuda") * shape[-2] ** -0.5).to(
            torch.bfloat16)

    w_gate, w_up, w_down = weight(E, Hd, I), weight(E, Hd, I), weight(E, I, Hd)
    # PyTorch's path gets its weights K-major, the layout MoE layers keep them in for it.
    w_gate_up = k_major(torch.cat([w_gate, w_up], dim=2))
    w_down_k = k_major(w_down)
    op = runtime.compile(mkc.library_program("moe_dispatch_gemm_combine"),
                         T=T, Hd=Hd, I=I, E=E, TopK=top_k, options=options)

    def place(index, value):
        if not op.arguments[index].symmetric:
            return value
        handle = runtime.empty(list(value.shape), value.dtype)
        handle.torch().copy_(value)
        return handle

    weights_placed = [place(3, w_gate), place(4, w_up), place(5, w_down)]
    sets = []
    for _ in range(SETS):
        x = torch.randn(T, Hd, generator=g, device="cuda").to(torch.bfloat16)
        experts, weights = routing(T, E, top_k, g)
        order, ends = sort_by_expert(experts, E)
        y = place(6, torch.empty(T, Hd, device="cuda", dtype=torch.bfloat16))
        sets.append({"x": x, "experts": experts, "weights": weights, "rows": x[order // top_k],
                     "ends": ends, "y": y,
                     "args": [place(0, x), place(1, experts), place(2, weights),
                              *weights_placed, y]})
    # The expert FFN alone, its capacity the most rows an expert gets in any set.
    ffn = None
    if "mkc_ffn" in chosen:
        capacity = max(int(torch.diff(s["ends"], prepend=s["ends"].new_zeros(1)).max())
                       for s in sets)
        ffn = runtime.compile(EXPERT_FFN, E=E, C=capacity, Hd=Hd, I=I, options=options)
        for s in sets:
            padded, counts = by_expert(s["rows"], s["ends"], capacity)
            s["ffn_out"] = torch.empty_like(padded)
            s["ffn_args"] = [padded, counts, w_gate, w_up, w_down, s["ffn_out"]]

    def ours(s):
        op(*s["args"])

    def pytorch(s):
        return torch_moe(s["x"], s["experts"], s["weights"], w_gate_up, w_down_k)

    def grouped_mm(s):
        return grouped_ffn(s["rows"], s["ends"], w_gate_up, w_down_k)

    def ours_ffn(s):
        ffn(*s["ffn_args"])

    # Right before timed: mkc's output, poisoned first, against PyTorch's path.
    first = sets[0]
    out = first["y"].torch() if hasattr(first["y"], "torch") else first["y"]
    out.fill_(float("nan"))
    ours(first)
    torch.cuda.synchronize()
    expected = pytorch(first).float()
    error = (out.float() - expected).abs().nan_to_num(float("inf")).max().item()
    scale = expected.abs().max().item()
    if not error <= 0.02 * scale:
        raise SystemExit(f"mkc wrong at {model} T={T}: max error {error:.3g} of {scale:.3g}")
    if op.routing().dropped:
        raise SystemExit(f"mkc dropped copies at {model} T={T} with the default capacity")
    if ffn:
        first["ffn_out"].fill_(float("nan"))
        ours_ffn(first)
        torch.cuda.synchronize()
        expected_ffn, counts = by_expert(grouped_mm(first).float(), first["ends"], capacity)
        valid = torch.arange(capacity, device="cuda")[None, :] < counts[:, None]
        ffn_error = ((first["ffn_out"].float() - expected_ffn).abs().nan_to_num(float("inf"))
                     [valid].max().item())
        if not ffn_error <= 0.02 * expected_ffn.abs().max().item():
            raise SystemExit(f"mkc's expert FFN wrong at {model} T={T}: max error {ffn_error:.3g}")

    variants = {"mkc": ours, "pytorch": pytorch, "grouped_mm": grouped_mm, "mkc_ffn": ours_ffn}
    split = ",".join(f"{kind}={ctas}" for kind, ctas in op.sm_split.items())
    ms = time_interleaved({name: variants[name] for name in chosen}, [(s,) for s in sets], repeat,
                          batch=batch)
    op.close()
    if ffn:
        ffn.close()
    flops = 6 * T * top_k * Hd * I
    row = {"model": model, "T": T, "Hd": Hd, "I": I, "E": E, "top_k": top_k,
           **{f"{n}_ms": round(t, 4) for n, t in ms.items()},
           **{f"{n}_tflops": round(flops / t / 1e9, 1) for n, t in ms.items()},
           "max_error": round(error, 5), "sm_split": split}
    for name, (ours_name, baseline) in RATIOS.items():
        if ours_name in ms and baseline in ms:
            row[name] = round(ms[baseline] / ms[ours_name], 3)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--batch", type=int, default=4,
                        help="calls in a row per timed sample")
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="what to time, of " + ",".join(VARIANTS))
    parser.add_argument("--csv")
    parser.add_argument("--plot")
    parser.add_argument("--options", default="",
                        help="mkc's flags for the op, NAME=VALUE;... (gemm-stages=3)")
    args = parser.parse_args()
    asked = args.variants.split(",")
    chosen = [v for v in VARIANTS if v in asked]
    unknown = set(asked) - set(VARIANTS)
    if unknown or not chosen:
        parser.error(f"--variants: {','.join(sorted(unknown)) or 'none'} not among "
                     f"{','.join(VARIANTS)}")
    if not torch.cuda.is_available():
        print("SKIP: no GPU")
        return 77
    import mkc

    # The largest shape (DeepSeek's at 16384 tokens) keeps 5.6 GB of routed rows and results in
    # symmetric memory; the rest of the GPU's memory is PyTorch's and the ops' own buffers.
    runtime = mkc.Runtime(symmetric_bytes=None if os.environ.get("MKC_SYMMETRIC_BYTES")
                          else 12 << 30)
    if runtime.world_size > 1:
        raise SystemExit("bench/moe.py: the comparison on several GPUs (all_to_all_single) is "
                         "issue 29's and not written yet; run it as one process")
    torch.cuda.set_device(runtime.device)
    options = dict(item.split("=", 1) for item in args.options.split(";") if item) or None
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    columns = [*chosen, *(r for r, (a, b) in RATIOS.items() if a in chosen and b in chosen)]
    header = [f"{'model':>9}", f"{'tokens':>6}", *(f"{c:>{max(len(c), 7)}}" for c in columns)]
    print(" ".join(header) + "   (TFLOP/s; ratios of times)")
    rows = []
    for model in args.models.split(","):
        for T in (int(t) for t in args.tokens.split(",")):
            row = bench_shape(runtime, mkc, model, T, args.repeat, args.batch, options, chosen)
            rows.append(row)
            values = [f"{row[c + '_tflops']:>{max(len(c), 7)}.0f}" if c in chosen
                      else f"{row[c]:>{max(len(c), 7)}.3f}" for c in columns]
            print(" ".join([f"{model:>9}", f"{T:>6}", *values]), flush=True)
            # The next shape's buffers, not this one's in PyTorch's cache.
            torch.cuda.empty_cache()
    write_csv(rows, args.csv)
    plot_tflops(rows, chosen, args.plot, label=lambda r: f"{r['model']} {r['T']}")
    runtime.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
