//===- Specialize.cpp - bind shape symbols, topology and rank -------------===//

#include "TileAccess.h"
#include "mk/Transforms/Passes.h"

#include "mlir/IR/AttrTypeSubElements.h"
#include "llvm/ADT/StringExtras.h"

namespace mlir::mk {
#define GEN_PASS_DEF_MKSPECIALIZE
#include "mk/Transforms/Passes.h.inc"
} // namespace mlir::mk

using namespace mlir;
using namespace mlir::mk;

namespace {

/// Parses "NODESxGPUS" with both at least 1.
std::optional<std::pair<int64_t, int64_t>> parseTopology(StringRef text) {
  auto [nodes, gpus] = text.split('x');
  int64_t n, g;
  if (nodes.getAsInteger(10, n) || gpus.getAsInteger(10, g) || n < 1 || g < 1)
    return std::nullopt;
  return std::make_pair(n, g);
}

/// The values an index takes, where it is a monotone function of one loop index (constants,
/// and sums, differences, products and quotients of one variable and a constant): exact there,
/// so that an index found past its tensor is past it for some tile. std::nullopt elsewhere.
struct IndexRange {
  int64_t lo, hi;
};

std::optional<IndexRange> rangeOf(Value value) {
  if (auto argument = dyn_cast<BlockArgument>(value)) {
    Operation *owner = argument.getOwner()->getParentOp();
    if (auto grid = dyn_cast<TileGridOp>(owner)) {
      // Along a dim the grid's target does not shard (a shard's tiles are the rank's business).
      DistTensorType target = grid.getTargetType();
      int64_t d = argument.getArgNumber();
      Dim tile = grid.getTileExtent(d);
      if (target.getPlacement().shardsDim(d) || !tile.isKnown() ||
          ShapedType::isDynamic(target.getShape()[d]))
        return std::nullopt;
      return IndexRange{
          0, static_cast<int64_t>(llvm::divideCeil(target.getShape()[d], tile.extent)) - 1};
    }
    if (auto loop = dyn_cast<scf::ForOp>(owner); loop && argument == loop.getInductionVar()) {
      std::optional<IndexRange> lb = rangeOf(loop.getLowerBound()),
                                ub = rangeOf(loop.getUpperBound());
      if (!lb || !ub || lb->lo != lb->hi || ub->lo != ub->hi || ub->lo <= lb->lo)
        return std::nullopt;
      return IndexRange{lb->lo, ub->lo - 1};
    }
    return std::nullopt;
  }
  Operation *op = value.getDefiningOp();
  if (auto constant = dyn_cast<arith::ConstantIndexOp>(op))
    return IndexRange{constant.value(), constant.value()};
  if (op->getNumOperands() != 2)
    return std::nullopt;
  std::optional<IndexRange> a = rangeOf(op->getOperand(0)), b = rangeOf(op->getOperand(1));
  if (!a || !b || (a->lo != a->hi && b->lo != b->hi))
    return std::nullopt;
  // One of them is a constant c.
  bool constantRight = b->lo == b->hi;
  int64_t c = constantRight ? b->lo : a->lo;
  IndexRange x = constantRight ? *a : *b;
  if (isa<arith::AddIOp>(op))
    return IndexRange{x.lo + c, x.hi + c};
  if (isa<arith::SubIOp>(op) && constantRight)
    return IndexRange{x.lo - c, x.hi - c};
  if (isa<arith::MulIOp>(op) && c >= 0)
    return IndexRange{x.lo * c, x.hi * c};
  if (isa<arith::DivSIOp, arith::DivUIOp, arith::FloorDivSIOp>(op) && constantRight && c > 0 &&
      x.lo >= 0)
    return IndexRange{x.lo / c, x.hi / c};
  return std::nullopt;
}

/// Refuses an index of a tile that runs past its tensor's tiles (a wrong K/V head of grouped
/// queries whose H is not a multiple of Hkv), or whose arithmetic divides by zero.
LogicalResult checkTileIndices(ProgramOp program) {
  WalkResult walk = program.walk([&](Operation *op) {
    if (isa<arith::DivSIOp, arith::DivUIOp, arith::FloorDivSIOp, arith::CeilDivSIOp, arith::RemSIOp,
            arith::RemUIOp>(op))
      if (std::optional<IndexRange> divisor = rangeOf(op->getOperand(1));
          divisor && divisor->lo == 0 && divisor->hi == 0) {
        op->emitOpError() << "divides by zero with the program's shapes";
        return WalkResult::interrupt();
      }
    SmallVector<TileAccess> accesses = readsOf(op);
    accesses.append(writesOf(op));
    for (const TileAccess &access : accesses) {
      auto type = cast<DistTensorType>(access.tensor.getType());
      for (int64_t d = 0; d < type.getRank(); ++d) {
        Value index = access.indexOf(d);
        int64_t extent = type.getShape()[d];
        if (!index || type.getPlacement().shardsDim(d) || ShapedType::isDynamic(extent) ||
            access.extents[d] <= 0)
          continue;
        auto tiles = static_cast<int64_t>(llvm::divideCeil(extent, access.extents[d]));
        std::optional<IndexRange> range = rangeOf(index);
        if (range && (range->lo < 0 || range->hi >= tiles)) {
          op->emitOpError() << "takes tile " << (range->lo < 0 ? range->lo : range->hi)
                            << " of dim " << d << ", which has " << tiles << " (" << extent
                            << " in tiles of " << access.extents[d]
                            << "): a tile's index stays in its tensor";
          return WalkResult::interrupt();
        }
      }
    }
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

struct SpecializePass : mk::impl::MkSpecializeBase<SpecializePass> {
  using MkSpecializeBase::MkSpecializeBase;

  void runOnOperation() override {
    ProgramOp program = getOperation();
    if (failed(bindMesh(program)) || failed(bindShapes(program)))
      return signalPassFailure();

    if (rank >= 0)
      program.setRankAttr(IntegerAttr::get(IntegerType::get(&getContext(), 64), rank));

    // Every type that names a shape symbol now gets its value.
    AttrTypeReplacer replacer;
    replacer.addReplacement([&](SymbolicShapeType type) -> std::optional<Type> {
      if (llvm::all_of(type.getSymbols(), [](StringAttr s) { return !s; }))
        return std::nullopt;
      SmallVector<int64_t> shape;
      for (int64_t d = 0; d < type.getRank(); ++d)
        shape.push_back(program.resolve(type.getDim(d)));
      return type.cloneWithDims(shape, SmallVector<StringAttr>(shape.size()));
    });
    replacer.recursivelyReplaceElementsIn(program, /*replaceAttrs=*/true, /*replaceLocs=*/false,
                                          /*replaceTypes=*/true);

    program.walk([&](ShapeSymbolOp op) {
      int64_t value = *program.lookupShapeSymbol(op.getSymbol());
      OpBuilder b(op);
      TypedAttr constant = isa<FloatType>(op.getType())
                               ? TypedAttr(b.getFloatAttr(op.getType(), static_cast<double>(value)))
                               : TypedAttr(b.getIntegerAttr(op.getType(), value));
      op.replaceAllUsesWith(arith::ConstantOp::create(b, op.getLoc(), constant).getResult());
      op.erase();
    });
    if (failed(checkTileIndices(program)))
      return signalPassFailure();
  }

  LogicalResult bindMesh(ProgramOp program) {
    MeshAttr mesh = program.getMesh();
    if (!topology.empty()) {
      std::optional<std::pair<int64_t, int64_t>> bound = parseTopology(topology);
      if (!bound)
        return program.emitError()
               << "topology '" << topology << "' is not NODESxGPUS with both at least 1, e.g. 2x4";
      auto [nodes, gpus] = *bound;
      auto conflicts = [](int64_t have, int64_t want) {
        return !ShapedType::isDynamic(have) && have != want;
      };
      if (conflicts(mesh.getNodes(), nodes) || conflicts(mesh.getGpus(), gpus))
        return program.emitError() << "@" << program.getSymName() << " runs on " << mesh
                                   << ", not on topology " << topology;
      mesh = MeshAttr::getChecked([&] { return program.emitError(); }, &getContext(), nodes, gpus);
      if (!mesh)
        return failure();
      program.setMeshAttr(mesh);
    }
    if (!mesh.isBound())
      return program.emitError() << "the topology of @" << program.getSymName()
                                 << " is not bound; give topology=NODESxGPUS";
    // -1 leaves the rank open.
    if (rank < -1 || rank >= mesh.getWorldSize())
      return program.emitError() << "rank " << static_cast<int64_t>(rank)
                                 << " does not exist on topology " << mesh.getNodes() << "x"
                                 << mesh.getGpus();
    return success();
  }

  LogicalResult bindShapes(ProgramOp program) {
    ArrayAttr symbols = program.getShapeSymbols();
    SmallVector<int64_t> values(program.getShapeValues());
    for (const std::string &binding : shapes) {
      auto [name, text] = StringRef(binding).split('=');
      int64_t value;
      if (text.getAsInteger(10, value) || value < 1)
        return program.emitError()
               << "shape binding '" << binding << "' is not NAME=VALUE with a positive VALUE";
      auto it = llvm::find_if(symbols.getAsValueRange<StringAttr>(),
                              [&](StringRef symbol) { return symbol == name; });
      if (it == symbols.getAsValueRange<StringAttr>().end())
        return program.emitError()
               << "'" << name << "' is not a shape symbol of @" << program.getSymName()
               << " (it declares [" << llvm::join(symbols.getAsValueRange<StringAttr>(), ", ")
               << "])";
      int64_t &bound = values[std::distance(symbols.getAsValueRange<StringAttr>().begin(), it)];
      if (!ShapedType::isDynamic(bound) && bound != value)
        return program.emitError() << "shape symbol '" << name << "' of @" << program.getSymName()
                                   << " is " << bound << ", not " << value;
      bound = value;
    }
    for (auto [i, symbol, value] : llvm::enumerate(symbols.getAsValueRange<StringAttr>(), values))
      if (StringRef fallback = program.getShapeDefault(i);
          ShapedType::isDynamic(value) && !fallback.empty())
        value = values[std::distance(symbols.getAsValueRange<StringAttr>().begin(),
                                     llvm::find(symbols.getAsValueRange<StringAttr>(), fallback))];
    for (auto [symbol, value] : llvm::zip(symbols.getAsValueRange<StringAttr>(), values))
      if (ShapedType::isDynamic(value))
        return program.emitError() << "shape symbol '" << symbol << "' of @" << program.getSymName()
                                   << " is not bound; give shapes=" << symbol << "=VALUE";
    program.setShapeValues(values);
    return success();
  }
};

} // namespace
