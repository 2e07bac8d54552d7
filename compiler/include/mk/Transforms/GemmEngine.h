//===- GemmEngine.h - which matmuls the GEMM engine can compute -*- C++ -*-===//
//
// The GEMM engine (runtime/device/mk/device/gemm_engine.cuh) computes 128-row tiles of 64, 128 or
// 256 columns from 16-bit operands, A row-major, and converts them to 16 bits in its epilogue.
// The lowering runs a tile loop on it where, besides, the conversion only feeds stores and puts;
// mk-expand-collectives adds all-reduced tiles in place only where the engine's epilogue will
// store them, since that is the only lowering of a combining put. The engine, and every other
// TMA path, needs tensors that TMA can address; the tile library takes any.
//
//===----------------------------------------------------------------------===//

#ifndef MK_TRANSFORMS_GEMMENGINE_H
#define MK_TRANSFORMS_GEMMENGINE_H

#include "mk/IR/MkOps.h"
#include "mk/Transforms/TileNumbering.h"

namespace mlir::mk {

/// Whether TMA can address every rank's part of `type` on `mesh`, and its tiles of `tile` (the
/// trailing dims) as its boxes: the same extents on every rank (a tensor map per launch serves
/// every rank), rows (the innermost dim) of whole 16-byte units, as its strides must be, and tile
/// i at element i * t along each dim (TileNumbering), since a box is clipped only at the tensor's
/// edges.
bool tmaAddresses(DistTensorType type, ArrayRef<int64_t> tile, MeshAttr mesh,
                  const TileNumbering &numbering);

/// The conversion `matmul`'s one use is, if the pair has the engine's shape and TMA addresses
/// both operands; null otherwise.
ConvertOp gemmEngineEpilogue(MatmulOp matmul);

} // namespace mlir::mk

#endif // MK_TRANSFORMS_GEMMENGINE_H
