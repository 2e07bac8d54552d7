// The symmetric heap on two GPUs of one node. One process per GPU, forked before anything touches
// CUDA (a forked CUDA process cannot use the driver), builds the heap; each writes patterns into
// its own buffers (cuMemsetD32, cuMemcpyHtoD) and, after a barrier, reads every rank's through
// peer[g] (cuMemcpyDtoH) and writes into them; the flag region starts zeroed and what a peer
// writes into it through flags_peer shows in this rank's. Then the heap is closed.
//
// Prints a PASS or FAIL line per check and exits non-zero if any failed. Without a driver, with
// fewer than two GPUs or without peer access between them it prints "SKIP: <why>" and exits 0.

#include "mk/runtime/driver/CudaDriver.h"
#include "mk/runtime/memory/SymmetricMemory.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace mkc;

namespace {

constexpr int kRanks = 2;
constexpr int kSkipped = 77; // the probe's exit status when the machine cannot run the test
constexpr std::size_t kCapacity = 64 << 20;
constexpr std::size_t kFlagWords = 1024;
constexpr std::size_t kFilledWords = (8 << 20) / sizeof(std::uint32_t);
constexpr std::size_t kCopiedWords = (3 << 20) / sizeof(std::uint32_t) + 3; // not a round size
constexpr auto kTestLimit = std::chrono::seconds(240);

std::uint32_t filledWord(int rank) { return 0xa5000000u + rank; }
std::uint32_t copiedWord(int rank, std::size_t index) {
  return static_cast<std::uint32_t>(rank) << 28 | static_cast<std::uint32_t>(index);
}
std::uint32_t markOf(int rank) { return 0x5a000000u + rank; }

CUdeviceptr address(const void *pointer) { return reinterpret_cast<CUdeviceptr>(pointer); }

/// Whether the machine can run the test; run in a child, so that this process forks its ranks
/// before CUDA is initialised. Prints "SKIP: <why>" and returns kSkipped when it cannot.
int probe() {
  const cuda::Driver &cu = cuda::Driver::get();
  if (!cu.available()) {
    std::printf("SKIP: no usable CUDA driver: %s\n", cu.unavailableReason().c_str());
    return kSkipped;
  }
  int devices = 0;
  MK_CU_CHECK(cu, cuDeviceGetCount(&devices));
  if (devices < kRanks) {
    std::printf("SKIP: the symmetric heap test needs %d GPUs, this machine has %d\n", kRanks,
                devices);
    return kSkipped;
  }
  for (int from = 0; from < kRanks; ++from)
    for (int to = 0; to < kRanks; ++to) {
      CUdevice fromDevice = 0, toDevice = 0;
      int canAccess = 1;
      MK_CU_CHECK(cu, cuDeviceGet(&fromDevice, from));
      MK_CU_CHECK(cu, cuDeviceGet(&toDevice, to));
      if (from != to)
        MK_CU_CHECK(cu, cuDeviceCanAccessPeer(&canAccess, fromDevice, toDevice));
      if (!canAccess) {
        std::printf("SKIP: GPU %d cannot access GPU %d's memory (no peer access)\n", from, to);
        return kSkipped;
      }
    }
  return 0;
}

/// The outcome of one rank's checks, each printed as it is made.
class Checks {
public:
  explicit Checks(int rank) : rank_(rank) {}
  void expect(bool passed, const std::string &what) {
    std::printf("%s [rank %d] %s\n", passed ? "PASS" : "FAIL", rank_, what.c_str());
    failures_ += !passed;
  }
  template <typename Error, typename Call> void expectThrows(Call call, const std::string &what) {
    try {
      call();
    } catch (const Error &error) {
      expect(true, what + " (" + error.what() + ")");
      return;
    }
    expect(false, what);
  }
  int failures() const { return failures_; }

private:
  int rank_;
  int failures_ = 0;
};

std::vector<std::uint32_t> readWords(const cuda::Driver &cu, const void *source,
                                     std::size_t words) {
  std::vector<std::uint32_t> host(words);
  MK_CU_CHECK(cu, cuMemcpyDtoH(host.data(), address(source), words * sizeof(std::uint32_t)));
  return host;
}

void runChecks(int rank, const std::string &token, Checks &checks) {
  const cuda::Driver &cu = cuda::Driver::get();
  cuda::PrimaryContext context(cu, rank);
  NodePlace place;
  place.localRank = rank;
  place.localWorldSize = kRanks;
  place.device = rank;
  place.jobToken = token;
  place.timeout = std::chrono::seconds(60);
  SymmetricHeap heap(place, kCapacity, kFlagWords);
  checks.expect(heap.capacity() >= kCapacity, "heap created on device " + std::to_string(rank) +
                                                  ", " + std::to_string(heap.capacity()) +
                                                  " bytes of buffers");

  const SymmetricBuffer filled = heap.allocate(kFilledWords * sizeof(std::uint32_t));
  const SymmetricBuffer copied = heap.allocate(kCopiedWords * sizeof(std::uint32_t), 4096);
  const SymmetricBuffer written = heap.allocate(kRanks * sizeof(std::uint32_t));
  const SymmetricBuffer flags = heap.allocateFlags(kFlagWords);
  // Buffers follow the flag words, in call order: offsets that every rank computes alike.
  const std::size_t copiedEnd = copied.offset + copied.bytes;
  checks.expect(flags.offset == 0 && filled.offset == kFlagWords * sizeof(std::uint32_t) &&
                    copied.offset == filled.offset + filled.bytes &&
                    written.offset == (copiedEnd + 255) / 256 * 256,
                "buffers at the offsets their order and alignments give");
  bool pointersSymmetric = true;
  for (const SymmetricBuffer *buffer : {&filled, &copied, &written, &flags}) {
    const auto stride = address(buffer->peer[1]) - address(buffer->peer[0]);
    pointersSymmetric &=
        buffer->local == buffer->peer[rank] && stride >= kCapacity &&
        address(buffer->peer[0]) - address(filled.peer[0]) == buffer->offset - filled.offset;
    for (int g = kRanks; g < MK_MAX_GPUS_PER_NODE; ++g)
      pointersSymmetric &= buffer->peer[g] == nullptr;
  }
  checks.expect(pointersSymmetric, "peer[rank] is local, peer[g] at g's block + offset, null "
                                   "past the node's ranks");

  const mk_tensor_ref ref = tensorRef(copied);
  mk_kernel_args args{};
  bindFlags(args, flags);
  bool bound = ref.local == copied.local && args.flags == flags.local;
  for (int g = 0; g < MK_MAX_GPUS_PER_NODE; ++g)
    bound &= ref.peer[g] == copied.peer[g] && args.flags_peer[g] == flags.peer[g];
  checks.expect(bound, "tensorRef and bindFlags copy the local and peer pointers");

  const std::vector<std::uint32_t> initialFlags = readWords(cu, flags.local, kFlagWords);
  checks.expect(std::all_of(initialFlags.begin(), initialFlags.end(),
                            [](std::uint32_t word) { return word == 0; }),
                "flag region zeroed at creation");

  MK_CU_CHECK(cu, cuMemsetD32(address(filled.local), filledWord(rank), kFilledWords));
  std::vector<std::uint32_t> pattern(kCopiedWords);
  for (std::size_t i = 0; i < kCopiedWords; ++i)
    pattern[i] = copiedWord(rank, i);
  MK_CU_CHECK(cu, cuMemcpyHtoD(address(copied.local), pattern.data(),
                               kCopiedWords * sizeof(std::uint32_t)));
  MK_CU_CHECK(cu, cuMemsetD32(address(written.local), 0, kRanks));
  MK_CU_CHECK(cu, cuCtxSynchronize());
  heap.barrier();

  for (int g = 0; g < kRanks; ++g) {
    const std::vector<std::uint32_t> filledWords = readWords(cu, filled.peer[g], kFilledWords);
    checks.expect(std::all_of(filledWords.begin(), filledWords.end(),
                              [&](std::uint32_t word) { return word == filledWord(g); }),
                  "reads local rank " + std::to_string(g) + "'s cuMemsetD32 pattern through peer[" +
                      std::to_string(g) + "]");
    const std::vector<std::uint32_t> copiedWords = readWords(cu, copied.peer[g], kCopiedWords);
    bool same = true;
    for (std::size_t i = 0; i < kCopiedWords; ++i)
      same &= copiedWords[i] == copiedWord(g, i);
    checks.expect(same, "reads local rank " + std::to_string(g) +
                            "'s cuMemcpyHtoD pattern through peer[" + std::to_string(g) + "]");
    // Leave this rank's mark in slot `rank` of g's `written` buffer, and a flag in g's flags.
    const std::uint32_t mark = markOf(rank);
    MK_CU_CHECK(cu, cuMemcpyHtoD(address(written.peer[g]) + rank * sizeof(std::uint32_t), &mark,
                                 sizeof mark));
    if (g != rank)
      MK_CU_CHECK(cu,
                  cuMemsetD32(address(flags.peer[g]) + rank * sizeof(std::uint32_t), 1 + rank, 1));
  }
  MK_CU_CHECK(cu, cuCtxSynchronize());
  heap.barrier();

  const std::vector<std::uint32_t> marks = readWords(cu, written.local, kRanks);
  const std::vector<std::uint32_t> signalled = readWords(cu, flags.local, kFlagWords);
  for (int g = 0; g < kRanks; ++g) {
    checks.expect(marks[g] == markOf(g), "sees local rank " + std::to_string(g) +
                                             "'s store through its peer[" + std::to_string(rank) +
                                             "]");
    if (g != rank)
      checks.expect(signalled[g] == 1u + g, "sees local rank " + std::to_string(g) +
                                                "'s flag through its flags_peer[" +
                                                std::to_string(rank) + "]");
  }
  bool othersZero = true;
  for (std::size_t i = 0; i < kFlagWords; ++i)
    othersZero &= signalled[i] == 0 || (i < kRanks && i != static_cast<std::size_t>(rank));
  checks.expect(othersZero, "flags nobody signalled are still zero");

  checks.expectThrows<std::runtime_error>([&] { heap.allocate(heap.capacity()); },
                                          "an allocation past the capacity is refused");
  checks.expectThrows<std::invalid_argument>([&] { heap.allocate(16, 24); },
                                             "an alignment that is not a power of two is refused");
  checks.expectThrows<std::runtime_error>([&] { heap.allocateFlags(1); },
                                          "a flag word past the flag region is refused");

  heap.close();
  checks.expect(true, "closed: synchronised with every rank, then unmapped and released");
  checks.expectThrows<std::logic_error>([&] { heap.barrier(); }, "a closed heap is not used");
}

int runRank(int rank, const std::string &token) {
  Checks checks(rank);
  try {
    runChecks(rank, token, checks);
  } catch (const std::exception &error) {
    checks.expect(false, error.what());
  }
  return checks.failures() ? 1 : 0;
}

/// Runs `body` in a child process whose exit status is what it returns (1 if it throws).
pid_t spawn(int (*body)(int, const std::string &), int rank, const std::string &token) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("fork");
    std::exit(1);
  }
  if (pid == 0) {
    int status = 1;
    try {
      status = body(rank, token);
    } catch (const std::exception &error) {
      std::printf("FAIL %s\n", error.what());
    }
    std::fflush(nullptr);
    ::_exit(status);
  }
  return pid;
}

/// Waits for `children` until `deadline`, then kills those still running; their exit statuses
/// (128 + the signal for one that was killed).
std::vector<int> waitAll(const std::vector<pid_t> &children,
                         std::chrono::steady_clock::time_point deadline) {
  std::vector<int> statuses(children.size(), -1);
  for (std::size_t left = children.size(); left > 0;) {
    for (std::size_t i = 0; i < children.size(); ++i) {
      int status = 0;
      if (statuses[i] != -1 || ::waitpid(children[i], &status, WNOHANG) != children[i])
        continue;
      statuses[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      --left;
    }
    if (left > 0 && std::chrono::steady_clock::now() >= deadline) {
      for (std::size_t i = 0; i < children.size(); ++i)
        if (statuses[i] == -1) {
          std::printf("FAIL rank %zu still running after %lld s: killed\n", i,
                      static_cast<long long>(kTestLimit.count()));
          ::kill(children[i], SIGKILL);
        }
      deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return statuses;
}

} // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const auto deadline = std::chrono::steady_clock::now() + kTestLimit;
  const int probed =
      waitAll({spawn([](int, const std::string &) { return probe(); }, 0, "")}, deadline)[0];
  if (probed == kSkipped)
    return 0;
  if (probed != 0) {
    std::printf("FAIL the probe of the driver and GPUs exited with %d\n", probed);
    return 1;
  }
  const std::string token =
      "symmetric-heap-gpu-test-" + std::to_string(::getpid()) + "-" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::vector<pid_t> ranks;
  for (int rank = 0; rank < kRanks; ++rank)
    ranks.push_back(spawn(runRank, rank, token));
  const std::vector<int> statuses = waitAll(ranks, deadline);
  const bool passed = std::all_of(statuses.begin(), statuses.end(), [](int s) { return s == 0; });
  std::printf("%s symmetric heap on %d GPUs\n", passed ? "PASS" : "FAIL", kRanks);
  return passed ? 0 : 1;
}
