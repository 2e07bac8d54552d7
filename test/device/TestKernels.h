//===- TestKernels.h - the device library's test kernels, compiled by NVRTC -*- C++ -*-===//

#ifndef MK_TEST_DEVICE_TESTKERNELS_H
#define MK_TEST_DEVICE_TESTKERNELS_H

#include "mk/Target/Nvrtc.h"

#include <string_view>

namespace mkc::test {

/// The kernel sources of test/device/kernels, by file name: "matmul.cu", "tile.cu", "vector.cu",
/// "comm.cu", "reference.cu".
std::span<const nvrtc::Header> kernelSources();

/// Compiles one of them for sm_90a against the embedded device headers, with the ptxas report.
nvrtc::Result compileKernels(std::string_view file);

} // namespace mkc::test

#endif // MK_TEST_DEVICE_TESTKERNELS_H
