//===- SymmetricMemory.cpp - memory every GPU of a node addresses -----------===//

#include "mk/runtime/memory/SymmetricMemory.h"

#include "mk/runtime/driver/CudaDriver.h"
#include "mk/runtime/memory/NodeSockets.h"
#include "mk/runtime/memory/VirtualMemory.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <vector>

namespace mkc {

using cuda::AddressRange;
using cuda::Mapping;
using cuda::PhysicalMemory;

namespace {

std::size_t roundUp(std::size_t value, std::size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

std::string rankName(int rank) { return "local rank " + std::to_string(rank); }

/// Device `ordinal`, after checking that the calling thread's current context is on it.
CUdevice requireCurrentDevice(const cuda::Driver &cu, int ordinal) {
  CUdevice wanted = 0;
  MK_CU_CHECK(cu, cuDeviceGet(&wanted, ordinal));
  CUdevice current = 0;
  const CUresult result = cu.cuCtxGetDevice(&current);
  if (result != CUDA_SUCCESS || current != wanted)
    throw std::runtime_error(
        "symmetric heap: device " + std::to_string(ordinal) +
        " needs a context of its own current on this thread (e.g. mkc::cuda::PrimaryContext); " +
        (result != CUDA_SUCCESS ? "cuCtxGetDevice: " + cu.describe(result)
                                : "the current one is device " + std::to_string(current)));
  return wanted;
}

/// Device `ordinal`, current and able to share VMM memory through file descriptors.
CUdevice requireHeapDevice(const cuda::Driver &cu, int ordinal) {
  const CUdevice device = requireCurrentDevice(cu, ordinal);
  const auto require = [&](CUdevice_attribute attribute, const char *what) {
    int supported = 0;
    MK_CU_CHECK(cu, cuDeviceGetAttribute(&supported, attribute, device));
    if (!supported)
      throw std::runtime_error("symmetric heap: device " + std::to_string(ordinal) + " lacks " +
                               what);
  };
  require(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
          "virtual memory management (cuMemCreate)");
  require(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
          "POSIX file-descriptor memory handles");
  return device;
}

} // namespace

// Every rank's block, one after another in local-rank order in one range of addresses; each
// block holds the flag words, then the buffers. Members are destroyed bottom-up: the blocks are
// unmapped, then the addresses freed, then the sockets closed.
struct SymmetricHeap::State {
  State(const cuda::Driver &cu, const NodePlace &place, CUdevice device, std::size_t granularity,
        std::size_t capacity, std::size_t flagWords)
      : cu(cu), ordinal(place.device), device(device), granularity(granularity),
        flagWords(flagWords), buffersBegin(roundUp(flagWords * sizeof(mk_u32), kDefaultAlignment)),
        blockBytes(roundUp(buffersBegin + capacity, granularity)), nextBufferOffset(buffersBegin),
        node(place.localRank, place.localWorldSize, place.jobToken, place.timeout),
        addresses(cu, blockBytes * place.localWorldSize, granularity) {}

  CUdeviceptr blockAddress(int rank) const { return addresses.base() + rank * blockBytes; }

  /// Maps `memory`, local rank `rank`'s block, with read/write access for this rank's GPU: for
  /// VMM memory, cuMemSetAccess is what grants peer access (no cuCtxEnablePeerAccess).
  void map(int rank, const PhysicalMemory &memory) {
    const CUdeviceptr address = blockAddress(rank);
    blocks[rank].emplace(cu, address, blockBytes, memory);
    const std::string what = "cuMemSetAccess(" + rankName(rank) +
                             "'s block, read/write for device " + std::to_string(ordinal) + ")";
    cuda::grantAccess(cu, address, blockBytes, device, what.c_str());
  }

  SymmetricBuffer buffer(std::size_t offset, std::size_t bytes) const {
    SymmetricBuffer result;
    result.offset = offset;
    result.bytes = bytes;
    for (int rank = 0; rank < node.localWorldSize(); ++rank)
      result.peer[rank] = reinterpret_cast<void *>(blockAddress(rank) + offset);
    result.local = result.peer[node.localRank()];
    return result;
  }

  const cuda::Driver &cu;
  const int ordinal;
  const CUdevice device;
  const std::size_t granularity; // every block's alignment
  const std::size_t flagWords;
  const std::size_t buffersBegin;
  const std::size_t blockBytes;
  std::size_t nextFlagWord = 0;
  std::size_t nextBufferOffset;
  NodeSockets node;
  AddressRange addresses;
  std::array<std::optional<Mapping>, MK_MAX_GPUS_PER_NODE> blocks; // by local rank
};

SymmetricHeap::SymmetricHeap(const NodePlace &place, std::size_t capacity, std::size_t flagWords) {
  const cuda::Driver &cu = cuda::Driver::get();
  if (!cu.available())
    throw std::runtime_error("symmetric heap: no usable CUDA driver: " + cu.unavailableReason());
  if (place.localWorldSize < 1 || place.localWorldSize > MK_MAX_GPUS_PER_NODE)
    throw std::invalid_argument("symmetric heap: " + std::to_string(place.localWorldSize) +
                                " ranks on a node; kernels address at most " +
                                std::to_string(MK_MAX_GPUS_PER_NODE));
  if (capacity == 0 && flagWords == 0)
    throw std::invalid_argument("symmetric heap: neither buffers nor flags asked for");
  const CUdevice device = requireHeapDevice(cu, place.device);

  CUmemAllocationProp properties{};
  properties.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  properties.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  properties.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
  std::size_t granularity = 0;
  MK_CU_CHECK(cu, cuMemGetAllocationGranularity(&granularity, &properties,
                                                CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));

  // Meet the peers before taking any memory, so that a missing one costs nothing.
  state_ = std::make_unique<State>(cu, place, device, granularity, capacity, flagWords);
  State &state = *state_;
  const std::size_t blockBytes = state.blockBytes;
  const PhysicalMemory own(cu, blockBytes, properties);
  state.map(place.localRank, own);
  const UniqueFd exported = own.exportFd();
  const std::vector<PeerFd> shared = state.node.exchangeFds(exported.get(), blockBytes);
  for (int rank = 0; rank < place.localWorldSize; ++rank) {
    if (rank == place.localRank)
      continue;
    if (shared[rank].bytes != blockBytes)
      throw std::runtime_error("symmetric heap: " + rankName(rank) + "'s block has " +
                               std::to_string(shared[rank].bytes) + " bytes, " +
                               rankName(place.localRank) + "'s " + std::to_string(blockBytes) +
                               ": every rank must ask for the same capacity and flag words");
    state.map(rank, PhysicalMemory(cu, shared[rank].fd));
  }
  if (flagWords)
    MK_CU_CHECK(cu, cuMemsetD32(state.blockAddress(place.localRank), 0, flagWords));
  MK_CU_CHECK(cu, cuCtxSynchronize());
  // No peer may signal into this rank's flags before they are zero.
  state.node.barrier();
}

SymmetricHeap::~SymmetricHeap() {
  try {
    close();
  } catch (const std::exception &error) {
    std::fprintf(stderr, "mkc: symmetric heap teardown: %s\n", error.what());
  }
}

SymmetricHeap::State &SymmetricHeap::state() const {
  if (!state_)
    throw std::logic_error("symmetric heap: used after close()");
  return *state_;
}

void SymmetricHeap::close() {
  if (!state_)
    return;
  // Unmapped when this returns, whether the peers answer or not.
  const std::unique_ptr<State> state = std::move(state_);
  requireCurrentDevice(state->cu, state->ordinal);
  // This GPU's kernels may still use the peers' blocks; the barrier waits for theirs.
  MK_CU_CHECK(state->cu, cuCtxSynchronize());
  state->node.barrier();
}

SymmetricBuffer SymmetricHeap::allocate(std::size_t bytes, std::size_t alignment) {
  State &heap = state();
  if (alignment == 0 || (alignment & (alignment - 1)) || alignment > heap.granularity)
    throw std::invalid_argument("symmetric heap: alignment " + std::to_string(alignment) +
                                " is not a power of two up to " + std::to_string(heap.granularity));
  const std::size_t offset = roundUp(heap.nextBufferOffset, alignment);
  if (offset > heap.blockBytes || bytes > heap.blockBytes - offset)
    throw std::runtime_error("symmetric heap exhausted: " + std::to_string(bytes) +
                             " bytes at alignment " + std::to_string(alignment) + " asked for, " +
                             std::to_string(heap.blockBytes - std::min(offset, heap.blockBytes)) +
                             " of " + std::to_string(capacity()) + " left");
  heap.nextBufferOffset = offset + bytes;
  return heap.buffer(offset, bytes);
}

SymmetricBuffer SymmetricHeap::allocateFlags(std::size_t words) {
  State &heap = state();
  if (words > heap.flagWords - heap.nextFlagWord)
    throw std::runtime_error("symmetric heap: " + std::to_string(words) +
                             " flag words asked for, " +
                             std::to_string(heap.flagWords - heap.nextFlagWord) + " of " +
                             std::to_string(heap.flagWords) + " left");
  const std::size_t offset = heap.nextFlagWord * sizeof(mk_u32);
  heap.nextFlagWord += words;
  return heap.buffer(offset, words * sizeof(mk_u32));
}

std::optional<SymmetricBuffer> SymmetricHeap::find(const void *local, std::size_t bytes) const {
  const State &heap = state();
  const auto address = reinterpret_cast<CUdeviceptr>(local);
  const CUdeviceptr block = heap.blockAddress(heap.node.localRank());
  if (address < block + heap.buffersBegin || address > block + heap.nextBufferOffset ||
      bytes > block + heap.nextBufferOffset - address)
    return std::nullopt;
  return heap.buffer(address - block, bytes);
}

void SymmetricHeap::barrier() { state().node.barrier(); }

std::pair<CUdeviceptr, std::size_t> SymmetricHeap::localBlock() const {
  const State &heap = state();
  return {heap.blockAddress(heap.node.localRank()), heap.blockBytes};
}

std::size_t SymmetricHeap::capacity() const {
  const State &heap = state();
  return heap.blockBytes - heap.buffersBegin;
}

mk_tensor_ref tensorRef(const SymmetricBuffer &buffer) {
  mk_tensor_ref ref{};
  ref.local = buffer.local;
  std::copy(buffer.peer.begin(), buffer.peer.end(), ref.peer);
  return ref;
}

void bindFlags(mk_kernel_args &args, const SymmetricBuffer &flags) {
  args.flags = static_cast<mk_u32 *>(flags.local);
  std::transform(flags.peer.begin(), flags.peer.end(), args.flags_peer,
                 [](void *flag) { return static_cast<mk_u32 *>(flag); });
}

} // namespace mkc
