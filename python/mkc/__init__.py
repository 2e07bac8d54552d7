"""mkc from Python: fused multi-GPU kernels, compiled at run time for the job's topology and
launched on the caller's CUDA streams.

    import mkc, torch
    runtime = mkc.Runtime()                      # one per rank, under torchrun, srun, mpirun
    op = runtime.compile(mkc.library_program("gemm_allreduce"), M=8192, N=8192, K=8192)
    c = runtime.empty((8192, 8192), torch.bfloat16)
    op(a, b, c)                                  # a, b: this rank's shards, torch tensors
    result = c.torch()

A pure-Python layer over libmkc.so's C ABI (runtime/include/mkc.h), through ctypes: it loads in
any Python >= 3.9 without building anything, and on machines without a GPU, where generate_cuda
still works. libmkc.so is loaded on first use, from $MKC_LIBRARY, next to this package, or from
the build tree of the repository holding it. Failures of the library raise mkc.Error; mistakes
Python can see (a tensor of the wrong dtype, a shape that is not an int) raise TypeError or
ValueError first. torch is never imported here unless SymmetricTensor.torch() is called.
"""

from ._errors import Error
from ._programs import generate_cuda, library_program
from ._runtime import FusedOp, NetworkStatistics, RoutingReport, Runtime
from ._sequence import unzigzag, zigzag
from ._tensors import Argument, SymmetricTensor

__version__ = "0.1.0"
__all__ = ["Argument", "Error", "FusedOp", "NetworkStatistics", "RoutingReport", "Runtime",
           "SymmetricTensor", "generate_cuda", "library_program", "unzigzag", "zigzag"]
