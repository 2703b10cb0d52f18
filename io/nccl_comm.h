// An NCCL communicator on one GPU, created from a unique id that the caller distributes: the
// NCCL backend of io/collective.h broadcasts it over MPI; a world of one (the one-rank test in
// tests/gpu/test_nccl_comm.cc, tools/gpu-check.sh) just makes one. Depends on nothing of the
// store (store/status.h only) and has no CUDA or NCCL syntax in this header, so the GPU
// machine's standalone build compiles it without HDF5, MPI or JSON.
//
// Buffers are host memory (staged through a device buffer the communicator owns and grows)
// or device memory on the communicator's GPU (used in place, nothing staged; the step is
// ordered after work already enqueued on the legacy default stream -- work on other streams
// must be synchronized by the caller). Every call returns when its results are in place
// (host or device) or it failed. Every rank must
// make the same calls in the same order with the same sizes. Deadlines: with timeout_s > 0
// the communicator is non-blocking and every step is polled (ncclCommGetAsyncError,
// cudaStreamQuery) against it; a step that misses it, or any NCCL/CUDA error, returns kIo and
// leaves the communicator broken (aborted on destruction; the job must end).
//
// Built without NCCL (io/collective.cmake did not find nccl.h and libnccl), NcclBuilt() is
// false and every factory returns kUnsupported.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "io/gpu_select.h"
#include "store/status.h"

namespace seedstore {

/// The bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES = 128).
struct NcclUniqueId {
  std::array<unsigned char, 128> bytes{};
};

/// Where a collective's buffers live.
enum class Memory { kHost, kDevice };

/// Whether this build has the NCCL backend (SEEDSTORE_HAVE_NCCL).
bool NcclBuilt();

/// "2.28.9 (header 2.28.9)": the loaded library's version and the one compiled against; or
/// why there is none.
std::string NcclVersionString();

/// A fresh unique id (ncclGetUniqueId): made by one rank, given to all. Errors: kUnsupported
/// (no NCCL build), kIo.
Result<NcclUniqueId> NcclNewUniqueId();

/// This process's claim on CUDA device `device` (its UUID, this host's name, the visible
/// device count), for CheckOneRankPerGpu. Errors: kUnsupported (no NCCL build, no GPU), kIo.
Result<GpuClaim> LocalGpuClaim(int rank, int device);

class NcclComm {
 public:
  /// Rank `rank` of `nranks` on CUDA device `device`, joined through `id` (every rank passes
  /// the same id; ncclCommInitRankConfig). Blocks until all ranks have joined or timeout_s
  /// passed (<= 0: forever). Errors: kInvalidArgument (rank outside [0, nranks), bad device),
  /// kUnsupported (no NCCL build, no GPU), kIo (NCCL or CUDA failed, timeout).
  static Result<std::unique_ptr<NcclComm>> Create(const NcclUniqueId& id, int nranks, int rank,
                                                  int device, double timeout_s);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const;
  int size() const;
  int device() const;

  /// recv (size() * bytes) gets rank r's `bytes` bytes of `send` at offset r * bytes.
  Status AllGather(const void* send, size_t bytes, void* recv, Memory where, const char* what);
  /// data[i] = sum over ranks of data[i], mod 2^64 (fingerprints are two such lanes).
  Status AllReduceSum(uint64_t* data, size_t n, Memory where, const char* what);
  /// Copies root's `bytes` bytes of `data` into `data` on every rank.
  Status Broadcast(void* data, size_t bytes, int root, Memory where, const char* what);
  /// Returns once every rank has called it.
  Status Barrier(const char* what);

  /// ncclCommAbort now (other ranks' pending steps then fail or time out); afterwards every
  /// call returns kIo. For ending a job after a failure.
  void Abort();
  /// True after an NCCL/CUDA error, a timeout or Abort().
  bool broken() const;
  /// Seconds spent inside collective calls so far.
  double comm_seconds() const;
  double timeout() const;
  void set_timeout(double s);

  struct Impl;

 private:
  explicit NcclComm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace seedstore
