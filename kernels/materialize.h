// CUDA launchers: materialize any region of a lazy tensor into device memory, fingerprint a
// device buffer, or both in one pass. This header has no CUDA syntax (house style H2), so
// CPU-only code includes it; in a build without CUDA every launcher returns kUnsupported
// ("seedstore was built without CUDA") and CudaAvailable() is false.
//
// Streams are the caller's cudaStream_t passed as void* (nullptr = the legacy default
// stream). Device pointers are named d_, host pointers h_. Kernels do not depend on store/:
// errors are a small KernelStatus that io/ converts to seedstore::Status.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <functional>
#include <vector>
#include "gen/fingerprint.h"

#include "gen/region.h"
#include "gen/sampler.h"

namespace seedstore {

/// Pinned error codes of the kernel layer.
enum class KernelCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // bad region, null pointer, unsupported (dist, dtype) pair
  kUnsupported = 2,      // built without CUDA, or no usable CUDA device
  kCuda = 3,             // the CUDA runtime reported an error (message has file:line)
};

/// An error code and a message a user can act on.
struct [[nodiscard]] KernelStatus {
  KernelCode code = KernelCode::kOk;
  std::string message;
  bool ok() const { return code == KernelCode::kOk; }
};

/// True when this library was compiled with the CUDA kernels (SEEDSTORE_HAVE_CUDA_KERNELS).
bool CudaBuilt();

/// Number of usable CUDA devices; 0 when there are none or the build has no CUDA, and then
/// *why (if given) says why, e.g. "cudaGetDeviceCount: no CUDA-capable device is detected".
int CudaDeviceCount(std::string* why = nullptr);

/// CudaBuilt() && CudaDeviceCount() > 0: what `--device auto` should use.
bool CudaAvailable(std::string* why = nullptr);

/// Makes CUDA device `device` current on the calling thread (cudaSetDevice); launchers and
/// DeviceBuffer then use it. Errors: kInvalidArgument (no such device), kUnsupported, kCuda.
KernelStatus CudaUseDevice(int device);

/// Writes the region's elements, row-major (box-linear order, as MaterializeCpu), into d_out
/// (Count() * DTypeSize(p.dtype) bytes of device memory on the current device), enqueued on
/// `stream`; returns after the launch (asynchronous). Bytes are identical to MaterializeCpu's
/// for every generator, distribution and dtype (I1, I2). 16-byte-aligned d_out gets 16-byte
/// stores; any alignment of the element size works. An empty region launches nothing.
/// Device memory used besides d_out: none. Errors: kInvalidArgument (unsupported pair, bad
/// region, null d_out with a non-empty region), kUnsupported, kCuda (launch failure).
KernelStatus MaterializeCuda(const SamplerParams& p, const Region& r, void* d_out,
                             void* stream = nullptr);

/// Fingerprint (gen/fingerprint.h) of a device buffer holding the region's elements
/// row-major, with the given seed. Exact integer sums: the result does not depend on the
/// launch configuration (I4). Synchronizes `stream` and writes *h_result.
/// Device memory used: 16 bytes.
KernelStatus FingerprintCuda(DType dtype, const Region& r, const void* d_data, uint64_t seed,
                             void* stream, Fingerprint* h_result);

/// Asynchronous form: adds the fingerprint into d_acc[0] (lane0) and d_acc[1] (lane1), two
/// uint64 in device memory that the caller zeroed. Many tensors can share one accumulator.
KernelStatus FingerprintCudaAsync(DType dtype, const Region& r, const void* d_data, uint64_t seed,
                                  void* stream, uint64_t* d_acc);

/// Materialize and fingerprint in one pass: equal to MaterializeCuda then FingerprintCuda,
/// reading nothing back from memory. d_out may be null: values are then only hashed
/// (device memory O(1)). Synchronizes `stream` and writes *h_result.
KernelStatus MaterializeFingerprintCuda(const SamplerParams& p, const Region& r, void* d_out,
                                        uint64_t seed, void* stream, Fingerprint* h_result);

/// Asynchronous fused form; adds into d_acc as FingerprintCudaAsync.
KernelStatus MaterializeFingerprintCudaAsync(const SamplerParams& p, const Region& r, void* d_out,
                                             uint64_t seed, void* stream, uint64_t* d_acc);

/// Fills h_dst (pinned host memory) with `n` bytes of the stream starting at byte `offset`;
/// returns false and sets *error on failure.
using StageFill = std::function<bool(size_t offset, size_t n, void* h_dst, std::string* error)>;

/// Copies `bytes` produced on the host into device memory d_dst through two pinned staging
/// buffers: while piece k travels to the device (cudaMemcpyAsync on `stream`), the host fills
/// piece k+1, so reading and copying overlap. `pieces` lists the piece sizes in order (they
/// sum to `bytes`; a reader chooses them on its own boundaries, e.g. rows of a box). Device
/// memory used besides d_dst: none; pinned host memory: 2 x the largest piece. Synchronizes
/// `stream`. Errors: kInvalidArgument (pieces do not sum to bytes; fill failed), kUnsupported,
/// kCuda.
KernelStatus StageToDevice(const std::vector<size_t>& pieces, const StageFill& fill, void* d_dst,
                           void* stream = nullptr);

/// Owning device allocation on the current device (cudaMalloc, 256-byte aligned), for tests,
/// benchmarks and callers without a framework tensor. Move-only; frees on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : d_(o.d_), bytes_(o.bytes_) {
    o.d_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// Allocates `bytes` (0 allowed: data() is then null). Errors: kUnsupported, kCuda.
  static KernelStatus Allocate(size_t bytes, DeviceBuffer* out);
  void* data() const { return d_; }
  size_t size() const { return bytes_; }
  /// Sets every byte to `value` (synchronous).
  KernelStatus Fill(int value);
  /// Copies `bytes` (<= size() - offset) from device offset `offset` to h_dst (synchronous).
  KernelStatus CopyToHost(void* h_dst, size_t bytes, size_t offset = 0) const;
  /// Copies `bytes` from h_src to device offset `offset` (synchronous).
  KernelStatus CopyFromHost(const void* h_src, size_t bytes, size_t offset = 0);

 private:
  void* d_ = nullptr;
  size_t bytes_ = 0;
};

/// Runs the counter RNGs inside a kernel, for known-answer tests on the device.
/// Threefry2x32<20>: h_in holds n rows (k0, k1, x0, x1), h_out gets n rows (y0, y1).
KernelStatus Threefry2x32Cuda(size_t n, const uint32_t* h_in, uint32_t* h_out);
/// Philox4x32<10>: h_in holds n rows (k0, k1, c0, c1, c2, c3), h_out gets n rows (4 words).
KernelStatus Philox4x32Cuda(size_t n, const uint32_t* h_in, uint32_t* h_out);
/// HashElement inside a kernel: h_out[j] = HashElement(h_index[j], h_bits[j], seed).
KernelStatus HashElementCuda(size_t n, const uint64_t* h_index, const uint64_t* h_bits,
                             uint64_t seed, Fingerprint* h_out);

}  // namespace seedstore
