#!/usr/bin/env python3
"""Fused ops the library does not ship, written as tile programs in test/fused (a gated MLP after
an all-gather, a linear layer + bias + GeLU after one, an RMSNorm after a reduce-scatter, a bias +
GeLU + residual epilogue on an all-reduce's combined tile, bias + SiLU on a reduce-scatter's, a
softmax over whole rows), and the library's ring attention and MoE dispatch + GEMM +
combine: each compiled and run at 1x1, 1x2 and 2x1 (ranks taking turns on fewer GPUs; across
nodes over libfabric tcp), 3 launches with outputs poisoned, against PyTorch in f32.

Run it as is: it starts a job per topology, or prints "SKIP: <why>" and exits 77 without torch or
a GPU. MKC_TEST_TOPOLOGIES (1x1,1x2,2x1) picks the topologies.
"""

import math
import os
import pathlib
import sys

import gpu_gemm_allreduce as common  # check, close_to, topologies_main; also puts mkc on the path

FUSED = pathlib.Path(__file__).resolve().parents[1] / "fused"
LAUNCHES = 3


class Case:
    """One program at one shape: its global inputs, what each output must be, and how the
    tensors are placed (shard dim, or None for every rank's whole tensor)."""

    def __init__(self, name, source, shapes, inputs, placements, outputs):
        self.name, self.source, self.shapes = name, source, shapes
        self.inputs, self.placements, self.outputs = inputs, placements, outputs


def rand(torch, generator, *shape, dtype=None, scale=1.0):
    value = (torch.rand(*shape, generator=generator, device="cuda") * 2 - 1) * scale
    return value.to(dtype or torch.bfloat16)


def gated_mlp(torch, g, M, N, K):
    x, wg, wu = rand(torch, g, M, K), rand(torch, g, K, N), rand(torch, g, K, N)
    h = torch.nn.functional.silu(x.float() @ wg.float()) * (x.float() @ wu.float())
    return Case("gated_mlp_allgather", (FUSED / "gated_mlp_allgather.mlir").read_text(),
                {"M": M, "N": N, "K": K}, [x, wg, wu], [0, 1, 1, 1], [(h, [])])


def linear_bias_gelu(torch, g, M, N, K):
    x, w, bias = rand(torch, g, M, K), rand(torch, g, K, N), rand(torch, g, N)
    y = torch.nn.functional.gelu(x.float() @ w.float() + bias.float(), approximate="tanh")
    return Case("linear_bias_gelu_allgather",
                (FUSED / "linear_bias_gelu_allgather.mlir").read_text(), {"M": M, "N": N, "K": K},
                [x, w, bias], [0, 1, 0, 1], [(y, [])])


def k_partials(torch, a, b, world):
    """The bf16-rounded partial products of the ranks' K shards, in f32."""
    return [(pa.float() @ pb.float()).to(torch.bfloat16).float()
            for pa, pb in zip(torch.tensor_split(a, world, 1), torch.tensor_split(b, world, 0))]


def rmsnorm(torch, g, M, N, K, world):
    a, b, gamma = rand(torch, g, M, K), rand(torch, g, K, N), rand(torch, g, N)
    parts = k_partials(torch, a, b, world)
    s = sum(parts).to(torch.bfloat16).float()
    scale = (s.pow(2).mean(dim=1, keepdim=True) + 1e-6).rsqrt() * gamma.float()
    return Case("rmsnorm_reducescatter", (FUSED / "rmsnorm_reducescatter.mlir").read_text(),
                {"M": M, "N": N, "K": K}, [a, b, gamma], [1, 0, None, 0],
                [(s * scale, [p * scale for p in parts])])


def bias_gelu_residual(torch, g, M, N, K, world):
    a, b, bias, x = rand(torch, g, M, K), rand(torch, g, K, N), rand(torch, g, N), rand(
        torch, g, M, N)
    parts = k_partials(torch, a, b, world)
    r = sum(parts).to(torch.bfloat16).float()
    y = x.float() + torch.nn.functional.gelu(r + bias.float(), approximate="tanh")
    return Case("allreduce_bias_gelu_residual",
                (FUSED / "allreduce_bias_gelu_residual.mlir").read_text(),
                {"M": M, "N": N, "K": K}, [a, b, bias, x], [1, 0, None, None, None],
                [(y, [p * 1.2 for p in parts])])


def bias_silu_reducescatter(torch, g, M, N, K, world):
    a, b = rand(torch, g, M, K), rand(torch, g, K, N)
    bias = torch.rand(N, generator=g, device="cuda") * 2 - 1
    parts = k_partials(torch, a, b, world)
    s = sum(parts).to(torch.bfloat16).float()
    y = torch.nn.functional.silu(s + bias)
    return Case("reducescatter_bias_silu", (FUSED / "reducescatter_bias_silu.mlir").read_text(),
                {"M": M, "N": N, "K": K}, [a, b, bias], [1, 0, None, 0],
                [(y, [p * 1.1 for p in parts])])


def softmax(torch, g, M, N, D):
    q, kt = rand(torch, g, M, D, scale=2.0), rand(torch, g, D, N, scale=2.0)
    p = torch.softmax(q.float() @ kt.float() / math.sqrt(D), dim=1)
    return Case("gemm_softmax", (FUSED / "gemm_softmax.mlir").read_text(),
                {"M": M, "N": N, "D": D}, [q, kt], [0, 1, 0], [(p, [])])


def ring_attention(torch, mkc, g, B, H, S, D, causal):
    q, k, v = (rand(torch, g, B, H, S, D) for _ in range(3))
    o = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                         is_causal=causal)
    name = "ring_attention_causal" if causal else "ring_attention"
    return Case(name, mkc.library_program(name), {"B": B, "H": H, "S": S, "D": D}, [q, k, v],
                [2, 2, 2, 2], [(o, [])])


def moe(torch, mkc, g, T, Hd, I, E, top_k, C):
    x = rand(torch, g, T, Hd)
    experts = torch.randint(0, E, (T, top_k), generator=g, device="cuda", dtype=torch.int32)
    weights = torch.rand(T, top_k, generator=g, device="cuda")
    wg, wu = rand(torch, g, E, Hd, I, scale=0.25), rand(torch, g, E, Hd, I, scale=0.25)
    wd = rand(torch, g, E, I, Hd, scale=0.25)
    # Routing in token order, as mk.dispatch defines it: past an expert's capacity a copy drops.
    filled, y = [0] * E, torch.zeros(T, Hd, device="cuda")
    for t, row in enumerate(experts.tolist()):
        for j, e in enumerate(row):
            if filled[e] == C:
                continue
            filled[e] += 1
            h = torch.nn.functional.silu(x[t].float() @ wg[e].float()) * (x[t].float() @ wu[e].float())
            out = (h.to(torch.bfloat16).float() @ wd[e].float()).to(torch.bfloat16).float()
            y[t] += weights[t, j] * out
    return Case("moe_dispatch_gemm_combine", mkc.library_program("moe_dispatch_gemm_combine"),
                {"T": T, "Hd": Hd, "I": I, "E": E, "TopK": top_k, "C": C},
                [x, experts, weights, wg, wu, wd], [0, 0, 0, 0, 0, 0, 0], [(y, [])])


def cases(torch, mkc, world):
    g = torch.Generator(device="cuda").manual_seed(2026 + world)
    yield gated_mlp(torch, g, 256 * world, 128 * world, 256)
    yield gated_mlp(torch, g, 1024, 1024, 512)
    yield linear_bias_gelu(torch, g, 256 * world, 128 * world, 256)
    # Rows masked in the last tile; columns the engine takes (1536 / 2: 768 a rank), then columns
    # and K that are not (500 a rank: rows of 1000 bytes), on the tile library.
    yield linear_bias_gelu(torch, g, 1000, 1536, 512)
    yield linear_bias_gelu(torch, g, 1000, 1000, 520)
    yield rmsnorm(torch, g, 256 * world, 768, 256 * world, world)
    yield rmsnorm(torch, g, 1024, 4096, 512, world)
    yield bias_gelu_residual(torch, g, 384, 768, 128 * world, world)
    yield bias_gelu_residual(torch, g, 1024, 1024, 1024, world)
    yield bias_silu_reducescatter(torch, g, 256 * world, 512, 128 * world, world)
    yield bias_silu_reducescatter(torch, g, 1024, 2048, 1024, world)
    yield softmax(torch, g, 256 * world, 512 * world, 128)
    yield softmax(torch, g, 128 * world, 128 * world, 64)
    for causal in (False, True):
        yield ring_attention(torch, mkc, g, 1, 2, 256 * world, 128, causal)
        yield ring_attention(torch, mkc, g, 2, 4, 128 * world, 64, causal)
    # Extents all different (T, Hd, I, E, TopK, C), and with some equal.
    yield moe(torch, mkc, g, 128 * world, 512, 384, 4 * world, 4, 128 if world > 1 else 256)
    yield moe(torch, mkc, g, 128 * world, 256, 128, 4 * world, 4, 128)


def mine(torch, value, dim, rank, world):
    return value if dim is None else torch.tensor_split(value, world, dim)[rank].contiguous()


def run(runtime, torch, mkc, case):
    rank, world = runtime.rank, runtime.world_size
    op = runtime.compile(case.source, shapes=case.shapes)
    if case.name.startswith("ring_attention") and world > 1:  # K's transfers and V's
        kinds = [kind for kind, _ in op.roles]
        common.check(kinds.count("intra_transfer") + kinds.count("inter_send") >= 2,
                     f"rank {rank}: {case.name}: roles {op.roles}")
    tensors = []
    for index, (value, dim) in enumerate(zip(case.inputs, case.placements)):
        part = mine(torch, value, dim, rank, world)
        if op.arguments[index].symmetric:
            handle = runtime.empty(list(part.shape), part.dtype)
            handle.torch().copy_(part)
            part = handle
        tensors.append(part)
    outputs = []
    for index in range(len(case.inputs), len(case.placements)):
        argument = op.arguments[index]
        dtype = torch.float32 if argument.element == "f32" else torch.bfloat16
        if argument.symmetric:
            handle = runtime.empty(list(argument.shape), dtype)
            outputs.append(handle.torch())
        else:
            handle = torch.empty(list(argument.shape), dtype=dtype, device="cuda")
            outputs.append(handle)
        tensors.append(handle)
    label = f"rank {rank}: {case.name} {case.shapes}"
    for launch in range(1, LAUNCHES + 1):
        for view in outputs:
            view.fill_(float("nan"))
        torch.cuda.synchronize()
        runtime.barrier()
        op(*tensors)
        torch.cuda.synchronize()
        for view, (value, partials), dim in zip(outputs, case.outputs,
                                                case.placements[len(case.inputs):]):
            common.close_to(view, mine(torch, value, dim, rank, world), f"{label}, launch {launch}",
                            [mine(torch, p, dim, rank, world) for p in partials])
    op.close()
    if rank == 0:
        print(f"{runtime.nodes}x{runtime.local_world_size}: {case.name} {case.shapes} checked",
              flush=True)


def rank_main():
    os.environ["MKC_DEVICE"] = os.environ.get("LOCAL_RANK", "0")
    import torch

    import mkc

    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    for case in cases(torch, mkc, runtime.world_size):
        try:
            run(runtime, torch, mkc, case)
        except mkc.Error as error:
            common.check(False, f"rank {runtime.rank}: {case.name} {case.shapes}: {error}")
    return common.finish(torch, runtime)


if __name__ == "__main__":
    sys.exit(common.topologies_main(__file__, rank_main, "1x1,1x2,2x1"))
