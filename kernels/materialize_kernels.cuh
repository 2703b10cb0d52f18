// The materialize kernel (optionally fused with fingerprinting) and its launcher, shared by
// materialize.cu and fingerprint.cu. The kernel only walks chunks; the work of one chunk is
// chunk::MaterializeChunk, the same code the host tests run (kernels/chunk.h).
#pragma once
#include <cstdint>
#include <type_traits>

#include "gen/dispatch.h"
#include "kernels/chunk.h"
#include "kernels/cuda_util.cuh"

namespace seedstore {
namespace cuda_detail {

template <Generator G, Dist X, DType D, bool kAligned, bool kHash>
__global__ void __launch_bounds__(kThreads)
    MaterializeKernel(const __grid_constant__ SamplerParams p, const __grid_constant__ RunMap m,
                      StorageT<D>* __restrict__ d_out, bool vec_ok, uint64_t seed,
                      uint64_t* d_acc) {
  const uint64_t chunks = chunk::NumChunks<D>(m.count);
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t s0 = 0, s1 = 0;
  for (uint64_t c = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks;
       c += stride)
    chunk::MaterializeChunk<G, X, D, kAligned, kHash>(p, m, c, d_out, vec_ok, seed, &s0, &s1);
  if constexpr (kHash) BlockAddToGlobal(s0, s1, d_acc);
}

template <Generator G, Dist X, DType D, bool kAligned, bool kHash>
KernelStatus LaunchMaterializeKernel(const SamplerParams& p, const RunMap& m, void* d_out,
                                     uint64_t seed, cudaStream_t stream, uint64_t* d_acc) {
  auto kernel = &MaterializeKernel<G, X, D, kAligned, kHash>;
  static PerDeviceCache<> occupancy;  // this kernel's, per device
  int blocks = 0;
  SEEDSTORE_KERNEL_TRY(GridFor(kernel, occupancy, chunk::NumChunks<D>(m.count), &blocks));
  const bool vec_ok = reinterpret_cast<uintptr_t>(d_out) % 16 == 0;
  kernel<<<blocks, kThreads, 0, stream>>>(p, m, static_cast<StorageT<D>*>(d_out), vec_ok, seed,
                                          d_acc);
  SEEDSTORE_CUDA_RETURN(cudaGetLastError());
  return Ok();
}

/// Launches the materialize kernel for p's (generator, dist, dtype) over a non-empty region.
/// Picks the Philox-block-aligned variant when every run starts on a block boundary.
template <bool kHash>
KernelStatus LaunchMaterialize(const SamplerParams& p, const Region& r, void* d_out, uint64_t seed,
                               cudaStream_t stream, uint64_t* d_acc) {
  const RunMap m = MakeRunMap(r);
  return VisitSampler(p, [&](auto g, auto x, auto d) -> KernelStatus {
    constexpr Generator G = std::decay_t<decltype(g)>::value;
    constexpr Dist X = std::decay_t<decltype(x)>::value;
    constexpr DType D = std::decay_t<decltype(d)>::value;
    if constexpr (chunk::kBlocked<G, X>) {
      if (chunk::UseAligned<G, X, D>(m))
        return LaunchMaterializeKernel<G, X, D, true, kHash>(p, m, d_out, seed, stream, d_acc);
    }
    return LaunchMaterializeKernel<G, X, D, false, kHash>(p, m, d_out, seed, stream, d_acc);
  });
}

}  // namespace cuda_detail
}  // namespace seedstore
