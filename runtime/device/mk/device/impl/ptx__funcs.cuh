//===- mk/device/impl/ptx__funcs.cuh - thin wrappers around the PTX the library uses -===//
//
// One function per instruction, named after it, so that the algorithms above read as CUDA and
// the inline assembly lives in one place. Per-thread (not collective), in mk::ptx.
//
//===----------------------------------------------------------------------------------===//

#ifndef MK_DEVICE_IMPL_PTX_FUNCS_CUH
#define MK_DEVICE_IMPL_PTX_FUNCS_CUH

#include "mk/abi.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace mk {
namespace ptx {

/// The shared-memory (state space) address of a generic pointer into shared memory.
__device__ __forceinline__ mk_u32 smem_address(const void *pointer) {
  return static_cast<mk_u32>(__cvta_generic_to_shared(pointer));
}

// ---- cp.async: global -> shared, 16 bytes, asynchronous (Ampere) ------------------------

/// Copies `src_bytes` (0..16) bytes from `src` and zero-fills the rest of the 16 at `dst`.
/// Bypasses L1 (.cg): tiles are read once per CTA.
__device__ __forceinline__ void cp_async_16(mk_u32 dst, const void *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ---- Tensor cores ---------------------------------------------------------------------

/// Four 8x8 matrices of 16-bit elements; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(mk_u32 (&fragment)[4], mk_u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(address));
}

/// The same, each matrix transposed on the way to registers.
__device__ __forceinline__ void ldmatrix_x4_trans(mk_u32 (&fragment)[4], mk_u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(address));
}

/// d += a * b for one m16n8k16 block; `T` (bf16 or f16) is the element type of a and b.
template <typename T> struct Mma;

template <> struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float2 &d_top, float2 &d_bottom, const mk_u32 (&a)[4],
                                             mk_u32 b0, mk_u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d_top.x), "+f"(d_top.y), "+f"(d_bottom.x), "+f"(d_bottom.y)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <> struct Mma<__half> {
  static __device__ __forceinline__ void run(float2 &d_top, float2 &d_bottom, const mk_u32 (&a)[4],
                                             mk_u32 b0, mk_u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d_top.x), "+f"(d_top.y), "+f"(d_bottom.x), "+f"(d_bottom.y)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// ---- mbarrier and the bulk-copy engine (Hopper) ---------------------------------------

__device__ __forceinline__ void mbarrier_init(mk_u32 barrier, mk_u32 arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals)
               : "memory");
}

/// Before its memory is used for anything else.
__device__ __forceinline__ void mbarrier_inval(mk_u32 barrier) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(barrier) : "memory");
}

/// Makes initialised mbarriers visible to the bulk-copy engine (the async proxy).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/// Arrives once and announces `bytes` more bytes that bulk copies will complete.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(mk_u32 barrier, mk_u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes)
               : "memory");
}

/// Blocks until the phase with parity `phase` has completed.
__device__ __forceinline__ void mbarrier_wait(mk_u32 barrier, mk_u32 phase) {
  asm volatile("{\n"
               ".reg .pred done;\n"
               "retry:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra retry;\n"
               "}\n" ::"r"(barrier),
               "r"(phase)
               : "memory");
}

/// Bulk copy global -> shared of `bytes` (a multiple of 16, both addresses 16-byte aligned);
/// completion is counted in bytes on `barrier`.
__device__ __forceinline__ void bulk_copy_global_to_shared(mk_u32 dst, const void *src,
                                                           mk_u32 bytes, mk_u32 barrier) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
               "[%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(barrier)
               : "memory");
}

/// Bulk copy shared -> global, tracked by this thread's bulk async-groups.
__device__ __forceinline__ void bulk_copy_shared_to_global(void *dst, mk_u32 src, mk_u32 bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

/// Waits until at most `kPending` of this thread's bulk groups still read shared memory.
template <int kPending> __device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}

/// Waits until all of this thread's bulk groups have completed their writes.
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

/// Orders this thread's memory accesses between the generic proxy (ordinary loads and stores)
/// and the async proxy (the bulk-copy engine), both ways.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async;\n" ::: "memory");
}

// ---- System-scope synchronisation (peers over NVLink, the host over PCIe) --------------

__device__ __forceinline__ mk_u32 load_acquire_sys(const mk_u32 *address) {
  mk_u32 value;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}

/// Generic addressing: `address` may be host memory mapped into the device.
__device__ __forceinline__ mk_u64 load_acquire_sys(const volatile mk_u64 *address) {
  mk_u64 value;
  asm volatile("ld.acquire.sys.u64 %0, [%1];\n" : "=l"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ void store_release_sys(mk_u32 *address, mk_u32 value) {
  asm volatile("st.release.sys.u32 [%0], %1;\n" ::"l"(address), "r"(value) : "memory");
}

__device__ __forceinline__ void red_add_release_sys(mk_u32 *address, mk_u32 value) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;\n" ::"l"(address), "r"(value) : "memory");
}

} // namespace ptx
} // namespace mk

#endif // MK_DEVICE_IMPL_PTX_FUNCS_CUH
