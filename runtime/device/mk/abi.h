/*===- mk/abi.h - the contract between generated kernels and the host runtime ---*- C -*-===*
 *
 * Shared, unchanged, by the kernels mkc generates (compiled by NVRTC), the device library, the
 * host runtime (g++) and foreign-function callers (C). Dependency-free on purpose: NVRTC has no
 * host headers, so fixed-width types are spelled with builtin types and their sizes asserted.
 * Any layout change bumps MK_ABI_VERSION; the runtime refuses kernels of another version.
 *
 *===----------------------------------------------------------------------------------===*/

#ifndef MK_ABI_H
#define MK_ABI_H

#include "mk/queue.h"

#define MK_ABI_VERSION 17

typedef int mk_i32;

/* Threads of every CTA of a generated persistent kernel: three warpgroups, which the GEMM engine
 * (mk/device/gemm_engine.cuh) splits into a TMA producer and two wgmma consumers. */
#define MK_CTA_THREADS 384
/* Threads that run the tile library's collectives together (its "team"): the engine's consumers,
 * or threads 0-255 of a CTA without an engine. */
#define MK_TEAM_THREADS 256
/* Shared memory of one CTA on sm_90, static and dynamic together (227 KiB): what the device
 * library's functions and the compiler's choices of them must fit. */
#define MK_CTA_SMEM_BYTES (227 * 1024)
/* GPUs of one node a kernel can address through peer mappings. */
#define MK_MAX_GPUS_PER_NODE 8
/* Tensors a program can use: its arguments, then its mk.buffer allocations, in program order. */
#define MK_MAX_TENSORS 24
/* TMA tensor maps one kernel can take. */
#define MK_MAX_TENSOR_MAPS 12
/* Roles of one kernel's persistent grid, and the bytes of a role kind's name with its NUL. */
#define MK_MAX_ROLES 12
#define MK_ROLE_KIND_BYTES 16
/* Dims of an argument the manifest describes, and the bytes of an element type's name. */
#define MK_MAX_TENSOR_RANK 8
#define MK_ELEMENT_NAME_BYTES 8

/* One tensor, as seen from one rank. `peer[g]` is the same (symmetric) allocation mapped from GPU g
 * of this node; it is null for tensors that are not in symmetric memory. */
typedef struct mk_tensor_ref {
  void *local;
  void *peer[MK_MAX_GPUS_PER_NODE];
} mk_tensor_ref;

/* A TMA tensor map (CUtensorMap, built by cuTensorMapEncodeTiled): opaque, 128 bytes, 64-byte
 * aligned. Kernels take them by value in their __grid_constant__ parameter, as TMA requires. */
typedef struct mk_tensor_map {
#ifdef __cplusplus
  alignas(64)
#else
  _Alignas(64)
#endif
      mk_u64 opaque[16];
} mk_tensor_map;

/* What the runtime builds tensor map i of a kernel from: the generated module lists them as
 * `<kernel>_tensor_maps[]`. The map covers tensor `tensor` of this rank (gpu == MK_MAP_LOCAL) or
 * of GPU `gpu` of this node, whose extents, innermost (contiguous) first, are dims[0..rank); a
 * copy moves a box[0..rank) block through shared memory swizzled in `swizzle_bytes` (0, 32, 64
 * or 128) rows. Elements beyond the extents read as zeros and are never written. A copy cares only
 * for the size of an `element` (MK_MAP_ELEMENT_*); a reduction into the tensor adds as its type. */
#define MK_MAP_LOCAL 0xffffffffu
#define MK_MAP_MAX_RANK 5
#define MK_MAP_ELEMENT_U8 0u
#define MK_MAP_ELEMENT_U16 1u
#define MK_MAP_ELEMENT_U32 2u
#define MK_MAP_ELEMENT_U64 3u
#define MK_MAP_ELEMENT_I32 4u
#define MK_MAP_ELEMENT_F16 5u
#define MK_MAP_ELEMENT_BF16 6u
#define MK_MAP_ELEMENT_F32 7u
#define MK_MAP_ELEMENT_F64 8u
typedef struct mk_tensor_map_spec {
  mk_u32 tensor;
  mk_u32 gpu;
  mk_u32 element;
  mk_u32 rank;
  mk_u64 dims[MK_MAP_MAX_RANK];
  mk_u32 box[MK_MAP_MAX_RANK];
  mk_u32 swizzle_bytes;
} mk_tensor_map_spec;

/* A copy a copy engine makes beside the kernel (mk.engine_copy), which the runtime issues on a
 * stream of its own: once flag `wait_flag` of GPU `from_gpu` holds `wait_count`, `height` rows of
 * `width` bytes, `pitch` bytes apart from byte `offset` of tensor `tensor`, go from that GPU to
 * the same bytes on GPU `to_gpu` of the node; then flag `signal_flag` of GPU `to_gpu` is set to
 * the launch's epoch and `wait_flag` cleared. Flags are word offsets into the ranks' flag
 * regions. */
typedef struct mk_engine_copy {
  mk_u32 from_gpu;
  mk_u32 to_gpu;
  mk_u32 tensor;
  mk_u32 wait_flag;
  mk_u32 wait_count;
  mk_u32 signal_flag;
  mk_u64 offset;
  mk_u64 width;
  mk_u64 height;
  mk_u64 pitch;
} mk_engine_copy;

/* What an argument of a kernel must be on one rank: its element type as MLIR spells it ("bf16",
 * "f16", "f32", NUL-padded) and its `rank` extents, row-major and dense. */
typedef struct mk_argument_type {
  char element[MK_ELEMENT_NAME_BYTES];
  mk_u32 rank;
  mk_u32 reserved;
  mk_u64 extents[MK_MAX_TENSOR_RANK];
} mk_argument_type;

/* The CTAs of one role of the grid: its kind as mk.role spells it ("compute", "intra_reduce",
 * NUL-padded). */
typedef struct mk_role_ctas {
  char kind[MK_ROLE_KIND_BYTES];
  mk_u32 ctas;
  mk_u32 flags; /* MK_ROLE_POOL */
} mk_role_ctas;

/* The role is the kernel's pool (mk.role's `pool`): every CTA joins it once done with its own
 * role, so its own CTAs may be few. */
#define MK_ROLE_POOL 1u

/* How a generated kernel is launched: the global `<kernel>_manifest` of its module, which the
 * runtime reads (cuModuleGetGlobal) once it has loaded it. `abi_version` comes first, so that a
 * runtime can tell a kernel of another version. The global is this struct followed by
 * `engine_copy_count` mk_engine_copy, the copies copy engines make beside the kernel in the order
 * each GPU issues its own (their number grows with the problem's size). `dynamic_smem_bytes` is
 * per CTA; `tensor_bytes[i]` what tensor i (arguments first, then the buffers the runtime
 * allocates) takes on one rank; bit i of `symmetric_tensors` that peers write tensor i or the
 * network reads it, so it must be in symmetric memory. `routed_experts` is the experts a program's
 * mk.dispatch routes tokens to (0: it routes none), which the runtime names when a launch's
 * routing was out of range (mk_routing_report). */
typedef struct mk_kernel_manifest {
  mk_u32 abi_version;
  mk_u32 grid;
  mk_u32 dynamic_smem_bytes;
  mk_u32 flag_words;
  mk_u32 arguments;
  mk_u32 tensors;
  mk_u32 symmetric_tensors;
  mk_u32 roles;
  mk_u32 tensor_map_count;
  mk_u32 engine_copy_count;
  mk_u32 routed_experts;
  mk_u32 reserved;
  mk_u64 tensor_bytes[MK_MAX_TENSORS];
  mk_argument_type argument_types[MK_MAX_TENSORS];
  mk_role_ctas sm_split[MK_MAX_ROLES];
  mk_tensor_map_spec tensor_maps[MK_MAX_TENSOR_MAPS];
} mk_kernel_manifest;

/* How long a kernel's waits for flags may take: `mk_watch`, a __constant__ of every generated
 * module, which the runtime sets once it has loaded it. A wait that has waited `timeout_ns` (0:
 * forever) gives up and raises `*gave_up` (device memory, which the GPU's other waits poll, so
 * that they give up too); the first also describes itself in `*failure` (mapped host memory,
 * which the runtime reads before each launch). The kernel then runs to its end with what it has:
 * its results are wrong, and the runtime launches nothing more. */
typedef struct mk_wait_failure {
  mk_u32 failed; /* nonzero once described */
  mk_u32 target; /* the count waited for */
  mk_u32 seen;   /* what the flag held */
  mk_u32 reserved;
  mk_u64 flag; /* the flag's device address */
} mk_wait_failure;

typedef struct mk_wait_watch {
  mk_u64 timeout_ns;
  mk_u32 *gave_up;
  mk_wait_failure *failure;
} mk_wait_watch;

/* What a launch's routing of tokens to experts (mk.dispatch) tells the caller, in mapped host
 * memory of the op, which the runtime reads once the caller has synchronised the launch's stream.
 * Of this rank's tokens: `dropped` copies went past their expert's capacity in launch `epoch`
 * (each launch overwrites both); `invalid` is raised, and kept until the runtime has reported
 * it, by the first copy whose expert index was outside [0, experts): its token (of this rank's
 * shard), its choice among the token's top k, and the index. Such a copy goes nowhere. */
typedef struct mk_routing_report {
  mk_u32 epoch;
  mk_u32 dropped;
  mk_u32 invalid;
  mk_u32 invalid_token;
  mk_u32 invalid_choice;
  mk_i32 invalid_expert;
} mk_routing_report;

/* Everything an op's launches report (one per op). */
typedef struct mk_op_report {
  mk_routing_report routing;
} mk_op_report;

/* What an op's launches count (one per op), in device memory: CTAs add to it, nothing resets
 * it, and the runtime reads it when asked, once the caller has synchronised. */
typedef struct mk_op_counters {
  /* Bytes of routed rows (mk.dispatch) and of their results (mk.combine) this rank stored on
   * other GPUs of its node. */
  mk_u64 nvlink_bytes;
} mk_op_counters;

/* An op's launches, counted in device memory. `epoch` is the launch's: 1 for the first, then +1
 * per launch (flags are never reset). Every CTA takes it as it starts and counts itself in
 * `readers`; the grid's last to do so advances it for the next launch and clears `readers`, so a
 * launch is one kernel and a captured CUDA graph replays with fresh epochs. An op whose copy
 * engines set flags to the epoch (mk_engine_copy) copies it while the kernel runs: its kernel
 * leaves it alone and its module has <name>_advance_epoch, which the runtime runs after the
 * copies. `role_ctas[r]` is role r's CTAs summed over the launches before `epoch`'s, which the
 * last CTA adds this launch's to as it advances the epoch, where the kernel's waits count
 * arrivals per CTA of a role: the split may change between launches (mk_role_range), so such a
 * flag holds that sum times its count, not the epoch times a fixed one. `claims` counts the
 * positions of the pool role's walk that CTAs have claimed in the launch (RoleOp's pool), the
 * launch's last claim putting it back to 0. */
typedef struct mk_launch_count {
  mk_u32 epoch;
  mk_u32 readers;
  mk_u32 role_ctas[MK_MAX_ROLES];
  mk_u32 claims;
} mk_launch_count;

/* The CTAs [first, first + ctas) of the grid that one role takes in a launch: the manifest's
 * sm_split unless the caller chose another for the op (FusedOp::setSmSplit), so that a kernel runs
 * any split of its grid without being compiled again. */
typedef struct mk_role_range {
  mk_u32 first;
  mk_u32 ctas;
} mk_role_range;

/* The single parameter of every generated kernel. */
typedef struct mk_kernel_args {
  mk_tensor_map maps[MK_MAX_TENSOR_MAPS]; /* first: their alignment is the struct's */
  mk_tensor_ref tensors[MK_MAX_TENSORS];
  mk_u32 *flags;                            /* this rank's flag region */
  mk_u32 *flags_peer[MK_MAX_GPUS_PER_NODE]; /* the flag regions of the GPUs of this node */
  /* Arrivals over the network, [nodes][flag_words]: row n counts what node n signalled on each
   * flag (mk/queue.h). A flag's arrivals are flags[i] plus net_flags[n * flag_words + i] over n. */
  mk_u32 *net_flags;
  mk_command_queue queue;            /* to this rank's network proxy */
  mk_launch_count *launches;         /* the op's, in device memory */
  mk_op_report *report;              /* the op's, in mapped host memory */
  mk_op_counters *counters;          /* the op's, in device memory */
  mk_role_range roles[MK_MAX_ROLES]; /* in the manifest's order */
  mk_u32 node;                       /* this rank's node and GPU index */
  mk_u32 gpu;
  mk_u32 nodes;
  mk_u32 flag_words;
  mk_u32 abi_version;
  mk_u32 reserved;
} mk_kernel_args;

#ifdef __cplusplus
static_assert(sizeof(void *) == 8, "64-bit only");
static_assert(sizeof(mk_i32) == 4, "mk_i32 is 32 bits");
static_assert(sizeof(mk_tensor_ref) == 72, "mk_tensor_ref layout");
static_assert(sizeof(mk_tensor_map) == 128 && alignof(mk_tensor_map) == 64, "mk_tensor_map layout");
static_assert(sizeof(mk_tensor_map_spec) == 80, "mk_tensor_map_spec layout");
static_assert(sizeof(mk_engine_copy) == 56, "mk_engine_copy layout");
static_assert(sizeof(mk_argument_type) == 16 + 8 * MK_MAX_TENSOR_RANK, "mk_argument_type layout");
static_assert(sizeof(mk_role_ctas) == MK_ROLE_KIND_BYTES + 8, "mk_role_ctas layout");
static_assert(sizeof(mk_role_range) == 8, "mk_role_range layout");
static_assert(sizeof(mk_kernel_manifest) ==
                  48 + 8 * MK_MAX_TENSORS + sizeof(mk_argument_type) * MK_MAX_TENSORS +
                      sizeof(mk_role_ctas) * MK_MAX_ROLES + 80 * MK_MAX_TENSOR_MAPS,
              "mk_kernel_manifest layout");
static_assert(sizeof(mk_kernel_manifest) % alignof(mk_engine_copy) == 0,
              "the engine copies follow the manifest unpadded");
static_assert(sizeof(mk_wait_failure) == 24, "mk_wait_failure layout");
static_assert(sizeof(mk_wait_watch) == 24, "mk_wait_watch layout");
static_assert(sizeof(mk_routing_report) == 24, "mk_routing_report layout");
static_assert(sizeof(mk_op_report) == 24, "mk_op_report layout");
static_assert(sizeof(mk_op_counters) == 8, "mk_op_counters layout");
static_assert(sizeof(mk_launch_count) == 12 + 4 * MK_MAX_ROLES, "mk_launch_count layout");
static_assert(sizeof(mk_kernel_args) ==
                  128 * MK_MAX_TENSOR_MAPS + ((72 * MK_MAX_TENSORS + 8 + 8 * MK_MAX_GPUS_PER_NODE +
                                               8 + 64 + 8 + 8 + 8 + 8 * MK_MAX_ROLES + 24 + 63) /
                                              64 * 64),
              "mk_kernel_args layout");
static_assert(sizeof(mk_kernel_args) <= 4096, "kernel parameters must fit the 4 KiB limit");
#endif

#endif /* MK_ABI_H */
