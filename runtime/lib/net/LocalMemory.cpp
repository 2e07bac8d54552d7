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
                     std::uint64_t srcPitch, std::uint64_t rowBytes, std::uint32_t rows) override {
    for (std::uint32_t row = 0; row < rows; ++row)
      std::memcpy(reinterpret_cast<void *>(dst + row * dstPitch),
                  reinterpret_cast<const void *>(src + row * srcPitch), rowBytes);
    return ++issued_;
  }
  std::uint64_t store(std::uint64_t address, std::uint32_t value) override {
    __atomic_store_n(reinterpret_cast<std::uint32_t *>(address), value, __ATOMIC_RELEASE);
    return ++issued_;
  }
  void flush() override {}
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
    done_.reset(); // its memory, while the context is current
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
    MK_CU_CHECK(
        cu_, cuMemHostAlloc(&block, bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
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
                     std::uint64_t srcPitch, std::uint64_t rowBytes, std::uint32_t rows) override {
    const std::uint64_t end = dst + (rows ? (rows - 1) * dstPitch + rowBytes : 0);
    for (const auto &[from, to] : destinations_)
      if (dst < to && from < end) {
        flush();
        break;
      }
    destinations_.emplace_back(dst, end);
    copies_.push_back(cuda::pitchedCopy(dst, dstPitch, src, srcPitch, rowBytes, rows));
    return issued_ + 1;
  }

  std::uint64_t store(std::uint64_t address, std::uint32_t value) override {
    // Fenced: the copies before it are visible to whoever sees the value.
    stores_.push_back(cuda::writeValue(address, value));
    return issued_ + 1;
  }

  void flush() override {
    if (copies_.empty() && stores_.empty())
      return;
    if (!copies_.empty())
      MK_CU_CHECK(cu_, cuMemcpy3DBatchAsync(copies_.size(), copies_.data(), 0, stream_));
    issued_ = done_->mark(stores_);
    cuda::batchMemOps(cu_, stream_, stores_);
    copies_.clear();
    destinations_.clear();
    stores_.clear();
  }

  // Flush i is token i and mark i of the stream: no driver call to learn what finished.
  bool complete(std::uint64_t token) override { return token <= done_->done(); }

private:
  const cuda::Driver &cu_;
  CUcontext context_;
  CUstream stream_ = nullptr;
  std::optional<cuda::StreamCounter> done_; // a mark after each flush
  std::uint64_t issued_ = 0;                // flushes
  std::vector<CUDA_MEMCPY3D_BATCH_OP> copies_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> destinations_; // the copies' [begin, end)
  std::vector<CUstreamBatchMemOpParams> stores_;
  std::vector<void *> hostBlocks_;
  std::vector<CUdeviceptr> deviceBlocks_;
};

} // namespace

std::unique_ptr<LocalMemory> makeHostMemory() { return std::make_unique<HostMemory>(); }

std::unique_ptr<LocalMemory> makeCudaMemory(const cuda::Driver &driver, CUcontext context) {
  return std::make_unique<CudaMemory>(driver, context);
}

} // namespace mkc::net
