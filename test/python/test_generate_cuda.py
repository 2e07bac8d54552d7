"""mkc.generate_cuda end to end through libmkc.so, which needs no GPU: the library's programs
become kernels, as the compiler options given choose; programs, shapes and options that do not
compile are mkc.Errors (MKC_ERROR_COMPILE) with located diagnostics. And mkc.library_program,
which finds the library's programs."""

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
        self.assertIn('/* argument_types */ {{"bf16", 2, 0, {1024ull, 2048ull}}, '
                      '{"bf16", 2, 0, {2048ull, 2048ull}}, {"bf16", 2, 0, {1024ull, 2048ull}}}', cuda)

    def test_text_a_str_path_and_a_dict_of_shapes(self):
        from_path = mkc.generate_cuda(support.GEMM_ALLREDUCE, "1x2", **SHAPES)
        self.assertEqual(mkc.generate_cuda(support.GEMM_ALLREDUCE.read_text(), "1x2", **SHAPES),
                         from_path)
        self.assertEqual(mkc.generate_cuda(str(support.GEMM_ALLREDUCE), "1x2", shapes=SHAPES),
                         from_path)

    def test_the_topology_shapes_the_kernel(self):
        four = mkc.generate_cuda(support.GEMM_ALLREDUCE, topology="1x4", rank=3, **SHAPES)
        self.assertIn('{{"bf16", 2, 0, {1024ull, 1024ull}}, {"bf16", 2, 0, {1024ull, 2048ull}}, '
                      '{"bf16", 2, 0, {1024ull, 2048ull}}}', four)

    def test_compiler_options(self):
        default = mkc.generate_cuda(support.GEMM_ALLREDUCE, topology="1x2", **SHAPES)
        self.assertIn("mk::GemmConfig<mk::bf16, 128, mk::gemm_max_stages<mk::bf16, 128, 2, 128>(), "
                      "false, 2, 2, 128>", default)
        self.assertIn("__cluster_dims__(2, 1, 1)", default)
        chosen = mkc.generate_cuda(support.GEMM_ALLREDUCE, topology="1x2", **SHAPES,
                                   options={"gemm-tile-n": 256, "gemm-stages": 3,
                                            "gemm-cluster": 1})
        self.assertIn("mk::GemmConfig<mk::bf16, 256, 3, false, 4, 1, 128>", chosen)
        self.assertNotIn("__cluster_dims__", chosen)
        # A reduce role of 16 CTAs instead of the all-reduce in place, whose 128 tiles (128 x 128)
        # take one round on 128 CTAs. The roles' CTAs are the launch's (mk::role_first,
        # mk::role_ctas), the manifest's split the default.
        self.assertIn("mk::role_ctas(v1, 0)", default)
        self.assertNotIn("mk::role_ctas(v1, 1)", default)
        self.assertIn('/* sm_split */ {{"compute", 128, 0}}', default)
        roles = mkc.generate_cuda(support.GEMM_ALLREDUCE, topology="1x2", **SHAPES,
                                  sm_split={"compute": 116, "intra_reduce": 16})
        # The reduce role is the pool: every CTA claims its tiles once done with its own role's
        # (mk::claim), none tied to the role's range; with recycle-ctas off, its own CTAs stride.
        self.assertIn("mk::claim(v1, ", roles)
        self.assertNotIn("mk::role_ctas(v1, 1)", roles)
        fixed = mkc.generate_cuda(support.GEMM_ALLREDUCE, topology="1x2", **SHAPES,
                                  sm_split={"compute": 116, "intra_reduce": 16},
                                  options={"recycle-ctas": False})
        self.assertIn("mk::role_ctas(v1, 1)", fixed)
        self.assertNotIn("mk::claim", fixed)
        # The split the runtime reads back (FusedOp.sm_split).
        self.assertIn('/* sm_split */ {{"compute", 116, 0}, '
                      '{"intra_reduce", 16, MK_ROLE_POOL}}', roles)
        # Copies by copy engines, which the module lists for the runtime; none by default.
        self.assertIn("/* engine_copy_count */ 0,", default)
        engines = mkc.generate_cuda(support.GEMM_ALLREDUCE, topology="1x2", **SHAPES,
                                    options={"all-reduce-copy-engine": True})
        # 8 tile rows of 16 (128 x 128 tiles): a band of 4 x 8 tiles at a time, each GPU's 2 there
        # and 2 back.
        self.assertIn("/* engine_copy_count */ 8,", engines)
        self.assertNotIn("gemm_store_gpus", engines)

    def test_bad_compiler_options(self):
        message = self.compile_error(support.GEMM_ALLREDUCE, **SHAPES,
                                     options={"gemm-stage": 3})
        self.assertIn("compiler options: unknown compiler option 'gemm-stage' (known: sm-split, "
                      "gemm-tile-n, gemm-tile-m, gemm-k-splits, gemm-stages, gemm-cluster, "
                      "in-place-all-reduce, all-reduce-copy-engine, recycle-ctas, "
                      "one-shot-all-reduce)", message)
        message = self.compile_error(support.GEMM_ALLREDUCE, **SHAPES, options={"gemm-stages": 1})
        self.assertIn("gemm-stages=1: the GEMM engine's ring has 2 to 8 stages", message)
        message = self.compile_error(support.GEMM_ALLREDUCE, **SHAPES,
                                     options={"gemm-cluster": "two"})
        self.assertIn("gemm-cluster=two: not an integer", message)
        message = self.compile_error(support.GEMM_ALLREDUCE, **SHAPES,
                                     options={"in-place-all-reduce": 2})
        self.assertIn("in-place-all-reduce=2: not 0 or 1", message)
        message = self.compile_error(support.GEMM_ALLREDUCE, **SHAPES,
                                     options={"all-reduce-copy-engine": "yes"})
        self.assertIn("all-reduce-copy-engine=yes: not 0 or 1", message)

    def compile_error(self, program, options=None, **shapes):
        with self.assertRaises(mkc.Error) as raised:
            mkc.generate_cuda(program, topology="1x2", options=options, **shapes)
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
        # Uneven shards compile (torch.tensor_split's), shards of partial tiles too; grouped
        # query heads that do not divide into the key heads do not.
        mkc.generate_cuda(support.GEMM_ALLREDUCE, topology="1x2", M=1000, N=2048, K=4095)
        mkc.generate_cuda(mkc.library_program("ring_attention_causal"), topology="1x2", B=1, H=1,
                          S=1000, D=64)
        message = self.compile_error(mkc.library_program("ring_attention_gqa"), B=1, H=6, Hkv=4,
                                     S=256, D=64)
        self.assertRegex(message, r"ring_attention_gqa.mlir:\d+:\d+: error: 'mk.load' op takes "
                                  r"tile 5 of dim 1, which has 4 .*: a tile's index stays in its "
                                  r"tensor")
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
