"""The checks of a fused op's tensors before they reach C, and SymmetricTensor's
__cuda_array_interface__: on stand-in tensors, without a library or a GPU."""

import unittest

from support import FakeArray, FakeDtype, FakeTorchTensor
from mkc import Argument, Error, SymmetricTensor
from mkc._tensors import ArgumentChecker, check_arguments, shape_of

# gemm_allreduce on 2 ranks, as the library describes it.
GEMM_ALLREDUCE = [Argument("bf16", (3000, 2500), 3000 * 2500 * 2, False),
                  Argument("bf16", (2500, 5000), 2500 * 5000 * 2, False),
                  Argument("bf16", (3000, 5000), 3000 * 5000 * 2, True)]
DEVICE = 1


def check(*tensors, arguments=GEMM_ALLREDUCE):
    return check_arguments("gemm_allreduce", arguments, DEVICE, tensors)


def torch_tensor(dtype, shape, **kwargs):
    return FakeTorchTensor(dtype, shape, device=kwargs.pop("device", ("cuda", DEVICE)), **kwargs)


class CheckArguments(unittest.TestCase):
    def good(self):
        return [torch_tensor("bfloat16", (3000, 2500), pointer=0x1000),
                torch_tensor("bfloat16", (2500, 5000), pointer=0x2000),
                SymmetricTensor(0x3000, (3000, 5000), "bf16", DEVICE)]

    def test_good_tensors_give_their_addresses(self):
        self.assertEqual(check(*self.good()), [0x1000, 0x2000, 0x3000])

    def test_any_kind_of_tensor_of_the_right_element(self):
        arguments = [Argument("bf16", (4, 8), 64, False), Argument("f16", (4, 8), 64, False),
                     Argument("f32", (8,), 32, False), Argument("i32", (2, 2), 16, False)]
        for raw in ("<i2", "<u2", "<V2", "|V2"):  # bf16 has no typestr of its own
            tensors = [FakeArray(raw, (4, 8), pointer=1), FakeArray("<f2", (4, 8), pointer=2),
                       torch_tensor("float32", (8,), pointer=3),
                       SymmetricTensor(4, (2, 2), "i32", DEVICE)]
            self.assertEqual(check(*tensors, arguments=arguments), [1, 2, 3, 4], raw)

    def test_wrong_dtype(self):
        tensors = self.good()
        tensors[2] = torch_tensor("float32", (3000, 5000))
        with self.assertRaises(ValueError) as raised:
            check(*tensors)
        self.assertEqual(str(raised.exception), "gemm_allreduce argument 2: expected "
                         "bf16[3000,5000], got float32 tensor of shape (3000, 5000)")

    def test_wrong_dtype_of_every_kind(self):
        for wrong, got in ((torch_tensor("float16", (3000, 2500)), "float16 tensor"),
                           (FakeArray("<f2", (3000, 2500)), "'<f2' array"),
                           (SymmetricTensor(8, (3000, 2500), "f16", DEVICE),
                            "f16 symmetric tensor")):
            with self.subTest(got=got):
                with self.assertRaisesRegex(ValueError, rf"^gemm_allreduce argument 0: expected "
                                            rf"bf16\[3000,2500\], got {got} of shape"):
                    check(wrong, *self.good()[1:])

    def test_wrong_shape(self):
        tensors = self.good()
        tensors[1] = FakeArray("<i2", (5000, 2500))
        with self.assertRaisesRegex(ValueError, r"^gemm_allreduce argument 1: expected "
                                    r"bf16\[2500,5000\], got '<i2' array of shape "
                                    r"\(5000, 2500\)$"):
            check(*tensors)
        tensors[1] = torch_tensor("bfloat16", (2500 * 5000,))  # the same bytes, flat
        with self.assertRaisesRegex(ValueError, r"argument 1: .* shape \(12500000,\)"):
            check(*tensors)

    def test_wrong_count(self):
        with self.assertRaisesRegex(TypeError, r"^gemm_allreduce takes 3 arguments "
                                    r"\(bf16\[3000,2500\], bf16\[2500,5000\], "
                                    r"bf16\[3000,5000\]\), got 2$"):
            check(*self.good()[:2])
        with self.assertRaisesRegex(TypeError, r"takes 3 arguments .* got 4$"):
            check(*self.good(), self.good()[0])

    def test_wrong_device(self):
        for device, named in ((("cuda", 0), "cuda:0"), (("cpu", None), "cpu")):
            tensors = self.good()
            tensors[0] = torch_tensor("bfloat16", (3000, 2500), device=device)
            with self.subTest(device=named):
                with self.assertRaisesRegex(ValueError, rf"^gemm_allreduce argument 0: expected "
                                            rf"a tensor on cuda:1, the runtime's GPU, got a "
                                            rf"bfloat16 tensor of shape \(3000, 2500\) on "
                                            rf"{named}$"):
                    check(*tensors)
        tensors = self.good()
        tensors[2] = SymmetricTensor(0x3000, (3000, 5000), "bf16", 0)
        with self.assertRaisesRegex(ValueError, r"argument 2: expected a tensor on cuda:1"):
            check(*tensors)

    def test_not_contiguous(self):
        tensors = self.good()
        tensors[1] = torch_tensor("bfloat16", (2500, 5000), contiguous=False)
        with self.assertRaisesRegex(ValueError, r"^gemm_allreduce argument 1: expected a dense "
                                    r"row-major bf16\[2500,5000\], got a bfloat16 tensor of "
                                    r"shape \(2500, 5000\) that is not contiguous$"):
            check(*tensors)
        # A transposed array: column-major strides.
        tensors[1] = FakeArray("<i2", (2500, 5000), strides=(2, 5000))
        with self.assertRaisesRegex(ValueError, r"argument 1: expected a dense row-major"):
            check(*tensors)

    def test_row_major_strides(self):
        arguments = [Argument("f32", (3, 1, 4), 48, False)]
        # Explicit row-major strides; an extent of 1 may have any stride.
        for strides in ((16, 16, 4), (16, 999, 4)):
            self.assertEqual(check(FakeArray("<f4", (3, 1, 4), pointer=5, strides=strides),
                                   arguments=arguments), [5], strides)
        with self.assertRaisesRegex(ValueError, "not contiguous"):
            check(FakeArray("<f4", (3, 1, 4), strides=(32, 16, 4)), arguments=arguments)

    def test_not_a_tensor(self):
        for wrong, kind in (([1, 2], "list"), (0x1000, "int"), (None, "NoneType")):
            tensors = self.good()
            tensors[0] = wrong
            with self.subTest(kind=kind):
                with self.assertRaisesRegex(TypeError, rf"^gemm_allreduce argument 0: expected "
                                            rf"bf16\[3000,2500\], got a {kind}, which is not a "
                                            rf"CUDA tensor"):
                    check(*tensors)

    def test_malformed_interface(self):
        array = FakeArray("<i2", (3000, 2500))
        del array.__cuda_array_interface__["data"]
        with self.assertRaisesRegex(TypeError, r"argument 0: malformed __cuda_array_interface__"):
            check(array, *self.good()[1:])


class SymmetricTensors(unittest.TestCase):
    def test_cuda_array_interface(self):
        for dtype, typestr in (("f32", "<f4"), ("float16", "<f2"), ("i32", "<i4"),
                               ("bfloat16", "|V2")):
            tensor = SymmetricTensor(0x7F00DEAD0000, (128, 256), dtype, 3)
            self.assertEqual(tensor.__cuda_array_interface__,
                             {"version": 3, "shape": (128, 256), "typestr": typestr,
                              "data": (0x7F00DEAD0000, False), "strides": None,
                              "stream": None}, dtype)

    def test_attributes(self):
        tensor = SymmetricTensor(0x1000, [4, 6], "bfloat16", 2)
        self.assertEqual((tensor.shape, tensor.dtype, tensor.device, tensor.nbytes),
                         ((4, 6), "bf16", 2, 48))
        self.assertEqual(tensor.data_ptr(), 0x1000)
        self.assertIn("bf16[4, 6]", repr(tensor))

    def test_memory_of_a_closed_runtime(self):
        class ClosedRuntime:
            closed = True

        tensor = SymmetricTensor(0x1000, (4,), "f32", 0, runtime=ClosedRuntime())
        with self.assertRaisesRegex(Error, "runtime is closed"):
            tensor.data_ptr()
        with self.assertRaisesRegex(Error, "runtime is closed"):
            tensor.__cuda_array_interface__


class RepeatedCalls(unittest.TestCase):
    """ArgumentChecker skips the full check only for tensors unchanged since a call that passed."""

    def setUp(self):
        self.checker = ArgumentChecker("gemm_allreduce", GEMM_ALLREDUCE, DEVICE)
        self.tensors = CheckArguments.good(self)
        self.assertEqual(self.checker(self.tensors), [0x1000, 0x2000, 0x3000])

    def test_the_same_tensors_again(self):
        for _ in range(3):
            self.assertEqual(self.checker(self.tensors), [0x1000, 0x2000, 0x3000])

    def test_new_memory_gives_its_address(self):
        self.tensors[1]._pointer = 0x5000
        self.assertEqual(self.checker(self.tensors), [0x1000, 0x5000, 0x3000])

    def test_a_changed_tensor_is_checked_again(self):
        self.tensors[0].shape = (3000, 2501)
        with self.assertRaisesRegex(ValueError, r"argument 0: expected bf16\[3000,2500\]"):
            self.checker(self.tensors)
        self.tensors[0].shape = (3000, 2500)
        self.tensors[0]._contiguous = False
        with self.assertRaisesRegex(ValueError, "argument 0: expected a dense row-major"):
            self.checker(self.tensors)
        self.tensors[0]._contiguous = True
        self.tensors[1].dtype = FakeDtype("float16")
        with self.assertRaisesRegex(ValueError, "argument 1: expected bf16"):
            self.checker(self.tensors)

    def test_another_tensor_at_the_same_address(self):
        self.tensors[2] = torch_tensor("bfloat16", (3000, 5000), pointer=0x3000)
        self.assertEqual(self.checker(self.tensors), [0x1000, 0x2000, 0x3000])

    def test_a_refused_call_is_not_remembered(self):
        with self.assertRaisesRegex(TypeError, "takes 3 arguments"):
            self.checker(self.tensors[:2])
        self.assertEqual(self.checker(self.tensors), [0x1000, 0x2000, 0x3000])


class Shapes(unittest.TestCase):
    def test_shapes(self):
        self.assertEqual(shape_of(8), (8,))
        self.assertEqual(shape_of([2, 3]), (2, 3))
        self.assertEqual(shape_of(()), ())

    def test_bad_shapes(self):
        with self.assertRaisesRegex(TypeError, "shape must be an int or a sequence of ints, not "
                                               "float"):
            shape_of(2.0)
        with self.assertRaisesRegex(TypeError, r"shape \(2, '3'\): extents must be ints"):
            shape_of((2, "3"))
        with self.assertRaisesRegex(TypeError, "extents must be ints, not bool"):
            shape_of((True,))
        with self.assertRaisesRegex(ValueError, "extents must not be negative"):
            shape_of((2, -1))


if __name__ == "__main__":
    unittest.main()
