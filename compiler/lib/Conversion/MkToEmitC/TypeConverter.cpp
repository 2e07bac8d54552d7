//===- TypeConverter.cpp - mk types as the device library's C++ types -----===//

#include "mk/Conversion/MkToEmitC/TypeConverter.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/EmitC/Transforms/TypeConversions.h"

namespace mlir::mk::to_emitc {

std::string elementName(Type element) {
  if (element.isBF16())
    return "mk::bf16";
  if (element.isF16())
    return "mk::f16";
  if (element.isF32())
    return "float";
  if (element.isInteger(32))
    return "int";
  return "";
}

/// "T, R, C" of `tile`: its element and a rank-1 tile as one row.
static std::string tileArguments(TileType tile) {
  ArrayRef<int64_t> shape = tile.getShape();
  return elementName(tile.getElementType()) + ", " + std::to_string(shape[0]) + ", " +
         std::to_string(shape.size() > 1 ? shape[1] : 1);
}

std::string tileName(TileType tile) { return "mk::Tile<" + tileArguments(tile) + ">"; }

std::string engineTileName(TileType tile, Type stored) {
  std::string columns = std::to_string(tile.getShape().back());
  if (tile.getRank() == 1) {
    Type element = tile.getElementType();
    std::string name = "mk::GemmRow<" + elementName(element) + ", " + columns;
    if (stored && stored != element)
      name += ", " + elementName(stored);
    return name + ">";
  }
  return "mk::GemmTile<" + columns + ">";
}

std::string tileTemplate(StringRef name, TileType tile) {
  return (name + "<" + tileArguments(tile) + ">()").str();
}

MkToEmitCTypeConverter::MkToEmitCTypeConverter() {
  addConversion([](Type type) { return type; });
  populateEmitCSizeTTypeConversions(*this);
  addConversion([](TileType tile) -> Type {
    return emitc::OpaqueType::get(tile.getContext(), tileName(tile));
  });
  addConversion([](DistTensorType tensor) -> Type {
    return emitc::OpaqueType::get(tensor.getContext(),
                                  "mk::Tensor<" + elementName(tensor.getElementType()) + ">");
  });
  auto materialize = [](OpBuilder &b, Type type, ValueRange inputs, Location loc) -> Value {
    return UnrealizedConversionCastOp::create(b, loc, type, inputs).getResult(0);
  };
  addSourceMaterialization(materialize);
  addTargetMaterialization(materialize);
}

} // namespace mlir::mk::to_emitc
