"""The C ABI of libmkc.so (runtime/include/mkc.h) through ctypes, and where the library is found.

Everything here mirrors mkc.h declaration for declaration; test/python/test_capi.py compares the
two, so a change to the header that is not made here fails a test instead of corrupting memory.
The library is loaded on first use, not at import: `import mkc` works on any machine, and a
missing or mismatched library is reported as an mkc.Error that says where it was looked for.
Every function returning an mkc_status raises mkc.Error, with the library's message, on failure.
"""

import ctypes
import functools
import os
import pathlib

from ._errors import Error

# The mkc.h this package was written for.
MKC_API_VERSION = 4
MKC_MAX_RANK = 8

STATUS_NAMES = (
    "MKC_SUCCESS",
    "MKC_ERROR_INVALID_ARGUMENT",
    "MKC_ERROR_NO_DEVICE",
    "MKC_ERROR_BOOTSTRAP",
    "MKC_ERROR_COMPILE",
    "MKC_ERROR_CUDA",
    "MKC_ERROR_INTERNAL",
    "MKC_ERROR_JOB_FAILED",
)
MKC_SUCCESS = 0


class mkc_status(ctypes.c_int):
    """An int of its own type, so that the functions returning one are told from those returning
    a plain int (mkc_api_version), and get the errcheck that raises mkc.Error."""


class mkc_runtime(ctypes.Structure):
    """Opaque."""


class mkc_op(ctypes.Structure):
    """Opaque."""


class mkc_runtime_options(ctypes.Structure):
    _fields_ = [
        ("symmetric_bytes", ctypes.c_size_t),
        ("flag_words", ctypes.c_size_t),
        ("device", ctypes.c_int),
        ("cache_dir", ctypes.c_char_p),
    ]


class mkc_runtime_info(ctypes.Structure):
    _fields_ = [
        ("rank", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("node", ctypes.c_int),
        ("nodes", ctypes.c_int),
        ("local_rank", ctypes.c_int),
        ("local_world_size", ctypes.c_int),
        ("device", ctypes.c_int),
    ]


class mkc_network_statistics(ctypes.Structure):
    _fields_ = [
        ("commands", ctypes.c_ulonglong),
        ("writes", ctypes.c_ulonglong),
        ("bytes", ctypes.c_ulonglong),
    ]


class mkc_argument(ctypes.Structure):
    _fields_ = [
        ("element", ctypes.c_char * 8),
        ("rank", ctypes.c_int),
        ("extents", ctypes.c_longlong * MKC_MAX_RANK),
        ("bytes", ctypes.c_size_t),
        ("symmetric", ctypes.c_int),
    ]


_runtime_p = ctypes.POINTER(mkc_runtime)
_op_p = ctypes.POINTER(mkc_op)

# name: (restype, argtypes). Out-strings the caller frees are c_void_p: c_char_p would copy them
# into bytes and lose the pointer mkc_free needs.
PROTOTYPES = {
    "mkc_api_version": (ctypes.c_int, []),
    "mkc_status_name": (ctypes.c_char_p, [mkc_status]),
    "mkc_last_error": (ctypes.c_char_p, []),
    "mkc_runtime_options_default": (mkc_status, [ctypes.POINTER(mkc_runtime_options)]),
    "mkc_runtime_create": (
        mkc_status, [ctypes.POINTER(mkc_runtime_options), ctypes.POINTER(_runtime_p)]),
    "mkc_runtime_destroy": (mkc_status, [_runtime_p]),
    "mkc_runtime_get_info": (mkc_status, [_runtime_p, ctypes.POINTER(mkc_runtime_info)]),
    "mkc_runtime_network_statistics": (
        mkc_status, [_runtime_p, ctypes.POINTER(mkc_network_statistics)]),
    "mkc_barrier": (mkc_status, [_runtime_p]),
    "mkc_runtime_check": (mkc_status, [_runtime_p]),
    "mkc_symmetric_alloc": (
        mkc_status, [_runtime_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]),
    "mkc_op_compile": (
        mkc_status,
        [_runtime_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
         ctypes.POINTER(_op_p)]),
    "mkc_op_compile_file": (
        mkc_status,
        [_runtime_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_op_p)]),
    "mkc_op_destroy": (mkc_status, [_op_p]),
    "mkc_op_name": (mkc_status, [_op_p, ctypes.POINTER(ctypes.c_char_p)]),
    "mkc_op_num_arguments": (mkc_status, [_op_p, ctypes.POINTER(ctypes.c_int)]),
    "mkc_op_get_argument": (mkc_status, [_op_p, ctypes.c_int, ctypes.POINTER(mkc_argument)]),
    "mkc_op_num_roles": (mkc_status, [_op_p, ctypes.POINTER(ctypes.c_int)]),
    "mkc_op_get_role": (
        mkc_status,
        [_op_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_int)]),
    "mkc_op_set_sm_split": (mkc_status, [_op_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]),
    "mkc_op_launch": (
        mkc_status, [_op_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]),
    "mkc_op_routing": (
        mkc_status, [_op_p, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
                     ctypes.POINTER(ctypes.c_ulonglong)]),
    "mkc_generate_cuda": (
        mkc_status,
        [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
         ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]),
    "mkc_free": (None, [ctypes.c_void_p]),
}


def library_candidates():
    """Where libmkc.so is looked for, in order: $MKC_LIBRARY alone if it is set; else next to
    this package (an installed copy), then the build tree of the repository holding it."""
    if os.environ.get("MKC_LIBRARY"):
        return [pathlib.Path(os.environ["MKC_LIBRARY"])]
    package = pathlib.Path(__file__).resolve().parent
    return [package / "libmkc.so", package.parents[1] / "build" / "lib" / "libmkc.so"]


@functools.lru_cache(maxsize=None)
def library():
    """libmkc.so, loaded and declared on first use; raises mkc.Error if none loads."""
    failures = []
    for path in library_candidates():
        if not path.is_file():
            failures.append(f"{path}: no such file")
            continue
        try:
            return _declare(ctypes.CDLL(str(path)))
        except (OSError, AttributeError) as error:  # not a library, or one without a function
            failures.append(f"{path}: {error}")
    raise Error("MKC_ERROR_INTERNAL",
                "cannot load libmkc.so (build the mkc_shared target, or set MKC_LIBRARY to its "
                "path); looked at:\n  " + "\n  ".join(failures))


def _declare(lib):
    # The version first: a library of another version may well lack some function.
    lib.mkc_api_version.restype, lib.mkc_api_version.argtypes = PROTOTYPES["mkc_api_version"]
    version = lib.mkc_api_version()
    if version != MKC_API_VERSION:
        raise OSError(f"it implements the C API version {version}; this package was written for "
                      f"version {MKC_API_VERSION}")
    for name, (restype, argtypes) in PROTOTYPES.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
        if restype is mkc_status:
            function.errcheck = functools.partial(_raise_on_failure, lib)
    return lib


def _raise_on_failure(lib, status, function, arguments):
    if status.value != MKC_SUCCESS:
        name = lib.mkc_status_name(status)
        raise Error(name.decode() if name else f"mkc_status {status.value}",
                    lib.mkc_last_error().decode(errors="replace"))
