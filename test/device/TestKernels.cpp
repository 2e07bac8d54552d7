//===- TestKernels.cpp - the device library's test kernels, compiled by NVRTC ---------===//

#include "TestKernels.h"

#include "mk/Target/DeviceHeaders.h"

#include <stdexcept>

namespace mkc::test {

std::span<const nvrtc::Header> kernelSources() {
  static const nvrtc::Header sources[] = {
#include "TestKernels.inc"
  };
  return sources;
}

nvrtc::Result compileKernels(std::string_view file) {
  for (const nvrtc::Header &source : kernelSources())
    if (source.name == file)
      return nvrtc::compile(source.contents, file, nvrtc::Options{}, deviceHeaders());
  throw std::invalid_argument("no test kernel file " + std::string(file));
}

} // namespace mkc::test
