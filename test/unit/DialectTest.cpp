// Unit tests of the mk dialect's C++ API: attributes, types, dims, and verification of programs
// built from text, including the library programs.

#include "mk/IR/MkOps.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <string>
#include <vector>

using namespace mlir;
using namespace mlir::mk;

namespace {

/// A context with the mk dialect that records every diagnostic instead of printing it.
struct Fixture {
  MLIRContext context;
  std::vector<std::string> diagnostics;
  ScopedDiagnosticHandler handler{&context, [this](Diagnostic &diagnostic) {
                                    diagnostics.push_back(diagnostic.str());
                                    return success();
                                  }};

  Fixture() { context.loadDialect<MkDialect, arith::ArithDialect, scf::SCFDialect>(); }

  OwningOpRef<ModuleOp> parse(const std::string &source) {
    return parseSourceString<ModuleOp>(source, &context);
  }
  auto emitter() {
    return [this] { return emitError(UnknownLoc::get(&context)); };
  }
  StringAttr symbol(StringRef name) { return StringAttr::get(&context, name); }
};

} // namespace

TEST_CASE("mesh axis sizes", "[attr]") {
  Fixture f;
  auto mesh = MeshAttr::get(&f.context, int64_t{2}, int64_t{4});
  CHECK(mesh.isBound());
  CHECK(mesh.getWorldSize() == 8);
  CHECK(mesh.getAxisSize(MeshAxis::nodes) == 2);
  CHECK(mesh.getAxisSize(MeshAxis::gpus) == 4);

  auto unbound = MeshAttr::get(&f.context, ShapedType::kDynamic, int64_t{4});
  CHECK_FALSE(unbound.isBound());
  CHECK(ShapedType::isDynamic(unbound.getWorldSize()));
  CHECK(unbound.getAxisSize(MeshAxis::gpus) == 4);

  CHECK_FALSE(MeshAttr::getChecked(f.emitter(), &f.context, int64_t{1}, int64_t{0}));
  REQUIRE(f.diagnostics.size() == 1);
  CHECK(f.diagnostics[0] == "a mesh needs at least one node and one GPU per node, got 1x0");
}

TEST_CASE("placements are canonical", "[attr]") {
  Fixture f;
  CHECK(PlacementAttr::get(&f.context, 1, MeshAxis::gpus).str() == "shard 1 over gpus");
  CHECK(PlacementAttr::get(&f.context, PlacementKind::symmetric).str() == "symmetric");
  CHECK(PlacementAttr::get(&f.context, PlacementKind::shard, 2, MeshAxis::world, true).str() ==
        "shard 2 over world zigzag");
  // Only the C++ API can give a replicated placement a dim; the parser cannot.
  CHECK_FALSE(PlacementAttr::getChecked(f.emitter(), &f.context, PlacementKind::replicated,
                                        int64_t{1}, MeshAxis::world, false));
  REQUIRE(f.diagnostics.size() == 1);
  CHECK(f.diagnostics[0] == "only a sharded placement has a dim and an axis");
}

TEST_CASE("only a swizzle order has a group", "[attr]") {
  Fixture f;
  CHECK(
      TileOrderAttr::getChecked(f.emitter(), &f.context, TileOrderKind::swizzle, int64_t{8}, true));
  CHECK_FALSE(TileOrderAttr::getChecked(f.emitter(), &f.context, TileOrderKind::row_major,
                                        int64_t{8}, false));
  REQUIRE(f.diagnostics.size() == 1);
  CHECK(f.diagnostics[0] == "only a swizzle order has a group");
}

TEST_CASE("dims compare and print", "[type]") {
  Fixture f;
  Dim m{ShapedType::kDynamic, f.symbol("M")};
  Dim boundM{4096, f.symbol("M")};
  Dim n{ShapedType::kDynamic, f.symbol("N")};
  Dim k4096{4096, nullptr}, k512{512, nullptr};

  CHECK(compareDims(m, m) == DimRelation::equal);
  CHECK(compareDims(m, n) == DimRelation::unknown); // M and N may be bound to one value
  CHECK(compareDims(m, k4096) == DimRelation::unknown);
  CHECK(compareDims(boundM, k4096) == DimRelation::equal);
  CHECK(compareDims(boundM, k512) == DimRelation::different);
  CHECK(formatDim(m) == "M");
  CHECK(formatDim(boundM) == "M = 4096");
  CHECK(formatDim(k512) == "512");
}

TEST_CASE("tensor types know the extent one rank holds", "[type]") {
  Fixture f;
  auto bf16 = BFloat16Type::get(&f.context);
  auto mesh = MeshAttr::get(&f.context, int64_t{2}, int64_t{4});
  auto world =
      DistTensorType::get({8192, 4096}, bf16, PlacementAttr::get(&f.context, 1, MeshAxis::world));
  auto gpus = world.withPlacement(PlacementAttr::get(&f.context, 0, MeshAxis::gpus));
  auto replicated = world.withPlacement(PlacementAttr::get(&f.context, PlacementKind::replicated));

  CHECK(world.getLocalExtent(0, mesh) == 8192);
  CHECK(world.getLocalExtent(1, mesh) == 512);
  CHECK(gpus.getLocalExtent(0, mesh) == 2048);
  CHECK(replicated.getLocalExtent(1, mesh) == 4096);
  CHECK(ShapedType::isDynamic(
      world.getLocalExtent(1, MeshAttr::get(&f.context, ShapedType::kDynamic, int64_t{4}))));
}

TEST_CASE("types reject inconsistent dims built from C++", "[type]") {
  Fixture f;
  Type f32 = Float32Type::get(&f.context);
  auto replicated = PlacementAttr::get(&f.context, PlacementKind::replicated);
  StringAttr symbols[] = {f.symbol("M")};
  ArrayRef<StringAttr> oneSymbol(symbols);

  CHECK_FALSE(DistTensorType::getChecked(f.emitter(), &f.context, ArrayRef<int64_t>{4, 4},
                                         oneSymbol, f32, replicated));
  CHECK_FALSE(
      TileType::getChecked(f.emitter(), &f.context, ArrayRef<int64_t>{128}, oneSymbol, f32));
  REQUIRE(f.diagnostics.size() == 2);
  CHECK(f.diagnostics[0] == "expected one symbol entry per dim");
  CHECK(f.diagnostics[1] == "dim 0 must be either a static extent or a shape symbol");

  auto tile =
      cast<TileType>(TileType::get({128, 256}, f32)
                         .cloneWithDims({128, ShapedType::kDynamic}, {nullptr, f.symbol("D")}));
  CHECK(formatDim(tile.getDim(1)) == "D");
  CHECK(tile.withElementType(BFloat16Type::get(&f.context)).getElementType().isBF16());
}

TEST_CASE("a sharded dim splits as torch.tensor_split splits it", "[verify]") {
  // Any extent over any mesh up to 4x8 verifies; the first extent % ranks shards hold one more.
  for (int nodes : {1, 2, 3, 4})
    for (int gpus : {1, 2, 4, 8})
      for (int extent : {1, 96, 128, 1000, 4096}) {
        Fixture f;
        std::string source = fmt::format("mk.program @p [] mesh <{}x{}> (%a: !mk.tensor<[{}, 64], "
                                         "bf16, shard 0 over world>) {{}}",
                                         nodes, gpus, extent);
        INFO(source);
        CHECK(static_cast<bool>(f.parse(source)));
        CHECK(f.diagnostics.empty());
        ShardSplit split{extent, nodes * gpus};
        int64_t held = 0;
        for (int64_t s = 0; s < split.parts; ++s) {
          CHECK(split.startOf(s) == held);
          CHECK(split.extentOf(s) == (extent + split.parts - 1 - s) / split.parts);
          held += split.extentOf(s);
        }
        CHECK(held == extent);
        CHECK(split.largest() == split.extentOf(0));
      }
}

TEST_CASE("the library programs verify and have the expected structure", "[library]") {
  struct Expected {
    const char *file;
    int tileGrids;
    int matmuls;
    int collectives;
  };
  for (Expected e :
       {Expected{"allreduce.mlir", 1, 0, 1}, Expected{"gemm_allreduce.mlir", 1, 1, 1},
        Expected{"gemm_reducescatter.mlir", 1, 1, 1}, Expected{"allgather_gemm.mlir", 1, 1, 1},
        Expected{"ring_attention.mlir", 1, 0, 1}, Expected{"ring_attention_causal.mlir", 1, 0, 1},
        Expected{"ring_attention_gqa.mlir", 1, 0, 1},
        Expected{"ring_attention_gqa_causal.mlir", 1, 0, 1},
        Expected{"ring_attention_zigzag.mlir", 1, 0, 1},
        Expected{"moe_dispatch_gemm_combine.mlir", 2, 3, 2}}) {
    Fixture f;
    INFO(e.file);
    OwningOpRef<ModuleOp> module =
        parseSourceFile<ModuleOp>(fmt::format("{}/{}", MKC_LIB_DIR, e.file), &f.context);
    REQUIRE(module);
    CHECK(f.diagnostics.empty());
    auto programs = llvm::to_vector(module->getOps<ProgramOp>());
    REQUIRE(programs.size() == 1);
    int grids = 0, matmuls = 0, collectives = 0;
    programs[0].walk([&](Operation *op) {
      grids += isa<TileGridOp>(op);
      matmuls += isa<MatmulOp>(op);
      collectives +=
          isa<AllReduceOp, ReduceScatterOp, AllGatherOp, RingShiftOp, DispatchOp, CombineOp>(op);
    });
    CHECK(grids == e.tileGrids);
    CHECK(matmuls == e.matmuls);
    CHECK(collectives == e.collectives);
    CHECK_FALSE(programs[0].getMesh().isBound());
  }
}
