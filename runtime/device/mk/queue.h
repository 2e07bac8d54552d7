/*===- mk/queue.h - the command queue from kernels to the host network proxy ------*- C -*-===*
 *
 * Kernels ask for network transfers by writing commands into a ring in host memory; a proxy
 * thread of their rank reads them and drives the network (runtime/include/mk/runtime/net/).
 * Shared unchanged by NVRTC device code, the host runtime and C callers, so dependency-free;
 * every layout is asserted below. A layout change bumps MK_QUEUE_VERSION, which the proxy checks
 * against the queue's `version` before it reads a command.
 *
 * Addresses. Transfers move bytes between the symmetric heaps of ranks (mk/runtime/
 * SymmetricMemory.h): a buffer has the same offset in every rank's heap block, so a command names
 * memory by heap offsets and the proxy resolves them against the regions it registered with the
 * network. A source may instead lie in the queue's staging area (pinned host memory the kernel
 * writes first), for small payloads or memory outside the heap.
 *
 * Publication. A producer takes a ticket t = atomicAdd(head, 1), waits until t - *tail <
 * capacity (back-pressure: the proxy is done with the slot's previous command; a copy of the tail
 * in device memory, head[MK_QUEUE_TAIL_SEEN], answers that without a PCIe read while the ring has
 * room), writes words 1-7 of slot t mod capacity, then stores word 0 (`ticket` = (u32)t + 1,
 * `op`, `view`) as one 64-bit store with release semantics (st.release.sys on the GPU). The proxy
 * waits for its next ticket with an acquire load of word 0 and copies the command out. The
 * ticket tells a fresh command from the one a lap earlier, so slots are never cleared.
 *
 * Release. The proxy advances *tail past a ticket once it is done with that command and every
 * earlier one: the network has read its source (the put's write completed, or its rows were
 * packed into the proxy's own memory). That hands the slot back, and tells the kernel that the
 * memory the command names may change: a launch ends only once the proxy is done with its
 * commands (mk::proxy_wait_reads), so that neither the next launch nor the host, writing the next
 * launch's inputs, changes what the network is still sending.
 *
 * Ordering. Commands of one queue are carried out in ticket order per destination node as far as
 * flags are concerned: a signal (MK_CMD_SIGNAL, or the flag of MK_CMD_PUT_SIGNAL) becomes visible
 * at the destination only after the data of every earlier put of the queue to that node, and of
 * its own put. Data of different puts may land in any order.
 *
 * Flags. Network arrivals are counted in the destination's network flags (mk_kernel_args::
 * net_flags): one word per flag and source node, written only by the proxies with absolute,
 * ever-growing counts, so that no host needs an atomic on GPU memory. A kernel waiting for a flag
 * adds its network words to the flag itself. `signal_offset` is the heap offset of the word to
 * count on (the destination's net_flags[source node][flag]).
 *
 * Failure. When the proxy fails (a peer unreachable or dead, a transfer rejected, a timeout) it
 * stores a nonzero MK_QUEUE_* code in `*abort` before reporting to the host; kernels spinning on
 * flags or on a full ring check it and give up, so that the launch ends and the host caller gets
 * the proxy's message instead of a hang.
 *
 *===----------------------------------------------------------------------------------===*/

#ifndef MK_QUEUE_H
#define MK_QUEUE_H

#define MK_QUEUE_VERSION 3

typedef unsigned short mk_u16;
typedef unsigned int mk_u32;
typedef unsigned long long mk_u64;

/* What a command asks for (mk_command::op). */
enum {
  MK_CMD_NONE = 0,
  /* Copy `rows` rows of `row_bytes` bytes, `src_pitch` apart at `src_offset` of the source view,
   * to rows `dst_pitch` apart at heap offset `dst_offset` of the rank with this rank's GPU index
   * on node `dst_node`. */
  MK_CMD_PUT = 1,
  /* MK_CMD_PUT, then one arrival on the destination's word at heap offset `signal_offset`. */
  MK_CMD_PUT_SIGNAL = 2,
  /* One arrival at `signal_offset` of node `dst_node`, after the queue's earlier puts to it. */
  MK_CMD_SIGNAL = 3,
  /* Later commands of the queue start only once every earlier one has completed at its
   * destination (data written, flags delivered). */
  MK_CMD_FENCE = 4,
  /* MK_CMD_FENCE, then one arrival at `signal_offset` of every other node: with a wait for
   * nodes - 1 arrivals on that flag, a barrier among the nodes' ranks of this GPU index. */
  MK_CMD_BARRIER = 5,
};

/* Where a put's source lies (mk_command::view). */
enum {
  MK_VIEW_HEAP = 0,    /* `src_offset` is an offset in this rank's symmetric heap block */
  MK_VIEW_STAGING = 1, /* `src_offset` is an offset in the queue's staging area */
};

/* Why the proxy stopped (*mk_command_queue::abort); 0 while it runs. */
enum {
  MK_QUEUE_RUNNING = 0,
  MK_QUEUE_FAILED = 1,      /* a transfer failed or a peer went away: the host has the message */
  MK_QUEUE_BAD_COMMAND = 2, /* a command the proxy cannot carry out (out of range, bad op) */
  MK_QUEUE_STOPPED = 3,     /* the runtime shut the proxy down */
};

typedef struct mk_command {
  /* word 0, stored last with release semantics */
  mk_u32 ticket; /* (u32)t + 1 for ticket t */
  mk_u16 op;
  mk_u16 view;
  /* word 1 */
  mk_u32 dst_node;
  mk_u32 rows;
  /* words 2-3 */
  mk_u64 src_offset;
  mk_u64 dst_offset;
  /* word 4 */
  mk_u32 row_bytes;
  mk_u32 src_pitch;
  /* word 5 */
  mk_u32 dst_pitch;
  mk_u32 reserved;
  /* words 6-7 */
  mk_u64 signal_offset; /* MK_NO_SIGNAL for none */
  mk_u64 reserved2;
} mk_command;

#define MK_NO_SIGNAL 0xffffffffffffffffull

/* The words at mk_command_queue::head: the next ticket (taken with atomicAdd), and the highest
 * *tail a producer has read (raised with an atomic max: producers that find room below it skip
 * the read of host memory). */
enum { MK_QUEUE_NEXT_TICKET = 0, MK_QUEUE_TAIL_SEEN = 1, MK_QUEUE_HEAD_WORDS = 2 };

/* One rank's queue, as its kernels see it. */
typedef struct mk_command_queue {
  mk_command *slots;            /* `capacity` commands, host memory mapped into the device */
  mk_u64 *head;                 /* device memory, two words (MK_QUEUE_NEXT_TICKET, _TAIL_SEEN) */
  const volatile mk_u64 *tail;  /* tickets the proxy is done with (Release): host memory */
  const volatile mk_u32 *abort; /* MK_QUEUE_RUNNING, or why the proxy stopped: host memory */
  unsigned char *staging;       /* MK_VIEW_STAGING sources: host memory mapped into the device */
  mk_u64 staging_bytes;
  mk_u64 heap_base; /* device address of this rank's heap block (heap offset 0) */
  mk_u32 capacity;  /* a power of two */
  mk_u32 version;   /* MK_QUEUE_VERSION */
} mk_command_queue;

#ifdef __cplusplus
static_assert(sizeof(mk_u16) == 2 && sizeof(mk_u32) == 4 && sizeof(mk_u64) == 8,
              "fixed-width types");
static_assert(sizeof(mk_command) == 64, "mk_command layout");
static_assert(sizeof(mk_command_queue) == 64, "mk_command_queue layout");
#endif
/* No field straddles an 8-byte word; word 0 is the one published with release semantics. Checked
 * where the host compiler's offsetof builtin exists (NVRTC lacks it; the layout rules are C's). */
#if defined(__cplusplus) && !defined(__CUDACC_RTC__)
static_assert(__builtin_offsetof(mk_command, op) == 4 && __builtin_offsetof(mk_command, view) == 6,
              "mk_command word 0");
static_assert(__builtin_offsetof(mk_command, dst_node) == 8 &&
                  __builtin_offsetof(mk_command, src_offset) == 16 &&
                  __builtin_offsetof(mk_command, dst_offset) == 24 &&
                  __builtin_offsetof(mk_command, row_bytes) == 32 &&
                  __builtin_offsetof(mk_command, dst_pitch) == 40 &&
                  __builtin_offsetof(mk_command, signal_offset) == 48,
              "mk_command fields");
#endif

#endif /* MK_QUEUE_H */
