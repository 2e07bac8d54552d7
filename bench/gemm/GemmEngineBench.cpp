//===- GemmEngineBench.cpp - the GEMM engine against cuBLASLt, side by side -------------===//
//
// mkc-gemm-bench [--check] [--shapes MxNxK,...] [--configs NAME,...] [--device GPU]
//                [--twin MODE] [--twin-device GPU] [--repeat N] [--warmup-ms N]
//                [--cooldown-ms N] [--sms N] [--balanced-grid] [--csv FILE] [--cubin FILE]
//
// For each shape, C = A * B (bf16 in, f32 accumulate, bf16 out; A [M x K], B [K x N], both
// row-major): every engine configuration of test/device/kernels/gemm_engine.cu and cuBLASLt's
// heuristic choice run in this process on the same random inputs, timed with CUDA events: each
// runs for --warmup-ms (500) after --cooldown-ms idle (0), then the median of --repeat runs
// counts. Each engine result is first checked against an f32 GPU reference with C poisoned.
// --check checks without timing (the gpu/gemm-engine test). --sms runs the engine on fewer CTAs
// than the GPU has SMs (what a fused kernel's compute role gets). --balanced-grid also runs each
// configuration on the fewest CTAs that take as many rounds of tiles (NAME@CTAS), where that is
// fewer than the grid, right after it on the same inputs. --configs runs only the named
// engine configurations. The _twin configurations (whole tiles only; others are skipped) also
// write each tile to a second tensor as to a peer, and both must hold the product; --twin picks
// what they write (TwinMode in gemm_engine.cu: 0, the fused all-reduce's stores and additions;
// 1, stores only; 2, the twin's writes kept in L2; 3-5, no twin: C through the senders, with
// additions or without, or through the consumers' TMA; 6, C through TMA and a copy engine
// copying each finished band of tile rows to the twin, then writing the band's flag beside the
// twin, which must hold the launch count; the time includes the last band's copy). --device
// picks the GPU (0), and --twin-device puts the twin on another (peer access, over NVLink), as
// the fused all-reduce's peer copy is; two processes, each with the other's GPU as its twin's,
// send both ways.
//
//===----------------------------------------------------------------------------------===//

#include "TestKernels.h"

#include "mk/Support/BoundedNumber.h"
#include "mk/abi.h"
#include "mk/runtime/driver/CudaDriver.h"
#include "mk/runtime/driver/TensorMap.h"

#include <cublasLt.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using mkc::cuda::Driver;

namespace {

#define CU(call) MK_CU_CHECK(Driver::get(), call)

void checkLt(cublasStatus_t status, const char *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuBLASLt status " + std::to_string(status));
}
#define LT(call) checkLt(call, #call)

struct Shape {
  long long m, n, k;
};

struct Config {
  const char *kernel;
  int bn;
  bool bKMajor;
  int cluster; // CTAs per cluster, sharing B
  bool twin;   // takes the twin tensor's mk_tensor_ref
};
const Config kConfigs[] = {{"gemm_bf16_256x4_kn", 256, false, 1},
                           {"gemm_bf16_256x3_kn", 256, false, 1},
                           {"gemm_bf16_256x3e4_kn", 256, false, 1},
                           {"gemm_bf16_128x6_kn", 128, false, 1},
                           {"gemm_bf16_256x4_nk", 256, true, 1},
                           {"gemm_bf16_256x4_kn_c2", 256, false, 2},
                           {"gemm_bf16_256x3e4_kn_c2", 256, false, 2},
                           {"gemm_bf16_128x6_kn_c2", 128, false, 2},
                           {"gemm_bf16_256x4_nk_c2", 256, true, 2},
                           {"gemm_bf16_256x3e4_kn_c2_twin", 256, false, 2, true},
                           {"gemm_bf16_256x4_kn_c2_twin", 256, false, 2, true}};

/// Tile rows the kernels walk together, and the copy engine copies together in --twin 6
/// (gemm_engine.cu's kBand).
constexpr int kBandRows = 8;

/// The CTAs of a persistent grid of clusters of `cluster` that are resident at once: at most
/// `sms`, a whole number of clusters.
unsigned persistentGrid(CUfunction f, int sms, int smem, int cluster) {
  if (cluster == 1)
    return unsigned(sms);
  CUlaunchConfig config{};
  config.gridDimX = unsigned(sms / cluster * cluster);
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = MK_CTA_THREADS;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = unsigned(smem);
  int clusters = 0;
  CU(cuOccupancyMaxActiveClusters(&clusters, f, &config));
  return unsigned(std::min(clusters, sms / cluster) * cluster);
}

/// The fewest CTAs, whole clusters of `cluster`, that walk `tiles` in as many rounds as `grid`
/// CTAs do (gemm_engine.cu strides the tiles over the grid).
unsigned balancedGrid(long long tiles, unsigned grid, int cluster) {
  const long long rounds = (tiles + grid - 1) / grid, ctas = (tiles + rounds - 1) / rounds;
  return unsigned((ctas + cluster - 1) / cluster * cluster);
}

class Module {
public:
  explicit Module(const char *file, const char *cubinPath = nullptr) {
    const mkc::nvrtc::Result result = mkc::test::compileKernels(file);
    if (!result.ok)
      throw std::runtime_error(std::string("NVRTC failed on ") + file + ":\n" + result.log);
    if (cubinPath)
      std::ofstream(cubinPath, std::ios::binary) << result.cubin;
    CU(cuModuleLoadData(&module_, result.cubin.data()));
  }
  ~Module() { Driver::get().cuModuleUnload(module_); }
  CUfunction function(const char *name) const {
    CUfunction f;
    CU(cuModuleGetFunction(&f, module_, name));
    return f;
  }
  int constant(const std::string &name) const {
    CUdeviceptr address;
    size_t bytes;
    CU(cuModuleGetGlobal(&address, &bytes, module_, name.c_str()));
    int value;
    CU(cuMemcpyDtoH(&value, address, sizeof value));
    return value;
  }

private:
  CUmodule module_ = nullptr;
};

/// Device memory of the current context's GPU, or of `owner`'s.
struct Buffer {
  explicit Buffer(size_t bytes, CUcontext owner = nullptr) : owner(owner) {
    std::optional<mkc::cuda::ContextScope> scope;
    if (owner)
      scope.emplace(Driver::get(), owner);
    CU(cuMemAlloc(&pointer, bytes));
  }
  ~Buffer() {
    const Driver &driver = Driver::get();
    if (owner)
      driver.cuCtxPushCurrent(owner);
    driver.cuMemFree(pointer);
    if (CUcontext popped; owner)
      driver.cuCtxPopCurrent(&popped);
  }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  CUcontext owner;
  CUdeviceptr pointer = 0;
};

struct Stream {
  Stream() {
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CU(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  }
  ~Stream() {
    Driver::get().cuEventDestroy(done);
    Driver::get().cuStreamDestroy(stream);
  }
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;
  /// Makes the legacy stream, where the timing events are, wait for what `stream` has queued.
  void join() const {
    CU(cuEventRecord(done, stream));
    CU(cuStreamWaitEvent(nullptr, done, 0));
  }
  CUstream stream = nullptr;
  CUevent done = nullptr;
};

/// A peer GPU whose memory the current context's kernels and copies reach over NVLink.
class PeerDevice {
public:
  explicit PeerDevice(int ordinal) {
    CUdevice home;
    CU(cuCtxGetDevice(&home));
    CU(cuDeviceGet(&device_, ordinal));
    int reachable = 0;
    CU(cuDeviceCanAccessPeer(&reachable, home, device_));
    if (!reachable)
      throw std::runtime_error("GPU " + std::to_string(ordinal) + " is not a peer of this one");
    CU(cuDevicePrimaryCtxRetain(&context_, device_));
    CU(cuCtxEnablePeerAccess(context_, 0));
  }
  ~PeerDevice() { Driver::get().cuDevicePrimaryCtxRelease(device_); }
  PeerDevice(const PeerDevice &) = delete;
  PeerDevice &operator=(const PeerDevice &) = delete;
  CUcontext context() const { return context_; }

private:
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
};

template <typename... Args>
void launch(CUfunction f, unsigned grid, unsigned threads, unsigned smem, Args... args) {
  void *params[] = {static_cast<void *>(&args)...};
  CU(cuLaunchKernel(f, grid, 1, 1, threads, 1, 1, smem, nullptr, params, nullptr));
}

mk_tensor_map map2d(CUdeviceptr base, long long inner, long long outer, unsigned boxInner,
                    unsigned boxOuter) {
  mk_tensor_map_spec spec{};
  spec.element = MK_MAP_ELEMENT_BF16;
  spec.rank = 2;
  spec.dims[0] = inner;
  spec.dims[1] = outer;
  spec.box[0] = boxInner;
  spec.box[1] = boxOuter;
  spec.swizzle_bytes = 128;
  return mkc::encodeTensorMap(Driver::get(), spec, reinterpret_cast<const void *>(base));
}

/// How each variant is brought to the clocks it is timed at. Under the board's power cap, the
/// clocks fall as the GPU heats for a few hundred milliseconds: after `warmupMs` of running, a
/// variant is timed at a sustained load's clocks (the default); after `cooldownMs` idle and a
/// short warm-up, at the clocks of a burst. Either way no variant gains from its place in line.
struct Regime {
  int warmupMs = 500;
  int cooldownMs = 0;
};

/// Median milliseconds of each of `runs` over `repeat` back-to-back runs, in `regime`.
std::vector<double> medians(int repeat, Regime regime,
                            const std::vector<std::function<void()>> &runs) {
  CUevent start, stop;
  CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  std::vector<double> result;
  for (const auto &run : runs) {
    CU(cuCtxSynchronize());
    std::this_thread::sleep_for(std::chrono::milliseconds(regime.cooldownMs));
    const auto begin = std::chrono::steady_clock::now();
    do {
      for (int i = 0; i < 5; ++i)
        run();
      CU(cuCtxSynchronize());
    } while (std::chrono::steady_clock::now() - begin < std::chrono::milliseconds(regime.warmupMs));
    std::vector<float> ms;
    for (int i = 0; i < repeat; ++i) {
      CU(cuEventRecord(start, nullptr));
      run();
      CU(cuEventRecord(stop, nullptr));
      CU(cuEventSynchronize(stop));
      float elapsed;
      CU(cuEventElapsedTime(&elapsed, start, stop));
      ms.push_back(elapsed);
    }
    std::sort(ms.begin(), ms.end());
    result.push_back(ms[ms.size() / 2]);
  }
  Driver::get().cuEventDestroy(start);
  Driver::get().cuEventDestroy(stop);
  return result;
}

/// cuBLASLt's bf16 GEMM with f32 compute: row-major C = A B as column-major C^T = B^T A^T.
class Lt {
public:
  Lt() { LT(cublasLtCreate(&handle_)); }
  ~Lt() { cublasLtDestroy(handle_); }

  void prepare(const Shape &s) {
    release();
    LT(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatrixLayoutCreate(&b_, CUDA_R_16BF, s.n, s.k, s.n));
    LT(cublasLtMatrixLayoutCreate(&a_, CUDA_R_16BF, s.k, s.m, s.k));
    LT(cublasLtMatrixLayoutCreate(&c_, CUDA_R_16BF, s.n, s.m, s.n));
    cublasLtMatmulPreference_t preference;
    LT(cublasLtMatmulPreferenceCreate(&preference));
    size_t workspace = kWorkspace;
    LT(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &workspace, sizeof workspace));
    int found = 0;
    LT(cublasLtMatmulAlgoGetHeuristic(handle_, desc_, b_, a_, c_, c_, preference, 1, &heuristic_,
                                      &found));
    cublasLtMatmulPreferenceDestroy(preference);
    if (found == 0)
      throw std::runtime_error("cuBLASLt has no algorithm for this shape");
  }
  void run(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, CUdeviceptr workspace) {
    const float one = 1, zero = 0;
    LT(cublasLtMatmul(handle_, desc_, &one, reinterpret_cast<void *>(b), b_,
                      reinterpret_cast<void *>(a), a_, &zero, reinterpret_cast<void *>(c), c_,
                      reinterpret_cast<void *>(c), c_, &heuristic_.algo,
                      reinterpret_cast<void *>(workspace), kWorkspace, nullptr));
  }
  static constexpr size_t kWorkspace = 32 << 20;

  /// The chosen algorithm's configuration as cuBLASLt's enum values: tile
  /// (cublasLtMatmulTile_t), stages (cublasLtMatmulStages_t), cluster (cublasLtClusterShape_t).
  std::string describe() const {
    const auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attribute, auto value) {
      size_t written = 0;
      LT(cublasLtMatmulAlgoConfigGetAttribute(&heuristic_.algo, attribute, &value, sizeof value,
                                              &written));
      return std::to_string(value);
    };
    return "tile " + get(CUBLASLT_ALGO_CONFIG_TILE_ID, uint32_t{}) + ", stages " +
           get(CUBLASLT_ALGO_CONFIG_STAGES_ID, uint32_t{}) + ", cluster " +
           get(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, uint16_t{});
  }

private:
  void release() {
    if (desc_)
      cublasLtMatmulDescDestroy(desc_);
    for (cublasLtMatrixLayout_t layout : {a_, b_, c_})
      if (layout)
        cublasLtMatrixLayoutDestroy(layout);
    desc_ = nullptr;
    a_ = b_ = c_ = nullptr;
  }
  cublasLtHandle_t handle_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
};

std::vector<Shape> parseShapes(const std::string &text) {
  std::vector<Shape> shapes;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    std::string item =
        text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    Shape s{};
    if (std::sscanf(item.c_str(), "%lldx%lldx%lld", &s.m, &s.n, &s.k) != 3 || s.m <= 0 ||
        s.n <= 0 || s.k <= 0 || s.n % 8 || s.k % 8)
      throw std::invalid_argument("bad shape '" + item +
                                  "': want MxNxK, N and K multiples of 8 (16-byte rows)");
    shapes.push_back(s);
    if (end == std::string::npos)
      break;
    start = end + 1;
  }
  return shapes;
}

int run(int argc, char **argv) {
  bool checkOnly = false;
  int repeat = 30;
  std::string shapesText = "8192x8192x8192,8192x8192x4096,4096x8192x4096,16384x8192x4096,"
                           "8192x28672x4096,2048x8192x8192,3000x5000x4608";
  const char *csvPath = nullptr, *cubinPath = nullptr;
  std::string configsText;                       // empty: all
  int device = 0, twinMode = 0, twinDevice = -1; // -1: the twin on `device`
  int ctas = 0;
  bool balance = false;
  Regime regime;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char * {
      if (i + 1 >= argc)
        throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    // The value as an integer of at least `least`.
    auto integer = [&](int least) {
      const std::string text = value();
      const std::optional<std::int64_t> number = mkc::parseBoundedInt(text, least, INT_MAX);
      if (!number)
        throw std::invalid_argument(arg + ": '" + text + "' is not an integer of at least " +
                                    std::to_string(least));
      return static_cast<int>(*number);
    };
    if (arg == "--check")
      checkOnly = true;
    else if (arg == "--shapes")
      shapesText = value();
    else if (arg == "--repeat")
      repeat = integer(1);
    else if (arg == "--warmup-ms")
      regime.warmupMs = integer(0);
    else if (arg == "--cooldown-ms")
      regime.cooldownMs = integer(0);
    else if (arg == "--sms")
      ctas = integer(1);
    else if (arg == "--balanced-grid")
      balance = true;
    else if (arg == "--csv")
      csvPath = value();
    else if (arg == "--cubin")
      cubinPath = value();
    else if (arg == "--configs")
      configsText = value();
    else if (arg == "--twin")
      twinMode = integer(0);
    else if (arg == "--twin-device")
      twinDevice = integer(0);
    else if (arg == "--device")
      device = integer(0);
    else
      throw std::invalid_argument("unknown argument " + arg);
  }
  const std::vector<Shape> shapes = parseShapes(shapesText);
  if (twinMode > 6)
    throw std::invalid_argument("--twin: a mode from 0 to 6");
  // The twin holds the product in modes 0, 1 and 6; the second half of the rows is added in 0,
  // 2, 3 and 5.
  const bool copyEngine = twinMode == 6;
  const bool twinChecked = twinMode <= 1 || copyEngine;
  const bool twinAdds = twinMode != 1 && twinMode != 4 && !copyEngine;
  std::vector<std::string> configNames; // empty: all
  for (size_t start = 0; start < configsText.size();) {
    const size_t end = std::min(configsText.find(',', start), configsText.size());
    configNames.push_back(configsText.substr(start, end - start));
    if (std::none_of(std::begin(kConfigs), std::end(kConfigs),
                     [&](const Config &c) { return configNames.back() == c.kernel; }))
      throw std::invalid_argument("no engine configuration '" + configNames.back() + "'");
    start = end + 1;
  }
  const auto selected = [&](const char *kernel) {
    return configNames.empty() ||
           std::find(configNames.begin(), configNames.end(), kernel) != configNames.end();
  };

  const Driver &driver = Driver::get();
  if (!driver.available()) {
    std::printf("SKIP: no CUDA driver: %s\n", driver.unavailableReason().c_str());
    return 0;
  }
  mkc::cuda::PrimaryContext context(driver, device);
  int sms = 0;
  CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, context.device()));
  if (ctas > 0)
    sms = std::min(sms, ctas);
  const Module engine("gemm_engine.cu", cubinPath), reference("reference.cu");
  const std::unique_ptr<PeerDevice> peer =
      twinDevice >= 0 && twinDevice != device ? std::make_unique<PeerDevice>(twinDevice) : nullptr;
  // Mode 6's band copies, beside the kernels (which run on the legacy stream).
  const Stream copies;
  Lt lt;
  Buffer workspace(Lt::kWorkspace);
  std::FILE *csv = csvPath ? std::fopen(csvPath, "w") : nullptr;
  if (csv)
    std::fprintf(csv, "M,N,K,impl,ms,tflops,ratio_vs_cublaslt\n");

  int failures = 0;
  std::vector<double> bestRatios;
  for (const Shape &s : shapes) {
    const size_t aCount = s.m * s.k, bCount = s.k * s.n, cCount = s.m * s.n;
    Buffer a(aCount * 2), b(bCount * 2), bt(bCount * 2), c(cCount * 2), want(cCount * 4), stats(32);
    launch(reference.function("fill_bf16"), 1024, 256, 0, a.pointer, s.m, s.k, 0ll, 0ll, s.k,
           0x1234ull + s.m);
    launch(reference.function("fill_bf16"), 1024, 256, 0, b.pointer, s.k, s.n, 0ll, 0ll, s.n,
           0x5678ull + s.n);
    launch(engine.function("transpose_16"), 1024, 256, 0, b.pointer, bt.pointer, s.k, s.n);
    {
      int m = int(s.m), n = int(s.n), k = int(s.k);
      void *params[] = {&a.pointer, &b.pointer, &want.pointer, &m, &n, &k};
      CU(cuLaunchKernel(reference.function("gemm_f32"), unsigned((s.n + 63) / 64),
                        unsigned((s.m + 63) / 64), 1, 256, 1, 1, 0, nullptr, params, nullptr));
    }
    CU(cuCtxSynchronize());
    // cuBLASLt first, then each engine configuration whose result is right.
    std::vector<std::string> names = {"cuBLASLt"};
    std::vector<std::function<void()>> runs;
    // The _twin configurations' second tensor, its mk_tensor_ref, mode 6's count of tiles
    // stored per band of tile rows and of its launches, and the band flags its copy stream
    // writes next to the twin after each copy (where a copy-engine all-reduce would tell the
    // peer that a band arrived).
    std::unique_ptr<Buffer> twin, twinRef, progress, arrived;
    const auto launches = std::make_shared<std::uint32_t>(0);
    // Mode 6: the host's time enqueueing the copy stream's operations, over all launches.
    const auto enqueueSeconds = std::make_shared<double>(0);
    const int tilesM = int(s.m / 128), bands = (tilesM + kBandRows - 1) / kBandRows;
    if (!checkOnly) {
      lt.prepare(s);
      runs.push_back([&] { lt.run(a.pointer, b.pointer, c.pointer, workspace.pointer); });
    }
    // Elements of `out` off the reference, and the largest error.
    const auto compare = [&](CUdeviceptr out) {
      CU(cuMemsetD8(stats.pointer, 0, 32));
      CUdeviceptr bad = stats.pointer, first = stats.pointer + 8, maxBits = stats.pointer + 16;
      long long count = static_cast<long long>(cCount);
      float atol = 0.02f, rtol = 1.0f / 64;
      launch(reference.function("compare_bf16"), 1024, 256, 0, out, want.pointer, count, atol, rtol,
             bad, first, maxBits);
      unsigned long long host[3];
      CU(cuMemcpyDtoH(host, stats.pointer, sizeof host));
      float maxError;
      const unsigned bits = unsigned(host[2]);
      std::memcpy(&maxError, &bits, sizeof maxError);
      return std::pair(host[0], maxError);
    };
    for (const Config &config : kConfigs) {
      if (!selected(config.kernel))
        continue;
      if (config.twin && (s.m % (128 * config.cluster) || s.n % config.bn)) {
        std::printf("skipped %s %lldx%lldx%lld (not whole tiles)\n", config.kernel, s.m, s.n, s.k);
        continue;
      }
      // Modes 5 and 6 write C through the consumers' TMA, in the configuration's _tma kernel.
      const std::string kernel =
          std::string(config.kernel) + (config.twin && twinMode >= 5 ? "_tma" : "");
      const CUfunction f = engine.function(kernel.c_str());
      const int smem = engine.constant(std::string(config.kernel) + "_smem");
      CU(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem));
      const mk_tensor_map aMap = map2d(a.pointer, s.k, s.m, 64, 128);
      const mk_tensor_map bMap =
          config.bKMajor ? map2d(bt.pointer, s.k, s.n, 64, unsigned(config.bn / config.cluster))
                         : map2d(b.pointer, s.n, s.k, 64, 64);
      const mk_tensor_map cMap = map2d(c.pointer, s.n, s.m, 64, 128);
      const int m = int(s.m), n = int(s.n), k = int(s.k);
      const unsigned fullGrid = persistentGrid(f, sms, smem, config.cluster);
      std::vector<unsigned> grids = {fullGrid};
      // gemm_engine.cu's tiles: rows rounded up to the cluster.
      const long long tiles = (s.m + 128 * config.cluster - 1) / (128 * config.cluster) *
                              config.cluster * ((s.n + config.bn - 1) / config.bn);
      if (const unsigned fewer = balancedGrid(tiles, fullGrid, config.cluster);
          balance && fewer < fullGrid)
        grids.push_back(fewer);
      for (const unsigned grid : grids) {
        if (config.twin && !twin) {
          twin = std::make_unique<Buffer>(cCount * 2, peer ? peer->context() : nullptr);
          twinRef = std::make_unique<Buffer>(sizeof(mk_tensor_ref));
          progress = std::make_unique<Buffer>(4 * bands);
          CU(cuMemsetD8(progress->pointer, 0, 4 * bands));
          arrived = std::make_unique<Buffer>(4 * bands, peer ? peer->context() : nullptr);
          CU(cuMemsetD8(arrived->pointer, 0, 4 * bands));
          mk_tensor_ref ref{};
          ref.local = reinterpret_cast<void *>(c.pointer);
          ref.peer[1] = reinterpret_cast<void *>(twin->pointer);
          CU(cuMemcpyHtoD(twinRef->pointer, &ref, sizeof ref));
        }
        const CUdeviceptr ref = config.twin ? twinRef->pointer : 0;
        const CUdeviceptr flags = config.twin ? progress->pointer : 0;
        const CUdeviceptr arrivedFlags = config.twin ? arrived->pointer : 0;
        const CUdeviceptr from = c.pointer, to = config.twin ? twin->pointer : 0;
        const CUstream copyStream = copies.stream;
        const auto go = [=, &driver, &copies] {
          if (!config.twin) {
            launch(f, grid, MK_CTA_THREADS, smem, aMap, bMap, cMap, m, n, k);
            return;
          }
          launch(f, grid, MK_CTA_THREADS, smem, aMap, bMap, cMap, m, n, k, ref, twinMode, flags);
          if (!copyEngine)
            return;
          // Each band once the kernel has stored its tiles (128 x 256 each), by a copy engine.
          ++*launches;
          const auto enqueueStart = std::chrono::steady_clock::now();
          for (int band = 0; band < bands; ++band) {
            const int rows = std::min(kBandRows, tilesM - kBandRows * band);
            std::vector<CUstreamBatchMemOpParams> wait = {mkc::cuda::waitValueAtLeast(
                flags + 4 * band, std::uint32_t(rows * (n / config.bn)) * *launches)};
            mkc::cuda::batchMemOps(driver, copyStream, wait);
            const size_t rowBytes = size_t(128) * n * 2;
            const size_t offset = size_t(band) * kBandRows * rowBytes;
            const size_t bytes = size_t(rows) * rowBytes;
            CU(cuMemcpyDtoDAsync(to + offset, from + offset, bytes, copyStream));
            std::vector<CUstreamBatchMemOpParams> write = {
                mkc::cuda::writeValue(arrivedFlags + 4 * band, *launches)};
            mkc::cuda::batchMemOps(driver, copyStream, write);
          }
          // The run ends with the last band's copy, which starts when the kernel ends.
          copies.join();
          *enqueueSeconds +=
              std::chrono::duration<double>(std::chrono::steady_clock::now() - enqueueStart)
                  .count();
        };
        // NaN: unwritten elements fail. The _twin configurations may add the second half of the
        // rows: to zeros there.
        const size_t poisoned = config.twin && twinAdds ? cCount / 2 : cCount;
        for (CUdeviceptr out : {c.pointer, config.twin && twinChecked ? twin->pointer : 0}) {
          if (!out)
            continue;
          CU(cuMemsetD8(out, 0xff, poisoned * 2));
          CU(cuMemsetD8(out + poisoned * 2, 0, (cCount - poisoned) * 2));
        }
        go();
        CU(cuCtxSynchronize());
        auto [off, maxError] = compare(c.pointer);
        if (config.twin && twinChecked) {
          const auto [twinOff, twinError] = compare(twin->pointer);
          off += twinOff;
          maxError = std::max(maxError, twinError);
        }
        // Mode 6: each band's flag, written by the copy stream after its copy.
        long unwrittenBands = 0;
        if (config.twin && copyEngine) {
          std::vector<std::uint32_t> written(bands);
          CU(cuMemcpyDtoH(written.data(), arrived->pointer, 4 * written.size()));
          unwrittenBands = std::count_if(written.begin(), written.end(),
                                         [&](std::uint32_t flag) { return flag != *launches; });
          if (unwrittenBands)
            std::printf("%ld of %d band flags next to the twin not written after their copies\n",
                        unwrittenBands, bands);
        }
        const bool ok = off == 0 && unwrittenBands == 0;
        failures += !ok;
        std::printf("%s %s %lldx%lldx%lld on %u CTAs: %llu of %zu elements off (max error %.4g)\n",
                    ok ? "PASS" : "FAIL", config.kernel, s.m, s.n, s.k, grid, off,
                    config.twin && twinChecked ? 2 * cCount : cCount, maxError);
        if (ok) {
          names.push_back(config.kernel +
                          (grid == fullGrid ? std::string() : "@" + std::to_string(grid)));
          runs.push_back(go);
        }
      }
    }
    if (checkOnly)
      continue;
    const std::vector<double> ms = medians(repeat, regime, runs);
    CU(cuCtxSynchronize()); // mode 6's copies, before their buffers go
    const double flops = 2.0 * s.m * s.n * s.k;
    std::printf("%6lld x %6lld x %6lld  %-24s%8.3f ms  %6.1f TFLOP/s  (%s)\n", s.m, s.n, s.k,
                names[0].c_str(), ms[0], flops / ms[0] / 1e9, lt.describe().c_str());
    double best = 0;
    for (size_t i = 0; i < ms.size(); ++i) {
      const double ratio = ms[0] / ms[i];
      if (i > 0) {
        best = std::max(best, ratio);
        std::printf("%6lld x %6lld x %6lld  %-24s%8.3f ms  %6.1f TFLOP/s  %.3f of cuBLASLt\n", s.m,
                    s.n, s.k, names[i].c_str(), ms[i], flops / ms[i] / 1e9, ratio);
      }
      if (csv)
        std::fprintf(csv, "%lld,%lld,%lld,%s,%.5f,%.1f,%.4f\n", s.m, s.n, s.k,
                     i ? names[i].c_str() : "cublaslt", ms[i], flops / ms[i] / 1e9, ratio);
    }
    bestRatios.push_back(best);
    if (copyEngine && *launches)
      std::printf("copy engine: %d bands of up to %d tile rows, %.1f us a launch to enqueue "
                  "their waits, copies and flags (host)\n",
                  bands, kBandRows, *enqueueSeconds / *launches * 1e6);
  }
  if (!bestRatios.empty()) {
    double logSum = 0;
    for (double r : bestRatios)
      logSum += std::log(r);
    std::printf("best engine configuration vs cuBLASLt: geometric mean %.3f, min %.3f\n",
                std::exp(logSum / bestRatios.size()),
                *std::min_element(bestRatios.begin(), bestRatios.end()));
  }
  if (csv)
    std::fclose(csv);
  return failures ? 1 : 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "mkc-gemm-bench: %s\n", e.what());
    return 1;
  }
}
