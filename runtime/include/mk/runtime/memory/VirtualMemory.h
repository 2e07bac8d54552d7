//===- mk/runtime/memory/VirtualMemory.h - GPU memory through the driver VMM API -*- C++ -*-===//
//
// RAII for the three steps that make physical GPU memory addressable (cuMemCreate or an import,
// cuMemAddressReserve, cuMemMap): the symmetric heap maps the blocks of a node's GPUs with them,
// the emulated NIC the heaps of other nodes' GPUs on the same host. Destructors cannot throw; a
// failed release is reported on standard error.
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_MEMORY_VIRTUALMEMORY_H
#define MK_RUNTIME_MEMORY_VIRTUALMEMORY_H

#include "mk/runtime/driver/CudaDriver.h"
#include "mk/runtime/support/UniqueFd.h"

#include <cstddef>

namespace mkc::cuda {

/// Physical memory on a GPU: created here, imported from a peer's descriptor, or the memory
/// mapped at an address of this process. The handle is released on destruction; memory that is
/// mapped stays allocated until it is unmapped.
class PhysicalMemory {
public:
  PhysicalMemory(const Driver &cu, std::size_t bytes, const CUmemAllocationProp &properties);
  PhysicalMemory(const Driver &cu, const UniqueFd &exported);
  /// The allocation mapped at `address` (cuMemRetainAllocationHandle).
  static PhysicalMemory mappedAt(const Driver &cu, CUdeviceptr address);
  ~PhysicalMemory();
  PhysicalMemory(PhysicalMemory &&other) noexcept;
  PhysicalMemory(const PhysicalMemory &) = delete;
  PhysicalMemory &operator=(const PhysicalMemory &) = delete;

  CUmemGenericAllocationHandle handle() const { return handle_; }
  /// A POSIX file descriptor that another process imports (PhysicalMemory(cu, fd)).
  UniqueFd exportFd() const;

private:
  PhysicalMemory(const Driver &cu, CUmemGenericAllocationHandle handle)
      : cu_(cu), handle_(handle) {}

  const Driver &cu_;
  CUmemGenericAllocationHandle handle_ = 0;
};

/// Virtual addresses reserved for mappings, freed on destruction.
class AddressRange {
public:
  AddressRange(const Driver &cu, std::size_t bytes, std::size_t alignment);
  ~AddressRange();
  AddressRange(const AddressRange &) = delete;
  AddressRange &operator=(const AddressRange &) = delete;

  CUdeviceptr base() const { return base_; }

private:
  const Driver &cu_;
  std::size_t bytes_;
  CUdeviceptr base_ = 0;
};

/// Physical memory mapped at an address, unmapped on destruction.
class Mapping {
public:
  Mapping(const Driver &cu, CUdeviceptr address, std::size_t bytes, const PhysicalMemory &memory);
  ~Mapping();
  Mapping(const Mapping &) = delete;
  Mapping &operator=(const Mapping &) = delete;

private:
  const Driver &cu_;
  CUdeviceptr address_;
  std::size_t bytes_;
};

/// Grants `device` read/write access to `bytes` mapped at `address`: for VMM memory, this is
/// what peer access means (no cuCtxEnablePeerAccess).
void grantAccess(const Driver &cu, CUdeviceptr address, std::size_t bytes, CUdevice device,
                 const char *what);

} // namespace mkc::cuda

#endif // MK_RUNTIME_MEMORY_VIRTUALMEMORY_H
