// Bootstrap: the rendezvous seam a job sets up its communicators over -- rank, size, and a few
// small exchanges with deadlines (GatherAll, Broadcast, Barrier). Two transports:
//  - MPI (CreateMpiBootstrap): under mpirun/srun, over MPI_COMM_WORLD with the deadline and
//    blame machinery of the MPI collective (io/mpi_deadline.h);
//  - a key-value store shared by the processes of one job, reached through callbacks
//    (CreateCallbackBootstrap): under torchrun, torch.distributed's TCPStore or FileStore, so
//    that no MPI is needed.
// The "store" Collective of io/collective.h (CreateBootstrapCollective) runs over either, and
// the NCCL backend's unique-id exchange over that Collective.
//
// Faults, the same contract on both transports: every exchange has a deadline (timeout_s; <= 0
// waits forever). A rank that stalls (SIGSTOP, a hang) or dies before or inside an exchange
// gives every live rank a kIo within about the deadline, never a hang. Rank 0 names the ranks
// that did not arrive (rank 1 names a missing rank 0); on the store transport rank 0 relays
// that message to every other rank, on MPI the others say that another rank is hung and that
// rank 0 names it. On MPI a rank that dies ends the whole job (mpirun's own rule, naming it).
// After a kIo the object is unusable (its step counters may differ between ranks).
//
// Every rank must make the same exchanges in the same order, as for any collective.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "store/status.h"

namespace seedstore {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  /// This process's rank in [0, size()), and the number of ranks.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi" or "store".
  virtual const char* transport() const = 0;

  /// Every rank's `mine` (sizes may differ), in rank order, on every rank. `what` names the
  /// step in errors. Errors: kIo as in the header comment (a rank did not arrive within
  /// `timeout_s`, the transport failed, an earlier exchange failed); kInvalidArgument when the
  /// blocks together exceed what the transport can carry (MPI: INT_MAX bytes).
  virtual Result<std::vector<std::string>> GatherAll(std::string_view mine, const char* what,
                                                     double timeout_s) = 0;
  /// Root's `bytes` on every rank (the others pass anything; it is ignored). Errors:
  /// kInvalidArgument (root outside [0, size())), kIo as GatherAll.
  virtual Result<std::string> Broadcast(std::string_view bytes, int root, const char* what,
                                        double timeout_s) = 0;
  /// Returns once every rank has called Barrier. Errors: as GatherAll.
  virtual Status Barrier(const char* what, double timeout_s);
  /// Ends this process with `exit_code` after flushing stdout and stderr; never returns. MPI
  /// ends every rank (MPI_Abort); a store cannot end the other processes: the launcher
  /// (torchrun) does once one exits.
  [[noreturn]] virtual void Abort(int exit_code);
};

/// OK when `root` is a rank of a world of `size`; else kInvalidArgument "WHAT: broadcast root R
/// outside a world of N". Every Broadcast of io/ (bootstraps, collectives, NCCL) checks with it.
Status CheckBroadcastRoot(int root, int size, const char* what);

/// Rank and size over MPI_COMM_WORLD (duplicated). Initializes MPI (MPI_THREAD_FUNNELED) unless
/// the caller already did, and then finalizes it on destruction unless an exchange failed (a
/// broken world cannot finalize). Buffers of a timed-out exchange stay allocated until exit:
/// MPI cannot cancel a started collective, and a late message may still land in them. Errors:
/// kUnsupported (built without MPI), kIo (MPI failed to initialize).
Result<std::unique_ptr<Bootstrap>> CreateMpiBootstrap();

/// How a store bootstrap reaches its key-value store (the Python binding backs these with a
/// torch.distributed Store, or any object with set/get).
struct BootstrapCallbacks {
  /// Stores `bytes` under `key`.
  std::function<Status(const std::string& key, std::string_view bytes)> put;
  /// The bytes under `key` once they are there, or nullopt when they did not appear within
  /// `timeout_s` (> 0) seconds; an error for anything else.
  std::function<Result<std::optional<std::string>>(const std::string& key, double timeout_s)> get;
  /// Optional: whether `key` is there now (used only to list every missing rank after a
  /// timeout; without it only the first missing rank is named).
  std::function<bool(const std::string& key)> has;
};

/// Rank `rank` of `size` over a key-value store reached through `callbacks`, every key
/// prefixed with `prefix` (so that several bootstraps, or other users, share one store).
///
/// The scheme: every rank but 0 puts its block, rank 0 gets them all and puts the outcome --
/// the blocks in rank order, or the error naming the ranks that did not arrive -- and every
/// other rank gets that outcome, waiting a little longer than rank 0 (so that rank 0 names
/// the missing ranks first; a missing rank 0 is named by the others). Keys are
/// "<prefix><step>/<n>/<rank>", n counting this object's exchanges. Keys are never deleted (a
/// store need not support it): each exchange leaves size() + 1 small keys behind. Errors:
/// kInvalidArgument (size < 1, rank outside [0, size), a missing put or get callback), naming
/// the value.
Result<std::unique_ptr<Bootstrap>> CreateCallbackBootstrap(int rank, int size, std::string prefix,
                                                           BootstrapCallbacks callbacks);

}  // namespace seedstore
