#!/usr/bin/env python3
"""The library's MoE dispatch + expert FFN + combine (lib/moe_dispatch_gemm_combine.mlir) and its
routing report: every routing mode against PyTorch in f32 with outputs poisoned, and the report's
dropped counts, at 1x1, 1x2, 2x1 and 2x2 (ranks taking turns on fewer GPUs; across nodes over the
emulated NIC).

Shapes per rank: tokens 1, 128 and 4096; (Hd, I) (4096, 1024) and (7168, 2048); E 8, 16 and 64;
top-k 1, 2 and 8; odd extents beside them (7 and 150 tokens, Hd 256, 260 and 512, I 128, 136 and
384), and capacities below what skewed routing sends one expert.

- C left to its default (T): uniform routing drops nothing, and the report says 0 on every rank.
- The bytes each rank sent in a launch are the point-to-point minimum: across nodes (its proxy's
  network_statistics) a row once to each node that holds one of its token's experts, a row back
  for each copy, the census rows, counts and routing rows; within the node (the routing report's
  nvlink_bytes) a row to each expert on another GPU and a result back to each row's sender.
- A capacity C below what skewed routing sends one expert: the copies past it drop, in token
  order, and each rank's report counts its own tokens' exactly; the outputs lack exactly those.
- Degenerate routing: every token's first choice one expert, experts with no tokens at all.
- Expert indices out of range (E, -1) in one rank's tokens: that rank's routing() raises naming
  the token, choice and index, once; the next launch with valid routing is right.
- Launches back to back with routing changing every launch, each into its own output (100 of
  them at 128 tokens a rank).

Run it as is: it starts a job per topology, or prints "SKIP: <why>" and exits 77 without torch or
a GPU. MKC_TEST_TOPOLOGIES (1x1,1x2,2x1,2x2) picks the topologies, MKC_TEST_PROBLEMS (0,1,...) the
problems (all of them). A launch that has not finished after MKC_TEST_LAUNCH_TIMEOUT seconds (120)
fails its rank, naming the problem and the launch.
"""

import os
import sys
import time

import gpu_gemm_allreduce as common  # check, close_to, topologies_main; also puts mkc on the path



def rand(torch, g, *shape, scale=1.0):
    """Uniform in [-scale, scale), bf16, drawn in slices: ranks sharing one GPU hold no f32 copy
    of 64 experts' weights (3.5 GiB each) at once."""
    out = torch.empty(*shape, dtype=torch.bfloat16, device="cuda")
    for part in out.view(-1).split(1 << 24):
        part.copy_((torch.rand(part.numel(), generator=g, device="cuda") * 2 - 1) * scale)
    return out


def routed_in_token_order(torch, experts, E, C):
    """Each copy's slot (its expert's earlier copies, in token order) and whether it is kept:
    its expert in [0, E) and its slot below C."""
    flat = experts.flatten().long()
    valid = (flat >= 0) & (flat < E)
    onehot = torch.nn.functional.one_hot(torch.where(valid, flat, 0), E) * valid[:, None]
    slot = (onehot.cumsum(0) - onehot).gather(1, torch.where(valid, flat, 0)[:, None])[:, 0]
    return valid, valid & (slot < C)


def reference(torch, x, experts, weights, wg, wu, wd, C):
    """The program's result in f32 (its intermediate H and each expert's result rounded to bf16
    as the program rounds them), each choice's weighted part of it (a bf16 result's rounding can
    differ by an ulp between two orders of the GEMM's sums), and which copies were kept."""
    T, top_k = experts.shape
    E = wg.shape[0]
    valid, kept = routed_in_token_order(torch, experts, E, C)
    parts = torch.zeros(top_k, T, x.shape[1], device="cuda")
    flat = experts.flatten().long()
    for e in range(E):
        copies = torch.nonzero(kept & (flat == e))[:, 0]
        if copies.numel() == 0:
            continue
        tokens = copies // top_k
        rows = x[tokens].float()
        h = torch.nn.functional.silu(rows @ wg[e].float()) * (rows @ wu[e].float())
        out = (h.to(torch.bfloat16).float() @ wd[e].float()).to(torch.bfloat16).float()
        parts[copies % top_k, tokens] = weights.flatten()[copies, None] * out
    return parts.sum(0), parts, valid, kept


class Problem:
    """Weights and shapes of one compiled op, with routing drawn per launch."""

    def __init__(self, torch, g, T, Hd, I, E, top_k, C=None, launches=6):
        self.T, self.Hd, self.I, self.E, self.top_k = T, Hd, I, E, top_k
        self.launches = launches
        self.C = T if C is None else C
        self.shapes = {"T": T, "Hd": Hd, "I": I, "E": E, "TopK": top_k}
        if C is not None:
            self.shapes["C"] = C
        self.x = rand(torch, g, T, Hd)
        self.wg, self.wu = rand(torch, g, E, Hd, I, scale=0.25), rand(torch, g, E, Hd, I, scale=0.25)
        self.wd = rand(torch, g, E, I, Hd, scale=0.25)

    def uniform(self, torch, g):
        """Distinct experts per token, uniformly."""
        scores = torch.rand(self.T, self.E, generator=g, device="cuda")
        return scores.topk(self.top_k, dim=1).indices.to(torch.int32)

    def skewed(self, torch, g):
        """Zipf-like: expert e drawn with weight 1 / (e + 1), distinct per token."""
        bias = torch.log(1.0 / torch.arange(1, self.E + 1, device="cuda"))
        gumbel = -torch.log(-torch.log(torch.rand(self.T, self.E, generator=g, device="cuda")))
        return (bias + gumbel).topk(self.top_k, dim=1).indices.to(torch.int32)

    def degenerate(self, torch, g):
        """Every token's first choice expert 1, the others among 2..top_k+1: the rest get none."""
        experts = torch.arange(1, self.top_k + 1, device="cuda", dtype=torch.int32)
        return experts.repeat(self.T, 1)

    def weights(self, torch, g):
        return torch.rand(self.T, self.top_k, generator=g, device="cuda")


def shard(torch, value, rank, world):
    return torch.tensor_split(value, world, 0)[rank].contiguous()


class Bound:
    """The op with this rank's inputs placed as its arguments require."""

    def __init__(self, runtime, torch, mkc, problem):
        self.runtime, self.torch, self.problem = runtime, torch, problem
        self.rank, self.world = runtime.rank, runtime.world_size
        self.op = runtime.compile(mkc.library_program("moe_dispatch_gemm_combine"),
                                  shapes=problem.shapes)
        self.label = f"rank {self.rank}: moe {problem.shapes}"

    def place(self, index, value):
        part = shard(self.torch, value, self.rank, self.world)
        if not self.op.arguments[index].symmetric:
            return part
        handle = self.runtime.empty(list(part.shape), part.dtype)
        handle.torch().copy_(part)
        return handle

    def output(self):
        argument = self.op.arguments[6]
        if argument.symmetric:
            handle = self.runtime.empty(list(argument.shape), self.torch.bfloat16)
            return handle, handle.torch()
        view = self.torch.empty(list(argument.shape), dtype=self.torch.bfloat16, device="cuda")
        return view, view

    def inputs(self, experts, weights):
        p = self.problem
        return [self.place(i, v) for i, v in enumerate([p.x, experts, weights, p.wg, p.wu, p.wd])]

    def expect(self, experts, weights, y, what):
        """Checks this rank's output and routing report against the reference."""
        torch, p = self.torch, self.problem
        ref, parts, valid, kept = reference(torch, p.x, experts, weights, p.wg, p.wu, p.wd, p.C)
        # Each part is rounded once, to bf16, at either end: an ulp of each, 2^-8 of their sum.
        common.close_to(y, shard(torch, ref, self.rank, self.world), f"{self.label}: {what}",
                        partials=[shard(torch, parts.abs().sum(0), self.rank, self.world)])
        mine = shard(torch, (valid & ~kept).view(p.T, p.top_k), self.rank, self.world)
        return int(mine.sum())


def network_bytes(bound, experts):
    """The bytes point-to-point routing sends from this rank to other nodes in one launch: to its
    rail peer on each other node, its census row, two counts, and a row and a routing row for
    each token with an expert there; back to that peer, a row for each of the peer's copies to
    an expert of this node."""
    p, runtime = bound.problem, bound.runtime
    nodes, gpus = runtime.nodes, runtime.local_world_size
    node, gpu = divmod(bound.rank, gpus)
    per_rank, row = p.T // bound.world, p.Hd * 2
    valid = (experts >= 0) & (experts < p.E)
    node_of = bound.torch.where(valid, experts // (p.E // nodes), -1)
    total = 0
    for m in range(nodes):
        if m == node:
            continue
        mine = node_of[bound.rank * per_rank:(bound.rank + 1) * per_rank]
        packed = int((mine == m).any(1).sum())
        source = m * gpus + gpu
        copies = int((node_of[source * per_rank:(source + 1) * per_rank] == node).sum())
        total += 4 * (p.E + 2) + packed * (row + 4 * p.top_k) + copies * row
    return total


def nvlink_bytes(bound, experts):
    """The bytes point-to-point routing stores from this rank on other GPUs of its node in one
    launch: each kept copy it routes (its own tokens', and those its rail peers sent) to an
    expert on another GPU, and a result row back for each kept copy on its experts that a rank of
    another GPU index routed here."""
    p, runtime, torch = bound.problem, bound.runtime, bound.torch
    gpus = runtime.local_world_size
    node, gpu = divmod(bound.rank, gpus)
    per_rank, experts_per_rank, row = p.T // bound.world, p.E // bound.world, p.Hd * 2
    _, kept = routed_in_token_order(torch, experts, p.E, p.C)
    kept = kept.view(p.T, p.top_k)
    holder = torch.where(kept, experts // experts_per_rank, -1)  # the expert's rank
    sender = (torch.arange(p.T, device=experts.device) // per_rank)[:, None].expand_as(holder)
    here = holder // gpus == node
    # The rows this rank sends: its own tokens', and those of the same GPU index on other nodes.
    sent = kept & here & (sender % gpus == gpu) & (holder != bound.rank)
    back = kept & (holder == bound.rank) & (sender % gpus != gpu)
    return int(sent.sum() + back.sum()) * row


def run_routings(bound, g):
    """One launch per routing mode, outputs poisoned, each checked with its report, and across
    nodes the bytes it sent with the point-to-point minimum."""
    torch, p, op = bound.torch, bound.problem, bound.op
    handle, y = bound.output()
    for mode in ("uniform", "skewed", "degenerate"):
        experts, weights = getattr(p, mode)(torch, g), p.weights(torch, g)
        inputs = bound.inputs(experts, weights)
        y.fill_(float("nan"))
        torch.cuda.synchronize()
        bound.runtime.barrier()
        before, stored = bound.runtime.network_statistics().bytes, op.routing().nvlink_bytes
        op(*inputs, handle)
        common.settle(torch, bound.runtime, f"{bound.label}: {mode}")
        # Every rank's results are back, so every proxy has carried its part.
        bound.runtime.barrier()
        sent = bound.runtime.network_statistics().bytes - before
        common.check(sent == network_bytes(bound, experts),
                     f"{bound.label}: {mode}: sent {sent} bytes to other nodes, point to point "
                     f"{network_bytes(bound, experts)}")
        dropped = bound.expect(experts, weights, y, mode)
        report = op.routing()
        stored = report.nvlink_bytes - stored
        common.check(stored == nvlink_bytes(bound, experts),
                     f"{bound.label}: {mode}: stored {stored} bytes on other GPUs, point to point "
                     f"{nvlink_bytes(bound, experts)}")
        common.check(report.dropped == dropped,
                     f"{bound.label}: {mode}: the report drops {report.dropped}, the reference "
                     f"{dropped}")
        if "C" not in p.shapes:
            common.check(dropped == 0, f"{bound.label}: {mode}: the default C dropped {dropped}")


def run_out_of_range(bound, g, mkc):
    """Indices E and -1 in rank 0's tokens: the copies go nowhere, rank 0's report raises naming
    the first, the other ranks' do not. Then a valid launch, right and not raising."""
    torch, p, op = bound.torch, bound.problem, bound.op
    handle, y = bound.output()
    experts, weights = p.uniform(torch, g), p.weights(torch, g)
    bad = experts.clone()
    local = p.T // bound.world
    bad[1 % local, p.top_k - 1] = p.E
    bad[local // 2 if bound.world == 1 else 0, 0] = -1
    bound.runtime.barrier()
    y.fill_(float("nan"))
    torch.cuda.synchronize()
    op(*bound.inputs(bad, weights), handle)
    common.settle(torch, bound.runtime, f"{bound.label}: indices out of range")
    bound.expect(bad, weights, y, "indices out of range")
    if bound.rank == 0:
        try:
            op.routing()
            common.check(False, f"{bound.label}: out-of-range experts were not reported")
        except mkc.Error as error:
            flat = bad[:local].flatten()
            first = int(torch.nonzero((flat < 0) | (flat >= p.E))[0, 0])
            token, choice = divmod(first, p.top_k)
            index = int(bad[token, choice])
            words = [f"choice {choice} of token {token}", f"expert {index}", f"[0, {p.E})"]
            common.check(all(w in str(error) for w in words),
                         f"{bound.label}: the report names {words}: {error}")
    else:
        op.routing()
    y.fill_(float("nan"))
    torch.cuda.synchronize()
    bound.runtime.barrier()
    op(*bound.inputs(experts, weights), handle)
    common.settle(torch, bound.runtime, f"{bound.label}: after indices out of range")
    bound.expect(experts, weights, y, "after indices out of range")
    op.routing()  # reported once: no error now


def run_back_to_back(bound, g):
    """Launches in a row with routing changing every launch, each into its own output."""
    torch, p, op = bound.torch, bound.problem, bound.op
    launches = []
    for i in range(p.launches):
        experts = (p.skewed if i % 2 else p.uniform)(torch, g)
        weights = p.weights(torch, g)
        handle, y = bound.output()
        y.fill_(float("nan"))
        launches.append((experts, weights, bound.inputs(experts, weights), handle, y))
    torch.cuda.synchronize()
    bound.runtime.barrier()
    before = op.routing().launch
    for _, _, inputs, handle, _ in launches:
        op(*inputs, handle)
    common.settle(torch, bound.runtime, f"{bound.label}: {p.launches} launches in a row")
    for i, (experts, weights, _, _, y) in enumerate(launches):
        dropped = bound.expect(experts, weights, y, f"launch {i + 1} of {p.launches} in a row")
    report = op.routing()
    common.check(report.launch == before + p.launches and report.dropped == dropped,
                 f"{bound.label}: the report after {p.launches} launches: {report} (expected "
                 f"launch {before + p.launches}, dropped {dropped})")


def problems(torch, g, world):
    # Per rank: DeepSeek-V3's and Mixtral-like layers at 4096, 128 and 1 tokens; C defaulted (T)
    # and C below skewed routing's load; then odd extents. Each is made (its weights drawn) when
    # called, so that a run of some of them (MKC_TEST_PROBLEMS) holds only those.
    def problem(*shape, **options):
        return lambda: Problem(torch, g, *shape, **options)

    yield problem(4096 * world, 7168, 2048, 16, 8)
    yield problem(128 * world, 4096, 1024, 64, 2, launches=100)
    yield problem(1 * world, 4096, 1024, 8, 1)
    yield problem(1 * world, 7168, 2048, 64, 8)
    yield problem(128 * world, 7168, 2048, 16, 8, C=96 * world)
    yield problem(128 * world, 512, 384, 4 * world, 2)
    yield problem(256 * world, 256, 128, 8 * world, 4, C=48 * world)
    yield problem(7 * world, 256, 128, 8, 2)
    # Rows of 260 bf16 (not whole 16-byte units): the tile library's expert GEMMs and returns.
    yield problem(150 * world, 260, 136, 8, 2)
    if world == 1:
        yield problem(1000, 512, 256, 64, 8, C=100)


def rank_main():
    os.environ["MKC_DEVICE"] = os.environ.get("LOCAL_RANK", "0")
    # DeepSeek-V3's layer at 4096 tokens a rank routes 1.7 GB through symmetric memory.
    os.environ.setdefault("MKC_SYMMETRIC_BYTES", "6G")
    import torch

    import mkc

    runtime = mkc.Runtime()
    torch.cuda.set_device(runtime.device)
    g = torch.Generator(device="cuda").manual_seed(26)
    chosen = os.environ.get("MKC_TEST_PROBLEMS")
    for index, make in enumerate(problems(torch, g, runtime.world_size)):
        if chosen and str(index) not in chosen.split(","):
            continue
        problem = make()
        start = time.monotonic()
        bound = Bound(runtime, torch, mkc, problem)
        try:
            run_routings(bound, g)
            run_out_of_range(bound, g, mkc)
            run_back_to_back(bound, g)
        except mkc.Error as error:
            common.check(False, f"{bound.label}: {error}")
        bound.op.close()
        if runtime.rank == 0:
            print(f"{runtime.nodes}x{runtime.local_world_size}: moe {problem.shapes} checked in "
                  f"{time.monotonic() - start:.1f} s", flush=True)
        # The next problem's weights take this one's place, not a place beside it.
        del problem, bound
        torch.cuda.empty_cache()
    return common.finish(torch, runtime)


# Across nodes, the emulated NIC (with reordering) between ranks of this host.
NETWORKS = {topology: {"MKC_NET": "emulated", "MKC_NET_REORDER": "1"} for topology in ("2x1", "2x2")}


def main():
    topologies = os.environ.get("MKC_TEST_TOPOLOGIES", "1x1,1x2,2x1,2x2").split(",")
    return common.run_topologies(__file__, topologies, NETWORKS)


if __name__ == "__main__":
    sys.exit(common.script_main(__file__, rank_main, main))
