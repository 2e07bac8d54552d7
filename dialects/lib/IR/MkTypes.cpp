//===- MkTypes.cpp - types of the mk dialect ------------------------------===//

#include "mk/IR/MkTypes.h"
#include "mk/IR/MkDialect.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::mk;

#include "mk/IR/MkTypeInterfaces.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "mk/IR/MkTypes.cpp.inc"

void MkDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "mk/IR/MkTypes.cpp.inc"
      >();
}

DimRelation mlir::mk::compareDims(Dim a, Dim b) {
  if (a.isKnown() && b.isKnown())
    return a.extent == b.extent ? DimRelation::equal : DimRelation::different;
  if (a.symbol && a.symbol == b.symbol)
    return DimRelation::equal;
  return DimRelation::unknown;
}

std::string mlir::mk::formatDim(Dim dim) {
  if (!dim.symbol)
    return std::to_string(dim.extent);
  if (!dim.isKnown())
    return dim.symbol.str();
  return (dim.symbol.getValue() + " = " + Twine(dim.extent)).str();
}

//===----------------------------------------------------------------------===//
// Dims: `[M, 128, K]`
//===----------------------------------------------------------------------===//

static ParseResult parseDims(AsmParser &parser, SmallVectorImpl<int64_t> &shape,
                             SmallVectorImpl<StringAttr> &symbols) {
  return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
    int64_t extent = 0;
    OptionalParseResult integer = parser.parseOptionalInteger(extent);
    if (integer.has_value()) {
      if (failed(*integer))
        return failure();
      shape.push_back(extent);
      symbols.push_back(nullptr);
      return success();
    }
    StringRef name;
    if (parser.parseKeyword(&name))
      return failure();
    shape.push_back(ShapedType::kDynamic);
    symbols.push_back(StringAttr::get(parser.getContext(), name));
    return success();
  });
}

static void printDims(AsmPrinter &printer, ArrayRef<int64_t> shape, ArrayRef<StringAttr> symbols) {
  printer << '[';
  for (auto [i, extent] : llvm::enumerate(shape)) {
    if (i)
      printer << ", ";
    printer << formatDim({extent, symbols[i]});
  }
  printer << ']';
}

static LogicalResult verifyDims(function_ref<InFlightDiagnostic()> emitError,
                                ArrayRef<int64_t> shape, ArrayRef<StringAttr> symbols) {
  if (shape.size() != symbols.size())
    return emitError() << "expected one symbol entry per dim";
  for (auto [i, extent] : llvm::enumerate(shape)) {
    bool symbolic = static_cast<bool>(symbols[i]);
    if (symbolic != ShapedType::isDynamic(extent))
      return emitError() << "dim " << i << " must be either a static extent or a shape symbol";
    if (!symbolic && extent < 1)
      return emitError() << "dim " << i << " has extent " << extent << "; extents must be positive";
  }
  return success();
}

static LogicalResult verifyElementType(function_ref<InFlightDiagnostic()> emitError, Type type) {
  if (isa<FloatType>(type) || type.isSignlessInteger())
    return success();
  return emitError()
         << "element type must be a float (bf16, f16, f32, f8) or a signless integer, got " << type;
}

//===----------------------------------------------------------------------===//
// DistTensorType
//===----------------------------------------------------------------------===//

Type DistTensorType::parse(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<int64_t> shape;
  SmallVector<StringAttr> symbols;
  Type elementType;
  PlacementAttr placement;
  if (parser.parseLess() || parseDims(parser, shape, symbols) || parser.parseComma() ||
      parser.parseType(elementType) || parser.parseComma() ||
      !(placement = PlacementAttr::parseBody(parser)) || parser.parseGreater())
    return {};
  return getChecked([&] { return parser.emitError(loc); }, parser.getContext(), shape, symbols,
                    elementType, placement);
}

void DistTensorType::print(AsmPrinter &printer) const {
  printer << '<';
  printDims(printer, getShape(), getSymbols());
  printer << ", " << getElementType() << ", ";
  getPlacement().printBody(printer.getStream());
  printer << '>';
}

LogicalResult DistTensorType::verify(function_ref<InFlightDiagnostic()> emitError,
                                     ArrayRef<int64_t> shape, ArrayRef<StringAttr> symbols,
                                     Type elementType, PlacementAttr placement) {
  if (shape.empty())
    return emitError() << "a tensor needs at least one dim";
  if (failed(verifyDims(emitError, shape, symbols)) ||
      failed(verifyElementType(emitError, elementType)))
    return failure();
  if (placement.isSharded() && placement.getDim() >= static_cast<int64_t>(shape.size()))
    return emitError() << "shard dim " << placement.getDim() << " is out of range for a rank-"
                       << shape.size() << " tensor";
  return success();
}

Type DistTensorType::cloneWithDims(ArrayRef<int64_t> shape, ArrayRef<StringAttr> symbols) const {
  return get(getContext(), shape, symbols, getElementType(), getPlacement());
}

DistTensorType DistTensorType::withPlacement(PlacementAttr placement) const {
  return get(getContext(), getShape(), getSymbols(), getElementType(), placement);
}

int64_t DistTensorType::getLocalExtent(int64_t d, MeshAttr mesh) const {
  int64_t extent = getShape()[d];
  if (!getPlacement().shardsDim(d))
    return extent;
  int64_t parts = mesh.getAxisSize(getPlacement().getAxis());
  if (ShapedType::isDynamic(extent) || ShapedType::isDynamic(parts))
    return ShapedType::kDynamic;
  return ShardSplit{extent, parts}.largest();
}

ShardSplit DistTensorType::getShardSplit(int64_t d, MeshAttr mesh) const {
  return {getShape()[d], mesh.getAxisSize(getPlacement().getAxis())};
}

bool DistTensorType::isEvenlySplit(MeshAttr mesh) const {
  PlacementAttr placement = getPlacement();
  return !placement.isSharded() || getShardSplit(placement.getDim(), mesh).even();
}

//===----------------------------------------------------------------------===//
// TileType
//===----------------------------------------------------------------------===//

Type TileType::parse(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<int64_t> shape;
  SmallVector<StringAttr> symbols;
  Type elementType;
  if (parser.parseLess() || parseDims(parser, shape, symbols) || parser.parseComma() ||
      parser.parseType(elementType) || parser.parseGreater())
    return {};
  return getChecked([&] { return parser.emitError(loc); }, parser.getContext(), shape, symbols,
                    elementType);
}

void TileType::print(AsmPrinter &printer) const {
  printer << '<';
  printDims(printer, getShape(), getSymbols());
  printer << ", " << getElementType() << '>';
}

LogicalResult TileType::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<int64_t> shape, ArrayRef<StringAttr> symbols,
                               Type elementType) {
  if (shape.empty() || shape.size() > 2)
    return emitError() << "tiles have rank 1 or 2, not " << shape.size();
  return failure(failed(verifyDims(emitError, shape, symbols)) ||
                 failed(verifyElementType(emitError, elementType)));
}

Type TileType::cloneWithDims(ArrayRef<int64_t> shape, ArrayRef<StringAttr> symbols) const {
  return get(getContext(), shape, symbols, getElementType());
}

TileType TileType::withElementType(Type elementType) const {
  return get(getContext(), getShape(), getSymbols(), elementType);
}
