//===- LocalMemory.cpp - the proxy's copies and flag stores, on the host or a CUDA stream ---===//

#include "mk/runtime/net/LocalMemory.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

namespace mkc::net {

namespace {

class HostMemory final : public LocalMemory {
public:
  ~HostMemory() override {
    for (void *block : blocks_)
      std::free(block);
  }

  std::string describe() const override { return "host memory"; }
  bool deviceIsHost() const override { return true; }
  void bindToThisThread() override {}

  SharedMemory allocateShared(std::size_t bytes) override {
    void *block = allocate(bytes);
    return {block, reinterpret_cast<std::uint64_t>(block)};
  }
  std::uint64_t allocateDevice(std::size_t bytes) override {
    return reinterpret_cast<std::uint64_t>(allocate(bytes));
  }

  std::uint64_t copy(std::uint64_t dst, std::uint64_t dstPitch, std::uint64_t src,
                     std::uint64_t srcPitch, std::uint64_t rowBytes,
                     std::uint32_t rows) override {
    for (std::uint32_t row = 0; row < rows; ++row)
      std::memcpy(reinterpret_cast<void *>(dst + row * dstPitch),
                  reinterpret_cast<const void *>(src + row * srcPitch), rowBytes);
    return ++issued_;
  }
  std::uint64_t store(std::uint64_t address, std::uint32_t value) override {
    __atomic_store_n(reinterpret_cast<std::uint32_t *>(address), value, __ATOMIC_RELEASE);
    return ++issued_;
  }
  bool complete(std::uint64_t) override { return true; }

private:
  void *allocate(std::size_t bytes) {
    constexpr std::size_t kPage = 4096;
    void *block = std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage);
    if (!block)
      throw std::bad_alloc();
    std::memset(block, 0, bytes);
    blocks_.push_back(block);
    return block;
  }

  std::vector<void *> blocks_;
  std::uint64_t issued_ = 0;
};

class CudaMemory final : public LocalMemory {
public:
  CudaMemory(const cuda::Driver &driver, CUcontext context)
      : cu_(driver), context_(context), done_(std::in_place, driver) {
    MK_CU_CHECK(cu_, cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING));
  }

  ~CudaMemory() override {
    cuda::ContextScope scope(cu_, context_);
    cu_.cuStreamSynchronize(stream_);
    done_.reset(); // its events, while the context is current
    cu_.cuStreamDestroy(stream_);
    for (void *block : hostBlocks_)
      cu_.cuMemFreeHost(block);
    for (CUdeviceptr block : deviceBlocks_)
      cu_.cuMemFree(block);
  }

  std::string describe() const override { return "CUDA stream"; }
  bool deviceIsHost() const override { return false; }
  void bindToThisThread() override { MK_CU_CHECK(cu_, cuCtxSetCurrent(context_)); }

  SharedMemory allocateShared(std::size_t bytes) override {
    void *block = nullptr;
    MK_CU_CHECK(cu_, cuMemHostAlloc(&block, bytes,
                                    CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    hostBlocks_.push_back(block);
    std::memset(block, 0, bytes);
    CUdeviceptr device = 0;
    MK_CU_CHECK(cu_, cuMemHostGetDevicePointer(&device, block, 0));
    return {block, device};
  }

  std::uint64_t allocateDevice(std::size_t bytes) override {
    CUdeviceptr block = 0;
    MK_CU_CHECK(cu_, cuMemAlloc(&block, bytes));
    deviceBlocks_.push_back(block);
    MK_CU_CHECK(cu_, cuMemsetD8(block, 0, bytes));
    return block;
  }

  std::uint64_t copy(std::uint64_t dst, std::uint64_t dstPitch, std::uint64_t src,
                     std::uint64_t srcPitch, std::uint64_t rowBytes,
                     std::uint32_t rows) override {
    // Unified addressing: the driver tells device from pinned host memory by the address.
    CUDA_MEMCPY2D copy{};
    copy.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
    copy.srcDevice = src;
    copy.srcPitch = rows > 1 ? srcPitch : rowBytes;
    copy.dstMemoryType = CU_MEMORYTYPE_UNIFIED;
    copy.dstDevice = dst;
    copy.dstPitch = rows > 1 ? dstPitch : rowBytes;
    copy.WidthInBytes = rowBytes;
    copy.Height = rows;
    MK_CU_CHECK(cu_, cuMemcpy2DAsync(&copy, stream_));
    return record();
  }

  std::uint64_t store(std::uint64_t address, std::uint32_t value) override {
    // The default flag puts a system-wide fence before the write: the copies before it are
    // visible to whoever sees the value.
    MK_CU_CHECK(cu_, cuStreamWriteValue32(stream_, address, value, CU_STREAM_WRITE_VALUE_DEFAULT));
    return record();
  }

  bool complete(std::uint64_t token) override {
    // Operation i is token i and event i of the stream: the first size() tokens from the end
    // are the ones not yet seen finished.
    done_->retire();
    return token <= issued_ - done_->size();
  }

private:
  std::uint64_t record() {
    done_->record(stream_);
    return ++issued_;
  }

  const cuda::Driver &cu_;
  CUcontext context_;
  CUstream stream_ = nullptr;
  std::optional<cuda::EventQueue> done_; // an event after each operation
  std::uint64_t issued_ = 0;
  std::vector<void *> hostBlocks_;
  std::vector<CUdeviceptr> deviceBlocks_;
};

} // namespace

std::unique_ptr<LocalMemory> makeHostMemory() { return std::make_unique<HostMemory>(); }

std::unique_ptr<LocalMemory> makeCudaMemory(const cuda::Driver &driver, CUcontext context) {
  return std::make_unique<CudaMemory>(driver, context);
}

} // namespace mkc::net
