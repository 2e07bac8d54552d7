//===- LaunchCost.cpp - what a fused op's launch costs the host, from C++ --------------===//
//
// mkc-launch-cost [--program FILE] [--shapes M=1,N=4096,K=4096] [--options OPTIONS]
//                 [--launches N] [--graph-steps N] [--replays N]
//
// One rank of a job (a process no launcher started is a job of one; under mkc-launch, torchrun,
// srun or mpirun, every rank runs it and prints its own figures): compiles --program (default
// lib/gemm_allreduce.mlir) for --shapes through the runtime, then
//   - launches it --launches (10,000) times with the same arguments, each FusedOp::launch timed
//     on the host clock, the stream synchronised outside the timing every 32 launches so that
//     the driver's queue never fills (a full queue blocks the launch that finds it full);
//   - captures --graph-steps (10) launches into a CUDA graph and replays it --replays (200)
//     times: the host time of cuGraphLaunch, and the GPU time per op of a replay and of the same
//     launches made eagerly, between CUDA events;
// and prints the medians (with the 10th and 90th percentiles of the host times). The inputs are
// a constant (the figures are the host's; no result is checked here: the GPU tests do that).
// Without a CUDA driver it prints "SKIP: <why>".
//
//===----------------------------------------------------------------------------------===//

#include "mk/runtime/Runtime.h"
#include "mk/runtime/driver/CudaDriver.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

using mkc::cuda::Driver;

namespace {

#define CU(call) MK_CU_CHECK(Driver::get(), call)

struct Options {
  std::string program = MKC_LIB_DIR "/gemm_allreduce.mlir";
  std::vector<std::string> shapes = {"M=1", "N=4096", "K=4096"};
  std::string compilerOptions;
  int launches = 10000;
  int graphSteps = 10;
  int replays = 200;
};

std::vector<std::string> splitCommas(std::string_view text) {
  std::vector<std::string> items;
  for (std::size_t begin = 0; begin <= text.size();) {
    std::size_t end = std::min(text.find(',', begin), text.size());
    if (end > begin)
      items.emplace_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return items;
}

Options parse(int argc, char **argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        throw std::invalid_argument(std::string(arg) + " needs a value");
      return argv[++i];
    };
    auto positive = [&]() {
      std::string text = value();
      char *end = nullptr;
      long number = std::strtol(text.c_str(), &end, 10);
      if (*end || number < 1 || number > 10'000'000)
        throw std::invalid_argument(fmt::format("{} takes a count from 1, not '{}'", arg, text));
      return static_cast<int>(number);
    };
    if (arg == "--program")
      options.program = value();
    else if (arg == "--shapes")
      options.shapes = splitCommas(value());
    else if (arg == "--options")
      options.compilerOptions = value();
    else if (arg == "--launches")
      options.launches = positive();
    else if (arg == "--graph-steps")
      options.graphSteps = positive();
    else if (arg == "--replays")
      options.replays = positive();
    else
      throw std::invalid_argument(fmt::format("unknown argument '{}'", arg));
  }
  return options;
}

/// The q-quantile of `samples` (sorted in place).
double quantile(std::vector<double> &samples, double q) {
  std::sort(samples.begin(), samples.end());
  return samples[static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1))];
}

double microseconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

/// GPU milliseconds between two events recorded around `enqueue` on `stream`.
template <typename Enqueue> float gpuMs(CUstream stream, Enqueue enqueue) {
  CUevent start, stop;
  CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  CU(cuEventRecord(start, stream));
  enqueue();
  CU(cuEventRecord(stop, stream));
  CU(cuEventSynchronize(stop));
  float ms = 0;
  CU(cuEventElapsedTime(&ms, start, stop));
  CU(cuEventDestroy(start));
  CU(cuEventDestroy(stop));
  return ms;
}

int run(const Options &options) {
  mkc::Runtime runtime;
  const Driver &cu = Driver::get();
  mkc::cuda::ContextScope scope(cu, runtime.context());
  mkc::FusedOp op = runtime.compileFile(options.program, options.shapes, options.compilerOptions);

  std::vector<mkc::SymmetricBuffer> symmetric;
  std::vector<CUdeviceptr> owned;
  std::vector<void *> arguments;
  for (const mkc::Argument &argument : op.arguments()) {
    void *pointer = nullptr;
    if (argument.symmetric) {
      pointer = symmetric.emplace_back(runtime.allocate(argument.bytes)).local;
    } else if (argument.bytes) {
      CU(cuMemAlloc(&owned.emplace_back(), argument.bytes));
      pointer = reinterpret_cast<void *>(owned.back());
    }
    // Bytes of 0x3c: finite and small in every element the ops take (0.0114 in bf16).
    if (argument.bytes)
      CU(cuMemsetD8(reinterpret_cast<CUdeviceptr>(pointer), 0x3c, argument.bytes));
    arguments.push_back(pointer);
  }
  CUstream stream;
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  auto launch = [&] { op.launch(stream, arguments); };

  for (int i = 0; i < 100; ++i)
    launch();
  CU(cuStreamSynchronize(stream));
  constexpr int kBetweenSyncs = 32;
  std::vector<double> host;
  host.reserve(options.launches);
  for (int i = 0; i < options.launches; ++i) {
    auto begin = std::chrono::steady_clock::now();
    launch();
    host.push_back(microseconds(std::chrono::steady_clock::now() - begin));
    if (i % kBetweenSyncs == kBetweenSyncs - 1)
      CU(cuStreamSynchronize(stream));
  }
  CU(cuStreamSynchronize(stream));
  runtime.check();

  // Eager and replayed, the same launches: GPU time per op.
  std::vector<double> eager, replayed, graphHost;
  for (int r = 0; r < 20; ++r)
    eager.push_back(gpuMs(stream,
                          [&] {
                            for (int s = 0; s < options.graphSteps; ++s)
                              launch();
                          }) *
                    1e3 / options.graphSteps);
  CUgraph graph;
  CUgraphExec exec;
  CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  for (int s = 0; s < options.graphSteps; ++s)
    launch();
  CU(cuStreamEndCapture(stream, &graph));
  CU(cuGraphInstantiate(&exec, graph, 0));
  for (int r = 0; r < 10; ++r)
    CU(cuGraphLaunch(exec, stream));
  CU(cuStreamSynchronize(stream));
  for (int r = 0; r < options.replays; ++r) {
    replayed.push_back(gpuMs(stream,
                             [&] {
                               auto begin = std::chrono::steady_clock::now();
                               CU(cuGraphLaunch(exec, stream));
                               graphHost.push_back(
                                   microseconds(std::chrono::steady_clock::now() - begin));
                             }) *
                       1e3 / options.graphSteps);
  }
  CU(cuStreamSynchronize(stream));
  runtime.check();
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(graph));
  CU(cuStreamDestroy(stream));
  for (CUdeviceptr buffer : owned)
    CU(cuMemFree(buffer));

  std::string what = fmt::format("{} [{}] rank {} of {}", op.name(), fmt::join(options.shapes, ","),
                                 runtime.rank(), runtime.worldSize());
  std::printf("%s: FusedOp::launch host time: median %.2f us (p10 %.2f, p90 %.2f) over %d "
              "launches\n",
              what.c_str(), quantile(host, 0.5), quantile(host, 0.1), quantile(host, 0.9),
              options.launches);
  std::printf("%s: graph of %d launches: cuGraphLaunch host time median %.2f us; GPU time per "
              "op %.2f us replayed, %.2f us eager\n",
              what.c_str(), options.graphSteps, quantile(graphHost, 0.5), quantile(replayed, 0.5),
              quantile(eager, 0.5));
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  try {
    Options options = parse(argc, argv);
    if (!Driver::get().available()) {
      std::printf("SKIP: no usable CUDA driver: %s\n", Driver::get().unavailableReason().c_str());
      return 0;
    }
    return run(options);
  } catch (const std::invalid_argument &error) {
    std::fprintf(stderr, "mkc-launch-cost: %s\n", error.what());
    return 2;
  } catch (const std::exception &error) {
    std::fprintf(stderr, "mkc-launch-cost: %s\n", error.what());
    return 1;
  }
}
