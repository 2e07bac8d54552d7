//===- mk/runtime/driver/CudaDriver.h - the CUDA driver API, loaded at run time ---*- C++ -*-===//
//
// The driver (libcuda.so.1) comes with the GPU's kernel module, not with the toolkit: a binary
// linked against it does not even start on a machine without a GPU. So it is opened with dlopen
// and its entry points resolved with cuGetProcAddress, each in the version that cuda.h declares;
// `available()` says whether that worked and, if not, why.
//
//   const mkc::cuda::Driver &cu = mkc::cuda::Driver::get();
//   if (!cu.available()) { skip(cu.unavailableReason()); }
//   CUdeviceptr p;
//   MK_CU_CHECK(cu, cuMemAlloc(&p, bytes));  // throws mkc::cuda::Error naming the call and error
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_DRIVER_CUDADRIVER_H
#define MK_RUNTIME_DRIVER_CUDADRIVER_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

namespace mkc::cuda {

// The entry points this project uses, each with the API version (cudaTypedefs.h's PFN_name_vN)
// whose signature cuda.h declares: cuGetProcAddress returns the newest version up to the one
// asked for, and a newer one may take other parameters (cuCtxSynchronize_v2 takes a context in
// CUDA 13). cuda.h maps some names to versioned symbols (cuMemAlloc -> cuMemAlloc_v2); members
// are declared through those macros, so `driver.cuMemAlloc` means what `cuMemAlloc` means there.
#define MK_CUDA_DRIVER_FUNCTIONS(X)                                                                \
  X(cuGetErrorName, 6000)                                                                          \
  X(cuGetErrorString, 6000)                                                                        \
  X(cuInit, 2000)                                                                                  \
  X(cuDriverGetVersion, 2020)                                                                      \
  X(cuDeviceGetCount, 2000)                                                                        \
  X(cuDeviceGet, 2000)                                                                             \
  X(cuDeviceGetName, 2000)                                                                         \
  X(cuDeviceGetAttribute, 2000)                                                                    \
  X(cuDeviceGetPCIBusId, 4010)                                                                     \
  X(cuDeviceCanAccessPeer, 4000)                                                                   \
  X(cuDevicePrimaryCtxRetain, 7000)                                                                \
  X(cuDevicePrimaryCtxRelease, 11000)                                                              \
  X(cuCtxSetCurrent, 4000)                                                                         \
  X(cuCtxSynchronize, 2000)                                                                        \
  X(cuCtxGetDevice, 2000)                                                                          \
  X(cuCtxGetCurrent, 4000)                                                                         \
  X(cuCtxPushCurrent, 4000)                                                                        \
  X(cuCtxPopCurrent, 4000)                                                                         \
  X(cuCtxGetId, 12000)                                                                             \
  X(cuCtxGetExecAffinity, 11040)                                                                   \
  X(cuCtxEnablePeerAccess, 4000)                                                                   \
  X(cuModuleLoadData, 2000)                                                                        \
  X(cuModuleUnload, 2000)                                                                          \
  X(cuModuleGetFunction, 2000)                                                                     \
  X(cuModuleGetGlobal, 3020)                                                                       \
  X(cuFuncSetAttribute, 9000)                                                                      \
  X(cuFuncGetAttribute, 2020)                                                                      \
  X(cuLaunchKernel, 4000)                                                                          \
  X(cuLaunchKernelEx, 11060)                                                                       \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050)                                             \
  X(cuOccupancyMaxActiveClusters, 11070)                                                           \
  X(cuTensorMapEncodeTiled, 12000)                                                                 \
  X(cuPointerGetAttribute, 4000)                                                                   \
  X(cuMemGetInfo, 3020)                                                                            \
  X(cuMemAlloc, 3020)                                                                              \
  X(cuMemFree, 3020)                                                                               \
  X(cuMemcpyHtoD, 3020)                                                                            \
  X(cuMemcpyDtoH, 3020)                                                                            \
  X(cuMemsetD8, 3020)                                                                              \
  X(cuMemsetD32, 3020)                                                                             \
  X(cuMemcpyHtoDAsync, 3020)                                                                       \
  X(cuMemcpyDtoHAsync, 3020)                                                                       \
  X(cuMemcpyDtoDAsync, 3020)                                                                       \
  X(cuMemcpy2DAsync, 3020)                                                                         \
  X(cuMemcpyBatchAsync, 13000)                                                                     \
  X(cuMemcpy3DBatchAsync, 13000)                                                                   \
  X(cuMemsetD16Async, 3020)                                                                        \
  X(cuMemsetD32Async, 3020)                                                                        \
  X(cuMemHostAlloc, 2020)                                                                          \
  X(cuMemHostGetDevicePointer, 3020)                                                               \
  X(cuMemFreeHost, 2000)                                                                           \
  X(cuMemGetAllocationGranularity, 10020)                                                          \
  X(cuMemCreate, 10020)                                                                            \
  X(cuMemRelease, 10020)                                                                           \
  X(cuMemExportToShareableHandle, 10020)                                                           \
  X(cuMemImportFromShareableHandle, 10020)                                                         \
  X(cuMemAddressReserve, 10020)                                                                    \
  X(cuMemAddressFree, 10020)                                                                       \
  X(cuMemMap, 10020)                                                                               \
  X(cuMemUnmap, 10020)                                                                             \
  X(cuMemSetAccess, 10020)                                                                         \
  X(cuMemRetainAllocationHandle, 11000)                                                            \
  X(cuMemGetHandleForAddressRange, 11070)                                                          \
  X(cuStreamCreate, 2000)                                                                          \
  X(cuStreamDestroy, 4000)                                                                         \
  X(cuStreamSynchronize, 2000)                                                                     \
  X(cuStreamQuery, 2000)                                                                           \
  X(cuStreamIsCapturing, 10000)                                                                    \
  X(cuThreadExchangeStreamCaptureMode, 10010)                                                      \
  X(cuStreamBatchMemOp, 11070)                                                                     \
  X(cuStreamWaitEvent, 3020)                                                                       \
  X(cuStreamBeginCapture, 10010)                                                                   \
  X(cuStreamEndCapture, 10000)                                                                     \
  X(cuGraphInstantiateWithFlags, 11040)                                                            \
  X(cuGraphLaunch, 10000)                                                                          \
  X(cuGraphExecDestroy, 10000)                                                                     \
  X(cuGraphDestroy, 10000)                                                                         \
  X(cuEventCreate, 2000)                                                                           \
  X(cuEventDestroy, 4000)                                                                          \
  X(cuEventRecord, 2000)                                                                           \
  X(cuEventSynchronize, 2000)                                                                      \
  X(cuEventQuery, 2000)                                                                            \
  X(cuEventElapsedTime, 12080)

/// A failed driver call: what was called and the driver's name and description of the error.
class Error : public std::runtime_error {
public:
  Error(CUresult result, const std::string &message)
      : std::runtime_error(message), result_(result) {}
  CUresult result() const { return result_; }

private:
  CUresult result_;
};

class Driver {
public:
  /// The process's driver, loaded and initialised (cuInit) on first use.
  static const Driver &get();

  /// Whether the driver loaded, initialised and sees at least one device.
  bool available() const { return reason_.empty(); }
  /// Why not, when it is not available: "dlopen(libcuda.so.1) failed: ...", "cuInit: ...".
  const std::string &unavailableReason() const { return reason_; }

  /// "NAME (description)" for a driver result, e.g. "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
  std::string describe(CUresult result) const;
  /// Throws Error("what: NAME (description)") unless `result` is CUDA_SUCCESS.
  void check(CUresult result, const char *what) const;

#define MK_CUDA_DRIVER_DECLARE(name, version) PFN_##name##_v##version name = nullptr;
  MK_CUDA_DRIVER_FUNCTIONS(MK_CUDA_DRIVER_DECLARE)
#undef MK_CUDA_DRIVER_DECLARE

  Driver(const Driver &) = delete;
  Driver &operator=(const Driver &) = delete;

private:
  Driver();
  ~Driver();
  void *library_ = nullptr;
  std::string reason_;
};

/// A device's primary context (the one the CUDA runtime, and so PyTorch, uses), retained and made
/// current on the constructing thread for the object's life; what was current before is current
/// again afterwards.
class PrimaryContext {
public:
  explicit PrimaryContext(const Driver &driver, int ordinal = 0);
  ~PrimaryContext();
  PrimaryContext(const PrimaryContext &) = delete;
  PrimaryContext &operator=(const PrimaryContext &) = delete;

  CUdevice device() const { return device_; }
  CUcontext context() const { return context_; }

private:
  const Driver &driver_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUcontext previous_ = nullptr;
};

/// Makes `context` current on this thread for the scope's life, whatever the thread had current:
/// entry points of an embedded runtime run on the caller's threads. Where it is current already
/// (the caller's own, as PyTorch's primary context is) the scope pushes nothing: a launch's host
/// time is a few microseconds, of which a push and a pop would take a share.
class ContextScope {
public:
  ContextScope(const Driver &driver, CUcontext context);
  ~ContextScope();
  ContextScope(const ContextScope &) = delete;
  ContextScope &operator=(const ContextScope &) = delete;

private:
  const Driver &driver_;
  bool pushed_ = false;
};

/// Lets this thread make the calls that another thread's graph capture in global mode (PyTorch's
/// default) refuses, such as cuEventQuery, for the scope's life: for threads that look only at
/// work enqueued before any capture (a failed call would also end the other thread's capture).
class RelaxedCaptureScope {
public:
  explicit RelaxedCaptureScope(const Driver &driver);
  ~RelaxedCaptureScope();
  RelaxedCaptureScope(const RelaxedCaptureScope &) = delete;
  RelaxedCaptureScope &operator=(const RelaxedCaptureScope &) = delete;

private:
  const Driver &driver_;
  CUstreamCaptureMode previous_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

/// Events recorded on streams, oldest first, to learn how far the work before them has come
/// without waiting; finished events are reused. Every call, and the destructor, needs the events'
/// context current.
class EventQueue {
public:
  explicit EventQueue(const Driver &driver) : driver_(driver) {}
  ~EventQueue();
  EventQueue(const EventQueue &) = delete;
  EventQueue &operator=(const EventQueue &) = delete;

  /// Appends an event recorded on `stream` now.
  void record(CUstream stream);
  /// Drops the finished events at the front; returns how many. Throws Error if one failed.
  std::size_t retire();
  /// Events not yet seen finished.
  std::size_t size() const { return recorded_.size(); }

private:
  const Driver &driver_;
  std::deque<CUevent> recorded_;
  std::vector<CUevent> spare_;
};

/// Progress of work on streams, read without a driver call: mark() adds, to the stream memory
/// operations a caller is about to enqueue after its work, a store of the next number into pinned
/// host memory (no call of its own); done() reads the last number stored. For a thread that must
/// not enter the driver to learn what finished (the network proxy: a driver call can wait behind
/// another thread's). A failed stream stops counting, so callers bound their waits. The
/// constructor and destructor need the context current.
class StreamCounter {
public:
  explicit StreamCounter(const Driver &driver);
  ~StreamCounter();
  StreamCounter(const StreamCounter &) = delete;
  StreamCounter &operator=(const StreamCounter &) = delete;

  /// Appends the store of the next number to `ops`, which the caller enqueues (batchMemOps)
  /// after the work it marks; returns that number (1, 2, ...).
  std::uint64_t mark(std::vector<CUstreamBatchMemOpParams> &ops);
  /// The last number stored (the work before its mark is complete and visible).
  std::uint64_t done() const { return __atomic_load_n(word_, __ATOMIC_ACQUIRE); }

private:
  const Driver &driver_;
  std::uint64_t *word_ = nullptr;
  CUdeviceptr device_ = 0;
  std::uint64_t marked_ = 0;
};

/// Enqueues `ops` (stream memory operations) on `stream`, in as few cuStreamBatchMemOp calls as
/// its limit of fewer than 256 a call allows.
void batchMemOps(const Driver &driver, CUstream stream, std::vector<CUstreamBatchMemOpParams> &ops);

/// A stream memory operation storing `value` (32 or 64 bits) at `address` once the work before it
/// on the stream is complete and visible (the default flag's system-wide fence).
template <typename T> CUstreamBatchMemOpParams writeValue(CUdeviceptr address, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "32- or 64-bit values");
  CUstreamBatchMemOpParams op{};
  op.writeValue.address = address;
  op.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
  if constexpr (sizeof(T) == 4) {
    op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.value = value;
  } else {
    op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    op.writeValue.value64 = value;
  }
  return op;
}

/// A stream memory operation that holds the stream's later work until the 32-bit word at
/// `address` is at least `value` (compared as unsigned).
inline CUstreamBatchMemOpParams waitValueAtLeast(CUdeviceptr address, std::uint32_t value) {
  CUstreamBatchMemOpParams op{};
  op.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  op.waitValue.address = address;
  op.waitValue.value = value;
  op.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
  return op;
}

/// One entry of a cuMemcpy3DBatchAsync: `rows` rows of `rowBytes` from `src` (rows `srcPitch`
/// apart) to `dst` (rows `dstPitch` apart), any memory of unified addressing, in stream order.
/// One entry per strided block, not per row: the copy engines' cost is per entry.
inline CUDA_MEMCPY3D_BATCH_OP pitchedCopy(CUdeviceptr dst, std::size_t dstPitch, CUdeviceptr src,
                                          std::size_t srcPitch, std::size_t rowBytes,
                                          std::size_t rows) {
  CUDA_MEMCPY3D_BATCH_OP op{};
  op.src.type = op.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
  op.src.op.ptr.ptr = src;
  op.src.op.ptr.rowLength = rows > 1 ? srcPitch : 0; // in bytes: pointer elements are bytes
  op.dst.op.ptr.ptr = dst;
  op.dst.op.ptr.rowLength = rows > 1 ? dstPitch : 0;
  op.extent = {rowBytes, rows, 1};
  op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  return op;
}

} // namespace mkc::cuda

/// Calls `call` (a driver function name and its arguments) through `driver`; throws
/// mkc::cuda::Error naming the call on failure.
#define MK_CU_CHECK(driver, call) (driver).check((driver).call, #call)

#endif // MK_RUNTIME_DRIVER_CUDADRIVER_H
