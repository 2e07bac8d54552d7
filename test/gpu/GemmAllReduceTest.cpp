// GEMM+AllReduce run for real: one rank of a job on one node (start it with mkc-launch, torchrun,
// srun or mpirun; one GPU per rank). Rank r holds A_r = A[:, K_r] and B_r = B[K_r, :] (bf16,
// random), every rank ends with C = A B: lib/gemm_allreduce.mlir compiled through the runtime's
// JIT and launched on a stream. Checked on the GPU against an f32 GEMM of the whole A and B,
// which every rank regenerates (test/device/kernels/reference.cu), with C poisoned (NaN) before:
//   - once for each shape, tile multiples and not;
//   - 1,000 launches back to back on one stream, alternating two B, no host synchronisation in
//     between, C poisoned every 100 launches and copied aside twice in every 100;
//   - a CUDA graph of launches, captured once and replayed, then a plain launch after it;
//   - wrong arguments, programs that do not compile and ranks that disagree: errors, no hang.
//
// MKC_TEST_COMPILER_OPTIONS compiles the op under test with mkc's flags ("NAME=VALUE;...").
//
// Prints PASS/FAIL lines and exits non-zero if a check failed. Without a driver or with fewer
// GPUs than ranks it prints "SKIP: <why>" and exits 77; with MKC_TEST_SHARED_GPU=1 it runs only
// where there are fewer GPUs than ranks, which then take turns on them (MKC_SHARE_GPU). Ranks
// sharing a GPU cannot have copy engines make the all-reduce's copies: that variant checks that
// the runtime refuses it.

#include "TestKernels.h"

#include "mk/runtime/Runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

using namespace mkc;

namespace {

constexpr int kSkipped = 77;
constexpr std::uint16_t kPoison = 0xffff; // a bf16 NaN

int failures = 0;

void check(bool ok, const std::string &what) {
  std::printf("%s: %s\n", ok ? "PASS" : "FAIL", what.c_str());
  std::fflush(stdout);
  failures += !ok;
}

/// Whether `call` throws an error whose message contains `expected`.
void checkThrows(const std::function<void()> &call, const std::string &expected,
                 const std::string &what) {
  try {
    call();
  } catch (const std::exception &error) {
    bool ok = std::string(error.what()).find(expected) != std::string::npos;
    check(ok, what + (ok ? "" : std::string(": the error was: ") + error.what()));
    return;
  }
  check(false, what + ": no error");
}

/// The reference kernels, loaded into the runtime's context.
class References {
public:
  explicit References(const cuda::Driver &cu) : cu_(cu) {
    nvrtc::Result result = test::compileKernels("reference.cu");
    if (!result.ok)
      throw std::runtime_error("reference.cu does not compile:\n" + result.log);
    MK_CU_CHECK(cu_, cuModuleLoadData(&module_, result.cubin.data()));
    for (auto [function, name] : {std::pair{&fill_, "fill_bf16"},
                                  {&gemm_, "gemm_f32"},
                                  {&sumSquares_, "sum_squares"},
                                  {&compare_, "compare_bf16"}})
      MK_CU_CHECK(cu_, cuModuleGetFunction(function, module_, name));
  }
  ~References() { cu_.cuModuleUnload(module_); }

  /// Rows [row0, row0 + rows) and columns [col0, col0 + cols) of the random matrix `seed` with
  /// `fullCols` columns, into `out`.
  void fill(CUdeviceptr out, long long rows, long long cols, long long row0, long long col0,
            long long fullCols, unsigned long long seed, CUstream stream) const {
    void *args[] = {&out, &rows, &cols, &row0, &col0, &fullCols, &seed};
    MK_CU_CHECK(cu_, cuLaunchKernel(fill_, 1024, 1, 1, 256, 1, 1, 0, stream, args, nullptr));
  }

  /// C (f32) = A B.
  void gemm(CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, int m, int n, int k,
            CUstream stream) const {
    void *args[] = {&a, &b, &c, &m, &n, &k};
    MK_CU_CHECK(cu_, cuLaunchKernel(gemm_, (n + 63) / 64, (m + 63) / 64, 1, 256, 1, 1, 0, stream,
                                    args, nullptr));
  }

  struct Comparison {
    unsigned long long bad = 0, firstBad = 0;
    float maxError = 0, rms = 0;
  };

  /// `got` (bf16) against `want` (f32): |got - want| <= 2^-6 rms(want) + 2^-7 |want| for all.
  /// C is the sum of bf16-rounded partial products, so errors of a few bf16 ulps are expected;
  /// a wrong or missing tile is off by about rms(want).
  Comparison compare(CUdeviceptr got, CUdeviceptr want, long long n, CUstream stream) const {
    struct Counters {
      double sumSquares;
      unsigned long long bad, firstBad;
      unsigned maxErrorBits;
    } counters{0, 0, ~0ull, 0};
    CUdeviceptr device;
    MK_CU_CHECK(cu_, cuMemAlloc(&device, sizeof counters));
    MK_CU_CHECK(cu_, cuMemcpyHtoDAsync(device, &counters, sizeof counters, stream));
    CUdeviceptr sumSquares = device + offsetof(Counters, sumSquares);
    void *sumArgs[] = {&want, &n, &sumSquares};
    MK_CU_CHECK(cu_,
                cuLaunchKernel(sumSquares_, 1024, 1, 1, 256, 1, 1, 0, stream, sumArgs, nullptr));
    MK_CU_CHECK(cu_, cuMemcpyDtoHAsync(&counters, device, sizeof counters, stream));
    MK_CU_CHECK(cu_, cuStreamSynchronize(stream));
    Comparison result;
    result.rms = static_cast<float>(std::sqrt(counters.sumSquares / static_cast<double>(n)));
    float atol = result.rms / 64, rtol = 1.0f / 128;
    CUdeviceptr bad = device + offsetof(Counters, bad),
                firstBad = device + offsetof(Counters, firstBad),
                maxError = device + offsetof(Counters, maxErrorBits);
    void *compareArgs[] = {&got, &want, &n, &atol, &rtol, &bad, &firstBad, &maxError};
    MK_CU_CHECK(cu_,
                cuLaunchKernel(compare_, 1024, 1, 1, 256, 1, 1, 0, stream, compareArgs, nullptr));
    MK_CU_CHECK(cu_, cuMemcpyDtoHAsync(&counters, device, sizeof counters, stream));
    MK_CU_CHECK(cu_, cuStreamSynchronize(stream));
    MK_CU_CHECK(cu_, cuMemFree(device));
    result.bad = counters.bad;
    result.firstBad = counters.firstBad;
    std::memcpy(&result.maxError, &counters.maxErrorBits, sizeof result.maxError);
    return result;
  }

private:
  const cuda::Driver &cu_;
  CUmodule module_ = nullptr;
  CUfunction fill_ = nullptr, gemm_ = nullptr, sumSquares_ = nullptr, compare_ = nullptr;
};

/// Device memory of this rank, freed with the object.
class DeviceBuffer {
public:
  DeviceBuffer(const cuda::Driver &cu, std::size_t bytes) : cu_(cu) {
    MK_CU_CHECK(cu_, cuMemAlloc(&address_, bytes));
  }
  ~DeviceBuffer() { cu_.cuMemFree(address_); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  CUdeviceptr address() const { return address_; }
  void *pointer() const { return reinterpret_cast<void *>(address_); }

private:
  const cuda::Driver &cu_;
  CUdeviceptr address_ = 0;
};

struct Shape {
  long long m, n, k;
  std::string text() const { return fmt::format("M={} N={} K={}", m, n, k); }
  std::vector<std::string> bindings() const {
    return {fmt::format("M={}", m), fmt::format("N={}", n), fmt::format("K={}", k)};
  }
};

/// The compiler options the op under test is compiled with: MKC_TEST_COMPILER_OPTIONS, mkc's
/// flags as "NAME=VALUE;..." ("all-reduce-copy-engine=1"), or none.
std::string compilerOptions() {
  const char *options = std::getenv("MKC_TEST_COMPILER_OPTIONS");
  return options ? options : "";
}

/// One shape's op, inputs (this rank's shards of A and of two B) and references (C for each B).
class Problem {
public:
  Problem(Runtime &runtime, const TileProgram &program, const References &references,
          const Shape &shape, CUstream stream)
      : cu_(cuda::Driver::get()), runtime_(runtime), references_(references), shape_(shape),
        stream_(stream), op_(runtime.compile(program, shape.bindings(), compilerOptions())),
        c_(runtime.allocate(static_cast<std::size_t>(shape.m * shape.n) * 2)) {
    const long long shardK = shape.k / runtime.worldSize(), k0 = runtime.rank() * shardK;
    a_ = std::make_unique<DeviceBuffer>(cu_, shape.m * shardK * 2);
    references.fill(a_->address(), shape.m, shardK, 0, k0, shape.k, kSeedA, stream);
    for (int i = 0; i < 2; ++i) {
      b_[i] = std::make_unique<DeviceBuffer>(cu_, shardK * shape.n * 2);
      references.fill(b_[i]->address(), shardK, shape.n, k0, 0, shape.n, kSeedB + i, stream);
    }
    // The whole A and B, for the references.
    DeviceBuffer a(cu_, shape.m * shape.k * 2), b(cu_, shape.k * shape.n * 2);
    references.fill(a.address(), shape.m, shape.k, 0, 0, shape.k, kSeedA, stream);
    for (int i = 0; i < 2; ++i) {
      want_[i] = std::make_unique<DeviceBuffer>(cu_, shape.m * shape.n * 4);
      references.fill(b.address(), shape.k, shape.n, 0, 0, shape.n, kSeedB + i, stream);
      references.gemm(a.address(), b.address(), want_[i]->address(), static_cast<int>(shape.m),
                      static_cast<int>(shape.n), static_cast<int>(shape.k), stream);
    }
    MK_CU_CHECK(cu_, cuStreamSynchronize(stream));
  }

  const FusedOp &op() const { return op_; }
  void *c() const { return c_.local; }
  std::size_t cBytes() const { return c_.bytes; }
  void *a() const { return a_->pointer(); }
  void *b() const { return b_[0]->pointer(); }

  void poison(CUdeviceptr c) const {
    MK_CU_CHECK(cu_, cuMemsetD16Async(c, kPoison, shape_.m * shape_.n, stream_));
  }
  void poison() const { poison(reinterpret_cast<CUdeviceptr>(c_.local)); }

  /// Enqueues C = A B_which.
  void launch(int which) const {
    void *arguments[] = {a_->pointer(), b_[which]->pointer(), c_.local};
    op_.launch(stream_, arguments);
  }

  /// Checks `got` (C, or a copy of it) against A B_which.
  void expect(CUdeviceptr got, int which, const std::string &what) const {
    References::Comparison result =
        references_.compare(got, want_[which]->address(), shape_.m * shape_.n, stream_);
    check(result.bad == 0,
          fmt::format("rank {}: {}, {}: {} of {} elements off (first at row {} col {}), max "
                      "error {:.4g}, rms {:.4g}",
                      runtime_.rank(), shape_.text(), what, result.bad, shape_.m * shape_.n,
                      result.bad ? result.firstBad / shape_.n : 0,
                      result.bad ? result.firstBad % shape_.n : 0, result.maxError, result.rms));
  }
  void expect(int which, const std::string &what) const {
    expect(reinterpret_cast<CUdeviceptr>(c_.local), which, what);
  }

private:
  static constexpr unsigned long long kSeedA = 1, kSeedB = 2;

  const cuda::Driver &cu_;
  Runtime &runtime_;
  const References &references_;
  Shape shape_;
  CUstream stream_;
  FusedOp op_;
  SymmetricBuffer c_;
  std::unique_ptr<DeviceBuffer> a_, b_[2], want_[2];
};

void testOnce(const Problem &problem) {
  problem.poison();
  problem.launch(0);
  problem.expect(0, "one launch");
}

void testBackToBack(const Problem &problem, const cuda::Driver &cu, CUstream stream) {
  constexpr int kLaunches = 1000, kEvery = 100;
  // Copies of C after launch i (i % 100 == 0, with B_0) and i % 100 == 51 (B_1).
  std::vector<std::unique_ptr<DeviceBuffer>> copies;
  std::vector<int> copiedAfter;
  CUevent start, stop;
  MK_CU_CHECK(cu, cuEventCreate(&start, CU_EVENT_DEFAULT));
  MK_CU_CHECK(cu, cuEventCreate(&stop, CU_EVENT_DEFAULT));
  MK_CU_CHECK(cu, cuEventRecord(start, stream));
  for (int i = 0; i < kLaunches; ++i) {
    if (i % kEvery == 0)
      problem.poison();
    problem.launch(i % 2);
    if (i % kEvery == 0 || i % kEvery == 51) {
      copies.push_back(std::make_unique<DeviceBuffer>(cu, problem.cBytes()));
      MK_CU_CHECK(cu, cuMemcpyDtoDAsync(copies.back()->address(),
                                        reinterpret_cast<CUdeviceptr>(problem.c()),
                                        problem.cBytes(), stream));
      copiedAfter.push_back(i);
    }
  }
  MK_CU_CHECK(cu, cuEventRecord(stop, stream));
  MK_CU_CHECK(cu, cuStreamSynchronize(stream));
  float milliseconds = 0;
  MK_CU_CHECK(cu, cuEventElapsedTime(&milliseconds, start, stop));
  std::printf("INFO: %d launches back to back in %.1f ms\n", kLaunches, milliseconds);
  for (std::size_t j = 0; j < copies.size(); ++j)
    problem.expect(copies[j]->address(), copiedAfter[j] % 2,
                   fmt::format("after launch {} of {} back to back", copiedAfter[j], kLaunches));
  problem.expect(1, "after the last back-to-back launch");
  cu.cuEventDestroy(start);
  cu.cuEventDestroy(stop);
}

void testGraph(const Problem &problem, const cuda::Driver &cu, CUstream stream) {
  DeviceBuffer middle(cu, problem.cBytes());
  MK_CU_CHECK(cu, cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  problem.poison();
  problem.launch(0);
  problem.launch(1);
  MK_CU_CHECK(cu, cuMemcpyDtoDAsync(middle.address(), reinterpret_cast<CUdeviceptr>(problem.c()),
                                    problem.cBytes(), stream));
  problem.poison();
  problem.launch(0);
  CUgraph graph;
  MK_CU_CHECK(cu, cuStreamEndCapture(stream, &graph));
  CUgraphExec exec;
  MK_CU_CHECK(cu, cuGraphInstantiateWithFlags(&exec, graph, 0));
  constexpr int kReplays = 5;
  for (int i = 0; i < kReplays; ++i)
    MK_CU_CHECK(cu, cuGraphLaunch(exec, stream));
  MK_CU_CHECK(cu, cuStreamSynchronize(stream));
  problem.expect(middle.address(), 1,
                 fmt::format("graph of 3 launches, replayed {} times: "
                             "the second launch",
                             kReplays));
  problem.expect(0, fmt::format("graph replayed {} times: the last launch", kReplays));
  problem.poison();
  problem.launch(1);
  problem.expect(1, "a plain launch after the graph's replays");
  cu.cuGraphExecDestroy(exec);
  cu.cuGraphDestroy(graph);
}

void testErrors(Runtime &runtime, const Problem &problem, const TileProgram &program,
                const cuda::Driver &cu, CUstream stream) {
  const FusedOp &op = problem.op();
  void *c = problem.c();
  checkThrows(
      [&] {
        void *args[] = {problem.a(), c};
        op.launch(stream, args);
      },
      "takes 3 arguments, not 2", "a launch with too few arguments");
  checkThrows(
      [&] {
        void *args[] = {problem.a(), nullptr, c};
        op.launch(stream, args);
      },
      "argument 1 of gemm_allreduce (bf16[", "a null argument");
  DeviceBuffer plain(cu, problem.cBytes()), small(cu, 256);
  checkThrows(
      [&] {
        void *args[] = {problem.a(), problem.b(), plain.pointer()};
        op.launch(stream, args);
      },
      "must lie in symmetric memory", "an output outside the symmetric heap");
  checkThrows(
      [&] {
        void *args[] = {small.pointer(), problem.b(), c};
        op.launch(stream, args);
      },
      "overruns its allocation", "an input smaller than its shard");
  checkThrows(
      [&] {
        int onHost = 0;
        void *args[] = {&onHost, problem.b(), c};
        op.launch(stream, args);
      },
      "is not memory the CUDA driver knows", "host memory as an argument");
  // Collective failures reach every rank, named.
  checkThrows(
      [&] {
        runtime.compile(program, {"M=256", "N=256", "K=0"});
      },
      "gemm_allreduce.mlir", "a shape the program refuses, on every rank");
  checkThrows(
      [&] {
        std::string k = runtime.rank() == 0 ? "K=512" : "K=1024";
        runtime.compile(program, {"M=256", "N=256", k});
      },
      "asks for shapes", "ranks that compile different shapes");
  checkThrows(
      [&] {
        runtime.compile(program, {"M=256", "N=256", "K=512"}, "gemm-stage=3");
      },
      "unknown compiler option 'gemm-stage'", "a misspelt compiler option, on every rank");
  checkThrows(
      [&] {
        runtime.compile(program, {"M=256", "N=256", "K=512"},
                        runtime.rank() == 0 ? "gemm-stages=3" : "gemm-stages=4");
      },
      "asks for the compiler options", "ranks that compile with different options");
  checkThrows([&] { runtime.allocate(4096 + runtime.rank()); }, "asks for bytes",
              "ranks that allocate different sizes");
}

} // namespace

int main() {
  const cuda::Driver &cu = cuda::Driver::get();
  if (!cu.available()) {
    std::printf("SKIP: no usable CUDA driver: %s\n", cu.unavailableReason().c_str());
    return kSkipped;
  }
  try {
    LaunchEnvironment launch = detectLaunchEnvironment();
    int devices = 0;
    MK_CU_CHECK(cu, cuDeviceGetCount(&devices));
    // The variant for machines with too few GPUs: the ranks take turns on them.
    const char *sharedVariant = std::getenv("MKC_TEST_SHARED_GPU");
    bool shared = sharedVariant && std::string_view(sharedVariant) == "1";
    if (launch.worldSize < 2 || devices == 0 || (devices < launch.worldSize) != shared) {
      std::printf("SKIP: GEMM+AllReduce needs 2 or more ranks with a GPU each%s; %d rank(s), %d "
                  "GPU(s)\n",
                  shared ? ", shared only where there are fewer GPUs" : "", launch.worldSize,
                  devices);
      return kSkipped;
    }
    RuntimeOptions options = RuntimeOptions::fromEnvironment();
    options.shareGpu = shared; // MKC_DEVICE, mkc-launch's rank index, modulo the GPUs
    options.symmetricBytes = std::max<std::size_t>(options.symmetricBytes, std::size_t(2) << 30);
    Runtime runtime(launch, options);
    const char *lib = std::getenv("MKC_LIB_DIR");
    TileProgram program =
        TileProgram::fromFile(std::string(lib ? lib : MKC_LIB_DIR) + "/gemm_allreduce.mlir");
    if (shared && compilerOptions().find("all-reduce-copy-engine=1") != std::string::npos) {
      checkThrows(
          [&] {
            runtime.compile(program, Shape{257, 304, 512}.bindings(), compilerOptions());
          },
          "is also rank", "copy engines for ranks that share a GPU, refused on every rank");
      runtime.barrier();
      std::printf("%s: %d check(s) failed\n", failures ? "FAIL" : "PASS", failures);
      return failures ? 1 : 0;
    }
    cuda::ContextScope scope(cu, runtime.context());
    CUstream stream;
    MK_CU_CHECK(cu, cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    References references(cu);

    for (Shape shape : {Shape{8192, 8192, 8192}, Shape{257, 304, 512}}) {
      Problem problem(runtime, program, references, shape, stream);
      testOnce(problem);
    }
    Problem odd(runtime, program, references, Shape{3000, 5000, 4608}, stream);
    testOnce(odd);
    testBackToBack(odd, cu, stream);
    testGraph(odd, cu, stream);
    testErrors(runtime, odd, program, cu, stream);
    MK_CU_CHECK(cu, cuStreamSynchronize(stream));
    cu.cuStreamDestroy(stream);
    runtime.barrier();
  } catch (const std::exception &error) {
    std::printf("FAIL: %s\n", error.what());
    return 1;
  }
  std::printf("%s: %d check(s) failed\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
