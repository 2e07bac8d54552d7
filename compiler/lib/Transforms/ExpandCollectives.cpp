//===- ExpandCollectives.cpp - hierarchical, rail-aligned transfers -------===//
//
// Turns each collective intent into transfers between ranks, organised as roles: within the node
// over NVLink, then across nodes between GPUs of one index (rails), then back within the node.
// The pass writes transfers only; mk-insert-signals orders them with flags.
//
//===----------------------------------------------------------------------===//

#include "mk/Transforms/GemmEngine.h"
#include "mk/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/TypeSwitch.h"

namespace mlir::mk {
#define GEN_PASS_DEF_MKEXPANDCOLLECTIVES
#include "mk/Transforms/Passes.h.inc"
} // namespace mlir::mk

using namespace mlir;
using namespace mlir::mk;

namespace {

/// `%T[i0, :, i2]` as values: a tensor, the index of each indexed dim, the positions of `:`.
struct Access {
  Value tensor;
  SmallVector<Value> indices;
  SmallVector<int64_t> wholeDims;

  /// The tile of `tensor` at a grid's coordinates: indexed where the access is, whole elsewhere.
  static Access at(Value tensor, ArrayRef<int64_t> wholeDims, ValueRange coords) {
    Access access{tensor, {}, llvm::to_vector(wholeDims)};
    for (auto [d, coord] : llvm::enumerate(coords))
      if (!llvm::is_contained(wholeDims, static_cast<int64_t>(d)))
        access.indices.push_back(coord);
    return access;
  }

  /// The same tile one leading dim up: `%T[slot, ...]`, or `%T[:, ...]` for a null slot.
  Access inSlot(Value stage, Value slot) const {
    Access staged{stage, {}, {}};
    if (slot)
      staged.indices.push_back(slot);
    else
      staged.wholeDims.push_back(0);
    llvm::append_range(staged.indices, indices);
    for (int64_t d : wholeDims)
      staged.wholeDims.push_back(d + 1);
    return staged;
  }
};

/// A peer as transfers name it.
struct Peer {
  PeerScope scope = PeerScope::self;
  Value index;
  std::optional<Link> link;
};

/// Whether an all-reduce within a node that does not run in place goes in one shot: as forced,
/// or where the cost model finds it faster. One shot: one hop of latency, and each GPU sends
/// its partial of every tile to the other gpus - 1; two hops: the partials to the tiles' owners
/// and their sums back, 2 (gpus - 1) / gpus of the output's bytes.
struct OneShotCost {
  OneShotAllReduce choice;
  double hopSeconds, nvlinkBytesPerSecond;

  /// For an output of `bytes` on each of `gpus` GPUs (unknown: not specialised, two hops).
  bool chooses(int64_t gpus, std::optional<int64_t> bytes) const {
    if (choice != OneShotAllReduce::costModel)
      return choice == OneShotAllReduce::always;
    if (!bytes)
      return false;
    double g = static_cast<double>(gpus), sent = static_cast<double>(*bytes);
    double oneShot = hopSeconds + (g - 1) * sent / nvlinkBytesPerSecond;
    double twoHops = 2 * hopSeconds + 2 * (g - 1) / g * sent / nvlinkBytesPerSecond;
    return oneShot < twoHops;
  }
};

/// The bytes of this rank's part of `type`, if its shape is known.
std::optional<int64_t> localBytes(DistTensorType type, MeshAttr mesh) {
  int64_t bytes = llvm::divideCeil(type.getElementType().getIntOrFloatBitWidth(), 8);
  for (int64_t d = 0; d < type.getRank(); ++d) {
    int64_t extent = type.getLocalExtent(d, mesh);
    if (ShapedType::isDynamic(extent))
      return std::nullopt;
    bytes *= extent;
  }
  return bytes;
}

class Expander {
public:
  Expander(ProgramOp program, bool inPlaceAllReduce, bool copyEngines, OneShotCost oneShot)
      : program(program), context(program.getContext()), mesh(program.getMesh()),
        numbering(TileNumbering::of(program)), nodes(mesh.getNodes()), gpus(mesh.getGpus()),
        inPlaceAllReduce(inPlaceAllReduce), copyEngines(copyEngines), oneShot(oneShot) {}

  LogicalResult run();

private:
  LogicalResult expandAllReduce(AllReduceOp op);
  LogicalResult expandReduceScatter(ReduceScatterOp op);
  LogicalResult expandAllGather(AllGatherOp op);
  LogicalResult expandRingShift(RingShiftOp op);
  LogicalResult expandDispatch(DispatchOp op);
  LogicalResult expandCombine(CombineOp op);
  /// Routing, point to point: a dispatch role counts each rank's copies per expert into every
  /// GPU's census, then sends each row straight to its expert's slot; the expert grids' tiles
  /// wait for their expert's rows; results go back from the grid's tiles to their tokens' slots,
  /// and a grid after it sums each token's. Across nodes, rows bound for another node go to
  /// their rank's rail peer there, once, packed, and fan out from it; results come back the same
  /// way.
  void routePointToPoint(DispatchOp op);
  void returnPointToPoint(CombineOp op, TileGridOp grid);

  /// The reduction shared by all-reduce and reduce-scatter: partials of `value` go to the GPU of
  /// this node that owns the tile, node partials to the same GPU of the nodes that keep it. With
  /// `oneShot`, an all-reduce within a node puts each partial to every GPU of the node, and each
  /// of them sums every tile for itself (one hop of signals, not two).
  template <typename OpT> LogicalResult expandReduction(OpT op, MeshAxis axis);
  /// Whether `op` all-reduces in place (see expandAllReduceInPlace).
  bool allReducesInPlace(AllReduceOp op);
  /// An all-reduce over the two GPUs of one node, in the compute role: each GPU starts with its
  /// own slice of tile rows and stores those tiles to both GPUs; the other GPU, reaching them
  /// half a grid later, adds its partials into both copies where they lie. Every SM computes,
  /// each GPU sends a tile's bytes once, and the sum of two contributions is the same on both.
  void expandAllReduceInPlace(AllReduceOp op);
  /// The same, with the tiles' bands crossing between the GPUs by copy engines (see there).
  void expandAllReduceWithCopyEngines(AllReduceOp op);
  /// Gathers the shards of `source` into a new symmetric buffer, chunk by chunk, and returns it.
  Value gather(Location loc, Value source, ArrayRef<int64_t> chunk);

  // Building blocks.
  Value constant(int64_t value);
  Value buffer(Location loc, ArrayRef<int64_t> shape, Type element);
  Value buffer(Location loc, DistTensorType type);
  RoleOp role(Location loc, RoleKind kind);
  std::pair<Value, Value> place(OpBuilder &b, Location loc);
  /// The clauses of a tile grid the expansion builds.
  struct Grid {
    bool global = false;
    bool masked = false;
    std::optional<MeshAxis> distribute;
    Value holder;
    /// The order to visit the tiles in: the producing grid's, so that tiles are taken up in the
    /// order they are finished.
    TileOrderAttr order;
  };
  void tileGrid(OpBuilder &b, Location loc, Value target, ArrayRef<int64_t> sizes,
                const Grid &clauses, function_ref<void(OpBuilder &, ValueRange)> body);
  /// Runs `body` for every GPU of the node (this one last), or every other one.
  void forEachGpu(OpBuilder &b, Location loc, bool includeSelf,
                  function_ref<void(OpBuilder &, Value)> body);
  /// Runs `body` for every other node.
  void forEachOtherNode(OpBuilder &b, Location loc, function_ref<void(OpBuilder &, Value)> body);
  void put(OpBuilder &b, Location loc, Value tile, const Access &dest, Peer peer,
           std::optional<ReduceKind> combine = std::nullopt);
  void copy(OpBuilder &b, Location loc, const Access &source, const Access &dest, Peer peer,
            ArrayRef<int64_t> tile);
  Value accumulate(OpBuilder &b, Location loc, const Access &source, TileType tile);

  static SmallVector<int64_t> tileSizes(DistTensorType tensor, ArrayRef<int64_t> wholeDims,
                                        TileType tile);
  SmallVector<int64_t> tileExtents(DistTensorType tensor, ArrayRef<int64_t> sizes);

  ProgramOp program;
  MLIRContext *context;
  MeshAttr mesh;
  /// Where tiles lie along the program's dims; the buffers the expansion adds shard nothing.
  TileNumbering numbering;
  int64_t nodes, gpus;
  bool inPlaceAllReduce;
  bool copyEngines;
  OneShotCost oneShot;
  int64_t flagCount = 0;
  RoleOp computeRole;
  DenseMap<int64_t, Value> constants;
  /// For each dispatch's origins, where each of the tokens' routed copies went.
  DenseMap<Value, Value> placements;
  /// Point to point: the dispatch's row counts, and its flags (see routePointToPoint).
  Value routedCounts;
  FlatSymbolRefAttr arrivedFlags, routedFlags;
  /// Across nodes: where each copy's result comes back, the tokens each node's rail peer sent
  /// (and its flags), the tokens a rank.
  struct Routing {
    Value returnAt, received;
    FlatSymbolRefAttr receivedFlags;
    int64_t perRank = 0;
  } routing;
};

//===----------------------------------------------------------------------===//
// Building blocks
//===----------------------------------------------------------------------===//

Value Expander::constant(int64_t value) {
  Value &cached = constants[value];
  if (!cached) {
    OpBuilder b = OpBuilder::atBlockBegin(&program.getBodyBlock());
    cached = arith::ConstantIndexOp::create(b, program.getLoc(), value);
  }
  return cached;
}

Value Expander::buffer(Location loc, ArrayRef<int64_t> shape, Type element) {
  return buffer(loc, DistTensorType::get(shape, element,
                                         PlacementAttr::get(context, PlacementKind::symmetric)));
}

Value Expander::buffer(Location loc, DistTensorType type) {
  OpBuilder b(computeRole);
  return BufferOp::create(b, loc, type);
}

RoleOp Expander::role(Location loc, RoleKind kind) {
  OpBuilder b = OpBuilder::atBlockEnd(&program.getBodyBlock());
  auto role = RoleOp::create(b, loc, RoleKindAttr::get(context, kind), IntegerAttr());
  role.getBody().emplaceBlock();
  return role;
}

std::pair<Value, Value> Expander::place(OpBuilder &b, Location loc) {
  auto place = PlaceOp::create(b, loc, b.getIndexType(), b.getIndexType());
  return {place.getNode(), place.getGpu()};
}

void Expander::tileGrid(OpBuilder &b, Location loc, Value target, ArrayRef<int64_t> sizes,
                        const Grid &clauses, function_ref<void(OpBuilder &, ValueRange)> body) {
  auto unit = [&](bool set) { return set ? b.getUnitAttr() : UnitAttr(); };
  auto grid = TileGridOp::create(
      b, loc, target, clauses.holder, /*row_counts=*/Value(), b.getDenseI64ArrayAttr(sizes),
      unit(clauses.global), unit(clauses.masked), clauses.order,
      clauses.distribute ? MeshAxisAttr::get(context, *clauses.distribute) : MeshAxisAttr());
  SmallVector<Type> types(sizes.size(), b.getIndexType());
  SmallVector<Location> locs(sizes.size(), loc);
  OpBuilder::InsertionGuard guard(b);
  Block *block = b.createBlock(&grid.getBody(), {}, types, locs);
  OpBuilder inner = OpBuilder::atBlockBegin(block);
  body(inner, block->getArguments());
}

void Expander::forEachGpu(OpBuilder &b, Location loc, bool includeSelf,
                          function_ref<void(OpBuilder &, Value)> body) {
  auto [node, gpu] = place(b, loc);
  // Start with the next GPU so that the GPUs of a node do not all write to the same one at once.
  scf::ForOp::create(b, loc, constant(1), constant(includeSelf ? gpus + 1 : gpus), constant(1),
                     ValueRange{}, [&](OpBuilder &nb, Location l, Value offset, ValueRange) {
                       Value sum = arith::AddIOp::create(nb, l, gpu, offset);
                       body(nb, arith::RemSIOp::create(nb, l, sum, constant(gpus)));
                       scf::YieldOp::create(nb, l);
                     });
}

void Expander::forEachOtherNode(OpBuilder &b, Location loc,
                                function_ref<void(OpBuilder &, Value)> body) {
  auto [node, gpu] = place(b, loc);
  scf::ForOp::create(b, loc, constant(1), constant(nodes), constant(1), ValueRange{},
                     [&](OpBuilder &nb, Location l, Value offset, ValueRange) {
                       Value sum = arith::AddIOp::create(nb, l, node, offset);
                       body(nb, arith::RemSIOp::create(nb, l, sum, constant(nodes)));
                       scf::YieldOp::create(nb, l);
                     });
}

void Expander::put(OpBuilder &b, Location loc, Value tile, const Access &dest, Peer peer,
                   std::optional<ReduceKind> combine) {
  PutOp::create(b, loc, tile, dest.tensor, dest.indices, b.getDenseI64ArrayAttr(dest.wholeDims),
                PeerScopeAttr::get(context, peer.scope), peer.index,
                peer.link ? LinkAttr::get(context, *peer.link) : LinkAttr(),
                combine ? ReduceKindAttr::get(context, *combine) : ReduceKindAttr());
}

void Expander::copy(OpBuilder &b, Location loc, const Access &source, const Access &dest, Peer peer,
                    ArrayRef<int64_t> tile) {
  CopyOp::create(b, loc, source.tensor, source.indices, b.getDenseI64ArrayAttr(source.wholeDims),
                 dest.tensor, dest.indices, b.getDenseI64ArrayAttr(dest.wholeDims),
                 PeerScopeAttr::get(context, peer.scope), peer.index,
                 peer.link ? LinkAttr::get(context, *peer.link) : LinkAttr(),
                 b.getDenseI64ArrayAttr(tile));
}

Value Expander::accumulate(OpBuilder &b, Location loc, const Access &source, TileType tile) {
  return AccumulateOp::create(b, loc, tile.withElementType(b.getF32Type()), ReduceKind::sum,
                              source.tensor, source.indices, source.wholeDims);
}

/// The grid tile sizes of an access: whole dims stay whole, the tile's dims take its extents,
/// the leading dims are 1.
SmallVector<int64_t> Expander::tileSizes(DistTensorType tensor, ArrayRef<int64_t> wholeDims,
                                         TileType tile) {
  int64_t first = tensor.getRank() - tile.getRank();
  SmallVector<int64_t> sizes(tensor.getRank(), 1);
  for (int64_t d = 0; d < tensor.getRank(); ++d) {
    if (llvm::is_contained(wholeDims, d))
      sizes[d] = ShapedType::kDynamic;
    else if (d >= first)
      sizes[d] = tile.getShape()[d - first];
  }
  return sizes;
}

/// The extents of the trailing (at most two) dims of a tile of the given grid sizes.
SmallVector<int64_t> Expander::tileExtents(DistTensorType tensor, ArrayRef<int64_t> sizes) {
  SmallVector<int64_t> extents;
  for (int64_t d = std::max<int64_t>(0, tensor.getRank() - 2); d < tensor.getRank(); ++d)
    extents.push_back(ShapedType::isDynamic(sizes[d]) ? tensor.getLocalExtent(d, mesh) : sizes[d]);
  return extents;
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

template <typename OpT> LogicalResult Expander::expandReduction(OpT op, MeshAxis axis) {
  constexpr bool scatter = std::is_same_v<OpT, ReduceScatterOp>;
  Location loc = op.getLoc();
  auto producer = op->template getParentOfType<TileGridOp>();
  if (!producer || producer->getParentOp() != computeRole)
    return op.emitOpError() << "must be in a tile grid of the program";

  DistTensorType destType = op.getDest().getType();
  TileType tile = op.getValue().getType();
  Access dest{op.getDest(), llvm::to_vector(op.getIndices()), llvm::to_vector(op.getWholeDims())};
  SmallVector<int64_t> sizes = tileSizes(destType, dest.wholeDims, tile);
  SmallVector<int64_t> extents(tile.getShape());
  SmallVector<int64_t> stageShape(destType.getShape());

  bool intraStep = axis != MeshAxis::nodes && gpus > 1;
  bool interStep = axis != MeshAxis::gpus && nodes > 1;
  // One shot: every GPU receives every partial and sums every tile, so that a tile's sum waits
  // for one hop of puts instead of a reduce-scatter's and then an all-gather's (for outputs
  // small enough that the hops' latency, not the bytes, is the cost: decode's).
  bool shot =
      !scatter && intraStep && !interStep && oneShot.chooses(gpus, localBytes(destType, mesh));

  // Where a GPU's and a node's partials are staged. An all-reduce's partials of R x C tiles are
  // kept tile-major: a slot is a [tiles * R, C] matrix whose tile row t holds grid tile t
  // (row-major), so that a tile crosses the network as one contiguous block (one write, one copy)
  // rather than R rows. Where the GPUs of a node deal the tiles out (mk.owner: tile t to GPU
  // t mod gpus), a GPU stages only its own, tile t at tile row t / gpus: a slot is 1/gpus of the
  // tensor. Still three dims: the TMA paths of stores and reductions stay those of the other
  // stages.
  int64_t tileCols = 0; // tile-major: tiles along the columns of dest
  int64_t dealtOver = intraStep && !shot ? gpus : 1;
  SmallVector<int64_t> tileMajorShape;
  if (!scatter && destType.getRank() == 2 && dest.wholeDims.empty() && tile.getRank() == 2 &&
      destType.hasStaticShape()) {
    tileCols = numbering.count(destType.getShape()[1], sizes[1]);
    int64_t tiles = numbering.count(destType.getShape()[0], sizes[0]) * tileCols;
    tileMajorShape = {(tiles + dealtOver - 1) / dealtOver * extents[0], extents[1]};
  }
  // A staging buffer of `slots` slots, tile-major where it can be, else shaped as dest.
  auto stagingBuffer = [&](int64_t slots) {
    SmallVector<int64_t> shape{slots};
    llvm::append_range(shape, tileCols ? tileMajorShape : stageShape);
    return buffer(loc, shape, tile.getElementType());
  };
  // One tile of a staging buffer: slot `slot`'s, or every slot's for a null one.
  auto stagedTile = [&](OpBuilder &b, Location l, Value staging, const Access &tileAt, Value slot) {
    if (!tileCols)
      return tileAt.inSlot(staging, slot);
    Value rowsBefore = arith::MulIOp::create(b, l, tileAt.indices[0], constant(tileCols));
    Value tileRow = arith::AddIOp::create(b, l, rowsBefore, tileAt.indices[1]);
    if (dealtOver > 1)
      tileRow = arith::DivSIOp::create(b, l, tileRow, constant(dealtOver));
    Access staged{staging, {}, {}};
    if (slot)
      staged.indices.push_back(slot);
    else
      staged.wholeDims.push_back(0);
    staged.indices.append({tileRow, constant(0)});
    return staged;
  };
  Value nodePartials = interStep ? stagingBuffer(nodes) : Value();
  auto nodePartialsOf = [&](OpBuilder &b, Location l, const Access &tileAt, Value node) {
    return stagedTile(b, l, nodePartials, tileAt, node);
  };

  // A rank's node partial of one tile: kept in its slot, and sent to the same GPU of the nodes
  // that combine it (all of them, or the owner's).
  auto sendNodePartial = [&](OpBuilder &b, Location l, Value partial, const Access &tileAt) {
    auto [node, gpu] = place(b, l);
    Access mySlot = nodePartialsOf(b, l, tileAt, node);
    StoreOp::create(b, l, partial, mySlot.tensor, mySlot.indices, mySlot.wholeDims);
    auto sendTo = [&](OpBuilder &nb, Value peer) {
      copy(nb, l, mySlot, mySlot, Peer{PeerScope::node, peer, Link::rdma_proxy}, extents);
    };
    if constexpr (scatter) {
      auto owner = OwnerOp::create(b, l, b.getIndexType(), b.getIndexType(), tileAt.tensor,
                                   tileAt.indices, sizes);
      Value remote = arith::CmpIOp::create(b, l, arith::CmpIPredicate::ne, owner.getNode(), node);
      scf::IfOp::create(b, l, remote, [&](OpBuilder &nb, Location il) {
        sendTo(nb, owner.getNode());
        scf::YieldOp::create(nb, il);
      });
    } else {
      forEachOtherNode(b, l, sendTo);
    }
  };

  // The final tile: stored where this rank keeps it, and for an all-reduce that spans the GPUs of
  // a node republished to each of them.
  bool republish = !scatter && !shot && axis != MeshAxis::nodes && gpus > 1;
  auto finish = [&](OpBuilder &b, Location l, Value total, const Access &tileAt) {
    if (!republish) {
      StoreOp::create(b, l, total, tileAt.tensor, tileAt.indices, tileAt.wholeDims);
      return;
    }
    forEachGpu(b, l, /*includeSelf=*/true, [&](OpBuilder &nb, Value gpu) {
      put(nb, l, total, tileAt, Peer{PeerScope::gpu, gpu, Link::nvlink_store});
    });
  };

  auto reduceSlots = [&](OpBuilder &b, Location l, const Access &slots) {
    Value sum = accumulate(b, l, slots, tile);
    return ConvertOp::create(b, l, tile, sum).getResult();
  };

  // In the compute role: hand the tile to the next step.
  OpBuilder b(op);
  Value stage;
  if (intraStep) {
    stage = stagingBuffer(gpus);
    OwnerOp owner = shot ? OwnerOp()
                         : OwnerOp::create(b, loc, b.getIndexType(), b.getIndexType(), dest.tensor,
                                           dest.indices, sizes);
    auto [node, gpu] = place(b, loc);
    Access mySlot = stagedTile(b, loc, stage, dest, gpu);
    auto putTo = [&](OpBuilder &pb, Value peer) {
      put(pb, loc, op.getValue(), mySlot, Peer{PeerScope::gpu, peer, Link::nvlink_store});
    };
    if (shot)
      forEachGpu(b, loc, /*includeSelf=*/true, putTo);
    else
      putTo(b, owner.getGpu());
  } else if (interStep) {
    sendNodePartial(b, loc, op.getValue(), dest);
  } else {
    finish(b, loc, op.getValue(), dest);
  }

  // The owner GPU combines the node's partials (in one shot, every GPU all of them).
  bool masked = producer.getMasked();
  if (intraStep) {
    OpBuilder rb = OpBuilder::atBlockEnd(&role(loc, RoleKind::intra_reduce).getBody().front());
    tileGrid(rb, loc, dest.tensor, sizes,
             Grid{.global = producer.getGlobal(),
                  .masked = masked,
                  .distribute = shot ? std::nullopt : std::optional(MeshAxis::gpus),
                  .order = producer.getOrderAttr()},
             [&](OpBuilder &gb, ValueRange coords) {
               Access tileAt = Access::at(dest.tensor, dest.wholeDims, coords);
               Value partial = reduceSlots(gb, loc, stagedTile(gb, loc, stage, tileAt, Value()));
               if (interStep)
                 sendNodePartial(gb, loc, partial, tileAt);
               else
                 finish(gb, loc, partial, tileAt);
             });
  }

  // The same GPU of each node that keeps the tile combines the node partials.
  if (interStep) {
    OpBuilder rb = OpBuilder::atBlockEnd(&role(loc, RoleKind::inter_reduce).getBody().front());
    std::optional<MeshAxis> distribute;
    if (!scatter && intraStep)
      distribute = MeshAxis::gpus;
    tileGrid(rb, loc, dest.tensor, sizes, Grid{.masked = masked, .distribute = distribute},
             [&](OpBuilder &gb, ValueRange coords) {
               Access tileAt = Access::at(dest.tensor, dest.wholeDims, coords);
               finish(gb, loc, reduceSlots(gb, loc, nodePartialsOf(gb, loc, tileAt, Value())),
                      tileAt);
             });
  }
  op.erase();
  return success();
}

bool Expander::allReducesInPlace(AllReduceOp op) {
  DistTensorType dest = op.getDest().getType();
  auto producer = op->getParentOfType<TileGridOp>();
  // The GEMM engine's epilogue is what adds a tile where it lies (in 16 bits).
  auto convert = op.getValue().getDefiningOp<ConvertOp>();
  bool fromEngine =
      convert && llvm::any_of(convert->getBlock()->getOps<MatmulOp>(), [&](MatmulOp matmul) {
        std::optional<EnginePass> pass = gemmEnginePass(matmul);
        return pass && pass->convert.getOperation() == convert.getOperation();
      });
  // Two contributions, so that the sum does not depend on the order in which they land.
  return inPlaceAllReduce && fromEngine && op.getKind() == ReduceKind::sum && nodes == 1 &&
         gpus == 2 && op.getAxis() != MeshAxis::nodes && producer &&
         producer->getParentOp() == computeRole && dest.getRank() == 2 && dest.hasStaticShape() &&
         op.getWholeDims().empty() && op.getValue().getType().getRank() == 2 &&
         tmaAddresses(dest, op.getValue().getType().getShape(), mesh, TileNumbering::of(program));
}

void Expander::expandAllReduceInPlace(AllReduceOp op) {
  Location loc = op.getLoc();
  auto producer = op->getParentOfType<TileGridOp>();
  TileOrderAttr order = producer.getOrderAttr();
  TileOrderKind kind = order ? order.getKind() : TileOrderKind::row_major;
  producer.setOrderAttr(
      TileOrderAttr::get(context, kind, order ? order.getGroup() : 1, /*localFirst=*/true));

  DistTensorType destType = op.getDest().getType();
  TileType tile = op.getValue().getType();
  SmallVector<int64_t> sizes(tile.getShape());
  Access dest{op.getDest(), llvm::to_vector(op.getIndices()), {}};
  SmallVector<int64_t> flagShape;
  for (auto [extent, size] : llvm::zip(destType.getShape(), sizes))
    flagShape.push_back(numbering.count(extent, size));
  // The one ordering the transfers cannot show: a tile is added to only once it holds the first
  // contribution, on both GPUs.
  OpBuilder pb = OpBuilder::atBlockBegin(&program.getBodyBlock());
  std::string name = ("initialized" + Twine(flagCount++)).str();
  FlagsOp::create(pb, loc, pb.getStringAttr(name), pb.getDenseI64ArrayAttr(flagShape));
  auto initialized = FlatSymbolRefAttr::get(context, name);
  auto nvlink = LinkAttr::get(context, Link::nvlink_store);

  OpBuilder b(op);
  auto owner = OwnerOp::create(b, loc, b.getIndexType(), b.getIndexType(), dest.tensor,
                               dest.indices, sizes, /*row_slices=*/true);
  auto [node, gpu] = place(b, loc);
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, owner.getGpu(), gpu);
  scf::IfOp::create(
      b, loc, first,
      [&](OpBuilder &tb, Location l) {
        forEachGpu(tb, l, /*includeSelf=*/true, [&](OpBuilder &nb, Value peer) {
          put(nb, l, op.getValue(), dest, Peer{PeerScope::gpu, peer, Link::nvlink_store});
        });
        forEachGpu(tb, l, /*includeSelf=*/false, [&](OpBuilder &nb, Value peer) {
          SignalOp::create(nb, l, initialized, dest.indices,
                           PeerScopeAttr::get(context, PeerScope::gpu), peer, nvlink);
        });
        scf::YieldOp::create(tb, l);
      },
      [&](OpBuilder &eb, Location l) {
        WaitOp::create(eb, l, initialized, dest.indices, eb.getI64IntegerAttr(1));
        forEachGpu(eb, l, /*includeSelf=*/true, [&](OpBuilder &nb, Value peer) {
          put(nb, l, op.getValue(), dest, Peer{PeerScope::gpu, peer, Link::nvlink_store},
              ReduceKind::sum);
        });
        scf::YieldOp::create(eb, l);
      });
  op.erase();
}

/// Each GPU stores the tiles of its slice of tile rows to its own C only and counts them into
/// their band's `ready` flag (a band: a block of an owner's tile rows, the order's group, which
/// it walks a column at a time, by up to 8 tile columns: the last band's copies, after the last
/// tile, are then a few MiB). A copy engine copies the band to the other GPU once it is whole
/// and raises `arrived` there; the other GPU adds its tiles of the band into its own C with TMA,
/// counting them into `summed`, and a copy engine of that GPU copies the sums back, raising
/// `final` on the owner. The owner's tiles wait last for their band's `final` (the other GPU's
/// sums are its own adds). No SM writes to the other GPU: over NVLink the copy engines take the
/// transfers off the GEMM's critical path.
void Expander::expandAllReduceWithCopyEngines(AllReduceOp op) {
  Location loc = op.getLoc();
  auto producer = op->getParentOfType<TileGridOp>();
  TileOrderAttr order = producer.getOrderAttr();
  TileOrderKind kind = order ? order.getKind() : TileOrderKind::row_major;
  int64_t group = order ? order.getGroup() : 1;
  producer.setOrderAttr(TileOrderAttr::get(context, kind, group, /*localFirst=*/true));

  DistTensorType destType = op.getDest().getType();
  TileType tile = op.getValue().getType();
  SmallVector<int64_t> sizes(tile.getShape());
  Access dest{op.getDest(), llvm::to_vector(op.getIndices()), {}};
  int64_t rows = destType.getShape()[0];
  int64_t tileRows = llvm::divideCeil(rows, sizes[0]);
  int64_t tileCols = llvm::divideCeil(destType.getShape()[1], sizes[1]);
  // GPU g owns tile rows [sliceStart(g), sliceStart(g + 1)) (mk.owner row_slices).
  auto sliceStart = [&](int64_t g) { return g * tileRows / gpus; };
  constexpr int64_t kBandRows = 8; // where the order has no groups
  constexpr int64_t kBandCols = 8;
  int64_t bandRows = group > 1 ? group : kBandRows;
  int64_t bandCols = std::min(kBandCols, tileCols);
  int64_t colBands = llvm::divideCeil(tileCols, bandCols);
  int64_t bandsPerOwner = 0;
  for (int64_t g = 0; g < gpus; ++g)
    bandsPerOwner = std::max<int64_t>(
        bandsPerOwner, llvm::divideCeil(sliceStart(g + 1) - sliceStart(g), bandRows) * colBands);

  OpBuilder pb = OpBuilder::atBlockBegin(&program.getBodyBlock());
  auto flags = [&](StringRef what) {
    std::string name = (what + Twine(flagCount++)).str();
    FlagsOp::create(pb, loc, pb.getStringAttr(name),
                    pb.getDenseI64ArrayAttr({gpus * bandsPerOwner}));
    return FlatSymbolRefAttr::get(context, name);
  };
  FlatSymbolRefAttr ready = flags("band_ready"), arrived = flags("band_arrived"),
                    summed = flags("band_summed"), final = flags("band_final");
  auto gpuScope = PeerScopeAttr::get(context, PeerScope::gpu);
  auto nvlink = LinkAttr::get(context, Link::nvlink_store);
  // The band of tile (m, n), whose owner is `owner`.
  auto bandOf = [&](OpBuilder &b, Location l, Value m, Value n, Value owner) -> Value {
    Value start = arith::DivSIOp::create(
        b, l, arith::MulIOp::create(b, l, owner, constant(tileRows)), constant(gpus));
    Value rowBand =
        arith::DivSIOp::create(b, l, arith::SubIOp::create(b, l, m, start), constant(bandRows));
    Value within =
        arith::AddIOp::create(b, l, arith::MulIOp::create(b, l, rowBand, constant(colBands)),
                              arith::DivSIOp::create(b, l, n, constant(bandCols)));
    return arith::AddIOp::create(b, l, arith::MulIOp::create(b, l, owner, constant(bandsPerOwner)),
                                 within);
  };

  OpBuilder b(op);
  auto owner = OwnerOp::create(b, loc, b.getIndexType(), b.getIndexType(), dest.tensor,
                               dest.indices, sizes, /*row_slices=*/true);
  auto [node, gpu] = place(b, loc);
  Value band = bandOf(b, loc, dest.indices[0], dest.indices[1], owner.getGpu());
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, owner.getGpu(), gpu);
  scf::IfOp::create(
      b, loc, first,
      [&](OpBuilder &tb, Location l) {
        StoreOp::create(tb, l, op.getValue(), dest.tensor, dest.indices, ArrayRef<int64_t>{});
        SignalOp::create(tb, l, ready, ValueRange{band}, gpuScope, gpu, nvlink);
        scf::YieldOp::create(tb, l);
      },
      [&](OpBuilder &eb, Location l) {
        WaitOp::create(eb, l, arrived, ValueRange{band}, eb.getI64IntegerAttr(1));
        put(eb, l, op.getValue(), dest, Peer{}, ReduceKind::sum);
        SignalOp::create(eb, l, summed, ValueRange{band}, gpuScope, gpu, nvlink);
        scf::YieldOp::create(eb, l);
      });
  op.erase();

  // An owner's tile holds the sum once its band's `final` is raised: a grid of waits after the
  // tiles'.
  OpBuilder after(producer);
  after.setInsertionPointAfter(producer);
  auto waits = cast<TileGridOp>(after.clone(*producer));
  waits.removeDistributeAttr();
  Block &body = waits.getBodyBlock();
  for (Operation &inner : llvm::make_early_inc_range(llvm::reverse(body)))
    inner.erase();
  OpBuilder wb = OpBuilder::atBlockBegin(&body);
  auto waitOwner = OwnerOp::create(wb, loc, wb.getIndexType(), wb.getIndexType(), dest.tensor,
                                   ValueRange(body.getArguments()), sizes, /*row_slices=*/true);
  Value owned = arith::CmpIOp::create(wb, loc, arith::CmpIPredicate::eq, waitOwner.getGpu(),
                                      place(wb, loc).second);
  scf::IfOp::create(wb, loc, owned, [&](OpBuilder &tb, Location l) {
    Value waitBand = bandOf(tb, l, body.getArgument(0), body.getArgument(1), waitOwner.getGpu());
    WaitOp::create(tb, l, final, ValueRange{waitBand}, tb.getI64IntegerAttr(1));
    scf::YieldOp::create(tb, l);
  });

  // The copies, in the order each GPU issues them: its own bands there as they finish, then the
  // other GPU's bands back as their sums do.
  OpBuilder cb = OpBuilder::atBlockEnd(&program.getBodyBlock());
  int64_t columns = destType.getShape()[1];
  auto bandCopies = [&](bool back) {
    for (int64_t g = 0; g < gpus; ++g) {
      int64_t other = (g + 1) % gpus;
      for (int64_t j = 0; sliceStart(g) + j * bandRows < sliceStart(g + 1); ++j) {
        int64_t begin = sliceStart(g) + j * bandRows;
        int64_t end = std::min(begin + bandRows, sliceStart(g + 1));
        for (int64_t k = 0; k < colBands; ++k) {
          int64_t first = k * bandCols, last = std::min(first + bandCols, tileCols);
          SmallVector<int64_t> rowRange = {begin * sizes[0], std::min(end * sizes[0], rows)};
          SmallVector<int64_t> colRange = {first * sizes[1], std::min(last * sizes[1], columns)};
          int64_t index = g * bandsPerOwner + j * colBands + k;
          auto number = [&](int64_t value) { return cb.getI64IntegerAttr(value); };
          EngineCopyOp::create(cb, loc, dest.tensor, cb.getDenseI64ArrayAttr(rowRange),
                               cb.getDenseI64ArrayAttr(colRange), number(back ? other : g),
                               number(back ? g : other), back ? summed : ready, number(index),
                               number((end - begin) * (last - first)), back ? final : arrived,
                               number(index));
        }
      }
    }
  };
  bandCopies(/*back=*/false);
  bandCopies(/*back=*/true);
}

LogicalResult Expander::expandAllReduce(AllReduceOp op) {
  if (allReducesInPlace(op)) {
    if (copyEngines)
      expandAllReduceWithCopyEngines(op);
    else
      expandAllReduceInPlace(op);
    return success();
  }
  return expandReduction(op, op.getAxis());
}

LogicalResult Expander::expandReduceScatter(ReduceScatterOp op) {
  return expandReduction(op, op.getDest().getType().getPlacement().getAxis());
}

//===----------------------------------------------------------------------===//
// Gathers
//===----------------------------------------------------------------------===//

Value Expander::gather(Location loc, Value source, ArrayRef<int64_t> chunk) {
  auto sourceType = cast<DistTensorType>(source.getType());
  PlacementAttr placement = sourceType.getPlacement();
  MeshAxis axis = placement.getAxis();
  Value gathered = buffer(loc, sourceType.getShape(), sourceType.getElementType());

  // Chunks along the sharded dim and whatever else is smaller than the whole extent.
  SmallVector<int64_t> sizes;
  SmallVector<int64_t> wholeDims;
  for (auto [d, extent] : llvm::enumerate(chunk)) {
    // The sharded dim stays indexed: a whole shard is only part of the gathered tensor.
    bool whole = !placement.shardsDim(d) && extent >= sourceType.getLocalExtent(d, mesh);
    sizes.push_back(whole ? ShapedType::kDynamic : extent);
    if (whole)
      wholeDims.push_back(d);
  }
  SmallVector<int64_t> extents = tileExtents(sourceType, sizes);
  bool masked = llvm::any_of(llvm::enumerate(sizes), [&](auto size) {
    if (ShapedType::isDynamic(size.value()))
      return false;
    ShardSplit split = placement.shardsDim(size.index())
                           ? sourceType.getShardSplit(size.index(), mesh)
                           : ShardSplit{sourceType.getShape()[size.index()], 1};
    return !split.even() || split.base() % size.value() != 0;
  });
  auto chunkAt = [&](Value tensor, ValueRange coords) {
    return Access::at(tensor, wholeDims, coords);
  };
  bool acrossGpus = axis != MeshAxis::nodes && gpus > 1;
  bool acrossNodes = axis != MeshAxis::gpus && nodes > 1;

  // Every rank sends its own shard to the GPUs of its node and to its rail peers.
  OpBuilder rb = OpBuilder::atBlockEnd(&role(loc, RoleKind::intra_transfer).getBody().front());
  tileGrid(rb, loc, source, sizes, Grid{.masked = masked}, [&](OpBuilder &b, ValueRange coords) {
    Access from = chunkAt(source, coords), to = chunkAt(gathered, coords);
    if (acrossGpus)
      forEachGpu(b, loc, /*includeSelf=*/true, [&](OpBuilder &nb, Value gpu) {
        copy(nb, loc, from, to, Peer{PeerScope::gpu, gpu, Link::nvlink_bulk}, extents);
      });
    else
      copy(b, loc, from, to, Peer{}, extents);
    if (acrossNodes)
      forEachOtherNode(b, loc, [&](OpBuilder &nb, Value node) {
        copy(nb, loc, from, to, Peer{PeerScope::node, node, Link::rdma_proxy}, extents);
      });
  });

  // What arrives over a rail goes on to the other GPUs of the node.
  if (acrossGpus && acrossNodes) {
    OpBuilder pb = OpBuilder::atBlockEnd(&role(loc, RoleKind::republish).getBody().front());
    forEachOtherNode(pb, loc, [&](OpBuilder &b, Value node) {
      auto [myNode, myGpu] = place(b, loc);
      Value base = arith::MulIOp::create(b, loc, node, constant(gpus));
      Value holder = arith::AddIOp::create(b, loc, base, myGpu);
      tileGrid(b, loc, source, sizes, Grid{.masked = masked, .holder = holder},
               [&](OpBuilder &gb, ValueRange coords) {
                 Access chunkHere = chunkAt(gathered, coords);
                 forEachGpu(gb, loc, /*includeSelf=*/false, [&](OpBuilder &nb, Value gpu) {
                   copy(nb, loc, chunkHere, chunkHere, Peer{PeerScope::gpu, gpu, Link::nvlink_bulk},
                        extents);
                 });
               });
    });
  }
  return gathered;
}

LogicalResult Expander::expandAllGather(AllGatherOp op) {
  std::optional<ArrayRef<int64_t>> chunk = op.getChunk();
  if (!chunk)
    return op.emitOpError() << "has no chunk size (run mk-tile-and-order first)";
  Value gathered = gather(op.getLoc(), op.getSource(), *chunk);
  op.getResult().replaceAllUsesWith(gathered);
  op.erase();
  return success();
}

LogicalResult Expander::expandRingShift(RingShiftOp op) {
  Location loc = op.getLoc();
  Block &body = op.getBody().front();
  // Gather each shard at the granularity its loads read; a ring of one rank reads its own.
  MeshAxis axis = op.getAxis();
  int64_t steps = mesh.getAxisSize(axis);
  SmallVector<Value> gathered;
  for (auto [i, shard] : llvm::enumerate(op.getShards())) {
    if (steps == 1) {
      gathered.push_back(shard);
      continue;
    }
    auto type = cast<DistTensorType>(shard.getType());
    SmallVector<int64_t> chunk(type.getShape());
    for (Operation *user : body.getArgument(1 + i).getUsers())
      if (auto load = dyn_cast<LoadOp>(user)) {
        TileType tile = load.getResult().getType();
        int64_t first = type.getRank() - tile.getRank();
        for (int64_t d = 0; d < type.getRank(); ++d)
          chunk[d] = d < first ? 1 : tile.getShape()[d - first];
        break;
      }
    gathered.push_back(gather(loc, shard, chunk));
  }

  // Visit the sources in the order their shards arrive: this rank, its node, then the others.
  OpBuilder b(op);
  auto loop = scf::ForOp::create(b, loc, constant(0), constant(steps), constant(1), op.getInits());
  OpBuilder lb = OpBuilder::atBlockBegin(loop.getBody());
  Value step = loop.getInductionVar();
  auto [node, gpu] = place(lb, loc);
  Value source;
  Value inNode = arith::RemSIOp::create(lb, loc, step, constant(gpus));
  Value sourceGpu =
      arith::RemSIOp::create(lb, loc, arith::AddIOp::create(lb, loc, gpu, inNode), constant(gpus));
  Value nodeStep = arith::DivSIOp::create(lb, loc, step, constant(gpus));
  Value sourceNode = arith::RemSIOp::create(lb, loc, arith::AddIOp::create(lb, loc, node, nodeStep),
                                            constant(nodes));
  switch (axis) {
  case MeshAxis::world:
    source = arith::AddIOp::create(
        lb, loc, arith::MulIOp::create(lb, loc, sourceNode, constant(gpus)), sourceGpu);
    break;
  case MeshAxis::gpus:
    source = sourceGpu;
    break;
  case MeshAxis::nodes:
    source = arith::RemSIOp::create(lb, loc, arith::AddIOp::create(lb, loc, node, step),
                                    constant(nodes));
    break;
  }

  // The ranges of the sources' shards and the tiles' places in the sequence are those of the
  // sharded tensors; the tiles come from the gathered copies.
  for (auto [i, shard] : llvm::enumerate(op.getShards()))
    for (OpOperand &use : llvm::make_early_inc_range(body.getArgument(1 + i).getUses()))
      if (isa<ShardRangeOp, SequenceTileOp>(use.getOwner()))
        use.set(shard);

  IRMapping mapping;
  mapping.map(body.getArgument(0), source);
  for (auto [i, buffer] : llvm::enumerate(gathered))
    mapping.map(body.getArgument(1 + i), buffer);
  for (auto [arg, carried] :
       llvm::zip(body.getArguments().drop_front(1 + gathered.size()), loop.getRegionIterArgs()))
    mapping.map(arg, carried);
  for (Operation &inner : body.without_terminator())
    lb.clone(inner, mapping);
  auto yield = cast<YieldOp>(body.getTerminator());
  SmallVector<Value> next;
  for (Value value : yield.getValues())
    next.push_back(mapping.lookupOrDefault(value));
  scf::YieldOp::create(lb, loc, next);
  op.replaceAllUsesWith(loop.getResults());
  op.erase();
  return success();
}

//===----------------------------------------------------------------------===//
// Expert routing
//===----------------------------------------------------------------------===//

LogicalResult Expander::expandDispatch(DispatchOp op) {
  if (!placements.empty())
    return op.emitOpError() << "routes tokens a second time in @" << program.getSymName()
                            << ": a program routes once, as its launches report one routing "
                               "(mk_routing_report)";
  // A rank's tokens and experts are found by its index alone.
  for (auto [type, what] : {std::pair{op.getTokens().getType(), "tokens"},
                            std::pair{op.getRouted().getType(), "experts"}})
    if (!type.isEvenlySplit(mesh)) {
      int64_t extent = type.getShape()[0], world = mesh.getWorldSize();
      return op.emitOpError() << "routes " << what << " split unevenly: " << extent << " over "
                              << world << " ranks; mkc routes equal shards, a multiple of "
                              << world;
    }
  routePointToPoint(op);
  return success();
}

LogicalResult Expander::expandCombine(CombineOp op) {
  Value placement = placements.lookup(op.getOrigins());
  if (!placement)
    return op.emitOpError() << "combines rows that no mk.dispatch of this program routed";
  auto grid = op->getParentOfType<TileGridOp>();
  if (!grid || grid->getParentOp() != computeRole)
    return op.emitOpError() << "must be in a tile grid of the program";
  returnPointToPoint(op, grid);
  return success();
}

/// The expert whose routed rows `use` reads (a load, or a matmul's operand, indexed along the
/// experts), or null for a read of several experts' rows.
static Value expertRead(OpOperand &use) {
  auto outer = [](OperandRange indices, ArrayRef<int64_t> wholeDims) {
    return llvm::is_contained(wholeDims, 0) ? Value() : indices.front();
  };
  if (auto load = dyn_cast<LoadOp>(use.getOwner()))
    return outer(load.getIndices(), load.getWholeDims());
  if (auto matmul = dyn_cast<MatmulOp>(use.getOwner()))
    return matmul.getLhs() == use.get() ? outer(matmul.getLhsIndices(), matmul.getLhsWholeDims())
                                        : outer(matmul.getRhsIndices(), matmul.getRhsWholeDims());
  return Value();
}

void Expander::routePointToPoint(DispatchOp op) {
  Location loc = op.getLoc();
  DistTensorType routedType = op.getRouted().getType(), tokensType = op.getTokens().getType(),
                 expertsType = op.getExperts().getType();
  int64_t experts = routedType.getShape()[0], capacity = routedType.getShape()[1];
  int64_t world = mesh.getWorldSize(), perRank = tokensType.getLocalExtent(0, mesh);
  Type i32 = IntegerType::get(context, 32);
  Value census = buffer(loc, {world, experts}, i32);
  Value routed = buffer(loc, routedType);
  Value counts = buffer(loc, op.getCounts().getType());
  Value origins = buffer(loc, op.getOrigins().getType());
  Value placement = buffer(loc, op.getExperts().getType());

  OpBuilder fb = OpBuilder::atBlockBegin(&program.getBodyBlock());
  auto flags = [&](StringRef name, int64_t size) {
    FlagsOp::create(fb, loc, fb.getStringAttr(name), fb.getDenseI64ArrayAttr({size}));
    return FlatSymbolRefAttr::get(context, name);
  };
  FlatSymbolRefAttr censusFlags = flags("routing_census", 1);
  FlatSymbolRefAttr countedFlags = flags("routing_counted", 1);
  arrivedFlags = flags("routing_arrived", experts);
  routedFlags = flags("routing_routed", 1);
  Value zero = constant(0);
  auto signal = [&](OpBuilder &b, FlatSymbolRefAttr flag, Value index, PeerScope scope,
                    Value peer) {
    std::optional<Link> link;
    if (scope == PeerScope::gpu)
      link = Link::nvlink_store;
    if (scope == PeerScope::node)
      link = Link::rdma_proxy;
    SignalOp::create(b, loc, flag, ValueRange{index}, PeerScopeAttr::get(context, scope), peer,
                     link ? LinkAttr::get(context, *link) : LinkAttr());
  };
  auto wait = [&](OpBuilder &b, FlatSymbolRefAttr flag, Value index, int64_t count,
                  std::optional<RoleKind> perCta) {
    WaitOp::create(b, loc, flag, ValueRange{index}, b.getI64IntegerAttr(count),
                   perCta ? RoleKindAttr::get(context, *perCta) : RoleKindAttr());
  };
  // Slices [from, + count) of `source` (one without a count) to [to, ...) of `dest` on a peer.
  auto send = [&](OpBuilder &b, Value source, Value from, Value dest, Value to, Value count,
                  Value countIndex, Peer peer) {
    SendRowsOp::create(b, loc, source, from, dest, to, count, countIndex,
                       PeerScopeAttr::get(context, peer.scope), peer.index,
                       LinkAttr::get(context, *peer.link));
  };

  // The dispatch role: one CTA counts this rank's copies into every GPU's census; once every
  // rank's row is in, it fills the row counts of this rank's experts, while every CTA sends its
  // share of the rows.
  RoleOp dispatch = role(loc, RoleKind::dispatch);
  OpBuilder b = OpBuilder::atBlockEnd(&dispatch.getBody().front());
  auto single = [&](function_ref<void(OpBuilder &)> body) {
    auto once = SingleCtaOp::create(b, loc);
    OpBuilder ob(context);
    ob.createBlock(&once.getBody());
    body(ob);
  };
  single([&](OpBuilder &ob) {
    RouteCensusOp::create(ob, loc, op.getExperts(), census);
    forEachGpu(ob, loc, /*includeSelf=*/true, [&](OpBuilder &nb, Value gpu) {
      signal(nb, censusFlags, zero, PeerScope::gpu, gpu);
    });
  });

  // Across nodes, the rows go to the rail peer of each node that holds one of their experts,
  // packed, with their routing, the census row and their number; the rail peer passes the census
  // row on to its node's GPUs and routes the rows there as its own.
  Value returnAt, received, recv, recvExperts, slots;
  FlatSymbolRefAttr receivedFlags;
  auto regionOf = [&](OpBuilder &nb, Value node) {
    return arith::MulIOp::create(nb, loc, node, constant(perRank));
  };
  if (nodes > 1) {
    int64_t regions = nodes * perRank, topK = expertsType.getShape()[1];
    Type element = tokensType.getElementType();
    Value pack = buffer(loc, {regions, tokensType.getShape()[1]}, element);
    Value packExperts = buffer(loc, {regions, topK}, i32);
    Value packed = buffer(loc, {2 * nodes}, i32);
    returnAt = buffer(loc, op.getExperts().getType());
    received = buffer(loc, {2 * nodes}, i32);
    recv = buffer(loc, {regions, tokensType.getShape()[1]}, element);
    recvExperts = buffer(loc, {regions, topK}, i32);
    slots = buffer(loc, {2 * regions, topK}, i32);
    FlatSymbolRefAttr packedFlags = flags("routing_packed", 1);
    receivedFlags = flags("routing_received", nodes);

    RoutePackOp::create(b, loc, op.getTokens(), op.getExperts(), pack, packExperts, packed,
                        returnAt, b.getI64IntegerAttr(experts));
    signal(b, packedFlags, zero, PeerScope::self, Value());
    single([&](OpBuilder &ob) {
      wait(ob, packedFlags, zero, 1, RoleKind::dispatch);
      auto [node, gpu] = place(ob, loc);
      Value me =
          arith::AddIOp::create(ob, loc, arith::MulIOp::create(ob, loc, node, constant(gpus)), gpu);
      forEachOtherNode(ob, loc, [&](OpBuilder &nb, Value peer) {
        Peer rail{PeerScope::node, peer, Link::rdma_proxy};
        send(nb, census, me, census, me, Value(), Value(), rail);
        auto second = [&](Value index) {
          return arith::AddIOp::create(nb, loc, index, constant(nodes));
        };
        send(nb, packed, peer, received, node, Value(), Value(), rail);
        send(nb, packed, second(peer), received, second(node), Value(), Value(), rail);
        Value from = regionOf(nb, peer), to = regionOf(nb, node);
        send(nb, pack, from, recv, to, packed, peer, rail);
        send(nb, packExperts, from, recvExperts, to, packed, peer, rail);
        signal(nb, receivedFlags, node, PeerScope::node, peer);
      });
    });
    single([&](OpBuilder &ob) {
      forEachOtherNode(ob, loc, [&](OpBuilder &nb, Value source) {
        wait(nb, receivedFlags, source, 1, std::nullopt);
        auto [node, gpu] = place(nb, loc);
        Value row = arith::AddIOp::create(
            nb, loc, arith::MulIOp::create(nb, loc, source, constant(gpus)), gpu);
        forEachGpu(nb, loc, /*includeSelf=*/false, [&](OpBuilder &gb, Value other) {
          send(gb, census, row, census, row, Value(), Value(),
               Peer{PeerScope::gpu, other, Link::nvlink_store});
        });
        forEachGpu(nb, loc, /*includeSelf=*/true, [&](OpBuilder &gb, Value other) {
          signal(gb, censusFlags, zero, PeerScope::gpu, other);
        });
      });
    });
  }

  wait(b, censusFlags, zero, world, std::nullopt);
  single([&](OpBuilder &ob) {
    RouteCountsOp::create(ob, loc, census, counts, ob.getI64IntegerAttr(capacity));
    signal(ob, countedFlags, zero, PeerScope::self, Value());
  });
  RouteRowsOp::create(b, loc, op.getTokens(), op.getExperts(), census, routed, origins, placement,
                      arrivedFlags, Value(), Value(), Value());
  signal(b, routedFlags, zero, PeerScope::self, Value());
  if (nodes > 1)
    forEachOtherNode(b, loc, [&](OpBuilder &nb, Value source) {
      wait(nb, receivedFlags, source, 1, std::nullopt);
      RouteRowsOp::create(nb, loc, recv, recvExperts, census, routed, origins, slots, arrivedFlags,
                          source, received, source);
    });

  // The compute role learns the row counts first; each read of an expert's rows waits for every
  // dispatch CTA of every rank to have sent them (a read of several experts' rows, for each).
  OpBuilder cb = OpBuilder::atBlockBegin(&computeRole.getBody().front());
  wait(cb, countedFlags, zero, 1, std::nullopt);
  // (Matmuls sharing A, a gated MLP's, wait once, before the first.)
  DenseMap<std::pair<Block *, Value>, Operation *> firstReaders;
  for (OpOperand &use : op.getRouted().getUses()) {
    // (A grid over the routed rows' tiles reads none of them.)
    if (auto grid = dyn_cast<TileGridOp>(use.getOwner()); grid && grid.getTarget() == use.get())
      continue;
    Operation *&first = firstReaders[{use.getOwner()->getBlock(), expertRead(use)}];
    if (!first || use.getOwner()->isBeforeInBlock(first))
      first = use.getOwner();
  }
  for (auto &[at, reader] : firstReaders) {
    OpBuilder rb(reader);
    if (Value expert = at.second) {
      wait(rb, arrivedFlags, expert, world, RoleKind::dispatch);
      continue;
    }
    scf::ForOp::create(rb, loc, zero, constant(experts), constant(1), ValueRange{},
                       [&](OpBuilder &lb, Location l, Value expert, ValueRange) {
                         wait(lb, arrivedFlags, expert, world, RoleKind::dispatch);
                         scf::YieldOp::create(lb, l);
                       });
  }

  op.getRouted().replaceAllUsesWith(routed);
  op.getCounts().replaceAllUsesWith(counts);
  op.getOrigins().replaceAllUsesWith(origins);
  placements[origins] = placement;
  routedCounts = counts;
  routing = Routing{returnAt, received, receivedFlags, perRank};
  op.erase();
}

void Expander::returnPointToPoint(CombineOp op, TileGridOp grid) {
  Location loc = op.getLoc();
  DistTensorType dest = op.getDest().getType(), weights = op.getWeights().getType();
  TileType tile = op.getValue().getType();
  // Each result row goes back to its token's slot, [T, K, H] sharded as the tokens are; across
  // nodes to a row of the regions of a symmetric buffer that mk.route_rows describes.
  int64_t topK = weights.getShape()[1], hidden = dest.getShape()[1];
  int64_t region = routing.perRank * topK;
  auto returnedType =
      nodes == 1 ? DistTensorType::get({dest.getShape()[0], topK, hidden}, dest.getElementType(),
                                       dest.getPlacement())
                 : DistTensorType::get({RouteRowsOp::returnRegions(nodes) * region, 1, hidden},
                                       dest.getElementType(),
                                       PlacementAttr::get(context, PlacementKind::symmetric));
  Value returned = buffer(loc, returnedType);
  OpBuilder fb = OpBuilder::atBlockBegin(&program.getBodyBlock());
  FlagsOp::create(fb, loc, "routing_returned", ArrayRef<int64_t>{1});
  auto returnedFlags = FlatSymbolRefAttr::get(context, "routing_returned");
  FlatSymbolRefAttr backFlags;
  if (nodes > 1) {
    FlagsOp::create(fb, loc, "routing_back", ArrayRef<int64_t>{1});
    backFlags = FlatSymbolRefAttr::get(context, "routing_back");
  }
  Value zero = constant(0);

  OpBuilder b(op);
  Value converted =
      ConvertOp::create(b, loc, tile.withElementType(dest.getElementType()), op.getValue());
  // The origins of the tile's rows were sent with them: the senders read them after this wait.
  WaitOp::create(b, loc, arrivedFlags, ValueRange{op.getCoords()[0]},
                 b.getI64IntegerAttr(mesh.getWorldSize()),
                 RoleKindAttr::get(context, RoleKind::dispatch));
  ReturnRowsOp::create(b, loc, converted, op.getCoords(), op.getOrigins(), routedCounts, returned);

  // Every compute CTA tells every GPU of the node it has returned its rows. Across nodes, the
  // first then sends each other node's rail peer the results of its tokens, region by region;
  // then the tokens' tiles sum theirs.
  OpBuilder after(context);
  after.setInsertionPointAfter(grid);
  forEachGpu(after, loc, /*includeSelf=*/true, [&](OpBuilder &nb, Value gpu) {
    SignalOp::create(nb, loc, returnedFlags, ValueRange{zero},
                     PeerScopeAttr::get(context, PeerScope::gpu), gpu,
                     LinkAttr::get(context, Link::nvlink_store));
  });
  auto waitReturned = [&](OpBuilder &wb) {
    WaitOp::create(wb, loc, returnedFlags, ValueRange{zero}, wb.getI64IntegerAttr(gpus),
                   RoleKindAttr::get(context, RoleKind::compute));
  };
  if (nodes > 1) {
    auto once = SingleCtaOp::create(after, loc);
    OpBuilder ob(context);
    ob.createBlock(&once.getBody());
    waitReturned(ob);
    forEachOtherNode(ob, loc, [&](OpBuilder &nb, Value source) {
      WaitOp::create(nb, loc, routing.receivedFlags, ValueRange{source}, nb.getI64IntegerAttr(1));
      auto [node, gpu] = place(nb, loc);
      Value second = arith::AddIOp::create(nb, loc, source, constant(nodes));
      Value from = arith::MulIOp::create(nb, loc, second, constant(region));
      Value to = arith::MulIOp::create(nb, loc, node, constant(region));
      SendRowsOp::create(nb, loc, returned, from, returned, to, routing.received, second,
                         PeerScopeAttr::get(context, PeerScope::node), source,
                         LinkAttr::get(context, Link::rdma_proxy));
      SignalOp::create(nb, loc, backFlags, ValueRange{zero},
                       PeerScopeAttr::get(context, PeerScope::node), source,
                       LinkAttr::get(context, Link::rdma_proxy));
    });
  }
  // Tiles of a rank's tokens that hold whole tiles of the shard (the largest divisor of its
  // tokens up to the result tile's rows): tiles at i * t, which no shard boundary cuts, so that
  // tokens of any count a rank share no numbering with the experts' capacity.
  Grid tokenTiles;
  tokenTiles.masked = true;
  int64_t tokens = dest.getLocalExtent(0, mesh), rows = std::min(tile.getShape()[0], tokens);
  while (tokens % rows)
    --rows;
  SmallVector<int64_t> extents = {rows, tile.getShape()[1]};
  Value placement = placements.lookup(op.getOrigins());
  tileGrid(after, loc, op.getDest(), extents, tokenTiles, [&](OpBuilder &gb, ValueRange coords) {
    waitReturned(gb);
    if (nodes > 1)
      WaitOp::create(gb, loc, backFlags, ValueRange{zero}, gb.getI64IntegerAttr(nodes - 1));
    WaitOp::create(gb, loc, routedFlags, ValueRange{zero}, gb.getI64IntegerAttr(1),
                   RoleKindAttr::get(context, RoleKind::dispatch));
    CombineReturnedOp::create(gb, loc, returned, placement, op.getWeights(), op.getDest(), coords,
                              extents, routing.returnAt);
  });
  op.erase();
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

LogicalResult Expander::run() {
  Block &block = program.getBodyBlock();
  if (!block.getOps<RoleOp>().empty())
    return program.emitError() << "@" << program.getSymName() << " is already scheduled";
  if (!mesh.isBound())
    return program.emitError() << "@" << program.getSymName()
                               << " is not specialized for a topology (run mk-specialize first)";

  // The program's tile grids become the compute role.
  SmallVector<TileGridOp> grids = llvm::to_vector(block.getOps<TileGridOp>());
  computeRole = role(program.getLoc(), RoleKind::compute);
  for (TileGridOp grid : grids)
    grid->moveBefore(&computeRole.getBody().front(), computeRole.getBody().front().end());

  for (AllGatherOp op : llvm::to_vector(block.getOps<AllGatherOp>()))
    if (failed(expandAllGather(op)))
      return failure();
  SmallVector<Operation *> collectives;
  program.walk([&](Operation *op) {
    if (isa<AllReduceOp, ReduceScatterOp, RingShiftOp, DispatchOp, CombineOp>(op))
      collectives.push_back(op);
  });
  for (Operation *op : collectives) {
    LogicalResult expanded = TypeSwitch<Operation *, LogicalResult>(op)
                                 .Case([&](AllReduceOp o) { return expandAllReduce(o); })
                                 .Case([&](ReduceScatterOp o) { return expandReduceScatter(o); })
                                 .Case([&](RingShiftOp o) { return expandRingShift(o); })
                                 .Case([&](DispatchOp o) { return expandDispatch(o); })
                                 .Case([&](CombineOp o) { return expandCombine(o); });
    if (failed(expanded))
      return failure();
  }
  return success();
}

struct ExpandCollectivesPass : mk::impl::MkExpandCollectivesBase<ExpandCollectivesPass> {
  using MkExpandCollectivesBase::MkExpandCollectivesBase;
  void runOnOperation() override {
    OneShotCost oneShot{oneShotAllReduce, hopLatencyUs * 1e-6, nvlinkGBps * 1e9};
    if (failed(Expander(getOperation(), inPlaceAllReduce, copyEngineAllReduce, oneShot).run()))
      signalPassFailure();
  }
};

} // namespace
