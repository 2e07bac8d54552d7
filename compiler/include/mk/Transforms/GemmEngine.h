//===- GemmEngine.h - which matmuls the GEMM engine can compute -*- C++ -*-===//
//
// The GEMM engine (runtime/device/mk/device/gemm_engine.cuh) computes 128-row tiles of 64, 128 or
// 256 columns from 16-bit operands, A row-major, and converts them to 16 bits in its epilogue.
// The lowering runs a tile loop on it where, besides, the conversion only feeds stores and puts;
// mk-expand-collectives adds all-reduced tiles in place only where the engine's epilogue will
// store them, since that is the only lowering of a combining put.
//
//===----------------------------------------------------------------------===//

#ifndef MK_TRANSFORMS_GEMMENGINE_H
#define MK_TRANSFORMS_GEMMENGINE_H

#include "mk/IR/MkOps.h"

namespace mlir::mk {

/// The conversion `matmul`'s one use is, if the pair has the engine's shape; null otherwise.
ConvertOp gemmEngineEpilogue(MatmulOp matmul);

} // namespace mlir::mk

#endif // MK_TRANSFORMS_GEMMENGINE_H
