// The MPI backend of io/collective.h: non-blocking collectives polled against a deadline.
#include "io/collective.h"
#include "io/gpu_select.h"

#if SEEDSTORE_HAVE_MPI
// The C API only (OpenMPI and MPICH otherwise pull in the deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace seedstore {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string MpiError(int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(msg, len);
}

// One macro per foreign API (house style H3): file:line plus MPI's own message.
#define SEEDSTORE_MPI_CHECK(call, what)                                                     \
  do {                                                                                      \
    const int _rc = (call);                                                                 \
    if (_rc != MPI_SUCCESS)                                                                 \
      return IoError(std::string(what) + ": " #call " failed at " __FILE__ ":" +            \
                     std::to_string(__LINE__) + ": " + MpiError(_rc));                      \
  } while (0)

constexpr int kArriveTag = 7301;
constexpr int kAliveTag = 7302;

std::string RankList(const std::vector<int>& r) {
  std::string s;
  for (size_t i = 0; i < r.size() && i < 16; ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  if (r.size() > 16) s += ", ... (" + std::to_string(r.size()) + " ranks)";
  return s;
}

class MpiCollective final : public Collective {
 public:
  static Result<std::unique_ptr<Collective>> Create(CollectiveOptions o) {
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized) return IoError("MPI: already finalized");
    bool owns = false;
    if (!inited) {
      int provided = 0;
      const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      if (rc != MPI_SUCCESS) return IoError("MPI_Init_thread failed: " + MpiError(rc));
      owns = true;
    }
    auto c = std::unique_ptr<MpiCollective>(new MpiCollective(o, owns));
    SEEDSTORE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->comm_), "MPI setup");
    SEEDSTORE_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c->arrive_comm_), "MPI setup");
    MPI_Comm_set_errhandler(c->comm_, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(c->arrive_comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm_, &c->rank_);
    MPI_Comm_size(c->comm_, &c->size_);
    // The node-local rank, for the choice of GPU (io/gpu_select.h): the ranks that share
    // memory with this one are the ranks of its node.
    MPI_Comm node = MPI_COMM_NULL;
    SEEDSTORE_MPI_CHECK(MPI_Comm_split_type(c->comm_, MPI_COMM_TYPE_SHARED, c->rank_,
                                            MPI_INFO_NULL, &node),
                        "MPI setup");
    NodeLocalRank local;
    MPI_Comm_rank(node, &local.rank);
    MPI_Comm_size(node, &local.size);
    local.source = "MPI_Comm_split_type";
    MPI_Comm_free(&node);
    SetNodeLocalRank(local);
    return std::unique_ptr<Collective>(std::move(c));
  }

  ~MpiCollective() override {
    if (broken_) return;  // operations are still pending: finalizing would hang
    if (alive_recv_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&alive_recv_);
      MPI_Wait(&alive_recv_, MPI_STATUS_IGNORE);
    }
    if (alive_send_ != MPI_REQUEST_NULL) MPI_Wait(&alive_send_, MPI_STATUS_IGNORE);
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    if (arrive_comm_ != MPI_COMM_NULL) MPI_Comm_free(&arrive_comm_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_init_ && !finalized) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  bool broken() const override { return broken_; }

  Status AllGather(const void* send, size_t bytes, void* recv, const char* what) override {
    if (bytes > static_cast<size_t>(INT_MAX))
      return InvalidArgument(std::string(what) + ": all-gather of " + std::to_string(bytes) +
                             " bytes per rank exceeds INT_MAX");
    const int n = static_cast<int>(bytes);
    return Run(what, [&](MPI_Request* req) {
      return req ? MPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_, req)
                 : MPI_Allgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm_);
    });
  }

  Status AllReduceSum(uint64_t* data, size_t n, const char* what) override {
    if (n > static_cast<size_t>(INT_MAX))
      return InvalidArgument(std::string(what) + ": all-reduce of " + std::to_string(n) +
                             " values exceeds INT_MAX");
    const int k = static_cast<int>(n);
    // Unsigned addition wraps: sums are mod 2^64, as fingerprints need.
    return Run(what, [&](MPI_Request* req) {
      return req ? MPI_Iallreduce(MPI_IN_PLACE, data, k, MPI_UINT64_T, MPI_SUM, comm_, req)
                 : MPI_Allreduce(MPI_IN_PLACE, data, k, MPI_UINT64_T, MPI_SUM, comm_);
    });
  }

  Status Barrier(const char* what) override {
    return Run(what, [&](MPI_Request* req) {
      return req ? MPI_Ibarrier(comm_, req) : MPI_Barrier(comm_);
    });
  }

  Status Broadcast(void* data, size_t bytes, int root, const char* what) override {
    if (root < 0 || root >= size_)
      return InvalidArgument(std::string(what) + ": broadcast root " + std::to_string(root) +
                             " outside a world of " + std::to_string(size_));
    if (bytes > static_cast<size_t>(INT_MAX))
      return InvalidArgument(std::string(what) + ": broadcast of " + std::to_string(bytes) +
                             " bytes exceeds INT_MAX");
    const int n = static_cast<int>(bytes);
    return Run(what, [&](MPI_Request* req) {
      return req ? MPI_Ibcast(data, n, MPI_BYTE, root, comm_, req)
                 : MPI_Bcast(data, n, MPI_BYTE, root, comm_);
    });
  }

  [[noreturn]] void Abort(int exit_code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // not reached
  }

 private:
  MpiCollective(CollectiveOptions o, bool owns) : owns_init_(owns) { options_ = o; }

  // Runs one collective: blocking when there is no deadline, else started non-blocking and
  // polled, with the arrival messages that let rank 0 name missing ranks.
  template <class Start>
  Status Run(const char* what, Start start) {
    if (broken_) return IoError(std::string(what) + ": the communicator is unusable after an "
                                "earlier failure");
    const double t0 = Now();
    Status st = options_.timeout_s > 0 ? RunWithDeadline(what, start) : [&]() -> Status {
      SEEDSTORE_MPI_CHECK(start(nullptr), what);
      return Status::Ok();
    }();
    comm_s_ += Now() - t0;
    return st;
  }

  template <class Start>
  Status RunWithDeadline(const char* what, Start start) {
    const double t0 = Now();
    const double timeout = options_.timeout_s;
    // Rank 0 blames; rank 1 waits a little longer (it names rank 0 when rank 0 is the one
    // missing), the others longer still, so that the rank that names the culprit reports, and
    // ends the job, first.
    const double grace = std::min(2.0, 0.5 * timeout);
    double deadline = t0 + timeout + (rank_ == 0 ? 0.0 : rank_ == 1 ? grace : 2 * grace);
    // Heartbeats while waiting: every rank tells rank 0 (and rank 0 tells rank 1) that it is
    // alive, so that a rank stuck in an earlier step waiting for a stalled one is not blamed,
    // and a rank that arrived and then stalled (SIGSTOP mid-step) is.
    const double beat = std::min(0.1, timeout / 10), silent_after = 0.5 * timeout;
    ++seq_;
    // [0] = the collective, then arrivals: rank 0 receives every other rank's, and sends its
    // own to rank 1, so that a hung or dead rank 0 is named too (by rank 1).
    std::vector<MPI_Request> reqs;
    std::vector<int> tokens(rank_ == 0 ? size_ : 1, 0);
    reqs.push_back(MPI_REQUEST_NULL);
    int token0 = static_cast<int>(seq_);
    if (rank_ == 0) {
      for (int r = 1; r < size_; ++r) {
        reqs.push_back(MPI_REQUEST_NULL);
        SEEDSTORE_MPI_CHECK(MPI_Irecv(&tokens[r], 1, MPI_INT, r, kArriveTag, arrive_comm_,
                                      &reqs.back()), what);
      }
      if (size_ > 1) {
        reqs.push_back(MPI_REQUEST_NULL);
        SEEDSTORE_MPI_CHECK(MPI_Isend(&token0, 1, MPI_INT, 1, kArriveTag, arrive_comm_,
                                      &reqs.back()), what);
      }
    } else {
      tokens[0] = static_cast<int>(seq_);
      reqs.push_back(MPI_REQUEST_NULL);
      SEEDSTORE_MPI_CHECK(MPI_Isend(&tokens[0], 1, MPI_INT, 0, kArriveTag, arrive_comm_,
                                    &reqs.back()), what);
      if (rank_ == 1) {  // reqs[2]: rank 0's arrival
        reqs.push_back(MPI_REQUEST_NULL);
        SEEDSTORE_MPI_CHECK(MPI_Irecv(&token0, 1, MPI_INT, 0, kArriveTag, arrive_comm_,
                                      &reqs.back()), what);
      }
    }
    SEEDSTORE_MPI_CHECK(start(&reqs[0]), what);
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
      if (now - last_poll > std::max(10 * beat, 0.25 * timeout)) deadline = std::max(deadline, now + silent_after);
      last_poll = now;
      SEEDSTORE_RETURN_IF_ERROR(Heartbeat(now, beat, what));
      if (now > deadline) break;
      // Spin for the first millisecond, then back off up to 2 ms between polls.
      if (now - t0 > 1e-3) {
        sleep_s = std::min(2e-3, sleep_s == 0 ? 5e-5 : sleep_s * 2);
        std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
      }
    }
    broken_ = true;
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", timeout);
    const double now = Now();
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
      if (!silent.empty() || !stalled_in_step.empty()) {
        std::string m;
        if (!silent.empty())
          m = std::string(silent.size() == 1 ? "rank " : "ranks ") + RankList(silent) + " did not reach step '" +
              what + "' within " + secs + " s (--timeout)";
        if (!stalled_in_step.empty())
          m += std::string(m.empty() ? "" : "; ") + (stalled_in_step.size() == 1 ? "rank " : "ranks ") +
               RankList(stalled_in_step) + " reached step '" + what + "' and then stopped responding for " + secs +
               " s (--timeout)";
        return IoError(m + ": hung, dead or far slower than the others");
      }
      if (!missing.empty())
        return IoError(std::string(missing.size() == 1 ? "rank " : "ranks ") +
                       RankList(missing) + " did not reach step '" + what + "' within " + secs +
                       " s (--timeout): hung, dead or far slower than the others");
    }
    if (rank_ == 1 && (!done[2] || heard_[0] < now - silent_after))
      return IoError(std::string("rank 0 ") + (done[2] ? "reached step '" + std::string(what) + "' and then stopped responding for "
                                                       : "did not reach step '" + std::string(what) + "' within ") +
                     secs + " s (--timeout): hung, dead or far slower than the others (seen by rank 1)");
    return IoError("rank " + std::to_string(rank_) + ": step '" + what +
                   "' did not complete within " + secs +
                   " s (--timeout): another rank is hung or dead" +
                   (rank_ == 0 ? "" : " (rank 0 names it unless it is rank 0)"));
  }

  // Sends this rank's heartbeat (every `beat` s; ranks >= 1 to rank 0, rank 0 to rank 1) and
  // records those received (rank 0: from every rank; rank 1: from rank 0) in heard_.
  Status Heartbeat(double now, double beat, const char* what) {
    if (size_ < 2) return Status::Ok();
    if (heard_.empty()) heard_.assign(size_, -1e300);
    if (now - last_beat_ >= beat) {
      int flag = 1;
      if (alive_send_ != MPI_REQUEST_NULL) SEEDSTORE_MPI_CHECK(MPI_Test(&alive_send_, &flag, MPI_STATUS_IGNORE), what);
      if (flag) {
        SEEDSTORE_MPI_CHECK(MPI_Isend(&alive_out_, 1, MPI_INT, rank_ == 0 ? 1 : 0, kAliveTag, arrive_comm_, &alive_send_),
                            what);
        last_beat_ = now;
      }
    }
    if (rank_ > 1) return Status::Ok();
    for (;;) {
      if (alive_recv_ == MPI_REQUEST_NULL)
        SEEDSTORE_MPI_CHECK(MPI_Irecv(&alive_in_, 1, MPI_INT, rank_ == 0 ? MPI_ANY_SOURCE : 0, kAliveTag, arrive_comm_,
                                      &alive_recv_),
                            what);
      int flag = 0;
      MPI_Status st;
      SEEDSTORE_MPI_CHECK(MPI_Test(&alive_recv_, &flag, &st), what);
      if (!flag) return Status::Ok();
      if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < size_) heard_[st.MPI_SOURCE] = now;
    }
  }

  bool owns_init_ = false;
  bool broken_ = false;
  std::vector<double> heard_;  // per rank: when its last heartbeat arrived here
  double last_beat_ = -1e300;
  int alive_out_ = 0, alive_in_ = 0;
  MPI_Request alive_send_ = MPI_REQUEST_NULL, alive_recv_ = MPI_REQUEST_NULL;
  uint64_t seq_ = 0;
  int rank_ = 0, size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL, arrive_comm_ = MPI_COMM_NULL;
};

}  // namespace

Result<std::unique_ptr<Collective>> CreateMpiCollective(CollectiveOptions o) {
  return MpiCollective::Create(o);
}

}  // namespace seedstore

#else  // !SEEDSTORE_HAVE_MPI

namespace seedstore {
Result<std::unique_ptr<Collective>> CreateMpiCollective(CollectiveOptions) {
  return Unsupported("MPI backend: seedstore was built without MPI");
}
}  // namespace seedstore

#endif
