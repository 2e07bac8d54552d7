//===- mk/runtime/net/LocalMemory.h - how the proxy touches its own rank's memory ---*- C++ -*-===//
//
// The proxy moves bytes between its rank's heap and the network's buffers, and stores flag
// counts, in an order that must hold on the GPU: a flag is stored only after the data it announces
// is in place. On a GPU (makeCudaMemory) that is one CUDA stream, and a token says when an
// operation completed. Operations gather until flush(), which issues them with two driver calls
// (a batch of copies, then a batch of stores ending with a counter the proxy reads): per
// operation, a driver call costs more than a tile takes on the wire. Within a flush, copies run
// in any order, but every store follows every copy; a copy overlapping the destination of one
// already gathered flushes first, so copies to one place keep their order. Without a GPU
// (makeHostMemory: the proxy's tests, where a host thread plays the kernel) the same operations
// happen at once.
//
// Addresses are plain 64-bit addresses of this process: device pointers, or host pointers of
// pinned memory (unified addressing lets one copy take either).
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_NET_LOCALMEMORY_H
#define MK_RUNTIME_NET_LOCALMEMORY_H

#include "mk/runtime/driver/CudaDriver.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mkc::net {

/// Host memory that kernels address too: the proxy uses `host`, kernels `device`.
struct SharedMemory {
  void *host = nullptr;
  std::uint64_t device = 0;
};

class LocalMemory {
public:
  virtual ~LocalMemory() = default;

  virtual std::string describe() const = 0;
  /// Whether "device" memory is host memory (no GPU): then host threads can play the kernels.
  virtual bool deviceIsHost() const = 0;
  /// Prepares the calling thread (the proxy's) for the operations below.
  virtual void bindToThisThread() = 0;

  /// `bytes` of zeroed, pinned host memory, mapped into the device; freed with this object.
  virtual SharedMemory allocateShared(std::size_t bytes) = 0;
  /// `bytes` of zeroed device memory, for what only kernels touch; freed with this object.
  virtual std::uint64_t allocateDevice(std::size_t bytes) = 0;

  /// Copies `rows` rows of `rowBytes` from `src` (rows `srcPitch` apart) to `dst` (rows
  /// `dstPitch` apart), after every operation of earlier flushes. Returns its token.
  virtual std::uint64_t copy(std::uint64_t dst, std::uint64_t dstPitch, std::uint64_t src,
                             std::uint64_t srcPitch, std::uint64_t rowBytes,
                             std::uint32_t rows) = 0;
  /// Stores `value` into the 32-bit word at `address` after every earlier operation, as seen by
  /// kernels polling it. Returns its token.
  virtual std::uint64_t store(std::uint64_t address, std::uint32_t value) = 0;
  /// Issues what was gathered since the last flush.
  virtual void flush() = 0;
  /// Whether the operation with `token` and every earlier one have completed (never before the
  /// flush that issues it).
  virtual bool complete(std::uint64_t token) = 0;
};

/// Operations done at once with memcpy and release stores; the memory is ordinary host memory.
std::unique_ptr<LocalMemory> makeHostMemory();

/// Operations on a stream of its own in `context`, which bindToThisThread() makes current;
/// memory from cuMemHostAlloc (mapped, portable) and cuMemAlloc.
std::unique_ptr<LocalMemory> makeCudaMemory(const cuda::Driver &driver, CUcontext context);

} // namespace mkc::net

#endif // MK_RUNTIME_NET_LOCALMEMORY_H
