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

// ---- 16-byte global stores --------------------------------------------------------------

/// One st.global.v4 of the 16 bytes at `from` to `to` (16-byte aligned). Written as PTX because
/// a plain copy beside an element-by-element fallback may be merged with it into 8 scalar stores.
__device__ __forceinline__ void st_global_16(void *to, const void *from) {
  const uint4 v = *static_cast<const uint4 *>(from);
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(to), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
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

/// Four 8x8 matrices of 16-bit elements; lane l gives the address of row l % 8 of matrix l / 8
/// as `address` + kOffset, an immediate: the constant part of an address takes no register.
template <int kOffset>
__device__ __forceinline__ void ldmatrix_x4(mk_u32 (&fragment)[4], mk_u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4+%5];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(address), "n"(kOffset));
}

/// The same, each matrix transposed on the way to registers.
template <int kOffset>
__device__ __forceinline__ void ldmatrix_x4_trans(mk_u32 (&fragment)[4], mk_u32 address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4+%5];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(address), "n"(kOffset));
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

// ---- Special functions ----------------------------------------------------------------

/// 2^x on the special-function unit (ex2.approx.ftz: at most 2 ulp off; -inf gives 0).
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

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

/// Blocks until the phase with parity `phase` has completed. Compiled with
/// -DMK_WATCH_BARRIERS=SECONDS (MKC_NVRTC_OPTIONS, for debugging), a wait that has not seen it
/// complete within SECONDS prints where it is and traps, so that the launch fails instead of
/// hanging.
__device__ __forceinline__ void mbarrier_wait(mk_u32 barrier, mk_u32 phase) {
#ifndef MK_WATCH_BARRIERS
  asm volatile("{\n"
               ".reg .pred done;\n"
               "retry:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra retry;\n"
               "}\n" ::"r"(barrier),
               "r"(phase)
               : "memory");
#else
  mk_u64 start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    mk_u32 done;
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n"
                 "}\n"
                 : "=r"(done)
                 : "r"(barrier), "r"(phase)
                 : "memory");
    if (done)
      return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > static_cast<mk_u64>(MK_WATCH_BARRIERS) * 1000000000ull) {
      printf("mk: CTA %d thread %d: the mbarrier at shared 0x%x has not completed phase %u in "
             "%d s (MK_WATCH_BARRIERS)\n",
             static_cast<int>(blockIdx.x), static_cast<int>(threadIdx.x), barrier, phase & 1,
             static_cast<int>(MK_WATCH_BARRIERS));
      __trap();
    }
  }
#endif
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

// ---- wgmma: warpgroup matrix multiply-accumulate (sm_90a) ------------------------------

/// A shared-memory matrix descriptor for wgmma: `address` (state space) of an operand laid out in
/// 128-byte swizzled rows, 8-row groups `stride_bytes` apart and (MN-major only) 64-element blocks
/// `leading_bytes` apart.
__device__ __forceinline__ mk_u64 wgmma_descriptor(mk_u32 address, mk_u32 leading_bytes,
                                                   mk_u32 stride_bytes) {
  return static_cast<mk_u64>((address & 0x3ffff) >> 4) |
         static_cast<mk_u64>(leading_bytes >> 4) << 16 |
         static_cast<mk_u64>(stride_bytes >> 4) << 32 | 1ull << 62; // 62-63: 1 = 128-byte swizzle
}

/// d (64 x N, f32, the warpgroup's accumulator fragments) (+)= A (64 x 16, K-major) * B (16 x N,
/// K-major, or MN-major with kTransposeB), both from shared memory; `accumulate` 0 overwrites d.
template <typename T, int N> struct Wgmma;

template <> struct Wgmma<__nv_bfloat16, 64> {
  template <int kTransposeB>
  static __device__ __forceinline__ void run(float (&d)[32], mk_u64 a, mk_u64 b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, "
                 "p, 1, 1, 0, %35;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b), "r"(accumulate), "n"(kTransposeB));
  }
};

template <> struct Wgmma<__half, 64> {
  template <int kTransposeB>
  static __device__ __forceinline__ void run(float (&d)[32], mk_u64 a, mk_u64 b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "
                 "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, "
                 "p, 1, 1, 0, %35;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b), "r"(accumulate), "n"(kTransposeB));
  }
};

template <> struct Wgmma<__nv_bfloat16, 128> {
  template <int kTransposeB>
  static __device__ __forceinline__ void run(float (&d)[64], mk_u64 a, mk_u64 b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, %67;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate), "n"(kTransposeB));
  }
};

template <> struct Wgmma<__half, 128> {
  template <int kTransposeB>
  static __device__ __forceinline__ void run(float (&d)[64], mk_u64 a, mk_u64 b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, %67;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "l"(a), "l"(b), "r"(accumulate), "n"(kTransposeB));
  }
};

template <> struct Wgmma<__nv_bfloat16, 256> {
  template <int kTransposeB>
  static __device__ __forceinline__ void run(float (&d)[128], mk_u64 a, mk_u64 b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, "
        "%73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, "
        "%91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, "
        "%107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, "
        "%122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, %131;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
          "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
          "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
          "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
          "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
          "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
          "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
          "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(a), "l"(b), "r"(accumulate), "n"(kTransposeB));
  }
};

template <> struct Wgmma<__half, 256> {
  template <int kTransposeB>
  static __device__ __forceinline__ void run(float (&d)[128], mk_u64 a, mk_u64 b, int accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "
        "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, "
        "%37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, "
        "%55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, "
        "%73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, "
        "%91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, "
        "%107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, "
        "%122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, %131;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
          "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
          "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
          "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
          "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
          "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
          "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
          "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(a), "l"(b), "r"(accumulate), "n"(kTransposeB));
  }
};

/// d (64 x N, f32) (+)= A (64 x 16, from the warpgroup's registers) * B (16 x N, K-major, or
/// MN-major with kTransposeB, from shared memory). Thread t of the warpgroup holds A's rows
/// r = 16 (t / 32) + t % 32 / 4 and r + 8 at columns c = 2 (t % 4) and c + 8, two 16-bit elements a
/// register: a[0] = (r, c), a[1] = (r + 8, c), a[2] = (r, c + 8), a[3] = (r + 8, c + 8). That is
/// the layout of 16 columns of a wgmma accumulator, so that a product converted where it is feeds
/// the next product.
template <typename T, int N> struct WgmmaRs;

#define MK_WGMMA_RS_64(T, NAME)                                                                    \
  template <> struct WgmmaRs<T, 64> {                                                              \
    template <int kTransposeB>                                                                     \
    static __device__ __forceinline__ void run(float (&d)[32], const mk_u32 (&a)[4], mk_u64 b,     \
                                               int accumulate) {                                   \
      asm volatile(                                                                                \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                             \
          "wgmma.mma_async.sync.aligned.m64n64k16.f32." NAME "." NAME " {"                         \
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "  \
          "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, "     \
          "%35}, %36, p, 1, 1, %38;\n}\n"                                                          \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),    \
            "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),             \
            "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),          \
            "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),          \
            "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),          \
            "+f"(d[31])                                                                            \
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate),                   \
            "n"(kTransposeB));                                                                     \
    }                                                                                              \
  };
MK_WGMMA_RS_64(__nv_bfloat16, "bf16")
MK_WGMMA_RS_64(__half, "f16")
#undef MK_WGMMA_RS_64

#define MK_WGMMA_RS_128(T, NAME)                                                                   \
  template <> struct WgmmaRs<T, 128> {                                                             \
    template <int kTransposeB>                                                                     \
    static __device__ __forceinline__ void run(float (&d)[64], const mk_u32 (&a)[4], mk_u64 b,     \
                                               int accumulate) {                                   \
      asm volatile(                                                                                \
          "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                             \
          "wgmma.mma_async.sync.aligned.m64n128k16.f32." NAME "." NAME " {"                        \
          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "  \
          "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, "  \
          "%36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, "  \
          "%53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, " \
          "1, 1, %70;\n}\n"                                                                        \
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),    \
            "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),             \
            "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),          \
            "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),          \
            "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),          \
            "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),          \
            "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),          \
            "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),          \
            "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),          \
            "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),          \
            "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                                                  \
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate),                   \
            "n"(kTransposeB));                                                                     \
    }                                                                                              \
  };
MK_WGMMA_RS_128(__nv_bfloat16, "bf16")
MK_WGMMA_RS_128(__half, "f16")
#undef MK_WGMMA_RS_128

/// Orders the warpgroup's register accesses before the wgmma that follow.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/// Waits until at most `kPending` of the warpgroup's wgmma groups are in flight.
template <int kPending> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
/// Pins `registers` in place: code that reads or writes them stays on its side of this point
/// (of a wgmma_wait, after which an asynchronous wgmma's results are there; of a wgmma_fence,
/// before which its operands must be written). The compiler sees no other dependence of a wgmma's
/// registers on the wait.
template <int N> __device__ __forceinline__ void fence_registers(float (&registers)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("" : "+f"(registers[i])::"memory");
}
template <int N> __device__ __forceinline__ void fence_registers(mk_u32 (&registers)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("" : "+r"(registers[i])::"memory");
}

// ---- TMA: bulk tensor copies through tensor maps ----------------------------------------

/// Loads the box at (c0, c1[, c2]) (innermost first) of the tensor that `map` describes into
/// shared memory at `dst`; completion is counted in bytes on `barrier`.
__device__ __forceinline__ void tma_load(mk_u32 dst, const mk_tensor_map *map, int c0, int c1,
                                         mk_u32 barrier) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
               "[%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
               "l"(map), "r"(c0), "r"(c1), "r"(barrier)
               : "memory");
}
__device__ __forceinline__ void tma_load(mk_u32 dst, const mk_tensor_map *map, int c0, int c1,
                                         int c2, mk_u32 barrier) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
               "[%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
               "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(barrier)
               : "memory");
}

/// As tma_load (2-D), but the box lands at `dst` and completes on `barrier` in each CTA of the
/// cluster that `cta_mask` names (bit i: the CTA of rank i), at the same shared-memory offsets.
__device__ __forceinline__ void tma_load_multicast(mk_u32 dst, const mk_tensor_map *map, int c0,
                                                   int c1, mk_u32 barrier, mk_u16 cta_mask) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               ".multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
               "l"(map), "r"(c0), "r"(c1), "r"(barrier), "h"(cta_mask)
               : "memory");
}

/// Stores shared memory at `src` to the box at (c0, c1[, c2]); tracked by this thread's bulk
/// async-groups (bulk_commit, bulk_wait_read, bulk_wait_all). Elements beyond the tensor's
/// extents are not written.
__device__ __forceinline__ void tma_store(const mk_tensor_map *map, int c0, int c1, mk_u32 src) {
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(
          map),
      "r"(c0), "r"(c1), "r"(src)
      : "memory");
}
__device__ __forceinline__ void tma_store(const mk_tensor_map *map, int c0, int c1, int c2,
                                          mk_u32 src) {
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::
          "l"(map),
      "r"(c0), "r"(c1), "r"(c2), "r"(src)
      : "memory");
}

/// As tma_store, but adds the box to what the tensor holds, element by element in the map's
/// dtype, where the memory is (an L2 reduction, also across NVLink).
__device__ __forceinline__ void tma_store_add(const mk_tensor_map *map, int c0, int c1,
                                              mk_u32 src) {
  asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, "
               "%2}], [%3];\n" ::"l"(map),
               "r"(c0), "r"(c1), "r"(src)
               : "memory");
}

/// Fetches a tensor map into the cache ahead of its first use.
__device__ __forceinline__ void prefetch_tensor_map(const mk_tensor_map *map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

/// Arrives once on `barrier` (no transaction bytes).
__device__ __forceinline__ void mbarrier_arrive(mk_u32 barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}

/// Arrives once on the mbarrier at offset `barrier` of the shared memory of cluster CTA `cta`.
/// CTA-scope release, as for a local arrival: with a cluster-scope release the GEMM engine's
/// stages took about a microsecond longer each (notes/gemm-engine.md v3).
__device__ __forceinline__ void mbarrier_arrive_cluster(mk_u32 barrier, mk_u32 cta) {
  asm volatile("{\n"
               ".reg .b32 remote;\n"
               "mapa.shared::cluster.u32 remote, %0, %1;\n"
               "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
               "}\n" ::"r"(barrier),
               "r"(cta)
               : "memory");
}

// ---- thread-block clusters ----------------------------------------------------------------

/// This CTA's rank in its cluster.
__device__ __forceinline__ mk_u32 cluster_cta_rank() {
  mk_u32 rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return rank;
}

/// Every thread of every CTA of the cluster arrives, then waits for all the others; accesses
/// before it (also to other CTAs' shared memory) are visible to all after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\n"
               "barrier.cluster.wait.acquire;\n" ::
                   : "memory");
}

/// Orders this thread's ordinary shared-memory writes before the async proxy's reads of them.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- System-scope synchronisation (peers over NVLink, the host over PCIe) --------------

__device__ __forceinline__ mk_u32 load_acquire_sys(const mk_u32 *address) {
  mk_u32 value;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}

/// A strong load without ordering: several in flight at once, then fence_acq_rel_sys, acquire
/// what each saw (PTX's acquire pattern).
__device__ __forceinline__ mk_u32 load_relaxed_sys(const mk_u32 *address) {
  mk_u32 value;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];\n" : "=r"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ void fence_acq_rel_sys() {
  asm volatile("fence.acq_rel.sys;\n" ::: "memory");
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

__device__ __forceinline__ void store_release_sys(mk_u64 *address, mk_u64 value) {
  asm volatile("st.release.sys.u64 [%0], %1;\n" ::"l"(address), "l"(value) : "memory");
}

__device__ __forceinline__ void red_add_release_sys(mk_u32 *address, mk_u32 value) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;\n" ::"l"(address), "r"(value) : "memory");
}

// ---- GPU-scope synchronisation (this GPU's CTAs) ---------------------------------------

__device__ __forceinline__ mk_u64 load_acquire_gpu(const mk_u64 *address) {
  mk_u64 value;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];\n" : "=l"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ void red_max_release_gpu(mk_u64 *address, mk_u64 value) {
  asm volatile("red.release.gpu.global.max.u64 [%0], %1;\n" ::"l"(address), "l"(value) : "memory");
}

// ---- Named barriers and register reallocation -----------------------------------------

/// Waits until `kThreads` threads (whole warps) have arrived at barrier `kId` (1-15; 0 is
/// __syncthreads').
template <int kId, int kThreads> __device__ __forceinline__ void bar_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

/// As bar_sync, for a barrier chosen at run time.
template <int kThreads> __device__ __forceinline__ void bar_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}
/// Arrives at barrier `id` without waiting: with bar_sync of the other kThreads - (these
/// arrivals) threads, one side lets the other go on.
template <int kThreads> __device__ __forceinline__ void bar_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kThreads) : "memory");
}

/// The warpgroup's register budget per thread, lowered or raised (sm_90a; the kernel needs a
/// register cap at entry, which __launch_bounds__(threads, 1) gives).
template <int kRegisters> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

} // namespace ptx

/// The tile library's collectives run on a team of MK_TEAM_THREADS threads (mk/abi.h): threads
/// 0-255 of a CTA, or, under the GEMM engine, its two consumer warpgroups (threads 128-383).
/// team_thread() numbers the members 0-255 in whole warps either way.
__device__ __forceinline__ int team_thread() {
  static_assert(MK_CTA_THREADS <= 2 * MK_TEAM_THREADS, "one subtraction brings a thread in range");
  // Signed, and no modulo: index arithmetic on unsigned remainders loses the 16-byte vectors.
  const int thread =
      static_cast<int>(threadIdx.x) - (threadIdx.x >= MK_TEAM_THREADS ? MK_TEAM_THREADS : 0);
  // The range, which the compiler cannot know: with it, the layouts' divisions and remainders
  // are shifts and masks, and a tile's shared-memory addresses one base and constant offsets
  // instead of a register each, held across the tile loops (ptxas spilled them).
  __builtin_assume(thread >= 0 && thread < MK_TEAM_THREADS);
  return thread;
}
namespace detail {
/// The next of `tiles` from `counter`, which `claimers` CTAs draw from, each until it draws past
/// the end, once: the launch's last claim is the last CTA's, which puts the counter back to 0 for
/// the next launch.
__device__ __forceinline__ int claim_from(unsigned *counter, int tiles, int claimers) {
  const int tile = static_cast<int>(atomicAdd(counter, 1u));
  if (tile == tiles + claimers - 1)
    atomicExch(counter, 0u);
  return tile;
}
} // namespace detail

/// Registers a thread where every warpgroup has as many: at the kernel's start (what ptxas
/// allocates for MK_CTA_THREADS threads a CTA, one CTA an SM).
constexpr int kEvenRegisters = 65536 / MK_CTA_THREADS / 8 * 8;
/// Whether this thread belongs to the team of a CTA without an engine.
__device__ __forceinline__ bool team_member() { return threadIdx.x < MK_TEAM_THREADS; }
/// The team's barrier (named barrier 1): the team's threads only, so that the rest of the CTA
/// can be elsewhere (the engine's producer) or gone.
__device__ __forceinline__ void team_sync() { ptx::bar_sync<1, MK_TEAM_THREADS>(); }

} // namespace mk

#endif // MK_DEVICE_IMPL_PTX_FUNCS_CUH
