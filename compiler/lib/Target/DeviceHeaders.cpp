//===- DeviceHeaders.cpp - the device library, as NVRTC headers -----------===//

#include "mk/Target/DeviceHeaders.h"

std::span<const mk::nvrtc::Header> mk::deviceHeaders() {
  static const nvrtc::Header headers[] = {
#include "DeviceHeaders.inc"
  };
  return headers;
}
