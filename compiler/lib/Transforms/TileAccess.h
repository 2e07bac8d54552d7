//===- TileAccess.h - the tensor regions ops read and write, tile by tile -*- C++ -*-===//
//
// Shared by the passes that reason about which tiles of a tensor an op touches: mk-tile-and-order
// (tile widths that every reader and writer of a tensor agrees with) and mk-insert-signals (flags
// per tile).
//
//===----------------------------------------------------------------------===//

#ifndef MK_TRANSFORMS_TILEACCESS_H
#define MK_TRANSFORMS_TILEACCESS_H

#include "mk/IR/MkOps.h"

namespace mlir::mk {

/// One access to a tensor by a write or a read: its index operands, its `:` dims, and the
/// extent of the accessed region along each dim (0 for a whole dim).
struct TileAccess {
  Operation *op;
  Value tensor;
  SmallVector<Value> indices;
  SmallVector<int64_t> wholeDims;
  SmallVector<int64_t> extents;

  /// The index operand of dim `d`, or null where it is whole.
  Value indexOf(int64_t d) const {
    if (llvm::is_contained(wholeDims, d))
      return Value();
    int64_t before = llvm::count_if(wholeDims, [&](int64_t w) { return w < d; });
    return indices[d - before];
  }
};

/// The tensor regions `op` writes.
SmallVector<TileAccess> writesOf(Operation *op);

/// The tensor regions `op` reads.
SmallVector<TileAccess> readsOf(Operation *op);

} // namespace mlir::mk

#endif // MK_TRANSFORMS_TILEACCESS_H
