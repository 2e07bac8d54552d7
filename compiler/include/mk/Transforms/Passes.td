//===- Passes.td - the mkc compiler passes -----------------*- tablegen -*-===//
//
// From a program-level tile program to the scheduled form of one persistent kernel, and on to
// EmitC, from which the CUDA C++ is printed. Run in this order by mkc (see Pipeline.h).
//
//===----------------------------------------------------------------------===//

#ifndef MK_TRANSFORMS_PASSES_TD
#define MK_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def MkSpecialize : Pass<"mk-specialize", "::mlir::mk::ProgramOp"> {
  let summary = "Bind shape symbols, the topology and this rank";
  let description = [{
    Replaces every shape symbol in the program's types with its value, binds the mesh and, when
    given, the rank the program is compiled for. Every symbol must be bound, by the option or by
    the program itself; a value that conflicts with the program's is an error. Each
    mk.shape_symbol becomes a constant of its value. The verifier then
    re-checks the program with numbers: divisibility of sharded dims and tile sizes, extents that
    must agree.

    ```mlir
    // mk-opt --mk-specialize="topology=2x4 rank=3 shapes=M=8192,N=8192,K=8192"
    mk.program @p [M, N, K] mesh <?x?> (%A: !mk.tensor<[M, K], bf16, shard 1 over world>) {...}
    // becomes
    mk.program @p [M = 8192, N = 8192, K = 8192] mesh <2x4> rank 3
        (%A: !mk.tensor<[8192, 8192], bf16, shard 1 over world>) {...}
    ```
  }];
  let options = [
    Option<"topology", "topology", "std::string", "\"\"",
           "NODESxGPUS, e.g. 2x4 (required unless the program's mesh is bound)">,
    Option<"rank", "rank", "int64_t", "-1", "the rank compiled for (default: left open)">,
    ListOption<"shapes", "shapes", "std::string", "NAME=VALUE bindings of shape symbols">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def MkSplitEpilogues : Pass<"mk-split-epilogues", "::mlir::mk::ProgramOp"> {
  let summary = "Move what uses a collective's combined tile into a grid of its own after it";
  let description = [{
    An mk.all_reduce or mk.reduce_scatter with a result gives the rest of its tile body the
    combined tile. The ops that use it (and, recomputed, the reads and pure ops they need from
    the body) move into a new grid right after the grid, over the collective's destination with
    the grid's tile sizes: on the ranks that hold each combined tile, it reads the tile back once
    the collective has stored it (mk-insert-signals orders the read), and the epilogue follows
    in the same kernel. The collective must store the grid's own tile, at the grid's
    coordinates, directly in the grid's body; what the epilogue needs from the body must not
    write memory.

    ```mlir
    mk.tile_grid (%m, %n) over %R tiles [128, 256] : !R {
      %p = mk.matmul ...
      %s = mk.all_reduce sum %p into %R[%m, %n] : !T, !R -> !T
      %y = mk.activation gelu %s : !T
      mk.store %y, %Y[%m, %n] : !T, !Y
    }
    // becomes
    mk.tile_grid (%m, %n) over %R tiles [128, 256] : !R {
      %p = mk.matmul ...
      mk.all_reduce sum %p into %R[%m, %n] : !T, !R
    }
    mk.tile_grid (%m, %n) over %R tiles [128, 256] : !R {
      %s = mk.load %R[%m, %n] : !R -> !T
      %y = mk.activation gelu %s : !T
      mk.store %y, %Y[%m, %n] : !T, !Y
    }
    ```
  }];
}

def MkTileAndOrder : Pass<"mk-tile-and-order", "::mlir::mk::ProgramOp"> {
  let summary = "Choose the main-loop depth, gather granularity and tile production order";
  let description = [{
    For every tile grid without an order: a grid whose tiles run matmuls gets a swizzled order
    (bands of up to 8 tile rows share panels in L2); a grid that reads a tensor an mk.all_gather
    is still bringing in gets `local_first`, so tiles whose rows this rank holds come first while
    remote rows arrive. Every matmul without a `k_tile` gets the depth that makes a 128-byte row
    (64 for 16-bit, 128 for 8-bit, 32 for 32-bit operands), reduced (to 32 at least, which the tile
    library's copies take for every tile) until it divides the local contracted extent; where none
    does, the 128-byte depth, whose last step is zero-filled past the extent. Every mk.all_gather without a `chunk` gets the granularity its consumers
    read: their tile rows by the whole of the other dims.

    ```mlir
    mk.tile_grid (%m, %n) over %C tiles [128, 256] : ...
    // becomes
    mk.tile_grid (%m, %n) over %C tiles [128, 256] order <swizzle 8, local_first> : ...
    ```

    A 2-D grid of 128-row matmul tiles (the GEMM engine's) whose every tile value has the grid's
    tile shape gets the GEMM engine's tile shape, 128 x 256, 128 x 128, 128 x 64 or 64 x 64 and
    at most the program's width, that takes the least time over `sm-count` CTAs: the rounds of
    tiles the busiest CTA walks times a tile's time (128 columns take 0.54 of 256, measured; 64
    columns 0.30; 64 x 64 0.20), the larger on a tie. So 128 columns where 256-wide tiles would
    leave SMs idle, 64 where even 128-wide ones would (decode's few rows: 1 x 4096 has 32 tiles of
    128 for 132 SMs), and 64 rows, one MMA warpgroup's, where a grid of more than 64 rows still
    would (128 x 4096 has 64 tiles of 128 x 64). Only a shape that the other grids' accesses to
    each tensor the program writes agree with, tile for tile (mk-insert-signals orders them tile
    by tile), is a candidate: a grid whose output another grid reads in 256-column tiles keeps
    256. The grid's tile sizes and its tile types change together. `gemm-tile-n` and
    `gemm-tile-m` set the width and the rows instead.

    `gemm-k-splits` (1, the default: none) splits the tiles' K where the grid multiplies one A
    (`k_splits` on its matmuls: split-K): in that many parts, or with 0 in the parts a model
    finds fastest, 2 to 4 of at least 1024, taken only where it is 10% faster than the best
    unsplit tiling (256 x 4096 x 4096: 64 tiles of 128 x 128 in two parts each). There a tile
    part's time is the longer of its multiplication and its loads (A's rows that exist and B's
    columns over its share of K, and a split part's f32 product written), at a measured weight
    (128 x 128 tiles take 0.54 of 128 x 256), and the last part's reads of the other products
    add to its tile's. The model is not the default until its choices are measured on a GPU.
  }];
  let options = [
    Option<"smCount", "sm-count", "int64_t", /*default=*/"132",
           "CTAs of the persistent grid (1 to 1024), which the tile width keeps busy">,
    Option<"gemmTileN", "gemm-tile-n", "int64_t", /*default=*/"0",
           "Columns of the GEMM engine's matmul tiles, 64, 128 or 256 (0: chosen per shape)">,
    Option<"gemmTileM", "gemm-tile-m", "int64_t", /*default=*/"0",
           "Rows of the GEMM engine's matmul tiles, 64 or 128 (0: chosen per shape)">,
    Option<"gemmKSplits", "gemm-k-splits", "int64_t", /*default=*/"1",
           "Parts the GEMM engine splits each tile's K in, 1 to 8 (1, the default: none; 0: as "
           "the cost model chooses per shape)">,
  ];
}

def MkExpandCollectives : Pass<"mk-expand-collectives", "::mlir::mk::ProgramOp"> {
  let summary = "Expand collective intents into hierarchical, rail-aligned transfers in roles";
  let description = [{
    Rewrites each collective intent into point-to-point transfers between ranks, within the node
    over NVLink first, then across nodes only between GPUs of the same index (rails), so that a
    tile crosses the network once per node and never more than 1/(GPUs per node) of the bytes of
    a reduction leave a node. The program's tile grids become the `compute` role; the transfers
    that follow a tile's production go to new roles (`intra_reduce`, `inter_reduce`,
    `intra_transfer`, `republish`), with symmetric staging buffers for what arrives:

    - `mk.all_reduce`: each tile's owner GPU (round-robin within the node) receives the node's
      partials in G slots and sums them; with several nodes it sends the node partial to the same
      GPU of every other node, sums the N node partials, and republishes the tile to every GPU of
      its node.
    - `mk.reduce_scatter`: as above, but the node partial goes to the owner's node only, which
      keeps the sum.
    - `mk.all_gather`: each rank copies its shard to every GPU of its node and to its rail peers;
      rail peers republish what they receive within their node.
    - `mk.ring_shift`: the shards are gathered the same way and the body visits the sources in
      arrival order: this rank, the rest of its node, then the other nodes.
    - `mk.dispatch` / `mk.combine`, point to point: a `dispatch` role counts each
      rank's copies per expert into every GPU's census (mk.route_census), fills its experts' row
      counts (mk.route_counts) and sends each row straight to its expert's slot (mk.route_rows,
      an arrival on the expert's flag after each CTA's rows); the compute role waits for the
      counts, each read of an expert's rows for its flag; each result row goes back to its
      token's slot (mk.return_rows), and a grid over the tokens after the producing grid sums
      each one's in order (mk.combine_returned).
      Across nodes, rail-aligned: each dispatch CTA packs the rows of its tokens bound for each
      other node (mk.route_pack), and one sends them with their routing, the census row and
      their counts to the rail peer there (mk.send_rows, through the proxy, sizes the GPU
      counted), once a row a node; the rail peer passes the census row on to its node's GPUs
      and routes the rows as the source's own (mk.route_rows `from node`). Results of those
      copies come back to the rail peer over NVLink and cross back once, a row a copy, after the
      node's compute CTAs; the token's rank sums its results where `mk.route_pack` said they
      would be (mk.combine_returned `at`).

    One node or one GPU per node degenerate to the steps that remain. Waits and signals are left
    to mk-insert-signals; CTA counts to mk-partition-roles.

    On one node of two GPUs, an all-reduce of a matmul's tiles into a rank-2 tensor, where the
    GEMM engine computes them (128-row tiles of 16-bit operands, converted to 16 bits: its
    epilogue is the only lowering of a combining put), runs in place, in the compute role (no
    reduce role, no staging buffer):
    each GPU starts with its own slice of tile rows (`local_first`, `mk.owner ... row_slices`)
    and puts those tiles to both GPUs; the other GPU reaches them half a grid later and puts its
    partials with `combine sum`, which adds them where the tile lies. A per-tile flag (`initialized`N, the one the
    expansion writes itself) holds each add back until the first contribution is on both GPUs.
    With two contributions the sum does not depend on the order in which they land, so both
    copies are equal. `in-place-all-reduce=false` keeps the reduce role instead.

    With `all-reduce-copy-engine`, no SM writes to the other GPU: each GPU stores its tiles to
    its own copy and counts them into their band's flag (a band: the order's group of the
    owner's tile rows, by up to 8 tile columns); `mk.engine_copy` ops have copy engines move each
    finished band to the
    other GPU, which adds its tiles into its own copy and has the sums copied back.

    With `one-shot-all-reduce`, an all-reduce within a node that does not run in place goes in one
    shot: each GPU puts its partial of a tile to its slot on every GPU of the node, and every GPU
    sums every tile for itself in its reduce role, in slot order (the same sum everywhere). A
    tile's sum then waits for one hop of puts and signals, where the reduction to the tile's owner
    and the owner's puts of the sum take two; each GPU receives and sums every partial, (gpus - 1)
    tiles' bytes where the two hops move 2 (gpus - 1) / gpus: for outputs whose hops' latency, not
    their bytes, is the cost. Across nodes the node partials go as before. By default the cost
    model decides per all-reduce: one shot where a hop's latency (`hop-latency-us`) outweighs the
    (gpus - 1) (gpus - 2) / gpus output bytes more that each GPU sends at `nvlink-gbps`: below
    about 740 KB of output on 4 GPUs and 210 KB on 8 (vLLM's custom all-reduce switches at 512 KB
    and 256 KB), always on 2, where the bytes are the same. `one-shot-all-reduce=true|false`
    forces it.
  }];
  let options = [
    Option<"inPlaceAllReduce", "in-place-all-reduce", "bool", /*default=*/"true",
           "All-reduce in place on one node of two GPUs (see the description)">,
    Option<"copyEngineAllReduce", "all-reduce-copy-engine", "bool", /*default=*/"false",
           "In the in-place all-reduce, move the bands of tiles between the GPUs with copy "
           "engines (mk.engine_copy) rather than the SMs">,
    Option<"oneShotAllReduce", "one-shot-all-reduce", "::mlir::mk::OneShotAllReduce",
           /*default=*/"::mlir::mk::OneShotAllReduce::costModel",
           "All-reduce within a node in one shot (see the description)",
           [{::llvm::cl::values(
             clEnumValN(::mlir::mk::OneShotAllReduce::costModel, "auto",
                        "where the cost model finds it faster (the default)"),
             clEnumValN(::mlir::mk::OneShotAllReduce::always, "true", "always"),
             clEnumValN(::mlir::mk::OneShotAllReduce::never, "false", "never"))}]>,
    Option<"hopLatencyUs", "hop-latency-us", "double", /*default=*/"3.0",
           "Microseconds from a put and its signal on one GPU to a wait's end on another">,
    Option<"nvlinkGBps", "nvlink-gbps", "double", /*default=*/"370.0",
           "NVLink bandwidth per GPU, GB/s">,
  ];
}

def MkPartitionRoles : Pass<"mk-partition-roles", "::mlir::mk::ProgramOp"> {
  let summary = "Split the persistent grid's CTAs into the roles, from a cost model";
  let description = [{
    Gives each role a CTA count, and the grid what the roles take. The cost model estimates the
    time of each role per launch: compute from its matmul FLOPs at the per-SM compute rate,
    transfers and reductions from their bytes at the per-CTA copy rate, capped by the bandwidth of
    the link they use (NVLink, network). It then gives the SMs' CTAs to the role that would finish
    last until the times balance, and the rest to compute. Compute keeps the fewest of them that
    walk its tiles in as many rounds (of the same parity, so that clusters still pair CTAs): more
    leave the CTA with the most tiles as many, and only contend for memory and power. Roles
    slower than compute may take what it leaves. A role that hands compute its work in pieces, in
    order (mk.route_rows signals each expert's rows), delays compute's start by its first piece,
    so it takes CTAs from compute as long as compute's last tile comes sooner (a two-stage
    pipeline: the later of the first piece plus all of compute, and all of the feed plus compute's
    last piece). `sm-split` (or a `mk.sm_split` dictionary on the program) overrides it. With
    `explain`, a remark on the program shows the estimate and the split.
  }];
  let options = [
    Option<"smCount", "sm-count", "int64_t", "132",
           "CTAs of the persistent grid, 1 to 1024 (one per SM)">,
    Option<"gpuSmCount", "gpu-sm-count", "int64_t", "0",
           "SMs of the whole GPU, whose rate compute-tflops is (0: sm-count); more than sm-count "
           "where the grid has a share of the GPU (MPS)">,
    Option<"smSplit", "sm-split", "std::string", "\"\"",
           "role=ctas,... overriding the cost model, e.g. compute=120,intra_reduce=12">,
    // Measured on an H200 (docs/notes/runtime.md): the device library's matmul in a generated
    // kernel, and what one reduce CTA of GEMM+AllReduce moves.
    Option<"computeTflops", "compute-tflops", "double", "740.0",
           "dense bf16 rate of the whole GPU, TFLOP/s">,
    Option<"ctaCopyGBps", "cta-copy-gbps", "double", "36.0",
           "bytes one CTA moves (loads and stores) per second, GB/s">,
    Option<"nvlinkGBps", "nvlink-gbps", "double", "370.0", "NVLink bandwidth per GPU, GB/s">,
    Option<"networkGBps", "network-gbps", "double", "48.0", "network bandwidth per GPU, GB/s">,
    // Measured on an H200 (docs/notes/network.md): lib/allreduce.mlir across 2 nodes took ~14 us
    // a tile on each of its 2 pushing CTAs; the push itself is ~2 us, the rest the wait for the
    // tile's stores to land before the proxy may read them.
    Option<"proxyPushUs", "proxy-push-us", "double", "8.0",
           "time a CTA spends handing one transfer to the network proxy, us">,
    Option<"explain", "explain", "bool", "false", "report the estimates and the split as a remark">,
  ];
}

def MkInsertSignals : Pass<"mk-insert-signals", "::mlir::mk::ProgramOp"> {
  let summary = "Order transfers and their readers with per-tile flags and epochs";
  let description = [{
    For every tensor that transfers write (mk.put, mk.copy), adds an mk.flags array with one flag
    per tile, a signal after every write (to the rank written, over the same link, so that it
    follows the data) and a wait before every read by another CTA or rank, for as many arrivals as
    the read needs: one per slot it combines. Where puts combine into a tile (the in-place
    all-reduce), only they signal: the program orders them after the tile's first contribution,
    so their signal is the tile's last arrival. A grid bounded by row counts stamps its tiles' flags
    with the launch (a launch whose counts hold fewer rows skips tiles, whose flags keep an older
    stamp), where every reader of its tiles is bounded by the same counts; one whose tiles a copy
    moves or another grid reads produces every tile, since a wait there cannot know the count.
    Flags are never reset; a wait is for epoch x count.
    Because a rank may start launch e+1 while a peer still reads its buffers from launch e, every
    rank also announces each launch to the ranks it exchanges data with (its node and its rail)
    and waits for their announcement before its first write that they can see: no host
    synchronisation between launches, and CUDA-graph capturable.
    A replicated argument that peers put into is output the caller reads when the launch
    completes: its writes signal per-tile `arrived` flags, and the role that puts waits, after its
    own tiles, for every tile of its rank, so that no kernel finishes before its output is whole.
  }];
}

def MkPoolRoles : Pass<"mk-pool-roles", "::mlir::mk::ProgramOp"> {
  let summary = "Let CTAs done with their role's work join a reduction role's tiles";
  let description = [{
    Makes the first reduction within a node (`intra_reduce`) whose body is one tile grid, walked
    whole (no row counts, no holder), the program's `pool`, unless the program has one or a
    single role: its tiles are claimed one at a time at run time, and the CTAs of the other roles
    join it once their own work is done, so that a split a few CTAs short of it (the cost model's,
    or one chosen at launch) costs little, as mKernel's GEMM+RS and GEMM+AR recycle their
    compute CTAs into the reduce pool. After mk-insert-signals, whose waits and arrivals are part of
    the role's body by then.

    ```mlir
    mk.role intra_reduce ctas 22 pool {
      mk.tile_grid (%m, %n) over %c tiles [128, 256] distribute gpus : !C { ... }
    }
    ```
  }];
}

def MkPlanLowering : Pass<"mk-plan-lowering", "::mlir::mk::ProgramOp"> {
  let summary = "Decide how a scheduled program becomes CUDA, as typed attributes";
  let description = [{
    Decides, before any code is generated, everything mk-lower-to-emitc needs that is not the code
    itself, and records it on the program as typed discardable attributes, which the conversion
    only reads (mk/Transforms/LoweringPlan.h):

    - `mk.gemm_engine` on a role whose every matmul can run on the GEMM engine of
      mk/device/gemm_engine.cuh with one configuration: a matmul directly in a tile grid of the
      role that visits each of its tiles, whose result is only converted to bf16 or f16 and
      stored. The role's CTAs then split into a TMA producer warpgroup, which walks the grid's
      tiles loading operands after the waits that precede the matmul (`#mk.lowering<producer>`),
      and two wgmma consumer warpgroups (`mma`), which walk the same tiles, multiply, store each
      tile through TMA (`store`) and run the rest of the body; their signals and the waits that
      only engine stores follow are raised and waited on by the engine's senders (`deferred`).
      Where every role has an even number of CTAs and the grid's order gives CTAs 2c and 2c + 1
      the two rows of a column band's pair of tiles, the engine runs in clusters of 2 CTAs that
      load each B panel once for both. A matmul whose K mk-tile-and-order split (`k_splits`)
      gets the memory its parts meet in: a buffer of `k_splits` slots of 128 x N f32 per tile
      (`partials`) and a flag array of a flag per tile (`arrivals`); on the tile library it
      loses `k_splits`, the tile's K whole.
    - `mk.attention_engine` on a role whose tile is one query tile's attention in the engine's
      shape (mk/Transforms/AttentionEngine.h): a producer thread loads the query tile and every
      key block after the program's waits for it, and the consumers fold each source's blocks in
      one engine call; with one source, causal tiles are claimed longest first from a counter of
      the role's own (`tile_counter`). Causal steps' loops over the key blocks, in every lowering,
      stop after the last block their query tile sees (at its diagonal, or in a zigzag shard's
      two chunks).
    - `mk.lowering` on the reductions that are only converted to 16 bits and stored: through the
      bulk tensor copy engine (`tma`) or chunk by chunk (`chunks`), with their conversions
      (`elide`) and stores.
    - Loops that put a staged tile to each GPU and signal each become every put, then every
      signal; a loop whose only effect is an engine store to each GPU of the node becomes one
      store with `mk.gpu_offsets`, which stages the tile once.
  }];
  let options = [
    Option<"gemmStages", "gemm-stages", "int64_t", /*default=*/"0",
           "Depth of the GEMM engine's shared-memory ring of 64-deep K slices, 2 to 8 (0: the "
           "deepest that fits the tile)">,
    Option<"gemmCluster", "gemm-cluster", "int64_t", /*default=*/"0",
           "CTAs per thread-block cluster of the GEMM engine, which share each B panel through "
           "TMA multicast: 1 or 2 (0: 2 where the tile order and roles pair CTAs, else 1)">,
  ];
}

def MkLowerToEmitC : Pass<"mk-lower-to-emitc", "::mlir::ModuleOp"> {
  let summary = "Lower scheduled programs to EmitC: one persistent __global__ kernel each";
  let description = [{
    Each scheduled mk.program becomes an `extern "C" __global__` function taking the
    mk_kernel_args of mk/abi.h, and a manifest of its launch parameters (mk_kernel_manifest). Its
    CTAs dispatch on their role by block index; tile grids become loops over their tiles in the
    chosen order, strided over the role's CTAs; compute, transfers and signals become calls into
    the device library (runtime/device/mk/device.cuh). The C++ is then printed by MLIR's EmitC
    emitter.

    How is decided by mk-plan-lowering, which runs first: a role it gives the GEMM engine runs
    it (its producer and consumers on the warpgroups of each CTA, the tensor maps TMA needs listed
    in the manifest for the runtime to build); every other role runs the tile library on a team of
    MK_TEAM_THREADS threads. The code lives in compiler/lib/Conversion/MkToEmitC, a file per
    concern: the kernel's structure (roles, tile grids), the memory, compute and synchronisation
    ops' patterns, the type converter and the manifest.
  }];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

#endif // MK_TRANSFORMS_PASSES_TD
