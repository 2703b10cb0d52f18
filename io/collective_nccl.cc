// The NCCL backend of io/collective.h: GPU-to-GPU collectives, the unique id broadcast over
// the MPI bootstrap. Compiled into seedstore_io only when CUDA and NCCL are found
// (io/collective.cmake defines SEEDSTORE_HAVE_NCCL); otherwise this file is empty and
// io/collective.cc provides a stub that returns kUnsupported.
#if SEEDSTORE_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "io/collective.h"

namespace seedstore {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#define SEEDSTORE_CUDA_CHECK(call, what)                                                  \
  do {                                                                                    \
    const cudaError_t _e = (call);                                                        \
    if (_e != cudaSuccess)                                                                \
      return IoError(std::string(what) + ": " #call " failed at " __FILE__ ":" +          \
                     std::to_string(__LINE__) + ": " + cudaGetErrorString(_e));           \
  } while (0)

#define SEEDSTORE_NCCL_CHECK(call, what)                                                  \
  do {                                                                                    \
    const ncclResult_t _r = (call);                                                       \
    if (_r != ncclSuccess && _r != ncclInProgress)                                        \
      return IoError(std::string(what) + ": " #call " failed at " __FILE__ ":" +          \
                     std::to_string(__LINE__) + ": " + ncclGetErrorString(_r));           \
  } while (0)

int LocalRank(int world_rank) {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                        "SLURM_LOCALID"})
    if (const char* s = std::getenv(v); s && *s) return std::atoi(s);
  return world_rank;
}

class NcclCollective final : public Collective {
 public:
  static Result<std::unique_ptr<Collective>> Create(std::unique_ptr<Collective> owned,
                                                    CollectiveOptions o) {
    Collective& boot = *owned;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
      cudaGetLastError();
      return Unsupported("NCCL backend: no CUDA device");
    }
    auto c = std::unique_ptr<NcclCollective>(new NcclCollective(std::move(owned), o));
    c->rank_ = boot.rank();
    c->size_ = boot.size();
    c->device_ = LocalRank(c->rank_) % ndev;
    SEEDSTORE_CUDA_CHECK(cudaSetDevice(c->device_), "NCCL setup");
    SEEDSTORE_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking), "NCCL setup");
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (c->rank_ == 0) SEEDSTORE_NCCL_CHECK(ncclGetUniqueId(&id), "NCCL setup");
    SEEDSTORE_RETURN_IF_ERROR(boot.Broadcast(&id, sizeof id, 0, "NCCL unique id"));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = o.timeout_s > 0 ? 0 : 1;
    const ncclResult_t init = ncclCommInitRankConfig(&c->comm_, c->size_, id, c->rank_, &cfg);
    c->has_comm_ = c->comm_ != nullptr;  // aborted by the destructor even when init failed
    if (init != ncclSuccess && init != ncclInProgress) c->broken_ = true;
    SEEDSTORE_NCCL_CHECK(init, "NCCL setup");
    SEEDSTORE_RETURN_IF_ERROR(c->WaitComm("NCCL communicator init", Now()));
    return std::unique_ptr<Collective>(std::move(c));
  }

  ~NcclCollective() override {
    if (has_comm_) {
      if (broken_) ncclCommAbort(comm_);
      else ncclCommDestroy(comm_);
    }
    if (d_buf_) cudaFree(d_buf_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }

  Status AllGather(const void* send, size_t bytes, void* recv, const char* what) override {
    SEEDSTORE_RETURN_IF_ERROR(Reserve(bytes * size_, what));
    char* d = static_cast<char*>(d_buf_);
    return Run(what, send, bytes, d + rank_ * bytes, recv, bytes * size_, [&] {
      return ncclAllGather(d + rank_ * bytes, d, bytes, ncclUint8, comm_, stream_);
    });
  }

  Status AllReduceSum(uint64_t* data, size_t n, const char* what) override {
    SEEDSTORE_RETURN_IF_ERROR(Reserve(n * 8, what));
    return Run(what, data, n * 8, d_buf_, data, n * 8, [&] {
      return ncclAllReduce(d_buf_, d_buf_, n, ncclUint64, ncclSum, comm_, stream_);
    });
  }

  Status Barrier(const char* what) override {
    uint64_t one = 1;
    return AllReduceSum(&one, 1, what);
  }

  Status Broadcast(void* data, size_t bytes, int root, const char* what) override {
    if (root < 0 || root >= size_)
      return InvalidArgument(std::string(what) + ": broadcast root out of range");
    SEEDSTORE_RETURN_IF_ERROR(Reserve(bytes, what));
    return Run(what, data, bytes, d_buf_, data, bytes, [&] {
      return ncclBroadcast(d_buf_, d_buf_, bytes, ncclUint8, root, comm_, stream_);
    });
  }

  // Broken after an NCCL error or timeout, or when the bootstrap is: then the job must abort
  // rather than finalize (tools/cli.cc).
  bool broken() const override { return broken_ || boot_->broken(); }

  [[noreturn]] void Abort(int exit_code) override {
    if (has_comm_) ncclCommAbort(comm_);
    has_comm_ = false;
    boot_->Abort(exit_code);
    std::abort();  // not reached: the bootstrap's Abort does not return
  }

 private:
  NcclCollective(std::unique_ptr<Collective> boot, CollectiveOptions o) : boot_(std::move(boot)) {
    options_ = o;
  }

  Status Reserve(size_t bytes, const char* what) {
    if (bytes <= cap_) return Status::Ok();
    SEEDSTORE_CUDA_CHECK(cudaSetDevice(device_), what);  // the caller's thread may use another
    if (d_buf_) cudaFree(d_buf_);
    d_buf_ = nullptr;
    cap_ = 0;
    SEEDSTORE_CUDA_CHECK(cudaMalloc(&d_buf_, bytes), what);
    cap_ = bytes;
    return Status::Ok();
  }

  // Waits until the (non-blocking) communicator has no call in progress.
  Status WaitComm(const char* what, double t0) {
    for (;;) {
      ncclResult_t r;
      SEEDSTORE_NCCL_CHECK(ncclCommGetAsyncError(comm_, &r), what);
      if (r == ncclSuccess) return Status::Ok();
      if (r != ncclInProgress) {
        broken_ = true;
        return IoError(std::string(what) + ": NCCL: " + ncclGetErrorString(r));
      }
      if (options_.timeout_s > 0 && Now() - t0 > options_.timeout_s) return TimedOut(what);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  Status TimedOut(const char* what) {
    broken_ = true;
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", options_.timeout_s);
    return IoError("rank " + std::to_string(rank_) + ": NCCL step '" + what +
                   "' did not complete within " + secs + " s (--timeout): another rank is hung or dead");
  }

  template <class Launch>
  Status Run(const char* what, const void* h_in, size_t in_bytes, void* d_in, void* h_out,
             size_t out_bytes, Launch launch) {
    if (broken_) return IoError(std::string(what) + ": the communicator is unusable after an "
                                "earlier failure");
    const double t0 = Now();
    SEEDSTORE_CUDA_CHECK(cudaSetDevice(device_), what);
    SEEDSTORE_CUDA_CHECK(cudaMemcpyAsync(d_in, h_in, in_bytes, cudaMemcpyHostToDevice, stream_), what);
    SEEDSTORE_NCCL_CHECK(launch(), what);
    SEEDSTORE_RETURN_IF_ERROR(WaitComm(what, t0));
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        broken_ = true;
        return IoError(std::string(what) + ": CUDA: " + cudaGetErrorString(e));
      }
      ncclResult_t r;
      SEEDSTORE_NCCL_CHECK(ncclCommGetAsyncError(comm_, &r), what);
      if (r != ncclSuccess && r != ncclInProgress) {
        broken_ = true;
        return IoError(std::string(what) + ": NCCL: " + ncclGetErrorString(r));
      }
      if (options_.timeout_s > 0 && Now() - t0 > options_.timeout_s) return TimedOut(what);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    SEEDSTORE_CUDA_CHECK(cudaMemcpy(h_out, d_buf_, out_bytes, cudaMemcpyDeviceToHost), what);
    comm_s_ += Now() - t0;
    return Status::Ok();
  }

  std::unique_ptr<Collective> boot_;  // MPI (or self): the unique id's carrier, and Abort
  int rank_ = 0, size_ = 1, device_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_{};
  bool has_comm_ = false, broken_ = false;
  void* d_buf_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace

Result<std::unique_ptr<Collective>> CreateNcclCollective(std::unique_ptr<Collective> bootstrap,
                                                         CollectiveOptions o) {
  return NcclCollective::Create(std::move(bootstrap), o);
}

}  // namespace seedstore
#endif  // SEEDSTORE_HAVE_NCCL
