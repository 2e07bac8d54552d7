//===- GemmEngine.h - which matmuls the GEMM engine can compute -*- C++ -*-===//
//
// The GEMM engine (runtime/device/mk/device/gemm_engine.cuh) computes 128-row tiles of 64, 128 or
// 256 columns from 16-bit operands, A row-major, and converts them to 16 bits in its epilogue;
// and 64-row ones, one MMA warpgroup's, where mk-plan-lowering has it load 64 rows of A.
// Matmuls of a tile body that share A run in one pass, their B panels side by side (a gated MLP's
// gate and up projections); elementwise math on the products runs in the consumers' registers
// before the conversion, with splats and rows broadcast down the tile (a bias, which each
// consumer loads for the columns it holds). The lowering runs a tile loop on it where, besides, the
// conversion only feeds stores and puts; mk-expand-collectives adds all-reduced tiles in place only
// where the engine's epilogue will store them, since that is the only lowering of a combining put.
// The engine, and every other TMA path, needs tensors that TMA can address; the tile library takes
// any.
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

/// What one pass of the engine computes: the matmuls, in their order in the body (the first
/// leads; their B panels lie side by side in that order), the elementwise ops on the products and
/// the splats and broadcast rows (load, conversion, broadcast) they take, in order, in the
/// consumers' registers, and the conversion to 16 bits whose stores the engine makes.
struct EnginePass {
  SmallVector<MatmulOp> matmuls;
  SmallVector<Operation *> epilogue;
  ConvertOp convert;

  /// The engine tile's columns: the B panels' together.
  int64_t tileColumns() const;
};

/// Whether `matmul` multiplies groups of matrices: A [G x M x K] and B [G x K x N] or
/// [G x N x K] at a group each (a grouped GEMM's, an expert's), which the engine loads at it.
bool groupedMatmul(MatmulOp matmul);

/// Whether B's K is its innermost dim ([N x K], or groups of them).
bool bKMajor(MatmulOp matmul);

/// The pass `leader` leads, if it has the engine's shape: 16-bit operands, A [M x K] and B [K x N]
/// or [N x K] (or groups of them) that TMA addresses; a {64, 128} x {64, 128, 256} tile, or two
/// of 64 or 128 columns from matmuls after it in the body with the same A rows and B of the same
/// type at the same columns;
/// whose products only elementwise ops on f32 tiles of that shape (and splats, or rows of a tensor
/// the kernel does not write broadcast along dim 0, used only there) use, up to one conversion to
/// 16 bits. Nothing where `leader` is no such pass's first matmul.
std::optional<EnginePass> gemmEnginePass(MatmulOp leader);

} // namespace mlir::mk

#endif // MK_TRANSFORMS_GEMMENGINE_H
