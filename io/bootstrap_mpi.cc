// The MPI transport of io/bootstrap.h: each exchange is one or two non-blocking MPI
// collectives run through the deadline machinery (io/mpi_deadline.h), on staging buffers that
// are retained until exit when an exchange times out.
#include "io/bootstrap.h"

#if SEEDSTORE_HAVE_MPI
#include "io/mpi_deadline.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <functional>

namespace seedstore {
namespace {

class MpiBootstrap final : public Bootstrap {
 public:
  static Result<std::unique_ptr<Bootstrap>> Create() {
    auto b = std::unique_ptr<MpiBootstrap>(new MpiBootstrap);
    SEEDSTORE_ASSIGN_OR_RETURN(b->world_, MpiWorld::Create("MPI bootstrap setup"));
    b->rank_ = b->world_->rank();
    b->size_ = b->world_->size();
    return std::unique_ptr<Bootstrap>(std::move(b));
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* transport() const override { return "mpi"; }

  // Every rank's block size (an all-gather of one u64), then the blocks (an all-gatherv).
  Result<std::vector<std::string>> GatherAll(std::string_view mine, const char* what,
                                             double timeout_s) override {
    struct Stage {
      std::string send, recv;
      uint64_t send_size = 0;
      std::vector<uint64_t> sizes;
      std::vector<int> counts, displs;
    };
    auto s = std::make_shared<Stage>();
    s->send = std::string(mine);
    s->send_size = mine.size();
    s->sizes.assign(size_, 0);
    SEEDSTORE_RETURN_IF_ERROR(Run(s, what, timeout_s, [&](MPI_Request* req) {
      return req ? MPI_Iallgather(&s->send_size, 1, MPI_UINT64_T, s->sizes.data(), 1, MPI_UINT64_T,
                                  comm(), req)
                 : MPI_Allgather(&s->send_size, 1, MPI_UINT64_T, s->sizes.data(), 1, MPI_UINT64_T,
                                 comm());
    }));
    uint64_t total = 0;
    for (uint64_t n : s->sizes) total += n;  // every rank sees the same sizes: the same verdict
    if (total > static_cast<uint64_t>(INT_MAX))
      return InvalidArgument(std::string("step '") + what + "': the ranks' blocks total " +
                             std::to_string(total) + " bytes, over MPI's INT_MAX");
    s->counts.resize(size_);
    s->displs.resize(size_);
    for (int r = 0, at = 0; r < size_; at += s->counts[r], ++r) {
      s->counts[r] = static_cast<int>(s->sizes[r]);
      s->displs[r] = at;
    }
    s->recv.resize(total);
    const int n = static_cast<int>(s->send.size());
    SEEDSTORE_RETURN_IF_ERROR(Run(s, what, timeout_s, [&](MPI_Request* req) {
      return req ? MPI_Iallgatherv(s->send.data(), n, MPI_BYTE, s->recv.data(), s->counts.data(),
                                   s->displs.data(), MPI_BYTE, comm(), req)
                 : MPI_Allgatherv(s->send.data(), n, MPI_BYTE, s->recv.data(), s->counts.data(),
                                  s->displs.data(), MPI_BYTE, comm());
    }));
    std::vector<std::string> blocks(size_);
    for (int r = 0; r < size_; ++r) blocks[r] = s->recv.substr(s->displs[r], s->counts[r]);
    return blocks;
  }

  // The root's size (a broadcast of one u64), then its bytes.
  Result<std::string> Broadcast(std::string_view bytes, int root, const char* what,
                                double timeout_s) override {
    SEEDSTORE_RETURN_IF_ERROR(CheckBroadcastRoot(root, size_, what));
    struct Stage {
      uint64_t n = 0;
      std::string data;
    };
    auto s = std::make_shared<Stage>();
    if (rank_ == root) {
      s->data = std::string(bytes);
      s->n = bytes.size();
    }
    SEEDSTORE_RETURN_IF_ERROR(Run(s, what, timeout_s, [&](MPI_Request* req) {
      return req ? MPI_Ibcast(&s->n, 1, MPI_UINT64_T, root, comm(), req)
                 : MPI_Bcast(&s->n, 1, MPI_UINT64_T, root, comm());
    }));
    if (s->n > static_cast<uint64_t>(INT_MAX))
      return InvalidArgument(std::string("step '") + what + "': a broadcast of " +
                             std::to_string(s->n) + " bytes, over MPI's INT_MAX");
    s->data.resize(s->n);
    const int n = static_cast<int>(s->n);
    if (n > 0)
      SEEDSTORE_RETURN_IF_ERROR(Run(s, what, timeout_s, [&](MPI_Request* req) {
        return req ? MPI_Ibcast(s->data.data(), n, MPI_BYTE, root, comm(), req)
                   : MPI_Bcast(s->data.data(), n, MPI_BYTE, root, comm());
      }));
    return std::move(s->data);
  }

  Status Barrier(const char* what, double timeout_s) override {
    return world_->deadline().Run(what, timeout_s, [&](MPI_Request* req) {
      return req ? MPI_Ibarrier(comm(), req) : MPI_Barrier(comm());
    });
  }

  [[noreturn]] void Abort(int exit_code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // not reached
  }

 private:
  MpiBootstrap() = default;

  MPI_Comm comm() const { return world_->comm(); }

  // One operation through the deadline; when it fails, its staging buffers stay allocated.
  template <typename StagePtr>
  Status Run(const StagePtr& stage, const char* what, double timeout_s,
             const std::function<int(MPI_Request*)>& start) {
    Status st = world_->deadline().Run(what, timeout_s, start);
    if (!st.ok()) RetainBuffersUntilExit(stage);
    return st;
  }

  std::unique_ptr<MpiWorld> world_;  // frees or retains itself (MpiWorld)
  int rank_ = 0, size_ = 1;
};

}  // namespace

Result<std::unique_ptr<Bootstrap>> CreateMpiBootstrap() { return MpiBootstrap::Create(); }

}  // namespace seedstore

#else  // !SEEDSTORE_HAVE_MPI

namespace seedstore {
Result<std::unique_ptr<Bootstrap>> CreateMpiBootstrap() {
  return Unsupported("MPI bootstrap: seedstore was built without MPI");
}
}  // namespace seedstore

#endif
