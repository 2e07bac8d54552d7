#!/usr/bin/env python3
"""The library's ring attention (lib/ring_attention*.mlir: causal and not, grouped-query heads or
not, the zigzag layout) on the attention engine, against PyTorch's attention in f32: per topology (1x1, and ranks
taking turns on fewer GPUs at 1x2, 2x1 over libfabric tcp, 2x2), D 64 and 128, B x H 1 x 1 and
2 x 16, 32 query heads for 8 key heads, sequence lengths per rank with partial tiles, and at 1x3
sequences that do not split evenly (shards as torch.tensor_split makes them); 3 launches
with the output poisoned, and for one shape per topology 100 launches back to back and replays of
a CUDA graph. The largest error
must be at most twice that of PyTorch's own bf16 attention (SDPA's default backend) against the
same reference, plus 1e-3, as in bench/attention_engine.py's check of the engine.

Run it as is: it starts a job per topology, or prints "SKIP: <why>" and exits 77 without torch or
a GPU. MKC_TEST_TOPOLOGIES (1x1,1x2,2x1,2x2,1x3) picks the topologies.
"""

import math
import os
import sys

import gpu_gemm_allreduce as common  # check, topologies_main; also puts mkc on the path

LAUNCHES = 3
BACK_TO_BACK = 100


def shapes(world):
    """(B, H, Hkv, S, D, causal, zigzag, growing) of each case on `world` ranks: every D, causal or
    not and B x H at a length of whole tiles a rank; lengths with partial tiles (shards of 7, 1000
    and 3000, tiles numbered shard after shard) at B x H = 2 x 16; grouped-query heads, 32 for 8
    key heads; keys growing along the sequence (rows whose largest score outgrows the engine's
    reference after the first blocks and sources); the causal zigzag layout (chunks of whole
    tiles) at 256 and 4096 a rank. On 3 ranks, sequences of 22 and 3001 (shards of 8, 7, 7 and
    1001, 1000, 1000), which only uneven shards can hold."""
    if world == 3:
        for causal in (False, True):
            for d in (64, 128):
                for s in (22, 3001):
                    yield 2, 16, 16, s, d, causal, False, False
        return
    lengths = (128, 1000, 3000, 4096)
    for causal in (False, True):
        for d in (64, 128):
            yield 2, 16, 16, 7 * world, d, causal, False, False
            for b, h in ((1, 1), (2, 16)):
                for s in lengths:
                    if (b, h) == (1, 1) or s != 4096 or d == 128:
                        yield b, h, h, s * world, d, causal, False, False
            for s in lengths[:2]:
                yield 1, 32, 8, s * world, d, causal, False, False
            yield 2, 16, 16, 1000 * world, d, causal, False, True
    for d in (64, 128):
        for b, h in ((1, 1), (2, 16)):
            for s in (256, 4096):
                if (b, h) == (1, 1) or s != 4096 or d == 128:
                    yield b, h, h, s * world, d, True, True, False


def repeated(world, b, h, s, d, zigzag):
    """Whether a case also runs 100 launches back to back and replays of a graph: B x H 2 x 16 at
    D = 128 on 128 rows a rank (22 in all on 3 ranks), and the zigzag layout on 256 a rank."""
    if zigzag:
        return (b, s) == (2, 256 * world)
    return (b, h, d) == (2, 16, 128) and s == (22 if world == 3 else 128 * world)


def reference(torch, q, k, v, causal, rows):
    """softmax(Q K^T / sqrt(D)) V in f32 for query rows `rows` (a slice) of every head, causal as
    PyTorch's is_causal, query head h reading key head h / (H / Hkv); a head at a time, so that
    the scores of a long sequence fit."""
    out = torch.empty(q.shape[0], q.shape[1], rows.stop - rows.start, q.shape[3],
                      device=q.device)
    scale = 1 / math.sqrt(q.shape[3])
    group = q.shape[1] // k.shape[1]
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            scores = q[b, h, rows].float() @ k[b, h // group].float().T * scale
            if causal:
                position = torch.arange(rows.start, rows.stop, device=q.device)[:, None]
                scores.masked_fill_(torch.arange(k.shape[2], device=q.device) > position,
                                    float("-inf"))
            out[b, h] = torch.softmax(scores, dim=1) @ v[b, h // group].float()
    return out


def place(runtime, torch, op, index, value):
    """`value` where the op's argument `index` must be: in symmetric memory if peers reach it."""
    if not op.arguments[index].symmetric:
        return value, value
    handle = runtime.empty(list(value.shape), value.dtype)
    handle.torch().copy_(value)
    return handle, handle.torch()


def run_case(runtime, torch, mkc, generator, b, h, hkv, s, d, causal, zigzag, growing, repeat):
    rank, world = runtime.rank, runtime.world_size
    # The rank's shard of the sequence, as torch.tensor_split makes them: the first S % W one
    # longer.
    s_rank = s // world + (rank < s % world)
    first = rank * (s // world) + min(rank, s % world)
    q, k, v = ((torch.rand(b, heads, s, d, generator=generator, device="cuda") * 2 - 1)
               for heads in (h, hkv, hkv))
    if growing:
        k *= (1 + 96 * torch.arange(s, device="cuda") / s)[:, None]
    q, k, v = (x.to(torch.bfloat16) for x in (q, k, v))
    name = ("ring_attention" + ("_gqa" if hkv != h else "") +
            ("_zigzag" if zigzag else "_causal" if causal else ""))
    label = f"rank {rank}: {name} B={b} H={h} Hkv={hkv} S={s} D={d}" + (
        " growing keys" if growing else "")
    shape = dict(B=b, H=h, S=s, D=d, **({"Hkv": hkv} if hkv != h else {}))
    op = runtime.compile(mkc.library_program(name), **shape)
    rows = slice(first, first + s_rank)
    # The rank's shard: its rows of the sequence, or of its zigzag layout (chunks rank and
    # 2W - 1 - rank), whose round trip must give the sequence back.
    layout = (lambda x: mkc.zigzag(x, world)) if zigzag else (lambda x: x)
    if zigzag:
        common.check(torch.equal(mkc.unzigzag(layout(q), world), q),
                     f"{label}: unzigzag(zigzag(x)) is x")
        chunk = s // (2 * world)
        expected = torch.cat([reference(torch, q, k, v, causal, slice(c * chunk, (c + 1) * chunk))
                              for c in (rank, 2 * world - 1 - rank)], dim=2)
    else:
        expected = reference(torch, q, k, v, causal, rows)
    args = [place(runtime, torch, op, i, layout(x)[:, :, rows].contiguous())[0]
            for i, x in enumerate((q, k, v))]
    out, out_view = place(runtime, torch, op, 3,
                          torch.empty(b, h, s_rank, d, dtype=torch.bfloat16, device="cuda"))

    def launch(count=1):
        out_view.fill_(float("nan"))
        torch.cuda.synchronize()
        runtime.barrier()
        for _ in range(count):
            op(*args, out)
        torch.cuda.synchronize()

    theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                              enable_gqa=hkv != h)
    bound = 2 * (layout(theirs)[:, :, rows].float() - expected).abs().max().item() + 1e-3

    def close(what):
        error = (out_view.float() - expected).abs().nan_to_num(float("inf")).max().item()
        common.check(error <= bound, f"{label}, {what} (error {error:.3g}, bound {bound:.3g})")

    for launch_index in range(1, LAUNCHES + 1):
        launch()
        close(f"launch {launch_index}")
    if repeat:
        launch(BACK_TO_BACK)
        close(f"{BACK_TO_BACK} launches back to back")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            op(*args, out)
        for replay in range(3):
            out_view.fill_(float("nan"))
            torch.cuda.synchronize()
            runtime.barrier()
            graph.replay()
            torch.cuda.synchronize()
            close(f"graph replay {replay}")
    op.close()


def rank_main():
    os.environ["MKC_DEVICE"] = os.environ.get("LOCAL_RANK", "0")
    import torch

    import mkc

    # Symmetric tensors live as long as the runtime: room for every case's (about 3 GiB at 2x2).
    runtime = mkc.Runtime(symmetric_bytes=6 << 30)
    torch.cuda.set_device(runtime.device)
    generator = torch.Generator(device="cuda").manual_seed(2026)
    for index, (b, h, hkv, s, d, causal, zigzag, growing) in enumerate(
            shapes(runtime.world_size)):
        try:
            run_case(runtime, torch, mkc, generator, b, h, hkv, s, d, causal, zigzag, growing,
                     repeat=repeated(runtime.world_size, b, h, s, d, zigzag))
        except mkc.Error as error:
            common.check(False, f"rank {runtime.rank}: case {index}: {error}")
    return common.finish(torch, runtime)


if __name__ == "__main__":
    sys.exit(common.topologies_main(__file__, rank_main, "1x1,1x2,2x1,2x2,1x3"))
