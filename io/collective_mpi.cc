// The MPI backend of io/collective.h: non-blocking collectives polled against a deadline.
#include "io/collective.h"
#include "io/gpu_select.h"

#if SEEDSTORE_HAVE_MPI
#include "io/mpi_deadline.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <functional>

namespace seedstore {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class MpiCollective final : public Collective {
 public:
  static Result<std::unique_ptr<Collective>> Create(CollectiveOptions o) {
    auto c = std::unique_ptr<MpiCollective>(new MpiCollective(o));
    SEEDSTORE_ASSIGN_OR_RETURN(c->world_, MpiWorld::Create("MPI setup"));
    c->comm_ = c->world_->comm();
    c->rank_ = c->world_->rank();
    c->size_ = c->world_->size();
    // The node-local rank, for the choice of GPU (io/gpu_select.h): the ranks that share
    // memory with this one are the ranks of its node.
    MPI_Comm node = MPI_COMM_NULL;
    SEEDSTORE_MPI_CHECK(
        MPI_Comm_split_type(c->comm_, MPI_COMM_TYPE_SHARED, c->rank_, MPI_INFO_NULL, &node),
        "MPI setup");
    NodeLocalRank local;
    MPI_Comm_rank(node, &local.rank);
    MPI_Comm_size(node, &local.size);
    local.source = "MPI_Comm_split_type";
    MPI_Comm_free(&node);
    SetNodeLocalRank(local);
    return std::unique_ptr<Collective>(std::move(c));
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  bool broken() const override { return world_ && world_->broken(); }

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
    SEEDSTORE_RETURN_IF_ERROR(CheckBroadcastRoot(root, size_, what));
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
  explicit MpiCollective(CollectiveOptions o) { options_ = o; }

  // Runs one collective through the deadline machinery (io/mpi_deadline.h).
  Status Run(const char* what, const std::function<int(MPI_Request*)>& start) {
    const double t0 = Now();
    Status st = world_->deadline().Run(what, options_.timeout_s, start);
    comm_s_ += Now() - t0;
    return st;
  }

  std::unique_ptr<MpiWorld> world_;  // frees or retains itself (MpiWorld)
  int rank_ = 0, size_ = 1;
  MPI_Comm comm_ = MPI_COMM_NULL;
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
