// The driver's wrappers while another thread captures a graph in global mode (PyTorch's
// default): the runtime's watcher thread retires launches queued before the capture, which the
// driver refuses (and which would end the capture) unless the thread is in relaxed mode
// (cuda::RelaxedCaptureScope). Both sides are checked, so that the test can fail.
//
// Without a driver (the CI machine) it prints "SKIP: <why>" and exits 0; ctest reports Skipped.

#include "../GpuChecks.h"

#include <optional>
#include <thread>
#include <tuple>

using mkc::test::expect;
using mkc::test::failures;

int main() {
  const mkc::cuda::Driver *driver = mkc::test::driverOrSkip();
  if (!driver)
    return 0;
  const mkc::cuda::Driver &cu = *driver;
  try {
    mkc::cuda::PrimaryContext context(cu);
    mkc::cuda::ContextScope scope(cu, context.context());
    CUstream eager = nullptr, captured = nullptr;
    MK_CU_CHECK(cu, cuStreamCreate(&eager, CU_STREAM_NON_BLOCKING));
    MK_CU_CHECK(cu, cuStreamCreate(&captured, CU_STREAM_NON_BLOCKING));
    mkc::cuda::EventQueue queue(cu);
    queue.record(eager);
    queue.record(eager);
    MK_CU_CHECK(cu, cuStreamSynchronize(eager));

    // Another thread's retire while this one captures: refused in the default mode, taken in
    // relaxed mode. Each capture ends before the next, so that a refused call's damage stays in
    // its own.
    const auto retireDuringCapture = [&](bool relaxed) {
      MK_CU_CHECK(cu, cuStreamBeginCapture(captured, CU_STREAM_CAPTURE_MODE_GLOBAL));
      std::size_t retired = 0;
      bool refused = false;
      std::thread watcher([&] {
        mkc::cuda::ContextScope watcherScope(cu, context.context());
        std::optional<mkc::cuda::RelaxedCaptureScope> mode;
        if (relaxed)
          mode.emplace(cu);
        try {
          retired = queue.retire();
        } catch (const mkc::cuda::Error &) {
          refused = true;
        }
      });
      watcher.join();
      CUgraph graph = nullptr;
      const CUresult ended = cu.cuStreamEndCapture(captured, &graph);
      if (graph)
        cu.cuGraphDestroy(graph);
      return std::tuple{retired, refused, ended};
    };
    const auto [retiredGlobal, refusedGlobal, endedGlobal] = retireDuringCapture(false);
    expect(refusedGlobal && retiredGlobal == 0 && queue.size() == 2,
           "a thread in global mode is refused cuEventQuery during another's capture");
    expect(endedGlobal != CUDA_SUCCESS, "and the refusal ends that capture");
    const auto [retiredRelaxed, refusedRelaxed, endedRelaxed] = retireDuringCapture(true);
    expect(!refusedRelaxed && retiredRelaxed == 2 && queue.size() == 0,
           "in a RelaxedCaptureScope it retires the launches queued before the capture");
    expect(endedRelaxed == CUDA_SUCCESS, "and the capture stays valid");
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    MK_CU_CHECK(cu, cuThreadExchangeStreamCaptureMode(&mode));
    expect(mode == CU_STREAM_CAPTURE_MODE_GLOBAL, "this thread's mode is global as it was");
    MK_CU_CHECK(cu, cuThreadExchangeStreamCaptureMode(&mode));
    MK_CU_CHECK(cu, cuStreamDestroy(captured));
    MK_CU_CHECK(cu, cuStreamDestroy(eager));
  } catch (const std::exception &error) {
    std::printf("FAIL %s\n", error.what());
    return 1;
  }
  std::printf("%s\n", failures ? "FAILED" : "ALL PASSED");
  return failures ? 1 : 0;
}
