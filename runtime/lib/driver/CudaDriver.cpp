//===- CudaDriver.cpp - the CUDA driver API, loaded at run time ------------===//

#include "mk/runtime/driver/CudaDriver.h"

#include <dlfcn.h>

#include <algorithm>

#include <type_traits>

namespace mkc::cuda {

namespace {
// cuGetProcAddress as of CUDA 12 (the symbol cuda.h's cuGetProcAddress macro names).
using GetProcAddress = CUresult (*)(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *status);
} // namespace

const Driver &Driver::get() {
  static const Driver driver;
  return driver;
}

Driver::Driver() {
  library_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library_) {
    const char *error = dlerror();
    reason_ = std::string("dlopen(libcuda.so.1) failed: ") + (error ? error : "unknown error");
    return;
  }
  auto getProcAddress = reinterpret_cast<GetProcAddress>(dlsym(library_, "cuGetProcAddress_v2"));
  if (!getProcAddress) {
    reason_ = "libcuda.so.1 has no cuGetProcAddress_v2: the driver predates CUDA 12";
    return;
  }
  const auto resolve = [&](const char *name, int version, void **entry) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    CUresult result = getProcAddress(name, entry, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
    if ((result != CUDA_SUCCESS || status != CU_GET_PROC_ADDRESS_SUCCESS || !*entry) &&
        reason_.empty())
      reason_ = std::string("cuGetProcAddress(") + name + ", " + std::to_string(version) +
                ") failed: CUresult " + std::to_string(static_cast<int>(result)) + ", status " +
                std::to_string(static_cast<int>(status));
  };
  // #name is the unversioned name: # does not expand cuda.h's macros.
#define MK_CUDA_DRIVER_RESOLVE(name, version)                                                      \
  static_assert(std::is_same_v<PFN_##name##_v##version, decltype(&::name)>,                        \
                "the version of " #name " that cuda.h declares");                                  \
  resolve(#name, version, reinterpret_cast<void **>(&name));
  MK_CUDA_DRIVER_FUNCTIONS(MK_CUDA_DRIVER_RESOLVE)
#undef MK_CUDA_DRIVER_RESOLVE
  if (!reason_.empty())
    return;

  if (CUresult result = cuInit(0); result != CUDA_SUCCESS) {
    reason_ = "cuInit: " + describe(result);
    return;
  }
  int devices = 0;
  if (CUresult result = cuDeviceGetCount(&devices); result != CUDA_SUCCESS)
    reason_ = "cuDeviceGetCount: " + describe(result);
  else if (devices == 0)
    reason_ = "no CUDA device";
}

// The library stays loaded: the driver must outlive every static object that may still call it.
Driver::~Driver() = default;

std::string Driver::describe(CUresult result) const {
  const char *name = nullptr, *text = nullptr;
  if (cuGetErrorName && cuGetErrorName(result, &name) != CUDA_SUCCESS)
    name = nullptr;
  if (cuGetErrorString && cuGetErrorString(result, &text) != CUDA_SUCCESS)
    text = nullptr;
  std::string description = name ? name : "CUresult " + std::to_string(static_cast<int>(result));
  if (text)
    description += std::string(" (") + text + ")";
  return description;
}

void Driver::check(CUresult result, const char *what) const {
  if (result != CUDA_SUCCESS)
    throw Error(result, std::string(what) + ": " + describe(result));
}

PrimaryContext::PrimaryContext(const Driver &driver, int ordinal) : driver_(driver) {
  MK_CU_CHECK(driver_, cuDeviceGet(&device_, ordinal));
  MK_CU_CHECK(driver_, cuCtxGetCurrent(&previous_));
  MK_CU_CHECK(driver_, cuDevicePrimaryCtxRetain(&context_, device_));
  if (CUresult result = driver_.cuCtxSetCurrent(context_); result != CUDA_SUCCESS) {
    driver_.cuDevicePrimaryCtxRelease(device_);
    driver_.check(result, "cuCtxSetCurrent(context_)");
  }
}

PrimaryContext::~PrimaryContext() {
  CUcontext current = nullptr;
  if (driver_.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == context_)
    driver_.cuCtxSetCurrent(previous_);
  driver_.cuDevicePrimaryCtxRelease(device_);
}

ContextScope::ContextScope(const Driver &driver, CUcontext context) : driver_(driver) {
  CUcontext current = nullptr;
  MK_CU_CHECK(driver_, cuCtxGetCurrent(&current));
  if (current == context)
    return;
  MK_CU_CHECK(driver_, cuCtxPushCurrent(context));
  pushed_ = true;
}

ContextScope::~ContextScope() {
  CUcontext popped;
  if (pushed_)
    driver_.cuCtxPopCurrent(&popped);
}

RelaxedCaptureScope::RelaxedCaptureScope(const Driver &driver) : driver_(driver) {
  MK_CU_CHECK(driver_, cuThreadExchangeStreamCaptureMode(&previous_));
}

RelaxedCaptureScope::~RelaxedCaptureScope() {
  driver_.cuThreadExchangeStreamCaptureMode(&previous_);
}

StreamCounter::StreamCounter(const Driver &driver) : driver_(driver) {
  void *word = nullptr;
  MK_CU_CHECK(driver_, cuMemHostAlloc(&word, sizeof(std::uint64_t),
                                      CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  word_ = static_cast<std::uint64_t *>(word);
  *word_ = 0;
  MK_CU_CHECK(driver_, cuMemHostGetDevicePointer(&device_, word, 0));
}

StreamCounter::~StreamCounter() { driver_.cuMemFreeHost(word_); }

std::uint64_t StreamCounter::mark(std::vector<CUstreamBatchMemOpParams> &ops) {
  // Fenced: whoever reads the number sees the work before it done.
  ops.push_back(writeValue(device_, ++marked_));
  return marked_;
}

void batchMemOps(const Driver &driver, CUstream stream,
                 std::vector<CUstreamBatchMemOpParams> &ops) {
  constexpr std::size_t kMaxOps = 255;
  for (std::size_t at = 0; at < ops.size(); at += kMaxOps) {
    const auto count = static_cast<unsigned>(std::min(kMaxOps, ops.size() - at));
    MK_CU_CHECK(driver, cuStreamBatchMemOp(stream, count, ops.data() + at, 0));
  }
}

EventQueue::~EventQueue() {
  for (CUevent event : recorded_)
    driver_.cuEventDestroy(event);
  for (CUevent event : spare_)
    driver_.cuEventDestroy(event);
}

void EventQueue::record(CUstream stream) {
  CUevent event = nullptr;
  if (spare_.empty()) {
    MK_CU_CHECK(driver_, cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  } else {
    event = spare_.back();
    spare_.pop_back();
  }
  MK_CU_CHECK(driver_, cuEventRecord(event, stream));
  recorded_.push_back(event);
}

std::size_t EventQueue::retire() {
  std::size_t finished = 0;
  while (!recorded_.empty()) {
    const CUresult result = driver_.cuEventQuery(recorded_.front());
    if (result == CUDA_ERROR_NOT_READY)
      break;
    driver_.check(result, "cuEventQuery");
    spare_.push_back(recorded_.front());
    recorded_.pop_front();
    ++finished;
  }
  return finished;
}

} // namespace mkc::cuda
