//===- Semantics.cpp - the meaning of mk's compute ops --------------------===//

#include "Semantics.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <cstring>

using namespace mlir;
using namespace mlir::mk;
using namespace mlir::mk::sim;

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

Precision sim::precisionOf(Type type) {
  if (type.isBF16())
    return Precision::bf16;
  if (type.isF16())
    return Precision::f16;
  if (type.isInteger())
    return Precision::integer;
  return Precision::f32;
}

float sim::roundTo(Precision precision, float value) {
  switch (precision) {
  case Precision::f32:
    return value;
  case Precision::bf16: {
    if (std::isnan(value))
      return value;
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    bits += 0x7fff + ((bits >> 16) & 1);
    bits &= 0xffff0000u;
    std::memcpy(&value, &bits, 4);
    return value;
  }
  case Precision::f16:
    return static_cast<float>(static_cast<_Float16>(value));
  case Precision::integer:
    if (std::isnan(value))
      return value;
    return static_cast<float>(
        std::clamp(std::trunc(static_cast<double>(value)), -2147483648.0, 2147483647.0));
  }
  llvm_unreachable("unknown precision");
}

Tile::Tile(ArrayRef<int64_t> shape, Type element, float fill)
    : shape(shape.begin(), shape.end()), element(element), precision(precisionOf(element)) {
  int64_t n = 1;
  for (int64_t e : shape)
    n *= e;
  data.assign(n, fill);
}

void Tile::round() {
  if (precision == Precision::f32)
    return;
  for (float &v : data)
    v = roundTo(precision, v);
}

//===----------------------------------------------------------------------===//
// Pure ops
//===----------------------------------------------------------------------===//

namespace {

int64_t asInt(const SimValue &v) { return std::get<int64_t>(v); }
double asFloat(const SimValue &v) { return std::get<double>(v); }
const Tile &asTile(const SimValue &v) { return *std::get<TilePtr>(v); }

/// An integer result of `type`, wrapped to its width (index is 64 bits).
int64_t wrap(Type type, int64_t v) {
  unsigned width = type.isIndex() ? 64 : type.getIntOrFloatBitWidth();
  if (width >= 64)
    return v;
  if (width == 1)
    return v & 1;
  int64_t shift = 64 - width;
  return static_cast<int64_t>(static_cast<uint64_t>(v) << shift) >> shift;
}

uint64_t asUnsigned(Type type, int64_t v) {
  unsigned width = type.isIndex() ? 64 : type.getIntOrFloatBitWidth();
  return width >= 64 ? static_cast<uint64_t>(v) : static_cast<uint64_t>(v) & ((1ull << width) - 1);
}

bool compare(arith::CmpIPredicate p, Type type, int64_t a, int64_t b) {
  uint64_t ua = asUnsigned(type, a), ub = asUnsigned(type, b);
  switch (p) {
  case arith::CmpIPredicate::eq:
    return a == b;
  case arith::CmpIPredicate::ne:
    return a != b;
  case arith::CmpIPredicate::slt:
    return a < b;
  case arith::CmpIPredicate::sle:
    return a <= b;
  case arith::CmpIPredicate::sgt:
    return a > b;
  case arith::CmpIPredicate::sge:
    return a >= b;
  case arith::CmpIPredicate::ult:
    return ua < ub;
  case arith::CmpIPredicate::ule:
    return ua <= ub;
  case arith::CmpIPredicate::ugt:
    return ua > ub;
  case arith::CmpIPredicate::uge:
    return ua >= ub;
  }
  llvm_unreachable("unknown predicate");
}

/// Floor division, rounding toward negative infinity.
int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

std::optional<SimValue> evaluateArith(Operation *op, ArrayRef<SimValue> in) {
  Type type = op->getNumResults() ? op->getResult(0).getType() : Type();
  auto i = [&](size_t k) { return asInt(in[k]); };
  auto f = [&](size_t k) { return asFloat(in[k]); };
  auto integer = [&](int64_t v) -> SimValue { return wrap(type, v); };
  auto real = [&](double v) -> SimValue { return static_cast<double>(roundTo(type, v)); };
  return llvm::TypeSwitch<Operation *, std::optional<SimValue>>(op)
      .Case([&](arith::ConstantOp c) -> std::optional<SimValue> {
        if (auto v = dyn_cast<IntegerAttr>(c.getValue()))
          return integer(type.isIndex() ? v.getInt() : v.getValue().getSExtValue());
        if (auto v = dyn_cast<FloatAttr>(c.getValue()))
          return static_cast<double>(v.getValueAsDouble());
        return std::nullopt;
      })
      .Case([&](arith::AddIOp) { return integer(i(0) + i(1)); })
      .Case([&](arith::SubIOp) { return integer(i(0) - i(1)); })
      .Case([&](arith::MulIOp) { return integer(i(0) * i(1)); })
      .Case([&](arith::DivSIOp) { return integer(i(0) / i(1)); })
      .Case([&](arith::RemSIOp) { return integer(i(0) % i(1)); })
      .Case(
          [&](arith::DivUIOp) { return integer(asUnsigned(type, i(0)) / asUnsigned(type, i(1))); })
      .Case(
          [&](arith::RemUIOp) { return integer(asUnsigned(type, i(0)) % asUnsigned(type, i(1))); })
      .Case([&](arith::CeilDivSIOp) { return integer(-floorDiv(-i(0), i(1))); })
      .Case([&](arith::FloorDivSIOp) { return integer(floorDiv(i(0), i(1))); })
      .Case([&](arith::MinSIOp) { return integer(std::min(i(0), i(1))); })
      .Case([&](arith::MaxSIOp) { return integer(std::max(i(0), i(1))); })
      .Case([&](arith::MinUIOp) {
        return integer(asUnsigned(type, i(0)) < asUnsigned(type, i(1)) ? i(0) : i(1));
      })
      .Case([&](arith::MaxUIOp) {
        return integer(asUnsigned(type, i(0)) > asUnsigned(type, i(1)) ? i(0) : i(1));
      })
      .Case([&](arith::AndIOp) { return integer(i(0) & i(1)); })
      .Case([&](arith::OrIOp) { return integer(i(0) | i(1)); })
      .Case([&](arith::XOrIOp) { return integer(i(0) ^ i(1)); })
      .Case([&](arith::CmpIOp c) {
        return SimValue(int64_t(compare(c.getPredicate(), c.getLhs().getType(), i(0), i(1))));
      })
      .Case([&](arith::SelectOp) { return i(0) ? in[1] : in[2]; })
      .Case([&](arith::IndexCastOp) { return integer(i(0)); })
      .Case([&](arith::ExtSIOp) { return integer(i(0)); })
      .Case([&](arith::TruncIOp) { return integer(i(0)); })
      .Case([&](arith::AddFOp) { return real(f(0) + f(1)); })
      .Case([&](arith::SubFOp) { return real(f(0) - f(1)); })
      .Case([&](arith::MulFOp) { return real(f(0) * f(1)); })
      .Case([&](arith::DivFOp) { return real(f(0) / f(1)); })
      .Case([&](arith::NegFOp) { return real(-f(0)); })
      .Case([&](arith::SIToFPOp) { return real(static_cast<double>(i(0))); })
      .Case([&](arith::ExtFOp) { return real(f(0)); })
      .Case([&](arith::TruncFOp) { return real(f(0)); })
      .Default([](Operation *) { return std::nullopt; });
}

float activate(Activation kind, float x) {
  switch (kind) {
  case Activation::relu:
    return x > 0 ? x : 0;
  case Activation::gelu: // the tanh form, as the device library computes it
    return x / (1.0f + std::exp(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
  case Activation::silu:
    return x / (1.0f + std::exp(-x));
  }
  llvm_unreachable("unknown activation");
}

/// The elementary function of a unary op at x, in f32.
float elementary(Operation *op, float x) {
  return llvm::TypeSwitch<Operation *, float>(op)
      .Case([&](ExpOp) { return std::exp(x); })
      .Case([&](LogOp) { return std::log(x); })
      .Case([&](SqrtOp) { return std::sqrt(x); })
      .Case([&](RsqrtOp) { return 1.0f / std::sqrt(x); })
      .Case([&](ReciprocalOp) { return 1.0f / x; })
      .Case([&](TanhOp) { return std::tanh(x); })
      .Case([&](SigmoidOp) { return 1.0f / (1.0f + std::exp(-x)); })
      .Case([&](NegOp) { return -x; })
      .Case([&](AbsOp) { return std::fabs(x); });
}

TilePtr elementwise(const Tile &a, const Tile *b, Type element,
                    llvm::function_ref<float(float, float)> f) {
  auto out = std::make_shared<Tile>(a.shape, element);
  for (size_t k = 0; k < a.data.size(); ++k)
    out->data[k] = f(a.data[k], b ? b->data[k] : 0.0f);
  out->round();
  return out;
}

float reduce(ReduceKind kind, float acc, float v) {
  switch (kind) {
  case ReduceKind::sum:
    return acc + v;
  case ReduceKind::max:
    return std::max(acc, v);
  case ReduceKind::min:
    return std::min(acc, v);
  }
  llvm_unreachable("unknown reduction");
}

float identity(ReduceKind kind) {
  return kind == ReduceKind::sum   ? 0.0f
         : kind == ReduceKind::max ? -std::numeric_limits<float>::infinity()
                                   : std::numeric_limits<float>::infinity();
}

/// One step of online softmax: see mk.attention_block. A row whose every key is masked so far
/// keeps a running max of -inf and adds nothing.
SmallVector<SimValue> attentionBlock(AttentionBlockOp op, ArrayRef<SimValue> in,
                                     const AttentionRows<int64_t> &at) {
  const Tile &q = asTile(in[0]), &k = asTile(in[1]), &v = asTile(in[2]);
  const Tile &acc = asTile(in[3]), &rowMax = asTile(in[4]), &rowSum = asTile(in[5]);
  int64_t rows = q.rows(), keys = k.rows(), dim = q.cols(), width = v.cols();
  float scale = op.getScale() ? op.getScale()->convertToFloat() : 1.0f / std::sqrt(float(dim));
  auto newAcc = std::make_shared<Tile>(acc.shape, acc.element);
  auto newMax = std::make_shared<Tile>(rowMax.shape, rowMax.element);
  auto newSum = std::make_shared<Tile>(rowSum.shape, rowSum.element);
  const float minusInf = -std::numeric_limits<float>::infinity();
  std::vector<float> scores(keys);
  for (int64_t r = 0; r < rows; ++r) {
    float m = rowMax.data[r];
    for (int64_t c = 0; c < keys; ++c) {
      bool masked = c >= at.keys || (op.getCausal() && at.keyFirst + c > at.queryFirst + r);
      float s = 0;
      for (int64_t d = 0; d < dim; ++d)
        s += q.at(r, d) * k.at(c, d);
      scores[c] = masked ? minusInf : s * scale;
      m = std::max(m, scores[c]);
    }
    float alpha = m == minusInf ? 1.0f : std::exp(rowMax.data[r] - m);
    float l = rowSum.data[r] * alpha;
    for (int64_t d = 0; d < width; ++d)
      newAcc->at(r, d) = acc.at(r, d) * alpha;
    for (int64_t c = 0; c < keys; ++c) {
      float p = scores[c] == minusInf ? 0.0f : std::exp(scores[c] - m);
      l += p;
      for (int64_t d = 0; d < width; ++d)
        newAcc->at(r, d) += p * v.at(c, d);
    }
    newMax->data[r] = m;
    newSum->data[r] = l;
  }
  return {TilePtr(newAcc), TilePtr(newMax), TilePtr(newSum)};
}

} // namespace

std::optional<SmallVector<SimValue>> sim::evaluatePure(Operation *op, ArrayRef<SimValue> in,
                                                       const AttentionRows<int64_t> *rows) {
  if (op->getDialect() && op->getDialect()->getNamespace() == "arith") {
    if (std::optional<SimValue> v = evaluateArith(op, in))
      return SmallVector<SimValue>{*v};
    return std::nullopt;
  }
  auto one = [](TilePtr t) { return SmallVector<SimValue>{SimValue(std::move(t))}; };
  auto binary = [&](llvm::function_ref<float(float, float)> f) {
    const Tile &a = asTile(in[0]);
    return one(elementwise(a, &asTile(in[1]), a.element, f));
  };
  return llvm::TypeSwitch<Operation *, std::optional<SmallVector<SimValue>>>(op)
      .Case([&](ConvertOp c) {
        TileType to = c.getResult().getType();
        return one(elementwise(asTile(in[0]), nullptr, to.getElementType(),
                               [](float x, float) { return x; }));
      })
      .Case([&](AddOp) { return binary([](float x, float y) { return x + y; }); })
      .Case([&](SubOp) { return binary([](float x, float y) { return x - y; }); })
      .Case([&](MulOp) { return binary([](float x, float y) { return x * y; }); })
      .Case([&](DivOp) { return binary([](float x, float y) { return x / y; }); })
      .Case([&](MaxOp) { return binary([](float x, float y) { return std::max(x, y); }); })
      .Case([&](MinOp) { return binary([](float x, float y) { return std::min(x, y); }); })
      .Case<ExpOp, LogOp, SqrtOp, RsqrtOp, ReciprocalOp, TanhOp, SigmoidOp, NegOp, AbsOp>(
          [&](Operation *unary) {
            const Tile &x = asTile(in[0]);
            return one(elementwise(x, nullptr, x.element,
                                   [&](float v, float) { return elementary(unary, v); }));
          })
      .Case([&](ActivationOp a) {
        Activation kind = a.getKind();
        const Tile &x = asTile(in[0]);
        return one(
            elementwise(x, nullptr, x.element, [&](float v, float) { return activate(kind, v); }));
      })
      .Case([&](SwigluOp) {
        return binary([](float g, float u) { return activate(Activation::silu, g) * u; });
      })
      .Case([&](BroadcastOp b) {
        const Tile &x = asTile(in[0]);
        TileType type = b.getResult().getType();
        auto out = std::make_shared<Tile>(type.getShape(), type.getElementType());
        int64_t dim = b.getDim();
        for (int64_t r = 0; r < out->rows(); ++r)
          for (int64_t c = 0; c < out->cols(); ++c)
            out->at(r, c) = x.data[dim == 1 ? r : c];
        out->round();
        return one(out);
      })
      .Case([&](ReduceOp r) {
        const Tile &x = asTile(in[0]);
        TileType type = r.getResult().getType();
        ReduceKind kind = r.getKind();
        int64_t dim = r.getDim();
        auto out = std::make_shared<Tile>(type.getShape(), type.getElementType(), identity(kind));
        for (int64_t i = 0; i < x.rows(); ++i)
          for (int64_t j = 0; j < x.cols(); ++j) {
            float &slot = out->data[dim == 1 ? i : j];
            slot = reduce(kind, slot, x.at(i, j));
          }
        out->round();
        return one(out);
      })
      .Case([&](SplatOp s) {
        TileType type = s.getResult().getType();
        float value =
            std::holds_alternative<double>(in[0]) ? float(asFloat(in[0])) : float(asInt(in[0]));
        return one(std::make_shared<Tile>(type.getShape(), type.getElementType(),
                                          roundTo(type.getElementType(), value)));
      })
      .Case([&](AttentionBlockOp a) -> std::optional<SmallVector<SimValue>> {
        if (!rows)
          return std::nullopt;
        return attentionBlock(a, in, *rows);
      })
      .Default([](Operation *) { return std::nullopt; });
}

//===----------------------------------------------------------------------===//
// Memory-reading compute
//===----------------------------------------------------------------------===//

Box sim::matmulPanel(const Layout &layout, ArrayRef<int64_t> indices, ArrayRef<int64_t> wholeDims,
                     int64_t extent) {
  // The indexed dim of the last two takes the tile's extent; the contracted dim is whole.
  int64_t rank = layout.rank(), k = wholeDims[0];
  int64_t other = k == rank - 1 ? rank - 2 : rank - 1;
  SmallVector<int64_t, 2> tile(rank - other, 1);
  tile[0] = extent;
  return layout.access(indices, wholeDims, tile);
}

Tile sim::matmul(MatmulOp op, const TensorData &lhs, const Box &lhsPanel, const TensorData &rhs,
                 const Box &rhsPanel) {
  TileType type = op.getResult().getType();
  Tile out(type.getShape(), type.getElementType());
  int64_t lk = op.getLhsWholeDims()[0], rk = op.getRhsWholeDims()[0];
  int64_t lrank = lhs.layout.rank(), rrank = rhs.layout.rank();
  int64_t lm = lk == lrank - 1 ? lrank - 2 : lrank - 1;
  int64_t rn = rk == rrank - 1 ? rrank - 2 : rrank - 1;
  int64_t rows = lhsPanel.extent(lm), cols = rhsPanel.extent(rn), depth = lhsPanel.extent(lk);
  // Gather both panels densely, [rows x depth] and [depth x cols], then multiply.
  std::vector<float> a(rows * depth), b(depth * cols);
  SmallVector<int64_t, 4> at(lhsPanel.lo);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < depth; ++k) {
      at[lm] = lhsPanel.lo[lm] + i;
      at[lk] = lhsPanel.lo[lk] + k;
      a[i * depth + k] = lhs.at(at);
    }
  at.assign(rhsPanel.lo.begin(), rhsPanel.lo.end());
  for (int64_t k = 0; k < depth; ++k)
    for (int64_t j = 0; j < cols; ++j) {
      at[rk] = rhsPanel.lo[rk] + k;
      at[rn] = rhsPanel.lo[rn] + j;
      b[k * cols + j] = rhs.at(at);
    }
  for (int64_t i = 0; i < rows; ++i) {
    float *c = &out.data[i * out.cols()];
    for (int64_t k = 0; k < depth; ++k) {
      float x = a[i * depth + k];
      const float *row = &b[k * cols];
      for (int64_t j = 0; j < cols; ++j)
        c[j] += x * row[j];
    }
  }
  return out;
}

Tile sim::accumulate(const TensorData &source, const Box &box, ReduceKind kind, TileType type) {
  // The slots are the leading dims of the box that the tile does not have.
  Tile out(type.getShape(), type.getElementType());
  std::vector<bool> seen(out.data.size());
  int64_t rank = box.lo.size(), tileRank = type.getRank();
  box.forEach([&](ArrayRef<int64_t> at) {
    int64_t offset = 0;
    for (int64_t j = 0; j < tileRank; ++j) {
      int64_t d = rank - tileRank + j;
      offset = offset * out.shape[j] + at[d] - box.lo[d];
    }
    float v = source.at(at);
    out.data[offset] = seen[offset] ? reduce(kind, out.data[offset], v) : v;
    seen[offset] = true;
  });
  out.round();
  return out;
}

Routing sim::route(ArrayRef<int64_t> experts, int64_t numExperts, int64_t capacity) {
  Routing routing;
  routing.origins.assign(numExperts, std::vector<int64_t>(capacity, -1));
  routing.counts.assign(numExperts, 0);
  routing.placement.assign(experts.size(), -1);
  for (size_t copy = 0; copy < experts.size(); ++copy) {
    int64_t expert = experts[copy];
    int64_t &count = routing.counts[expert];
    if (count == capacity)
      continue;
    routing.origins[expert][count] = static_cast<int64_t>(copy);
    routing.placement[copy] = expert * capacity + count;
    ++count;
  }
  return routing;
}
