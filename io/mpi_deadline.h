// Internal to io/: the MPI deadline machinery (one implementation, used by every MPI-backed
// exchange). An operation is started non-blocking and polled against a deadline, with the
// arrival messages and heartbeats that let rank 0 (and rank 1, for rank 0) name a rank that
// stalled or died; see io/collective.h's "Fault handling" for the protocol and its timings.
//
// Buffer lifetime. After a timeout the started MPI requests stay pending (MPI cannot cancel a
// started collective), and a late message can still land in their buffers. Every buffer this
// unit posts (arrival tokens, heartbeats) is a member, never a stack local; an owner that is
// broken hands its MpiDeadline to RetainUntilExit, and the buffers of its own timed-out
// operations to RetainBuffersUntilExit, which keep them reachable until the process exits.
// That memory is deliberately never freed, and stays reachable from a global, so
// LeakSanitizer does not report it.
#pragma once
#if SEEDSTORE_HAVE_MPI
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "store/status.h"

namespace seedstore {

/// MPI's own message for error code `rc`.
std::string MpiError(int rc);

/// One macro per foreign API (house style H3): file:line plus MPI's own message.
#define SEEDSTORE_MPI_CHECK(call, what)                                                          \
  do {                                                                                           \
    const int _rc = (call);                                                                      \
    if (_rc != MPI_SUCCESS)                                                                      \
      return ::seedstore::IoError(std::string(what) + ": " #call " failed at " __FILE__ ":" +    \
                                  std::to_string(__LINE__) + ": " + ::seedstore::MpiError(_rc)); \
  } while (0)

/// Initializes MPI (MPI_THREAD_FUNNELED) unless it already is; *owns says whether this call
/// did. Errors: kIo (already finalized; MPI_Init_thread failed).
Status EnsureMpiInitialized(bool* owns);

/// Keeps `buffers` -- the staging memory of an operation whose Run failed, whose request may
/// still be pending -- reachable until exit.
void RetainBuffersUntilExit(std::shared_ptr<void> buffers);

/// The deadline, heartbeat and blame state of one communicator.
class MpiDeadline {
 public:
  /// Duplicates `comm` for the arrival and heartbeat messages (errors returned, not fatal).
  static Result<std::unique_ptr<MpiDeadline>> Create(MPI_Comm comm);
  ~MpiDeadline();  // frees the duplicate unless broken (then the object is retained instead)

  /// Runs one operation: start(&request) starts it non-blocking; it is then polled until it
  /// completes, or until timeout_s (plus the rank's grace) passes, when the result is kIo
  /// naming the stalled or dead rank (rank 0; rank 1 for rank 0; the others say another rank
  /// is hung) and this object is broken(). With timeout_s <= 0, start(nullptr) runs blocking.
  Status Run(const char* what, double timeout_s, const std::function<int(MPI_Request*)>& start);

  /// Whether a Run timed out or failed: requests may still be pending on buffers here.
  bool broken() const { return broken_; }

  /// Keeps `d` reachable until exit when it is broken; otherwise frees it now.
  static void RetainUntilExit(std::unique_ptr<MpiDeadline> d);

 private:
  MpiDeadline() = default;
  Status Poll(const char* what, double timeout_s, std::vector<MPI_Request>& reqs);
  Status Blame(const char* what, double timeout_s, const std::vector<int>& done);
  Status Heartbeat(double now, double beat, const char* what);

  bool broken_ = false;
  int rank_ = 0, size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
  uint64_t seq_ = 0;
  std::vector<int> tokens_;    // rank 0: every rank's arrival; others: [0] their own
  int token0_ = 0;             // rank 0's arrival, sent by rank 0 and received by rank 1
  std::vector<double> heard_;  // per rank: when its last heartbeat arrived here
  double last_beat_ = -1e300;
  int alive_out_ = 0, alive_in_ = 0;
  MPI_Request alive_send_ = MPI_REQUEST_NULL, alive_recv_ = MPI_REQUEST_NULL;
};

/// MPI_COMM_WORLD duplicated, with its deadline: what every MPI-backed object holds. Create
/// initializes MPI unless the caller already did. The destructor frees the duplicate, and
/// finalizes MPI when Create initialized it -- unless the deadline is broken (requests still
/// pending: freeing or finalizing would hang); then the deadline is retained until exit
/// (RetainUntilExit) and MPI is left as it is.
class MpiWorld {
 public:
  /// Errors: kIo (MPI failed to initialize; duplicating the communicator failed), naming `what`.
  static Result<std::unique_ptr<MpiWorld>> Create(const char* what);
  ~MpiWorld();
  MPI_Comm comm() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  MpiDeadline& deadline() { return *deadline_; }
  bool broken() const { return deadline_ && deadline_->broken(); }

 private:
  MpiWorld() = default;
  bool owns_init_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::unique_ptr<MpiDeadline> deadline_;
};

}  // namespace seedstore
#endif  // SEEDSTORE_HAVE_MPI
