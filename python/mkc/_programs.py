"""Tile programs: where the library's are, how a program and its shapes are handed to the C ABI,
and the CUDA C++ a program becomes (generate_cuda, which needs no GPU)."""

import ctypes
import os
import pathlib

from . import _capi


def library_program(name):
    """The path of the fused-op library's program `name` ("gemm_allreduce"): `name`.mlir in
    $MKC_LIB_DIR if set, else in the lib/ folder of the repository holding this package.
    Raises FileNotFoundError, listing the programs there, if it has none of that name."""
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


def encode(text):
    """`text` as the C ABI's const char *: UTF-8, or NULL for None."""
    return None if text is None else text.encode()


def generate_cuda(program, topology="1x2", rank=-1, shapes=None, **shape_values):
    """The CUDA C++ the JIT would compile for `program` (its text or a path, see Runtime.compile)
    on `topology` ("NODESxGPUS"), as rank `rank` (-1: any), with its shape symbols bound by
    `shapes` ({"M": 8192, ...}) and keyword arguments (M=8192). Needs no GPU.

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
                          encode(bindings("shapes", shapes, shape_values)), ctypes.byref(cuda))
    try:
        return ctypes.string_at(cuda.value).decode()
    finally:
        lib.mkc_free(cuda)
