"""Random tile programs made from the dialect's pieces, and what each means, in PyTorch.

A program is drawn from a seed: a family (a local GEMM, a GEMM whose tiles are all-reduced or
reduce-scattered, an all-gather feeding a GEMM, an all-reduce followed by a second grid or by an
epilogue on its combined tile, a reduce-scatter followed by one, an elementwise all-reduce, a
gated pair of GEMMs), a topology, shapes from 1 to a few thousand (primes among them), element
types, placements, tile sizes (masked where they do not divide) and an epilogue between the
matmul and the tile's store or collective (or after the collective): arithmetic, activations,
elementary functions, min and max with a constant and, where no tile is partial, norms of the
tile's rows and its columns' maxima (reductions and broadcasts). Some draws have awkward shapes,
which mkc once refused: rows that are not whole 16-byte pieces, a contracted dim that is not a
multiple of 16 on each rank or does not split evenly, shards that are not a multiple of the tile
or are uneven (split as torch.tensor_split splits them: shard_range).


    spec = draw(seed, topologies=["1x2", "2x1"], max_dim=512)
    spec.text()                        # the program, an mk.program
    spec.shape_bindings()              # "M=300,N=136,K=64"
    spec.reference(torch, inputs)      # each output's global value, and its partial sums

The seed alone gives the program: a failure reproduces from `draw(seed, ...)`.
"""

import dataclasses
import random

PRIMES = [7, 13, 31, 67, 127, 257, 509, 1009, 2003, 3001]
ACTIVATIONS = ["relu", "gelu", "silu"]
# Elementary functions, each kept finite on any matmul output: mk ops in order, what they mean.
UNARY = {
    "tanh": ["tanh"], "sigmoid": ["sigmoid"], "neg": ["neg"], "abs": ["abs"],
    "exp_tanh": ["tanh", "exp"], "sqrt_abs": ["abs", "sqrt"],
    "log_abs1": ["abs", "+1", "log"], "rsqrt_abs1": ["abs", "+1", "rsqrt"],
    "reciprocal_abs1": ["abs", "+1", "reciprocal"],
}
# Epilogue ops that combine a tile's rows or columns: drawn only where no tile is partial, since
# a tile's zeros past an edge count in its reductions.
TILE_REDUCTIONS = ("rownorm", "colmax")
ITEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4}


def shard_range(extent, parts, index):
    """The elements [lo, hi) of shard `index` of `extent` split over `parts` ranks, as
    torch.tensor_split splits it: the first extent % parts shards hold one more."""
    base, extra = divmod(extent, parts)
    lo = index * base + min(index, extra)
    return lo, lo + base + (index < extra)


@dataclasses.dataclass
class Argument:
    name: str
    dims: list        # symbols or numbers
    dtype: str
    placement: str    # "replicated", "symmetric", "shard D over AXIS"
    output: bool = False

    def type(self):
        dims = ", ".join(str(d) for d in self.dims)
        return f"!mk.tensor<[{dims}], {self.dtype}, {self.placement}>"


@dataclasses.dataclass
class Spec:
    seed: int
    family: str
    topology: str
    shapes: dict
    tile: tuple
    dtype: str          # of the inputs
    out_dtype: str      # of the output (and of the collective's tiles)
    epilogue: list      # ("scale", value) | ("bias",) | ("mul",) | ("act", kind) | ("max0",)
                        # | ("unary", UNARY key) | ("min", value) | ("rownorm",) | ("colmax",)
    axis: str = "world"
    a_sharding: str = "replicated"
    combined: bool = False  # the epilogue on the collective's combined tile, in its grid

    # -- what the program is ---------------------------------------------------------------

    @property
    def world(self):
        nodes, gpus = (int(x) for x in self.topology.split("x"))
        return nodes * gpus

    def shape_bindings(self):
        return ",".join(f"{k}={v}" for k, v in self.shapes.items())

    def arguments(self):
        """The program's arguments, in order."""
        f, dt, out = self.family, self.dtype, self.out_dtype
        extra = [Argument(name, ["M", "N"], dt, "replicated")
                 for name in ("E",) if any(op[0] in ("bias", "mul") for op in self.epilogue)]
        if f == "gemm":
            a = Argument("A", ["M", "K"], dt, self.a_sharding)
            b_place = "shard 1 over world" if self.a_sharding == "replicated" else "replicated"
            c_place = ("shard 1 over world" if self.a_sharding == "replicated"
                       else "shard 0 over world")
            extra = [dataclasses.replace(e, placement=c_place) for e in extra]
            return [a, Argument("B", ["K", "N"], dt, b_place), *extra,
                    Argument("C", ["M", "N"], out, c_place, output=True)]
        if f in ("gemm_all_reduce", "all_reduce_epilogue"):
            args = [Argument("A", ["M", "K"], dt, f"shard 1 over {self.axis}"),
                    Argument("B", ["K", "N"], dt, f"shard 0 over {self.axis}"), *extra]
            return args + [Argument("C", ["M", "N"], out, "replicated", output=True)]
        if f in ("gemm_reduce_scatter", "reduce_scatter_epilogue"):
            extra = [dataclasses.replace(e, placement="replicated") for e in extra]
            return [Argument("A", ["M", "K"], dt, "shard 1 over world"),
                    Argument("B", ["K", "N"], dt, "shard 0 over world"), *extra,
                    Argument("C", ["M", "N"], out, "shard 0 over world", output=True)]
        if f == "all_gather_gemm":
            extra = [dataclasses.replace(e, placement="shard 1 over world") for e in extra]
            return [Argument("A", ["M", "K"], dt, "shard 0 over world"),
                    Argument("B", ["K", "N"], dt, "shard 1 over world"), *extra,
                    Argument("C", ["M", "N"], out, "shard 1 over world", output=True)]
        if f == "elementwise_all_reduce":
            return [Argument("X", ["M", "N"], dt, "symmetric"), *extra,
                    Argument("C", ["M", "N"], out, "replicated", output=True)]
        if f == "gated":
            return [Argument("A", ["M", "K"], dt, "replicated"),
                    Argument("G", ["K", "N"], dt, "shard 1 over world"),
                    Argument("U", ["K", "N"], dt, "shard 1 over world"),
                    Argument("C", ["M", "N"], out, "shard 1 over world", output=True)]
        raise ValueError(f)

    def text(self):
        """The program, as mkc reads it."""
        args = self.arguments()
        types = {a.name: a.type() for a in args}
        tm, tn = self.tile
        f = self.family
        masked = " masked" if self._masked() else ""
        acc = f"!mk.tile<[{tm}, {tn}], f32>"
        tile_out = f"!mk.tile<[{tm}, {tn}], {self.out_dtype}>"
        tile_in = f"!mk.tile<[{tm}, {tn}], {self.dtype}>"
        lines = [f"// random program {self.seed}: {f} on {self.topology}, {self.shape_bindings()}"]
        symbols = ", ".join(self.shapes)
        params = ",\n    ".join(f"%{a.name}: {a.type()}" for a in args)
        lines.append(f"mk.program @random_{self.seed} [{symbols}] mesh <?x?> (\n    {params}) {{")
        body = []
        a_name = "A"
        if f == "all_gather_gemm":
            gathered = "!mk.tensor<[M, K], {}, replicated>".format(self.dtype)
            body.append(f"%A_all = mk.all_gather %A : {types['A']} -> {gathered}")
            types["A_all"] = gathered
            a_name = "A_all"
        target = "C"
        if f in ("all_reduce_epilogue", "reduce_scatter_epilogue"):
            placement = "replicated" if f == "all_reduce_epilogue" else "shard 0 over world"
            reduced = f"!mk.tensor<[M, N], {self.out_dtype}, {placement}>"
            body.append(f"%R = mk.buffer : {reduced}")
            types["R"] = reduced
            target = "R"
        grid_global = " global" if "reduce_scatter" in f else ""
        body.append(f"mk.tile_grid (%m, %n) over %{target}{grid_global} tiles [{tm}, {tn}]{masked}"
                    f" : {types[target]} {{")
        inner = []
        if f == "elementwise_all_reduce":
            inner.append(f"%x = mk.load %X[%m, %n] : {types['X']} -> {tile_in}")
            inner.append(f"%v0 = mk.convert %x : {tile_in} -> {acc}")
        elif f == "gated":
            for name in ("G", "U"):
                inner.append(f"%{name.lower()} = mk.matmul %A[%m, :], %{name}[:, %n] : "
                             f"{types['A']}, {types[name]} -> {acc}")
            inner.append(f"%v0 = mk.swiglu %g, %u : {acc}")
        else:
            inner.append(f"%v0 = mk.matmul %{a_name}[%m, :], %B[:, %n] : {types[a_name]}, "
                         f"{types['B']} -> {acc}")
        value = "%v0"
        after = f in ("all_reduce_epilogue", "reduce_scatter_epilogue")
        grid_epilogue = [] if after else self.epilogue
        value = self._epilogue(inner, value, grid_epilogue, types, acc, tile_in, "e")
        if self.out_dtype != "f32":
            inner.append(f"%out = mk.convert {value} : {acc} -> {tile_out}")
            value = "%out"
        result = f"%r = " if self.combined else ""
        combined = f" -> {tile_out}" if self.combined else ""
        if f in ("gemm_all_reduce", "elementwise_all_reduce", "all_reduce_epilogue"):
            over = f" over {self.axis}" if self.axis != "world" else ""
            inner.append(f"{result}mk.all_reduce sum {value} into %{target}[%m, %n]{over} : "
                         f"{tile_out}, {types[target]}{combined}")
        elif "reduce_scatter" in f:
            inner.append(f"{result}mk.reduce_scatter sum {value} into %{target}[%m, %n] : "
                         f"{tile_out}, {types[target]}{combined}")
        else:
            inner.append(f"mk.store {value}, %C[%m, %n] : {tile_out}, {types['C']}")
        if after and not self.combined:
            # A second grid reads each reduced tile and finishes it.
            body += ["  " + line for line in inner] + ["}"]
            body.append(f"mk.tile_grid (%m, %n) over %C tiles [{tm}, {tn}]{masked} : "
                        f"{types['C']} {{")
            inner = [f"%r = mk.load %R[%m, %n] : {types['R']} -> {tile_out}"]
        if after:
            value = "%r"
            if self.out_dtype != "f32":
                inner.append(f"%r32 = mk.convert %r : {tile_out} -> {acc}")
                value = "%r32"
            value = self._epilogue(inner, value, self.epilogue, types, acc, tile_in, "f")
            if self.out_dtype != "f32":
                inner.append(f"%y = mk.convert {value} : {acc} -> {tile_out}")
                value = "%y"
            inner.append(f"mk.store {value}, %C[%m, %n] : {tile_out}, {types['C']}")
        body += ["  " + line for line in inner] + ["}"]
        lines += ["  " + line for line in body] + ["}"]
        return "\n".join(lines) + "\n"

    def _epilogue(self, lines, value, ops, types, acc, tile_in, prefix):
        for i, op in enumerate(ops):
            name = f"%{prefix}{i}"
            if op[0] == "scale":
                lines.append(f"{name}c = arith.constant {op[1]:.6e} : f32")
                lines.append(f"{name}s = mk.splat {name}c : f32 -> {acc}")
                lines.append(f"{name} = mk.mul {value}, {name}s : {acc}")
            elif op[0] in ("bias", "mul"):
                lines.append(f"{name}l = mk.load %E[%m, %n] : {types['E']} -> {tile_in}")
                lines.append(f"{name}f = mk.convert {name}l : {tile_in} -> {acc}")
                kind = "add" if op[0] == "bias" else "mul"
                lines.append(f"{name} = mk.{kind} {value}, {name}f : {acc}")
            elif op[0] == "act":
                lines.append(f"{name} = mk.activation {op[1]} {value} : {acc}")
            elif op[0] == "max0":
                lines.append(f"{name}c = arith.constant 0.0 : f32")
                lines.append(f"{name}s = mk.splat {name}c : f32 -> {acc}")
                lines.append(f"{name} = mk.max {value}, {name}s : {acc}")
            elif op[0] == "min":
                lines.append(f"{name}c = arith.constant {op[1]:.6e} : f32")
                lines.append(f"{name}s = mk.splat {name}c : f32 -> {acc}")
                lines.append(f"{name} = mk.min {value}, {name}s : {acc}")
            elif op[0] == "unary":
                functions = UNARY[op[1]]
                if "+1" in functions:
                    lines.append(f"{name}one = arith.constant 1.0 : f32")
                    lines.append(f"{name}ones = mk.splat {name}one : f32 -> {acc}")
                step = value
                for j, function in enumerate(functions):
                    target = name if j == len(functions) - 1 else f"{name}u{j}"
                    if function == "+1":
                        lines.append(f"{target} = mk.add {step}, {name}ones : {acc}")
                    else:
                        lines.append(f"{target} = mk.{function} {step} : {acc}")
                    step = target
            elif op[0] == "rownorm":
                # x / sqrt(mean of the tile row's squares + 1)
                tm, tn = self.tile
                rows = f"!mk.tile<[{tm}], f32>"
                lines.append(f"{name}q = mk.mul {value}, {value} : {acc}")
                lines.append(f"{name}r = mk.reduce sum {name}q dim 1 : {acc} -> {rows}")
                lines.append(f"{name}c = arith.constant {1.0 / tn:.9e} : f32")
                lines.append(f"{name}k = mk.splat {name}c : f32 -> {rows}")
                lines.append(f"{name}one = arith.constant 1.0 : f32")
                lines.append(f"{name}o = mk.splat {name}one : f32 -> {rows}")
                lines.append(f"{name}m = mk.mul {name}r, {name}k : {rows}")
                lines.append(f"{name}v = mk.add {name}m, {name}o : {rows}")
                lines.append(f"{name}i = mk.rsqrt {name}v : {rows}")
                lines.append(f"{name}b = mk.broadcast {name}i dim 1 : {rows} -> {acc}")
                lines.append(f"{name} = mk.mul {value}, {name}b : {acc}")
            elif op[0] == "colmax":
                # x - the max of the tile column
                tm, tn = self.tile
                cols = f"!mk.tile<[{tn}], f32>"
                lines.append(f"{name}r = mk.reduce max {value} dim 0 : {acc} -> {cols}")
                lines.append(f"{name}b = mk.broadcast {name}r dim 0 : {cols} -> {acc}")
                lines.append(f"{name} = mk.sub {value}, {name}b : {acc}")
            value = name
        return value

    def _masked(self):
        m, n = self.shapes["M"], self.shapes["N"]
        tm, tn = self.tile

        def whole(extent, tile, shards):  # every shard holds whole tiles
            return extent % shards == 0 and extent // shards % tile == 0

        return not (whole(m, tm, self._row_shards()) and whole(n, tn, self._column_shards()))

    def _column_shards(self):
        if self.family in ("all_gather_gemm", "gated") or (
                self.family == "gemm" and self.a_sharding == "replicated"):
            return self.world
        return 1

    def _row_shards(self):
        if "reduce_scatter" in self.family or (
                self.family == "gemm" and self.a_sharding != "replicated"):
            return self.world
        return 1

    # -- what the program means ------------------------------------------------------------

    def reference(self, torch, inputs):
        """The outputs' global values (f32) from the inputs' global values, and, for each, the
        partials (f32) whose bf16 roundings a schedule may add, and how far those roundings may
        move an epilogue computed from their sum (None if none is): {name: (value, [partials],
        slack)}."""
        f = self.family
        ranks, axis_size = self._contributors()
        dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
        out = dtype[self.out_dtype]

        def finish(value, ops):
            for op in ops:
                if op[0] == "scale":
                    value = value * op[1]
                elif op[0] == "bias":
                    value = value + inputs["E"]
                elif op[0] == "mul":
                    value = value * inputs["E"]
                elif op[0] == "act":
                    value = {"relu": torch.relu, "silu": torch.nn.functional.silu,
                             "gelu": lambda x: torch.nn.functional.gelu(x, approximate="tanh")
                             }[op[1]](value)
                elif op[0] == "max0":
                    value = torch.clamp(value, min=0.0)
                elif op[0] == "min":
                    value = torch.clamp(value, max=op[1])
                elif op[0] == "unary":
                    for function in UNARY[op[1]]:
                        value = value + 1 if function == "+1" else {
                            "tanh": torch.tanh, "sigmoid": torch.sigmoid, "neg": torch.neg,
                            "abs": torch.abs, "exp": torch.exp, "sqrt": torch.sqrt,
                            "log": torch.log, "rsqrt": torch.rsqrt,
                            "reciprocal": torch.reciprocal}[function](value)
                elif op[0] == "rownorm":
                    m, n = value.shape
                    tiles = value.reshape(m, n // self.tile[1], self.tile[1])
                    value = (tiles * (tiles.pow(2).mean(dim=2, keepdim=True) + 1).rsqrt()
                             ).reshape(m, n)
                elif op[0] == "colmax":
                    m, n = value.shape
                    tiles = value.reshape(m // self.tile[0], self.tile[0], n)
                    value = (tiles - tiles.amax(dim=1, keepdim=True)).reshape(m, n)
            return value

        if f == "gated":
            a, g, u = inputs["A"], inputs["G"], inputs["U"]
            value = torch.nn.functional.silu(a @ g) * (a @ u)
            return {"C": (value.to(out).float(), [], None)}
        if f in ("gemm", "all_gather_gemm"):
            value = finish(inputs["A"] @ inputs["B"], self.epilogue)
            return {"C": (value.to(out).float(), [], None)}
        # The contributions of the ranks that combine: their K shards (or their X), each
        # finished and rounded as the tile is before its collective.
        after = f in ("all_reduce_epilogue", "reduce_scatter_epilogue")
        pre = [] if after else self.epilogue
        partials = []
        for part in range(axis_size):
            if f == "elementwise_all_reduce":
                x = inputs["X"][part]
                partials.append(finish(x, pre).to(out).float())
            else:
                lo, hi = shard_range(inputs["A"].shape[1], axis_size, part)
                p = inputs["A"][:, lo:hi] @ inputs["B"][lo:hi]
                partials.append(finish(p, pre).to(out).float())
        total = sum(partials)
        if after:
            reduced = total.to(out).float()
            value = finish(reduced, self.epilogue)
            # The sum may be off by what rounding its partials costs; the epilogue moves that.
            bound = sum(p.abs() for p in partials) * (len(partials) * 2**-8)
            slack = torch.maximum((finish(reduced + bound, self.epilogue) - value).abs(),
                                  (finish(reduced - bound, self.epilogue) - value).abs())
            return {"C": (value.to(out).float(), [], slack)}
        return {"C": (total.to(out).float(), partials, None)}

    def _contributors(self):
        nodes, gpus = (int(x) for x in self.topology.split("x"))
        size = {"world": nodes * gpus, "gpus": gpus, "nodes": nodes}[self.axis]
        return nodes * gpus, size


def _dim(rng, max_dim, multiple=1, prime_chance=0.0):
    """A dim up to `max_dim`: a multiple of `multiple`, or now and then a prime."""
    if rng.random() < prime_chance:
        return rng.choice([p for p in PRIMES if p <= max_dim] or [7])
    choices = [1, 7, 13, 64, 100, 128, 200, 256, 300, 384, 509, 640, 1000, 1024, 1500, 2048,
               2003, 3000]
    value = rng.choice([c for c in choices if c <= max_dim])
    return max(multiple, value // multiple * multiple)


def draw(seed, topologies, max_dim=512):
    """The program of `seed`, on one of `topologies`, with dims up to about `max_dim`."""
    rng = random.Random(seed)
    topology = rng.choice(topologies)
    nodes, gpus = (int(x) for x in topology.split("x"))
    world = nodes * gpus
    family = rng.choice(["gemm", "gemm_all_reduce", "gemm_all_reduce", "gemm_reduce_scatter",
                         "all_gather_gemm", "all_reduce_epilogue", "reduce_scatter_epilogue",
                         "elementwise_all_reduce",
                         "gated"])
    dtype = rng.choice(["bf16", "bf16", "f16"])
    out_dtype = rng.choice(["bf16", "bf16", dtype, "f32"])
    axis = "world"
    if family in ("gemm_all_reduce", "all_reduce_epilogue") and rng.random() < 0.25:
        axis = rng.choice(["gpus", "nodes"])
    axis_size = {"world": world, "gpus": gpus, "nodes": nodes}[axis]
    tile = (rng.choice([64, 128, 128]), rng.choice([64, 128, 256, 256]))
    # Mostly shapes of whole tiles per shard; some awkward (rows not of 16-byte pieces, a
    # contracted dim not a multiple of 16 on each rank or split unevenly, shards not a multiple of
    # the tile or uneven).
    awkward = rng.random() < 0.15
    m = _dim(rng, max_dim)
    n = _dim(rng, max_dim, 8, prime_chance=0.5 if awkward else 0.0)
    # The contracted dim on each rank: mostly multiples of 32, now and then 16 or 48.
    k = rng.choice([32, 64, 64, 96, 128, 192, 16, 48]) * axis_size
    if awkward and rng.random() < 0.5:
        k = rng.choice([8, 24, 40]) * axis_size + rng.choice([0, 1, axis_size - 1])
    if family in ("gemm_reduce_scatter", "reduce_scatter_epilogue") and not awkward:
        m = max(1, m // (tile[0] * world)) * tile[0] * world
    if family == "all_gather_gemm" and not awkward:
        m = max(1, m // (128 * world)) * 128 * world
        n = max(1, n // (tile[1] * world)) * tile[1] * world
    if family == "gated" or (family == "gemm" and not awkward):
        n = max(1, n // (tile[1] * world)) * tile[1] * world
    a_sharding = "replicated"
    if family == "gemm" and rng.random() < 0.5:
        a_sharding = "shard 0 over world"
        m = max(1, m // (tile[0] * world)) * tile[0] * world
    shapes = {"M": m, "N": n, "K": k}
    if family == "elementwise_all_reduce":
        shapes = {"M": m, "N": n}
    epilogue = []
    if family != "gated":
        for _ in range(rng.choice([0, 0, 1, 2, 3])):
            kind = rng.choice(["scale", "bias", "mul", "act", "max0", "unary", "unary", "min",
                               *TILE_REDUCTIONS])
            if kind == "scale":
                epilogue.append(("scale", rng.choice([0.5, -0.25, 2.0, 0.125])))
            elif kind == "act":
                epilogue.append(("act", rng.choice(ACTIVATIONS)))
            elif kind == "unary":
                epilogue.append(("unary", rng.choice(sorted(UNARY))))
            elif kind == "min":
                epilogue.append(("min", rng.choice([0.5, -0.25, 4.0])))
            else:
                epilogue.append((kind,))
    spec = Spec(seed=seed, family=family, topology=topology, shapes=shapes, tile=tile,
                dtype=dtype, out_dtype=out_dtype, epilogue=epilogue, axis=axis,
                a_sharding=a_sharding,
                combined=family == "reduce_scatter_epilogue" or (
                    family == "all_reduce_epilogue" and rng.random() < 0.5))
    if spec._masked():
        spec.epilogue = [op for op in epilogue if op[0] not in TILE_REDUCTIONS]
    return spec
