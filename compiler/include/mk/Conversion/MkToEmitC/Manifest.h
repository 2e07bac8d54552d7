//===- Manifest.h - a kernel's launch parameters, for the runtime -*- C++ -*-===//
//
// Each kernel's module holds one global, `<kernel>_manifest`, an mk_kernel_manifest (mk/abi.h)
// followed by the kernel's engine copies: what the runtime needs to launch it (grid, shared
// memory, flag words, tensors and their bytes, what each argument must be, the SM split, the TMA
// tensor maps to build, the copies to issue). The runtime reads it in one place (LoadedKernel).
//
//===----------------------------------------------------------------------===//

#ifndef MK_CONVERSION_MKTOEMITC_MANIFEST_H
#define MK_CONVERSION_MKTOEMITC_MANIFEST_H

#include "mk/Conversion/MkToEmitC/KernelLayout.h"

#include <string>

namespace mlir::mk::to_emitc {

/// The C++ of the kernel's manifest and, for a kernel with copies for copy engines, of
/// `<kernel>_advance_epoch`, which the runtime runs after them to move the epoch on
/// (mk_launch_count). Fails, at `loc`, if it does not fit mk/abi.h's bounds.
FailureOr<std::string> kernelManifest(Location loc, const KernelLayout &layout);

} // namespace mlir::mk::to_emitc

#endif // MK_CONVERSION_MKTOEMITC_MANIFEST_H
