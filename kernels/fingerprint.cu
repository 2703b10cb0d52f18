// CUDA launchers: fingerprint a device buffer, and materialize + fingerprint in one pass.
#include <cuda_runtime.h>

#include "kernels/materialize.h"
#include "kernels/materialize_kernels.cuh"

namespace seedstore {
namespace cuda_detail {
namespace {

template <class T>
__global__ void __launch_bounds__(kThreads)
    FingerprintKernel(const __grid_constant__ RunMap m, const T* __restrict__ d_data, bool vec_ok,
                      uint64_t seed, uint64_t* d_acc) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  const uint64_t chunks = m.count / V + (m.count % V != 0 ? 1 : 0);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t s0 = 0, s1 = 0;
  for (uint64_t c = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks;
       c += stride)
    chunk::FingerprintChunk<T>(m, c, d_data, vec_ok, seed, &s0, &s1);
  BlockAddToGlobal(s0, s1, d_acc);
}

template <class T>
KernelStatus LaunchFingerprint(const Region& r, const void* d_data, uint64_t seed,
                               cudaStream_t stream, uint64_t* d_acc) {
  const RunMap m = MakeRunMap(r);
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  auto kernel = &FingerprintKernel<T>;
  static PerDeviceCache<> occupancy;  // this kernel's, per device
  int blocks = 0;
  SEEDSTORE_KERNEL_TRY(GridFor(kernel, occupancy, m.count / V + 1, &blocks));
  const bool vec_ok = reinterpret_cast<uintptr_t>(d_data) % 16 == 0;
  kernel<<<blocks, kThreads, 0, stream>>>(m, static_cast<const T*>(d_data), vec_ok, seed, d_acc);
  SEEDSTORE_CUDA_RETURN(cudaGetLastError());
  return Ok();
}

KernelStatus NeedDevice() {
  std::string why;
  if (CudaDeviceCount(&why) > 0) return Ok();
  return KernelStatus{KernelCode::kUnsupported, "no CUDA device: " + why};
}

/// Runs `enqueue(d_acc)` with a zeroed 16-byte device accumulator, then reads it back.
/// The accumulator is freed on every path.
template <class F>
KernelStatus WithAccumulator(cudaStream_t stream, Fingerprint* h_result, F&& enqueue) {
  uint64_t* d_acc = nullptr;
  // Stream-ordered allocation where the driver has memory pools; plain cudaMalloc where it
  // has not (some virtualized or MPS setups answer cudaErrorNotSupported).
  bool pooled = true;
  cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&d_acc), 16, stream);
  if (e == cudaErrorNotSupported) {
    (void)cudaGetLastError();
    pooled = false;
    e = cudaMalloc(reinterpret_cast<void**>(&d_acc), 16);
  }
  SEEDSTORE_CUDA_RETURN(e);
  struct Free {
    uint64_t* d;
    cudaStream_t s;
    bool pooled;
    ~Free() {
      if (pooled) (void)cudaFreeAsync(d, s);
      (void)cudaStreamSynchronize(s);
      if (!pooled) (void)cudaFree(d);
    }
  } free_on_exit{d_acc, stream, pooled};
  SEEDSTORE_CUDA_RETURN(cudaMemsetAsync(d_acc, 0, 16, stream));
  SEEDSTORE_KERNEL_TRY(enqueue(d_acc));
  uint64_t h_acc[2] = {0, 0};
  SEEDSTORE_CUDA_RETURN(cudaMemcpyAsync(h_acc, d_acc, 16, cudaMemcpyDeviceToHost, stream));
  SEEDSTORE_CUDA_RETURN(cudaStreamSynchronize(stream));
  *h_result = Fingerprint{h_acc[0], h_acc[1]};
  return Ok();
}

}  // namespace
}  // namespace cuda_detail

using namespace cuda_detail;

KernelStatus FingerprintCudaAsync(DType dtype, const Region& r, const void* d_data, uint64_t seed,
                                  void* stream, uint64_t* d_acc) {
  if (static_cast<int>(dtype) >= kNumDTypes) return Invalid("FingerprintCuda: unknown dtype");
  SEEDSTORE_KERNEL_TRY(CheckRegion(r));
  if (d_acc == nullptr) return Invalid("FingerprintCuda: d_acc is null");
  if (r.Count() == 0) return Ok();
  if (d_data == nullptr) return Invalid("FingerprintCuda: d_data is null for a non-empty region");
  SEEDSTORE_KERNEL_TRY(CheckAligned(d_data, dtype, "FingerprintCuda"));
  SEEDSTORE_KERNEL_TRY(NeedDevice());
  const cudaStream_t st = AsStream(stream);
  switch (DTypeSize(dtype)) {
    case 8:
      return LaunchFingerprint<uint64_t>(r, d_data, seed, st, d_acc);
    case 4:
      return LaunchFingerprint<uint32_t>(r, d_data, seed, st, d_acc);
    case 2:
      return LaunchFingerprint<uint16_t>(r, d_data, seed, st, d_acc);
    default:
      return LaunchFingerprint<uint8_t>(r, d_data, seed, st, d_acc);
  }
}

KernelStatus FingerprintCuda(DType dtype, const Region& r, const void* d_data, uint64_t seed,
                             void* stream, Fingerprint* h_result) {
  if (h_result == nullptr) return Invalid("FingerprintCuda: h_result is null");
  if (static_cast<int>(dtype) >= kNumDTypes) return Invalid("FingerprintCuda: unknown dtype");
  SEEDSTORE_KERNEL_TRY(CheckRegion(r));
  if (r.Count() == 0) {
    *h_result = Fingerprint{};
    return Ok();
  }
  if (d_data == nullptr) return Invalid("FingerprintCuda: d_data is null for a non-empty region");
  SEEDSTORE_KERNEL_TRY(CheckAligned(d_data, dtype, "FingerprintCuda"));
  SEEDSTORE_KERNEL_TRY(NeedDevice());
  return WithAccumulator(AsStream(stream), h_result, [&](uint64_t* d_acc) {
    return FingerprintCudaAsync(dtype, r, d_data, seed, stream, d_acc);
  });
}

KernelStatus MaterializeFingerprintCudaAsync(const SamplerParams& p, const Region& r, void* d_out,
                                             uint64_t seed, void* stream, uint64_t* d_acc) {
  SEEDSTORE_KERNEL_TRY(CheckSampler(p));
  SEEDSTORE_KERNEL_TRY(CheckRegion(r));
  if (d_acc == nullptr) return Invalid("MaterializeFingerprintCuda: d_acc is null");
  if (r.Count() == 0) return Ok();
  if (d_out) SEEDSTORE_KERNEL_TRY(CheckAligned(d_out, p.dtype, "MaterializeFingerprintCuda"));
  SEEDSTORE_KERNEL_TRY(NeedDevice());
  return LaunchMaterialize<true>(p, r, d_out, seed, AsStream(stream), d_acc);
}

KernelStatus MaterializeFingerprintCuda(const SamplerParams& p, const Region& r, void* d_out,
                                        uint64_t seed, void* stream, Fingerprint* h_result) {
  if (h_result == nullptr) return Invalid("MaterializeFingerprintCuda: h_result is null");
  SEEDSTORE_KERNEL_TRY(CheckSampler(p));
  SEEDSTORE_KERNEL_TRY(CheckRegion(r));
  if (r.Count() == 0) {
    *h_result = Fingerprint{};
    return Ok();
  }
  if (d_out) SEEDSTORE_KERNEL_TRY(CheckAligned(d_out, p.dtype, "MaterializeFingerprintCuda"));
  SEEDSTORE_KERNEL_TRY(NeedDevice());
  return WithAccumulator(AsStream(stream), h_result, [&](uint64_t* d_acc) {
    return MaterializeFingerprintCudaAsync(p, r, d_out, seed, stream, d_acc);
  });
}

}  // namespace seedstore
