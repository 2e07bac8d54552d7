//===- LowerToEmitC.cpp - scheduled programs to persistent CUDA kernels ---===//
//
// Each scheduled mk.program becomes one `extern "C" __global__` EmitC function. First the
// structure is lowered in place: roles become branches on the CTA index, tile grids loops over
// their tiles in the chosen order, strided over the role's CTAs. Then a dialect conversion turns
// every mk op into a call of the device library (runtime/device/mk/device/kernel.cuh and
// mk/device.cuh) and index arithmetic and control flow into EmitC, through the upstream
// arith and scf conversions.
//
//===----------------------------------------------------------------------===//

#include "mk/Transforms/GemmEngine.h"
#include "mk/Transforms/Passes.h"
#include "mk/Transforms/TileWalk.h"
#include "mk/abi.h"

#include "mk/IR/MkOps.h"

#include "mlir/Conversion/ArithToEmitC/ArithToEmitC.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToEmitC/SCFToEmitC.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/EmitC/Transforms/TypeConversions.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <set>
#include <variant>

namespace mlir::mk {
#define GEN_PASS_DEF_MKLOWERTOEMITC
#include "mk/Transforms/Passes.h.inc"
} // namespace mlir::mk

using namespace mlir;
using namespace mlir::mk;

namespace {

/// The tile library's team, whose threads share chunked tiles.
constexpr int64_t kTeamThreads = MK_TEAM_THREADS;

/// What the lowering of one program decided, shared by its patterns.
struct KernelLayout {
  MeshAttr mesh;
  /// The mk-typed stand-in of each tensor (a cast of its mk::Tensor) and its index in the
  /// launch's tensors.
  DenseMap<Value, int64_t> tensorIndex;
  llvm::StringMap<int64_t> flagOffset;
  llvm::StringMap<SmallVector<int64_t>> flagShape;
  int64_t flagWords = 0;
  /// C++ expressions of the dynamic shared memory each call needs.
  std::vector<std::string> smemNeeds;
  /// This CTA's index and this rank's node and GPU (size_t), computed once on entry.
  Value cta, node, gpu;
  /// What the runtime must provide: the arguments, then the buffers it allocates, each with the
  /// bytes one rank holds; the tensors peers write or the network reads must be symmetric.
  int64_t arguments = 0;
  SmallVector<int64_t> tensorBytes;
  /// Each argument's element type and extents on one rank ("bf16[128,64]"), space-separated: the
  /// runtime checks what callers pass against it.
  std::string argumentTypes;
  uint32_t symmetricTensors = 0;
  /// The TMA tensor maps the kernel takes, as mk_tensor_map_spec initialisers (mk/abi.h).
  std::vector<std::string> tensorMaps;
  /// The copies copy engines make beside the kernel, as mk_engine_copy initialisers.
  std::vector<std::string> engineCopies;
  /// The GEMM engine of each role that runs one (an mk::GemmEngine in the role's block) with its
  /// mk::GemmConfig arguments, the TMA reduction of each role that has one (mk::TmaReduce), and
  /// the bulk-copy engine of each team that copies through it (mk::BulkCopier).
  SmallVector<Value> engines, reducers, bulkCopiers;
  DenseMap<Value, std::string> engineConfigs;
  /// The engine's ring depth, or 0 for the deepest that fits.
  int64_t gemmStages = 0;
  /// The engine's CTAs per cluster as asked (0: 2 where they pair up), and as chosen: the
  /// kernel's cluster size.
  int64_t gemmCluster = 0;
  int64_t cluster = 1;
  /// Whether every role has an even number of CTAs, so that no cluster of 2 spans two roles.
  bool rolesPairUp = false;
  /// The tile loops whose CTAs 2c and 2c + 1 take the two rows of a column's pair of tiles, in
  /// step (TileWalk::pairsRows).
  DenseSet<Operation *> pairedLoops;

  /// A tensor map's element type (mk/abi.h): exact for what TMA reductions add, else by size.
  static StringRef mapElement(Type element) {
    unsigned bits = element.getIntOrFloatBitWidth();
    if (element.isBF16())
      return "MK_MAP_ELEMENT_BF16";
    if (isa<FloatType>(element) && bits >= 16)
      return bits == 16   ? "MK_MAP_ELEMENT_F16"
             : bits == 32 ? "MK_MAP_ELEMENT_F32"
                          : "MK_MAP_ELEMENT_F64";
    if (element.isInteger(32))
      return "MK_MAP_ELEMENT_I32";
    return bits == 8    ? "MK_MAP_ELEMENT_U8"
           : bits == 16 ? "MK_MAP_ELEMENT_U16"
           : bits == 32 ? "MK_MAP_ELEMENT_U32"
                        : "MK_MAP_ELEMENT_U64";
  }

  /// The index of the map over tensor `index` (of `type`) held by this rank (no `gpu`) or by GPU
  /// `gpu` of the node, moving `box` (innermost first) through 128-byte swizzled shared memory.
  int64_t tensorMap(DistTensorType type, int64_t index, std::optional<int64_t> gpu,
                    ArrayRef<int64_t> box) {
    std::string spec;
    llvm::raw_string_ostream os(spec);
    int64_t rank = type.getRank();
    os << "{" << index << ", " << (gpu ? std::to_string(*gpu) : "MK_MAP_LOCAL") << ", "
       << mapElement(type.getElementType()) << ", " << rank << ", {";
    for (int64_t d = rank - 1; d >= 0; --d)
      os << type.getLocalExtent(d, mesh) << "ull" << (d ? ", " : "");
    os << "}, {";
    llvm::interleaveComma(box, os);
    os << "}, 128}";
    auto found = llvm::find(tensorMaps, spec);
    if (found != tensorMaps.end())
      return found - tensorMaps.begin();
    tensorMaps.push_back(spec);
    return tensorMaps.size() - 1;
  }

  /// The first of the maps over tensor `index` held by GPUs 0 .. gpus - 1 of the node, which are
  /// consecutive: the map of GPU g is that index + g.
  int64_t tensorMapsOfNode(DistTensorType type, int64_t index, ArrayRef<int64_t> box) {
    int64_t gpus = mesh.getGpus(), first = tensorMap(type, index, 0, box);
    for (int64_t g = 1; g < gpus; ++g)
      if (tensorMap(type, index, g, box) != first + g) {
        // Not a run yet (some map was listed alone before): list them all again, together.
        SmallVector<std::string> run;
        for (int64_t h = 0; h < gpus; ++h)
          run.push_back(tensorMaps[tensorMap(type, index, h, box)]);
        first = tensorMaps.size();
        tensorMaps.insert(tensorMaps.end(), run.begin(), run.end());
        break;
      }
    return first;
  }
};

std::string elementName(Type type) {
  if (type.isBF16())
    return "mk::bf16";
  if (type.isF16())
    return "mk::f16";
  if (type.isF32())
    return "float";
  if (type.isInteger(32))
    return "int";
  return "";
}

std::string tileName(TileType tile) {
  ArrayRef<int64_t> shape = tile.getShape();
  return "mk::Tile<" + elementName(tile.getElementType()) + ", " + std::to_string(shape[0]) + ", " +
         std::to_string(shape.size() > 1 ? shape[1] : 1) + ">";
}

/// Index arithmetic on size_t, in EmitC, folded where it is constant. Used inside conversion
/// patterns, whose operands are already converted.
class Arith {
public:
  Arith(OpBuilder &b, Location loc)
      : b(b), loc(loc), sizeT(emitc::SizeTType::get(b.getContext())) {}

  Value constant(int64_t value) {
    return emitc::ConstantOp::create(b, loc, sizeT, b.getIndexAttr(value));
  }
  Value add(Value x, Value y) {
    return fold(x, y, std::plus<int64_t>(), 0, 0,
                [&] { return emitc::AddOp::create(b, loc, sizeT, x, y).getResult(); });
  }
  Value sub(Value x, Value y) {
    return fold(x, y, std::minus<int64_t>(), std::nullopt, 0,
                [&] { return emitc::SubOp::create(b, loc, sizeT, x, y).getResult(); });
  }
  Value mul(Value x, Value y) {
    return fold(x, y, std::multiplies<int64_t>(), 1, 1,
                [&] { return emitc::MulOp::create(b, loc, sizeT, x, y).getResult(); });
  }
  Value div(Value x, Value y) {
    return fold(x, y, std::divides<int64_t>(), std::nullopt, 1,
                [&] { return emitc::DivOp::create(b, loc, sizeT, x, y).getResult(); });
  }
  Value rem(Value x, Value y) {
    return fold(x, y, std::modulus<int64_t>(), std::nullopt, std::nullopt,
                [&] { return emitc::RemOp::create(b, loc, sizeT, x, y).getResult(); });
  }
  Value min(Value x, Value y) {
    auto smaller = [](int64_t p, int64_t q) { return std::min(p, q); };
    return fold(x, y, smaller, std::nullopt, std::nullopt, [&] {
      Value less = emitc::CmpOp::create(b, loc, b.getI1Type(), emitc::CmpPredicate::lt, x, y);
      return emitc::ConditionalOp::create(b, loc, sizeT, less, x, y).getResult();
    });
  }
  Value add(Value x, int64_t y) { return add(x, constant(y)); }
  Value mul(Value x, int64_t y) { return mul(x, constant(y)); }
  Value div(Value x, int64_t y) { return div(x, constant(y)); }
  Value rem(Value x, int64_t y) { return rem(x, constant(y)); }

private:
  static std::optional<int64_t> valueOf(Value v) {
    if (auto c = v.getDefiningOp<emitc::ConstantOp>())
      if (auto value = dyn_cast<IntegerAttr>(c.getValue()))
        return value.getInt();
    return std::nullopt;
  }

  /// Folds two constants, and a neutral element on the right (or on the left, for add and mul).
  template <typename F, typename G>
  Value fold(Value x, Value y, F f, std::optional<int64_t> leftNeutral,
             std::optional<int64_t> rightNeutral, G build) {
    std::optional<int64_t> cx = valueOf(x), cy = valueOf(y);
    if (cx && cy)
      return constant(f(*cx, *cy));
    if (cy && rightNeutral && *cy == *rightNeutral)
      return x;
    if (cx && leftNeutral && *cx == *leftNeutral)
      return y;
    return build();
  }

  OpBuilder &b;
  Location loc;
  Type sizeT;
};

/// Arith as the index arithmetic of TileWalk.h's definitions.
struct EmitCIndexOps {
  using Index = Value;
  Arith &a;
  Index c(int64_t v) { return a.constant(v); }
  Index add(Index x, Index y) { return a.add(x, y); }
  Index sub(Index x, Index y) { return a.sub(x, y); }
  Index mul(Index x, Index y) { return a.mul(x, y); }
  Index div(Index x, Index y) { return a.div(x, y); }
  Index rem(Index x, Index y) { return a.rem(x, y); }
};

//===----------------------------------------------------------------------===//
// Structure: roles, tile grids, single-CTA blocks
//===----------------------------------------------------------------------===//

/// Calls a function of the device library; `args` mixes operands and C++ literals.
using CallArg = std::variant<Value, std::string>;
emitc::CallOpaqueOp call(OpBuilder &b, Location loc, TypeRange results, StringRef callee,
                         ArrayRef<CallArg> args, ArrayRef<std::string> templateArgs = {}) {
  SmallVector<Value> operands;
  SmallVector<Attribute> argAttrs;
  for (const CallArg &arg : args) {
    if (auto *value = std::get_if<Value>(&arg)) {
      argAttrs.push_back(b.getIndexAttr(operands.size()));
      operands.push_back(*value);
    } else {
      argAttrs.push_back(emitc::OpaqueAttr::get(b.getContext(), std::get<std::string>(arg)));
    }
  }
  SmallVector<Attribute> templateAttrs;
  for (const std::string &arg : templateArgs)
    templateAttrs.push_back(emitc::OpaqueAttr::get(b.getContext(), arg));
  return emitc::CallOpaqueOp::create(b, loc, results, callee, operands, b.getArrayAttr(argAttrs),
                                     templateAttrs.empty() ? ArrayAttr()
                                                           : b.getArrayAttr(templateAttrs));
}

Value kernelArgs(Operation *op) { return op->getParentOfType<emitc::FuncOp>().getArgument(0); }

/// A size_t as an index, for the structure lowered before the conversion.
Value toIndex(OpBuilder &b, Location loc, Value v) {
  return UnrealizedConversionCastOp::create(b, loc, b.getIndexType(), v).getResult(0);
}

//===----------------------------------------------------------------------===//
// The GEMM engine
//===----------------------------------------------------------------------===//

/// How an op is lowered when it is not on its own (mk::Lowering), carried on the op.
constexpr StringLiteral kLoweringAttr = "mk.lowering";

std::optional<Lowering> loweringOf(Operation *op) {
  if (auto how = op->getAttrOfType<LoweringAttr>(kLoweringAttr))
    return how.getValue();
  return std::nullopt;
}

void setLowering(Operation *op, Lowering how) {
  op->setAttr(kLoweringAttr, LoweringAttr::get(op->getContext(), how));
}

/// The engine's configuration (mk::GemmConfig's arguments) for `matmul`, if it can run there:
/// 16-bit operands, A [M x K] and B [K x N] or [N x K] (rank 2), a 128 x {64, 128, 256} tile
/// whose one use is a conversion to 16 bits that only stores and puts to a GPU of the node use
/// (rank 2 or 3 destinations); the matmul directly in a tile loop whose body has no other tile
/// work, only index arithmetic, nested loops and branches, waits, signals and copies across
/// nodes.
std::optional<std::string> engineConfig(MatmulOp matmul, int64_t stages) {
  ConvertOp convert = gemmEngineEpilogue(matmul);
  if (!convert)
    return std::nullopt;
  Type element = matmul.getLhs().getType().getElementType();
  int64_t bn = matmul.getResult().getType().getShape()[1];
  for (Operation *user : convert->getUsers()) {
    DistTensorType dest;
    if (auto store = dyn_cast<StoreOp>(user); store && store.getWholeDims().empty())
      dest = store.getDest().getType();
    else if (auto put = dyn_cast<PutOp>(user);
             put && put.getScope() != PeerScope::node && put.getWholeDims().empty())
      dest = put.getDest().getType();
    else
      return std::nullopt;
    if (dest.getRank() < 2 || dest.getRank() > 3)
      return std::nullopt;
  }
  auto loop = dyn_cast<scf::ForOp>(matmul->getParentOp());
  if (!loop)
    return std::nullopt;
  WalkResult other = loop.getBody()->walk([&](Operation *op) {
    bool tileWork = llvm::any_of(op->getResultTypes(), llvm::IsaPred<TileType>);
    if (op == matmul || op == convert || llvm::is_contained(convert->getUsers(), op) ||
        isa<WaitOp, SignalOp, scf::ForOp, scf::IfOp, scf::YieldOp>(op) ||
        // The proxy's copies across nodes use no shared memory.
        (isa<CopyOp>(op) && cast<CopyOp>(op).getScope() == PeerScope::node) ||
        (isMemoryEffectFree(op) && !tileWork))
      return WalkResult::advance();
    return WalkResult::interrupt();
  });
  if (other.wasInterrupted())
    return std::nullopt;
  // Stores to a peer drain slowly: stage a 256-column tile whole, so that they hold up the next
  // tile's epilogue (a mainloop later) rather than this tile's later chunks.
  bool toPeer = llvm::any_of(convert->getUsers(), [](Operation *user) { return isa<PutOp>(user); });
  std::string buffers = toPeer && bn == 256 ? "4" : "2";
  std::string name = elementName(element);
  std::string depth = stages > 0 ? std::to_string(stages)
                                 : "mk::gemm_max_stages<" + name + ", " + std::to_string(bn) +
                                       ", " + buffers + ">()";
  bool bKMajor = matmul.getRhsWholeDims()[0] == 1;
  return name + ", " + std::to_string(bn) + ", " + depth + ", " + (bKMajor ? "true" : "false") +
         ", " + buffers;
}

/// The mk::TmaReduce arguments for `accumulate` (marked Lowering::tma): slots, source and result
/// elements, tile shape.
std::string tmaReduceConfig(AccumulateOp accumulate) {
  TileType tile = accumulate.getResult().getType();
  DistTensorType source = accumulate.getSource().getType();
  auto convert = cast<ConvertOp>(*accumulate->user_begin());
  return std::to_string(source.getShape()[0]) + ", " + elementName(source.getElementType()) + ", " +
         elementName(convert.getResult().getType().getElementType()) + ", " +
         std::to_string(tile.getShape()[0]) + ", " + std::to_string(tile.getShape()[1]);
}

/// Marks the reductions that are only converted to 16 bits and stored (to this GPU or one of the
/// node): through the bulk tensor copy engine ("tma": copies of a tile in the leading dim of a
/// rank-3 buffer, at most 3, in boxes of 64 columns), else combined and stored chunk by chunk
/// ("chunks"), without a tile in registers or shared memory.
void markReductions(Operation *root) {
  root->walk([](AccumulateOp accumulate) {
    TileType tile = accumulate.getResult().getType();
    Type source = accumulate.getSource().getType().getElementType();
    if (tile.getRank() != 2 || source.getIntOrFloatBitWidth() != 16 || !accumulate->hasOneUse())
      return;
    int64_t rowChunks = tile.getShape()[1] * 2 / 16;
    if (tile.getShape()[1] * 2 % 16 || tile.getShape()[0] * rowChunks % kTeamThreads)
      return;
    auto convert = dyn_cast<ConvertOp>(*accumulate->user_begin());
    if (!convert || convert.getResult().getType().getElementType().getIntOrFloatBitWidth() != 16)
      return;
    for (Operation *user : convert->getUsers()) {
      auto store = dyn_cast<StoreOp>(user);
      auto put = dyn_cast<PutOp>(user);
      if (!(store && store.getWholeDims().empty()) &&
          !(put && put.getScope() == PeerScope::gpu && put.getWholeDims().empty()))
        return;
    }
    DistTensorType buffer = accumulate.getSource().getType();
    bool tma = buffer.getRank() == 3 && accumulate.getWholeDims() == ArrayRef<int64_t>{0} &&
               buffer.getShape()[0] <= 3 && tile.getShape()[0] <= 256 &&
               tile.getShape()[1] % 64 == 0 &&
               llvm::all_of(convert->getUsers(), [](Operation *user) {
                 auto dest = cast<DistTensorType>(user->getOperand(1).getType());
                 return dest.getRank() == 2 || dest.getRank() == 3;
               });
    // The role's publisher raises flags on this node only, and serves one configuration.
    auto role = accumulate->getParentOfType<RoleOp>();
    if (tma && role) {
      bool acrossNodes = role.walk([](Operation *op) {
                               auto signal = dyn_cast<SignalOp>(op);
                               auto copy = dyn_cast<CopyOp>(op);
                               return (signal && signal.getScope() == PeerScope::node) ||
                                              (copy && copy.getScope() == PeerScope::node)
                                          ? WalkResult::interrupt()
                                          : WalkResult::advance();
                             })
                             .wasInterrupted();
      std::string config = tmaReduceConfig(accumulate);
      bool other =
          role.walk([&](AccumulateOp sibling) {
                return loweringOf(sibling) == Lowering::tma && tmaReduceConfig(sibling) != config
                           ? WalkResult::interrupt()
                           : WalkResult::advance();
              })
              .wasInterrupted();
      tma = !acrossNodes && !other;
    }
    Lowering how = tma ? Lowering::tma : Lowering::chunks;
    setLowering(accumulate, how);
    setLowering(convert, Lowering::elide);
    for (Operation *user : convert->getUsers())
      setLowering(user, how);
  });
}

/// The ops of a loop's body that touch memory or flags.
SmallVector<Operation *> effectsOf(scf::ForOp loop) {
  SmallVector<Operation *> effects;
  for (Operation &op : loop.getBody()->without_terminator())
    if (!isMemoryEffectFree(&op))
      effects.push_back(&op);
  return effects;
}

/// A loop that puts a tile staged for TMA (the engine's or a TMA reduction's) to each GPU and
/// signals each after its put would wait for each put to complete before the next one starts (a
/// signal follows its data): split it in two, every put then every signal, so that the puts are
/// in flight together and one wait covers them.
void signalAfterAllPuts(Operation *root) {
  SmallVector<scf::ForOp> loops;
  root->walk([&](scf::ForOp loop) {
    SmallVector<Operation *> effects = effectsOf(loop);
    std::optional<Lowering> how = effects.empty() ? std::nullopt : loweringOf(effects[0]);
    if (effects.size() == 2 && isa<PutOp>(effects[0]) && isa<SignalOp>(effects[1]) &&
        (how == Lowering::tma || how == Lowering::store))
      loops.push_back(loop);
  });
  for (scf::ForOp loop : loops) {
    OpBuilder b(loop->getContext());
    b.setInsertionPointAfter(loop);
    auto signals = cast<scf::ForOp>(b.clone(*loop));
    (*loop.getBody()->getOps<SignalOp>().begin())->erase();
    (*signals.getBody()->getOps<PutOp>().begin())->erase();
  }
}

/// The offsets [begin, end) of the GPUs a merged engine store goes to: GPU (this one + offset)
/// mod the node's GPUs.
constexpr StringLiteral kGpuOffsetsAttr = "mk.gpu_offsets";

/// A loop over the GPUs of the node (forEachGpu's: GPU (g + i) mod G) whose only effect is an
/// engine store of one tile to each would stage the tile in shared memory once per GPU: make it
/// one store that stages the tile once and sends each chunk to every GPU.
void storeToGpusAtOnce(Operation *root, int64_t gpus) {
  struct Merge {
    scf::ForOp loop;
    int64_t begin, end;
  };
  SmallVector<Merge> merges;
  root->walk([&](scf::ForOp loop) {
    SmallVector<Operation *> effects = effectsOf(loop);
    auto put = effects.size() == 1 ? dyn_cast<PutOp>(effects[0]) : PutOp();
    DistTensorType dest = put ? put.getDest().getType() : DistTensorType();
    if (!put || loweringOf(put) != Lowering::store || put.getScope() != PeerScope::gpu ||
        dest.getPlacement().isSharded() || dest.getRank() != 2)
      return;
    auto rem = put.getPeer().getDefiningOp<arith::RemSIOp>();
    auto sum = rem ? rem.getLhs().getDefiningOp<arith::AddIOp>() : arith::AddIOp();
    APInt modulus, begin, end, step;
    if (sum && matchPattern(rem.getRhs(), m_ConstantInt(&modulus)) && modulus == gpus &&
        sum.getRhs() == loop.getInductionVar() &&
        !loop->isAncestor(sum.getLhs().getParentBlock()->getParentOp()) &&
        matchPattern(loop.getLowerBound(), m_ConstantInt(&begin)) &&
        matchPattern(loop.getUpperBound(), m_ConstantInt(&end)) &&
        matchPattern(loop.getStep(), m_ConstantInt(&step)) && step == 1)
      merges.push_back({loop, begin.getSExtValue(), end.getSExtValue()});
  });
  for (Merge &merge : merges) {
    OpBuilder b(merge.loop);
    IRMapping mapping;
    mapping.map(merge.loop.getInductionVar(), merge.loop.getLowerBound());
    for (Operation &op : merge.loop.getBody()->without_terminator())
      if (Operation *copy = b.clone(op, mapping); isa<PutOp>(copy))
        copy->setAttr(kGpuOffsetsAttr, b.getDenseI64ArrayAttr({merge.begin, merge.end}));
    merge.loop.erase();
  }
}

/// Whether the tile library's copies can move [rows x cols] slices of `bytes`-byte elements
/// (mk::detail::TileCopy): rows of whole 16-byte chunks, a number of chunks a row that divides
/// the team, and as many chunks in all as a multiple of the team's threads.
bool tileLibraryCopies(int64_t rows, int64_t cols, int64_t bytes) {
  int64_t rowBytes = cols * bytes;
  if (rowBytes % 16)
    return false;
  int64_t rowChunks = rowBytes / 16;
  return kTeamThreads % rowChunks == 0 && rows * rowChunks % kTeamThreads == 0;
}

/// The tile library's matmul loads k slices of A and B through those copies: a slice too small or
/// too wide for them is refused here, naming the smallest k slice that fits, rather than by
/// NVRTC's static assertion.
LogicalResult checkTileLibraryMatmul(MatmulOp matmul) {
  TileType tile = matmul.getResult().getType();
  int64_t tm = tile.getShape()[0], tn = tile.getShape()[1];
  DistTensorType lhs = matmul.getLhs().getType(), rhs = matmul.getRhs().getType();
  bool aTransposed = matmul.getLhsWholeDims()[0] == lhs.getRank() - 2;
  bool bTransposed = matmul.getRhsWholeDims()[0] == rhs.getRank() - 1;
  int64_t bytes = llvm::divideCeil(lhs.getElementType().getIntOrFloatBitWidth(), 8);
  auto fits = [&](int64_t kTile) {
    return tileLibraryCopies(aTransposed ? kTile : tm, aTransposed ? tm : kTile, bytes) &&
           tileLibraryCopies(bTransposed ? tn : kTile, bTransposed ? kTile : tn, bytes);
  };
  int64_t kTile = *matmul.getKTile();
  if (fits(kTile))
    return success();
  int64_t need = 16;
  while (need <= 1024 && !fits(need))
    need *= 2;
  InFlightDiagnostic diag = matmul.emitOpError()
                            << "runs on the tile library, which cannot copy its k slices of "
                            << kTile << " (A " << (aTransposed ? kTile : tm) << " x "
                            << (aTransposed ? tm : kTile) << ", B " << (bTransposed ? tn : kTile)
                            << " x " << (bTransposed ? kTile : tn) << " of " << bytes
                            << "-byte elements): slices of 4 KiB or more, in rows of at most 4 KiB";
  if (need <= 1024)
    diag << "; its tile needs k slices of " << need << " or more, so a contracted dim on each rank "
         << "that is a multiple of " << need;
  return diag;
}

class StructureLowering {
public:
  StructureLowering(ProgramOp program, KernelLayout &layout)
      : program(program), layout(layout), mesh(program.getMesh()) {}

  /// Moves the program into an EmitC function and lowers its structure; erases the program.
  FailureOr<emitc::FuncOp> run();

private:
  LogicalResult lowerRole(RoleOp role, Value cta, int64_t begin);
  /// Splits a role's CTAs into the GEMM engine's producer and consumers (see the pass's
  /// description); `config` is the engine's mk::GemmConfig arguments.
  LogicalResult lowerEngineRole(scf::IfOp branch, ArrayRef<MatmulOp> matmuls, StringRef config);
  LogicalResult lowerGrid(TileGridOp grid, Value roleCta, int64_t ctas);
  /// The CTAs per cluster of the engine that runs `matmuls` (each in its tile loop): 2 where
  /// asked or by default, if the roles and the loops pair CTAs up and B is [K x N] in whole
  /// 128-column panels; else 1, or an error if 2 was asked.
  FailureOr<int64_t> engineCluster(Location loc, ArrayRef<MatmulOp> matmuls);

  ProgramOp program;
  KernelLayout &layout;
  MeshAttr mesh;
};

FailureOr<emitc::FuncOp> StructureLowering::run() {
  MLIRContext *context = program.getContext();
  Location loc = program.getLoc();
  if (!program.getGrid())
    return program.emitError() << "@" << program.getSymName()
                               << " is not scheduled (run the mkc pipeline up to "
                                  "mk-insert-signals first)";
  if (!mesh.isBound())
    return program.emitError() << "@" << program.getSymName() << " is not specialized";
  WalkResult unsupported = program.walk([&](Operation *op) {
    if (isa<AttentionBlockOp, BroadcastOp, ReduceOp, DispatchOp, CombineOp, ShardRangeOp,
            AllReduceOp, ReduceScatterOp, AllGatherOp, RingShiftOp, SelectRoutedOp,
            CombineRoutedOp>(op)) {
      op->emitOpError() << "has no CUDA lowering in this version of mkc (the scheduled IR, "
                           "--emit=mlir, is as far as it goes)";
      return WalkResult::interrupt();
    }
    if (auto put = dyn_cast<PutOp>(op); put && put.getScope() == PeerScope::node) {
      put.emitOpError() << "puts a tile across nodes; the proxy copies memory, so store the tile "
                           "and mk.copy it";
      return WalkResult::interrupt();
    }
    if (auto matmul = dyn_cast<MatmulOp>(op); matmul && !matmul.getKTile()) {
      matmul.emitOpError() << "has no k_tile (run mk-tile-and-order first)";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (unsupported.wasInterrupted())
    return failure();

  OpBuilder b(program);
  // __grid_constant__: read in place, never copied, even where indexed at run time.
  auto argsType = emitc::OpaqueType::get(context, "const __grid_constant__ mk_kernel_args");
  auto func = emitc::FuncOp::create(b, loc, program.getSymName(),
                                    FunctionType::get(context, {argsType}, {}));
  func.setSpecifiersAttr(
      b.getStrArrayAttr({"extern \"C\" __global__ __launch_bounds__(MK_CTA_THREADS, 1)"}));
  Block *entry = func.addEntryBlock();
  Value args = entry->getArgument(0);
  OpBuilder eb = OpBuilder::atBlockBegin(entry);

  // Tensors: the arguments, then the buffers, each an mk::Tensor of the launch.
  Block &body = program.getBodyBlock();
  SmallVector<Value> tensors(body.getArguments());
  for (BufferOp buffer : body.getOps<BufferOp>())
    tensors.push_back(buffer.getResult());
  if (tensors.size() > MK_MAX_TENSORS)
    return program.emitError() << "uses " << tensors.size()
                               << " tensors, more than a kernel can take (" << MK_MAX_TENSORS
                               << ", MK_MAX_TENSORS)";
  layout.arguments = body.getNumArguments();
  for (auto [index, tensor] : llvm::enumerate(tensors)) {
    auto type = cast<DistTensorType>(tensor.getType());
    int64_t bytes = llvm::divideCeil(type.getElementType().getIntOrFloatBitWidth(), 8);
    // The device library moves rows in 16-byte pieces (cp.async, bulk copies, vector stores).
    int64_t rowElements = type.getLocalExtent(type.getRank() - 1, mesh);
    if (bytes * rowElements % 16) {
      std::string element;
      llvm::raw_string_ostream(element) << type.getElementType();
      return emitError(tensor.getLoc())
             << "a tensor with rows of " << rowElements << " " << element << " elements ("
             << bytes * rowElements
             << " bytes) on each rank: the device library moves rows in 16-byte pieces, so rows "
                "must be a multiple of 16 bytes";
    }
    for (int64_t d = 0; d < type.getRank(); ++d)
      bytes *= type.getLocalExtent(d, mesh);
    layout.tensorBytes.push_back(bytes);
    if (index < body.getNumArguments()) {
      llvm::raw_string_ostream os(layout.argumentTypes);
      os << (index ? " " : "") << type.getElementType() << "[";
      for (int64_t d = 0; d < type.getRank(); ++d)
        os << (d ? "," : "") << type.getLocalExtent(d, mesh);
      os << "]";
    }
    std::string element = elementName(type.getElementType());
    if (element.empty())
      return program.emitError() << "has a tensor of " << type.getElementType()
                                 << ", which has no CUDA lowering yet";
    auto opaque = emitc::OpaqueType::get(context, "mk::Tensor<" + element + ">");
    Value ref =
        call(eb, loc, opaque, "mk::tensor", {args, std::to_string(index)}, {element}).getResult(0);
    auto cast = UnrealizedConversionCastOp::create(eb, loc, type, ref);
    tensor.replaceAllUsesWith(cast.getResult(0));
    layout.tensorIndex[cast.getResult(0)] = index;
  }
  for (BufferOp buffer : llvm::to_vector(body.getOps<BufferOp>()))
    buffer.erase();
  for (FlagsOp flags : llvm::to_vector(body.getOps<FlagsOp>())) {
    int64_t words = 1;
    for (int64_t extent : flags.getShape())
      words *= extent;
    layout.flagOffset[flags.getSymName()] = layout.flagWords;
    layout.flagShape[flags.getSymName()] = SmallVector<int64_t>(flags.getShape());
    layout.flagWords += words;
    flags.erase();
  }
  // The copies are the runtime's to issue: a list in the module.
  for (EngineCopyOp copy : llvm::to_vector(body.getOps<EngineCopyOp>())) {
    DistTensorType type = copy.getTensor().getType();
    int64_t tensor = layout.tensorIndex.lookup(copy.getTensor());
    int64_t element = type.getElementType().getIntOrFloatBitWidth() / 8;
    int64_t pitch = element * type.getLocalExtent(1, mesh);
    ArrayRef<int64_t> rows = copy.getRows(), cols = copy.getCols();
    layout.symmetricTensors |= 1u << tensor;
    layout.engineCopies.push_back(
        llvm::formatv(
            "{{{0}, {1}, {2}, {3}, {4}, {5}, {6}ull, {7}ull, {8}ull, {9}ull}", copy.getFrom(),
            copy.getTo(), tensor, layout.flagOffset.lookup(copy.getWait()) + copy.getWaitIndex(),
            copy.getCount(), layout.flagOffset.lookup(copy.getSignal()) + copy.getSignalIndex(),
            rows[0] * pitch + cols[0] * element, (cols[1] - cols[0]) * element, rows[1] - rows[0],
            pitch)
            .str());
    copy.erase();
  }

  Type sizeT = emitc::SizeTType::get(context);
  layout.cta = call(eb, loc, sizeT, "mk::cta", {}).getResult(0);
  layout.node = call(eb, loc, sizeT, "mk::node", {args}).getResult(0);
  layout.gpu = call(eb, loc, sizeT, "mk::gpu", {args}).getResult(0);
  Value cta = toIndex(eb, loc, layout.cta);
  entry->getOperations().splice(entry->end(), body.getOperations());
  OpBuilder tail = OpBuilder::atBlockEnd(entry);
  emitc::ReturnOp::create(tail, loc, Value());
  markReductions(func);
  layout.rolesPairUp = llvm::all_of(func.getBody().getOps<RoleOp>(),
                                    [](RoleOp role) { return *role.getCtas() % 2 == 0; });
  int64_t begin = 0;
  for (RoleOp role : llvm::to_vector(func.getBody().getOps<RoleOp>())) {
    int64_t ctas = static_cast<int64_t>(*role.getCtas());
    if (failed(lowerRole(role, cta, begin)))
      return failure();
    begin += ctas;
  }
  if (layout.cluster > 1)
    func.setSpecifiersAttr(eb.getStrArrayAttr(
        {"extern \"C\" __global__ __launch_bounds__(MK_CTA_THREADS, 1) __cluster_dims__(" +
         std::to_string(layout.cluster) + ", 1, 1)"}));
  // After the roles: they mark the engine's stores.
  WalkResult uncombinable = func.walk([](PutOp put) {
    if (put.getCombine() &&
        !(loweringOf(put) == Lowering::store && put.getDest().getType().getRank() == 2)) {
      put.emitOpError() << "combines into its destination, which mkc lowers only from the GEMM "
                           "engine's epilogue into a rank-2 tensor";
      return WalkResult::interrupt();
    }
    return WalkResult::advance();
  });
  if (uncombinable.wasInterrupted())
    return failure();
  signalAfterAllPuts(func);
  storeToGpusAtOnce(func, mesh.getGpus());
  program.erase();
  return func;
}

LogicalResult StructureLowering::lowerRole(RoleOp role, Value cta, int64_t begin) {
  Location loc = role.getLoc();
  int64_t ctas = static_cast<int64_t>(*role.getCtas());
  OpBuilder b(role);
  Value first = arith::ConstantIndexOp::create(b, loc, begin);
  Value end = arith::ConstantIndexOp::create(b, loc, begin + ctas);
  Value inRole = arith::AndIOp::create(
      b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, cta, first),
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, cta, end));
  auto branch = scf::IfOp::create(b, loc, inRole, /*withElseRegion=*/false);
  Block *then = branch.thenBlock();
  then->getOperations().splice(then->begin(), role.getBody().front().getOperations());
  role.erase();

  OpBuilder tb = OpBuilder::atBlockBegin(then);
  Value roleCta = arith::SubIOp::create(tb, loc, cta, first);
  SmallVector<Operation *> nested;
  branch.getThenRegion().walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (isa<TileGridOp, SingleCtaOp>(op))
      nested.push_back(op);
  });
  for (Operation *op : nested) {
    if (auto single = dyn_cast<SingleCtaOp>(op)) {
      OpBuilder sb(single);
      Value zero = arith::ConstantIndexOp::create(sb, loc, 0);
      Value isFirst = arith::CmpIOp::create(sb, loc, arith::CmpIPredicate::eq, roleCta, zero);
      auto once = scf::IfOp::create(sb, loc, isFirst, /*withElseRegion=*/false);
      once.thenBlock()->getOperations().splice(once.thenBlock()->begin(),
                                               single.getBody().front().getOperations());
      single.erase();
    } else if (failed(lowerGrid(cast<TileGridOp>(op), roleCta, ctas))) {
      return failure();
    }
  }

  // A role whose every matmul can run on the GEMM engine runs it with all MK_CTA_THREADS
  // threads; any other runs the tile library on its team of MK_TEAM_THREADS.
  SmallVector<MatmulOp> matmuls;
  std::set<std::string> configs;
  bool engine = true;
  branch.getThenRegion().walk([&](MatmulOp matmul) {
    matmuls.push_back(matmul);
    if (std::optional<std::string> config = engineConfig(matmul, layout.gemmStages))
      configs.insert(*config);
    else
      engine = false;
  });
  if (!matmuls.empty() && engine && configs.size() == 1) {
    FailureOr<int64_t> cluster = engineCluster(loc, matmuls);
    if (failed(cluster))
      return failure();
    layout.cluster = std::max(layout.cluster, *cluster);
    return lowerEngineRole(branch, matmuls, *configs.begin() + ", " + std::to_string(*cluster));
  }
  for (MatmulOp matmul : matmuls)
    if (failed(checkTileLibraryMatmul(matmul)))
      return failure();
  // The team takes the registers of the warpgroup that has nothing to do.
  Block *body = branch.thenBlock();
  b.setInsertionPoint(body->getTerminator());
  Operation *member = call(b, loc, b.getI1Type(), "mk::team_member", {});
  auto team = scf::IfOp::create(b, loc, member->getResult(0), /*withElseRegion=*/true);
  for (Operation &op :
       llvm::make_early_inc_range(llvm::make_range(body->begin(), member->getIterator())))
    op.moveBefore(team.thenBlock()->getTerminator());
  OpBuilder teamBegin = OpBuilder::atBlockBegin(team.thenBlock());
  call(teamBegin, loc, {}, "mk::team_begin", {});
  // Its bulk copies' barriers, set up once before the first.
  if (team.getThenRegion()
          .walk([](CopyOp copy) {
            return copy.getLink() == Link::nvlink_bulk ? WalkResult::interrupt()
                                                       : WalkResult::advance();
          })
          .wasInterrupted()) {
    auto type = emitc::OpaqueType::get(branch.getContext(), "mk::BulkCopier");
    layout.bulkCopiers.push_back(call(teamBegin, loc, type, "mk::BulkCopier", {}).getResult(0));
  }
  OpBuilder idle(team.elseBlock()->getTerminator());
  call(idle, loc, {}, "mk::team_idle", {});
  // The role's TMA reduction (one configuration; markReductions sees to it), built by every
  // thread: the team reduces, the other warpgroup publishes.
  AccumulateOp reduction;
  team.getThenRegion().walk([&](AccumulateOp accumulate) {
    if (!reduction && loweringOf(accumulate) == Lowering::tma)
      reduction = accumulate;
  });
  if (reduction) {
    std::string type = "mk::TmaReduce<" + tmaReduceConfig(reduction) + ">";
    b.setInsertionPoint(member);
    Value reducer = call(b, loc, emitc::OpaqueType::get(branch.getContext(), type), type,
                         {std::string("mk_smem")})
                        .getResult(0);
    layout.reducers.push_back(reducer);
    layout.smemNeeds.push_back(type + "::kBytes");
    call(idle, loc, {}, "mk::tma_publish", {reducer});
    // Each reduced tile's batch goes to the publisher at the end of the block that reduces it.
    team.getThenRegion().walk([&](AccumulateOp accumulate) {
      OpBuilder end(accumulate->getBlock()->getTerminator());
      call(end, loc, {}, "mk::tma_commit", {reducer});
    });
    OpBuilder teamEnd(team.thenBlock()->getTerminator());
    call(teamEnd, loc, {}, "mk::tma_reduce_finish", {reducer});
  }
  return success();
}

FailureOr<int64_t> StructureLowering::engineCluster(Location loc, ArrayRef<MatmulOp> matmuls) {
  if (layout.gemmCluster == 1)
    return 1;
  std::string why;
  if (!layout.rolesPairUp)
    why = "a role has an odd number of CTAs";
  for (MatmulOp matmul : matmuls) {
    if (!why.empty())
      break;
    if (!layout.pairedLoops.contains(matmul->getParentOp()))
      why = "the tile loop does not give CTAs 2c and 2c + 1 the two rows of a pair of tiles";
    else if (matmul.getRhsWholeDims()[0] == 1 || matmul.getResult().getType().getShape()[1] % 128)
      why = "B is not [K x N] in panels of 128 columns or more";
  }
  if (why.empty())
    return 2;
  if (layout.gemmCluster == 2)
    return emitError(loc) << "the GEMM engine cannot run in clusters of 2 CTAs: " << why;
  return 1;
}

/// Whether all a consumer does after `wait` in its tile loop's body is engine stores, deferred
/// signals, waits and index arithmetic: ops that reach memory or flags through the engine's send
/// ring, in order, or through TMA stores that wait for the ring.
bool onlyEngineWritesFollow(WaitOp wait, ArrayRef<MatmulOp> matmuls) {
  const MatmulOp *matmul =
      llvm::find_if(matmuls, [&](MatmulOp m) { return m->getParentOp()->isAncestor(wait); });
  if (matmul == matmuls.end())
    return false;
  auto throughEngine = [](Operation *op) {
    return !op->walk([](Operation *inner) {
                std::optional<Lowering> how = loweringOf(inner);
                bool engine = how == Lowering::store || how == Lowering::deferred;
                return isMemoryEffectFree(inner) ||
                               isa<scf::IfOp, scf::ForOp, scf::YieldOp, WaitOp>(inner) ||
                               (isa<PutOp, StoreOp, SignalOp>(inner) && engine)
                           ? WalkResult::advance()
                           : WalkResult::interrupt();
              }).wasInterrupted();
  };
  Operation *body = (*matmul)->getParentOp();
  for (Operation *op = wait; op != body; op = op->getParentOp())
    for (Operation *next = op->getNextNode(); next; next = next->getNextNode())
      if (!throughEngine(next))
        return false;
  return true;
}

LogicalResult StructureLowering::lowerEngineRole(scf::IfOp branch, ArrayRef<MatmulOp> matmuls,
                                                 StringRef config) {
  Location loc = branch.getLoc();
  MLIRContext *context = branch.getContext();
  Block *role = branch.thenBlock();
  OpBuilder b = OpBuilder::atBlockBegin(role);
  std::string engineType = ("mk::GemmEngine<mk::GemmConfig<" + config + ">>").str();
  Operation *engineOp = call(b, loc, emitc::OpaqueType::get(context, engineType), engineType,
                             {std::string("mk_smem")});
  Value engine = engineOp->getResult(0);
  layout.engines.push_back(engine);
  layout.engineConfigs[engine] = config.str();
  layout.smemNeeds.push_back(("mk::gemm_smem_bytes<mk::GemmConfig<" + config + ">>()").str());

  // The role's body becomes the consumers' branch; the producer's is a copy of it pruned to the
  // tile loops' loads.
  b.setInsertionPoint(role->getTerminator());
  Value isProducer = call(b, loc, b.getI1Type(), "mk::gemm_is_producer", {}).getResult(0);
  auto split = scf::IfOp::create(b, loc, isProducer, /*withElseRegion=*/true);
  Block *producer = split.thenBlock(), *consumer = split.elseBlock();
  for (Operation &op : llvm::make_early_inc_range(llvm::make_range(
           std::next(engineOp->getIterator()), isProducer.getDefiningOp()->getIterator())))
    op.moveBefore(consumer->getTerminator());
  OpBuilder pb(producer->getTerminator());
  IRMapping copies;
  for (Operation &op : consumer->without_terminator())
    pb.clone(op, copies);

  // Producer: each tile loop keeps what leads to its matmul (index arithmetic, the waits for its
  // operands), which becomes the loads; everything else goes.
  SmallVector<Operation *> producerOps =
      llvm::map_to_vector(producer->without_terminator(), [](Operation &op) { return &op; });
  for (Operation *op : llvm::reverse(producerOps)) {
    auto loop = dyn_cast<scf::ForOp>(op);
    MatmulOp matmul;
    if (loop)
      for (MatmulOp candidate : loop.getBody()->getOps<MatmulOp>())
        matmul = candidate;
    if (!matmul) {
      if (!isMemoryEffectFree(op))
        op->erase();
      continue;
    }
    Block *body = loop.getBody();
    while (body->getTerminator()->getPrevNode() != matmul)
      body->getTerminator()->getPrevNode()->erase();
    for (Operation &before : llvm::make_early_inc_range(llvm::reverse(*body))) {
      if (&before == matmul || isa<scf::YieldOp>(before) || isMemoryEffectFree(&before))
        continue;
      if (isa<WaitOp>(before) && before.getBlock() == body)
        setLowering(&before, Lowering::producer);
      else
        before.erase();
    }
    setLowering(matmul, Lowering::load);
  }
  // Consumers: their signals wait for the tile's stores to land only at the next tile (or wait),
  // unless the producer waits on flags too, which a held-back signal might hold up.
  bool producerWaits =
      producer->walk([](WaitOp) { return WalkResult::interrupt(); }).wasInterrupted();
  if (!producerWaits) {
    consumer->walk([&](SignalOp signal) {
      bool inTileLoop = llvm::any_of(
          matmuls, [&](MatmulOp matmul) { return matmul->getParentOp()->isAncestor(signal); });
      if (signal.getScope() != PeerScope::node && inTileLoop)
        setLowering(signal, Lowering::deferred);
    });
  }
  // Consumers: the waits before each matmul are the producer's; the matmul, its conversion and
  // stores go to the engine.
  for (MatmulOp matmul : matmuls) {
    for (Operation *op = matmul->getPrevNode(); op;) {
      Operation *previous = op->getPrevNode();
      if (isa<WaitOp>(op))
        op->erase();
      op = previous;
    }
    setLowering(matmul, Lowering::mma);
    Operation *convert = *matmul->user_begin();
    setLowering(convert, Lowering::elide);
    for (Operation *store : convert->getUsers())
      setLowering(store, Lowering::store);
  }
  // Consumers: a wait in a tile loop that only the engine's stores and signals follow is left to
  // the senders, which serve those in order (on one node: across nodes, flags count what the
  // proxy delivers, and the consumers watch for it stopping).
  if (!producerWaits)
    consumer->walk([&](WaitOp wait) {
      bool defer = mesh.getNodes() == 1 && onlyEngineWritesFollow(wait, matmuls);
      setLowering(wait, defer ? Lowering::deferred : Lowering::consumer);
    });
  OpBuilder producerBegin = OpBuilder::atBlockBegin(producer);
  call(producerBegin, loc, {}, "mk::gemm_producer_begin", {engine});
  OpBuilder consumerBegin = OpBuilder::atBlockBegin(consumer);
  call(consumerBegin, loc, {}, "mk::gemm_consumer_begin", {engine});
  OpBuilder end(consumer->getTerminator());
  call(end, loc, {}, "mk::gemm_finish", {engine});
  return success();
}

LogicalResult StructureLowering::lowerGrid(TileGridOp grid, Value roleCta, int64_t ctas) {
  Location loc = grid.getLoc();
  if (grid.getRowCounts())
    return grid.emitOpError() << "is bounded by row counts, which have no CUDA lowering yet";
  FailureOr<TileWalk> walk = TileWalk::get(grid, mesh);
  if (failed(walk))
    return failure();

  OpBuilder b(grid);
  ArithIndexOps ops{b, loc};
  TileWalk::Place<Value> place{toIndex(b, loc, layout.node), toIndex(b, loc, layout.gpu),
                               grid.getHolder() ? std::optional(grid.getHolder()) : std::nullopt};
  TileWalk::Bound<Value> bound = walk->bind(ops, place);
  auto loop = scf::ForOp::create(b, loc, roleCta, bound.positions, ops.c(ctas));
  b.setInsertionPointToStart(loop.getBody());
  auto tile = walk->tileAt(ops, bound, loop.getInductionVar(), place);
  if (walk->pairsRows(ctas))
    layout.pairedLoops.insert(loop);
  if (tile.visits) {
    auto owned = scf::IfOp::create(b, loc, *tile.visits, /*withElseRegion=*/false);
    b.setInsertionPointToStart(owned.thenBlock());
  }

  Block &body = grid.getBodyBlock();
  for (auto [arg, coord] : llvm::zip(body.getArguments(), tile.coords))
    arg.replaceAllUsesWith(coord);
  Block *tileBlock = b.getInsertionBlock(); // the loop's body, or the branch of this rank's tiles
  tileBlock->getOperations().splice(std::prev(tileBlock->end()), body.getOperations());
  grid.erase();
  return success();
}

//===----------------------------------------------------------------------===//
// Ops: calls of the device library
//===----------------------------------------------------------------------===//

/// Where an access lands in the memory of the rank it reaches.
struct Address {
  Value offset;     // elements from the start of that rank's part
  int64_t ld = 1;   // elements between rows of the tile
  Value rows, cols; // the valid part of the tile
  int64_t tileRows = 1, tileCols = 1;
  SmallVector<Value> start; // the first element along each dim
};

/// What an op lowered on its own produced (the engine's accumulator, a chunked tile), behind the
/// casts the conversion puts between it and the tile types.
Value lookThroughCasts(Value value) {
  while (auto cast = value.getDefiningOp<UnrealizedConversionCastOp>())
    value = cast.getInputs().front();
  return value;
}

template <typename OpT> class LoweringPattern : public OpConversionPattern<OpT> {
public:
  LoweringPattern(const TypeConverter &converter, MLIRContext *context, KernelLayout &layout)
      : OpConversionPattern<OpT>(converter, context), layout(layout) {}

protected:
  int64_t tensorIndex(Value tensor) const { return layout.tensorIndex.lookup(tensor); }
  /// Records that `tensor` is reached through peer mappings or the network.
  void needSymmetric(Value tensor) const { layout.symmetricTensors |= 1u << tensorIndex(tensor); }

  /// The address of `%T[indices]` (`:` at `wholeDims`) for a tile of `tile` (its trailing dims),
  /// in the memory of the rank at (node, gpu).
  Address address(Arith &a, DistTensorType type, ValueRange indices, ArrayRef<int64_t> wholeDims,
                  ArrayRef<int64_t> tile, Value node, Value gpu) const {
    MeshAttr mesh = layout.mesh;
    int64_t rank = type.getRank();
    SmallVector<int64_t> local, strides(rank, 1);
    for (int64_t d = 0; d < rank; ++d)
      local.push_back(type.getLocalExtent(d, mesh));
    for (int64_t d = rank - 2; d >= 0; --d)
      strides[d] = strides[d + 1] * local[d + 1];

    int64_t first = rank - tile.size();
    Address address;
    address.offset = a.constant(0);
    auto index = indices.begin();
    SmallVector<Value> start(rank);
    for (int64_t d = 0; d < rank; ++d) {
      if (llvm::is_contained(wholeDims, d)) {
        start[d] = a.constant(0);
        continue;
      }
      int64_t extent = d >= first ? tile[d - first] : 1;
      Value element = a.mul(*index++, extent);
      PlacementAttr placement = type.getPlacement();
      if (placement.shardsDim(d)) {
        Value along = placement.getAxis() == MeshAxis::world
                          ? a.add(a.mul(node, mesh.getGpus()), gpu)
                      : placement.getAxis() == MeshAxis::nodes ? node
                                                               : gpu;
        element = a.sub(element, a.mul(along, local[d]));
      }
      start[d] = element;
      address.offset = a.add(address.offset, a.mul(element, strides[d]));
    }
    address.start = start;
    auto valid = [&](int64_t d, int64_t extent) {
      bool whole = llvm::is_contained(wholeDims, d);
      int64_t size = whole ? local[d] : extent;
      if (whole || local[d] % size == 0)
        return a.constant(size);
      return a.min(a.constant(size), a.sub(a.constant(local[d]), start[d]));
    };
    int64_t colDim = rank - 1, rowDim = rank - 2;
    address.tileCols = llvm::is_contained(wholeDims, colDim) ? local[colDim] : tile.back();
    address.cols = valid(colDim, address.tileCols);
    if (tile.size() >= 2 && rowDim >= 0) {
      address.tileRows = llvm::is_contained(wholeDims, rowDim) ? local[rowDim] : tile[0];
      address.rows = valid(rowDim, address.tileRows);
      address.ld = strides[rowDim];
    } else {
      address.rows = a.constant(1);
      address.ld = local[colDim];
    }
    return address;
  }

  /// A pointer into tensor `tensor` (converted) at `offset`, on this rank or GPU `gpu` of the node.
  Value pointer(OpBuilder &b, Location loc, DistTensorType type, Value tensor, Value offset,
                Value gpu = Value()) const {
    auto ptr = emitc::PointerType::get(
        emitc::OpaqueType::get(b.getContext(), elementName(type.getElementType())));
    if (gpu)
      return call(b, loc, ptr, "mk::at_peer", {tensor, gpu, offset}).getResult(0);
    return call(b, loc, ptr, "mk::at", {tensor, offset}).getResult(0);
  }

  /// Of `values` (each made in a role's block), the one of the role `op` is in, or null.
  static Value ofRole(ArrayRef<Value> values, Operation *op) {
    for (Value value : values)
      if (value.getDefiningOp()->getBlock()->findAncestorOpInBlock(*op))
        return value;
    return Value();
  }
  /// The GEMM engine of the role `op` is in.
  Value engineFor(Operation *op) const {
    Value engine = ofRole(layout.engines, op);
    assert(engine && "an op marked for the engine outside an engine role");
    return engine;
  }
  /// A pointer to tensor map `index` (a size_t) of the launch.
  Value tensorMapPointer(OpBuilder &b, Location loc, Operation *op, Value index) const {
    auto type =
        emitc::PointerType::get(emitc::OpaqueType::get(b.getContext(), "const mk_tensor_map"));
    return call(b, loc, type, "mk::tensor_map", {kernelArgs(op), index}).getResult(0);
  }

  void needSmem(std::string expression) const {
    if (!llvm::is_contained(layout.smemNeeds, expression))
      layout.smemNeeds.push_back(std::move(expression));
  }

  KernelLayout &layout;
};

/// `mk::name<T, R, C>` as text, for shared-memory needs.
std::string tileTemplate(StringRef name, TileType tile) {
  ArrayRef<int64_t> shape = tile.getShape();
  return (name + "<" + elementName(tile.getElementType()) + ", " + Twine(shape[0]) + ", " +
          Twine(shape.size() > 1 ? shape[1] : 1) + ">()")
      .str();
}

struct PlaceLowering : LoweringPattern<PlaceOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(PlaceOp op, OpAdaptor,
                                ConversionPatternRewriter &rewriter) const override {
    rewriter.replaceOp(op, {layout.node, layout.gpu});
    return success();
  }
};

struct OwnerLowering : LoweringPattern<OwnerOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(OwnerOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Arith a(rewriter, op.getLoc());
    EmitCIndexOps ops{a};
    auto [node, gpu] =
        tileOwner(ops, op.getTensor().getType(), llvm::to_vector(adaptor.getIndices()),
                  op.getTile(), op.getRowSlices(), layout.mesh, layout.node, layout.gpu);
    rewriter.replaceOp(op, {node, gpu});
    return success();
  }
};

struct LoadLowering : LoweringPattern<LoadOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(LoadOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    TileType tile = op.getResult().getType();
    if (tile.getRank() != 2)
      return rewriter.notifyMatchFailure(op, "rank-1 tiles have no CUDA lowering yet");
    Value node = layout.node, gpu = layout.gpu;
    Address at = address(a, op.getSource().getType(), adaptor.getIndices(), op.getWholeDims(),
                         tile.getShape(), node, gpu);
    Value src = pointer(rewriter, loc, op.getSource().getType(), adaptor.getSource(), at.offset);
    needSmem(tileTemplate("mk::tile_io_smem_bytes", tile));
    Type result = getTypeConverter()->convertType(tile);
    rewriter.replaceOp(op,
                       call(rewriter, loc, result, "mk::load_tile",
                            {src, std::to_string(at.ld), at.rows, at.cols, "mk_smem"},
                            {elementName(tile.getElementType()), std::to_string(tile.getShape()[0]),
                             std::to_string(tile.getShape()[1])}));
    return success();
  }
};

/// mk.store and mk.put: a tile to this rank's memory or to a GPU of the node.
template <typename OpT> struct StoreLowering : LoweringPattern<OpT> {
  using LoweringPattern<OpT>::LoweringPattern;
  LogicalResult matchAndRewrite(OpT op, typename OpT::Adaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    TileType tile = op.getValue().getType();
    if (tile.getRank() != 2)
      return rewriter.notifyMatchFailure(op, "rank-1 tiles have no CUDA lowering yet");
    std::optional<Lowering> how = loweringOf(op.getOperation());
    Value node = this->layout.node, gpu = this->layout.gpu;
    Value peer;
    if constexpr (std::is_same_v<OpT, PutOp>) {
      if (op.getScope() == PeerScope::gpu) {
        peer = gpu = adaptor.getPeer();
        this->needSymmetric(op.getDest());
      }
    }
    DistTensorType type = op.getDest().getType();
    Address at =
        this->address(a, type, adaptor.getIndices(), op.getWholeDims(), tile.getShape(), node, gpu);
    if (how == Lowering::store || how == Lowering::tma)
      return tmaStore(op, adaptor, rewriter, at, peer);
    Value dst = this->pointer(rewriter, loc, type, adaptor.getDest(), at.offset, peer);
    if (how == Lowering::chunks) {
      call(rewriter, loc, {}, "mk::store_chunks",
           {lookThroughCasts(adaptor.getValue()), dst, std::to_string(at.ld), at.rows, at.cols});
      rewriter.eraseOp(op);
      return success();
    }
    this->needSmem(tileTemplate("mk::tile_io_smem_bytes", tile));
    call(rewriter, loc, {}, "mk::store_tile",
         {adaptor.getValue(), dst, std::to_string(at.ld), at.rows, at.cols, "mk_smem"});
    rewriter.eraseOp(op);
    return success();
  }

  /// Stores a tile staged in shared memory (the engine's, or a TMA reduction's) through TMA, 64
  /// columns at a time; to a peer through that peer's map.
  LogicalResult tmaStore(OpT op, typename OpT::Adaptor adaptor, ConversionPatternRewriter &rewriter,
                         const Address &at, Value peer) const {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    DistTensorType type = op.getDest().getType();
    int64_t rank = type.getRank(), tensor = this->tensorIndex(op.getDest());
    SmallVector<int64_t> box = {64, op.getValue().getType().getShape()[0]};
    box.append(rank - 2, 1);
    auto gpuOffsets = op->template getAttrOfType<DenseI64ArrayAttr>(kGpuOffsetsAttr);
    Value map = gpuOffsets ? a.constant(this->layout.tensorMapsOfNode(type, tensor, box))
                : peer ? a.add(a.constant(this->layout.tensorMapsOfNode(type, tensor, box)), peer)
                       : a.constant(this->layout.tensorMap(type, tensor, std::nullopt, box));
    Value tile = lookThroughCasts(adaptor.getValue());
    bool engine = loweringOf(op.getOperation()) == Lowering::store;
    Value owner = engine ? this->engineFor(op) : this->ofRole(this->layout.reducers, op);
    SmallVector<CallArg> args = {owner, tile, this->tensorMapPointer(rewriter, loc, op, map)};
    if (gpuOffsets) {
      args.push_back(this->layout.gpu);
      args.push_back(std::to_string(gpuOffsets[0]));
      args.push_back(std::to_string(gpuOffsets[1]));
      args.push_back(std::to_string(this->layout.mesh.getGpus()));
      // Whole tiles reach the peers through the engine's senders, by the tensor's peer mappings.
      auto ref = emitc::PointerType::get(
          emitc::OpaqueType::get(rewriter.getContext(), "const mk_tensor_ref"));
      args.push_back(call(rewriter, loc, ref, "mk::tensor_ref", {adaptor.getDest()}).getResult(0));
      args.append({at.offset, std::to_string(at.ld), at.rows, at.cols});
    }
    for (int64_t d = rank - 1; d >= 0; --d)
      args.push_back(at.start[d]);
    bool combine = false;
    if constexpr (std::is_same_v<OpT, PutOp>)
      combine = op.getCombine().has_value();
    std::string callee = combine ? "mk::gemm_store_add" : "mk::gemm_store";
    if (gpuOffsets)
      callee += "_gpus";
    if (engine)
      call(rewriter, loc, {}, callee, args,
           {elementName(op.getValue().getType().getElementType())});
    else
      call(rewriter, loc, {}, "mk::tma_store_reduced", args);
    rewriter.eraseOp(op);
    return success();
  }
};

Value flagOffset(Arith &a, const KernelLayout &layout, StringRef flags, ValueRange indices);

struct CopyLowering : LoweringPattern<CopyOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(CopyOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    Value args = kernelArgs(op);
    Value myNode = layout.node, myGpu = layout.gpu;
    DistTensorType sourceType = op.getSource().getType(), destType = op.getDest().getType();
    Address from = address(a, sourceType, adaptor.getSourceIndices(), op.getSourceWholeDims(),
                           op.getTile(), myNode, myGpu);
    Value destNode = myNode, destGpu = myGpu;
    if (op.getScope() == PeerScope::node)
      destNode = adaptor.getPeer();
    if (op.getScope() == PeerScope::gpu)
      destGpu = adaptor.getPeer();
    Address to = address(a, destType, adaptor.getDestIndices(), op.getDestWholeDims(), op.getTile(),
                         destNode, destGpu);
    int64_t bytes = sourceType.getElementType().getIntOrFloatBitWidth() / 8;

    if (op.getScope() != PeerScope::self)
      needSymmetric(op.getDest());
    if (op.getScope() == PeerScope::node) {
      needSymmetric(op.getSource());
      // A signal to the same node right after the copy rides on it: one command to the proxy,
      // whose flag follows this put's data and every earlier put's, as the signal's would.
      CallArg flag = std::string("MK_NO_FLAG");
      auto signal = dyn_cast_or_null<SignalOp>(op->getNextNode());
      if (signal && signal.getScope() == PeerScope::node && signal.getPeer() == op.getPeer()) {
        SmallVector<Value> indices;
        for (Value index : signal.getIndices())
          indices.push_back(rewriter.getRemappedValue(index));
        flag = flagOffset(a, layout, signal.getFlags(), indices);
        rewriter.eraseOp(signal);
      }
      call(rewriter, loc, {}, "mk::remote_put",
           {args, adaptor.getPeer(), std::to_string(tensorIndex(op.getSource())),
            a.mul(from.offset, bytes), std::to_string(tensorIndex(op.getDest())),
            a.mul(to.offset, bytes), from.rows, a.mul(from.cols, bytes),
            std::to_string(from.ld * bytes), std::to_string(to.ld * bytes), flag});
      rewriter.eraseOp(op);
      return success();
    }
    Value src = pointer(rewriter, loc, sourceType, adaptor.getSource(), from.offset);
    Value dst = pointer(rewriter, loc, destType, adaptor.getDest(), to.offset,
                        op.getScope() == PeerScope::gpu ? adaptor.getPeer() : Value());
    SmallVector<CallArg> callArgs = {
        src, std::to_string(from.ld), dst, std::to_string(to.ld), from.rows, from.cols};
    StringRef callee = "mk::copy_region";
    if (op.getLink() == Link::nvlink_bulk) {
      Value copier = ofRole(layout.bulkCopiers, op);
      if (!copier)
        return op.emitOpError("copies through the bulk-copy engine outside a team role");
      callee = "mk::copy_region_bulk";
      callArgs.append({std::string("mk_smem"), copier});
      needSmem("mk::copy_region_bulk_smem_bytes()");
    }
    call(rewriter, loc, {}, callee, callArgs);
    rewriter.eraseOp(op);
    return success();
  }
};

struct AccumulateLowering : LoweringPattern<AccumulateOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(AccumulateOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    TileType tile = op.getResult().getType();
    DistTensorType type = op.getSource().getType();
    int64_t slotDim = op.getWholeDims()[0];
    // The first slot's address; the others follow `stride` elements apart.
    SmallVector<Value> indices;
    SmallVector<int64_t> wholeDims(op.getWholeDims().drop_front());
    Value node = layout.node, gpu = layout.gpu;
    for (int64_t d = 0, i = 0; d < type.getRank(); ++d) {
      if (d == slotDim) {
        indices.push_back(a.constant(0));
        continue;
      }
      if (llvm::is_contained(wholeDims, d))
        continue;
      indices.push_back(adaptor.getIndices()[i++]);
    }
    Address at = address(a, type, indices, wholeDims, tile.getShape(), node, gpu);
    int64_t stride = 1;
    for (int64_t d = slotDim + 1; d < type.getRank(); ++d)
      stride *= type.getLocalExtent(d, layout.mesh);
    TileType result = tile;
    std::string element = elementName(type.getElementType());
    std::string kind = "mk::Reduce::" + stringifyReduceKind(op.getKind()).str();
    std::string rows = std::to_string(tile.getShape()[0]),
                cols = std::to_string(tile.getShape()[1]);
    std::optional<Lowering> how = loweringOf(op);
    if (how == Lowering::tma) {
      Value reducer = ofRole(layout.reducers, op);
      int64_t map = layout.tensorMap(type, tensorIndex(op.getSource()), std::nullopt,
                                     {64, tile.getShape()[0], 1});
      rewriter.replaceOp(op, call(rewriter, loc,
                                  emitc::OpaqueType::get(rewriter.getContext(), "mk::ReducedTile"),
                                  "mk::tma_reduce",
                                  {reducer, tensorMapPointer(rewriter, loc, op, a.constant(map)),
                                   at.start[2], at.start[1], at.start[0]},
                                  {kind}));
      return success();
    }
    Value src = pointer(rewriter, loc, type, adaptor.getSource(), at.offset);
    if (how == Lowering::chunks) {
      // Chunks of what the one conversion of the result produces.
      auto convert = cast<ConvertOp>(*op->user_begin());
      std::string out = elementName(convert.getResult().getType().getElementType());
      auto chunks = emitc::OpaqueType::get(rewriter.getContext(), "mk::ChunkTile<" + out + ", " +
                                                                      rows + ", " + cols + ">");
      rewriter.replaceOp(
          op, call(rewriter, loc, chunks, "mk::accumulate_chunks",
                   {src, std::to_string(stride), std::to_string(type.getShape()[slotDim]),
                    std::to_string(at.ld), at.rows, at.cols},
                   {kind, out, element, rows, cols}));
      return success();
    }
    needSmem(tileTemplate("mk::tile_io_smem_bytes", result));
    rewriter.replaceOp(
        op, call(rewriter, loc, getTypeConverter()->convertType(result), "mk::accumulate_tiles",
                 {src, std::to_string(stride), std::to_string(type.getShape()[slotDim]),
                  std::to_string(at.ld), at.rows, at.cols, "mk_smem"},
                 {kind, element, std::to_string(tile.getShape()[0]),
                  std::to_string(tile.getShape()[1])}));
    return success();
  }
};

struct MatmulLowering : LoweringPattern<MatmulOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(MatmulOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    TileType tile = op.getResult().getType();
    int64_t tm = tile.getShape()[0], tn = tile.getShape()[1];
    int64_t kTile = *op.getKTile();
    Value node = layout.node, gpu = layout.gpu;
    DistTensorType lhsType = op.getLhs().getType(), rhsType = op.getRhs().getType();
    int64_t lhsK = op.getLhsWholeDims()[0], rhsK = op.getRhsWholeDims()[0];
    int64_t lhsRank = lhsType.getRank(), rhsRank = rhsType.getRank();
    bool aTransposed = lhsK == lhsRank - 2, bTransposed = rhsK == rhsRank - 1;
    // The panels: tm rows by the whole K, and the whole K by tn columns.
    Address lhs =
        address(a, lhsType, adaptor.getLhsIndices(), op.getLhsWholeDims(),
                aTransposed ? ArrayRef<int64_t>{1, tm} : ArrayRef<int64_t>{tm, 1}, node, gpu);
    Address rhs =
        address(a, rhsType, adaptor.getRhsIndices(), op.getRhsWholeDims(),
                bTransposed ? ArrayRef<int64_t>{tn, 1} : ArrayRef<int64_t>{1, tn}, node, gpu);
    Value rows = aTransposed ? lhs.cols : lhs.rows;
    Value cols = bTransposed ? rhs.rows : rhs.cols;
    int64_t k = lhsType.getLocalExtent(lhsK, layout.mesh);
    if (std::optional<Lowering> engine = loweringOf(op)) {
      Value e = engineFor(op);
      std::string kBlocks = std::to_string(llvm::divideCeil(k, 64));
      if (*engine == Lowering::mma) {
        auto accumulator = emitc::OpaqueType::get(rewriter.getContext(),
                                                  "mk::GemmAccumulator<mk::GemmConfig<" +
                                                      layout.engineConfigs.lookup(e) + ">>");
        rewriter.replaceOp(op, call(rewriter, loc, accumulator, "mk::gemm_mma", {e, kBlocks}));
        return success();
      }
      // The producer's loads: A in 128-row boxes, B in 64 x 64 blocks ([K x N]) or BN-row boxes
      // ([N x K]), 64 deep in K.
      int64_t aMap = layout.tensorMap(lhsType, tensorIndex(op.getLhs()), std::nullopt, {64, tm});
      int64_t bMap = layout.tensorMap(rhsType, tensorIndex(op.getRhs()), std::nullopt,
                                      {64, bTransposed ? tn : 64});
      call(rewriter, loc, {}, "mk::gemm_load",
           {e, tensorMapPointer(rewriter, loc, op, a.constant(aMap)),
            tensorMapPointer(rewriter, loc, op, a.constant(bMap)), lhs.start[0],
            bTransposed ? rhs.start[0] : rhs.start[1], kBlocks});
      rewriter.eraseOp(op);
      return success();
    }
    std::string element = elementName(lhsType.getElementType());
    Value aPtr = pointer(rewriter, loc, lhsType, adaptor.getLhs(), lhs.offset);
    Value bPtr = pointer(rewriter, loc, rhsType, adaptor.getRhs(), rhs.offset);
    needSmem("mk::matmul_smem_bytes<" + element + ", " + std::to_string(tm) + ", " +
             std::to_string(tn) + ", " + std::to_string(kTile) + ">()");
    rewriter.replaceOp(
        op, call(rewriter, loc, getTypeConverter()->convertType(tile), "mk::matmul",
                 {aPtr, std::to_string(lhs.ld), bPtr, std::to_string(rhs.ld), std::to_string(k),
                  rows, cols, "mk_smem"},
                 {std::to_string(tm), std::to_string(tn), std::to_string(kTile),
                  aTransposed ? "true" : "false", bTransposed ? "true" : "false", element}));
    return success();
  }
};

/// Tile compute: one device-library call each.
template <typename OpT> struct CallLowering : LoweringPattern<OpT> {
  CallLowering(const TypeConverter &converter, MLIRContext *context, KernelLayout &layout,
               StringRef callee)
      : LoweringPattern<OpT>(converter, context, layout), callee(callee) {}

  LogicalResult matchAndRewrite(OpT op, typename OpT::Adaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    // The engine converts as it stores.
    if (loweringOf(op.getOperation())) {
      rewriter.replaceOp(op, lookThroughCasts(adaptor.getOperands().front()));
      return success();
    }
    SmallVector<CallArg> args;
    for (Value operand : adaptor.getOperands())
      args.push_back(operand);
    SmallVector<std::string> templateArgs;
    std::string name = callee;
    if constexpr (std::is_same_v<OpT, ActivationOp>)
      name = "mk::" + stringifyActivation(op.getKind()).str();
    auto result = cast<TileType>(op->getResult(0).getType());
    if constexpr (std::is_same_v<OpT, ConvertOp>)
      templateArgs.push_back(elementName(result.getElementType()));
    if constexpr (std::is_same_v<OpT, SplatOp>)
      templateArgs = {elementName(result.getElementType()), std::to_string(result.getShape()[0]),
                      std::to_string(result.getRank() > 1 ? result.getShape()[1] : 1)};
    rewriter.replaceOp(op,
                       call(rewriter, op.getLoc(), this->getTypeConverter()->convertType(result),
                            name, args, templateArgs));
    return success();
  }

  std::string callee;
};

/// The offset of `flags[indices]` in the flag region.
Value flagOffset(Arith &a, const KernelLayout &layout, StringRef flags, ValueRange indices) {
  const SmallVector<int64_t> &shape = layout.flagShape.find(flags)->second;
  Value linear = a.constant(0);
  for (auto [extent, index] : llvm::zip(shape, indices))
    linear = a.add(a.mul(linear, extent), index);
  return a.add(linear, layout.flagOffset.lookup(flags));
}

struct SignalLowering : LoweringPattern<SignalOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(SignalOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Arith a(rewriter, loc);
    Value offset = flagOffset(a, layout, op.getFlags(), adaptor.getIndices());
    Value args = kernelArgs(op);
    // Under a TMA reduction, the publisher raises the flag after the stores before it.
    if (Value reducer = ofRole(layout.reducers, op)) {
      auto flag = emitc::PointerType::get(emitc::OpaqueType::get(rewriter.getContext(), "mk_u32"));
      Value pointer =
          op.getScope() == PeerScope::gpu
              ? call(rewriter, loc, flag, "mk::flag_gpu", {args, adaptor.getPeer(), offset})
                    .getResult(0)
              : call(rewriter, loc, flag, "mk::flag_local", {args, offset}).getResult(0);
      call(rewriter, loc, {}, "mk::tma_signal", {reducer, pointer});
      rewriter.eraseOp(op);
      return success();
    }
    // The engine's consumers raise it after the tile's stores land, without waiting for them.
    bool deferred = loweringOf(op) == Lowering::deferred;
    switch (op.getScope()) {
    case PeerScope::self:
      if (deferred)
        call(rewriter, loc, {}, "mk::gemm_signal_local", {engineFor(op), args, offset});
      else
        call(rewriter, loc, {}, "mk::signal_local", {args, offset});
      break;
    case PeerScope::gpu:
      if (deferred)
        call(rewriter, loc, {}, "mk::gemm_signal_gpu",
             {engineFor(op), args, adaptor.getPeer(), offset});
      else
        call(rewriter, loc, {}, "mk::signal_gpu", {args, adaptor.getPeer(), offset});
      break;
    case PeerScope::node:
      call(rewriter, loc, {}, "mk::signal_node", {args, adaptor.getPeer(), offset});
      break;
    }
    rewriter.eraseOp(op);
    return success();
  }
};

struct WaitLowering : LoweringPattern<WaitOp> {
  using LoweringPattern::LoweringPattern;
  LogicalResult matchAndRewrite(WaitOp op, OpAdaptor adaptor,
                                ConversionPatternRewriter &rewriter) const override {
    Arith a(rewriter, op.getLoc());
    Value offset = flagOffset(a, layout, op.getFlags(), adaptor.getIndices());
    std::optional<Lowering> how = loweringOf(op);
    if (how == Lowering::producer)
      call(rewriter, op.getLoc(), {}, "mk::gemm_wait_arrivals",
           {engineFor(op), kernelArgs(op), offset, std::to_string(op.getCount())});
    else if (how == Lowering::consumer)
      call(rewriter, op.getLoc(), {}, "mk::gemm_consumer_wait_arrivals",
           {engineFor(op), kernelArgs(op), offset, std::to_string(op.getCount())});
    else if (how == Lowering::deferred)
      call(rewriter, op.getLoc(), {}, "mk::gemm_consumer_defer_arrivals",
           {engineFor(op), kernelArgs(op), offset, std::to_string(op.getCount())});
    else
      call(rewriter, op.getLoc(), {}, "mk::wait_arrivals",
           {kernelArgs(op), offset, std::to_string(op.getCount())});
    rewriter.eraseOp(op);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct LowerToEmitCPass : mk::impl::MkLowerToEmitCBase<LowerToEmitCPass> {
  using MkLowerToEmitCBase::MkLowerToEmitCBase;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *context = &getContext();
    auto programs = llvm::to_vector(module.getOps<ProgramOp>());
    if (programs.empty())
      return;
    if (std::optional<std::string> error = checkGemmOptions(gemmStages, gemmCluster)) {
      programs.front().emitError() << *error;
      return signalPassFailure();
    }

    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    Location loc = module.getLoc();
    emitc::VerbatimOp::create(b, loc,
                              "// Generated by mkc: one persistent kernel per program. "
                              "Launch with MK_CTA_THREADS threads per CTA.");
    emitc::IncludeOp::create(b, loc, "mk/device/kernel.cuh", /*is_standard_include=*/false);
    emitc::VerbatimOp::create(b, loc, "extern __shared__ __align__(128) unsigned char mk_smem[];");

    for (ProgramOp program : programs) {
      KernelLayout layout;
      layout.mesh = program.getMesh();
      layout.gemmStages = gemmStages;
      layout.gemmCluster = gemmCluster;
      std::string name = program.getSymName().str();
      int64_t grid = program.getGrid().value_or(0);
      // The split in sm-split's syntax, so that a caller can read it and ask for it again.
      SmallVector<std::string> split;
      for (RoleOp role : program.getBodyBlock().getOps<RoleOp>())
        split.push_back(
            (stringifyRoleKind(role.getKind()) + "=" + Twine(role.getCtas().value_or(0))).str());
      FailureOr<emitc::FuncOp> func = StructureLowering(program, layout).run();
      if (failed(func) || failed(convert(*func, layout)))
        return signalPassFailure();
      // What the runtime needs to launch it, readable from the module (cuModuleGetGlobal): how
      // much shared memory, how many flag words, which tensors and how large; and the kernel
      // that moves the epoch on after each launch.
      std::string smem = "0";
      for (const std::string &need : layout.smemNeeds)
        smem = "mk::max_bytes(" + smem + ", " + need + ")";
      std::string bytes;
      llvm::raw_string_ostream bytesList(bytes);
      llvm::interleaveComma(layout.tensorBytes, bytesList);
      std::string manifest;
      llvm::raw_string_ostream os(manifest);
      auto constant = [&](StringRef type, StringRef field, const Twine &value) {
        os << "extern \"C\" __device__ const " << type << " " << name << "_" << field << " = "
           << value << ";\n";
      };
      constant("int", "abi_version", "MK_ABI_VERSION");
      constant("int", "grid", Twine(grid));
      constant("int", "dynamic_smem_bytes", smem);
      constant("int", "flag_words", Twine(layout.flagWords));
      constant("int", "arguments", Twine(layout.arguments));
      constant("int", "tensors", Twine(layout.tensorBytes.size()));
      constant("unsigned", "symmetric_tensors", Twine(layout.symmetricTensors) + "u");
      constant("long long", "tensor_bytes[]", "{" + bytes + "}");
      constant("char", "argument_types[]", "\"" + layout.argumentTypes + "\"");
      constant("char", "sm_split[]", "\"" + llvm::join(split, ",") + "\"");
      constant("int", "tensor_map_count", Twine(layout.tensorMaps.size()));
      if (!layout.tensorMaps.empty())
        constant("mk_tensor_map_spec", "tensor_maps[]",
                 "{" + Twine(llvm::join(layout.tensorMaps, ", ")) + "}");
      constant("int", "engine_copy_count", Twine(layout.engineCopies.size()));
      if (!layout.engineCopies.empty())
        constant("mk_engine_copy", "engine_copies[]",
                 "{" + Twine(llvm::join(layout.engineCopies, ", ")) + "}");
      os << "extern \"C\" __global__ void " << name
         << "_advance_epoch(mk_u32 *epoch) { mk::advance_epoch(epoch); }";
      OpBuilder after(context);
      after.setInsertionPointAfter(*func);
      emitc::VerbatimOp::create(after, loc, manifest);
    }
  }

  /// Moves the kernel's cheap entry values (tensor references, this rank's place, constants) into
  /// each role that uses them: computed once at entry they stay live across every role, and the
  /// register pressure of the largest role then spills.
  static void sinkIntoRoles(emitc::FuncOp func) {
    Block &entry = func.getBody().front();
    auto sinkable = [](Operation &op) {
      if (isa<emitc::ConstantOp>(op))
        return true;
      auto call = dyn_cast<emitc::CallOpaqueOp>(op);
      return call && llvm::is_contained({"mk::tensor", "mk::node", "mk::gpu"}, call.getCallee());
    };
    for (Operation &op : llvm::make_early_inc_range(entry)) {
      if (!sinkable(op))
        continue;
      DenseMap<Operation *, Operation *> copies;
      for (OpOperand &use : llvm::make_early_inc_range(op.getUses())) {
        auto role = dyn_cast<emitc::IfOp>(entry.findAncestorOpInBlock(*use.getOwner()));
        if (!role || role == use.getOwner())
          continue;
        Operation *&copy = copies[role];
        if (!copy) {
          OpBuilder b = OpBuilder::atBlockBegin(&role.getThenRegion().front());
          copy = b.clone(op);
        }
        use.set(copy->getResult(0));
      }
      if (op.use_empty())
        op.erase();
    }
  }

  LogicalResult convert(emitc::FuncOp func, KernelLayout &layout) {
    MLIRContext *context = &getContext();
    TypeConverter converter;
    converter.addConversion([](Type type) { return type; });
    populateEmitCSizeTTypeConversions(converter);
    converter.addConversion([](TileType tile) -> Type {
      return emitc::OpaqueType::get(tile.getContext(), tileName(tile));
    });
    converter.addConversion([](DistTensorType tensor) -> Type {
      return emitc::OpaqueType::get(tensor.getContext(),
                                    "mk::Tensor<" + elementName(tensor.getElementType()) + ">");
    });
    auto materialize = [](OpBuilder &b, Type type, ValueRange inputs, Location loc) -> Value {
      return UnrealizedConversionCastOp::create(b, loc, type, inputs).getResult(0);
    };
    converter.addSourceMaterialization(materialize);
    converter.addTargetMaterialization(materialize);

    RewritePatternSet patterns(context);
    populateArithToEmitCPatterns(converter, patterns);
    populateSCFToEmitCConversionPatterns(patterns, converter);
    patterns.add<PlaceLowering, OwnerLowering, LoadLowering, StoreLowering<StoreOp>,
                 StoreLowering<PutOp>, CopyLowering, AccumulateLowering, MatmulLowering,
                 SignalLowering, WaitLowering>(converter, context, layout);
    patterns.add<CallLowering<ConvertOp>>(converter, context, layout, "mk::convert");
    patterns.add<CallLowering<AddOp>>(converter, context, layout, "mk::add");
    patterns.add<CallLowering<SubOp>>(converter, context, layout, "mk::sub");
    patterns.add<CallLowering<MulOp>>(converter, context, layout, "mk::mul");
    patterns.add<CallLowering<DivOp>>(converter, context, layout, "mk::div");
    patterns.add<CallLowering<MaxOp>>(converter, context, layout, "mk::maximum");
    patterns.add<CallLowering<ActivationOp>>(converter, context, layout, "");
    patterns.add<CallLowering<SwigluOp>>(converter, context, layout, "mk::swiglu");
    patterns.add<CallLowering<SplatOp>>(converter, context, layout, "mk::splat");

    ConversionTarget target(*context);
    target.addLegalDialect<emitc::EmitCDialect>();
    target.addIllegalDialect<MkDialect, arith::ArithDialect, scf::SCFDialect>();
    target.addLegalOp<UnrealizedConversionCastOp>();
    if (failed(applyFullConversion(func, target, std::move(patterns))))
      return failure();

    // Folding address arithmetic leaves constants behind.
    SmallVector<Operation *> dead;
    do {
      dead.clear();
      func.walk([&](Operation *op) {
        if (isa<emitc::ConstantOp, emitc::CastOp, emitc::AddOp, emitc::SubOp, emitc::MulOp,
                emitc::DivOp, emitc::RemOp, emitc::CmpOp, emitc::ConditionalOp>(op) &&
            op->use_empty())
          dead.push_back(op);
      });
      for (Operation *op : dead)
        op->erase();
    } while (!dead.empty());

    sinkIntoRoles(func);

    // What is left of the casts between mk, index and EmitC types cancels out.
    SmallVector<UnrealizedConversionCastOp> casts, remaining;
    func.walk([&](UnrealizedConversionCastOp cast) { casts.push_back(cast); });
    reconcileUnrealizedCasts(casts, &remaining);
    if (!remaining.empty())
      return remaining.front().emitError() << "internal error: the lowering to EmitC left a type "
                                              "cast behind";
    return success();
  }
};

} // namespace
