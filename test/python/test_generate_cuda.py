"""mkc.generate_cuda end to end through libmkc.so, which needs no GPU: the library's programs
become kernels; programs and shapes that do not compile are mkc.Errors (MKC_ERROR_COMPILE) with
located diagnostics. And mkc.library_program, which finds the library's programs."""

import os
import pathlib
import tempfile
import unittest
from unittest import mock

import support
import mkc

SHAPES = {"M": 1024, "N": 2048, "K": 4096}


class GenerateCuda(unittest.TestCase):
    def test_a_library_program(self):
        cuda = mkc.generate_cuda(support.GEMM_ALLREDUCE, topology="1x2", **SHAPES)
        self.assertIn('extern "C" __global__', cuda)
        self.assertIn('gemm_allreduce_argument_types[] = "bf16[1024,2048] bf16[2048,2048] '
                      'bf16[1024,2048]"', cuda)

    def test_text_a_str_path_and_a_dict_of_shapes(self):
        from_path = mkc.generate_cuda(support.GEMM_ALLREDUCE, "1x2", **SHAPES)
        self.assertEqual(mkc.generate_cuda(support.GEMM_ALLREDUCE.read_text(), "1x2", **SHAPES),
                         from_path)
        self.assertEqual(mkc.generate_cuda(str(support.GEMM_ALLREDUCE), "1x2", shapes=SHAPES),
                         from_path)

    def test_the_topology_shapes_the_kernel(self):
        four = mkc.generate_cuda(support.GEMM_ALLREDUCE, topology="1x4", rank=3, **SHAPES)
        self.assertIn('"bf16[1024,1024] bf16[1024,2048] bf16[1024,2048]"', four)

    def compile_error(self, program, **shapes):
        with self.assertRaises(mkc.Error) as raised:
            mkc.generate_cuda(program, topology="1x2", **shapes)
        self.assertEqual(raised.exception.status, "MKC_ERROR_COMPILE", raised.exception)
        return str(raised.exception)

    def test_a_bad_program(self):
        with tempfile.TemporaryDirectory() as folder:
            program = pathlib.Path(folder, "gemm_allreduce.mlir")
            program.write_text(support.GEMM_ALLREDUCE.read_text().replace("mk.matmul",
                                                                          "mk.matmull"))
            message = self.compile_error(program, **SHAPES)
        self.assertRegex(message, r"gemm_allreduce.mlir:\d+:\d+: error: custom op 'mk.matmull' "
                                  r"is unknown")

    def test_bad_shapes(self):
        message = self.compile_error(support.GEMM_ALLREDUCE, M=1024, N=2048, K=4095)
        self.assertRegex(message, r"gemm_allreduce.mlir:\d+:\d+: error: .* dim 1 \(extent 4095\) "
                                  r"does not split evenly over world \(2 ranks\)")
        message = self.compile_error(support.GEMM_ALLREDUCE, M=1024, N=2048)
        self.assertRegex(message, r"gemm_allreduce.mlir:\d+:\d+: error: shape symbol 'K' of "
                                  r"@gemm_allreduce is not bound")

    def test_bad_arguments(self):
        with self.assertRaisesRegex(TypeError, "topology must be a string such as '1x2', not "
                                               "tuple"):
            mkc.generate_cuda(support.GEMM_ALLREDUCE, (1, 2), **SHAPES)
        with self.assertRaisesRegex(TypeError, "rank must be an int, not str"):
            mkc.generate_cuda(support.GEMM_ALLREDUCE, rank="0", **SHAPES)
        with self.assertRaisesRegex(TypeError, "shapes: N must be an int, not float"):
            mkc.generate_cuda(support.GEMM_ALLREDUCE, M=1024, N=2048.0, K=4096)


class LibraryProgram(unittest.TestCase):
    def test_the_repository_s_library(self):
        with mock.patch.dict(os.environ):
            os.environ.pop("MKC_LIB_DIR", None)
            self.assertEqual(mkc.library_program("gemm_allreduce"), support.GEMM_ALLREDUCE)
            with self.assertRaisesRegex(FileNotFoundError, r"no program 'gemm_all_reduce' in "
                                        r".*lib; it has: allgather_gemm, allreduce, gemm_allreduce"):
                mkc.library_program("gemm_all_reduce")

    def test_mkc_lib_dir(self):
        with tempfile.TemporaryDirectory() as folder:
            pathlib.Path(folder, "mine.mlir").write_text("")
            with mock.patch.dict(os.environ, MKC_LIB_DIR=folder):
                self.assertEqual(mkc.library_program("mine"), pathlib.Path(folder, "mine.mlir"))
                with self.assertRaisesRegex(FileNotFoundError, "it has: mine$"):
                    mkc.library_program("gemm_allreduce")


if __name__ == "__main__":
    unittest.main()
