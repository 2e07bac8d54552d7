// Kernels that instantiate mk::matmul (mma.sync, any operand layout): one output tile per CTA.
// Compiled by NVRTC in DeviceCompileTest (resources) and DeviceGpuTest (runs).
#include "mk/device.cuh"

extern __shared__ __align__(128) unsigned char mk_smem[];

#define MK_KERNEL extern "C" __global__ void __launch_bounds__(MK_TEAM_THREADS, 1)
// The dynamic shared memory kernel `name` needs, for the host to read with cuModuleGetGlobal.
#define MK_SMEM(name, ...) extern "C" __constant__ int name##_smem = __VA_ARGS__;

__host__ __device__ constexpr int max_of(int a, int b) { return a < b ? b : a; }

// C (f32, ldc) = A * B, CTA (x, y) computing output tile (y, x), stored whole: its rows and
// columns beyond M and N must come out 0. A is [M x K] or, with kAT, [K x M]; B is [K x N] or,
// with kBT, [N x K].
template <int BM, int BN, int BK, bool kAT, bool kBT, typename T>
__device__ __forceinline__ void matmul_tile(const T *A, long long lda, const T *B, long long ldb,
                                            float *C, long long ldc, int M, int N, int K) {
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int rows = min(BM, M - m0), cols = min(BN, N - n0);
  const mk::Tile<float, BM, BN> acc = mk::matmul<BM, BN, BK, kAT, kBT>(
      kAT ? A + m0 : A + m0 * lda, lda, kBT ? B + n0 * ldb : B + n0, ldb, K, rows, cols, mk_smem);
  mk::store_tile(acc, C + m0 * ldc + n0, ldc, BM, BN, mk_smem);
}

#define MATMUL_KERNEL(name, T, BM, BN, BK, kAT, kBT)                                               \
  MK_SMEM(name,                                                                                    \
          max_of(mk::matmul_smem_bytes<T, BM, BN, BK>(), mk::tile_io_smem_bytes<float, BM, BN>())) \
  MK_KERNEL name(const T *A, long long lda, const T *B, long long ldb, float *C, long long ldc,    \
                 int M, int N, int K) {                                                            \
    matmul_tile<BM, BN, BK, kAT, kBT>(A, lda, B, ldb, C, ldc, M, N, K);                            \
  }

MATMUL_KERNEL(matmul_bf16_128x256x64_nn, mk::bf16, 128, 256, 64, false, false)
MATMUL_KERNEL(matmul_bf16_128x256x64_nt, mk::bf16, 128, 256, 64, false, true)
MATMUL_KERNEL(matmul_bf16_128x256x64_tn, mk::bf16, 128, 256, 64, true, false)
MATMUL_KERNEL(matmul_bf16_128x256x64_tt, mk::bf16, 128, 256, 64, true, true)
MATMUL_KERNEL(matmul_bf16_128x128x64_nn, mk::bf16, 128, 128, 64, false, false)
MATMUL_KERNEL(matmul_bf16_128x128x64_tt, mk::bf16, 128, 128, 64, true, true)
MATMUL_KERNEL(matmul_bf16_64x64x64_nt, mk::bf16, 64, 64, 64, false, true)
MATMUL_KERNEL(matmul_bf16_64x64x64_tn, mk::bf16, 64, 64, 64, true, false)
MATMUL_KERNEL(matmul_f16_128x256x64_nn, mk::f16, 128, 256, 64, false, false)
MATMUL_KERNEL(matmul_f16_64x64x64_tt, mk::f16, 64, 64, 64, true, true)
