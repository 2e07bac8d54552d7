//===- MkOps.cpp - ops of the mk dialect ----------------------------------===//

#include "mk/IR/MkOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::mk;

//===----------------------------------------------------------------------===//
// Tile accesses: `%T[%i, :, %j]`
//===----------------------------------------------------------------------===//

/// Per dim of the tensor, an index operand (a global tile coordinate) or `:` (the whole extent).
static ParseResult parseTileAccess(OpAsmParser &parser,
                                   SmallVectorImpl<OpAsmParser::UnresolvedOperand> &indices,
                                   DenseI64ArrayAttr &wholeDims) {
  SmallVector<int64_t> whole;
  int64_t position = 0;
  if (parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Square, [&]() -> ParseResult {
        if (succeeded(parser.parseOptionalColon())) {
          whole.push_back(position++);
          return success();
        }
        ++position;
        return parser.parseOperand(indices.emplace_back());
      }))
    return failure();
  wholeDims = parser.getBuilder().getDenseI64ArrayAttr(whole);
  return success();
}

static void printTileAccess(OpAsmPrinter &printer, Operation *, OperandRange indices,
                            DenseI64ArrayAttr wholeDims) {
  printer << '[';
  auto index = indices.begin();
  int64_t rank = indices.size() + wholeDims.size();
  for (int64_t d = 0; d < rank; ++d) {
    if (d)
      printer << ", ";
    if (llvm::is_contained(wholeDims.asArrayRef(), d) || index == indices.end())
      printer << ':';
    else
      printer << *index++;
  }
  printer << ']';
}

namespace {
/// An access to a tensor as written in the IR, for verification.
struct Access {
  DistTensorType type;
  size_t numIndices;
  ArrayRef<int64_t> wholeDims;

  int64_t rank() const { return type.getRank(); }
  bool isWhole(int64_t d) const { return llvm::is_contained(wholeDims, d); }
};
} // namespace

static ProgramOp enclosingProgram(Operation *op) {
  return isa<ProgramOp>(op) ? cast<ProgramOp>(op) : op->getParentOfType<ProgramOp>();
}

/// `dim` with its symbol resolved through the bindings of the program enclosing `op`.
static Dim resolveDim(Operation *op, Dim dim) {
  if (ProgramOp program = enclosingProgram(op))
    dim.extent = program.resolve(dim);
  return dim;
}

/// How dim `d` of `type`, sharded, splits over its axis, once the extent and the mesh are known.
static std::optional<ShardSplit> resolvedSplit(Operation *op, DistTensorType type, int64_t d) {
  Dim dim = resolveDim(op, type.getDim(d));
  ProgramOp program = enclosingProgram(op);
  int64_t parts =
      program ? program.getMesh().getAxisSize(type.getPlacement().getAxis()) : ShapedType::kDynamic;
  if (!dim.isKnown() || ShapedType::isDynamic(parts))
    return std::nullopt;
  return ShardSplit{dim.extent, parts};
}

/// Dim `d` of `type` as one rank holds it (`local`: the largest shard, where it is sharded) or of
/// the whole tensor. A sharded dim held locally has no symbol: its extent is known once the
/// global extent and the mesh are.
static Dim resolvedDim(Operation *op, DistTensorType type, int64_t d, bool local) {
  if (!local || !type.getPlacement().shardsDim(d))
    return resolveDim(op, type.getDim(d));
  std::optional<ShardSplit> split = resolvedSplit(op, type, d);
  return split ? Dim{split->largest(), nullptr} : Dim{};
}

static LogicalResult verifyAccess(Operation *op, StringRef what, const Access &access) {
  int64_t named = access.numIndices + access.wholeDims.size();
  if (named != access.rank())
    return op->emitOpError() << "indexes " << named << " dims of its " << what
                             << ", which has rank " << access.rank();
  if (!llvm::is_sorted(access.wholeDims) ||
      llvm::adjacent_find(access.wholeDims) != access.wholeDims.end() ||
      llvm::any_of(access.wholeDims, [&](int64_t d) { return d < 0 || d >= access.rank(); }))
    return op->emitOpError() << "has malformed whole dims in its " << what << " access";
  return success();
}

/// Checks that `tile` can be the tile `access` names: its dims are the trailing dims of the tensor,
/// every other dim is indexed (extent 1), except for `wholeLeadingDims` dims that may be `:`.
/// A `:` trailing dim must match the extent the rank holds.
static LogicalResult verifyTileAccess(Operation *op, StringRef what, const Access &access,
                                      TileType tile, int64_t wholeLeadingDims = 0) {
  if (failed(verifyAccess(op, what, access)))
    return failure();
  int64_t tileRank = tile.getRank();
  if (tileRank > access.rank())
    return op->emitOpError() << "cannot hold a rank-" << tileRank << " tile of its rank-"
                             << access.rank() << " " << what;
  int64_t firstTileDim = access.rank() - tileRank;
  int64_t leadingWhole =
      llvm::count_if(access.wholeDims, [&](int64_t d) { return d < firstTileDim; });
  if (leadingWhole != wholeLeadingDims) {
    if (wholeLeadingDims == 0)
      return op->emitOpError() << "takes ':' on a dim of its " << what
                               << " that is not a tile dim; only the last " << tileRank
                               << " dims can be whole";
    return op->emitOpError() << "needs exactly " << wholeLeadingDims
                             << " ':' on the leading dims of its " << what << ", got "
                             << leadingWhole;
  }
  for (int64_t j = 0; j < tileRank; ++j) {
    int64_t d = firstTileDim + j;
    if (!access.isWhole(d))
      continue;
    Dim held = resolvedDim(op, access.type, d, /*local=*/true);
    Dim tileDim = resolveDim(op, tile.getDim(j));
    if (compareDims(tileDim, held) == DimRelation::different)
      return op->emitOpError() << "has a tile dim of " << formatDim(tileDim) << " where dim " << d
                               << " of its " << what << " is whole with extent " << formatDim(held);
  }
  return success();
}

static LogicalResult verifySameElementType(Operation *op, TileType tile, DistTensorType tensor,
                                           StringRef what) {
  if (tile.getElementType() == tensor.getElementType())
    return success();
  return op->emitOpError() << "dtype mismatch: the tile holds " << tile.getElementType()
                           << " but its " << what << " holds " << tensor.getElementType()
                           << "; convert with mk.convert";
}

//===----------------------------------------------------------------------===//
// Peers: `at gpu %g via nvlink_store`, `at node %n via rdma_proxy`, or nothing (this rank)
//===----------------------------------------------------------------------===//

static ParseResult parsePeer(OpAsmParser &parser, PeerScopeAttr &scope,
                             std::optional<OpAsmParser::UnresolvedOperand> &peer, LinkAttr &link) {
  MLIRContext *context = parser.getContext();
  if (failed(parser.parseOptionalKeyword("at"))) {
    scope = PeerScopeAttr::get(context, PeerScope::self);
    return success();
  }
  SMLoc scopeLoc = parser.getCurrentLocation();
  StringRef scopeName;
  if (parser.parseKeyword(&scopeName))
    return failure();
  std::optional<PeerScope> kind = symbolizePeerScope(scopeName);
  if (!kind || *kind == PeerScope::self)
    return parser.emitError(scopeLoc)
           << "expected 'gpu' or 'node' after 'at', got '" << scopeName << "'";
  scope = PeerScopeAttr::get(context, *kind);
  peer.emplace();
  SMLoc linkLoc;
  StringRef linkName;
  if (parser.parseOperand(*peer) || parser.parseKeyword("via") ||
      (linkLoc = parser.getCurrentLocation(), parser.parseKeyword(&linkName)))
    return failure();
  std::optional<Link> linkKind = symbolizeLink(linkName);
  if (!linkKind)
    return parser.emitError(linkLoc)
           << "unknown link '" << linkName << "'; expected nvlink_store, nvlink_bulk or rdma_proxy";
  link = LinkAttr::get(context, *linkKind);
  return success();
}

static void printPeer(OpAsmPrinter &printer, Operation *, PeerScopeAttr scope, Value peer,
                      LinkAttr link) {
  if (scope.getValue() == PeerScope::self)
    return;
  printer << " at " << stringifyPeerScope(scope.getValue()) << ' ' << peer;
  if (link)
    printer << " via " << stringifyLink(link.getValue());
}

static LogicalResult verifyPeer(Operation *op, PeerScope scope, Value peer,
                                std::optional<Link> link) {
  if (scope == PeerScope::self) {
    if (peer || link)
      return op->emitOpError() << "reaches this rank, so it names no peer and no link";
    return success();
  }
  if (!peer || !link)
    return op->emitOpError() << "reaches a peer, so it needs a peer index and a link";
  bool overNvlink = *link == Link::nvlink_store || *link == Link::nvlink_bulk;
  if (scope == PeerScope::gpu && !overNvlink)
    return op->emitOpError() << "cannot reach a GPU of this node through " << stringifyLink(*link)
                             << "; use nvlink_store or nvlink_bulk";
  if (scope == PeerScope::node && overNvlink)
    return op->emitOpError() << "cannot reach another node through " << stringifyLink(*link)
                             << "; transfers across nodes go through rdma_proxy, to the same GPU "
                                "index (rail)";
  return success();
}

//===----------------------------------------------------------------------===//
// Shape checks shared by several ops
//===----------------------------------------------------------------------===//

static LogicalResult verifyDimsMatch(Operation *op, Dim a, Dim b, const Twine &what) {
  a = resolveDim(op, a);
  b = resolveDim(op, b);
  if (compareDims(a, b) != DimRelation::different)
    return success();
  return op->emitOpError() << what << " differ: " << formatDim(a) << " vs " << formatDim(b);
}

static bool sameDims(SymbolicShapeType a, SymbolicShapeType b) {
  return a.getShape() == b.getShape() && a.getSymbols() == b.getSymbols();
}

#define GET_OP_CLASSES
#include "mk/IR/MkOps.cpp.inc"

//===----------------------------------------------------------------------===//
// ProgramOp
//===----------------------------------------------------------------------===//

ParseResult ProgramOp::parse(OpAsmParser &parser, OperationState &result) {
  Builder &builder = parser.getBuilder();
  auto &props = result.getOrAddProperties<Properties>();

  StringAttr name;
  if (parser.parseSymbolName(name))
    return failure();
  props.sym_name = name;

  SmallVector<Attribute> symbols, defaults;
  SmallVector<int64_t> values;
  bool anyDefault = false;
  if (parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Square, [&]() -> ParseResult {
        StringRef symbol;
        if (parser.parseKeyword(&symbol))
          return failure();
        symbols.push_back(builder.getStringAttr(symbol));
        int64_t value = ShapedType::kDynamic;
        if (succeeded(parser.parseOptionalEqual()) && parser.parseInteger(value))
          return failure();
        values.push_back(value);
        StringRef fallback;
        if (succeeded(parser.parseOptionalKeyword("default")) && parser.parseKeyword(&fallback))
          return failure();
        anyDefault |= !fallback.empty();
        defaults.push_back(builder.getStringAttr(fallback));
        return success();
      }))
    return failure();
  props.shape_symbols = builder.getArrayAttr(symbols);
  props.shape_values = builder.getDenseI64ArrayAttr(values);
  if (anyDefault)
    props.shape_defaults = builder.getArrayAttr(defaults);

  MeshAttr mesh;
  if (parser.parseKeyword("mesh") || parser.parseCustomAttributeWithFallback(mesh))
    return failure();
  props.mesh = mesh;
  if (succeeded(parser.parseOptionalKeyword("rank"))) {
    int64_t rank;
    if (parser.parseInteger(rank))
      return failure();
    props.rank = builder.getI64IntegerAttr(rank);
  }

  SmallVector<OpAsmParser::Argument> arguments;
  if (parser.parseArgumentList(arguments, OpAsmParser::Delimiter::Paren, /*allowType=*/true))
    return failure();

  if (succeeded(parser.parseOptionalKeyword("grid"))) {
    int64_t grid;
    if (parser.parseInteger(grid))
      return failure();
    props.grid = builder.getI64IntegerAttr(grid);
  }
  if (parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();
  Region *body = result.addRegion();
  if (parser.parseRegion(*body, arguments))
    return failure();
  if (body->empty())
    body->emplaceBlock();
  return success();
}

void ProgramOp::print(OpAsmPrinter &printer) {
  printer << ' ';
  printer.printSymbolName(getSymName());
  printer << " [";
  for (auto [i, symbol] : llvm::enumerate(getShapeSymbols().getAsValueRange<StringAttr>())) {
    if (i)
      printer << ", ";
    printer << symbol;
    if (!ShapedType::isDynamic(getShapeValues()[i]))
      printer << " = " << getShapeValues()[i];
    if (StringRef fallback = getShapeDefault(i); !fallback.empty())
      printer << " default " << fallback;
  }
  printer << "] mesh ";
  printer.printStrippedAttrOrType(getMesh());
  if (std::optional<int64_t> rank = getRank())
    printer << " rank " << *rank;
  printer << " (";
  llvm::interleaveComma(getBodyBlock().getArguments(), printer,
                        [&](BlockArgument argument) { printer.printRegionArgument(argument); });
  printer << ')';
  if (std::optional<int64_t> grid = getGrid())
    printer << " grid " << *grid;
  printer.printOptionalAttrDictWithKeyword((*this)->getAttrs(), getAttributeNames());
  printer << ' ';
  printer.printRegion(getBody(), /*printEntryBlockArgs=*/false, /*printBlockTerminators=*/false);
}

std::optional<int64_t> ProgramOp::lookupShapeSymbol(StringRef name) {
  for (auto [symbol, value] :
       llvm::zip(getShapeSymbols().getAsValueRange<StringAttr>(), getShapeValues()))
    if (symbol == name)
      return value;
  return std::nullopt;
}

StringRef ProgramOp::getShapeDefault(unsigned index) {
  std::optional<ArrayAttr> defaults = getShapeDefaults();
  return defaults ? cast<StringAttr>((*defaults)[index]).getValue() : StringRef();
}

int64_t ProgramOp::resolve(Dim dim) {
  if (!dim.symbol)
    return dim.extent;
  return lookupShapeSymbol(dim.symbol.getValue()).value_or(ShapedType::kDynamic);
}

/// Checks the bytes of the distributed tensors of `program` (its arguments, and what its ops
/// allocate, such as buffers) once their shapes are bound: each counts in int64, and together they
/// fit kMaxRankBytes on each rank.
static LogicalResult verifyTensorBytes(ProgramOp program) {
  MeshAttr mesh = program.getMesh();
  int64_t rankTotal = 0;
  auto add = [&](Value tensor, const Twine &what) -> LogicalResult {
    auto type = dyn_cast<DistTensorType>(tensor.getType());
    if (!type)
      return success();
    int64_t bytes = llvm::divideCeil(type.getElementType().getIntOrFloatBitWidth(), 8);
    for (int64_t d = 0; d < type.getRank(); ++d) {
      int64_t extent = program.resolve(type.getDim(d));
      if (ShapedType::isDynamic(extent))
        return success(); // checked once bound
      if (llvm::MulOverflow(bytes, extent, bytes))
        return emitError(tensor.getLoc()) << "tensor " << type << " (" << what
                                          << ") has more bytes than int64 counts (2^63 - 1)";
    }
    PlacementAttr placement = type.getPlacement();
    int64_t parts = placement.isSharded() ? mesh.getAxisSize(placement.getAxis()) : 1;
    if (ShapedType::isDynamic(parts))
      return success();
    bytes /= parts;
    if (bytes > kMaxRankBytes)
      return emitError(tensor.getLoc())
             << "tensor " << type << " (" << what << ") holds " << bytes
             << " bytes on each rank, more than the 1 TiB a rank may hold (above any GPU's "
                "memory: an H200 has 141 GB)";
    // Both terms are at most kMaxRankBytes: the sum cannot overflow.
    rankTotal += bytes;
    if (rankTotal > kMaxRankBytes)
      return program.emitOpError()
             << "keeps more than 1 TiB of tensors and buffers on each rank, the most a rank may "
                "hold (above any GPU's memory: an H200 has 141 GB)";
    return success();
  };
  for (BlockArgument argument : program.getBodyBlock().getArguments())
    if (failed(add(argument,
                   "argument #" + Twine(argument.getArgNumber()) + " of @" + program.getSymName())))
      return failure();
  WalkResult walk = program.getBody().walk([&](Operation *op) {
    for (Value result : op->getResults())
      if (failed(add(result, "'" + op->getName().getStringRef() + "' of @" + program.getSymName())))
        return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

LogicalResult ProgramOp::verify() {
  if (getShapeSymbols().size() != getShapeValues().size())
    return emitOpError() << "binds " << getShapeValues().size() << " values to "
                         << getShapeSymbols().size() << " shape symbols";
  if (std::optional<ArrayAttr> defaults = getShapeDefaults();
      defaults && defaults->size() != getShapeSymbols().size())
    return emitOpError() << "gives " << defaults->size() << " defaults to "
                         << getShapeSymbols().size() << " shape symbols";
  llvm::StringSet<> seen;
  for (auto [i, symbol, value] :
       llvm::enumerate(getShapeSymbols().getAsValueRange<StringAttr>(), getShapeValues())) {
    // Defaults name earlier symbols, so that they resolve in one pass and never in a cycle.
    if (StringRef fallback = getShapeDefault(i); !fallback.empty() && !seen.contains(fallback))
      return emitOpError() << "gives shape symbol '" << symbol << "' the default '" << fallback
                           << "', which is not a shape symbol declared before it";
    if (!seen.insert(symbol).second)
      return emitOpError() << "declares shape symbol '" << symbol << "' twice";
    if (!ShapedType::isDynamic(value) && value < 1)
      return emitOpError() << "binds shape symbol '" << symbol << "' to " << value
                           << "; extents must be positive";
  }
  int64_t world = getMesh().getWorldSize();
  if (std::optional<int64_t> rank = getRank();
      rank && !ShapedType::isDynamic(world) && *rank >= world)
    return emitOpError() << "is compiled for rank " << *rank << ", but mesh " << getMesh()
                         << " has " << world << " ranks";
  for (BlockArgument argument : getBodyBlock().getArguments())
    if (!isa<DistTensorType>(argument.getType()))
      return emitOpError() << "takes distributed tensors only; argument #"
                           << argument.getArgNumber() << " is " << argument.getType();
  return verifyTensorBytes(*this);
}

/// Checks one type used in the program: its shape symbols are declared.
static LogicalResult verifyTypeInProgram(ProgramOp program, Operation *user, Type type) {
  auto shaped = dyn_cast<SymbolicShapeType>(type);
  if (!shaped)
    return success();
  for (StringAttr symbol : shaped.getSymbols()) {
    if (!symbol || program.lookupShapeSymbol(symbol.getValue()))
      continue;
    std::string declared;
    llvm::raw_string_ostream os(declared);
    llvm::interleaveComma(program.getShapeSymbols().getAsValueRange<StringAttr>(), os);
    return user->emitOpError() << "uses shape symbol '" << symbol.getValue() << "', which @"
                               << program.getSymName() << " does not declare (it declares ["
                               << declared << "])";
  }
  return success();
}

LogicalResult ProgramOp::verifyRegions() {
  for (BlockArgument argument : getBodyBlock().getArguments())
    if (failed(verifyTypeInProgram(*this, *this, argument.getType())))
      return failure();

  llvm::StringSet<> signalled;
  SmallVector<WaitOp> waits;
  WalkResult walk = getBody().walk([&](Operation *op) {
    for (Type type : op->getResultTypes())
      if (failed(verifyTypeInProgram(*this, op, type)))
        return WalkResult::interrupt();
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument argument : block.getArguments())
          if (failed(verifyTypeInProgram(*this, op, argument.getType())))
            return WalkResult::interrupt();
    if (auto signal = dyn_cast<SignalOp>(op))
      signalled.insert(signal.getFlags());
    if (auto copy = dyn_cast<EngineCopyOp>(op))
      signalled.insert(copy.getSignal());
    if (auto route = dyn_cast<RouteRowsOp>(op))
      signalled.insert(route.getArrivals());
    if (auto wait = dyn_cast<WaitOp>(op))
      waits.push_back(wait);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();

  for (WaitOp wait : waits)
    if (!signalled.contains(wait.getFlags()))
      return wait.emitOpError() << "can never be satisfied: nothing in @" << getSymName()
                                << " signals @" << wait.getFlags();

  auto roles = getBodyBlock().getOps<RoleOp>();
  if (roles.empty())
    return success();
  for (TileGridOp grid : getBodyBlock().getOps<TileGridOp>())
    return grid.emitOpError() << "is outside every role of a scheduled program";
  // Roles get their CTA counts all at once, from mk-partition-roles or the author.
  int64_t ctas = 0, counted = 0, total = 0;
  for (RoleOp role : roles) {
    ++total;
    if (std::optional<uint64_t> count = role.getCtas()) {
      ++counted;
      ctas += static_cast<int64_t>(*count);
    }
  }
  if (counted == 0)
    return success();
  if (counted != total)
    return emitOpError() << "gives CTA counts to " << counted << " of its " << total
                         << " roles; either all or none have one";
  if (!getGrid())
    return emitOpError() << "has SM roles but no grid size";
  if (ctas > static_cast<int64_t>(*getGrid()))
    return emitOpError() << "assigns " << ctas << " CTAs to its roles, but the grid has "
                         << *getGrid();
  return success();
}

//===----------------------------------------------------------------------===//
// TileGridOp
//===----------------------------------------------------------------------===//

ParseResult TileGridOp::parse(OpAsmParser &parser, OperationState &result) {
  Builder &builder = parser.getBuilder();
  auto &props = result.getOrAddProperties<Properties>();

  SmallVector<OpAsmParser::Argument> coordinates;
  OpAsmParser::UnresolvedOperand target;
  if (parser.parseArgumentList(coordinates, OpAsmParser::Delimiter::Paren) ||
      parser.parseKeyword("over") || parser.parseOperand(target))
    return failure();
  for (OpAsmParser::Argument &coordinate : coordinates)
    coordinate.type = builder.getIndexType();
  std::optional<OpAsmParser::UnresolvedOperand> holder;
  if (succeeded(parser.parseOptionalKeyword("held_by")) && parser.parseOperand(holder.emplace()))
    return failure();
  if (succeeded(parser.parseOptionalKeyword("global")))
    props.global = builder.getUnitAttr();

  SmallVector<int64_t> sizes;
  if (parser.parseKeyword("tiles") ||
      parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Square, [&]() -> ParseResult {
        if (succeeded(parser.parseOptionalColon())) {
          sizes.push_back(ShapedType::kDynamic);
          return success();
        }
        return parser.parseInteger(sizes.emplace_back(0));
      }))
    return failure();
  props.tile_sizes = builder.getDenseI64ArrayAttr(sizes);

  std::optional<OpAsmParser::UnresolvedOperand> rowCounts;
  if (succeeded(parser.parseOptionalKeyword("rows")) && parser.parseOperand(rowCounts.emplace()))
    return failure();
  if (succeeded(parser.parseOptionalKeyword("order"))) {
    TileOrderAttr order;
    if (parser.parseCustomAttributeWithFallback(order))
      return failure();
    props.order = order;
  }
  if (succeeded(parser.parseOptionalKeyword("masked")))
    props.masked = builder.getUnitAttr();
  if (succeeded(parser.parseOptionalKeyword("distribute"))) {
    SMLoc axisLoc = parser.getCurrentLocation();
    StringRef axisName;
    if (parser.parseKeyword(&axisName))
      return failure();
    std::optional<MeshAxis> axis = symbolizeMeshAxis(axisName);
    if (!axis)
      return parser.emitError(axisLoc)
             << "unknown mesh axis '" << axisName << "'; expected world, nodes or gpus";
    props.distribute = MeshAxisAttr::get(parser.getContext(), *axis);
  }

  SmallVector<Type, 2> types;
  if (parser.parseColonTypeList(types))
    return failure();
  if (types.size() != 1 + (rowCounts ? 1 : 0))
    return parser.emitError(parser.getCurrentLocation())
           << "expected the type of the tensor" << (rowCounts ? " and of the row counts" : "");
  if (parser.resolveOperand(target, types[0], result.operands) ||
      (holder && parser.resolveOperand(*holder, builder.getIndexType(), result.operands)) ||
      (rowCounts && parser.resolveOperand(*rowCounts, types[1], result.operands)))
    return failure();
  props.operandSegmentSizes = {1, holder ? 1 : 0, rowCounts ? 1 : 0};
  if (parser.parseOptionalAttrDictWithKeyword(result.attributes) ||
      parser.parseRegion(*result.addRegion(), coordinates))
    return failure();
  return success();
}

void TileGridOp::print(OpAsmPrinter &printer) {
  printer << " (";
  llvm::interleaveComma(getBodyBlock().getArguments(), printer);
  printer << ") over " << getTarget();
  if (Value holder = getHolder())
    printer << " held_by " << holder;
  if (getGlobal())
    printer << " global";
  printer << " tiles [";
  llvm::interleaveComma(getTileSizes(), printer, [&](int64_t size) {
    if (ShapedType::isDynamic(size))
      printer << ':';
    else
      printer << size;
  });
  printer << ']';
  if (Value rowCounts = getRowCounts())
    printer << " rows " << rowCounts;
  if (std::optional<TileOrderAttr> order = getOrder()) {
    printer << " order ";
    printer.printStrippedAttrOrType(*order);
  }
  if (getMasked())
    printer << " masked";
  if (std::optional<MeshAxis> axis = getDistribute())
    printer << " distribute " << stringifyMeshAxis(*axis);
  printer << " : " << getTarget().getType();
  if (Value rowCounts = getRowCounts())
    printer << ", " << rowCounts.getType();
  printer.printOptionalAttrDictWithKeyword((*this)->getAttrs(), getAttributeNames());
  printer << ' ';
  printer.printRegion(getBody(), /*printEntryBlockArgs=*/false);
}

Dim TileGridOp::getTileExtent(int64_t d) {
  int64_t size = getTileSizes()[d];
  if (!ShapedType::isDynamic(size))
    return {size, nullptr};
  return resolvedDim(*this, getTargetType(), d, /*local=*/!getGlobal());
}

LogicalResult TileGridOp::verify() {
  DistTensorType target = getTargetType();
  int64_t rank = target.getRank();
  if (getBodyBlock().getNumArguments() != rank)
    return emitOpError() << "over a rank-" << rank << " tensor takes " << rank
                         << " tile coordinates, got " << getBodyBlock().getNumArguments();
  if (static_cast<int64_t>(getTileSizes().size()) != rank)
    return emitOpError() << "needs one tile size per dim of its rank-" << rank << " tensor, got "
                         << getTileSizes().size();
  for (auto [d, size] : llvm::enumerate(getTileSizes())) {
    if (ShapedType::isDynamic(size))
      continue;
    if (size < 1)
      return emitOpError() << "has tile size " << size << " on dim " << d
                           << "; tile sizes must be positive";
    if (getMasked())
      continue;
    // Tiles are numbered shard by shard along a sharded dim, so every shard must hold whole ones.
    if (std::optional<ShardSplit> split =
            target.getPlacement().shardsDim(d) ? resolvedSplit(*this, target, d) : std::nullopt) {
      if (split->base() % size == 0 && (split->even() || size == 1))
        continue;
      int64_t whole = split->parts * size, below = split->extent / whole * whole;
      InFlightDiagnostic diag = emitOpError()
                                << "tile size " << size << " does not divide the shards of dim "
                                << d << " (" << split->extent << " over " << split->parts
                                << " ranks: shards of " << split->largest()
                                << (split->even() ? "" : " and " + std::to_string(split->base()))
                                << "); declare 'masked' to allow partial tiles, or use a "
                                   "multiple of "
                                << whole;
      if (below)
        diag << " (" << below << " or " << below + whole << ")";
      return diag;
    }
    int64_t extent = resolvedDim(*this, target, d, /*local=*/!getGlobal()).extent;
    if (ShapedType::isDynamic(extent) || extent % size == 0)
      continue;
    return emitOpError() << "tile size " << size << " does not divide dim " << d << " (extent "
                         << extent << "); declare 'masked' to allow a partial last tile";
  }
  if (getHolder() && (!target.getPlacement().isSharded() || getGlobal()))
    return emitOpError() << "visits the shard held by another rank, so its tensor must be sharded "
                            "and the grid not global";
  if (Value rowCounts = getRowCounts()) {
    auto counts = cast<DistTensorType>(rowCounts.getType());
    if (counts.getRank() != 1 || !counts.getElementType().isSignlessInteger())
      return emitOpError() << "takes row counts as a rank-1 integer tensor, got " << counts;
    if (rank < 3)
      return emitOpError() << "bounds rows by counts per index of dim 0, which needs a tensor of "
                              "rank 3 or more";
    if (failed(verifyDimsMatch(*this, counts.getDim(0), target.getDim(0),
                               "row counts and dim 0 of the tensor")))
      return failure();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Compute ops
//===----------------------------------------------------------------------===//

LogicalResult LoadOp::verify() {
  Access access{getSource().getType(), getIndices().size(), getWholeDims()};
  return failure(
      failed(verifyTileAccess(*this, "source", access, getResult().getType())) ||
      failed(verifySameElementType(*this, getResult().getType(), access.type, "source")));
}

LogicalResult StoreOp::verify() {
  Access access{getDest().getType(), getIndices().size(), getWholeDims()};
  return failure(
      failed(verifyTileAccess(*this, "destination", access, getValue().getType())) ||
      failed(verifySameElementType(*this, getValue().getType(), access.type, "destination")));
}

/// The dim an operand of mk.matmul contracts: its only `:`, on one of its last two dims.
static FailureOr<int64_t> contractedDim(MatmulOp op, StringRef what, const Access &access) {
  if (failed(verifyAccess(op, what, access)))
    return failure();
  if (access.rank() < 2)
    return op.emitOpError() << "needs an " << what << " of rank 2 or more";
  if (access.wholeDims.size() != 1 || access.wholeDims[0] < access.rank() - 2)
    return op.emitOpError() << "must mark the contracted dim of its " << what
                            << " with ':' on one of its last two dims";
  return access.wholeDims[0];
}

LogicalResult MatmulOp::verify() {
  Access lhs{getLhs().getType(), getLhsIndices().size(), getLhsWholeDims()};
  Access rhs{getRhs().getType(), getRhsIndices().size(), getRhsWholeDims()};
  FailureOr<int64_t> lhsK = contractedDim(*this, "lhs", lhs);
  FailureOr<int64_t> rhsK = contractedDim(*this, "rhs", rhs);
  if (failed(lhsK) || failed(rhsK))
    return failure();

  TileType result = getResult().getType();
  if (result.getRank() != 2)
    return emitOpError() << "produces a rank-2 tile, not " << result;
  if (!result.getElementType().isF32())
    return emitOpError() << "accumulates in f32, not " << result.getElementType()
                         << "; convert the result to store another dtype";
  Type lhsElement = lhs.type.getElementType(), rhsElement = rhs.type.getElementType();
  if (lhsElement != rhsElement || !isa<FloatType>(lhsElement))
    return emitOpError() << "needs float operands of one dtype, got " << lhsElement << " and "
                         << rhsElement;
  if (failed(verifyDimsMatch(*this, lhs.type.getDim(*lhsK), rhs.type.getDim(*rhsK),
                             "contracted dims of lhs and rhs")))
    return failure();

  auto shardAxis = [](const Access &access, int64_t d) -> std::optional<MeshAxis> {
    PlacementAttr placement = access.type.getPlacement();
    if (placement.shardsDim(d))
      return placement.getAxis();
    return std::nullopt;
  };
  std::optional<MeshAxis> lhsAxis = shardAxis(lhs, *lhsK), rhsAxis = shardAxis(rhs, *rhsK);
  if (lhsAxis != rhsAxis) {
    auto describe = [](std::optional<MeshAxis> axis) {
      return axis ? ("sharded over " + stringifyMeshAxis(*axis)).str() : std::string("not sharded");
    };
    return emitOpError() << "contracts a dim that is " << describe(lhsAxis) << " in the lhs but "
                         << describe(rhsAxis) << " in the rhs; both must hold the same slice";
  }

  // The last step may run past the contracted extent (zero-filled), not past an mma's k-step.
  if (std::optional<int64_t> kTile = getKTile(); kTile && *kTile % 16 != 0)
    return emitOpError() << "k_tile " << *kTile
                         << " is not a multiple of 16, the depth of one mma step";
  // Split-K's parts meet in a buffer of f32 slots and a flag a tile, given together.
  if (bool(getPartials()) != bool(getArrivals()) || (getPartials() && !getKSplits()))
    return emitOpError() << "takes partials and arrivals together, and only with k_splits";
  if (getPartials() && !getPartials().getType().getElementType().isF32())
    return emitOpError() << "sums its split-K parts in f32: partials of "
                         << getPartials().getType().getElementType();
  if (FlatSymbolRefAttr arrivals = getArrivalsAttr();
      arrivals && !SymbolTable::lookupNearestSymbolFrom<FlagsOp>(*this, arrivals))
    return emitOpError() << "counts its split-K parts on " << arrivals
                         << ", which is not an mk.flags of the program";
  return success();
}

LogicalResult ConvertOp::verify() {
  if (!sameDims(getSource().getType(), getResult().getType()))
    return emitOpError() << "changes the dtype only; the shapes differ: " << getSource().getType()
                         << " vs " << getResult().getType();
  return success();
}

LogicalResult BroadcastOp::verify() {
  TileType source = getSource().getType(), result = getResult().getType();
  if (source.getRank() != 1 || result.getRank() != 2)
    return emitOpError() << "broadcasts a rank-1 tile to a rank-2 tile";
  if (getDim() > 1)
    return emitOpError() << "inserts dim 0 or 1, not " << getDim();
  if (source.getElementType() != result.getElementType())
    return emitOpError() << "keeps the dtype: " << source.getElementType() << " vs "
                         << result.getElementType();
  return verifyDimsMatch(*this, source.getDim(0), result.getDim(1 - getDim()),
                         "the source dim and the kept result dim");
}

LogicalResult ReduceOp::verify() {
  TileType source = getSource().getType(), result = getResult().getType();
  if (source.getRank() != 2 || result.getRank() != 1)
    return emitOpError() << "reduces a rank-2 tile to a rank-1 tile";
  if (getDim() > 1)
    return emitOpError() << "reduces dim 0 or 1, not " << getDim();
  if (source.getElementType() != result.getElementType())
    return emitOpError() << "keeps the dtype: " << source.getElementType() << " vs "
                         << result.getElementType();
  return verifyDimsMatch(*this, source.getDim(1 - getDim()), result.getDim(0),
                         "the kept source dim and the result dim");
}

LogicalResult SplatOp::verify() {
  if (getValue().getType() != getResult().getType().getElementType())
    return emitOpError() << "dtype mismatch: a " << getValue().getType() << " scalar cannot fill "
                         << getResult().getType();
  return success();
}

LogicalResult ShapeSymbolOp::verify() {
  auto program = (*this)->getParentOfType<ProgramOp>();
  if (!program)
    return emitOpError() << "reads a shape symbol, so it must be inside an mk.program";
  std::optional<int64_t> value = program.lookupShapeSymbol(getSymbol());
  if (!value)
    return emitOpError() << "reads shape symbol '" << getSymbol() << "', which @"
                         << program.getSymName() << " does not declare";
  auto integer = dyn_cast<IntegerType>(getType());
  if (integer && !ShapedType::isDynamic(*value) && integer.getWidth() < 64 &&
      *value >= (int64_t(1) << (integer.getWidth() - 1)))
    return emitOpError() << "reads '" << getSymbol() << "' = " << *value << " into " << getType()
                         << ", which cannot hold it";
  return success();
}

LogicalResult AttentionBlockOp::verify() {
  TileType q = getQ().getType(), k = getK().getType(), v = getV().getType();
  TileType acc = getAcc().getType(), rowMax = getRowMax().getType();
  for (TileType tile : {q, k, v, acc})
    if (tile.getRank() != 2)
      return emitOpError() << "needs rank-2 q, k, v and accumulator tiles, got " << tile;
  if (rowMax.getRank() != 1)
    return emitOpError() << "keeps its row max and row sum in rank-1 tiles, got " << rowMax;
  if (q.getElementType() != k.getElementType() || q.getElementType() != v.getElementType())
    return emitOpError() << "needs q, k and v of one dtype";
  if (!acc.getElementType().isF32() || !rowMax.getElementType().isF32())
    return emitOpError() << "keeps its running state in f32";
  if (failed(verifyDimsMatch(*this, q.getDim(1), k.getDim(1), "query and key head dims")) ||
      failed(verifyDimsMatch(*this, k.getDim(0), v.getDim(0), "key and value block lengths")) ||
      failed(
          verifyDimsMatch(*this, acc.getDim(0), q.getDim(0), "accumulator rows and query rows")) ||
      failed(
          verifyDimsMatch(*this, acc.getDim(1), v.getDim(1), "accumulator and value head dims")) ||
      failed(
          verifyDimsMatch(*this, rowMax.getDim(0), q.getDim(0), "row statistics and query rows")))
    return failure();
  if (!getPositions().empty() && getPositions().size() != 2)
    return emitOpError() << "takes two positions (query tile, key tile), got "
                         << getPositions().size();
  if (getCausal() && getPositions().empty())
    return emitOpError() << "is causal, so it needs the query and key tile coordinates: add "
                            "'at (%qi, %kj)'";
  return success();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// A collective's result, when it has one, is its combined tile: the value's type.
template <typename OpT> static LogicalResult verifyCombinedResult(OpT op) {
  if (op.getResult() && op.getResult().getType() != op.getValue().getType())
    return op.emitOpError() << "gives the combined tile, of the value's type "
                            << op.getValue().getType() << ", not " << op.getResult().getType();
  return success();
}

LogicalResult AllReduceOp::verify() {
  if (failed(verifyCombinedResult(*this)))
    return failure();
  Access access{getDest().getType(), getIndices().size(), getWholeDims()};
  if (failed(verifyTileAccess(*this, "destination", access, getValue().getType())) ||
      failed(verifySameElementType(*this, getValue().getType(), access.type, "destination")))
    return failure();
  PlacementAttr placement = access.type.getPlacement();
  if (placement.getKind() == PlacementKind::replicated)
    return success();
  // Reducing over part of the mesh leaves the other part with different results.
  if (getAxis() != MeshAxis::world && (placement.getKind() == PlacementKind::symmetric ||
                                       (placement.isSharded() && placement.getAxis() != getAxis() &&
                                        placement.getAxis() != MeshAxis::world)))
    return success();
  return emitOpError() << "leaves every rank of " << stringifyMeshAxis(getAxis())
                       << " with the result, so its destination must be replicated, not "
                       << placement.str() << "; use mk.reduce_scatter for a sharded one";
}

LogicalResult ReduceScatterOp::verify() {
  if (failed(verifyCombinedResult(*this)))
    return failure();
  Access access{getDest().getType(), getIndices().size(), getWholeDims()};
  if (failed(verifyTileAccess(*this, "destination", access, getValue().getType())) ||
      failed(verifySameElementType(*this, getValue().getType(), access.type, "destination")))
    return failure();
  if (!access.type.getPlacement().isSharded())
    return emitOpError() << "leaves the result on the rank that holds the tile, so its "
                            "destination must be sharded; use mk.all_reduce for a replicated one";
  return success();
}

LogicalResult AllGatherOp::verify() {
  DistTensorType source = getSource().getType(), result = getResult().getType();
  if (!source.getPlacement().isSharded())
    return emitOpError() << "gathers the shards of a sharded tensor, not of " << source;
  if (result.getPlacement().getKind() != PlacementKind::replicated)
    return emitOpError() << "produces a replicated tensor, not " << result;
  if (!sameDims(source, result) || source.getElementType() != result.getElementType())
    return emitOpError() << "keeps shape and dtype: " << source << " vs " << result;
  if (std::optional<ArrayRef<int64_t>> chunk = getChunk()) {
    if (static_cast<int64_t>(chunk->size()) != source.getRank() ||
        llvm::any_of(*chunk, [](int64_t c) { return c < 1; }))
      return emitOpError() << "needs a positive chunk extent per dim";
  }
  return success();
}

LogicalResult RingShiftOp::verifyRegions() {
  for (auto [i, shard] : llvm::enumerate(getShards().getTypes())) {
    PlacementAttr placement = cast<DistTensorType>(shard).getPlacement();
    if (!placement.isSharded() || placement.getAxis() != getAxis())
      return emitOpError() << "moves shards over " << stringifyMeshAxis(getAxis())
                           << ", but shard #" << i << " is " << shard;
  }
  Block &body = getBody().front();
  size_t expected = 1 + getShards().size() + getInits().size();
  if (body.getNumArguments() != expected)
    return emitOpError() << "body takes the source index, the shards and the loop-carried values ("
                         << expected << " arguments), got " << body.getNumArguments();
  if (!body.getArgument(0).getType().isIndex())
    return emitOpError() << "body's first argument is the source index, of type index";
  SmallVector<Type> args = llvm::to_vector(llvm::drop_begin(body.getArgumentTypes()));
  ArrayRef<Type> shardArgs = ArrayRef(args).take_front(getShards().size());
  ArrayRef<Type> carriedArgs = ArrayRef(args).drop_front(getShards().size());
  if (!llvm::equal(shardArgs, getShards().getTypes()))
    return emitOpError() << "body's shard arguments must have the types of the shards";
  if (!llvm::equal(carriedArgs, getInits().getTypes()))
    return emitOpError()
           << "body's loop-carried arguments must have the types of the initial values";
  if (!llvm::equal(getResultTypes(), getInits().getTypes()))
    return emitOpError() << "results must have the types of the initial values";
  auto yield = cast<YieldOp>(body.getTerminator());
  if (!llvm::equal(yield.getValues().getTypes(), getInits().getTypes()))
    return yield.emitOpError() << "must pass values of the loop-carried types to the next step";
  return success();
}

LogicalResult DispatchOp::verify() {
  DistTensorType tokens = getTokens().getType(), experts = getExperts().getType();
  DistTensorType routed = getRouted().getType(), counts = getCounts().getType(),
                 origins = getOrigins().getType();
  if (tokens.getRank() != 2 || experts.getRank() != 2 || routed.getRank() != 3 ||
      counts.getRank() != 1 || origins.getRank() != 2)
    return emitOpError() << "takes tokens [T, H] and experts [T, top_k] and produces routed rows "
                            "[E, C, H], counts [E] and origins [E, C]";
  PlacementAttr placement = tokens.getPlacement();
  if (!placement.shardsDim(0))
    return emitOpError() << "takes tokens sharded along dim 0, not " << tokens;
  for (DistTensorType other : {experts, routed, counts, origins})
    if (other.getPlacement() != placement)
      return emitOpError() << "needs all of its tensors placed like the tokens (" << placement.str()
                           << "), not " << other;
  for (DistTensorType index : {experts, counts, origins})
    if (!index.getElementType().isInteger(32))
      return emitOpError() << "carries routing metadata as i32, not " << index.getElementType();
  if (routed.getElementType() != tokens.getElementType())
    return emitOpError() << "dtype mismatch: tokens are " << tokens.getElementType()
                         << " but routed rows are " << routed.getElementType();
  return failure(
      failed(verifyDimsMatch(*this, tokens.getDim(0), experts.getDim(0), "token counts")) ||
      failed(verifyDimsMatch(*this, tokens.getDim(1), routed.getDim(2), "hidden sizes")) ||
      failed(verifyDimsMatch(*this, routed.getDim(0), counts.getDim(0), "expert counts")) ||
      failed(verifyDimsMatch(*this, routed.getDim(0), origins.getDim(0), "expert counts")) ||
      failed(verifyDimsMatch(*this, routed.getDim(1), origins.getDim(1), "capacities")));
}

LogicalResult CombineOp::verify() {
  TileType value = getValue().getType();
  DistTensorType dest = getDest().getType(), origins = getOrigins().getType(),
                 weights = getWeights().getType();
  if (value.getRank() != 2 || dest.getRank() != 2 || origins.getRank() != 2 ||
      weights.getRank() != 2)
    return emitOpError() << "takes a rank-2 tile, a destination [T, H], origins [E, C] and weights "
                            "[T, top_k]";
  if (getCoords().size() != 3)
    return emitOpError() << "takes the tile's coordinates [expert, row tile, column tile], got "
                         << getCoords().size();
  if (!origins.getElementType().isInteger(32))
    return emitOpError() << "takes origins as i32, not " << origins.getElementType();
  if (!isa<FloatType>(weights.getElementType()) || !isa<FloatType>(dest.getElementType()))
    return emitOpError() << "needs float weights and a float destination";
  if (!dest.getPlacement().shardsDim(0))
    return emitOpError() << "returns rows to the ranks holding their tokens, so its destination "
                            "must be sharded along dim 0, not "
                         << dest;
  return verifyDimsMatch(*this, dest.getDim(0), weights.getDim(0),
                         "token counts of destination and weights");
}

LogicalResult ShardRangeOp::verify() {
  if (!getTensor().getType().getPlacement().isSharded())
    return emitOpError() << "needs a sharded tensor, not " << getTensor().getType();
  return success();
}

LogicalResult SequenceTileOp::verify() {
  DistTensorType type = getTensor().getType();
  PlacementAttr placement = type.getPlacement();
  if (!placement.isSharded())
    return emitOpError() << "needs a sharded tensor, not " << type;
  auto program = (*this)->getParentOfType<ProgramOp>();
  if (!placement.getZigzag() || !program || !program.getMesh().isBound())
    return success();
  int64_t extent = program.resolve(type.getDim(placement.getDim()));
  if (ShapedType::isDynamic(extent))
    return success();
  int64_t chunks = 2 * program.getMesh().getAxisSize(placement.getAxis());
  int64_t whole = chunks * static_cast<int64_t>(getTile());
  if (extent % whole == 0)
    return success();
  InFlightDiagnostic diag = emitOpError()
                            << "places dim " << placement.getDim() << " (" << extent
                            << ") zigzag in " << chunks << " chunks, which must be whole tiles of "
                            << getTile() << ": use a multiple of " << whole;
  if (int64_t below = extent / whole * whole)
    diag << " (" << below << " or " << below + whole << ")";
  return diag;
}

//===----------------------------------------------------------------------===//
// Scheduled level
//===----------------------------------------------------------------------===//

LogicalResult RoleOp::verify() {
  if (!getPool())
    return success();
  // Its tiles are claimed one by one and the other roles' CTAs join it: one grid, no work tied to
  // particular CTAs, one such role a program.
  Block &body = getBody().front();
  if (!llvm::hasSingleElement(body) || !isa<TileGridOp>(body.front()))
    return emitOpError() << "is a pool, whose body must be a single mk.tile_grid (its tiles are "
                            "claimed at run time by any CTA)";
  for (RoleOp other : (*this)->getParentOp()->getRegion(0).getOps<RoleOp>())
    if (other != *this && other.getPool())
      return emitOpError() << "is a pool beside another: a program has one at most";
  return success();
}

LogicalResult FlagsOp::verify() {
  if (getShape().empty() || llvm::any_of(getShape(), [](int64_t e) { return e < 1; }))
    return emitOpError() << "needs a non-empty shape of positive extents";
  return success();
}

/// The flags array `symbol` names, checked against the number of indices used.
static LogicalResult verifyFlagsUse(Operation *op, SymbolTableCollection &symbolTable,
                                    FlatSymbolRefAttr symbol, size_t numIndices) {
  auto flags = symbolTable.lookupNearestSymbolFrom<FlagsOp>(op, symbol);
  if (!flags)
    return op->emitOpError() << "names " << symbol << ", which is not an mk.flags array";
  if (flags.getShape().size() != numIndices)
    return op->emitOpError() << "indexes " << symbol << " with " << numIndices
                             << " indices, but it has rank " << flags.getShape().size();
  return success();
}

LogicalResult SignalOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyFlagsUse(*this, symbolTable, getFlagsAttr(), getIndices().size());
}

LogicalResult SignalOp::verify() {
  if (getStamp() && getScope() == PeerScope::node)
    return emitOpError() << "stamps a flag on another node, which the proxy only counts; a stamp "
                            "reaches this rank or a GPU of this node";
  return verifyPeer(*this, getScope(), getPeer(), getLink());
}

LogicalResult WaitOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyFlagsUse(*this, symbolTable, getFlagsAttr(), getIndices().size());
}

/// The program's roles of `kind`.
static SmallVector<RoleOp> rolesOf(Operation *op, RoleKind kind) {
  SmallVector<RoleOp> roles;
  if (auto program = op->getParentOfType<ProgramOp>())
    for (RoleOp role : program.getBodyBlock().getOps<RoleOp>())
      if (role.getKind() == kind)
        roles.push_back(role);
  return roles;
}

LogicalResult WaitOp::verify() {
  std::optional<RoleKind> kind = getPerCtaOf();
  if (kind && rolesOf(*this, *kind).empty())
    return emitOpError() << "counts arrivals per CTA of the " << stringifyRoleKind(*kind)
                         << " role, which the program does not have";
  return success();
}

LogicalResult EngineCopyOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  for (auto [symbol, index] :
       {std::pair{getWaitAttr(), getWaitIndex()}, std::pair{getSignalAttr(), getSignalIndex()}}) {
    auto flags = symbolTable.lookupNearestSymbolFrom<FlagsOp>(*this, symbol);
    if (!flags)
      return emitOpError() << "names " << symbol << ", which is not an mk.flags array";
    int64_t words = 1;
    for (int64_t extent : flags.getShape())
      words *= extent;
    if (index >= words)
      return emitOpError() << "uses flag " << index << " of " << symbol << ", which has " << words;
  }
  return success();
}

LogicalResult EngineCopyOp::verify() {
  DistTensorType type = getTensor().getType();
  if (type.getRank() != 2 || !type.hasStaticShape())
    return emitOpError() << "copies a block of a tensor that is not a matrix of static shape";
  for (auto [what, range, extent] : {std::tuple{"rows", getRows(), type.getShape()[0]},
                                     std::tuple{"cols", getCols(), type.getShape()[1]}})
    if (range.size() != 2 || range[0] < 0 || range[0] >= range[1] || range[1] > extent)
      return emitOpError() << "copies " << what << " [" << range << "], not a range within the "
                           << extent << " " << what << " of the tensor";
  PlacementKind placement = type.getPlacement().getKind();
  if (placement != PlacementKind::replicated && placement != PlacementKind::symmetric)
    return emitOpError() << "copies a tensor that is not replicated or symmetric: a GPU's copy "
                            "must be where the other GPU's is";
  auto program = (*this)->getParentOfType<ProgramOp>();
  int64_t gpus = program.getMesh().getGpus();
  if (getFrom() == getTo() || getFrom() >= gpus || getTo() >= gpus)
    return emitOpError() << "copies from GPU " << getFrom() << " to GPU " << getTo()
                         << ": two different GPUs of a node of " << gpus;
  return success();
}

LogicalResult PutOp::verify() {
  Access access{getDest().getType(), getIndices().size(), getWholeDims()};
  if (failed(verifyTileAccess(*this, "destination", access, getValue().getType())) ||
      failed(verifySameElementType(*this, getValue().getType(), access.type, "destination")))
    return failure();
  if (std::optional<ReduceKind> combine = getCombine()) {
    Type element = access.type.getElementType();
    if (*combine != ReduceKind::sum)
      return emitOpError() << "combines with " << stringifyReduceKind(*combine)
                           << "; a put combines only by sum";
    if (!(element.isBF16() || element.isF16() || element.isF32()))
      return emitOpError() << "adds into " << element
                           << " where the memory is, which takes bf16, f16 or f32";
    if (getScope() == PeerScope::node)
      return emitOpError() << "adds into another node's memory, which the proxy cannot; combine "
                              "within the node";
  }
  return verifyPeer(*this, getScope(), getPeer(), getLink());
}

LogicalResult CopyOp::verify() {
  Access source{getSource().getType(), getSourceIndices().size(), getSourceWholeDims()};
  Access dest{getDest().getType(), getDestIndices().size(), getDestWholeDims()};
  if (failed(verifyAccess(*this, "source", source)) ||
      failed(verifyAccess(*this, "destination", dest)))
    return failure();
  if (source.type.getElementType() != dest.type.getElementType())
    return emitOpError() << "dtype mismatch: copies " << source.type.getElementType() << " into "
                         << dest.type.getElementType();
  int64_t tileRank = getTile().size();
  if (tileRank < 1 || tileRank > std::min(source.rank(), dest.rank()) ||
      llvm::any_of(getTile(), [](int64_t e) { return e < 1; }))
    return emitOpError()
           << "needs a tile of positive extents over the trailing dims of both tensors";
  return verifyPeer(*this, getScope(), getPeer(), getLink());
}

LogicalResult AccumulateOp::verify() {
  Access access{getSource().getType(), getIndices().size(), getWholeDims()};
  if (failed(verifyTileAccess(*this, "source", access, getResult().getType(),
                              /*wholeLeadingDims=*/1)))
    return failure();
  if (!isa<FloatType>(getResult().getType().getElementType()))
    return emitOpError() << "accumulates into a float tile, not " << getResult().getType();
  return success();
}

LogicalResult OwnerOp::verify() {
  DistTensorType tensor = getTensor().getType();
  if (static_cast<int64_t>(getIndices().size()) != tensor.getRank() ||
      static_cast<int64_t>(getTile().size()) != tensor.getRank())
    return emitOpError() << "needs a coordinate and a tile extent per dim of " << tensor;
  if (getRowSlices() && (tensor.getPlacement().isSharded() || tensor.getRank() < 2))
    return emitOpError() << "deals row slices of a tensor every rank holds whole, of rank 2 or "
                            "more, not "
                         << tensor;
  return success();
}

//===----------------------------------------------------------------------===//
// Point-to-point routing
//===----------------------------------------------------------------------===//

/// Whether `type`, routing metadata, holds i32.
static LogicalResult verifyRoutingIndex(Operation *op, DistTensorType type, StringRef what) {
  if (!type.getElementType().isInteger(32))
    return op->emitOpError() << "carries " << what << " as i32, not " << type.getElementType();
  return success();
}

/// A census: [W, E] i32, every rank its own copy, which peers write.
static LogicalResult verifyCensus(Operation *op, DistTensorType census) {
  if (census.getRank() != 2 || census.getPlacement().getKind() != PlacementKind::symmetric)
    return op->emitOpError() << "takes the census as a symmetric [ranks, E] tensor, not " << census;
  if (failed(verifyRoutingIndex(op, census, "the census")))
    return failure();
  auto program = op->getParentOfType<ProgramOp>();
  if (!program || !program.getMesh().isBound())
    return success();
  int64_t ranks = program.resolve(census.getDim(0));
  int64_t world = program.getMesh().getWorldSize();
  if (!ShapedType::isDynamic(ranks) && ranks != world)
    return op->emitOpError() << "takes a census of " << ranks << " rows, but the mesh has " << world
                             << " ranks: a row a rank";
  return success();
}

/// Tokens' metadata ([T, K] or [T, H]) placed as the tokens are: sharded along dim 0.
static LogicalResult verifyTokenSharded(Operation *op, DistTensorType type, StringRef what) {
  if (type.getRank() != 2 || !type.getPlacement().shardsDim(0))
    return op->emitOpError() << "takes " << what << " as a rank-2 tensor sharded along dim 0, not "
                             << type;
  return success();
}

LogicalResult RouteCensusOp::verify() {
  DistTensorType experts = getExperts().getType(), census = getCensus().getType();
  if (failed(verifyTokenSharded(*this, experts, "the experts")) ||
      failed(verifyRoutingIndex(*this, experts, "expert indices")))
    return failure();
  return verifyCensus(*this, census);
}

LogicalResult RouteCountsOp::verify() {
  DistTensorType census = getCensus().getType(), counts = getCounts().getType();
  if (failed(verifyCensus(*this, census)))
    return failure();
  if (counts.getRank() != 1 || !counts.getPlacement().shardsDim(0))
    return emitOpError() << "fills counts [E] sharded along dim 0, not " << counts;
  if (failed(verifyRoutingIndex(*this, counts, "row counts")))
    return failure();
  return verifyDimsMatch(*this, census.getDim(1), counts.getDim(0), "expert counts");
}

LogicalResult RouteRowsOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyFlagsUse(*this, symbolTable, getArrivalsAttr(), 1);
}

/// Rows packed for or received from other nodes: [N T_r, ...] of rank 2, symmetric.
static LogicalResult verifyNodeRegions(Operation *op, DistTensorType type, StringRef what) {
  if (type.getRank() != 2 || type.getPlacement().getKind() != PlacementKind::symmetric)
    return op->emitOpError() << "takes " << what
                             << " as a symmetric rank-2 tensor of a region a node, not " << type;
  return success();
}

/// A count a node: [N] i32, symmetric.
static LogicalResult verifyNodeCounts(Operation *op, DistTensorType type, StringRef what) {
  if (type.getRank() != 1 || type.getPlacement().getKind() != PlacementKind::symmetric)
    return op->emitOpError() << "takes " << what << " as a symmetric [N] tensor, not " << type;
  return verifyRoutingIndex(op, type, what);
}

LogicalResult RouteRowsOp::verify() {
  DistTensorType tokens = getTokens().getType(), experts = getExperts().getType(),
                 census = getCensus().getType(), routed = getRouted().getType(),
                 origins = getOrigins().getType(), placement = getPlacement().getType();
  bool forwarded = static_cast<bool>(getSource());
  if (forwarded != static_cast<bool>(getCount()) || forwarded != static_cast<bool>(getCountIndex()))
    return emitOpError() << "names the source node and its count together";
  auto verifyRows = [&](DistTensorType type, StringRef what) {
    return forwarded ? verifyNodeRegions(*this, type, what) : verifyTokenSharded(*this, type, what);
  };
  if (forwarded && failed(verifyNodeCounts(*this, getCount().getType(), "the token counts")))
    return failure();
  if (failed(verifyRows(tokens, "the tokens")) || failed(verifyRows(experts, "the experts")) ||
      failed(verifyRows(placement, "the placements")) ||
      failed(verifyRoutingIndex(*this, experts, "expert indices")) ||
      failed(verifyRoutingIndex(*this, placement, "placements")) ||
      failed(verifyCensus(*this, census)))
    return failure();
  if (routed.getRank() != 3 || !routed.getPlacement().shardsDim(0) || origins.getRank() != 2 ||
      origins.getPlacement() != routed.getPlacement())
    return emitOpError() << "fills routed rows [E, C, H] and origins [E, C], sharded along dim 0 "
                            "alike, not "
                         << routed << " and " << origins;
  if (failed(verifyRoutingIndex(*this, origins, "origins")))
    return failure();
  if (routed.getElementType() != tokens.getElementType())
    return emitOpError() << "dtype mismatch: tokens are " << tokens.getElementType()
                         << " but routed rows are " << routed.getElementType();
  return failure(
      failed(verifyDimsMatch(*this, tokens.getDim(0), experts.getDim(0), "token counts")) ||
      (!forwarded &&
       failed(verifyDimsMatch(*this, experts.getDim(0), placement.getDim(0), "token counts"))) ||
      failed(verifyDimsMatch(*this, experts.getDim(1), placement.getDim(1), "top-k")) ||
      failed(verifyDimsMatch(*this, tokens.getDim(1), routed.getDim(2), "hidden sizes")) ||
      failed(verifyDimsMatch(*this, census.getDim(1), routed.getDim(0), "expert counts")) ||
      failed(verifyDimsMatch(*this, routed.getDim(0), origins.getDim(0), "expert counts")) ||
      failed(verifyDimsMatch(*this, routed.getDim(1), origins.getDim(1), "capacities")));
}

LogicalResult ReturnRowsOp::verify() {
  TileType value = getValue().getType();
  DistTensorType origins = getOrigins().getType(), counts = getCounts().getType(),
                 returned = getReturned().getType();
  if (value.getRank() != 2 || getCoords().size() != 3)
    return emitOpError() << "takes a rank-2 tile and its coordinates [expert, row tile, column "
                            "tile]";
  if (origins.getRank() != 2 || counts.getRank() != 1)
    return emitOpError() << "takes origins [E, C] and counts [E]";
  if (failed(verifyRoutingIndex(*this, origins, "origins")) ||
      failed(verifyRoutingIndex(*this, counts, "row counts")))
    return failure();
  if (returned.getRank() != 3 || (!returned.getPlacement().shardsDim(0) &&
                                  returned.getPlacement().getKind() != PlacementKind::symmetric))
    return emitOpError() << "returns rows into a [T, K, H] tensor sharded along dim 0 (or "
                            "symmetric, across nodes), not "
                         << returned;
  if (returned.getElementType() != value.getElementType())
    return emitOpError() << "dtype mismatch: the tile is " << value.getElementType()
                         << " but the returned rows are " << returned.getElementType();
  return verifyDimsMatch(*this, origins.getDim(0), counts.getDim(0), "expert counts");
}

LogicalResult CombineReturnedOp::verify() {
  DistTensorType returned = getReturned().getType(), placement = getPlacement().getType(),
                 weights = getWeights().getType(), dest = getDest().getType();
  if (returned.getRank() != 3 || placement.getRank() != 2 || weights.getRank() != 2 ||
      dest.getRank() != 2)
    return emitOpError() << "takes returned rows [T, K, H], placements and weights [T, K] and a "
                            "destination [T, H]";
  if (getIndices().size() != 2 || getTile().size() != 2)
    return emitOpError() << "needs the destination tile's coordinates and extents";
  if (failed(verifyRoutingIndex(*this, placement, "placements")))
    return failure();
  if (!isa<FloatType>(weights.getElementType()) || !isa<FloatType>(dest.getElementType()))
    return emitOpError() << "needs float weights and a float destination";
  if (TypedValue<DistTensorType> at = getReturnAt()) {
    if (returned.getPlacement().getKind() != PlacementKind::symmetric)
      return emitOpError() << "finds results through `at` in a symmetric [rows, K, H] tensor, "
                              "not "
                           << returned;
    if (failed(verifyRoutingIndex(*this, at.getType(), "return rows")) ||
        failed(verifyDimsMatch(*this, at.getType().getDim(0), dest.getDim(0), "token counts")) ||
        failed(verifyDimsMatch(*this, at.getType().getDim(1), placement.getDim(1), "top-k")))
      return failure();
  } else if (failed(verifyDimsMatch(*this, returned.getDim(0), dest.getDim(0), "token counts")) ||
             failed(verifyDimsMatch(*this, returned.getDim(1), placement.getDim(1), "top-k"))) {
    return failure();
  }
  return verifyDimsMatch(*this, returned.getDim(2), dest.getDim(1), "hidden sizes");
}

LogicalResult RoutePackOp::verify() {
  DistTensorType tokens = getTokens().getType(), experts = getExperts().getType(),
                 pack = getPack().getType(), packExperts = getPackExperts().getType(),
                 returnAt = getReturnAt().getType();
  if (failed(verifyTokenSharded(*this, tokens, "the tokens")) ||
      failed(verifyTokenSharded(*this, experts, "the experts")) ||
      failed(verifyTokenSharded(*this, returnAt, "the return rows")) ||
      failed(verifyRoutingIndex(*this, experts, "expert indices")) ||
      failed(verifyRoutingIndex(*this, returnAt, "return rows")) ||
      failed(verifyRoutingIndex(*this, packExperts, "expert indices")) ||
      failed(verifyNodeRegions(*this, pack, "the packed rows")) ||
      failed(verifyNodeRegions(*this, packExperts, "the packed experts")) ||
      failed(verifyNodeCounts(*this, getPacked().getType(), "the packed counts")))
    return failure();
  if (pack.getElementType() != tokens.getElementType())
    return emitOpError() << "dtype mismatch: tokens are " << tokens.getElementType()
                         << " but packed rows are " << pack.getElementType();
  return failure(
      failed(verifyDimsMatch(*this, tokens.getDim(0), experts.getDim(0), "token counts")) ||
      failed(verifyDimsMatch(*this, experts.getDim(0), returnAt.getDim(0), "token counts")) ||
      failed(verifyDimsMatch(*this, experts.getDim(1), returnAt.getDim(1), "top-k")) ||
      failed(verifyDimsMatch(*this, experts.getDim(1), packExperts.getDim(1), "top-k")) ||
      failed(verifyDimsMatch(*this, tokens.getDim(1), pack.getDim(1), "hidden sizes")) ||
      failed(verifyDimsMatch(*this, pack.getDim(0), packExperts.getDim(0), "packed regions")));
}

LogicalResult SendRowsOp::verify() {
  DistTensorType source = getSource().getType(), dest = getDest().getType();
  for (auto [type, what] : {std::pair{source, "source"}, std::pair{dest, "destination"}})
    if (type.getPlacement().getKind() != PlacementKind::symmetric)
      return emitOpError() << "sends between symmetric tensors, and its " << what << " is " << type;
  if (source.getElementType() != dest.getElementType())
    return emitOpError() << "dtype mismatch: sends " << source.getElementType() << " into "
                         << dest.getElementType();
  if (source.getRank() != dest.getRank())
    return emitOpError() << "sends slices of " << source << " into slices of another shape, "
                         << dest;
  for (int64_t d = 1; d < source.getRank(); ++d)
    if (failed(verifyDimsMatch(*this, source.getDim(d), dest.getDim(d), "slice shapes")))
      return failure();
  if (static_cast<bool>(getCount()) != static_cast<bool>(getCountIndex()))
    return emitOpError() << "reads its count at an index of a tensor";
  if (TypedValue<DistTensorType> count = getCount()) {
    if (count.getType().getRank() != 1)
      return emitOpError() << "reads its count from a rank-1 tensor, not " << count.getType();
    if (failed(verifyRoutingIndex(*this, count.getType(), "its count")))
      return failure();
  }
  if (getScope() == PeerScope::self)
    return emitOpError() << "sends to a peer: a GPU of this node or another node";
  return verifyPeer(*this, getScope(), getPeer(), getLink());
}
