//===- CommandQueue.cpp - the ring kernels write commands into -------------===//

#include "mk/runtime/net/CommandQueue.h"

#include "mk/runtime/net/Transport.h"

#include <fmt/format.h>

#include <cstring>
#include <thread>

namespace mkc::net {

namespace {

/// Word 0 of a command, which publishes it (mk/queue.h): ticket, op and view, little-endian.
std::uint64_t headerWord(std::uint64_t ticket, const mk_command &command) {
  return static_cast<std::uint32_t>(ticket + 1) | std::uint64_t(command.op) << 32 |
         std::uint64_t(command.view) << 48;
}

/// Where the tail and abort words live, side by side in one shared block.
struct ControlWords {
  mk_u64 tail;
  mk_u32 abort;
};

} // namespace

CommandQueue::CommandQueue(LocalMemory &memory, std::uint32_t capacity, std::size_t stagingBytes,
                           std::uint64_t heapBase) {
  if (capacity == 0 || (capacity & (capacity - 1)))
    throw NetworkError(fmt::format("command queue: capacity {} is not a power of two", capacity));
  SharedMemory slots = memory.allocateShared(std::size_t(capacity) * sizeof(mk_command));
  SharedMemory control = memory.allocateShared(sizeof(ControlWords));
  SharedMemory staging = memory.allocateShared(std::max<std::size_t>(stagingBytes, 1));
  std::uint64_t head = memory.allocateDevice(MK_QUEUE_HEAD_WORDS * sizeof(mk_u64));

  auto fill = [&](mk_command_queue &view, auto address) {
    view.slots = reinterpret_cast<mk_command *>(address(slots));
    view.tail = &reinterpret_cast<ControlWords *>(address(control))->tail;
    view.abort = &reinterpret_cast<ControlWords *>(address(control))->abort;
    view.staging = reinterpret_cast<unsigned char *>(address(staging));
    view.staging_bytes = stagingBytes;
    view.heap_base = heapBase;
    view.capacity = capacity;
    view.version = MK_QUEUE_VERSION;
  };
  fill(device_, [](const SharedMemory &m) { return m.device; });
  fill(host_, [](const SharedMemory &m) { return reinterpret_cast<std::uint64_t>(m.host); });
  device_.head = reinterpret_cast<mk_u64 *>(head);
  // A GPU's head is the kernels' alone; without a GPU, host producers take tickets from it.
  host_.head = memory.deviceIsHost() ? device_.head : nullptr;
}

std::optional<mk_command> CommandQueue::next() const {
  const mk_command *slot = &host_.slots[taken_ & (host_.capacity - 1)];
  const std::uint64_t header =
      __atomic_load_n(reinterpret_cast<const std::uint64_t *>(slot), __ATOMIC_ACQUIRE);
  if (static_cast<std::uint32_t>(header) != static_cast<std::uint32_t>(taken_ + 1))
    return std::nullopt;
  mk_command command;
  std::memcpy(&command, slot, sizeof command);
  std::memcpy(&command, &header, sizeof header); // the word read with acquire
  return command;
}

std::uint64_t CommandQueue::take() {
  holdsFrom_.push_back(1);
  return taken_++;
}

void CommandQueue::hold(std::uint64_t ticket) { ++holdsFrom_.at(ticket - tail_); }

void CommandQueue::release(std::uint64_t ticket) {
  if (--holdsFrom_.at(ticket - tail_) || ticket != tail_)
    return;
  while (!holdsFrom_.empty() && !holdsFrom_.front()) {
    holdsFrom_.pop_front();
    ++tail_;
  }
  __atomic_store_n(const_cast<mk_u64 *>(host_.tail), tail_, __ATOMIC_RELEASE);
}

void CommandQueue::abort(std::uint32_t reason) {
  std::uint32_t running = MK_QUEUE_RUNNING;
  __atomic_compare_exchange_n(const_cast<mk_u32 *>(host_.abort), &running, reason, false,
                              __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

std::uint32_t CommandQueue::abortReason() const {
  return __atomic_load_n(host_.abort, __ATOMIC_ACQUIRE);
}

PushResult pushCommand(const mk_command_queue &queue, const mk_command &command,
                       std::chrono::milliseconds timeout) {
  const std::uint64_t ticket =
      __atomic_fetch_add(&queue.head[MK_QUEUE_NEXT_TICKET], 1, __ATOMIC_ACQ_REL);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Back-pressure: the slot is free once the proxy consumed the command a lap before.
  while (ticket - __atomic_load_n(queue.tail, __ATOMIC_ACQUIRE) >= queue.capacity) {
    if (__atomic_load_n(queue.abort, __ATOMIC_ACQUIRE) != MK_QUEUE_RUNNING)
      return PushResult::Aborted;
    if (std::chrono::steady_clock::now() > deadline)
      return PushResult::TimedOut;
    std::this_thread::yield();
  }
  mk_command *slot = &queue.slots[ticket & (queue.capacity - 1)];
  constexpr std::size_t kHeader = sizeof(std::uint64_t);
  std::memcpy(reinterpret_cast<char *>(slot) + kHeader,
              reinterpret_cast<const char *>(&command) + kHeader, sizeof command - kHeader);
  __atomic_store_n(reinterpret_cast<std::uint64_t *>(slot), headerWord(ticket, command),
                   __ATOMIC_RELEASE);
  return PushResult::Pushed;
}

} // namespace mkc::net
