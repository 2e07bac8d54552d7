/*===- mkc.h - the C ABI of the mkc runtime ---------------------------------*- C -*-===*
 *
 * For foreign-function callers (Python's ctypes, Rust, Go, ...): plain C types, opaque handles,
 * and a status per call. libmkc.so exports these functions and nothing else; it carries its own
 * compiler (MLIR, NVRTC is loaded as a shared library) and loads the CUDA driver at run time.
 *
 *   mkc_runtime *rt;
 *   if (mkc_runtime_create(NULL, &rt) != MKC_SUCCESS)    // from torchrun/srun/mpirun/mkc-launch
 *     fprintf(stderr, "%s\n", mkc_last_error());
 *   mkc_op *op;
 *   mkc_op_compile_file(rt, "lib/gemm_allreduce.mlir", "M=8192,N=8192,K=8192", NULL, &op);
 *   void *c;
 *   mkc_symmetric_alloc(rt, 8192 * 8192 * 2, &c);
 *   void *args[] = {a, b, c};
 *   mkc_op_launch(op, stream, args, 3);                  // stream: a CUstream / cudaStream_t
 *
 * Every function returns MKC_SUCCESS or a status; after a failure mkc_last_error() holds the
 * message (per thread, valid until the thread's next call). Collective calls, which every rank
 * makes in the same order: mkc_runtime_create, mkc_symmetric_alloc, mkc_op_compile*, mkc_barrier,
 * and mkc_runtime_destroy once every op is destroyed.
 *
 *===----------------------------------------------------------------------------------===*/

#ifndef MKC_H
#define MKC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a declaration here changes; mkc_api_version() says what the library implements. */
#define MKC_API_VERSION 4

typedef enum mkc_status {
  MKC_SUCCESS = 0,
  MKC_ERROR_INVALID_ARGUMENT = 1, /* a null handle, a wrong argument, a tensor of the wrong kind */
  MKC_ERROR_NO_DEVICE = 2,        /* no usable CUDA driver or GPU */
  MKC_ERROR_BOOTSTRAP = 3,        /* the launch environment or the rendezvous of the ranks */
  MKC_ERROR_COMPILE = 4,          /* a tile program that does not compile for these shapes */
  MKC_ERROR_CUDA = 5,             /* a CUDA driver call failed */
  MKC_ERROR_INTERNAL = 6,
  MKC_ERROR_JOB_FAILED = 7 /* the job failed around this rank: the network (a peer unreachable
                              or dead, the proxy stopped), or a kernel's wait for another rank
                              that gave up (MKC_WAIT_TIMEOUT); launches are refused from then on */
} mkc_status;

typedef struct mkc_runtime mkc_runtime;
typedef struct mkc_op mkc_op;

int mkc_api_version(void);
/* "MKC_SUCCESS", "MKC_ERROR_COMPILE", ... */
const char *mkc_status_name(mkc_status status);
/* The message of this thread's last failed call; "" if none. */
const char *mkc_last_error(void);

typedef struct mkc_runtime_options {
  size_t symmetric_bytes; /* per rank, taken from the GPU up front */
  size_t flag_words;      /* per rank, shared out among the ops */
  int device;             /* the CUDA device ordinal, or -1: the local rank */
  const char *cache_dir;  /* the JIT's on-disk cache, or NULL for the default */
} mkc_runtime_options;

/* The defaults, overridden by MKC_SYMMETRIC_BYTES, MKC_FLAG_WORDS, MKC_DEVICE, MKC_SHARE_GPU,
   MKC_CACHE_DIR. */
mkc_status mkc_runtime_options_default(mkc_runtime_options *options);

/* Joins the job its launcher describes (none: a world of one); `options` may be NULL for the
   defaults. Collective. */
mkc_status mkc_runtime_create(const mkc_runtime_options *options, mkc_runtime **runtime);
/* Tears the runtime down (collective); its ops must be destroyed first. NULL is a no-op. */
mkc_status mkc_runtime_destroy(mkc_runtime *runtime);

typedef struct mkc_runtime_info {
  int rank, world_size;
  int node, nodes;
  int local_rank, local_world_size;
  int device;
} mkc_runtime_info;

mkc_status mkc_runtime_get_info(const mkc_runtime *runtime, mkc_runtime_info *info);

/* What this rank's network proxy carried to other nodes since the runtime was created; zeros on
 * one node, where there is none. */
typedef struct mkc_network_statistics {
  unsigned long long commands; /* the kernels' commands it took from the queue */
  unsigned long long writes;   /* writes to other nodes */
  unsigned long long bytes;    /* their payload bytes, flags left out */
} mkc_network_statistics;

mkc_status mkc_runtime_network_statistics(const mkc_runtime *runtime,
                                          mkc_network_statistics *statistics);
/* Returns once every rank has called it as often as this one (host side). Collective. */
mkc_status mkc_barrier(mkc_runtime *runtime);
/* MKC_SUCCESS while this rank's launches can be trusted; MKC_ERROR_JOB_FAILED saying why once a
 * kernel's wait gave up (MKC_WAIT_TIMEOUT) or the network failed, after which results are wrong
 * and launches are refused. No driver call: after synchronising a launch's stream, it vouches for
 * its results. */
mkc_status mkc_runtime_check(const mkc_runtime *runtime);

/* `bytes` of symmetric memory of this rank's GPU, at the same offset on every rank; freed with
 * the runtime. Collective; every rank asks for the same size. */
mkc_status mkc_symmetric_alloc(mkc_runtime *runtime, size_t bytes, void **local);

/* A tile program (`text`, called `name` in diagnostics, or the file at `path`) compiled for
 * `shapes` ("M=8192,N=8192,K=8192"), this job's topology and this rank. `options` (or NULL)
 * overrides the compiler's choices: ';'-separated NAME=VALUE with the names and values of mkc's
 * flags, "sm-split=ROLE=CTAS,...", "gemm-tile-n=N", "gemm-tile-m=64|128", "gemm-k-splits=N",
 * "gemm-stages=N", "gemm-cluster=1|2", "in-place-all-reduce=0|1", "all-reduce-copy-engine=0|1",
 * "recycle-ctas=0|1" (CTAs done with their role join the reduction's; 1 unless set),
 * "one-shot-all-reduce=0|1" (without it, the cost model chooses). Collective. */
mkc_status mkc_op_compile(mkc_runtime *runtime, const char *text, const char *name,
                          const char *shapes, const char *options, mkc_op **op);
mkc_status mkc_op_compile_file(mkc_runtime *runtime, const char *path, const char *shapes,
                               const char *options, mkc_op **op);
/* NULL is a no-op. */
mkc_status mkc_op_destroy(mkc_op *op);

#define MKC_MAX_RANK 8

typedef struct mkc_argument {
  char element[8]; /* "bf16", "f16", "f32", "i32" */
  int rank;
  long long extents[MKC_MAX_RANK]; /* row-major, dense, on this rank */
  size_t bytes;
  int symmetric; /* must lie in memory from mkc_symmetric_alloc */
} mkc_argument;

mkc_status mkc_op_name(const mkc_op *op, const char **name);
mkc_status mkc_op_num_arguments(const mkc_op *op, int *count);
mkc_status mkc_op_get_argument(const mkc_op *op, int index, mkc_argument *argument);
/* The grid's split into roles: `count` roles, in the kernel's order; role `index`'s kind
 * ("compute", "intra_reduce", ...: what the sm-split option names; valid while the op lives) and
 * the CTAs its launches give it: the compiler's choice unless mkc_op_set_sm_split chose others. */
mkc_status mkc_op_num_roles(const mkc_op *op, int *count);
mkc_status mkc_op_get_role(const mkc_op *op, int index, const char **kind, int *ctas);
/* Launches from now on give role i `ctas[i]` CTAs (`count`: every role), the same kernel running
 * them: its grid in all, one CTA or more each, multiples of its clusters' CTAs. Collective,
 * between launches: every rank gets the same error, naming the rule or the rank, if the split
 * breaks a rule or ranks ask for different ones. */
mkc_status mkc_op_set_sm_split(mkc_op *op, const int *ctas, int count);

/* Enqueues the op on `stream` (a CUstream of this rank's device; NULL: the legacy default
 * stream) with `count` device addresses, one per argument. */
mkc_status mkc_op_launch(const mkc_op *op, void *stream, void *const *arguments, int count);

/* What the op's latest launch to route tokens to experts (mk.dispatch) reported for this rank's
 * tokens, once its stream has synchronised: `*launch` the launch (1 for the first, 0 before any),
 * `*dropped` the copies (token x top-k choice) that went past their expert's capacity and were
 * dropped; `*nvlink_bytes` the bytes of routed rows and of their results this rank stored on
 * other GPUs of its node over all launches so far. MKC_ERROR_INVALID_ARGUMENT when the op routes
 * nothing, or naming the token, choice and index once a launch routed a copy to an expert out of
 * range (reported once; mkc_op_launch reports it too). */
mkc_status mkc_op_routing(const mkc_op *op, unsigned *launch, unsigned *dropped,
                          unsigned long long *nvlink_bytes);

/* The CUDA C++ that `text` becomes for `topology` ("NODESxGPUS"), `rank` (-1: any), `shapes`
 * and `options` (as for mkc_op_compile), without a GPU: what the JIT would compile. *cuda is
 * freed with mkc_free. */
mkc_status mkc_generate_cuda(const char *text, const char *name, const char *topology, int rank,
                             const char *shapes, const char *options, char **cuda);
void mkc_free(void *pointer);

#ifdef __cplusplus
}
#endif

#endif /* MKC_H */
