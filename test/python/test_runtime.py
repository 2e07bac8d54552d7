"""mkc.Runtime and mkc.FusedOp over a stand-in for libmkc.so that records what it is called with:
options, shapes and addresses as C receives them, streams, and lifetimes (ops destroyed before
their runtime, each exactly once; closed objects raising mkc.Error). No library, no GPU."""

import ctypes
import gc
import sys
import types
import unittest
from unittest import mock

import support
import mkc
from mkc import _capi

ROLES = [(b"compute", 102), (b"intra_reduce", 10), (b"inter_reduce", 20)]
ARGUMENTS = [("bf16", (1024, 2048)), ("bf16", (2048, 2048)), ("bf16", (1024, 2048))]


class FakeLibrary:
    """The C functions mkc calls, in Python. They receive what ctypes would pass: byref()
    objects (whose _obj is the referenced value), bytes or None for strings, handles."""

    def __init__(self):
        self.calls = []
        self._handles = {}  # address of a handle's target: its name ("runtime", "op 0", ...)
        self._keep = []

    def _new_handle(self, out, struct, name):
        target = struct()
        self._keep.append(target)
        self._handles[ctypes.addressof(target)] = name
        out._obj.contents = target

    def name_of(self, handle):
        return self._handles[ctypes.addressof(handle.contents)]

    def mkc_runtime_options_default(self, options):
        options._obj.symmetric_bytes = 1 << 30
        options._obj.flag_words = 1 << 20
        options._obj.device = -1
        options._obj.cache_dir = b"/default/cache"

    def mkc_runtime_create(self, options, runtime):
        o = options._obj
        self.calls.append(("create", o.symmetric_bytes, o.flag_words, o.device, o.cache_dir))
        self._new_handle(runtime, _capi.mkc_runtime, "runtime")

    def mkc_runtime_get_info(self, runtime, info):
        info._obj.rank, info._obj.world_size, info._obj.node, info._obj.nodes = 3, 4, 1, 2
        info._obj.local_rank, info._obj.local_world_size, info._obj.device = 1, 2, 1

    def mkc_runtime_network_statistics(self, runtime, statistics):
        self.calls.append(("network_statistics", self.name_of(runtime)))
        statistics._obj.commands, statistics._obj.writes, statistics._obj.bytes = 7, 6, 1 << 40

    def mkc_runtime_destroy(self, runtime):
        self.calls.append(("destroy", self.name_of(runtime)))

    def mkc_barrier(self, runtime):
        self.calls.append(("barrier", self.name_of(runtime)))

    def mkc_runtime_check(self, runtime):
        self.calls.append(("check", self.name_of(runtime)))

    def mkc_symmetric_alloc(self, runtime, size, local):
        self.calls.append(("alloc", size))
        local._obj.value = 0x7F0000000000

    def mkc_op_compile(self, runtime, text, name, shapes, options, op):
        self.calls.append(("compile", text, name, shapes, options))
        self._new_op(op)

    def mkc_op_compile_file(self, runtime, path, shapes, options, op):
        self.calls.append(("compile_file", path, shapes, options))
        self._new_op(op)

    def _new_op(self, op):
        ops = sum(call[0].startswith("compile") for call in self.calls) - 1
        self._new_handle(op, _capi.mkc_op, f"op {ops}")

    def mkc_op_name(self, op, name):
        name._obj.value = b"gemm_allreduce"

    def mkc_op_num_roles(self, op, count):
        count._obj.value = len(ROLES)

    def mkc_op_get_role(self, op, index, kind, ctas):
        kind._obj.value, ctas._obj.value = ROLES[index]

    def mkc_op_num_arguments(self, op, count):
        count._obj.value = len(ARGUMENTS)

    def mkc_op_get_argument(self, op, index, argument):
        element, shape = ARGUMENTS[index]
        argument._obj.element = element.encode()
        argument._obj.rank = len(shape)
        argument._obj.extents[:len(shape)] = shape
        argument._obj.bytes = 2 * shape[0] * shape[1]
        argument._obj.symmetric = index == 2

    def mkc_op_routing(self, op, launch, dropped, nvlink_bytes):
        self.calls.append(("routing", self.name_of(op)))
        launch._obj.value, dropped._obj.value, nvlink_bytes._obj.value = 12, 3, 1 << 40

    def mkc_op_destroy(self, op):
        self.calls.append(("destroy", self.name_of(op)))

    def mkc_op_launch(self, op, stream, arguments, count):
        self.calls.append(("launch", self.name_of(op), stream,
                           [arguments[i] for i in range(count)]))


class RuntimeTest(unittest.TestCase):
    def setUp(self):
        self.lib = FakeLibrary()
        patcher = mock.patch.object(_capi, "library", return_value=self.lib)
        patcher.start()
        self.addCleanup(patcher.stop)

    def last(self, kind):
        """The last call of `kind` ("create", "launch", ...)."""
        return [call for call in self.lib.calls if call[0] == kind][-1]

    def compiled(self, runtime):
        return runtime.compile(support.GEMM_ALLREDUCE, M=1024, N=2048, K=4096)

    def tensors(self, runtime):
        return [support.FakeTorchTensor("bfloat16", ARGUMENTS[0][1], ("cuda", 1), 0x1000),
                support.FakeTorchTensor("bfloat16", ARGUMENTS[1][1], ("cuda", 1), 0x2000),
                runtime.empty(ARGUMENTS[2][1], "bf16")]


class Options(RuntimeTest):
    def test_defaults_are_the_library_s(self):
        mkc.Runtime()
        self.assertEqual(self.last("create"), ("create", 1 << 30, 1 << 20, -1, b"/default/cache"))

    def test_options(self):
        mkc.Runtime(symmetric_bytes=1 << 28, flag_words=4096, device=1, cache_dir="/tmp/mkc")
        self.assertEqual(self.last("create"), ("create", 1 << 28, 4096, 1, b"/tmp/mkc"))

    def test_bad_options(self):
        with self.assertRaisesRegex(ValueError, "symmetric_bytes must be at least 1, not 0"):
            mkc.Runtime(symmetric_bytes=0)
        with self.assertRaisesRegex(TypeError, "flag_words must be an int, not float"):
            mkc.Runtime(flag_words=1e6)
        with self.assertRaisesRegex(ValueError, "device must be at least 0, not -1"):
            mkc.Runtime(device=-1)
        self.assertEqual(self.lib.calls, [])

    def test_info(self):
        runtime = mkc.Runtime()
        self.assertEqual((runtime.rank, runtime.world_size, runtime.node, runtime.nodes,
                          runtime.local_rank, runtime.local_world_size, runtime.device),
                         (3, 4, 1, 2, 1, 2, 1))
        self.assertEqual(repr(runtime), "<mkc.Runtime rank 3 of 4 (node 1 of 2), on cuda:1>")


class Calls(RuntimeTest):
    def test_empty(self):
        tensor = mkc.Runtime().empty((1024, 2048), support.FakeDtype("float32"))
        self.assertEqual(self.last("alloc"), ("alloc", 1024 * 2048 * 4))
        self.assertEqual((tensor.data_ptr(), tensor.shape, tensor.dtype, tensor.device),
                         (0x7F0000000000, (1024, 2048), "f32", 1))

    def test_empty_with_capacity(self):
        # A rank of uneven shards: its own shape, the largest shard's allocation.
        tensor = mkc.Runtime().empty((333, 4096), "bf16", capacity=334 * 4096)
        self.assertEqual(self.last("alloc"), ("alloc", 334 * 4096 * 2))
        self.assertEqual((tensor.shape, tensor.nbytes), ((333, 4096), 333 * 4096 * 2))
        with self.assertRaisesRegex(ValueError, r"capacity 100 is less than the 333 elements of "
                                                r"shape \(333,\)"):
            mkc.Runtime().empty(333, "bf16", capacity=100)
        with self.assertRaisesRegex(TypeError, "capacity must be an int, not float"):
            mkc.Runtime().empty(333, "bf16", capacity=1e3)

    def test_compile_a_file(self):
        op = mkc.Runtime().compile(support.GEMM_ALLREDUCE, {"M": 1024, "N": 2048}, K=4096,
                                   sm_split={"compute": 120, "intra_reduce": 12})
        # The runtime reads the file: a rank that cannot then fails them all.
        self.assertEqual(self.last("compile_file"),
                         ("compile_file", str(support.GEMM_ALLREDUCE).encode(),
                          b"M=1024,N=2048,K=4096", b"sm-split=compute=120,intra_reduce=12"))
        self.assertEqual(op.name, "gemm_allreduce")
        self.assertEqual(op.arguments,
                         [mkc.Argument("bf16", (1024, 2048), 1024 * 2048 * 2, False),
                          mkc.Argument("bf16", (2048, 2048), 2048 * 2048 * 2, False),
                          mkc.Argument("bf16", (1024, 2048), 1024 * 2048 * 2, True)])
        self.assertIn("gemm_allreduce(bf16[1024,2048], bf16[2048,2048], bf16[1024,2048])",
                      repr(op))
        self.assertEqual(op.sm_split, {"compute": 102, "intra_reduce": 10, "inter_reduce": 20})

    def test_compile_text(self):
        text = support.GEMM_ALLREDUCE.read_text()
        mkc.Runtime().compile(text, M=1, N=2, K=3)
        self.assertEqual(self.last("compile"), ("compile", text.encode(), None, b"M=1,N=2,K=3",
                                              None))

    def test_compiler_options(self):
        mkc.Runtime().compile(support.GEMM_ALLREDUCE, M=1, N=2, K=3,
                              options={"gemm-stages": 3, "in-place-all-reduce": False},
                              sm_split={"compute": 120, "intra_reduce": 12})
        self.assertEqual(self.last("compile_file")[3],
                         b"gemm-stages=3;in-place-all-reduce=0;sm-split=compute=120,intra_reduce=12")

    def test_bad_compile_arguments(self):
        runtime = mkc.Runtime()
        with self.assertRaisesRegex(TypeError, "program must be a tile program's text or the "
                                               "path of a .mlir file, not int"):
            runtime.compile(42)
        with self.assertRaisesRegex(TypeError, "shapes: M must be an int, not str"):
            runtime.compile(support.GEMM_ALLREDUCE, M="1024")
        with self.assertRaisesRegex(TypeError, "shapes: M is given twice"):
            runtime.compile(support.GEMM_ALLREDUCE, {"M": 1}, M=1)
        with self.assertRaisesRegex(TypeError, "shapes must be a mapping of names to ints, not "
                                               "str"):
            runtime.compile(support.GEMM_ALLREDUCE, "M=1")
        with self.assertRaisesRegex(ValueError, "sm_split: 'a b' is not a name"):
            runtime.compile(support.GEMM_ALLREDUCE, sm_split={"a b": 1})
        with self.assertRaisesRegex(TypeError, "options must be a mapping of mkc's flag names to "
                                               "values, not str"):
            runtime.compile(support.GEMM_ALLREDUCE, options="gemm-stages=3")
        with self.assertRaisesRegex(ValueError, "options: 'gemm stages' is not the name of one "
                                                "of mkc's flags"):
            runtime.compile(support.GEMM_ALLREDUCE, options={"gemm stages": 3})
        with self.assertRaisesRegex(TypeError, "options: sm-split must be an int, a bool or a "
                                               "str without ';'"):
            runtime.compile(support.GEMM_ALLREDUCE, options={"sm-split": "compute=1;x=2"})
        with self.assertRaisesRegex(TypeError, "options: sm-split is given twice"):
            runtime.compile(support.GEMM_ALLREDUCE, options={"sm-split": "compute=132"},
                            sm_split={"compute": 132})
        self.assertNotIn("compile", [call[0] for call in self.lib.calls])

    def test_check(self):
        mkc.Runtime().check()
        self.assertEqual(self.last("check"), ("check", "runtime"))

    def test_network_statistics(self):
        statistics = mkc.Runtime().network_statistics()
        self.assertEqual(self.last("network_statistics"), ("network_statistics", "runtime"))
        self.assertEqual(statistics, mkc.NetworkStatistics(commands=7, writes=6, bytes=1 << 40))

    def test_routing(self):
        op = self.compiled(mkc.Runtime())
        self.assertEqual(op.routing(), mkc.RoutingReport(launch=12, dropped=3, nvlink_bytes=1 << 40))
        self.assertEqual(self.last("routing"), ("routing", "op 0"))
        op.close()
        with self.assertRaisesRegex(mkc.Error, "^fused op gemm_allreduce is closed$"):
            op.routing()

    def test_barrier(self):
        mkc.Runtime().barrier()
        self.assertEqual(self.last("barrier"), ("barrier", "runtime"))

    def test_launch(self):
        runtime = mkc.Runtime()
        op = self.compiled(runtime)
        op(*self.tensors(runtime))
        self.assertEqual(self.last("launch"),
                         ("launch", "op 0", None, [0x1000, 0x2000, 0x7F0000000000]))

    def test_launch_checks_the_tensors(self):
        runtime = mkc.Runtime()
        op = self.compiled(runtime)
        a, b, c = self.tensors(runtime)
        with self.assertRaisesRegex(ValueError, r"^gemm_allreduce argument 1: expected "
                                    r"bf16\[2048,2048\], got float16 tensor"):
            op(a, support.FakeTorchTensor("float16", (2048, 2048), ("cuda", 1)), c)
        with self.assertRaisesRegex(ValueError, r"argument 0: expected a tensor on cuda:1"):
            op(support.FakeTorchTensor("bfloat16", (1024, 2048), ("cuda", 0)), b, c)
        with self.assertRaisesRegex(TypeError, r"gemm_allreduce takes 3 arguments"):
            op(a, b)
        self.assertNotIn("launch", [call[0] for call in self.lib.calls])


class Streams(RuntimeTest):
    def launched_stream(self, **stream):
        runtime = mkc.Runtime()
        self.compiled(runtime)(*self.tensors(runtime), **stream)
        return self.last("launch")[2]

    def test_explicit_streams(self):
        self.assertEqual(self.launched_stream(stream=0x5000), 0x5000)
        self.assertEqual(self.launched_stream(stream=types.SimpleNamespace(cuda_stream=0x6000)),
                         0x6000)
        self.assertIsNone(self.launched_stream(stream=0))

    def test_default_stream_without_torch(self):
        with mock.patch.dict(sys.modules):
            sys.modules.pop("torch", None)
            self.assertIsNone(self.launched_stream())

    def test_default_stream_is_torch_s_current_one_on_the_runtime_s_device(self):
        cuda = mock.Mock()
        cuda.current_stream.return_value.cuda_stream = 0x7000
        with mock.patch.dict(sys.modules, torch=types.SimpleNamespace(cuda=cuda)):
            self.assertEqual(self.launched_stream(), 0x7000)
        cuda.current_stream.assert_called_once_with(1)

    def test_bad_streams(self):
        for stream in ("0", -1, 1.0, types.SimpleNamespace(cuda_stream=None)):
            with self.subTest(stream=stream):
                with self.assertRaisesRegex(TypeError, "stream must be None, a CUstream handle "
                                                       r"\(int\) or an object with .cuda_stream"):
                    self.launched_stream(stream=stream)


class Lifetimes(RuntimeTest):
    def destroyed(self):
        return [call[1] for call in self.lib.calls if call[0] == "destroy"]

    def test_close_destroys_the_ops_then_the_runtime_once(self):
        runtime = mkc.Runtime()
        first, second = self.compiled(runtime), self.compiled(runtime)
        runtime.close()
        self.assertEqual(sorted(self.destroyed()[:2]), ["op 0", "op 1"])
        self.assertEqual(self.destroyed()[2:], ["runtime"])
        runtime.close()
        first.close()
        self.assertEqual(len(self.destroyed()), 3)
        self.assertTrue(runtime.closed and first.closed and second.closed)

    def test_a_closed_op(self):
        runtime = mkc.Runtime()
        op = self.compiled(runtime)
        tensors = self.tensors(runtime)
        with op:
            pass
        self.assertEqual(self.destroyed(), ["op 0"])
        with self.assertRaisesRegex(mkc.Error, "^fused op gemm_allreduce is closed$") as raised:
            op(*tensors)
        self.assertEqual(raised.exception.status, "MKC_ERROR_INVALID_ARGUMENT")
        self.assertIn("(closed)", repr(op))
        runtime.close()
        self.assertEqual(self.destroyed(), ["op 0", "runtime"])

    def test_a_closed_runtime(self):
        with mkc.Runtime() as runtime:
            op = self.compiled(runtime)
            tensors = self.tensors(runtime)
        self.assertEqual(self.destroyed(), ["op 0", "runtime"])
        calls = {"empty": lambda: runtime.empty(4, "f32"), "barrier": runtime.barrier,
                 "network statistics": runtime.network_statistics,
                 "compile": lambda: self.compiled(runtime), "op": lambda: op(*tensors),
                 "symmetric tensor": tensors[2].data_ptr}
        for name, call in calls.items():
            with self.subTest(call=name):
                with self.assertRaisesRegex(mkc.Error, "^runtime is closed$") as raised:
                    call()
                self.assertEqual(raised.exception.status, "MKC_ERROR_INVALID_ARGUMENT")
        self.assertEqual((runtime.rank, op.name), (3, "gemm_allreduce"))  # facts remain
        self.assertIn("closed", repr(runtime))
        self.assertEqual(len(self.lib.calls), 5)  # create, alloc, compile, 2 x destroy

    def test_collected_op_is_destroyed_and_forgotten(self):
        runtime = mkc.Runtime()
        self.compiled(runtime)
        gc.collect()
        self.assertEqual(self.destroyed(), ["op 0"])
        runtime.close()
        self.assertEqual(self.destroyed(), ["op 0", "runtime"])

    def test_an_op_keeps_its_runtime(self):
        op = self.compiled(mkc.Runtime())
        gc.collect()
        self.assertEqual(self.destroyed(), [])
        del op
        gc.collect()
        self.assertEqual(self.destroyed(), ["op 0", "runtime"])


if __name__ == "__main__":
    unittest.main()
