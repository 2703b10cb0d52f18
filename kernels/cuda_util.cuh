// Internal helpers of the CUDA launchers: error conversion, grid sizing, block reduction.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "kernels/device_cache.h"
#include "kernels/materialize.h"

namespace seedstore {
namespace cuda_detail {

constexpr int kThreads = 256;

inline KernelStatus Ok() { return KernelStatus{}; }
inline KernelStatus Invalid(std::string m) {
  return KernelStatus{KernelCode::kInvalidArgument, std::move(m)};
}
inline KernelStatus CudaError(cudaError_t e, const char* what, const char* file, int line) {
  return KernelStatus{KernelCode::kCuda, std::string(file) + ":" + std::to_string(line) + ": " +
                                             what + ": " + cudaGetErrorName(e) + " (" +
                                             cudaGetErrorString(e) + ")"};
}

/// Returns a kCuda KernelStatus naming file:line, the call and CUDA's message (H3).
#define SEEDSTORE_CUDA_RETURN(expr)                                                               \
  do {                                                                                            \
    const cudaError_t seedstore_cuda_err_ = (expr);                                               \
    if (seedstore_cuda_err_ != cudaSuccess)                                                       \
      return ::seedstore::cuda_detail::CudaError(seedstore_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

/// Returns the KernelStatus of `expr` when it is an error.
#define SEEDSTORE_KERNEL_TRY(expr)                             \
  do {                                                         \
    ::seedstore::KernelStatus seedstore_kernel_s_ = (expr);    \
    if (!seedstore_kernel_s_.ok()) return seedstore_kernel_s_; \
  } while (0)

/// Multiprocessors per device, queried once per device (kernels/device_cache.h).
inline PerDeviceCache<> g_sm_count;

/// Blocks for a grid-stride kernel over `work` items: enough to fill every SM at the
/// kernel's occupancy, never more than the work needs. The SM count and the kernel's
/// occupancy are queried once per device (`occupancy` is the launcher's own cache: one per
/// kernel), not per launch; only the current device is read each time.
template <class Kernel>
KernelStatus GridFor(Kernel kernel, PerDeviceCache<>& occupancy, uint64_t work, int* blocks) {
  int dev = 0, sms = 0, per_sm = 0;
  SEEDSTORE_CUDA_RETURN(cudaGetDevice(&dev));
  SEEDSTORE_CUDA_RETURN(g_sm_count.Get<cudaError_t>(dev, &sms, [](int d, int* v) {
    return cudaDeviceGetAttribute(v, cudaDevAttrMultiProcessorCount, d);
  }));
  SEEDSTORE_CUDA_RETURN(occupancy.Get<cudaError_t>(dev, &per_sm, [&](int, int* v) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(v, kernel, kThreads, 0);
  }));
  *blocks = GridBlocks(work, kThreads, sms, per_sm);
  return Ok();
}

/// Adds (s0, s1) over the block and atomically into d_acc[0..1] (one atomic per block).
/// Sums are mod 2^64, so the order of additions cannot change the result.
__device__ __forceinline__ void BlockAddToGlobal(uint64_t s0, uint64_t s1, uint64_t* d_acc) {
  __shared__ unsigned long long part[kThreads / 32][2];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    s0 += __shfl_xor_sync(0xFFFFFFFFu, static_cast<unsigned long long>(s0), o);
    s1 += __shfl_xor_sync(0xFFFFFFFFu, static_cast<unsigned long long>(s1), o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    part[warp][0] = s0;
    part[warp][1] = s1;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long t0 = 0, t1 = 0;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) {
      t0 += part[w][0];
      t1 += part[w][1];
    }
    atomicAdd(reinterpret_cast<unsigned long long*>(d_acc), t0);
    atomicAdd(reinterpret_cast<unsigned long long*>(d_acc) + 1, t1);
  }
}

inline cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }

/// Shared argument checks of the launchers.
KernelStatus CheckRegion(const Region& r);
KernelStatus CheckSampler(const SamplerParams& p);
/// A device pointer holding `dtype` elements must be aligned to the element size (a misaligned
/// access would be a sticky error that ends the CUDA context). `what`: the launcher's name.
KernelStatus CheckAligned(const void* d, DType dtype, const char* what);

}  // namespace cuda_detail
}  // namespace seedstore
