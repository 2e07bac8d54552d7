#!/usr/bin/env python3
"""The gated MLP on one GPU, side by side: two matmuls that share A in one GEMM engine pass; and
a linear layer's bias + GeLU in the engine's epilogue.

H = silu(X Wg) * (X Wu) (X [M x K], Wg and Wu [K x N], bf16; f32 accumulate, bf16 out). Timed in
one process on one GPU, the same way:

  mkc          GATED below: both matmuls in one engine pass (their B panels side by side in one
               stage, one wgmma of 256 columns), SwiGLU on the accumulators' registers
  mkc_gemm     GEMM below at M x 2N x K: the engine's single matmul at the same FLOPs, to see
               what the second B map and the epilogue cost
  mkc_bias_gelu, mkc_bias_gelu256
               BIAS_GELU below at M x 2N x K, tiles of 128 and 256 columns: gelu(X [Wg | Wu] + b),
               the bias loaded by the engine's consumers, the epilogue in their registers
  mkc_gathered test/fused/gated_mlp_allgather.mlir at 1x1: GATED after an all-gather of X,
               which over one rank is a copy of X the matmuls wait for
  torch        silu(X @ Wg) * (X @ Wu): two cuBLAS GEMMs and PyTorch's elementwise kernels
  torch_cat    X @ [Wg | Wu] (one cuBLAS GEMM of 2N columns), then silu(g) * u
  torch_bias_gelu
               gelu(addmm(b, X, [Wg | Wu])): cuBLAS's GEMM with the bias, then PyTorch's GeLU
  cublas       X @ [Wg | Wu] alone: the bound at these FLOPs

Each variant runs for --warmup-s seconds (0.5), then --iters times back to back, each between
two CUDA events; the time is the median. Inputs rotate among as many sets as make 3x the L2
cache. mkc's results are checked against PyTorch's f32 product first, with H poisoned.

    python3 bench/gated_mlp.py [--sizes 4096x4096x4096,8192x4096x4096] [--out DIR]

prints one line per variant and shape with its TFLOP/s and its ratio to mkc, and writes
gated_mlp.csv to --out (default bench/results).
"""

import argparse
import csv
import datetime
import os
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "python"))


GATED = """
mk.program @gated_mlp [M, N, K] mesh <?x?> (
    %X: !mk.tensor<[M, K], bf16, replicated>, %Wg: !mk.tensor<[K, N], bf16, replicated>,
    %Wu: !mk.tensor<[K, N], bf16, replicated>, %H: !mk.tensor<[M, N], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %H tiles [128, 128] masked : !mk.tensor<[M, N], bf16, replicated> {
    %gate = mk.matmul %X[%m, :], %Wg[:, %n] : !mk.tensor<[M, K], bf16, replicated>,
        !mk.tensor<[K, N], bf16, replicated> -> !mk.tile<[128, 128], f32>
    %up = mk.matmul %X[%m, :], %Wu[:, %n] : !mk.tensor<[M, K], bf16, replicated>,
        !mk.tensor<[K, N], bf16, replicated> -> !mk.tile<[128, 128], f32>
    %h = mk.swiglu %gate, %up : !mk.tile<[128, 128], f32>
    %h16 = mk.convert %h : !mk.tile<[128, 128], f32> -> !mk.tile<[128, 128], bf16>
    mk.store %h16, %H[%m, %n] : !mk.tile<[128, 128], bf16>, !mk.tensor<[M, N], bf16, replicated>
  }
}
"""

GEMM = """
mk.program @gemm [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, replicated>, %B: !mk.tensor<[K, N], bf16, replicated>,
    %C: !mk.tensor<[M, N], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %C tiles [128, 256] masked : !mk.tensor<[M, N], bf16, replicated> {
    %acc = mk.matmul %A[%m, :], %B[:, %n] : !mk.tensor<[M, K], bf16, replicated>,
        !mk.tensor<[K, N], bf16, replicated> -> !mk.tile<[128, 256], f32>
    %tile = mk.convert %acc : !mk.tile<[128, 256], f32> -> !mk.tile<[128, 256], bf16>
    mk.store %tile, %C[%m, %n] : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
  }
}
"""

BIAS_GELU = """
mk.program @bias_gelu [M, N, K] mesh <?x?> (
    %A: !mk.tensor<[M, K], bf16, replicated>, %B: !mk.tensor<[K, N], bf16, replicated>,
    %bias: !mk.tensor<[N], bf16, replicated>, %C: !mk.tensor<[M, N], bf16, replicated>) {
  mk.tile_grid (%m, %n) over %C tiles [128, BN] masked : !mk.tensor<[M, N], bf16, replicated> {
    %acc = mk.matmul %A[%m, :], %B[:, %n] : !mk.tensor<[M, K], bf16, replicated>,
        !mk.tensor<[K, N], bf16, replicated> -> !mk.tile<[128, BN], f32>
    %b16 = mk.load %bias[%n] : !mk.tensor<[N], bf16, replicated> -> !mk.tile<[BN], bf16>
    %b = mk.convert %b16 : !mk.tile<[BN], bf16> -> !mk.tile<[BN], f32>
    %bb = mk.broadcast %b dim 0 : !mk.tile<[BN], f32> -> !mk.tile<[128, BN], f32>
    %z = mk.add %acc, %bb : !mk.tile<[128, BN], f32>
    %y = mk.activation gelu %z : !mk.tile<[128, BN], f32>
    %tile = mk.convert %y : !mk.tile<[128, BN], f32> -> !mk.tile<[128, BN], bf16>
    mk.store %tile, %C[%m, %n] : !mk.tile<[128, BN], bf16>, !mk.tensor<[M, N], bf16, replicated>
  }
}
"""


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4096x4096x4096,8192x4096x4096,8192x7168x4096",
                        help="MxNxK,... (N: the columns of each of Wg and Wu)")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup-s", type=float, default=0.5)
    parser.add_argument("--out", default=os.path.join(REPO, "bench", "results"))
    return parser.parse_args()


def median_ms(torch, step, warmup_s, iters):
    """The median time of `step(i)`, iteration i back to back, after `warmup_s` of warm-up."""
    torch.cuda.synchronize()
    begin, i = time.monotonic(), 0
    while time.monotonic() - begin < warmup_s:
        step(i)
        i += 1
        if i % 8 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(iters)]
    for i, (start, stop) in enumerate(events):
        start.record()
        step(i)
        stop.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def checked(torch, name, result, reference):
    error = ((result.float() - reference).norm() / reference.norm()).item()
    if not error < 1e-2:
        raise SystemExit(f"gated_mlp: {name}: off by {error:.3g} relative to PyTorch in f32")
    return error


def main():
    arguments = parse_arguments()
    import torch

    import mkc

    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    properties = torch.cuda.get_device_properties(runtime.device)
    gathered_source = open(os.path.join(REPO, "test", "fused", "gated_mlp_allgather.mlir")).read()
    silu, gelu = torch.nn.functional.silu, torch.nn.functional.gelu
    rows = []
    for size in arguments.sizes.split(","):
        m, n, k = (int(x) for x in size.split("x"))
        set_bytes = (m * k + 2 * k * n) * 2
        sets = max(2, -(-3 * properties.L2_cache_size // set_bytes))
        generator = torch.Generator(device="cuda").manual_seed(m + n + k)

        def rand(*shape):
            return (torch.rand(*shape, generator=generator, device="cuda") * 2 - 1).to(
                torch.bfloat16)

        inputs = []
        for _ in range(sets):
            x, wg, wu = rand(m, k), rand(k, n), rand(k, n)
            inputs.append((x, wg, wu, torch.cat([wg, wu], dim=1), rand(2 * n)))
        gated = runtime.compile(GATED, M=m, N=n, K=k)
        gathered = runtime.compile(gathered_source, M=m, N=n, K=k)
        single = runtime.compile(GEMM, M=m, N=2 * n, K=k)
        bias_gelu = {bn: runtime.compile(BIAS_GELU.replace("BN", str(bn)), M=m, N=2 * n, K=k)
                     for bn in (128, 256)}
        h = runtime.empty((m, n), torch.bfloat16)
        c = runtime.empty((m, 2 * n), torch.bfloat16)
        gu = torch.empty(m, 2 * n, device="cuda", dtype=torch.bfloat16)

        x, wg, wu, wgu, b = inputs[0]
        reference = silu(x.float() @ wg.float()) * (x.float() @ wu.float())
        stream = torch.cuda.current_stream()
        h.torch().fill_(float("nan"))
        gated(x, wg, wu, h, stream=stream)
        torch.cuda.synchronize()
        gated_error = checked(torch, "mkc", h.torch(), reference)
        h.torch().fill_(float("nan"))
        gathered(x, wg, wu, h, stream=stream)
        torch.cuda.synchronize()
        checked(torch, "mkc_gathered", h.torch(), reference)
        c.torch().fill_(float("nan"))
        single(x, wgu, c, stream=stream)
        torch.cuda.synchronize()
        checked(torch, "mkc_gemm", c.torch(), x.float() @ wgu.float())
        reference = gelu(x.float() @ wgu.float() + b.float(), approximate="tanh")
        for bn, op in bias_gelu.items():
            c.torch().fill_(float("nan"))
            op(x, wgu, b, c, stream=stream)
            torch.cuda.synchronize()
            checked(torch, f"mkc_bias_gelu {bn}", c.torch(), reference)
        del reference

        def cublas(i):
            x, _, _, wgu, _ = inputs[i % sets]
            torch.matmul(x, wgu, out=gu)

        def torch_cat(i):
            cublas(i)
            g, u = gu.split(n, dim=1)
            return silu(g) * u

        def torch_separate(i):
            x, wg, wu, _, _ = inputs[i % sets]
            return silu(x @ wg) * (x @ wu)

        def torch_bias_gelu(i):
            x, _, _, wgu, b = inputs[i % sets]
            return gelu(torch.addmm(b, x, wgu), approximate="tanh")

        def mkc_bias_gelu(bn):
            return lambda i: bias_gelu[bn](inputs[i % sets][0], inputs[i % sets][3],
                                           inputs[i % sets][4], c, stream=stream)

        steps = {
            "mkc": lambda i: gated(*inputs[i % sets][:3], h, stream=stream),
            "mkc_gemm": lambda i: single(inputs[i % sets][0], inputs[i % sets][3], c,
                                         stream=stream),
            "mkc_bias_gelu": mkc_bias_gelu(128),
            "mkc_bias_gelu256": mkc_bias_gelu(256),
            "mkc_gathered": lambda i: gathered(*inputs[i % sets][:3], h, stream=stream),
            "torch": torch_separate,
            "torch_cat": torch_cat,
            "torch_bias_gelu": torch_bias_gelu,
            "cublas": cublas,
        }
        times = {name: median_ms(torch, step, arguments.warmup_s, arguments.iters)
                 for name, step in steps.items()}
        flops = 2 * m * (2 * n) * k
        for name, ms in times.items():
            ratio = ms / times["mkc"]
            print(f"M={m} N={n} K={k}: {name:16s} {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s "
                  f"(its time / mkc's: {ratio:.3f})", flush=True)
            rows.append({"M": m, "N": n, "K": k, "variant": name, "ms": f"{ms:.4f}",
                         "tflops": f"{flops / ms / 1e9:.1f}", "over_mkc": f"{ratio:.3f}",
                         "mkc_error": f"{gated_error:.2e}"})
        for op in (gated, gathered, single, *bias_gelu.values()):
            op.close()
    os.makedirs(arguments.out, exist_ok=True)
    path = os.path.join(arguments.out, "gated_mlp.csv")
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{datetime.date.today()}, {properties.name}: {path}")


if __name__ == "__main__":
    main()
