//===- MkAttrs.cpp - attributes of the mk dialect -------------------------===//

#include "mk/IR/MkAttrs.h"
#include "mk/IR/MkDialect.h"
#include "mk/abi.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::mk;

#include "mk/IR/MkEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "mk/IR/MkAttrs.cpp.inc"

void MkDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "mk/IR/MkAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// MeshAttr
//===----------------------------------------------------------------------===//

Attribute MeshAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<int64_t, 2> extents;
  if (parser.parseLess() ||
      parser.parseDimensionList(extents, /*allowDynamic=*/true, /*withTrailingX=*/false) ||
      parser.parseGreater())
    return {};
  if (extents.size() != 2) {
    parser.emitError(loc, "expected a mesh as NODESxGPUS, e.g. <2x4>");
    return {};
  }
  return getChecked([&] { return parser.emitError(loc); }, parser.getContext(), extents[0],
                    extents[1]);
}

static void printExtent(AsmPrinter &printer, int64_t extent) {
  if (ShapedType::isDynamic(extent))
    printer << '?';
  else
    printer << extent;
}

void MeshAttr::print(AsmPrinter &printer) const {
  printer << '<';
  printExtent(printer, getNodes());
  printer << 'x';
  printExtent(printer, getGpus());
  printer << '>';
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t nodes,
                               int64_t gpus) {
  auto valid = [](int64_t extent) { return ShapedType::isDynamic(extent) || extent >= 1; };
  if (!valid(nodes) || !valid(gpus))
    return emitError() << "a mesh needs at least one node and one GPU per node, got " << nodes
                       << "x" << gpus;
  // The ABI's bounds: a kernel maps the memory of at most MK_MAX_GPUS_PER_NODE GPUs of its node,
  // and numbers ranks in 32 bits.
  constexpr int64_t kMaxGpusPerNode = MK_MAX_GPUS_PER_NODE;
  bool tooMany = !ShapedType::isDynamic(gpus) && gpus > kMaxGpusPerNode;
  if (!tooMany && !ShapedType::isDynamic(nodes) && !ShapedType::isDynamic(gpus))
    tooMany = nodes > int64_t(UINT32_MAX) / gpus;
  if (tooMany)
    return emitError() << "a mesh has at most " << kMaxGpusPerNode
                       << " GPUs per node, whose memory a kernel maps, and fewer than 2^32 "
                          "ranks, got "
                       << nodes << "x" << gpus;
  return success();
}

bool MeshAttr::isBound() const {
  return !ShapedType::isDynamic(getNodes()) && !ShapedType::isDynamic(getGpus());
}

int64_t MeshAttr::getAxisSize(MeshAxis axis) const {
  switch (axis) {
  case MeshAxis::nodes:
    return getNodes();
  case MeshAxis::gpus:
    return getGpus();
  case MeshAxis::world:
    return isBound() ? getNodes() * getGpus() : ShapedType::kDynamic;
  }
  llvm_unreachable("unknown mesh axis");
}

//===----------------------------------------------------------------------===//
// PlacementAttr
//===----------------------------------------------------------------------===//

PlacementAttr PlacementAttr::parseBody(AsmParser &parser) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return {};
  std::optional<PlacementKind> kind = symbolizePlacementKind(keyword);
  if (!kind) {
    parser.emitError(loc) << "unknown placement '" << keyword
                          << "'; expected 'shard D over AXIS', 'replicated' or 'symmetric'";
    return {};
  }
  if (*kind != PlacementKind::shard)
    return get(parser.getContext(), *kind);

  int64_t dim;
  StringRef axisName;
  SMLoc axisLoc;
  if (parser.parseInteger(dim) || parser.parseKeyword("over") ||
      (axisLoc = parser.getCurrentLocation(), parser.parseKeyword(&axisName)))
    return {};
  std::optional<MeshAxis> axis = symbolizeMeshAxis(axisName);
  if (!axis) {
    parser.emitError(axisLoc) << "unknown mesh axis '" << axisName
                              << "'; expected world, nodes or gpus";
    return {};
  }
  bool zigzag = succeeded(parser.parseOptionalKeyword("zigzag"));
  return getChecked([&] { return parser.emitError(loc); }, parser.getContext(),
                    PlacementKind::shard, dim, *axis, zigzag);
}

void PlacementAttr::printBody(raw_ostream &os) const {
  os << stringifyPlacementKind(getKind());
  if (isSharded())
    os << ' ' << getDim() << " over " << stringifyMeshAxis(getAxis())
       << (getZigzag() ? " zigzag" : "");
}

std::string PlacementAttr::str() const {
  std::string text;
  llvm::raw_string_ostream os(text);
  printBody(os);
  return text;
}

Attribute PlacementAttr::parse(AsmParser &parser, Type) {
  PlacementAttr placement;
  if (parser.parseLess() || !(placement = parseBody(parser)) || parser.parseGreater())
    return {};
  return placement;
}

void PlacementAttr::print(AsmPrinter &printer) const {
  printer << '<';
  printBody(printer.getStream());
  printer << '>';
}

LogicalResult PlacementAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                    PlacementKind kind, int64_t dim, MeshAxis axis, bool zigzag) {
  if (kind == PlacementKind::shard && dim < 0)
    return emitError() << "shard dim must be non-negative, got " << dim;
  if (kind != PlacementKind::shard && (dim != 0 || axis != MeshAxis::world || zigzag))
    return emitError() << "only a sharded placement has a dim and an axis";
  return success();
}

//===----------------------------------------------------------------------===//
// TileOrderAttr
//===----------------------------------------------------------------------===//

Attribute TileOrderAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseLess() || parser.parseKeyword(&keyword))
    return {};
  std::optional<TileOrderKind> kind = symbolizeTileOrderKind(keyword);
  if (!kind) {
    parser.emitError(loc) << "unknown tile order '" << keyword
                          << "'; expected row_major, column_major or swizzle";
    return {};
  }
  int64_t group = 1;
  if (*kind == TileOrderKind::swizzle && parser.parseInteger(group))
    return {};
  bool localFirst = false;
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseKeyword("local_first"))
      return {};
    localFirst = true;
  }
  if (parser.parseGreater())
    return {};
  return getChecked([&] { return parser.emitError(loc); }, parser.getContext(), *kind, group,
                    localFirst);
}

void TileOrderAttr::print(AsmPrinter &printer) const {
  printer << '<' << stringifyTileOrderKind(getKind());
  if (getKind() == TileOrderKind::swizzle)
    printer << ' ' << getGroup();
  if (getLocalFirst())
    printer << ", local_first";
  printer << '>';
}

LogicalResult TileOrderAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                    TileOrderKind kind, int64_t group, bool) {
  if (group < 1)
    return emitError() << "a swizzle group must be at least 1 tile row, got " << group;
  if (kind != TileOrderKind::swizzle && group != 1)
    return emitError() << "only a swizzle order has a group";
  return success();
}
