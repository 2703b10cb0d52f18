// The NCCL backend of io/collective.h: an NcclComm (io/nccl_comm.h) behind the Collective
// interface. Bootstrapped over another Collective (MPI under mpirun, a store under torchrun,
// self for a world of one): every rank binds its node-local GPU (or the one it is given), the ranks
// gather their GPU claims and refuse shared GPUs by name (CheckOneRankPerGpu), rank 0 makes the
// unique id and broadcasts it, and the communicator is created from that id. Without NCCL the
// factories return kUnsupported.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "io/collective.h"
#include "io/device.h"
#include "io/nccl_comm.h"

namespace seedstore {
namespace {

class NcclCollective final : public Collective {
 public:
  NcclCollective(std::unique_ptr<NcclComm> comm, std::unique_ptr<Collective> boot,
                 CollectiveOptions o)
      : comm_(std::move(comm)), boot_(std::move(boot)) {
    options_ = o;
  }

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  const char* backend() const override { return "nccl"; }

  Status AllGather(const void* send, size_t bytes, void* recv, const char* what) override {
    return Step(comm().AllGather(send, bytes, recv, Memory::kHost, what));
  }
  Status AllReduceSum(uint64_t* data, size_t n, const char* what) override {
    return Step(comm().AllReduceSum(data, n, Memory::kHost, what));
  }
  Status Barrier(const char* what) override { return Step(comm().Barrier(what)); }
  Status Broadcast(void* data, size_t bytes, int root, const char* what) override {
    return Step(comm().Broadcast(data, bytes, root, Memory::kHost, what));
  }

  // Broken after an NCCL error or timeout, or when the bootstrap is: then the job must abort
  // rather than finalize (tools/cli.cc).
  bool broken() const override { return comm_->broken() || (boot_ && boot_->broken()); }

  [[noreturn]] void Abort(int exit_code) override {
    comm_->Abort();
    if (boot_) boot_->Abort(exit_code);  // does not return
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(exit_code);
  }

 private:
  Status Step(Status st) {
    comm_s_ = comm_->comm_seconds();
    return st;
  }
  // Every step reads the deadline, which set_timeout() may have changed.
  NcclComm& comm() {
    comm_->set_timeout(options_.timeout_s);
    return *comm_;
  }

  std::unique_ptr<NcclComm> comm_;
  std::unique_ptr<Collective> boot_;  // MPI, a store or self: the unique id's carrier, and Abort
};

std::string HostName() {
  char host[kClaimHostBytes] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

}  // namespace

Result<std::unique_ptr<Collective>> CreateNcclCollective(const NcclUniqueId& id, int nranks,
                                                         int rank, int device,
                                                         CollectiveOptions o) {
  SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<NcclComm> comm,
                             NcclComm::Create(id, nranks, rank, device, o.timeout_s));
  return std::unique_ptr<Collective>(new NcclCollective(std::move(comm), nullptr, o));
}

Result<std::unique_ptr<Collective>> CreateNcclCollective(std::unique_ptr<Collective> bootstrap,
                                                         CollectiveOptions o, int device) {
  if (!bootstrap) return InvalidArgument("NCCL backend: no bootstrap collective");
  if (!NcclBuilt()) return NcclNewUniqueId().status();  // kUnsupported, naming why
  Collective& boot = *bootstrap;
  const int me = boot.rank(), n = boot.size();
  // 1. This rank's GPU (node-local rank % visible GPUs) and its claim; a rank without a GPU
  //    still takes part in the gather, so that every rank reports the same error.
  GpuClaim mine;
  mine.rank = me;
  mine.device = -1;
  mine.host = HostName();
  std::string local_error;
  Result<int> dev = device >= 0 ? Result<int>(device) : BindNodeLocalGpu();
  if (dev.ok()) {
    Result<GpuClaim> c = LocalGpuClaim(me, *dev);
    if (c.ok()) mine = *c;
    else local_error = c.status().message();
  } else {
    local_error = dev.status().message();
  }
  // 2. Every rank's claim; shared GPUs (or ranks without one) are refused by name.
  std::vector<unsigned char> all(kGpuClaimBytes * static_cast<size_t>(n));
  SEEDSTORE_RETURN_IF_ERROR(
      boot.AllGather(PackGpuClaim(mine).data(), kGpuClaimBytes, all.data(), "NCCL GPU claims"));
  std::vector<GpuClaim> claims;
  for (int r = 0; r < n; ++r) claims.push_back(UnpackGpuClaim(all.data() + kGpuClaimBytes * r));
  Status check = CheckOneRankPerGpu(claims);
  if (!check.ok()) {
    if (local_error.empty()) return check;
    return Status(check.code(),
                  check.message() + " (rank " + std::to_string(me) + ": " + local_error + ")");
  }
  // 3. The unique id, made by rank 0 and broadcast; a failure there is reported to all.
  NcclUniqueId id;
  unsigned char failed = 0;
  Status id_status;
  if (me == 0) {
    Result<NcclUniqueId> made = NcclNewUniqueId();
    if (made.ok()) id = *made;
    else id_status = made.status(), failed = 1;
  }
  SEEDSTORE_RETURN_IF_ERROR(boot.Broadcast(&failed, 1, 0, "NCCL unique id status"));
  if (failed)
    return me == 0 ? id_status : IoError("NCCL backend: rank 0 could not make the unique id");
  SEEDSTORE_RETURN_IF_ERROR(boot.Broadcast(id.bytes.data(), id.bytes.size(), 0, "NCCL unique id"));
  // 4. The communicator, from the id.
  SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<NcclComm> comm,
                             NcclComm::Create(id, n, me, mine.device, o.timeout_s));
  return std::unique_ptr<Collective>(new NcclCollective(std::move(comm), std::move(bootstrap), o));
}

}  // namespace seedstore
