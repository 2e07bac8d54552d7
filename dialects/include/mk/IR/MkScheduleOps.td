//===- MkScheduleOps.td - scheduled-level ops of mk --------*- tablegen -*-===//
//
// What the compiler's passes produce from a program: the SM roles of one persistent kernel, the
// point-to-point transfers of tiles over a named link, per-tile flags with signals and waits, and
// reductions of received tiles. Included by MkOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef MK_SCHEDULE_OPS_TD
#define MK_SCHEDULE_OPS_TD

def Mk_RoleOp : Mk_Op<"role", [HasParent<"ProgramOp">, SingleBlock, NoTerminator, RecursiveMemoryEffects]> {
  let summary = "The work of a set of CTAs of the persistent kernel";
  let description = [{
    The program's grid is split into roles: CTAs [sum of the counts of the roles before, + ctas)
    run this body. Tile grids inside a role are spread over its CTAs; other ops run on each of
    them. The count is left out until mk-partition-roles assigns it.

    A `pool` role (one a program at most, its body a single tile grid) is the grid's CTAs'
    recycled work: its tiles are claimed one at a time at run time, in the walk's order, and every
    CTA of the other roles joins it once its own role's work is done, so that a split that gives
    it too few CTAs costs little (mk-pool-roles decides it).

    ```mlir
    mk.role compute ctas 120 {
      mk.tile_grid ...
    }
    mk.role intra_reduce ctas 12 pool { ... }
    ```
  }];
  let arguments = (ins Mk_RoleKind:$kind, OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$ctas,
                       UnitAttr:$pool);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$kind (`ctas` $ctas^)? (`pool` $pool^)? attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

def Mk_FlagsOp : Mk_Op<"flags", [Symbol, HasParent<"ProgramOp">]> {
  let summary = "An array of per-tile ready flags in symmetric memory";
  let description = [{
    Flags count arrivals and are never reset: a launch with epoch e (1, 2, ...) adds its signals to
    the counts of the launches before, and a wait for `count c` waits for e * c. Back-to-back
    launches therefore need no host-side reset and no host synchronisation.

    ```mlir
    mk.flags @partial_ready [64, 32]
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, DenseI64ArrayAttr:$shape);
  let assemblyFormat = "$sym_name $shape attr-dict";
  let hasVerifier = 1;
}

def Mk_SignalOp : Mk_Op<"signal", [AttrSizedOperandSegments,
                                   DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Add one arrival to a flag, here or on a peer, after this thread's earlier transfers";
  let description = [{
    The signal is ordered after every earlier transfer of the issuing thread to the same peer over
    the same link: a waiter that sees it sees their data. `at gpu %g` reaches GPU g of this node
    over NVLink, `at node %n` reaches this rank's GPU index on node n through the proxy (the only
    inter-node path: transfers across nodes are rail-aligned by construction).

    ```mlir
    mk.signal @partial_ready[%m, %n] at gpu %owner via nvlink_store
    mk.signal @node_ready[%m, %n] at node %peer via rdma_proxy
    ```

    With `stamp`, the flag is set to the launch's epoch instead: for a flag that one writer raises
    at most once a launch, and in some launches not at all (a tile past a row count), which a
    wait of `count 1` then still sees as one arrival a launch. Within a node only.

    ```mlir
    mk.signal @hidden_ready[%e, %t, %n] stamp
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$flags, Variadic<Index>:$indices, Mk_PeerScope:$scope,
                       Optional<Index>:$peer, OptionalAttr<Mk_Link>:$link, UnitAttr:$stamp);
  let assemblyFormat = [{
    $flags `` `[` $indices `]` `` custom<Peer>($scope, $peer, $link) (`stamp` $stamp^)? attr-dict
  }];
  let hasVerifier = 1;
}

def Mk_WaitOp : Mk_Op<"wait", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Wait until a flag has received `count` arrivals in this launch";
  let description = [{
    ```mlir
    mk.wait @partial_ready[%m, %n] count 4
    ```

    With `per_cta_of KIND`, `count` arrivals for each CTA of the program's roles of that kind: each
    of them signals (after its share of the work), and their number is the split's.

    ```mlir
    mk.wait @arrived[%e] count 2 per_cta_of dispatch
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$flags, Variadic<Index>:$indices,
                       ConfinedAttr<I64Attr, [IntPositive]>:$count,
                       OptionalAttr<Mk_RoleKind>:$per_cta_of);
  let assemblyFormat = "$flags `` `[` $indices `]` `count` $count (`per_cta_of` $per_cta_of^)? attr-dict";
  let builders = [OpBuilder<(ins "FlatSymbolRefAttr":$flags, "ValueRange":$indices,
                                 "IntegerAttr":$count), [{
    build($_builder, $_state, flags, indices, count, RoleKindAttr());
  }]>];
  let hasVerifier = 1;
}

def Mk_PutOp : Mk_Op<"put", [AttrSizedOperandSegments]> {
  let summary = "Store a tile into a tensor of this rank or of a peer";
  let description = [{
    ```mlir
    mk.put %p, %stage[%slot, %m, %n] at gpu %owner via nvlink_store
        : !mk.tile<[128, 256], bf16>, !mk.tensor<[4, M, N], bf16, symmetric>
    ```

    With `combine sum` the tile is added to what the destination holds, element by element, where
    the memory is (the L2 of the GPU that holds it), in the destination's dtype: the destination
    must already hold the first contribution, which the program orders with flags.

    ```mlir
    mk.put %p, %C[%m, %n] at gpu %g via nvlink_store combine sum
        : !mk.tile<[128, 256], bf16>, !mk.tensor<[M, N], bf16, replicated>
    ```
  }];
  let arguments = (ins Mk_Tile:$value, Arg<Mk_Tensor, "", [MemRead, MemWrite]>:$dest,
                       Variadic<Index>:$indices, DenseI64ArrayAttr:$whole_dims,
                       Mk_PeerScope:$scope, Optional<Index>:$peer, OptionalAttr<Mk_Link>:$link,
                       OptionalAttr<Mk_ReduceKind>:$combine);
  let assemblyFormat = [{
    $value `,` $dest `` custom<TileAccess>($indices, $whole_dims) `` custom<Peer>($scope, $peer, $link)
    (`combine` $combine^)? attr-dict `:` qualified(type($value)) `,` qualified(type($dest))
  }];
  let hasVerifier = 1;
}

def Mk_EngineCopyOp : Mk_Op<"engine_copy", [HasParent<"ProgramOp">,
                                             DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "A copy engine's copy of a block of a matrix to another GPU of the node";
  let description = [{
    Not a kernel's work: the runtime issues it beside the kernel, on a stream of GPU `from`. Once
    flag `@wait[wait_index]` of that GPU holds `count` (signals of this launch), a copy engine
    copies rows [`rows[0]`, `rows[1]`) x columns [`cols[0]`, `cols[1]`) of the rank-2 tensor to
    the same place in GPU `to`'s copy; then it sets flag `@signal[signal_index]` of GPU `to` to
    the launch's epoch, which `mk.wait ... count 1` waits for, and clears the flag it waited for.
    A GPU issues its copies in program order, each after the one before. The SMs issue no
    request for the bytes, which is why an all-reduce over NVLink uses it. Only copies between
    GPUs: the driver runs a copy within one GPU on its SMs, which a persistent kernel holds.

    ```mlir
    mk.engine_copy %C rows [0, 1024] cols [0, 2048] from gpu 0 to gpu 1 after @ready[0]
        count 64 signal @arrived[0] : !mk.tensor<[8192, 8192], bf16, replicated>
    ```
  }];
  let arguments = (ins Mk_Tensor:$tensor, DenseI64ArrayAttr:$rows, DenseI64ArrayAttr:$cols,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$from,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$to, FlatSymbolRefAttr:$wait,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$wait_index,
                       ConfinedAttr<I64Attr, [IntPositive]>:$count, FlatSymbolRefAttr:$signal,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$signal_index);
  let assemblyFormat = [{
    $tensor `rows` $rows `cols` $cols `from` `gpu` $from `to` `gpu` $to `after` $wait `` `[`
    $wait_index `]` `count` $count `signal` $signal `` `[` $signal_index `]` attr-dict `:`
    qualified(type($tensor))
  }];
  let hasVerifier = 1;
}

def Mk_CopyOp : Mk_Op<"copy", [AttrSizedOperandSegments]> {
  let summary = "Copy a tile-shaped region of memory to a tensor of this rank or of a peer";
  let description = [{
    Unlike mk.put the data does not pass through registers: a bulk copy engine or the network
    reads it from memory.

    ```mlir
    mk.copy %stage[%me, %m, %n] -> %recv[%node, %m, %n] at node %peer via rdma_proxy
        : !mk.tensor<[4, M, N], bf16, symmetric>, !mk.tensor<[2, M, N], bf16, symmetric>
    ```
  }];
  let arguments = (ins Arg<Mk_Tensor, "", [MemRead]>:$source, Variadic<Index>:$source_indices,
                       DenseI64ArrayAttr:$source_whole_dims,
                       Arg<Mk_Tensor, "", [MemWrite]>:$dest, Variadic<Index>:$dest_indices,
                       DenseI64ArrayAttr:$dest_whole_dims,
                       Mk_PeerScope:$scope, Optional<Index>:$peer, OptionalAttr<Mk_Link>:$link,
                       DenseI64ArrayAttr:$tile);
  let assemblyFormat = [{
    $source `` custom<TileAccess>($source_indices, $source_whole_dims) `->`
    $dest `` custom<TileAccess>($dest_indices, $dest_whole_dims) `` custom<Peer>($scope, $peer, $link)
    `tile` $tile attr-dict `:` qualified(type($source)) `,` qualified(type($dest))
  }];
  let hasVerifier = 1;
}

def Mk_AccumulateOp : Mk_Op<"accumulate"> {
  let summary = "Combine the tiles received into the slots of a staging tensor";
  let description = [{
    The `:` on a leading dim of the access is the slot dim combined over; the trailing dims index
    the tile as for mk.load.

    ```mlir
    %sum = mk.accumulate sum %stage[:, %m, %n] : !mk.tensor<[4, M, N], bf16, symmetric> -> !mk.tile<[128, 256], f32>
    ```
  }];
  let arguments = (ins Mk_ReduceKind:$kind, Arg<Mk_Tensor, "", [MemRead]>:$source,
                       Variadic<Index>:$indices, DenseI64ArrayAttr:$whole_dims);
  let results = (outs Mk_Tile:$result);
  let assemblyFormat = [{
    $kind $source `` custom<TileAccess>($indices, $whole_dims) attr-dict `:` qualified(type($source)) `->` qualified(type($result))
  }];
  let hasVerifier = 1;
}

def Mk_PlaceOp : Mk_Op<"place", [Pure]> {
  let summary = "This rank's node and GPU index";
  let results = (outs Index:$node, Index:$gpu);
  let assemblyFormat = "attr-dict `:` qualified(type($node)) `,` qualified(type($gpu))";
}

def Mk_OwnerOp : Mk_Op<"owner", [Pure]> {
  let summary = "The node and GPU index of the rank that owns a tile";
  let description = [{
    For a sharded tensor, the rank whose shard holds the tile. For a replicated or symmetric
    tensor, whose tiles every rank holds, the rank responsible for it: tiles are dealt round-robin,
    the tile of row-major linear index l going to rank l mod size(world); with `row_slices`, in
    contiguous slices of tile rows, rank r owning rows [r * R / W, (r + 1) * R / W) of R (rounded
    down, W ranks), the slice a `local_first` grid starts each rank at.

    ```mlir
    %node, %gpu = mk.owner %C[%m, %n] tile [128, 256] : !mk.tensor<[M, N], bf16, shard 0 over world>
    %node, %gpu = mk.owner %C[%m, %n] tile [128, 256] row_slices : !mk.tensor<[M, N], bf16, replicated>
    ```
  }];
  let arguments = (ins Mk_Tensor:$tensor, Variadic<Index>:$indices, DenseI64ArrayAttr:$tile,
                       UnitAttr:$row_slices);
  let results = (outs Index:$node, Index:$gpu);
  let assemblyFormat = [{
    $tensor `[` $indices `]` `tile` $tile (`row_slices` $row_slices^)? attr-dict `:` qualified(type($tensor))
  }];
  let hasVerifier = 1;
}

def Mk_RouteCensusOp : Mk_Op<"route_census"> {
  let summary = "Count this rank's routed copies per expert into the census on every GPU of the node";
  let description = [{
    Point-to-point routing's first step. Row r of `census` ([W, E], this rank's index r), on every
    GPU of the node, becomes the number of this rank's copies (token t, choice j) routed to each
    expert `experts[t, j]`. A copy whose index lies outside [0, E) is counted nowhere and goes
    nowhere; the first is reported (mk_routing_report). Run by one CTA; the census is complete on a
    GPU once every rank of the node has signalled it.

    ```mlir
    mk.route_census %experts into %census
        : !mk.tensor<[T, K], i32, shard 0 over world>, !mk.tensor<[2, E], i32, symmetric>
    ```
  }];
  let arguments = (ins Arg<Mk_Tensor, "", [MemRead]>:$experts,
                       Arg<Mk_Tensor, "", [MemWrite]>:$census);
  let assemblyFormat = [{
    $experts `into` $census attr-dict `:` qualified(type($experts)) `,` qualified(type($census))
  }];
  let hasVerifier = 1;
}

def Mk_RouteCountsOp : Mk_Op<"route_counts"> {
  let summary = "The rows each of this rank's experts receives, from the census";
  let description = [{
    `counts[e]` = min(C, sum over ranks r of `census[r, e]`) for the experts this rank holds. The
    census orders copies rank by rank, so it also says how many of this rank's copies fall past
    their expert's capacity C: the count the launch reports (mk_routing_report). Run by one CTA.

    ```mlir
    mk.route_counts %census into %counts capacity 256
        : !mk.tensor<[2, E], i32, symmetric>, !mk.tensor<[E], i32, shard 0 over world>
    ```
  }];
  let arguments = (ins Arg<Mk_Tensor, "", [MemRead]>:$census,
                       Arg<Mk_Tensor, "", [MemWrite]>:$counts,
                       ConfinedAttr<I64Attr, [IntPositive]>:$capacity);
  let assemblyFormat = [{
    $census `into` $counts `capacity` $capacity attr-dict `:` qualified(type($census)) `,`
    qualified(type($counts))
  }];
  let hasVerifier = 1;
}

def Mk_RouteRowsOp : Mk_Op<"route_rows", [AttrSizedOperandSegments,
                                         DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Send this rank's token rows to the slots of their experts, point to point";
  let description = [{
    Each CTA of the role routes its share of this rank's tokens (token-major chunks). Copy
    (t, j) to expert e = `experts[t, j]` takes slot s = (the copies of lower ranks to e, from the
    census) + (the copies of this rank to e before it, token-major), so that every launch of the
    same routing places rows alike. Where s < C, the token's row goes to `routed[e, s]` on the
    rank holding e, `origins[e, s]` there becomes (t's global index) * K + j, and
    `placement[t, j]` here e * C + s; otherwise `placement[t, j]` is -1. After its rows to an
    expert, each CTA adds an arrival to `arrivals[e]` (an array of E flags) on the expert's
    rank, for every expert, every launch, whatever it sent: a wait counts one per CTA of the
    role on every rank.

    ```mlir
    mk.route_rows %x, %experts, %census into %routed, %origins, %placement arrivals @arrived
        : !mk.tensor<[T, H], bf16, shard 0 over world>, !mk.tensor<[T, K], i32, shard 0 over world>,
          !mk.tensor<[2, E], i32, symmetric>, !mk.tensor<[E, C, H], bf16, shard 0 over world>,
          !mk.tensor<[E, C], i32, shard 0 over world>, !mk.tensor<[T, K], i32, shard 0 over world>
    ```

    Across nodes only the experts of this node are served, and a result comes back to
    `returned` on the GPU of this node with the token's GPU index: rows of H there, in 2 N regions
    of T_r K rows (see `returnRegions`), regions 0 to N - 1 for the results of that GPU's tokens
    by node, N + n for those of the tokens its rail peer on node n sent; an origin is the GPU
    times 2 N T_r K plus a row of its regions (token * K + j in region `own node`). With `from
    node %n count %c[%i]`, the rows are those node n's rail peer packed for this node
    (mk.route_pack) and sent here: region n of `tokens` and `experts` ([N T_r, H] and [N T_r, K],
    symmetric), of `c[i]` tokens, routed as the rail peer's own (its census row, its copies in
    token order); a copy's result goes to row q of region N + n, q its index among the peer's
    copies to this node, which `placement` ([2 N T_r, K]: the slots, then the q) keeps.

    ```mlir
    mk.route_rows %recv, %recv_experts, %census into %routed, %origins, %slots arrivals @arrived
        from node %n count %received[%n]
        : !mk.tensor<[2048, H], bf16, symmetric>, !mk.tensor<[2048, K], i32, symmetric>, ...
    ```
  }];
  let arguments = (ins Arg<Mk_Tensor, "", [MemRead]>:$tokens, Arg<Mk_Tensor, "", [MemRead]>:$experts,
                       Arg<Mk_Tensor, "", [MemRead]>:$census,
                       Arg<Mk_Tensor, "", [MemWrite]>:$routed, Arg<Mk_Tensor, "", [MemWrite]>:$origins,
                       Arg<Mk_Tensor, "", [MemWrite]>:$placement, FlatSymbolRefAttr:$arrivals,
                       Optional<Index>:$source, Optional<Mk_Tensor>:$count,
                       Optional<Index>:$count_index);
  let extraClassDeclaration = [{
    /// The regions of T_r rows of `returned` results come back to on each GPU: one on one node;
    /// across nodes, one per node for the results of that GPU's tokens, then one per node for
    /// those of the tokens its rail peers sent.
    static int64_t returnRegions(int64_t nodes) { return nodes == 1 ? 1 : 2 * nodes; }
  }];
  let assemblyFormat = [{
    $tokens `,` $experts `,` $census `into` $routed `,` $origins `,` $placement `arrivals` $arrivals
    (`from` `node` $source^ `count` $count `` `[` $count_index `]`)?
    attr-dict `:` qualified(type($tokens)) `,` qualified(type($experts)) `,` qualified(type($census))
    `,` qualified(type($routed)) `,` qualified(type($origins)) `,` qualified(type($placement))
    (`,` qualified(type($count))^)?
  }];
  let hasVerifier = 1;
}

def Mk_RoutePackOp : Mk_Op<"route_pack"> {
  let summary = "Pack, for each other node, the rows of this rank's tokens routed there";
  let description = [{
    Point-to-point routing across nodes: a row crosses the network once for each node that holds
    one of its token's experts. For each other node m, the tokens with a copy routed to an
    expert of m are numbered in token order (p); the token's row goes to `pack[m T_r + p]` and its
    routing row to `pack_experts[m T_r + p]` (T_r tokens a rank), `packed[m]` becomes their number
    and `packed[N + m]` that of their copies to m. `return_at[t, j]` becomes the row of `returned`
    (rows of H) where copy (t, j)'s result comes back: m T_r K + its index among the copies to m
    (token-major) for an expert of node m, (own node) T_r K + t K + j for one of this node, -1
    outside [0, num_experts) (experts are dealt to the nodes in equal blocks). Each CTA of the
    role packs its share of the tokens (token-major chunks), the last one writes `packed`.

    ```mlir
    mk.route_pack %x, %experts into %pack, %pack_experts, %packed, %return_at experts 64
        : !mk.tensor<[T, H], bf16, shard 0 over world>, !mk.tensor<[T, K], i32, shard 0 over world>,
          !mk.tensor<[2048, H], bf16, symmetric>, !mk.tensor<[2048, K], i32, symmetric>,
          !mk.tensor<[4], i32, symmetric>, !mk.tensor<[T, K], i32, shard 0 over world>
    ```
  }];
  let arguments = (ins Arg<Mk_Tensor, "", [MemRead]>:$tokens, Arg<Mk_Tensor, "", [MemRead]>:$experts,
                       Arg<Mk_Tensor, "", [MemWrite]>:$pack,
                       Arg<Mk_Tensor, "", [MemWrite]>:$pack_experts,
                       Arg<Mk_Tensor, "", [MemWrite]>:$packed,
                       Arg<Mk_Tensor, "", [MemWrite]>:$return_at,
                       ConfinedAttr<I64Attr, [IntPositive]>:$num_experts);
  let assemblyFormat = [{
    $tokens `,` $experts `into` $pack `,` $pack_experts `,` $packed `,` $return_at `experts`
    $num_experts attr-dict `:`
    qualified(type($tokens)) `,` qualified(type($experts)) `,` qualified(type($pack)) `,`
    qualified(type($pack_experts)) `,` qualified(type($packed)) `,` qualified(type($return_at))
  }];
  let hasVerifier = 1;
}

def Mk_SendRowsOp : Mk_Op<"send_rows", [AttrSizedOperandSegments]> {
  let summary = "Send leading slices of a tensor, as many as the GPU counted, to a peer";
  let description = [{
    Slices `source[from + r]` (each one whole: a contiguous block) go to `dest[to + r]` on a GPU
    of this node or this rank's rail peer on another node, for r below `count[i]` as this GPU
    holds it when the thread gets here (one slice without `count`): a transfer whose size the
    kernel decides, across nodes one command to the proxy. Both tensors symmetric, of one dtype
    and one slice shape. Flags order it as the program says: mk-insert-signals plans none.

    ```mlir
    mk.send_rows %pack[%first] -> %recv[%at] count %packed[%m] at node %m via rdma_proxy
        : !mk.tensor<[2048, 4096], bf16, symmetric>, !mk.tensor<[2048, 4096], bf16, symmetric>,
          !mk.tensor<[2], i32, symmetric>
    mk.send_rows %census[%row] -> %census[%row] at gpu %g via nvlink_store
        : !mk.tensor<[16, 64], i32, symmetric>, !mk.tensor<[16, 64], i32, symmetric>
    ```
  }];
  let arguments = (ins Arg<Mk_Tensor, "", [MemRead]>:$source, Index:$from,
                       Arg<Mk_Tensor, "", [MemWrite]>:$dest, Index:$to,
                       Optional<Mk_Tensor>:$count, Optional<Index>:$count_index,
                       Mk_PeerScope:$scope, Optional<Index>:$peer, OptionalAttr<Mk_Link>:$link);
  let assemblyFormat = [{
    $source `[` $from `]` `->` $dest `[` $to `]` (`count` $count^ `[` $count_index `]`)? ``
    custom<Peer>($scope, $peer, $link) attr-dict `:` qualified(type($source)) `,`
    qualified(type($dest)) (`,` qualified(type($count))^)?
  }];
  let hasVerifier = 1;
}

def Mk_ReturnRowsOp : Mk_Op<"return_rows"> {
  let summary = "Send each row of a tile of routed results back to its token's slot";
  let description = [{
    The tile holds rows of this rank's expert-major space at global tile coordinates
    `[e, t, n]`: routed row t * R + i of expert e, for the tile's R rows, columns of the n-th
    column tile. Each row below `counts[e]` goes to `returned[o / K, o % K]` (columns of the n-th
    tile) on the rank holding token o / K, o = `origins[e, t * R + i]`; rows past the count go
    nowhere.

    ```mlir
    mk.return_rows %y, [%e, %t, %n] via %origins, %counts into %returned
        : !mk.tile<[128, 256], bf16>, !mk.tensor<[E, C], i32, shard 0 over world>,
          !mk.tensor<[E], i32, shard 0 over world>, !mk.tensor<[T, K, H], bf16, shard 0 over world>
    ```
  }];
  let arguments = (ins Mk_Tile:$value, Variadic<Index>:$coords,
                       Arg<Mk_Tensor, "", [MemRead]>:$origins, Arg<Mk_Tensor, "", [MemRead]>:$counts,
                       Arg<Mk_Tensor, "", [MemWrite]>:$returned);
  let assemblyFormat = [{
    $value `,` `[` $coords `]` `via` $origins `,` $counts `into` $returned attr-dict `:`
    qualified(type($value)) `,` qualified(type($origins)) `,` qualified(type($counts)) `,`
    qualified(type($returned))
  }];
  let hasVerifier = 1;
}

def Mk_CombineReturnedOp : Mk_Op<"combine_returned", [AttrSizedOperandSegments]> {
  let summary = "One tile of tokens: the weighted sum of the results returned to them";
  let description = [{
    `dest[t, n]` = sum over j, in order, of `weights[t, j]` * `returned[t, j, n]` where
    `placement[t, j]` >= 0 (the copy was routed), in f32, for the rows of one tile of this rank's
    tokens: the same routing and results give the same bits.

    ```mlir
    mk.combine_returned %returned, %placement, %w into %Y[%t, %n] tile [128, 256]
        : !mk.tensor<[T, K, H], bf16, shard 0 over world>, !mk.tensor<[T, K], i32, shard 0 over world>,
          !mk.tensor<[T, K], f32, shard 0 over world>, !mk.tensor<[T, H], bf16, shard 0 over world>
    ```

    With `at %return_at`, copy (t, j)'s result is row `return_at[t, j]` of `returned` ([R, 1, H],
    symmetric: across nodes, see mk.route_rows and mk.route_pack).
  }];
  let arguments = (ins Arg<Mk_Tensor, "", [MemRead]>:$returned, Arg<Mk_Tensor, "", [MemRead]>:$placement,
                       Arg<Mk_Tensor, "", [MemRead]>:$weights, Arg<Mk_Tensor, "", [MemWrite]>:$dest,
                       Variadic<Index>:$indices, DenseI64ArrayAttr:$tile,
                       Optional<Mk_Tensor>:$return_at);
  let assemblyFormat = [{
    $returned `,` $placement `,` $weights `into` $dest `[` $indices `]` `tile` $tile
    (`at` $return_at^)? attr-dict `:`
    qualified(type($returned)) `,` qualified(type($placement)) `,` qualified(type($weights)) `,`
    qualified(type($dest)) (`,` qualified(type($return_at))^)?
  }];
  let hasVerifier = 1;
}

def Mk_SingleCtaOp : Mk_Op<"single_cta", [HasParent<"RoleOp">, SingleBlock, NoTerminator,
                                          RecursiveMemoryEffects]> {
  let summary = "Work done once per launch, by the first CTA of the enclosing role";
  let description = [{
    ```mlir
    mk.single_cta {
      mk.signal @launched[%c0] at gpu %g via nvlink_store
    }
    ```
  }];
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
}

#endif // MK_SCHEDULE_OPS_TD
