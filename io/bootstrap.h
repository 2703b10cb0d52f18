// Bootstrap: the rendezvous seam that lets a job set up its communicators without MPI -- a
// key-value store shared by the processes of one job (under torchrun, torch.distributed's
// TCPStore or FileStore), reached through two callbacks. The NCCL backend's unique-id exchange
// and the CPU "store" backend of io/collective.h (CreateStoreCollective) run over it. Under
// mpirun the MPI Collective carries the same exchanges itself (io/collective.h: the NCCL
// backend bootstraps over any Collective), so there is no second MPI transport here.
//
// Exchanges are built on Put/Get by one scheme (GatherAll): every rank but 0 puts its block,
// rank 0 gets them all and puts the outcome -- the blocks in rank order, or the error naming
// the ranks that did not arrive -- and every other rank gets that outcome. A stalled or dead
// rank therefore gives every live rank a kIo naming it within the timeout (rank 0 at the
// deadline, the others a little later), never a hang; a stalled rank 0 is named by the others.
// Keys are "<prefix><step>/<n>/<rank>", n counting this object's exchanges, so every rank must
// make the same exchanges in the same order (as for any collective). Keys are never deleted
// (a store need not support it): each exchange leaves size() + 1 small keys behind.
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

  /// Publishes `bytes` under `key` (this object's prefix added) for every rank to Get. A key is
  /// written once. Errors: kIo (the store failed), with its message.
  virtual Status Put(const std::string& key, std::string_view bytes) = 0;
  /// The bytes under `key`, waiting for them up to `timeout_s` seconds (<= 0: forever). `owner`
  /// is the rank that should put them. Errors: kIo "rank OWNER did not put '<key>' within T s
  /// (timeout): hung, dead or far slower than the others" on a timeout; kIo when the store fails.
  virtual Result<std::string> Get(const std::string& key, int owner, double timeout_s) = 0;
  /// Whether `key` is there now (no waiting). Used only to list every missing rank after a
  /// timeout; a store that cannot tell answers false.
  virtual bool Has(const std::string& key) = 0;
  /// Ends this process with `exit_code` after flushing stdout and stderr; never returns. A
  /// store cannot end the other processes: the launcher (torchrun) does once one exits.
  [[noreturn]] virtual void Abort(int exit_code);

  /// Every rank's `mine` (sizes may differ), in rank order, on every rank: the GatherAll scheme
  /// above. `what` names the step in errors. Errors: kIo naming the ranks that did not arrive
  /// within `timeout_s` (<= 0: wait forever) -- on rank 0 at the deadline, on the others when
  /// rank 0 reports it (or, when rank 0 itself is missing, naming rank 0 a little later) --
  /// or the store's error.
  Result<std::vector<std::string>> GatherAll(std::string_view mine, const char* what,
                                             double timeout_s);
  /// Root's `bytes` on every rank (others pass anything; it is ignored). Errors:
  /// kInvalidArgument (root outside [0, size())), kIo as Get (naming the root).
  Result<std::string> Broadcast(std::string_view bytes, int root, const char* what,
                                double timeout_s);
  /// Returns once every rank has called Barrier (GatherAll of nothing). Errors: as GatherAll.
  Status Barrier(const char* what, double timeout_s);

 private:
  std::string NextKey(const char* what);
  unsigned long long seq_ = 0;
};

/// How a Bootstrap reaches its store (the Python binding backs these with a torch.distributed
/// Store, or any object with set/get).
struct BootstrapCallbacks {
  /// Stores `bytes` under `key`.
  std::function<Status(const std::string& key, std::string_view bytes)> put;
  /// The bytes under `key` once they are there, or nullopt when they did not appear within
  /// `timeout_s` (> 0) seconds; an error for anything else.
  std::function<Result<std::optional<std::string>>(const std::string& key, double timeout_s)> get;
  /// Optional: whether `key` is there now.
  std::function<bool(const std::string& key)> has;
};

/// Rank `rank` of `size` over a store reached through `callbacks`, every key prefixed with
/// `prefix` (so that several bootstraps, or other users, share one store). Errors:
/// kInvalidArgument (size < 1, rank outside [0, size), a missing put or get callback), naming
/// the value.
Result<std::unique_ptr<Bootstrap>> CreateCallbackBootstrap(int rank, int size, std::string prefix,
                                                           BootstrapCallbacks callbacks);

}  // namespace seedstore
