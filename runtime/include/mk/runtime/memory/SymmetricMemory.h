//===- mk/runtime/memory/SymmetricMemory.h - memory every GPU of a node addresses ---*- C++ -*-===//
//
// A symmetric heap. Each rank of a node allocates one block of its GPU's memory (cuMemCreate),
// all of one size, hands it to the node's other ranks as a file descriptor (NodeSockets) and maps
// theirs next to its own with read/write access for its GPU, so that it loads from and stores into
// every block of the node over NVLink. Buffers are carved out of the blocks in call order: the same
// calls give the same offsets on every rank, and a buffer's copy on local rank g is block g's base
// plus the offset, which is what mk_tensor_ref's peer[g] holds.
//
//   mkc::cuda::PrimaryContext context(cu, place.device);  // the heap works in the current context
//   mkc::SymmetricHeap heap(place, capacity, flagWords);
//   mkc::SymmetricBuffer c = heap.allocate(bytes);        // the same calls on every rank
//   args.tensors[2] = mkc::tensorRef(c);
//   mkc::bindFlags(args, heap.allocateFlags(kernelFlagWords));
//
// Each block starts with the flag words, zeroed once when the heap is created and never again:
// kernels count arrivals against an epoch (mk/abi.h). Every allocation is physical memory of the
// rank's own GPU; nothing here creates multicast objects.
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_MEMORY_SYMMETRICMEMORY_H
#define MK_RUNTIME_MEMORY_SYMMETRICMEMORY_H

#include "mk/abi.h"

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <cuda.h>

namespace mkc {

/// Where this process stands among the ranks of its node.
struct NodePlace {
  int localRank = 0;      // its index among the node's ranks: the g of peer[g]
  int localWorldSize = 1; // the node's ranks, at most MK_MAX_GPUS_PER_NODE
  int device = 0;         // the CUDA device ordinal it uses
  std::string jobToken;   // the same on every rank of the job, and only there
  std::chrono::milliseconds timeout = std::chrono::seconds(60); // for every wait on a peer
};

/// A buffer of the heap, as this rank sees it.
struct SymmetricBuffer {
  std::size_t offset = 0; // from the start of a block: the same on every rank
  std::size_t bytes = 0;
  void *local = nullptr; // this rank's copy
  // Local rank g's copy, mapped in this process; null past the node's ranks.
  std::array<void *, MK_MAX_GPUS_PER_NODE> peer{};
};

class SymmetricHeap {
public:
  static constexpr std::size_t kDefaultAlignment = 256;

  /// Meets the node's other ranks (every one creates its heap with the same arguments but its
  /// own place) and maps every rank's block of at least `capacity` bytes of buffers after
  /// `flagWords` zeroed flags. Throws, naming the rank, if one does not arrive within the timeout.
  /// A context of `place.device` must be current on the calling thread, here and in close().
  /// The heaps of a job are created one after another, in the same order on every rank.
  SymmetricHeap(const NodePlace &place, std::size_t capacity, std::size_t flagWords);
  /// Calls close() unless it was called, reporting a failure on stderr.
  ~SymmetricHeap();
  SymmetricHeap(const SymmetricHeap &) = delete;
  SymmetricHeap &operator=(const SymmetricHeap &) = delete;

  /// The next `bytes` at `alignment` (a power of two, at most the block's own alignment). Every
  /// rank must make the same allocations in the same order; throws when the heap is exhausted.
  SymmetricBuffer allocate(std::size_t bytes, std::size_t alignment = kDefaultAlignment);
  /// The next `words` flags (mk_u32, zero until kernels signal them), for mk_kernel_args::flags.
  SymmetricBuffer allocateFlags(std::size_t words);
  /// The `bytes` at `local` as a buffer of the heap, if they lie inside this rank's buffers:
  /// callers hand the runtime plain pointers into buffers they allocated.
  std::optional<SymmetricBuffer> find(const void *local, std::size_t bytes) const;

  /// Returns once every rank of the node has called barrier() as often as this one. Host-side
  /// only: synchronise the streams whose work the peers must see first.
  void barrier();

  /// Waits for this GPU's work, then for every rank of the node to close its heap, so that no
  /// kernel still uses memory being unmapped; then unmaps every block and frees the addresses.
  /// They are unmapped even if it throws (a peer that went away or did not arrive in time).
  void close();

  /// Bytes of buffers the heap holds (the asked capacity rounded up to the block's granularity).
  std::size_t capacity() const;

  /// This rank's block: its device address and size. Buffer offsets are offsets in it, which is
  /// what the network proxy registers and network commands address (mk/queue.h).
  std::pair<CUdeviceptr, std::size_t> localBlock() const;

private:
  struct State;
  State &state() const;

  std::unique_ptr<State> state_; // null once closed
};

/// The tensor reference a kernel takes for `buffer`.
mk_tensor_ref tensorRef(const SymmetricBuffer &buffer);

/// Points `args.flags` and `args.flags_peer` at `flags` (from SymmetricHeap::allocateFlags).
void bindFlags(mk_kernel_args &args, const SymmetricBuffer &flags);

} // namespace mkc

#endif // MK_RUNTIME_MEMORY_SYMMETRICMEMORY_H
