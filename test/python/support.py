"""What the Python tests share: the repository's paths, mkc importable from its source tree, and
stand-ins for tensors (torch's duck-typed interface, __cuda_array_interface__) that need neither
torch nor a GPU."""

import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
HEADER = REPO / "runtime" / "include" / "mkc.h"
GEMM_ALLREDUCE = REPO / "lib" / "gemm_allreduce.mlir"

sys.path.insert(0, str(REPO / "python"))


def run_python(code, **environment):
    """Runs `code` in a fresh interpreter whose environment is only PATH, the package's
    PYTHONPATH, MKC_LIBRARY if set here, and `environment` (a value of None removes it)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO / "python")}
    if "MKC_LIBRARY" in os.environ:
        env["MKC_LIBRARY"] = os.environ["MKC_LIBRARY"]
    env.update(environment)
    env = {name: value for name, value in env.items() if value is not None}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)


class FakeDtype:
    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


class FakeDevice:
    def __init__(self, type, index=None):
        self.type = type
        self.index = index


class FakeTorchTensor:
    """What mkc reads of a torch tensor."""

    def __init__(self, dtype, shape, device=("cuda", 0), pointer=0x7F0000000000,
                 contiguous=True):
        self.dtype = FakeDtype(dtype)
        self.shape = tuple(shape)
        self.device = FakeDevice(*device)
        self._pointer = pointer
        self._contiguous = contiguous

    def data_ptr(self):
        return self._pointer

    def is_contiguous(self):
        return self._contiguous


class FakeArray:
    """An object exposing __cuda_array_interface__ (as CuPy or Numba arrays do)."""

    def __init__(self, typestr, shape, pointer=0x7F0000001000, strides=None):
        self.__cuda_array_interface__ = {"version": 3, "typestr": typestr, "shape": tuple(shape),
                                         "data": (pointer, False), "strides": strides,
                                         "stream": None}
