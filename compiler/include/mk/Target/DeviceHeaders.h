//===- DeviceHeaders.h - the device library, as NVRTC headers -----*- C++ -*-===//

#ifndef MK_TARGET_DEVICEHEADERS_H
#define MK_TARGET_DEVICEHEADERS_H

#include "mk/Target/Nvrtc.h"

namespace mkc {

/// The headers of runtime/device (mk/abi.h, mk/device/...), embedded at build time, by the path
/// generated kernels include them with.
std::span<const nvrtc::Header> deviceHeaders();

} // namespace mkc

#endif // MK_TARGET_DEVICEHEADERS_H
