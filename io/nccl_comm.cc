// io/nccl_comm.h. Compiled with NCCL only when io/collective.cmake (or tools/gpu-check.sh's
// standalone build) defines SEEDSTORE_HAVE_NCCL; otherwise the factories report kUnsupported.
#include "io/nccl_comm.h"
#include "io/bootstrap.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#if SEEDSTORE_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace seedstore {

#if !SEEDSTORE_HAVE_NCCL

namespace {
constexpr const char* kNoNccl =
    "NCCL backend: seedstore was built without NCCL (CUDA, nccl.h or libnccl not found at "
    "configure time)";
}  // namespace

struct NcclComm::Impl {};
bool NcclBuilt() { return false; }
std::string NcclVersionString() { return "none (built without NCCL)"; }
Result<NcclUniqueId> NcclNewUniqueId() { return Unsupported(kNoNccl); }
Result<GpuClaim> LocalGpuClaim(int, int) { return Unsupported(kNoNccl); }
Result<std::unique_ptr<NcclComm>> NcclComm::Create(const NcclUniqueId&, int, int, int, double) {
  return Unsupported(kNoNccl);
}
NcclComm::NcclComm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclComm::~NcclComm() = default;
int NcclComm::rank() const { return 0; }
int NcclComm::size() const { return 1; }
int NcclComm::device() const { return 0; }
Status NcclComm::AllGather(const void*, size_t, void*, Memory, const char*) {
  return Unsupported(kNoNccl);
}
Status NcclComm::AllReduceSum(uint64_t*, size_t, Memory, const char*) {
  return Unsupported(kNoNccl);
}
Status NcclComm::Broadcast(void*, size_t, int, Memory, const char*) { return Unsupported(kNoNccl); }
Status NcclComm::Barrier(const char*) { return Unsupported(kNoNccl); }
void NcclComm::Abort() {}
bool NcclComm::broken() const { return true; }
double NcclComm::comm_seconds() const { return 0; }
double NcclComm::timeout() const { return 0; }
void NcclComm::set_timeout(double) {}

#else  // SEEDSTORE_HAVE_NCCL

static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId{}.bytes), "NCCL_UNIQUE_ID_BYTES");

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One macro per foreign API (house style H3): file:line plus the library's own message.
#define SEEDSTORE_CUDA_CHECK(call, what)                                         \
  do {                                                                           \
    const cudaError_t _e = (call);                                               \
    if (_e != cudaSuccess)                                                       \
      return IoError(std::string(what) + ": " #call " failed at " __FILE__ ":" + \
                     std::to_string(__LINE__) + ": " + cudaGetErrorString(_e));  \
  } while (0)

#define SEEDSTORE_NCCL_CHECK(call, what)                                         \
  do {                                                                           \
    const ncclResult_t _r = (call);                                              \
    if (_r != ncclSuccess && _r != ncclInProgress)                               \
      return IoError(std::string(what) + ": " #call " failed at " __FILE__ ":" + \
                     std::to_string(__LINE__) + ": " + ncclGetErrorString(_r));  \
  } while (0)

std::string VersionName(int code) {
  // NCCL_VERSION: X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z since 2.9.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

Status NeedDevice(int device, const char* what) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return Unsupported(std::string(what) + ": no CUDA device (" +
                       (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
  }
  if (device < 0 || device >= n)
    return InvalidArgument(std::string(what) + ": CUDA device " + std::to_string(device) +
                           " does not exist (" + std::to_string(n) + " visible)");
  return Status::Ok();
}

}  // namespace

bool NcclBuilt() { return true; }

std::string NcclVersionString() {
  int v = 0;
  const std::string header = VersionName(NCCL_VERSION_CODE);
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown (header " + header + ")";
  return VersionName(v) + " (header " + header + ")";
}

Result<NcclUniqueId> NcclNewUniqueId() {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  SEEDSTORE_NCCL_CHECK(ncclGetUniqueId(&id), "NCCL backend: unique id");
  NcclUniqueId out;
  std::memcpy(out.bytes.data(), &id, sizeof id);
  return out;
}

Result<GpuClaim> LocalGpuClaim(int rank, int device) {
  SEEDSTORE_RETURN_IF_ERROR(NeedDevice(device, "NCCL backend"));
  GpuClaim c;
  c.rank = rank;
  c.device = device;
  SEEDSTORE_CUDA_CHECK(cudaGetDeviceCount(&c.device_count), "NCCL backend: GPU claim");
  cudaDeviceProp prop;
  SEEDSTORE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device), "NCCL backend: GPU claim");
  std::memcpy(c.uuid.data(), prop.uuid.bytes, 16);
  char host[kClaimHostBytes] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "?");
  c.host = host;
  return c;
}

struct NcclComm::Impl {
  int rank = 0, size = 1, device = 0;
  double timeout_s = 0, comm_s = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;  // orders device-buffer steps after the legacy default stream
  ncclComm_t comm{};
  bool has_comm = false, broken = false;
  void* d_buf = nullptr;  // staging for host buffers
  size_t cap = 0;

  ~Impl() {
    if (has_comm) {
      if (broken) (void)ncclCommAbort(comm);
      else (void)ncclCommDestroy(comm);
    }
    if (d_buf) (void)cudaFree(d_buf);
    if (ready) (void)cudaEventDestroy(ready);
    if (stream) (void)cudaStreamDestroy(stream);
  }

  // Device buffers were typically written by work on the legacy default stream (kernels,
  // cudaMemset, a pageable cudaMemcpy whose DMA may still be in flight); our stream is
  // non-blocking, so it waits for that work explicitly.
  Status AfterDefaultStream(const char* what) {
    SEEDSTORE_CUDA_CHECK(cudaEventRecord(ready, cudaStreamLegacy), what);
    SEEDSTORE_CUDA_CHECK(cudaStreamWaitEvent(stream, ready, 0), what);
    return Status::Ok();
  }

  Status Usable(const char* what) const {
    if (!broken) return Status::Ok();
    return IoError(std::string(what) +
                   ": the NCCL communicator is unusable after an earlier "
                   "failure");
  }

  Status Reserve(size_t bytes, const char* what) {
    if (bytes <= cap) return Status::Ok();
    if (d_buf) (void)cudaFree(d_buf);
    d_buf = nullptr;
    cap = 0;
    SEEDSTORE_CUDA_CHECK(cudaMalloc(&d_buf, bytes), what);
    cap = bytes;
    return Status::Ok();
  }

  Status TimedOut(const char* what) {
    broken = true;
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", timeout_s);
    return IoError("rank " + std::to_string(rank) + ": NCCL step '" + what +
                   "' did not complete within " + secs +
                   " s (--timeout): another rank is hung or dead");
  }

  Status AsyncError(const char* what) {
    ncclResult_t r = ncclSuccess;
    SEEDSTORE_NCCL_CHECK(ncclCommGetAsyncError(comm, &r), what);
    if (r != ncclSuccess && r != ncclInProgress) {
      broken = true;
      return IoError(std::string(what) + ": NCCL: " + ncclGetErrorString(r));
    }
    return Status::Ok();
  }

  // Waits until the (non-blocking) communicator has no call in progress.
  Status WaitComm(const char* what, double t0) {
    for (;;) {
      ncclResult_t r = ncclSuccess;
      SEEDSTORE_NCCL_CHECK(ncclCommGetAsyncError(comm, &r), what);
      if (r == ncclSuccess) return Status::Ok();
      if (r != ncclInProgress) {
        broken = true;
        return IoError(std::string(what) + ": NCCL: " + ncclGetErrorString(r));
      }
      if (timeout_s > 0 && Now() - t0 > timeout_s) return TimedOut(what);
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  // One step: stage in (host buffers), launch, wait for the stream against the deadline,
  // stage out.
  template <class StageIn, class Launch, class StageOut>
  Status Run(const char* what, StageIn stage_in, Launch launch, StageOut stage_out) {
    SEEDSTORE_RETURN_IF_ERROR(Usable(what));
    const double t0 = Now();
    SEEDSTORE_CUDA_CHECK(cudaSetDevice(device), what);  // the caller's thread may use another
    SEEDSTORE_RETURN_IF_ERROR(stage_in());
    const ncclResult_t lr = launch();
    if (lr != ncclSuccess && lr != ncclInProgress) broken = true;
    SEEDSTORE_NCCL_CHECK(lr, what);
    SEEDSTORE_RETURN_IF_ERROR(WaitComm(what, t0));
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        broken = true;
        return IoError(std::string(what) + ": CUDA: " + cudaGetErrorString(e));
      }
      SEEDSTORE_RETURN_IF_ERROR(AsyncError(what));
      if (timeout_s > 0 && Now() - t0 > timeout_s) return TimedOut(what);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    SEEDSTORE_RETURN_IF_ERROR(stage_out());
    comm_s += Now() - t0;
    return Status::Ok();
  }

  Status CopyIn(const void* h, size_t bytes, void* d, const char* what) {
    if (bytes)
      SEEDSTORE_CUDA_CHECK(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, stream), what);
    return Status::Ok();
  }
  Status CopyOut(void* h, size_t bytes, const char* what) {
    if (bytes) SEEDSTORE_CUDA_CHECK(cudaMemcpy(h, d_buf, bytes, cudaMemcpyDeviceToHost), what);
    return Status::Ok();
  }
};

Result<std::unique_ptr<NcclComm>> NcclComm::Create(const NcclUniqueId& id, int nranks, int rank,
                                                   int device, double timeout_s) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return InvalidArgument("NCCL backend: rank " + std::to_string(rank) + " outside a world of " +
                           std::to_string(nranks));
  SEEDSTORE_RETURN_IF_ERROR(NeedDevice(device, "NCCL backend"));
  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->size = nranks;
  impl->device = device;
  impl->timeout_s = timeout_s;
  SEEDSTORE_CUDA_CHECK(cudaSetDevice(device), "NCCL backend setup");
  SEEDSTORE_CUDA_CHECK(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking),
                       "NCCL backend setup");
  SEEDSTORE_CUDA_CHECK(cudaEventCreateWithFlags(&impl->ready, cudaEventDisableTiming),
                       "NCCL backend setup");
  ncclUniqueId nid;
  std::memcpy(&nid, id.bytes.data(), sizeof nid);
  // Non-blocking when there is a deadline, so that a missing rank cannot hang the init.
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = timeout_s > 0 ? 0 : 1;
  const double t0 = Now();
  const ncclResult_t init = ncclCommInitRankConfig(&impl->comm, nranks, nid, rank, &cfg);
  impl->has_comm = impl->comm != nullptr;  // aborted by ~Impl even when init failed
  if (init != ncclSuccess && init != ncclInProgress) {
    impl->broken = true;
    return IoError("NCCL backend setup: ncclCommInitRankConfig(rank " + std::to_string(rank) +
                   " of " + std::to_string(nranks) + ", device " + std::to_string(device) +
                   ") failed: " + ncclGetErrorString(init) + " (NCCL " + NcclVersionString() + ")");
  }
  SEEDSTORE_RETURN_IF_ERROR(impl->WaitComm("NCCL communicator init", t0));
  return std::unique_ptr<NcclComm>(new NcclComm(std::move(impl)));
}

NcclComm::NcclComm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NcclComm::~NcclComm() = default;
int NcclComm::rank() const { return impl_->rank; }
int NcclComm::size() const { return impl_->size; }
int NcclComm::device() const { return impl_->device; }
bool NcclComm::broken() const { return impl_->broken; }
double NcclComm::comm_seconds() const { return impl_->comm_s; }
double NcclComm::timeout() const { return impl_->timeout_s; }
void NcclComm::set_timeout(double s) { impl_->timeout_s = s; }

void NcclComm::Abort() {
  Impl& m = *impl_;
  if (m.has_comm) (void)ncclCommAbort(m.comm);
  m.has_comm = false;
  m.broken = true;
}

Status NcclComm::AllGather(const void* send, size_t bytes, void* recv, Memory where,
                           const char* what) {
  Impl& m = *impl_;
  if (bytes == 0) return m.Usable(what);  // nothing to move (every rank passes the same size)
  if (send == nullptr || recv == nullptr)
    return InvalidArgument(std::string(what) + ": null buffer");
  const auto after = [&] { return m.AfterDefaultStream(what); };
  const auto none = [] { return Status::Ok(); };
  if (where == Memory::kDevice)
    return m.Run(
        what, after, [&] { return ncclAllGather(send, recv, bytes, ncclUint8, m.comm, m.stream); },
        none);
  SEEDSTORE_RETURN_IF_ERROR(m.Reserve(bytes * m.size, what));
  char* d = static_cast<char*>(m.d_buf);
  char* mine = d + static_cast<size_t>(m.rank) * bytes;  // in place: NCCL's documented form
  return m.Run(
      what, [&] { return m.CopyIn(send, bytes, mine, what); },
      [&] { return ncclAllGather(mine, d, bytes, ncclUint8, m.comm, m.stream); },
      [&] { return m.CopyOut(recv, bytes * m.size, what); });
}

Status NcclComm::AllReduceSum(uint64_t* data, size_t n, Memory where, const char* what) {
  Impl& m = *impl_;
  if (n == 0) return m.Usable(what);  // nothing to move (every rank passes the same size)
  if (data == nullptr) return InvalidArgument(std::string(what) + ": null buffer");
  const auto after = [&] { return m.AfterDefaultStream(what); };
  const auto none = [] { return Status::Ok(); };
  // ncclUint64 + ncclSum wraps mod 2^64, as fingerprints need.
  if (where == Memory::kDevice)
    return m.Run(
        what, after,
        [&] { return ncclAllReduce(data, data, n, ncclUint64, ncclSum, m.comm, m.stream); }, none);
  SEEDSTORE_RETURN_IF_ERROR(m.Reserve(n * 8, what));
  return m.Run(
      what, [&] { return m.CopyIn(data, n * 8, m.d_buf, what); },
      [&] { return ncclAllReduce(m.d_buf, m.d_buf, n, ncclUint64, ncclSum, m.comm, m.stream); },
      [&] { return m.CopyOut(data, n * 8, what); });
}

Status NcclComm::Broadcast(void* data, size_t bytes, int root, Memory where, const char* what) {
  Impl& m = *impl_;
  SEEDSTORE_RETURN_IF_ERROR(CheckBroadcastRoot(root, m.size, what));
  if (bytes == 0) return m.Usable(what);  // nothing to move (every rank passes the same size)
  if (data == nullptr) return InvalidArgument(std::string(what) + ": null buffer");
  const auto after = [&] { return m.AfterDefaultStream(what); };
  const auto none = [] { return Status::Ok(); };
  if (where == Memory::kDevice)
    return m.Run(
        what, after,
        [&] { return ncclBroadcast(data, data, bytes, ncclUint8, root, m.comm, m.stream); }, none);
  SEEDSTORE_RETURN_IF_ERROR(m.Reserve(bytes, what));
  return m.Run(
      what, [&] { return m.rank == root ? m.CopyIn(data, bytes, m.d_buf, what) : Status::Ok(); },
      [&] { return ncclBroadcast(m.d_buf, m.d_buf, bytes, ncclUint8, root, m.comm, m.stream); },
      [&] { return m.CopyOut(data, bytes, what); });
}

Status NcclComm::Barrier(const char* what) {
  uint64_t one = 1;
  return AllReduceSum(&one, 1, Memory::kHost, what);
}

#endif  // SEEDSTORE_HAVE_NCCL

}  // namespace seedstore
