//===- MkEnums.td - enumerations of the mk dialect ---------*- tablegen -*-===//

#ifndef MK_ENUMS_TD
#define MK_ENUMS_TD

include "mk/IR/MkDialect.td"
include "mlir/IR/EnumAttr.td"

def Mk_MeshAxis : I32EnumAttr<"MeshAxis", "a set of ranks of the topology", [
    I32EnumAttrCase<"world", 0>,   // every rank: nodes x gpus
    I32EnumAttrCase<"nodes", 1>,   // the ranks with this rank's GPU index, one per node (a rail)
    I32EnumAttrCase<"gpus", 2>,    // the GPUs of this rank's node
  ]> {
  let cppNamespace = "::mlir::mk";
}

def Mk_PlacementKind : I32EnumAttr<"PlacementKind", "how a tensor is laid out over the ranks", [
    I32EnumAttrCase<"shard", 0>,       // split evenly along one dim over a mesh axis
    I32EnumAttrCase<"replicated", 1>,  // every rank holds the whole tensor, with the same contents
    I32EnumAttrCase<"symmetric", 2>,   // every rank holds a whole-shape tensor of its own contents,
                                       // at the same place in symmetric memory (peer-addressable)
  ]> {
  let cppNamespace = "::mlir::mk";
  let genSpecializedAttr = 0;
}

def Mk_ReduceKind : I32EnumAttr<"ReduceKind", "how contributions combine", [
    I32EnumAttrCase<"sum", 0>,
    I32EnumAttrCase<"max", 1>,
    I32EnumAttrCase<"min", 2>,
  ]> {
  let cppNamespace = "::mlir::mk";
}

def Mk_Activation : I32EnumAttr<"Activation", "an elementwise activation function", [
    I32EnumAttrCase<"relu", 0>,
    I32EnumAttrCase<"gelu", 1>,   // tanh approximation
    I32EnumAttrCase<"silu", 2>,
  ]> {
  let cppNamespace = "::mlir::mk";
}

def Mk_TileOrderKind : I32EnumAttr<"TileOrderKind", "the order in which a grid's tiles are produced", [
    I32EnumAttrCase<"row_major", 0>,
    I32EnumAttrCase<"column_major", 1>,
    I32EnumAttrCase<"swizzle", 2>,    // row-major within bands of `group` tile rows (L2 reuse)
  ]> {
  let cppNamespace = "::mlir::mk";
  let genSpecializedAttr = 0;
}

def Mk_RoleKind : I32EnumAttr<"RoleKind", "what the CTAs of one role of a persistent kernel do", [
    I32EnumAttrCase<"compute", 0>,         // produce output tiles
    I32EnumAttrCase<"intra_transfer", 1>,  // move tiles to GPUs of this node over NVLink
    I32EnumAttrCase<"intra_reduce", 2>,    // sum tiles received from GPUs of this node
    I32EnumAttrCase<"inter_send", 3>,      // hand tiles to the network proxy for other nodes
    I32EnumAttrCase<"inter_reduce", 4>,    // sum tiles received from other nodes
    I32EnumAttrCase<"republish", 5>,       // copy finished tiles to the GPUs of this node
    I32EnumAttrCase<"dispatch", 6>,        // route rows to the ranks that consume them
    I32EnumAttrCase<"combine", 7>,         // bring routed results back to their tokens
  ]> {
  let cppNamespace = "::mlir::mk";
}

def Mk_Link : I32EnumAttr<"Link", "the mechanism that carries a transfer", [
    I32EnumAttrCase<"nvlink_store", 0>,  // SM stores through the peer mapping
    I32EnumAttrCase<"nvlink_bulk", 1>,   // bulk asynchronous copy (TMA) to the peer mapping
    I32EnumAttrCase<"rdma_proxy", 2>,    // command to the host proxy, which posts an RDMA write
  ]> {
  let cppNamespace = "::mlir::mk";
}

def Mk_Lowering : I32EnumAttr<"Lowering",
    "how mk-lower-to-emitc lowers an op that is not lowered on its own, as mk-plan-lowering decided "
    "(carried on the op as `mk.lowering`)", [
    I32EnumAttrCase<"load", 0>,      // a matmul of the GEMM engine's producer: its TMA loads; the
                                     // attention engine's loads of Q and of K (with V)
    I32EnumAttrCase<"mma", 1>,       // a matmul of the GEMM engine's consumers: their wgmma; an
                                     // attention step of the attention engine's consumers
    I32EnumAttrCase<"store", 2>,     // a store or put of the engine's tile, by its senders
    I32EnumAttrCase<"producer", 3>,  // a wait of the engine's producer
    I32EnumAttrCase<"consumer", 4>,  // a wait of the engine's consumers
    I32EnumAttrCase<"deferred", 5>,  // a consumers' signal or wait the senders raise or wait on,
                                     // in the order of the engine's writes
    I32EnumAttrCase<"tma", 6>,       // a reduction through the bulk tensor copy engine, and the
                                     // stores and puts of its result
    I32EnumAttrCase<"chunks", 7>,    // a reduction that is only stored, and its stores
    I32EnumAttrCase<"elide", 8>,     // a conversion the accumulate or the engine's store does
    I32EnumAttrCase<"fused", 9>,     // a matmul the engine computes in the pass of the one before
                                     // it that shares its A; a load of V, with its K
    I32EnumAttrCase<"registers", 10>, // elementwise math on the engine's products, in the
                                      // consumers' registers (mk::GemmTile), and the loads of
                                      // the rows it broadcasts (mk::GemmRow); the attention
                                      // engine's initial state and final normalisation
  ]> {
  let cppNamespace = "::mlir::mk";
  // Mk_LoweringAttr (MkAttrs.td) prints it as #mk.lowering<...>.
  let genSpecializedAttr = 0;
}

def Mk_PeerScope : I32EnumAttr<"PeerScope", "which rank a transfer or signal reaches", [
    I32EnumAttrCase<"self", 0>,   // this rank
    I32EnumAttrCase<"gpu", 1>,    // GPU g of this node
    I32EnumAttrCase<"node", 2>,   // this rank's GPU index on node n (rail-aligned)
  ]> {
  let cppNamespace = "::mlir::mk";
}

#endif // MK_ENUMS_TD
