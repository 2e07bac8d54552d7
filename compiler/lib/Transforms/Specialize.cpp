//===- Specialize.cpp - bind shape symbols, topology and rank -------------===//

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
    for (auto [symbol, value] : llvm::zip(symbols.getAsValueRange<StringAttr>(), values))
      if (ShapedType::isDynamic(value))
        return program.emitError() << "shape symbol '" << symbol << "' of @" << program.getSymName()
                                   << " is not bound; give shapes=" << symbol << "=VALUE";
    program.setShapeValues(values);
    return success();
  }
};

} // namespace
