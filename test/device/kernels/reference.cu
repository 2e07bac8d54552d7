// References for the GPU tests of fused ops: deterministic random inputs that every rank can
// regenerate for any shard, a GEMM with f32 accumulation, and an element-wise comparison. Plain
// CUDA on purpose (no mk:: code): a reference must not share the code it checks.
#include <cuda_bf16.h>

typedef unsigned long long u64;

// Uniform in [-1, 1), a function of (seed, index) only (splitmix64's finaliser).
__device__ float uniform(u64 seed, u64 index) {
  u64 z = seed * 0x9e3779b97f4a7c15ull + index;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

// out[r][c] (rows x cols, dense) = element (row0 + r, col0 + c) of a random matrix with
// `fullCols` columns: each rank fills its shard of the same matrix.
extern "C" __global__ void fill_bf16(__nv_bfloat16 *out, long long rows, long long cols,
                                     long long row0, long long col0, long long fullCols, u64 seed) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < rows * cols;
       i += (long long)gridDim.x * blockDim.x) {
    long long r = i / cols, c = i % cols;
    out[i] = __float2bfloat16(uniform(seed, u64(row0 + r) * fullCols + col0 + c));
  }
}

// C[M][N] = A[M][K] B[K][N], f32 accumulation; 64x64 tiles of C per 256-thread block, 4x4 per
// thread. Any M, N, K.
extern "C" __global__ void __launch_bounds__(256)
    gemm_f32(const __nv_bfloat16 *A, const __nv_bfloat16 *B, float *C, int M, int N, int K) {
  __shared__ float a[16][64 + 1];
  __shared__ float b[16][64 + 1];
  const int row0 = blockIdx.y * 64, col0 = blockIdx.x * 64;
  const int tr = threadIdx.x / 16 * 4, tc = threadIdx.x % 16 * 4;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
    for (int i = threadIdx.x; i < 16 * 64; i += 256) {
      int k = i / 64, x = i % 64;
      int ar = row0 + x, ak = k0 + k, bk = k0 + k, bc = col0 + x;
      a[k][x] = ar < M && ak < K ? __bfloat162float(A[(long long)ar * K + ak]) : 0.0f;
      b[k][x] = bk < K && bc < N ? __bfloat162float(B[(long long)bk * N + bc]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 16; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          acc[i][j] = fmaf(a[k][tr + i], b[k][tc + j], acc[i][j]);
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      if (row0 + tr + i < M && col0 + tc + j < N)
        C[(long long)(row0 + tr + i) * N + col0 + tc + j] = acc[i][j];
}

// *sumSquares += sum of want[i]^2, for the tolerance's scale.
extern "C" __global__ void sum_squares(const float *want, long long n, double *sumSquares) {
  double sum = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    sum += double(want[i]) * want[i];
  atomicAdd(sumSquares, sum);
}

// Counts the elements with !(|got - want| <= atol + rtol |want|) (NaN poison fails), keeps the
// first such index and the largest error (as f32 bits: non-negative floats order as integers).
extern "C" __global__ void compare_bf16(const __nv_bfloat16 *got, const float *want, long long n,
                                        float atol, float rtol, u64 *bad, u64 *firstBad,
                                        unsigned *maxErrorBits) {
  float maxError = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    float error = fabsf(__bfloat162float(got[i]) - want[i]);
    if (!(error <= atol + rtol * fabsf(want[i]))) {
      atomicAdd(bad, 1ull);
      atomicMin(firstBad, u64(i));
      error = isnan(error) ? __int_as_float(0x7f800000) : error;
    }
    maxError = fmaxf(maxError, error);
  }
  atomicMax(maxErrorBits, __float_as_uint(maxError));
}
