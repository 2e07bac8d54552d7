"""Tensors as mkc sees them: the symmetric memory a runtime hands out (SymmetricTensor), what a
fused op takes (Argument), and the check that a call's tensors are that (check_arguments).

The C library checks addresses (memory of the right GPU, inside the symmetric heap where it must
be), but it only sees pointers: element types, shapes and strides are checked here, where the
caller's tensors still have them, and reported in the caller's terms. Tensors are duck-typed, so
that nothing imports torch: torch tensors (data_ptr, dtype, shape, device, is_contiguous),
SymmetricTensors, and anything with __cuda_array_interface__ (CuPy, Numba, ...).
"""

import math
from typing import NamedTuple

from . import _dtypes
from ._errors import closed

# __cuda_array_interface__ version 3: the one with the "stream" key.
_INTERFACE_VERSION = 3


class Argument(NamedTuple):
    """One argument of a fused op, as this rank holds it: a dense row-major tensor of `element`
    ("bf16", ...) and `shape`, `bytes` long; `symmetric` ones must lie in symmetric memory
    (Runtime.empty), where peers write them."""

    element: str
    shape: tuple
    bytes: int
    symmetric: bool

    def __str__(self):
        return f"{self.element}[{','.join(map(str, self.shape))}]"


def shape_of(shape):
    """`shape` (an int or a sequence of ints) as a tuple; TypeError or ValueError if it is not."""
    extents = (shape,) if isinstance(shape, int) else shape
    try:
        extents = tuple(extents)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, not "
                        f"{type(shape).__name__}") from None
    for extent in extents:
        if not isinstance(extent, int) or isinstance(extent, bool):
            raise TypeError(f"shape {shape!r}: extents must be ints, not {type(extent).__name__}")
        if extent < 0:
            raise ValueError(f"shape {shape!r}: extents must not be negative")
    return extents


class SymmetricTensor:
    """Symmetric memory of this rank's GPU (Runtime.empty): at the same offset on every rank, so
    that peers can write it. A dense row-major tensor of `dtype` ("bf16", ...) and `shape`, on
    CUDA device `device`.

    It exposes __cuda_array_interface__ (CuPy, Numba, torch.as_tensor take it without a copy;
    bf16 as raw 2-byte elements, "|V2", which torch does not take: use torch()). The memory
    belongs to the runtime: it is freed when the runtime is closed, after which using this
    tensor raises mkc.Error, though views made of it earlier are left dangling.
    """

    def __init__(self, pointer, shape, dtype, device, runtime=None):
        self.shape = shape_of(shape)
        self.dtype = _dtypes.element_of(dtype)
        self.device = device
        self._pointer = pointer
        self._runtime = runtime

    @property
    def nbytes(self):
        return math.prod(self.shape) * _dtypes.ITEM_BYTES[self.dtype]

    def data_ptr(self):
        """The device address, as an int."""
        if self._runtime is not None and self._runtime.closed:
            raise closed("runtime")
        return self._pointer

    @property
    def __cuda_array_interface__(self):
        return self._interface(_dtypes.TYPESTRS[self.dtype])

    def _interface(self, typestr):
        return {"version": _INTERFACE_VERSION, "shape": self.shape, "typestr": typestr,
                "data": (self.data_ptr(), False), "strides": None, "stream": None}

    def torch(self):
        """A torch tensor on this memory (no copy), of the same dtype; imports torch, which needs
        NumPy to read __cuda_array_interface__."""
        import torch

        # torch has no typestr for bf16: its bits go through as int16 and are viewed back.
        bf16 = self.dtype == "bf16"
        view = _InterfaceView(self, "<i2" if bf16 else _dtypes.TYPESTRS[self.dtype])
        tensor = torch.as_tensor(view, device=f"cuda:{self.device}")
        return tensor.view(torch.bfloat16) if bf16 else tensor

    def __repr__(self):
        return (f"mkc.SymmetricTensor({self.dtype}{list(self.shape)} at {self._pointer:#x} on "
                f"cuda:{self.device})")


class _InterfaceView:
    """A SymmetricTensor's memory under another typestr; holds the tensor, which holds its
    runtime, for as long as what wraps this lives."""

    def __init__(self, tensor, typestr):
        self.tensor = tensor
        self.__cuda_array_interface__ = tensor._interface(typestr)


class _View(NamedTuple):
    """What the checks need of a tensor, whatever its kind."""

    pointer: int
    shape: tuple
    elements: frozenset  # the Argument elements it may be passed as
    device: object  # ("cuda", index), another (type, index), or None: unknown
    contiguous: bool
    describe: object  # () -> "float32 tensor of shape (2, 3)": made only for an error


def _torch_view(tensor):
    dtype, shape, device = tensor.dtype, tuple(tensor.shape), tensor.device
    return _View(tensor.data_ptr(), shape, _dtypes.torch_elements(dtype),
                 (device.type, device.index), tensor.is_contiguous(),
                 lambda: f"{str(dtype).removeprefix('torch.')} tensor of shape {shape}")


def _interface_view(where, interface):
    try:
        typestr, shape = interface["typestr"], tuple(interface["shape"])
        pointer, strides = interface["data"][0], interface.get("strides")
        item_bytes = int(typestr[2:])
    except (KeyError, TypeError, ValueError, IndexError):
        raise TypeError(f"{where}: malformed __cuda_array_interface__ {interface!r}") from None
    elements = frozenset(e for e in _dtypes.ELEMENTS if _dtypes.typestr_holds(typestr, e))
    contiguous = strides is None or _row_major(shape, strides, item_bytes)
    return _View(pointer, shape, elements, None, contiguous,
                 lambda: f"{typestr!r} array of shape {shape}")


def _row_major(shape, strides, item_bytes):
    """Whether `strides` (bytes) are those of a dense row-major array of `shape`; the stride of
    an extent of 1 is never taken, so it may be anything."""
    dense = item_bytes
    for extent, stride in zip(reversed(shape), reversed(tuple(strides))):
        if extent != 1 and stride != dense:
            return False
        dense *= extent
    return True


def _view(where, tensor):
    if isinstance(tensor, SymmetricTensor):
        return _View(tensor.data_ptr(), tensor.shape, frozenset({tensor.dtype}),
                     ("cuda", tensor.device), True,
                     lambda: f"{tensor.dtype} symmetric tensor of shape {tensor.shape}")
    if _is_torch(tensor):
        return _torch_view(tensor)
    interface = getattr(tensor, "__cuda_array_interface__", None)
    return None if interface is None else _interface_view(where, interface)


def check_arguments(op_name, arguments, device, tensors):
    """The device addresses of `tensors` passed to the op `op_name`, whose Arguments are
    `arguments`, on CUDA device `device`.

    Raises TypeError, naming the op and the argument, for a wrong count or something not a CUDA
    tensor; ValueError for a tensor on another device, of another element or shape, or not
    dense and row-major.
    """
    if len(tensors) != len(arguments):
        raise TypeError(f"{op_name} takes {len(arguments)} arguments "
                        f"({', '.join(map(str, arguments))}), got {len(tensors)}")
    return [_address(f"{op_name} argument {index}", argument, device, tensor)
            for index, (argument, tensor) in enumerate(zip(arguments, tensors))]


class ArgumentChecker:
    """check_arguments for one op, remembering the last call's tensors that passed: a call whose
    tensors repeat them (torch tensors or SymmetricTensors of the same type, address, shape and
    dtype, still dense) passes without the full check, so that a decode step's launch costs a few
    microseconds of Python. The address vouches for the device: CUDA gives host and device
    memory distinct addresses. Anything else takes the full check."""

    def __init__(self, op_name, arguments, device):
        self._op_name, self._arguments, self._device = op_name, arguments, device
        self._seen = ()  # per argument: (type, address, shape, dtype) of the last call, or None

    def __call__(self, tensors):
        seen = self._seen
        if len(tensors) == len(seen) and all(map(_unchanged, tensors, seen)):
            return [entry[1] for entry in seen]
        addresses = check_arguments(self._op_name, self._arguments, self._device, tensors)
        self._seen = tuple(map(_remembered, tensors, addresses))
        return addresses


def _remembered(tensor, address):
    if isinstance(tensor, SymmetricTensor) or _is_torch(tensor):
        return type(tensor), address, tensor.shape, tensor.dtype
    return None


def _unchanged(tensor, seen):
    if seen is None:
        return False
    kind, address, shape, dtype = seen
    return (type(tensor) is kind and tensor.data_ptr() == address and tensor.shape == shape
            and tensor.dtype is dtype and (kind is SymmetricTensor or tensor.is_contiguous()))


def _is_torch(tensor):
    return all(hasattr(tensor, name)
               for name in ("data_ptr", "dtype", "shape", "device", "is_contiguous"))


def _address(where, argument, device, tensor):
    view = _view(where, tensor)
    if view is None:
        raise TypeError(f"{where}: expected {argument}, got a {type(tensor).__name__}, which is "
                        f"not a CUDA tensor (pass a torch tensor, an mkc.SymmetricTensor or an "
                        f"object with __cuda_array_interface__)")
    if view.device is not None and view.device != ("cuda", device):
        kind, index = view.device
        raise ValueError(f"{where}: expected a tensor on cuda:{device}, the runtime's GPU, got a "
                         f"{view.describe()} on {kind if index is None else f'{kind}:{index}'}")
    if argument.element not in view.elements or view.shape != argument.shape:
        raise ValueError(f"{where}: expected {argument}, got {view.describe()}")
    if not view.contiguous:
        raise ValueError(f"{where}: expected a dense row-major {argument}, got a "
                         f"{view.describe()} that is not contiguous")
    return view.pointer
