"""Tile programs: where the library's are, how a program and its shapes are handed to the C ABI,
and the CUDA C++ a program becomes (generate_cuda, which needs no GPU)."""

import ctypes
import os
import pathlib

from . import _capi


def library_program(name):
    """The path of the fused-op library's program `name` ("gemm_allreduce"): `name`.mlir in
    $MKC_LIB_DIR if set, else in the lib/ folder of the repository holding this package.
    Raises FileNotFoundError, listing the programs there, if it has none of that name.

    Each program's head comment says what it computes; its arguments are this rank's shards
    (FusedOp.arguments). "moe_dispatch_gemm_combine" (shapes T, Hd, I, E, TopK, and C, the rows
    an expert takes, T by default) takes, in order: x [T/ranks, Hd] bf16, this rank's tokens;
    experts [T/ranks, TopK] int32 and weights [T/ranks, TopK] f32, its router's choices and their
    weights; w_gate, w_up [E/ranks, Hd, I] and w_down [E/ranks, I, Hd] bf16, its experts (rank r
    holds experts r * E/ranks ..); y [T/ranks, Hd] bf16, where each token gets the sum over its
    choices k of weights[k] * (SwiGLU(x w_gate, x w_up) w_down) of expert experts[k], in f32."""
    folder = pathlib.Path(os.environ.get("MKC_LIB_DIR")
                          or pathlib.Path(__file__).resolve().parents[2] / "lib")
    path = folder / f"{name}.mlir"
    if not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.mlir"))
        raise FileNotFoundError(f"no program {name!r} in {folder}; it has: "
                                f"{', '.join(known) or 'none'}")
    return path


def is_program_text(program):
    """Whether `program` is the text of a tile program (a str containing "mk.program") rather
    than the path of a .mlir file."""
    return isinstance(program, str) and "mk.program" in program


def path(program):
    """`program` (a str or PathLike) as a path string."""
    if isinstance(program, (str, os.PathLike)):
        return os.fspath(program)
    raise TypeError(f"program must be a tile program's text or the path of a .mlir file, not "
                    f"{type(program).__name__}")


def program_source(program):
    """(text, name for diagnostics or None) of `program`: the text of a tile program, or the
    path (str or PathLike) of a .mlir file."""
    if is_program_text(program):
        return program, None
    return pathlib.Path(path(program)).read_text(encoding="utf-8"), path(program)


def bindings(what, mapping, keywords=None):
    """`mapping` and `keywords` ({name: int}) as the C ABI's "NAME=VALUE,..." string, or None if
    both are empty; `what` ("shapes", "sm_split") names them in errors."""
    if mapping is not None and not hasattr(mapping, "items"):
        raise TypeError(f"{what} must be a mapping of names to ints, not "
                        f"{type(mapping).__name__}")
    merged = dict(mapping or {})
    for name, value in (keywords or {}).items():
        if name in merged:
            raise TypeError(f"{what}: {name} is given twice")
        merged[name] = value
    for name, value in merged.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{what}: {name!r} is not a name")
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{what}: {name} must be an int, not {type(value).__name__}")
    return ",".join(f"{name}={value}" for name, value in merged.items()) or None


def compiler_options(options, sm_split=None):
    """`options` ({name: value}, the names and values of mkc's flags: {"gemm-stages": 3,
    "in-place-all-reduce": False, "sm-split": "compute=120,intra_reduce=12"}) and `sm_split`
    ({role: ctas}) as the C ABI's "NAME=VALUE;..." string, or None if both are empty."""
    if options is not None and not hasattr(options, "items"):
        raise TypeError(f"options must be a mapping of mkc's flag names to values, not "
                        f"{type(options).__name__}")
    merged = dict(options or {})
    split = bindings("sm_split", sm_split)
    if split is not None:
        if "sm-split" in merged:
            raise TypeError("options: sm-split is given twice (options and sm_split)")
        merged["sm-split"] = split
    items = []
    for name, value in merged.items():
        if not isinstance(name, str) or not name or not all(c.isalnum() or c == "-" for c in name):
            raise ValueError(f"options: {name!r} is not the name of one of mkc's flags")
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, (int, str)) or ";" in str(value):
            raise TypeError(f"options: {name} must be an int, a bool or a str without ';', not "
                            f"{value!r}")
        items.append(f"{name}={value}")
    return ";".join(items) or None


def encode(text):
    """`text` as the C ABI's const char *: UTF-8, or NULL for None."""
    return None if text is None else text.encode()


def generate_cuda(program, topology="1x2", rank=-1, shapes=None, *, options=None, sm_split=None,
                  **shape_values):
    """The CUDA C++ the JIT would compile for `program` (its text or a path, see Runtime.compile)
    on `topology` ("NODESxGPUS"), as rank `rank` (-1: any), with its shape symbols bound by
    `shapes` ({"M": 8192, ...}) and keyword arguments (M=8192), and the compiler's choices
    overridden by `options` and `sm_split` (see Runtime.compile). Needs no GPU.

    Raises mkc.Error (MKC_ERROR_COMPILE, with the located diagnostics) if it does not compile.
    """
    if not isinstance(topology, str):
        raise TypeError(f"topology must be a string such as '1x2', not {type(topology).__name__}")
    if not isinstance(rank, int) or isinstance(rank, bool):
        raise TypeError(f"rank must be an int, not {type(rank).__name__}")
    text, name = program_source(program)
    lib = _capi.library()
    cuda = ctypes.c_void_p()
    lib.mkc_generate_cuda(encode(text), encode(name), encode(topology), rank,
                          encode(bindings("shapes", shapes, shape_values)),
                          encode(compiler_options(options, sm_split)), ctypes.byref(cuda))
    try:
        return ctypes.string_at(cuda.value).decode()
    finally:
        lib.mkc_free(cuda)
