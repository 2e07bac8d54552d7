// The GEMM engine (mk/device/gemm_engine.cuh) as a plain persistent GEMM: C = A * B on one CTA
// per SM, tiles walked in bands of 8 tile rows so that concurrent CTAs share operands in L2.
// Compiled by NVRTC in DeviceCompileTest (resources, SASS) and by mkc-gemm-bench (checks, timing
// against cuBLASLt).
//
// The _twin kernels also write every tile to a second tensor shaped like C, through the senders,
// as the fused all-reduce writes a peer's copy: stored on the first half of the tile rows, added
// on the rest (C through TMA likewise). On one GPU they show what that traffic costs the GEMM
// on the memory side, without NVLink; their TwinMode leaves parts of it out. They take whole
// tiles only (M and N multiples of the cluster's rows and the tile's columns).
#include "mk/device.cuh"

extern __shared__ __align__(128) unsigned char mk_smem[];

enum TwinMode : int {
  kTwinAllReduce = 0,  // as above
  kTwinStores = 1,     // stored everywhere, no additions
  kTwinResident = 2,   // as kTwinAllReduce, but each CTA writes its twin tiles over one 128 x BN
                       // block of the twin, which stays in L2
  kTwinNone = 3,       // C alone, through the senders as above: no twin traffic
  kTwinNoneStores = 4, // C alone, through the senders, stored everywhere
  kTwinNoneTma = 5,    // C alone, through the consumers' TMA (gemm_store, gemm_store_add)
  kTwinCopyEngine = 6, // C alone through the consumers' TMA, then a flag per band of 8 tile rows
                       // (`progress`), on which the host has a copy engine copy the band to the
                       // twin
};

constexpr int kBand = 8; // tile rows walked together (gemm's order)

/// Where the _twin kernels' consumers send a tile. Modes 0-4 go through the senders, 5 and 6
/// through the consumers' TMA, in separate kernels (name and name_tma): one kernel with all of
/// these epilogues inlined makes NVRTC 13.0's optimizer crash now and then (a bad pointer in
/// nvrtcCompileProgram, in about one compile of ten).
enum class TwinPath { kNone, kSenders, kTma };

/// Tile (m0, n0) to C, and to the twin (peer 1 of `twin`, a tensor shaped like C) through the
/// senders, as `mode` (0-4) says.
template <typename Out, typename Config>
__device__ __forceinline__ void
store_through_senders(mk::GemmEngine<Config> &engine, const mk::GemmAccumulator<Config> &acc,
                      const mk_tensor_map &c, const mk_tensor_ref *twin, int mode, int m0, int n0,
                      int M, int N) {
  const bool add = m0 >= M / 2 && mode != kTwinStores && mode != kTwinNoneStores;
  // "GPU" 0 is C, through its map; "GPU" 1 the twin.
  const bool resident = mode == kTwinResident;
  const long long offset =
      resident ? (long long)blockIdx.x * Config::BM * Config::BN : (long long)m0 * N + n0;
  const int ld = resident ? Config::BN : N;
  const int end = mode == kTwinNone || mode == kTwinNoneStores ? 1 : 2;
  if (add)
    mk::gemm_store_add_gpus<Out>(engine, acc, &c, 0, 0, end, 2, twin, offset, ld, Config::BM,
                                 Config::BN, n0, m0);
  else
    mk::gemm_store_gpus<Out>(engine, acc, &c, 0, 0, end, 2, twin, offset, ld, Config::BM,
                             Config::BN, n0, m0);
}

/// Tile (m0, n0) to C through the consumers' TMA, as `mode` (5 or 6) says.
template <typename Out, typename Config>
__device__ __forceinline__ void
store_through_tma(mk::GemmEngine<Config> &engine, const mk::GemmAccumulator<Config> &acc,
                  const mk_tensor_map &c, int mode, mk_u32 *progress, int m0, int n0, int M) {
  if (mode == kTwinCopyEngine) {
    mk::gemm_store<Out>(engine, acc, &c, n0, m0);
    mk::gemm_signal(engine, progress + m0 / 128 / kBand);
  } else if (m0 >= M / 2) {
    mk::gemm_store_add<Out>(engine, acc, &c, n0, m0);
  } else {
    mk::gemm_store<Out>(engine, acc, &c, n0, m0);
  }
}

template <typename Config, typename Out, TwinPath kPath = TwinPath::kNone>
__device__ __forceinline__ void
gemm(const mk_tensor_map &a, const mk_tensor_map &b, const mk_tensor_map &c, int M, int N, int K,
     const mk_tensor_ref *twin = nullptr, int mode = 0, mk_u32 *progress = nullptr) {
  // Clustered CTAs take tiles t and t + 1 of a band's column, rows 2i and 2i + 1: the row count
  // is rounded up to the cluster, the rows beyond M are computed on zeros and stored nowhere.
  const int tiles_m =
      ((M + 127) / 128 + Config::kCluster - 1) / Config::kCluster * Config::kCluster;
  const int tiles_n = (N + Config::BN - 1) / Config::BN;
  const int tiles = tiles_m * tiles_n, k_blocks = (K + 63) / 64;
  const auto origin = [&](int t, int &m0, int &n0) {
    const int band = t / (kBand * tiles_n), first = band * kBand;
    const int rows = min(kBand, tiles_m - first), in_band = t % (kBand * tiles_n);
    m0 = (first + in_band % rows) * 128;
    n0 = in_band / rows * Config::BN;
  };
  mk::GemmEngine<Config> engine(mk_smem);
  if (mk::gemm_is_producer()) {
    mk::gemm_producer_begin(engine);
    if (mk::gemm_loader())
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int m0, n0;
        origin(t, m0, n0);
        mk::gemm_load(engine, &a, &b, m0, n0, k_blocks, 0);
      }
  } else {
    mk::gemm_consumer_begin(engine);
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      int m0, n0;
      origin(t, m0, n0);
      const mk::GemmAccumulator<Config> acc = mk::gemm_mma(engine, k_blocks);
      if constexpr (kPath == TwinPath::kSenders)
        store_through_senders<Out>(engine, acc, c, twin, mode, m0, n0, M, N);
      else if constexpr (kPath == TwinPath::kTma)
        store_through_tma<Out>(engine, acc, c, mode, progress, m0, n0, M);
      else
        mk::gemm_store<Out>(engine, acc, &c, n0, m0);
    }
    mk::gemm_finish(engine);
  }
}

// gemm_<T>_<BN>x<stages>[e<epilogue buffers, if not 2>]_<B layout: kn = [K x N], nk = [N x K]>
// [_c<cluster, if not 1>], and its shared memory.
#define GEMM_KERNEL(name, T, BN, STAGES, BKMAJOR, BUFFERS, CLUSTER)                                \
  extern "C" __constant__ int name##_smem =                                                        \
      mk::gemm_smem_bytes<mk::GemmConfig<T, BN, STAGES, BKMAJOR, BUFFERS, CLUSTER>>();             \
  extern "C" __global__ void __launch_bounds__(MK_CTA_THREADS, 1) __cluster_dims__(CLUSTER, 1, 1)  \
      name(const __grid_constant__ mk_tensor_map a, const __grid_constant__ mk_tensor_map b,       \
           const __grid_constant__ mk_tensor_map c, int M, int N, int K) {                         \
    gemm<mk::GemmConfig<T, BN, STAGES, BKMAJOR, BUFFERS, CLUSTER>, T>(a, b, c, M, N, K);           \
  }

// The same with the twin (peer 1 of `twin`) written as `mode` says: `name` takes modes 0-4,
// `name`_tma modes 5 and 6 (with the flags of kTwinCopyEngine).
#define GEMM_TWIN_KERNEL_PATH(name, PATH, T, BN, STAGES, BUFFERS, CLUSTER)                         \
  extern "C" __global__ void __launch_bounds__(MK_CTA_THREADS, 1) __cluster_dims__(CLUSTER, 1, 1)  \
      name(const __grid_constant__ mk_tensor_map a, const __grid_constant__ mk_tensor_map b,       \
           const __grid_constant__ mk_tensor_map c, int M, int N, int K,                           \
           const mk_tensor_ref *twin, int mode, mk_u32 *progress) {                                \
    gemm<mk::GemmConfig<T, BN, STAGES, false, BUFFERS, CLUSTER>, T, PATH>(a, b, c, M, N, K, twin,  \
                                                                          mode, progress);         \
  }
#define GEMM_TWIN_KERNEL(name, T, BN, STAGES, BUFFERS, CLUSTER)                                    \
  extern "C" __constant__ int name##_smem =                                                        \
      mk::gemm_smem_bytes<mk::GemmConfig<T, BN, STAGES, false, BUFFERS, CLUSTER>>();               \
  GEMM_TWIN_KERNEL_PATH(name, TwinPath::kSenders, T, BN, STAGES, BUFFERS, CLUSTER)                 \
  GEMM_TWIN_KERNEL_PATH(name##_tma, TwinPath::kTma, T, BN, STAGES, BUFFERS, CLUSTER)

GEMM_KERNEL(gemm_bf16_256x4_kn, mk::bf16, 256, 4, false, 2, 1)
GEMM_KERNEL(gemm_bf16_256x3_kn, mk::bf16, 256, 3, false, 2, 1)
GEMM_KERNEL(gemm_bf16_256x3e4_kn, mk::bf16, 256, 3, false, 4, 1)
GEMM_KERNEL(gemm_bf16_256x4_nk, mk::bf16, 256, 4, true, 2, 1)
GEMM_KERNEL(gemm_bf16_128x6_kn, mk::bf16, 128, 6, false, 2, 1)
GEMM_KERNEL(gemm_f16_64x8_kn, mk::f16, 64, 8, false, 2, 1)
GEMM_KERNEL(gemm_bf16_256x4_kn_c2, mk::bf16, 256, 4, false, 2, 2)
GEMM_KERNEL(gemm_bf16_256x3e4_kn_c2, mk::bf16, 256, 3, false, 4, 2)
GEMM_KERNEL(gemm_bf16_256x4_nk_c2, mk::bf16, 256, 4, true, 2, 2)
GEMM_KERNEL(gemm_bf16_128x6_kn_c2, mk::bf16, 128, 6, false, 2, 2)
GEMM_TWIN_KERNEL(gemm_bf16_256x3e4_kn_c2_twin, mk::bf16, 256, 3, 4, 2)
GEMM_TWIN_KERNEL(gemm_bf16_256x4_kn_c2_twin, mk::bf16, 256, 4, 2, 2)

// out [cols x rows] = in [rows x cols]^T, for the [N x K] operand.
extern "C" __global__ void transpose_16(const unsigned short *in, unsigned short *out,
                                        long long rows, long long cols) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < rows * cols;
       i += (long long)gridDim.x * blockDim.x)
    out[(i % cols) * rows + i / cols] = in[i];
}
