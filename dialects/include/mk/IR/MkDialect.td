//===- MkDialect.td - the mk tile-program dialect ----------*- tablegen -*-===//
//
// The dialect in which a fused multi-GPU operation is written: distributed tensors, compute on tiles,
// and collective intents on tiles (program level); and, after the compiler's passes, the SM roles,
// transfers and signals of one persistent kernel (scheduled level).
//
//===----------------------------------------------------------------------===//

#ifndef MK_DIALECT_TD
#define MK_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Mk_Dialect : Dialect {
  let name = "mk";
  let cppNamespace = "::mlir::mk";
  let summary = "Tile programs for fused multi-GPU, multi-node kernels";
  let description = [{
    A program in `mk` describes one fused operation — for example a GEMM whose output tiles are
    all-reduced across GPUs — as compute on tiles plus collective intents on tiles. The intents say
    what must happen to a tile (it must be summed over all ranks, gathered, shifted around a ring,
    routed to the rank that owns an expert), never how. The compiler's passes turn a program into the
    scheduled form of one persistent kernel: SM roles with CTA counts, point-to-point transfers over a
    named link, per-tile flags with signals and waits, and reductions of received tiles.

    Tensors carry a placement over a topology of `nodes x gpus` ranks; tile coordinates are always
    global tile indices of the tensor they index.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::scf::SCFDialect"];
  // What mk-plan-lowering decides and mk-lower-to-emitc reads (mk/Transforms/LoweringPlan.h).
  let discardableAttrs = (ins
    "::mlir::mk::LoweringAttr":$lowering,
    "::mlir::mk::GemmEngineAttr":$gemm_engine,
    "::mlir::mk::AttentionEngineAttr":$attention_engine,
    "::mlir::DenseI64ArrayAttr":$gpu_offsets
  );
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  let extraClassDeclaration = [{
  private:
    // Defined next to the attribute and type storage classes.
    void registerAttributes();
    void registerTypes();
  }];
}

class Mk_Op<string mnemonic, list<Trait> traits = []> : Op<Mk_Dialect, mnemonic, traits>;

class Mk_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Mk_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

class Mk_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Mk_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

#endif // MK_DIALECT_TD
