"""Finding and loading libmkc.so: `import mkc` works without it and without a GPU; a library
that is missing, not a library, or of another API version is an mkc.Error saying where it looked;
the library found (MKC_LIBRARY, which ctest sets) implements this package's API, and without a
driver mkc.Runtime() says so (MKC_ERROR_NO_DEVICE). Checks that depend on the environment run in
interpreters of their own, so that neither it nor a loaded library leaks between checks."""

import os
import pathlib
import tempfile
import types
import unittest
from unittest import mock

import support
from mkc import _capi

# Prints an mkc call's error as "STATUS|message", or "OK".
REPORT = """
import mkc
try:
    {call}
    print("OK")
except mkc.Error as error:
    print(error.status + "|" + str(error))
"""
GENERATE = REPORT.format(call="mkc.generate_cuda('mk.program', M=1)")
CREATE_RUNTIME = REPORT.format(call="mkc.Runtime()")


class InterpreterTest(unittest.TestCase):
    def report(self, code, **environment):
        """(status, message) of REPORT's call in a fresh interpreter, or ["OK"]."""
        result = support.run_python(code, **environment)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout.strip().split("|", 1)


class Locating(InterpreterTest):
    def test_import_needs_neither_library_nor_driver(self):
        result = support.run_python("import mkc; print(mkc.__all__)",
                                    MKC_LIBRARY="/nonexistent/libmkc.so",
                                    CUDA_VISIBLE_DEVICES="")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("Runtime", result.stdout)

    def test_missing_library(self):
        status, message = self.report(GENERATE, MKC_LIBRARY="/nonexistent/libmkc.so")
        self.assertEqual(status, "MKC_ERROR_INTERNAL")
        self.assertIn("cannot load libmkc.so (build the mkc_shared target, or set MKC_LIBRARY",
                      message)
        self.assertIn("/nonexistent/libmkc.so: no such file", message)

    def test_not_a_library(self):
        status, message = self.report(GENERATE, MKC_LIBRARY=str(support.HEADER))
        self.assertEqual(status, "MKC_ERROR_INTERNAL")
        self.assertIn(f"{support.HEADER}: ", message)
        self.assertNotIn("no such file", message)

    def test_candidates(self):
        with mock.patch.dict(os.environ, MKC_LIBRARY="/opt/mkc/libmkc.so"):
            self.assertEqual(_capi.library_candidates(), [pathlib.Path("/opt/mkc/libmkc.so")])
        with mock.patch.dict(os.environ):
            os.environ.pop("MKC_LIBRARY", None)
            self.assertEqual(_capi.library_candidates(),
                             [support.REPO / "python" / "mkc" / "libmkc.so",
                              support.REPO / "build" / "lib" / "libmkc.so"])


class FakeFunction:
    def __init__(self, result=None):
        self.result = result

    def __call__(self, *arguments):
        return self.result


class Declaring(unittest.TestCase):
    def fake_library(self, version):
        library = types.SimpleNamespace(**{name: FakeFunction() for name in _capi.PROTOTYPES})
        library.mkc_api_version = FakeFunction(version)
        return library

    def test_another_api_version(self):
        other = _capi.MKC_API_VERSION + 1
        library = self.fake_library(other)
        del library.mkc_op_launch  # what the version explains
        with self.assertRaisesRegex(OSError, f"it implements the C API version {other}; this "
                                             f"package was written for version "
                                             f"{_capi.MKC_API_VERSION}"):
            _capi._declare(library)

    def test_a_missing_function(self):
        library = self.fake_library(_capi.MKC_API_VERSION)
        del library.mkc_op_launch
        with self.assertRaises(AttributeError):
            _capi._declare(library)

    def test_status_functions_raise(self):
        library = self.fake_library(_capi.MKC_API_VERSION)
        library.mkc_status_name = FakeFunction(b"MKC_ERROR_CUDA")
        library.mkc_last_error = FakeFunction(b"mkc_barrier: cuCtxSynchronize failed")
        _capi._declare(library)
        self.assertFalse(hasattr(library.mkc_api_version, "errcheck"))  # an int, not a status
        self.assertFalse(hasattr(library.mkc_free, "errcheck"))
        with self.assertRaises(_capi.Error) as raised:
            library.mkc_barrier.errcheck(_capi.mkc_status(5), library.mkc_barrier, ())
        self.assertEqual((raised.exception.status, str(raised.exception)),
                         ("MKC_ERROR_CUDA", "mkc_barrier: cuCtxSynchronize failed"))
        library.mkc_barrier.errcheck(_capi.mkc_status(0), library.mkc_barrier, ())


class TheLibrary(InterpreterTest):
    """The library ctest built, through MKC_LIBRARY (or the repository's build tree)."""

    def test_api_version_and_statuses(self):
        library = _capi.library()
        self.assertEqual(library.mkc_api_version(), _capi.MKC_API_VERSION)
        for status, name in enumerate(_capi.STATUS_NAMES):
            self.assertEqual(library.mkc_status_name(status).decode(), name)

    def test_runtime_without_a_driver(self):
        # A process that no launcher started (a world of one) in which no GPU is visible, even
        # where there are some: cuInit finds none.
        with tempfile.TemporaryDirectory() as cache:
            status, message = self.report(CREATE_RUNTIME, CUDA_VISIBLE_DEVICES="",
                                          MKC_CACHE_DIR=cache)
        self.assertEqual(status, "MKC_ERROR_NO_DEVICE", message)
        self.assertIn("no usable CUDA driver", message)

    def test_malformed_environment(self):
        for variable, value, expected in [
                ("MKC_SHARE_GPU", "yes", "MKC_SHARE_GPU=yes is not 0 or 1"),
                ("MKC_DEVICE", "x", "MKC_DEVICE=x is not a device ordinal"),
                ("MKC_NET_TIMEOUT", "0", "MKC_NET_TIMEOUT=0 is not a positive number of seconds"),
                ("MKC_WAIT_TIMEOUT", "5s", "MKC_WAIT_TIMEOUT=5s is not a positive number of seconds")]:
            with self.subTest(variable):
                status, message = self.report(CREATE_RUNTIME, **{variable: value})
                self.assertEqual(status, "MKC_ERROR_INVALID_ARGUMENT", message)
                self.assertIn(expected, message)

if __name__ == "__main__":
    unittest.main()
