//===- VirtualMemory.cpp - GPU memory through the driver's VMM API -----------===//

#include "mk/runtime/memory/VirtualMemory.h"

#include <cstdint>
#include <cstdio>

namespace mkc::cuda {

namespace {

/// Destructors cannot throw, but a failed release must not pass unseen.
void reportFailure(const Driver &cu, CUresult result, const char *what) {
  if (result != CUDA_SUCCESS)
    std::fprintf(stderr, "mkc: GPU memory: %s: %s\n", what, cu.describe(result).c_str());
}

} // namespace

PhysicalMemory::PhysicalMemory(const Driver &cu, std::size_t bytes,
                               const CUmemAllocationProp &properties)
    : cu_(cu) {
  MK_CU_CHECK(cu_, cuMemCreate(&handle_, bytes, &properties, 0));
}

PhysicalMemory::PhysicalMemory(const Driver &cu, const UniqueFd &exported) : cu_(cu) {
  // A POSIX descriptor travels in the pointer-sized argument; the importer keeps its own copy.
  void *osHandle = reinterpret_cast<void *>(static_cast<std::uintptr_t>(exported.get()));
  MK_CU_CHECK(cu_, cuMemImportFromShareableHandle(&handle_, osHandle,
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
}

PhysicalMemory PhysicalMemory::mappedAt(const Driver &cu, CUdeviceptr address) {
  CUmemGenericAllocationHandle handle = 0;
  MK_CU_CHECK(cu, cuMemRetainAllocationHandle(&handle, reinterpret_cast<void *>(address)));
  return PhysicalMemory(cu, handle);
}

PhysicalMemory::PhysicalMemory(PhysicalMemory &&other) noexcept
    : cu_(other.cu_), handle_(other.handle_) {
  other.handle_ = 0;
}

PhysicalMemory::~PhysicalMemory() {
  if (handle_)
    reportFailure(cu_, cu_.cuMemRelease(handle_), "cuMemRelease");
}

UniqueFd PhysicalMemory::exportFd() const {
  int fd = -1;
  MK_CU_CHECK(
      cu_, cuMemExportToShareableHandle(&fd, handle_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  return UniqueFd(fd);
}

AddressRange::AddressRange(const Driver &cu, std::size_t bytes, std::size_t alignment)
    : cu_(cu), bytes_(bytes) {
  MK_CU_CHECK(cu_, cuMemAddressReserve(&base_, bytes_, alignment, 0, 0));
}

AddressRange::~AddressRange() {
  reportFailure(cu_, cu_.cuMemAddressFree(base_, bytes_), "cuMemAddressFree");
}

Mapping::Mapping(const Driver &cu, CUdeviceptr address, std::size_t bytes,
                 const PhysicalMemory &memory)
    : cu_(cu), address_(address), bytes_(bytes) {
  MK_CU_CHECK(cu_, cuMemMap(address_, bytes_, 0, memory.handle(), 0));
}

Mapping::~Mapping() { reportFailure(cu_, cu_.cuMemUnmap(address_, bytes_), "cuMemUnmap"); }

void grantAccess(const Driver &cu, CUdeviceptr address, std::size_t bytes, CUdevice device,
                 const char *what) {
  CUmemAccessDesc access{};
  access.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  cu.check(cu.cuMemSetAccess(address, bytes, &access, 1), what);
}

} // namespace mkc::cuda
