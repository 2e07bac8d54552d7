//===- DeviceHeaders.cpp - the device library, as NVRTC headers -----------===//

#include "mk/Target/DeviceHeaders.h"

std::span<const mkc::nvrtc::Header> mkc::deviceHeaders() {
  static const nvrtc::Header headers[] = {
#include "DeviceHeaders.inc"
  };
  return headers;
}
