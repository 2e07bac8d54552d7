"""Runtime and FusedOp over mkc_runtime and mkc_op.

Lifetimes: the C ABI destroys a runtime only once its ops are gone, so every FusedOp holds its
Runtime (a runtime is not collected while one of its ops lives), and Runtime.close() destroys the
runtime's live ops first. Both are also destroyed when collected, or at exit (ops before their
runtime): weakref.finalize does either, whichever comes first, exactly once. Teardown is
collective, like creation: every rank closes its runtime.
"""

import ctypes
import itertools
import math
import operator
import os
import sys
import weakref
from typing import NamedTuple

from . import _capi, _dtypes, _programs
from ._errors import closed
from ._tensors import Argument, ArgumentChecker, SymmetricTensor, shape_of

_op_keys = itertools.count()


class NetworkStatistics(NamedTuple):
    """What a rank's network proxy carried to other nodes (Runtime.network_statistics)."""
    commands: int  # the kernels' commands it took from the queue
    writes: int    # writes to other nodes
    bytes: int     # their payload bytes, flags left out


class RoutingReport(NamedTuple):
    """What a launch's routing of tokens to experts reported for this rank's tokens
    (FusedOp.routing)."""
    launch: int        # the launch it is of: 1 for the op's first, 0 before any has routed
    dropped: int       # copies (token x top-k choice) past their expert's capacity, dropped
    nvlink_bytes: int  # routed rows and results stored on other GPUs of the node, all launches


def _destroy_runtime(lib, handle, live_ops):
    for destroy_op in list(live_ops.values()):
        destroy_op()
    lib.mkc_runtime_destroy(handle)


def _destroy_op(lib, handle, live_ops, key):
    del live_ops[key]
    lib.mkc_op_destroy(handle)


def _count(name, value, minimum):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, not {value}")
    return value


def _info_field(name, doc):
    return property(lambda self: getattr(self._info, name), doc=doc)


class Runtime:
    """This process's rank of a job: its GPU, its symmetric memory and its JIT (mkc_runtime).

    One per process, under a launcher (torchrun, srun, mpirun, mkc-launch) that says which rank
    it is; a process that no launcher started is a world of one. Creating it is collective, as
    are empty(), compile(), barrier() and close(): every rank makes the same calls in the same
    order. None takes the default, which the environment may override (MKC_SYMMETRIC_BYTES,
    MKC_FLAG_WORDS, MKC_DEVICE, MKC_SHARE_GPU, MKC_CACHE_DIR):

      symmetric_bytes  symmetric memory per rank, taken from the GPU up front
      flag_words       flag words per rank, shared out among the ops
      device           the CUDA device ordinal (default: the local rank)
      cache_dir        the JIT's on-disk cache

    Raises mkc.Error: MKC_ERROR_NO_DEVICE without a usable driver or GPU, MKC_ERROR_BOOTSTRAP
    when the launcher's variables are missing or inconsistent or the ranks do not meet. Use it as
    a context manager or close() it; after that, its methods (and its ops' and tensors') raise
    mkc.Error, its properties remain.
    """

    def __init__(self, symmetric_bytes=None, flag_words=None, device=None, cache_dir=None):
        lib = _capi.library()
        options = _capi.mkc_runtime_options()
        lib.mkc_runtime_options_default(ctypes.byref(options))
        if symmetric_bytes is not None:
            options.symmetric_bytes = _count("symmetric_bytes", symmetric_bytes, 1)
        if flag_words is not None:
            options.flag_words = _count("flag_words", flag_words, 1)
        if device is not None:
            options.device = _count("device", device, 0)
        if cache_dir is not None:
            options.cache_dir = os.fsencode(cache_dir)
        handle = ctypes.POINTER(_capi.mkc_runtime)()
        lib.mkc_runtime_create(ctypes.byref(options), ctypes.byref(handle))
        self._live_ops = {}  # key: the finalizer of a live FusedOp
        self._finalizer = weakref.finalize(self, _destroy_runtime, lib, handle, self._live_ops)
        self._handle = handle
        self._info = _capi.mkc_runtime_info()
        lib.mkc_runtime_get_info(handle, ctypes.byref(self._info))

    rank = _info_field("rank", "This process's rank, 0 to world_size - 1.")
    world_size = _info_field("world_size", "The number of ranks of the job.")
    node = _info_field("node", "This rank's node, 0 to nodes - 1.")
    nodes = _info_field("nodes", "The number of nodes of the job.")
    local_rank = _info_field("local_rank", "This rank's index among the ranks of its node.")
    local_world_size = _info_field("local_world_size", "The number of ranks of each node.")
    device = _info_field("device", "The CUDA device ordinal of this rank's GPU.")

    @property
    def closed(self):
        return not self._finalizer.alive

    def _live_handle(self):
        """The mkc_runtime *; raises mkc.Error if the runtime is closed."""
        if self.closed:
            raise closed("runtime")
        return self._handle

    def close(self):
        """Destroys this runtime's live ops, then the runtime, freeing its symmetric memory.
        Collective. Closing a closed runtime does nothing."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()

    def barrier(self):
        """Returns once every rank has called it as often as this one (host side). Collective."""
        _capi.library().mkc_barrier(self._live_handle())

    def check(self):
        """Raises mkc.Error, saying why, once this rank's launches can no longer be trusted: a
        kernel's wait gave up (MKC_WAIT_TIMEOUT) or the network failed; results since are wrong
        and launches are refused. Cheap: after synchronising, it vouches for the results."""
        _capi.library().mkc_runtime_check(self._live_handle())

    def network_statistics(self):
        """A NetworkStatistics of what this rank's network proxy carried to other nodes since
        the runtime was created: all zeros on one node, where there is none. The difference
        between two readings is what the launches between them sent."""
        counted = _capi.mkc_network_statistics()
        _capi.library().mkc_runtime_network_statistics(self._live_handle(),
                                                       ctypes.byref(counted))
        return NetworkStatistics(counted.commands, counted.writes, counted.bytes)

    def empty(self, shape, dtype, *, capacity=None):
        """An uninitialised SymmetricTensor of `shape` and `dtype` ("bf16", "f16", "f32", "i32",
        their long names, or a torch dtype), in symmetric memory: at the same offset on every
        rank, which peers may write. Freed with the runtime. Collective, with the same dtype and
        allocation on every rank: `capacity` elements (at least the shape's; by default the
        shape's), so that ranks holding uneven shards (torch.tensor_split's) each pass the shape
        of its own and the capacity of the largest."""
        shape = shape_of(shape)
        element = _dtypes.element_of(dtype)
        capacity = math.prod(shape) if capacity is None else _count("capacity", capacity, 1)
        if capacity < math.prod(shape):
            raise ValueError(f"capacity {capacity} is less than the {math.prod(shape)} elements "
                             f"of shape {shape}")
        handle = self._live_handle()
        pointer = ctypes.c_void_p()
        _capi.library().mkc_symmetric_alloc(
            handle, capacity * _dtypes.ITEM_BYTES[element], ctypes.byref(pointer))
        return SymmetricTensor(pointer.value, shape, element, self.device, runtime=self)

    def compile(self, program, shapes=None, *, options=None, sm_split=None, **shape_values):
        """`program` compiled for this job's topology and this rank, as a FusedOp. Collective.

        `program` is the text of a tile program (a str containing "mk.program") or the path of a
        .mlir file (mkc.library_program("gemm_allreduce") for the library's). Its shape symbols
        are bound by `shapes` ({"M": 8192, ...}) and keyword arguments (M=8192). `sm_split`
        ({"compute": 120, ...} or None for the cost model's) sets the CTAs of each role;
        `options` overrides the compiler's other choices, with the names and values of mkc's
        flags: {"gemm-tile-n": 128, "gemm-tile-m": 64, "gemm-k-splits": 2, "gemm-stages": 3,
        "gemm-cluster": 1, "in-place-all-reduce": False, "recycle-ctas": False}.

        Raises mkc.Error (MKC_ERROR_COMPILE, with located diagnostics) if it does not compile
        on some rank, or if ranks ask for different things.
        """
        handle = self._live_handle()
        shapes = _programs.encode(_programs.bindings("shapes", shapes, shape_values))
        choices = _programs.encode(_programs.compiler_options(options, sm_split))
        op = ctypes.POINTER(_capi.mkc_op)()
        if _programs.is_program_text(program):
            _capi.library().mkc_op_compile(handle, _programs.encode(program), None, shapes,
                                           choices, ctypes.byref(op))
        else:
            # The runtime reads the file, so that a rank that cannot fails every rank, not only
            # itself while the others wait for it.
            _capi.library().mkc_op_compile_file(handle, _programs.encode(_programs.path(program)),
                                                shapes, choices, ctypes.byref(op))
        return FusedOp(self, op)

    def __repr__(self):
        state = "closed" if self.closed else f"on cuda:{self.device}"
        return (f"<mkc.Runtime rank {self.rank} of {self.world_size} (node {self.node} of "
                f"{self.nodes}), {state}>")


class FusedOp:
    """A tile program compiled for this job and rank (mkc_op; made by Runtime.compile).

    `name` is the program's name, `arguments` its Arguments as this rank holds them, `roles` the
    kernel's roles in order with the CTAs its launches give them ([("compute", 120),
    ("intra_reduce", 12)]: the compiler's choice, then the SM controller's as it searches over the
    first launches (unless MKC_SM_CONTROLLER=off), or set_sm_split's), `sm_split`
    the same per kind ({"compute": 120, "intra_reduce": 12}: what Runtime.compile's sm_split
    takes; a kind with several roles, as ring attention's two transfers, maps to the CTAs of its
    first). Calling it launches it on a stream; close() destroys it (its runtime does so when
    closed).
    """

    def __init__(self, runtime, handle):
        lib = _capi.library()
        key = next(_op_keys)
        self._runtime = runtime  # the runtime is destroyed after its ops
        self._finalizer = weakref.finalize(self, _destroy_op, lib, handle, runtime._live_ops, key)
        runtime._live_ops[key] = self._finalizer
        self._handle = handle
        name = ctypes.c_char_p()
        lib.mkc_op_name(handle, ctypes.byref(name))
        self.name = name.value.decode()
        count = ctypes.c_int()
        lib.mkc_op_num_arguments(handle, ctypes.byref(count))
        self.arguments = [self._argument(lib, index) for index in range(count.value)]
        # What each call needs, made once: a launch's Python is most of its host time.
        self._check = ArgumentChecker(self.name, self.arguments, runtime.device)
        self._launch = lib.mkc_op_launch
        self._addresses = ctypes.c_void_p * len(self.arguments)

    @property
    def roles(self):
        """The kernel's roles in order with the CTAs its launches give them now: the compiler's,
        the SM controller's (MKC_SM_CONTROLLER) or set_sm_split's."""
        lib, count = _capi.library(), ctypes.c_int()
        lib.mkc_op_num_roles(self._handle, ctypes.byref(count))
        return [self._role(lib, index) for index in range(count.value)]

    @property
    def sm_split(self):
        """`roles` per kind (a kind with several roles maps to the CTAs of its first)."""
        split = {}
        for kind, ctas in self.roles:
            split.setdefault(kind, ctas)
        return split

    def set_sm_split(self, split):
        """Launches from now on give the roles `split`'s CTAs, the same kernel running them: a
        list of counts in `roles`' order, or {kind: CTAs} naming every kind where no kind has
        several roles. The kernel's grid in all, one CTA or more each, multiples of its
        clusters' CTAs. Collective, between launches: raises mkc.Error on every rank, naming the
        rule or the rank, if the split breaks a rule or ranks ask for different ones."""
        if self.closed:
            raise closed(f"fused op {self.name}")
        kinds = [kind for kind, _ in self.roles]
        if hasattr(split, "items"):
            if len(set(kinds)) != len(kinds):
                raise ValueError(f"{self.name} has several roles of a kind ({kinds}): give the "
                                 f"split as a list of counts in that order")
            unknown = sorted(set(split) - set(kinds))
            if unknown or len(split) != len(kinds):
                raise ValueError(f"{self.name}'s roles are {kinds}; the split names "
                                 f"{sorted(split)}")
            split = [split[kind] for kind in kinds]
        counts = [operator.index(ctas) for ctas in split]
        _capi.library().mkc_op_set_sm_split(self._handle, (ctypes.c_int * len(counts))(*counts),
                                            len(counts))

    def _role(self, lib, index):
        kind, ctas = ctypes.c_char_p(), ctypes.c_int()
        lib.mkc_op_get_role(self._handle, index, ctypes.byref(kind), ctypes.byref(ctas))
        return kind.value.decode(), ctas.value

    def _argument(self, lib, index):
        argument = _capi.mkc_argument()
        lib.mkc_op_get_argument(self._handle, index, ctypes.byref(argument))
        return Argument(argument.element.decode(), tuple(argument.extents[:argument.rank]),
                        argument.bytes, bool(argument.symmetric))

    @property
    def closed(self):
        return not self._finalizer.alive

    def close(self):
        """Destroys the op. Closing a closed op does nothing."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exception):
        self.close()

    def __call__(self, *tensors, stream=None):
        """Enqueues the op on `stream` with `tensors`, one per argument: torch tensors,
        SymmetricTensors or __cuda_array_interface__ objects, on the runtime's GPU, of the
        arguments' elements and shapes, dense and row-major (TypeError or ValueError, naming the
        argument, if not). Symmetric arguments must lie in symmetric memory (mkc.Error if not).

        `stream`: a CUstream handle (int), an object with .cuda_stream (torch.cuda.Stream), or
        None: torch's current stream of the runtime's GPU if torch is imported, else the legacy
        default stream.
        """
        if self._runtime.closed:
            raise closed("runtime")
        if self.closed:
            raise closed(f"fused op {self.name}")
        addresses = self._check(tensors)
        self._launch(self._handle, _stream_handle(stream, self._runtime.device),
                     self._addresses(*addresses), len(addresses))

    def routing(self):
        """The RoutingReport of the latest launch to route tokens to experts (mk.dispatch), for
        this rank's tokens, with the bytes of rows this rank stored on other GPUs of its node over
        all launches (network_statistics counts those across nodes): read it once the launch's
        stream has synchronised. A copy dropped
        past its expert's capacity C leaves its expert out of its token's result; the library's
        programs default C so that none drops. mkc.Error if the op routes nothing, or naming the
        token, choice and index once a launch routed a copy to an expert out of range (reported
        once; the next launch reports it too).
        """
        if self.closed:
            raise closed(f"fused op {self.name}")
        launch, dropped, nvlink_bytes = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
        _capi.library().mkc_op_routing(self._handle, ctypes.byref(launch), ctypes.byref(dropped),
                                       ctypes.byref(nvlink_bytes))
        return RoutingReport(launch.value, dropped.value, nvlink_bytes.value)

    def __repr__(self):
        state = " (closed)" if self.closed else ""
        return f"<mkc.FusedOp {self.name}({', '.join(map(str, self.arguments))}){state}>"


def _stream_handle(stream, device):
    """`stream` (see FusedOp.__call__) as a CUstream handle, None for the legacy default."""
    if stream is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        # The handle alone, without the Stream object current_stream makes: a launch's largest
        # cost in Python otherwise.
        raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
        handle = raw(device) if raw else torch.cuda.current_stream(device).cuda_stream
        return handle or None
    handle = getattr(stream, "cuda_stream", stream)
    if not isinstance(handle, int) or isinstance(handle, bool) or handle < 0:
        raise TypeError(f"stream must be None, a CUstream handle (int) or an object with "
                        f".cuda_stream, not {stream!r}")
    return handle or None
