//===- TypeConverter.h - mk types as the device library's C++ types -*- C++ -*-===//
//
// Tiles become mk::Tile<T, R, C>, distributed tensors mk::Tensor<T>, index size_t; element types
// are spelled as the device library spells them (mk::bf16, mk::f16, float, int).
//
//===----------------------------------------------------------------------===//

#ifndef MK_CONVERSION_MKTOEMITC_TYPECONVERTER_H
#define MK_CONVERSION_MKTOEMITC_TYPECONVERTER_H

#include "mk/IR/MkOps.h"

#include "mlir/Transforms/DialectConversion.h"

#include <string>

namespace mlir::mk::to_emitc {

/// The device library's name of `element`, or empty if it has none.
std::string elementName(Type element);

/// `mk::Tile<T, R, C>` of `tile`.
std::string tileName(TileType tile);

/// Where the GEMM engine's consumers hold `tile` in its epilogue: `mk::GemmTile<C>` of a 128 x C
/// f32 tile, `mk::GemmRow<T, C, S>` of a row of C elements it repeats down the rows, loaded as
/// `stored` (default: T).
std::string engineTileName(TileType tile, Type stored = {});

/// `name<T, R, C>()` of `tile`, as the shared-memory needs of tile calls are spelled.
std::string tileTemplate(StringRef name, TileType tile);

/// mk's tile and tensor types, index and the types EmitC keeps, with casts between them that
/// the conversion reconciles at the end.
class MkToEmitCTypeConverter : public TypeConverter {
public:
  MkToEmitCTypeConverter();
};

} // namespace mlir::mk::to_emitc

#endif // MK_CONVERSION_MKTOEMITC_TYPECONVERTER_H
