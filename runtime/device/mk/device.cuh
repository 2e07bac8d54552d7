//===- mk/device.cuh - the device library that generated kernels call ---------------===//
//
// Header-only, compiled by NVRTC for sm_90a with no host headers. Every function lives in
// namespace mk and is collective over the team (mk/abi.h: MK_TEAM_THREADS of the CTA's
// MK_CTA_THREADS): all its threads call it with the same arguments; the GEMM engine and
// TmaReduce say which threads take which part. Functions that take `smem` get the kernel's dynamic
// shared memory
//   extern __shared__ __align__(128) unsigned char mk_smem[];
// which must hold at least the *_smem_bytes() they name; they leave it free for the next call.
//
//   mk/device/tile.cuh   register tiles: splat, convert, arithmetic, elementary functions,
//                        activations, load, store, accumulate
//   mk/device/vector.cuh rank-1 tiles: load, store, reductions of rows and columns, broadcasts
//   mk/device/attention.cuh  one online-softmax attention step on register tiles
//   mk/device/routing.cuh    expert routing: rows selected for experts, results combined
//   mk/device/gemm.cuh   matmul: one output tile on the tensor cores (mma.sync, any layout)
//   mk/device/gemm_engine.cuh  the warp-specialized TMA + wgmma engine (sm_90a)
//   mk/device/comm.cuh   copies to peers, signal / wait on flags, the host proxy queue
//
//===----------------------------------------------------------------------------------===//

#ifndef MK_DEVICE_CUH
#define MK_DEVICE_CUH

#include "mk/abi.h"
#include "mk/device/attention.cuh"
#include "mk/device/attention_engine.cuh"
#include "mk/device/comm.cuh"
#include "mk/device/gemm.cuh"
#include "mk/device/gemm_engine.cuh"
#include "mk/device/routing.cuh"
#include "mk/device/tile.cuh"
#include "mk/device/vector.cuh"

#endif // MK_DEVICE_CUH
