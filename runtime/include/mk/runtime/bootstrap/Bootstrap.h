//===- mk/runtime/bootstrap/Bootstrap.h - process groups from existing launchers ---*- C++ -*-===//
//
// Where a rank comes from: detectLaunchEnvironment() reads what torchrun, srun or mpirun set
// (RANK..., SLURM_*, OMPI_COMM_WORLD_*); MKC_RANK, MKC_WORLD_SIZE, MKC_LOCAL_RANK,
// MKC_LOCAL_WORLD_SIZE, MKC_MASTER_ADDR and MKC_MASTER_PORT override field by field. The
// innermost launcher wins: torchrun, then Open MPI, then Slurm (the first two may run inside a
// Slurm allocation). A process that no launcher started is a world of one (as if MKC_RANK=0
// and MKC_WORLD_SIZE=1). The store listens on MKC_MASTER_PORT, else MASTER_PORT + 1 (torchrun's
// agent and torch.distributed hold MASTER_PORT), else a port derived from the job id. A world of
// one needs neither address nor port: its store answers in the process.
//
// How ranks meet: rank 0 runs a TcpStore service thread at the master address; every rank,
// rank 0 included, connects to it (retrying until the timeout, MKC_BOOTSTRAP_TIMEOUT seconds,
// default 60) and says hello: magic, protocol version, rank, world size and a hash of the job
// token (MKC_JOB_TOKEN, else launcher + job id + master address). A wrong version, token, world
// size or a taken rank is answered with the reason and closed; bytes that are not a hello, or no
// hello within 10 s, are dropped without an answer. Operations are collective: each rank sends
// its contribution with its timeout; rank 0 answers all ranks once all have arrived, or fails the
// store for everyone when the earliest deadline passes (naming the ranks that never connected or
// never arrived) or when a rank's connection closes without a goodbye (naming the dead rank).
// A failed store stays failed. A rank waits for the verdict its timeout plus 5 s, so an
// unresponsive rank 0 is an error too, never a hang.
//
//   mkc::ProcessGroup group(mkc::detectLaunchEnvironment());
//   auto blobs = group.store().allGather(std::as_bytes(std::span(mine)));   // blobs[r]: rank r's
//   int gpu = group.localRank();
//
//===----------------------------------------------------------------------===//

#ifndef MK_RUNTIME_BOOTSTRAP_BOOTSTRAP_H
#define MK_RUNTIME_BOOTSTRAP_BOOTSTRAP_H

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace mkc {

/// A launch that cannot work (a missing or inconsistent variable) or a rendezvous that failed.
class BootstrapError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// Environment variables by name.
using Environment = std::map<std::string, std::string, std::less<>>;

/// This process's environment.
Environment processEnvironment();

enum class Launcher { Explicit, Torchrun, Slurm, OpenMpi, Standalone };

/// "MKC_* variables", "torchrun", "srun", "mpirun (Open MPI)", "no launcher".
std::string_view launcherName(Launcher launcher);

/// "rank 3", "ranks 0-2, 5" for ascending ranks: how errors name them.
std::string formatRanks(std::span<const int> ranks);

using Timeout = std::chrono::milliseconds;

/// Where and how the ranks of a job meet.
struct Rendezvous {
  std::string address; ///< the master: rank 0 listens there, the others connect to it
  std::uint16_t port = 0;
  std::string jobToken; ///< a connection presenting another job's token is rejected
  Timeout timeout = std::chrono::seconds(60); ///< for connecting, and each operation's default
};

/// A value read from the environment, with the variable it came from for error messages.
struct EnvironmentValue {
  int value = 0;
  std::string variable;
};

/// What the launcher says about this process.
struct LaunchEnvironment {
  Launcher launcher = Launcher::Explicit;
  int rank = 0;
  int worldSize = 1;
  /// What the launcher says about this rank's node, checked against the ranks found there.
  std::optional<EnvironmentValue> localRank;
  std::optional<EnvironmentValue> localWorldSize;
  std::optional<EnvironmentValue> nodeCount; ///< srun only
  /// MKC_GPUS_PER_NODE: nodes are consecutive groups of this many ranks (to emulate several
  /// nodes on one host). MKC_NODE_ID: this rank's node index. Either replaces host discovery.
  std::optional<int> gpusPerNode;
  std::optional<int> nodeId;
  std::string jobId; ///< the launcher's job or run id, empty if it has none
  Rendezvous rendezvous;
};

/// Reads the launch from `environment`; throws BootstrapError naming the variable that is missing
/// or inconsistent (e.g. "RANK=4 is not less than WORLD_SIZE=4").
LaunchEnvironment detectLaunchEnvironment(const Environment &environment);
/// The same, from this process's environment.
LaunchEnvironment detectLaunchEnvironment();

namespace bootstrap {
class StoreServer; // rank 0's service (lib/bootstrap/StoreServer.cpp)
class StoreClient; // a rank's connection to it (lib/bootstrap/TcpStore.cpp)
} // namespace bootstrap

/// The rendezvous of `worldSize` ranks, rank 0 serving it (see the top of this file). Operations
/// are collective: every rank calls the same ones in the same order. Not thread-safe.
class TcpStore {
public:
  /// Rank 0 starts listening; every rank then connects and is admitted, or throws
  /// BootstrapError (rank 0 unreachable within the timeout, or the connection rejected). A world
  /// of one does neither.
  TcpStore(int rank, int worldSize, const Rendezvous &rendezvous);
  /// Says goodbye (so that others do not take this rank for dead); rank 0 then delivers what it
  /// still owes the others, within the timeout, and stops serving. In a process forked from the
  /// rank, it lets go of the connection and the service, which are the rank's, without a word.
  ~TcpStore();
  TcpStore(const TcpStore &) = delete;
  TcpStore &operator=(const TcpStore &) = delete;

  /// Every rank's `blob`, indexed by rank. Throws BootstrapError naming the ranks that did not
  /// arrive within `timeout` or died; after an error, every operation throws.
  std::vector<std::vector<std::byte>> allGather(std::span<const std::byte> blob);
  std::vector<std::vector<std::byte>> allGather(std::span<const std::byte> blob, Timeout timeout);

  /// Returns once every rank has called barrier() as often as this one; throws like allGather.
  void barrier();
  void barrier(Timeout timeout);

  int rank() const { return rank_; }
  int worldSize() const { return worldSize_; }

private:
  int rank_;
  int worldSize_;
  Timeout timeout_;
  pid_t owner_; // the process of the rank
  // Rank 0 only; declared first so that it outlives the client.
  std::unique_ptr<bootstrap::StoreServer> server_;
  std::unique_ptr<bootstrap::StoreClient> client_;
};

/// The ranks of a job and how they share nodes: joins the store, then every rank shares its host
/// identity (hostname and boot id), or its MKC_NODE_ID / MKC_GPUS_PER_NODE, and groups the ranks
/// into nodes, numbered in the order of their lowest rank. Where the launcher says what a node is
/// (LOCAL_RANK, LOCAL_WORLD_SIZE, SLURM_STEP_NUM_NODES), every rank throws the same error if the
/// discovered nodes disagree, unless MKC_NODE_ID or MKC_GPUS_PER_NODE say what a node is.
class ProcessGroup {
public:
  explicit ProcessGroup(const LaunchEnvironment &launch);

  int rank() const { return launch_.rank; }
  int worldSize() const { return launch_.worldSize; }
  int nodeIndex() const { return nodeIndex_; }
  int nodeCount() const { return nodeCount_; }
  int localRank() const { return localRank_; }
  int localWorldSize() const { return static_cast<int>(nodeRanks_.size()); }
  /// The ranks of this rank's node, ascending; localRank() indexes it.
  const std::vector<int> &nodeRanks() const { return nodeRanks_; }

  const LaunchEnvironment &launch() const { return launch_; }
  TcpStore &store() { return store_; }

private:
  LaunchEnvironment launch_;
  TcpStore store_;
  int nodeIndex_ = 0;
  int nodeCount_ = 0;
  int localRank_ = 0;
  std::vector<int> nodeRanks_;
};

} // namespace mkc

#endif // MK_RUNTIME_BOOTSTRAP_BOOTSTRAP_H
