//===- GpuChecks.h - checks of the runtime's plain GPU test programs -------*- C++ -*-===//
//
// The GPU tests that are plain programs (ctest's gpu label, skipped by "SKIP:"): a PASS or FAIL
// line per check, counted; the driver, or a SKIP line where there is none (the CI machine).
//
//===---------------------------------------------------------------------------------===//

#ifndef MKC_TEST_RUNTIME_GPU_CHECKS_H
#define MKC_TEST_RUNTIME_GPU_CHECKS_H

#include "mk/runtime/driver/CudaDriver.h"

#include <cstdio>

namespace mkc::test {

/// Checks failed so far.
inline int failures = 0;

inline void expect(bool ok, const char *what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what);
  failures += !ok;
}

/// The driver, with stdout line-buffered for the checks; or null, having printed the SKIP line,
/// where no driver can be used.
inline const cuda::Driver *driverOrSkip() {
  const cuda::Driver &cu = cuda::Driver::get();
  if (!cu.available()) {
    std::printf("SKIP: no usable CUDA driver: %s\n", cu.unavailableReason().c_str());
    return nullptr;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return &cu;
}

} // namespace mkc::test

#endif // MKC_TEST_RUNTIME_GPU_CHECKS_H
