// Unit tests of mk-sim's meaning of programs, each against a computation written out here: the
// reference's GEMM + AllReduce, GEMM + ReduceScatter and ring attention (causal and not) against
// plain loops over the global tensors, expert routing, and bf16 rounding; and the grouped walk
// (mk/grouped_walk.h) that generated kernels share with mk-sim, over one-expert, empty and uneven
// counts. The scheduled machine is compared with this reference, so the reference itself must be
// right.

#include "Reference.h"
#include "Semantics.h"

#include "mk/Pipeline.h"
#include "mk/grouped_walk.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <tuple>

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::sim;

namespace {

struct Fixture {
  DialectRegistry registry;
  std::unique_ptr<MLIRContext> context;
  std::vector<std::string> diagnostics;

  Fixture() {
    registerPipelineDialects(registry);
    context = std::make_unique<MLIRContext>(registry);
    context->loadAllAvailableDialects();
  }

  /// The library program `name`, specialized and tiled for `topology` and `shapes`.
  OwningOpRef<ModuleOp> program(const std::string &name, const std::string &topology,
                                std::vector<std::string> shapes) {
    std::ifstream file(std::string(MKC_LIB_DIR) + "/" + name + ".mlir");
    std::stringstream text;
    text << file.rdbuf();
    OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(text.str(), context.get());
    REQUIRE(module);
    PipelineOptions options;
    options.topology = topology;
    options.shapes = std::move(shapes);
    PassManager pm(context.get());
    buildTilePipeline(pm, options);
    REQUIRE(succeeded(pm.run(*module)));
    return module;
  }
};

ProgramOp first(ModuleOp module) { return *module.getOps<ProgramOp>().begin(); }

/// A global tensor of `type` with random bf16 values, and every rank's part of it.
struct Global {
  std::vector<int64_t> shape;
  std::vector<float> values;
  float at(std::initializer_list<int64_t> coords) const {
    int64_t offset = 0;
    auto d = shape.begin();
    for (int64_t c : coords)
      offset = offset * *d++ + c;
    return values[offset];
  }
};

Global random(DistTensorType type, std::mt19937 &rng) {
  Global g{std::vector<int64_t>(type.getShape().begin(), type.getShape().end()), {}};
  int64_t n = 1;
  for (int64_t e : g.shape)
    n *= e;
  std::uniform_real_distribution<float> value(-1, 1);
  for (int64_t i = 0; i < n; ++i)
    g.values.push_back(roundTo(type.getElementType(), value(rng)));
  return g;
}

TensorData partOf(const Global &global, DistTensorType type, MeshAttr mesh,
                  const TileNumbering &numbering, int64_t rank) {
  TensorData part(Layout::of(type, mesh, numbering, rank / mesh.getGpus(), rank % mesh.getGpus()),
                  NAN);
  part.layout.held().forEach([&](ArrayRef<int64_t> at) {
    int64_t offset = 0;
    for (size_t d = 0; d < at.size(); ++d)
      offset = offset * global.shape[d] + at[d];
    part.at(at) = global.values[offset];
  });
  return part;
}

/// Every rank's arguments: random inputs, NaN outputs (the arguments in `outputs`).
RankArguments arguments(ProgramOp program, std::vector<Global> &globals,
                        std::vector<int64_t> outputs) {
  std::mt19937 rng(7);
  MeshAttr mesh = program.getMesh();
  Block &body = program.getBodyBlock();
  for (BlockArgument arg : body.getArguments())
    globals.push_back(random(cast<DistTensorType>(arg.getType()), rng));
  RankArguments ranks(mesh.getWorldSize());
  TileNumbering numbering = TileNumbering::of(program);
  for (int64_t r = 0; r < mesh.getWorldSize(); ++r)
    for (BlockArgument arg : body.getArguments()) {
      auto type = cast<DistTensorType>(arg.getType());
      ranks[r].push_back(partOf(globals[arg.getArgNumber()], type, mesh, numbering, r));
      if (llvm::is_contained(outputs, int64_t(arg.getArgNumber())))
        std::fill(ranks[r].back().data.begin(), ranks[r].back().data.end(), NAN);
    }
  return ranks;
}

/// The largest difference between rank `r`'s argument `a` and `want(coords)`, over what it holds.
double maxError(const ReferenceResult &result, int64_t r, int64_t a,
                llvm::function_ref<double(ArrayRef<int64_t>)> want) {
  const TensorData &got = result.arguments[r][a];
  double worst = 0;
  got.layout.held().forEach(
      [&](ArrayRef<int64_t> at) { worst = std::max(worst, std::fabs(got.at(at) - want(at))); });
  return worst;
}

} // namespace

TEST_CASE("bf16 rounds to nearest even", "[simulate]") {
  CHECK(roundTo(Precision::bf16, 1.0f + 0x1p-8f) == 1.0f); // a tie, to even
  CHECK(roundTo(Precision::bf16, 1.0f + 0x1p-8f + 0x1p-12f) == 1.0f + 0x1p-7f);
  CHECK(roundTo(Precision::bf16, 1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f); // a tie, to even
  CHECK(std::isnan(roundTo(Precision::bf16, NAN)));
  CHECK(roundTo(Precision::integer, -2.7f) == -2.0f);
}

TEST_CASE("routing fills each expert's slots in token order, up to the capacity", "[simulate]") {
  // Tokens 0..3, top 2: expert 1 gets three copies, one past its capacity of 2.
  std::vector<int64_t> experts = {1, 0, 1, 2, 0, 1, 2, 0};
  Routing routing = route(experts, /*numExperts=*/3, /*capacity=*/2);
  CHECK(routing.counts == std::vector<int64_t>{2, 2, 2});
  CHECK(routing.origins[1] == std::vector<int64_t>{0, 2});
  CHECK(routing.origins[0] == std::vector<int64_t>{1, 4});
  CHECK(routing.placement[5] == -1); // token 2's copy to expert 1 is dropped
  CHECK(routing.placement[0] == 1 * 2 + 0);
  CHECK(routing.placement[7] == -1); // expert 0 is full by token 3
}

TEST_CASE("a grouped walk visits each tile of the rows there are once", "[simulate]") {
  // Kernels and mk-sim walk row-bounded grids with this one definition: every tile of a group's
  // rows (at most the capacity; a negative count is none), each once, whatever the band.
  const std::vector<std::vector<int>> patterns = {{0, 0, 0, 1, 0, 0, 0, 0},
                                                  {1, 0, 0, 0, 0, 0, 0, 0},
                                                  {0, 0, 0, 0, 0, 0, 0, 1},
                                                  {300, 0, 129, 7, -3, 0, 1000, 128},
                                                  {0, 0, 0, 0}};
  for (const std::vector<int> &counts : patterns)
    for (int col_tiles : {1, 8, 16})
      for (int band : {1, 4}) {
        const ::mk::GroupedWalk walk{
            counts.data(), static_cast<int>(counts.size()), 512, 128, col_tiles, band};
        std::set<std::tuple<int, int, int>> seen;
        for (long long p = 0; p < walk.positions(); ++p) {
          const ::mk::GroupedTile tile = walk.at(p);
          INFO("position " << p << " of " << walk.positions());
          REQUIRE(tile.row < walk.row_tiles(tile.group));
          REQUIRE(tile.col < col_tiles);
          REQUIRE(seen.emplace(tile.group, tile.row, tile.col).second);
        }
        long long expected = 0;
        for (int count : counts)
          expected += (std::clamp(count, 0, 512) + 127) / 128 * col_tiles;
        CHECK(walk.positions() == expected);
        CHECK(static_cast<long long>(seen.size()) == expected);
        // Past the end (a position no CTA should take) it names no tile, dividing by no zero.
        CHECK(walk.at(walk.positions()).row == -1);
        CHECK(walk.at(walk.positions() + 3).col == -1);
      }
}

TEST_CASE("the reference's GEMM + AllReduce is the global product on every rank", "[simulate]") {
  Fixture f;
  for (std::string topology : {"1x2", "2x2"}) {
    OwningOpRef<ModuleOp> module =
        f.program("gemm_allreduce", topology, {"M=200", "N=136", "K=128"});
    ProgramOp program = first(*module);
    std::vector<Global> g;
    FailureOr<ReferenceResult> result = evaluateReference(program, arguments(program, g, {2}));
    REQUIRE(succeeded(result));
    for (int64_t r = 0; r < program.getMesh().getWorldSize(); ++r) {
      double error = maxError(*result, r, 2, [&](ArrayRef<int64_t> at) {
        double sum = 0;
        for (int64_t k = 0; k < 128; ++k)
          sum += double(g[0].at({at[0], k})) * g[1].at({k, at[1]});
        return sum;
      });
      CHECK(error < 0.1); // bf16 partials and sum, of about 10: a missed partial is off by 3
      CHECK(std::all_of(result->written[r][2].begin(), result->written[r][2].end(),
                        [](bool w) { return w; }));
    }
  }
}

TEST_CASE("the reference's GEMM + ReduceScatter leaves each rank its rows of the product",
          "[simulate]") {
  Fixture f;
  OwningOpRef<ModuleOp> module = f.program("gemm_reducescatter", "2x1", {"M=256", "N=128", "K=64"});
  ProgramOp program = first(*module);
  std::vector<Global> g;
  FailureOr<ReferenceResult> result = evaluateReference(program, arguments(program, g, {2}));
  REQUIRE(succeeded(result));
  for (int64_t r = 0; r < 2; ++r) {
    CHECK(result->arguments[r][2].layout.first[0] == 128 * r);
    double error = maxError(*result, r, 2, [&](ArrayRef<int64_t> at) {
      double sum = 0;
      for (int64_t k = 0; k < 64; ++k)
        sum += double(g[0].at({at[0], k})) * g[1].at({k, at[1]});
      return sum;
    });
    CHECK(error < 0.1);
  }
}

TEST_CASE("the reference's ring attention is softmax attention over the whole sequence",
          "[simulate]") {
  Fixture f;
  for (bool causal : {false, true}) {
    OwningOpRef<ModuleOp> module = f.program(causal ? "ring_attention_causal" : "ring_attention",
                                             "1x2", {"B=1", "H=2", "S=256", "D=64"});
    ProgramOp program = first(*module);
    std::vector<Global> g;
    FailureOr<ReferenceResult> result = evaluateReference(program, arguments(program, g, {3}));
    REQUIRE(succeeded(result));
    const Global &q = g[0], &k = g[1], &v = g[2];
    for (int64_t r = 0; r < 2; ++r) {
      double error = maxError(*result, r, 3, [&](ArrayRef<int64_t> at) {
        int64_t b = at[0], h = at[1], i = at[2], d = at[3];
        std::vector<double> scores;
        double top = -INFINITY;
        for (int64_t j = 0; j < 256; ++j) {
          double s = 0;
          for (int64_t e = 0; e < 64; ++e)
            s += double(q.at({b, h, i, e})) * k.at({b, h, j, e});
          s = causal && j > i ? -INFINITY : s / 8.0;
          scores.push_back(s);
          top = std::max(top, s);
        }
        double sum = 0, out = 0;
        for (int64_t j = 0; j < 256; ++j) {
          double p = std::exp(scores[j] - top);
          sum += p;
          out += p * v.at({b, h, j, d});
        }
        return out / sum;
      });
      CHECK(error < 0.01);
    }
  }
}
