//===- mk/runtime/driver/TensorMap.h - TMA tensor maps for generated kernels -*- C++ -*-===//
//
// Kernels that use the GEMM engine read and write tiles through TMA, which needs a tensor map
// (CUtensorMap) per tensor, box shape and GPU. The kernel lists what it needs
// (mk_tensor_map_spec, mk/abi.h); the runtime encodes each map against the tensor's address at
// launch and passes it in the kernel's parameter.
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_DRIVER_TENSORMAP_H
#define MK_RUNTIME_DRIVER_TENSORMAP_H

#include "mk/abi.h"
#include "mk/runtime/driver/CudaDriver.h"

namespace mkc {

/// The map `spec` describes over the tensor at `base`; throws cuda::Error (naming the spec) when
/// the driver refuses it: a misaligned address, strides that are not multiples of 16 bytes.
mk_tensor_map encodeTensorMap(const cuda::Driver &driver, const mk_tensor_map_spec &spec,
                              const void *base);

} // namespace mkc

#endif // MK_RUNTIME_DRIVER_TENSORMAP_H
