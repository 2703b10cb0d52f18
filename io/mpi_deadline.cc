// The MPI deadline machinery: non-blocking operations polled against a deadline, heartbeats,
// and the naming of the stalled or dead rank (io/mpi_deadline.h).
#include "io/mpi_deadline.h"

#if SEEDSTORE_HAVE_MPI
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

namespace seedstore {
namespace {

constexpr int kArriveTag = 7301;
constexpr int kAliveTag = 7302;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string RankList(const std::vector<int>& r) {
  std::string s;
  for (size_t i = 0; i < r.size() && i < 16; ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  if (r.size() > 16) s += ", ... (" + std::to_string(r.size()) + " ranks)";
  return s;
}

std::string Ranks(const std::vector<int>& r) {
  return std::string(r.size() == 1 ? "rank " : "ranks ") + RankList(r);
}

// Broken objects whose requests may still be pending: reachable from this global (never
// destroyed, so not freed at exit either) until the process ends.
struct Retained {
  std::mutex mu;
  std::vector<std::unique_ptr<MpiDeadline>> deadlines;
  std::vector<std::shared_ptr<void>> buffers;
};
Retained& RetainedStore() {
  static Retained* r = new Retained;  // deliberately never freed
  return *r;
}

}  // namespace

std::string MpiError(int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(msg, len);
}

Status EnsureMpiInitialized(bool* owns) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (finalized) return IoError("MPI: already finalized");
  *owns = false;
  if (inited) return Status::Ok();
  int provided = 0;
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return IoError("MPI_Init_thread failed: " + MpiError(rc));
  *owns = true;
  return Status::Ok();
}

Result<std::unique_ptr<MpiDeadline>> MpiDeadline::Create(MPI_Comm comm) {
  auto d = std::unique_ptr<MpiDeadline>(new MpiDeadline);
  SEEDSTORE_MPI_CHECK(MPI_Comm_dup(comm, &d->comm_), "MPI setup");
  MPI_Comm_set_errhandler(d->comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(d->comm_, &d->rank_);
  MPI_Comm_size(d->comm_, &d->size_);
  d->tokens_.assign(d->rank_ == 0 ? d->size_ : 1, 0);
  return d;
}

MpiDeadline::~MpiDeadline() {
  if (broken_) return;  // operations are still pending: freeing the communicator would hang
  if (alive_recv_ != MPI_REQUEST_NULL) {
    MPI_Cancel(&alive_recv_);
    MPI_Wait(&alive_recv_, MPI_STATUS_IGNORE);
  }
  if (alive_send_ != MPI_REQUEST_NULL) MPI_Wait(&alive_send_, MPI_STATUS_IGNORE);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiDeadline::RetainUntilExit(std::unique_ptr<MpiDeadline> d) {
  if (!d || !d->broken_) return;  // nothing pending: freed here
  Retained& r = RetainedStore();
  std::lock_guard<std::mutex> lock(r.mu);
  r.deadlines.push_back(std::move(d));
}

void RetainBuffersUntilExit(std::shared_ptr<void> buffers) {
  if (!buffers) return;
  Retained& r = RetainedStore();
  std::lock_guard<std::mutex> lock(r.mu);
  r.buffers.push_back(std::move(buffers));
}

Status MpiDeadline::Run(const char* what, double timeout_s,
                        const std::function<int(MPI_Request*)>& start) {
  if (broken_)
    return IoError(std::string(what) + ": the communicator is unusable after an earlier failure");
  if (timeout_s <= 0) {
    const int rc = start(nullptr);
    if (rc != MPI_SUCCESS) broken_ = true;
    SEEDSTORE_MPI_CHECK(rc, what);
    return Status::Ok();
  }
  ++seq_;
  // [0] = the operation, then arrivals: rank 0 receives every other rank's, and sends its own
  // to rank 1 (reqs[2] there), so that a hung or dead rank 0 is named too (by rank 1). The
  // buffers are members: a timeout leaves these requests pending.
  std::vector<MPI_Request> reqs(1, MPI_REQUEST_NULL);
  token0_ = static_cast<int>(seq_);
  Status st = [&]() -> Status {
    if (rank_ == 0) {
      for (int r = 1; r < size_; ++r) {
        reqs.push_back(MPI_REQUEST_NULL);
        SEEDSTORE_MPI_CHECK(MPI_Irecv(&tokens_[r], 1, MPI_INT, r, kArriveTag, comm_, &reqs.back()),
                            what);
      }
      if (size_ > 1) {
        reqs.push_back(MPI_REQUEST_NULL);
        SEEDSTORE_MPI_CHECK(MPI_Isend(&token0_, 1, MPI_INT, 1, kArriveTag, comm_, &reqs.back()),
                            what);
      }
    } else {
      tokens_[0] = static_cast<int>(seq_);
      reqs.push_back(MPI_REQUEST_NULL);
      SEEDSTORE_MPI_CHECK(MPI_Isend(&tokens_[0], 1, MPI_INT, 0, kArriveTag, comm_, &reqs.back()),
                          what);
      if (rank_ == 1) {
        reqs.push_back(MPI_REQUEST_NULL);
        SEEDSTORE_MPI_CHECK(MPI_Irecv(&token0_, 1, MPI_INT, 0, kArriveTag, comm_, &reqs.back()),
                            what);
      }
    }
    SEEDSTORE_MPI_CHECK(start(&reqs[0]), what);
    return Poll(what, timeout_s, reqs);
  }();
  if (!st.ok()) broken_ = true;
  return st;
}

Status MpiDeadline::Poll(const char* what, double timeout, std::vector<MPI_Request>& reqs) {
  const double t0 = Now();
  // Rank 0 blames; rank 1 waits a little longer (it names rank 0 when rank 0 is the one
  // missing), the others longer still, so that the rank that names the culprit reports, and
  // ends the job, first.
  const double grace = std::min(2.0, 0.5 * timeout);
  double deadline = t0 + timeout + (rank_ == 0 ? 0.0 : rank_ == 1 ? grace : 2 * grace);
  // Heartbeats while waiting: every rank tells rank 0 (and rank 0 tells rank 1) that it is
  // alive, so that a rank stuck in an earlier step waiting for a stalled one is not blamed,
  // and a rank that arrived and then stalled (SIGSTOP mid-step) is.
  const double beat = std::min(0.1, timeout / 10), silent_after = 0.5 * timeout;
  std::vector<int> done(reqs.size(), 0);
  double last_poll = t0;
  size_t remaining = reqs.size();
  double sleep_s = 0;
  for (;;) {
    for (size_t k = 0; k < reqs.size(); ++k) {
      if (done[k]) continue;
      int flag = 0;
      SEEDSTORE_MPI_CHECK(MPI_Test(&reqs[k], &flag, MPI_STATUS_IGNORE), what);
      if (flag) {
        done[k] = 1;
        --remaining;
      }
    }
    if (remaining == 0) return Status::Ok();
    const double now = Now();
    // This process itself did not run for a while (stopped, descheduled): what it heard is
    // stale, so it listens afresh before it blames anyone.
    if (now - last_poll > std::max(10 * beat, 0.25 * timeout))
      deadline = std::max(deadline, now + silent_after);
    last_poll = now;
    SEEDSTORE_RETURN_IF_ERROR(Heartbeat(now, beat, what));
    if (now > deadline) break;
    // Spin for the first millisecond, then back off up to 2 ms between polls.
    if (now - t0 > 1e-3) {
      sleep_s = std::min(2e-3, sleep_s == 0 ? 5e-5 : sleep_s * 2);
      std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
    }
  }
  return Blame(what, timeout, done);
}

Status MpiDeadline::Blame(const char* what, double timeout, const std::vector<int>& done) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", timeout);
  const double now = Now(), silent_after = 0.5 * timeout;
  const std::string step = std::string(" step '") + what + "'";
  if (rank_ == 0) {
    // Blamed: the ranks silent for the last silent_after seconds (stalled before the step, or
    // in it); a rank that is missing but alive waits for a stalled one. When every missing
    // rank is alive (far slower, say), those.
    std::vector<int> missing, silent, stalled_in_step;
    for (int r = 1; r < size_; ++r) {
      const bool quiet = heard_[r] < now - silent_after;
      if (!done[r]) missing.push_back(r);
      if (quiet) (done[r] ? stalled_in_step : silent).push_back(r);
    }
    std::string m;
    if (!silent.empty())
      m = Ranks(silent) + " did not reach" + step + " within " + secs + " s (--timeout)";
    if (!stalled_in_step.empty())
      m += std::string(m.empty() ? "" : "; ") + Ranks(stalled_in_step) + " reached" + step +
           " and then stopped responding for " + secs + " s (--timeout)";
    if (m.empty() && !missing.empty())
      m = Ranks(missing) + " did not reach" + step + " within " + secs + " s (--timeout)";
    if (!m.empty()) return IoError(m + ": hung, dead or far slower than the others");
  }
  if (rank_ == 1 && (!done[2] || heard_[0] < now - silent_after))
    return IoError(std::string("rank 0 ") +
                   (done[2] ? "reached" + step + " and then stopped responding for "
                            : "did not reach" + step + " within ") +
                   secs +
                   " s (--timeout): hung, dead or far slower than the others (seen by rank 1)");
  return IoError("rank " + std::to_string(rank_) + ":" + step + " did not complete within " + secs +
                 " s (--timeout): another rank is hung or dead" +
                 (rank_ == 0 ? "" : " (rank 0 names it unless it is rank 0)"));
}

// Sends this rank's heartbeat (every `beat` s; ranks >= 1 to rank 0, rank 0 to rank 1) and
// records those received (rank 0: from every rank; rank 1: from rank 0) in heard_.
Status MpiDeadline::Heartbeat(double now, double beat, const char* what) {
  if (size_ < 2) return Status::Ok();
  if (heard_.empty()) heard_.assign(size_, -1e300);
  if (now - last_beat_ >= beat) {
    int flag = 1;
    if (alive_send_ != MPI_REQUEST_NULL)
      SEEDSTORE_MPI_CHECK(MPI_Test(&alive_send_, &flag, MPI_STATUS_IGNORE), what);
    if (flag) {
      SEEDSTORE_MPI_CHECK(
          MPI_Isend(&alive_out_, 1, MPI_INT, rank_ == 0 ? 1 : 0, kAliveTag, comm_, &alive_send_),
          what);
      last_beat_ = now;
    }
  }
  if (rank_ > 1) return Status::Ok();
  for (;;) {
    if (alive_recv_ == MPI_REQUEST_NULL)
      SEEDSTORE_MPI_CHECK(MPI_Irecv(&alive_in_, 1, MPI_INT, rank_ == 0 ? MPI_ANY_SOURCE : 0,
                                    kAliveTag, comm_, &alive_recv_),
                          what);
    int flag = 0;
    MPI_Status st;
    SEEDSTORE_MPI_CHECK(MPI_Test(&alive_recv_, &flag, &st), what);
    if (!flag) return Status::Ok();
    if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < size_) heard_[st.MPI_SOURCE] = now;
  }
}

Result<std::unique_ptr<MpiWorld>> MpiWorld::Create(const char* what) {
  auto w = std::unique_ptr<MpiWorld>(new MpiWorld);
  SEEDSTORE_RETURN_IF_ERROR(EnsureMpiInitialized(&w->owns_init_));
  SEEDSTORE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &w->comm_), what);
  MPI_Comm_set_errhandler(w->comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(w->comm_, &w->rank_);
  MPI_Comm_size(w->comm_, &w->size_);
  SEEDSTORE_ASSIGN_OR_RETURN(w->deadline_, MpiDeadline::Create(w->comm_));
  return w;
}

MpiWorld::~MpiWorld() {
  if (broken()) {
    MpiDeadline::RetainUntilExit(std::move(deadline_));
    return;
  }
  deadline_.reset();
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_init_ && !finalized) MPI_Finalize();
}

}  // namespace seedstore
#endif  // SEEDSTORE_HAVE_MPI
