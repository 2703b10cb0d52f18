// CUDA launchers: materialize, device detection, DeviceBuffer, known-answer kernels.
#include <cuda_runtime.h>

#include <vector>

#include "gen/jax_keys.h"
#include "gen/philox.h"
#include "kernels/materialize.h"
#include "kernels/materialize_kernels.cuh"

namespace seedstore {
namespace cuda_detail {

KernelStatus CheckRegion(const Region& r) {
  const char* err = RegionError(r);
  if (*err) return Invalid(std::string("region: ") + err);
  return Ok();
}

KernelStatus CheckAligned(const void* d, DType dtype, const char* what) {
  const size_t es = DTypeSize(dtype);
  if (reinterpret_cast<uintptr_t>(d) % es == 0) return Ok();
  return Invalid(std::string(what) + ": device pointer " +
                 std::to_string(reinterpret_cast<uintptr_t>(d)) + " is not aligned to the " +
                 std::to_string(es) + "-byte elements");
}

KernelStatus CheckSampler(const SamplerParams& p) {
  if (static_cast<int>(p.dtype) >= kNumDTypes) return Invalid("sampler: unknown dtype");
  if (static_cast<int>(p.dist) > static_cast<int>(Dist::kOnes))
    return Invalid("sampler: unknown distribution");
  if (!Supported(p.dist, p.dtype))
    return Invalid(
        "sampler: distribution not supported for this dtype (bits needs an "
        "unsigned dtype; uniform/normal/truncated_normal need a float dtype)");
  return Ok();
}

namespace {

KernelStatus NeedDevice() {
  std::string why;
  if (CudaDeviceCount(&why) > 0) return Ok();
  return KernelStatus{KernelCode::kUnsupported, "no CUDA device: " + why};
}

__global__ void ThreefryKatKernel(size_t n, const uint32_t* in, uint32_t* out) {
  const size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const Word2 w = Threefry2x32<20>(in[4 * j], in[4 * j + 1], in[4 * j + 2], in[4 * j + 3]);
  out[2 * j] = w.v0;
  out[2 * j + 1] = w.v1;
}

__global__ void PhiloxKatKernel(size_t n, const uint32_t* in, uint32_t* out) {
  const size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const uint32_t* x = in + 6 * j;
  const Word4 w = Philox4x32<10>(x[0], x[1], x[2], x[3], x[4], x[5]);
  for (int k = 0; k < 4; ++k) out[4 * j + k] = w.v[k];
}

__global__ void HashKatKernel(size_t n, const uint64_t* index, const uint64_t* bits, uint64_t seed,
                              uint64_t* out) {
  const size_t j = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const Fingerprint h = HashElement(index[j], bits[j], seed);
  out[2 * j] = h.lane0;
  out[2 * j + 1] = h.lane1;
}

/// Copies inputs in, runs `launch(d_in, d_out)`, copies outputs back.
template <class TIn, class TOut, class F>
KernelStatus RunOnDevice(const TIn* h_in, size_t in_count, TOut* h_out, size_t out_count,
                         F&& launch) {
  SEEDSTORE_KERNEL_TRY(NeedDevice());
  DeviceBuffer in, out;
  SEEDSTORE_KERNEL_TRY(DeviceBuffer::Allocate(in_count * sizeof(TIn), &in));
  SEEDSTORE_KERNEL_TRY(DeviceBuffer::Allocate(out_count * sizeof(TOut), &out));
  SEEDSTORE_KERNEL_TRY(in.CopyFromHost(h_in, in_count * sizeof(TIn)));
  launch(in.data(), out.data());
  SEEDSTORE_CUDA_RETURN(cudaGetLastError());
  SEEDSTORE_CUDA_RETURN(cudaDeviceSynchronize());
  return out.CopyToHost(h_out, out_count * sizeof(TOut));
}

unsigned Blocks(size_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace
}  // namespace cuda_detail

using namespace cuda_detail;

bool CudaBuilt() { return true; }

// The device count cannot change while the process runs (the runtime reads
// CUDA_VISIBLE_DEVICES once), and every launcher checks it: queried once (thread-safe static
// initialization), not per launch.
int CudaDeviceCount(std::string* why) {
  struct Count {
    int n = 0;
    std::string why;
  };
  static const Count count = [] {
    Count c;
    const cudaError_t e = cudaGetDeviceCount(&c.n);
    if (e != cudaSuccess) {
      c.n = 0;
      c.why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
      (void)cudaGetLastError();  // clear the (non-sticky) error so later calls start clean
    } else if (c.n == 0) {
      c.why = "cudaGetDeviceCount returned 0 devices";
    }
    return c;
  }();
  if (count.n == 0 && why) *why = count.why;
  return count.n;
}

bool CudaAvailable(std::string* why) { return CudaDeviceCount(why) > 0; }

KernelStatus CudaUseDevice(int device) {
  std::string why;
  const int n = CudaDeviceCount(&why);
  if (n == 0) return KernelStatus{KernelCode::kUnsupported, "no CUDA device: " + why};
  if (device < 0 || device >= n)
    return Invalid("CUDA device " + std::to_string(device) + " does not exist (" +
                   std::to_string(n) + " visible)");
  SEEDSTORE_CUDA_RETURN(cudaSetDevice(device));
  return Ok();
}

KernelStatus MaterializeCuda(const SamplerParams& p, const Region& r, void* d_out, void* stream) {
  SEEDSTORE_KERNEL_TRY(CheckSampler(p));
  SEEDSTORE_KERNEL_TRY(CheckRegion(r));
  if (r.Count() == 0) return Ok();
  if (d_out == nullptr) return Invalid("MaterializeCuda: d_out is null for a non-empty region");
  SEEDSTORE_KERNEL_TRY(CheckAligned(d_out, p.dtype, "MaterializeCuda"));
  SEEDSTORE_KERNEL_TRY(NeedDevice());
  return LaunchMaterialize<false>(p, r, d_out, 0, AsStream(stream), nullptr);
}

// ---- DeviceBuffer -----------------------------------------------------------------------

DeviceBuffer::~DeviceBuffer() {
  if (d_) cudaFree(d_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (d_) cudaFree(d_);
    d_ = o.d_;
    bytes_ = o.bytes_;
    o.d_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

KernelStatus DeviceBuffer::Allocate(size_t bytes, DeviceBuffer* out) {
  *out = DeviceBuffer();
  if (bytes == 0) return Ok();
  SEEDSTORE_KERNEL_TRY(NeedDevice());
  void* d = nullptr;
  SEEDSTORE_CUDA_RETURN(cudaMalloc(&d, bytes));
  out->d_ = d;
  out->bytes_ = bytes;
  return Ok();
}

KernelStatus DeviceBuffer::Fill(int value) {
  if (bytes_ == 0) return Ok();
  SEEDSTORE_CUDA_RETURN(cudaMemset(d_, value, bytes_));
  return Ok();
}

KernelStatus DeviceBuffer::CopyToHost(void* h_dst, size_t bytes, size_t offset) const {
  if (offset > bytes_ || bytes > bytes_ - offset)
    return Invalid("DeviceBuffer::CopyToHost: range past the end of the buffer");
  if (bytes == 0) return Ok();
  SEEDSTORE_CUDA_RETURN(
      cudaMemcpy(h_dst, static_cast<char*>(d_) + offset, bytes, cudaMemcpyDeviceToHost));
  return Ok();
}

KernelStatus DeviceBuffer::CopyFromHost(const void* h_src, size_t bytes, size_t offset) {
  if (offset > bytes_ || bytes > bytes_ - offset)
    return Invalid("DeviceBuffer::CopyFromHost: range past the end of the buffer");
  if (bytes == 0) return Ok();
  SEEDSTORE_CUDA_RETURN(
      cudaMemcpy(static_cast<char*>(d_) + offset, h_src, bytes, cudaMemcpyHostToDevice));
  return Ok();
}

// ---- known-answer kernels ---------------------------------------------------------------

KernelStatus Threefry2x32Cuda(size_t n, const uint32_t* h_in, uint32_t* h_out) {
  if (n == 0) return Ok();
  return RunOnDevice(h_in, 4 * n, h_out, 2 * n, [&](void* in, void* out) {
    ThreefryKatKernel<<<Blocks(n), kThreads>>>(n, static_cast<const uint32_t*>(in),
                                               static_cast<uint32_t*>(out));
  });
}

KernelStatus Philox4x32Cuda(size_t n, const uint32_t* h_in, uint32_t* h_out) {
  if (n == 0) return Ok();
  return RunOnDevice(h_in, 6 * n, h_out, 4 * n, [&](void* in, void* out) {
    PhiloxKatKernel<<<Blocks(n), kThreads>>>(n, static_cast<const uint32_t*>(in),
                                             static_cast<uint32_t*>(out));
  });
}

KernelStatus HashElementCuda(size_t n, const uint64_t* h_index, const uint64_t* h_bits,
                             uint64_t seed, Fingerprint* h_out) {
  if (n == 0) return Ok();
  std::vector<uint64_t> in(2 * n), out(2 * n);
  for (size_t j = 0; j < n; ++j) {
    in[j] = h_index[j];
    in[n + j] = h_bits[j];
  }
  SEEDSTORE_KERNEL_TRY(RunOnDevice(in.data(), 2 * n, out.data(), 2 * n, [&](void* di, void* d_o) {
    const auto* d_in = static_cast<const uint64_t*>(di);
    HashKatKernel<<<Blocks(n), kThreads>>>(n, d_in, d_in + n, seed, static_cast<uint64_t*>(d_o));
  }));
  for (size_t j = 0; j < n; ++j) h_out[j] = Fingerprint{out[2 * j], out[2 * j + 1]};
  return Ok();
}

}  // namespace seedstore
