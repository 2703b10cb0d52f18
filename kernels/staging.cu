// Pinned, double-buffered host-to-device staging (dense tensors read from a store).
#include <algorithm>

#include "kernels/cuda_util.cuh"

namespace seedstore {

KernelStatus StageToDevice(const std::vector<size_t>& pieces, const StageFill& fill, void* d_dst,
                           void* stream) {
  using namespace cuda_detail;
  size_t largest = 0;
  for (size_t p : pieces) largest = std::max(largest, p);
  if (largest == 0) return Ok();
  if (d_dst == nullptr) return Invalid("StageToDevice: null device destination");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  void* h[2] = {nullptr, nullptr};
  cudaEvent_t done[2] = {nullptr, nullptr};
  // RAII-free cleanup in one place: every exit goes through `cleanup`.
  auto cleanup = [&]() {
    for (int k = 0; k < 2; ++k) {
      if (done[k]) (void)cudaEventDestroy(done[k]);
      if (h[k]) (void)cudaFreeHost(h[k]);
    }
  };
  auto run = [&]() -> KernelStatus {
    for (int k = 0; k < 2; ++k) {
      SEEDSTORE_CUDA_RETURN(cudaHostAlloc(&h[k], largest, cudaHostAllocDefault));
      SEEDSTORE_CUDA_RETURN(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
    }
    size_t offset = 0;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const int b = static_cast<int>(k & 1);
      // The buffer is free once the copy issued two pieces ago has finished.
      if (k >= 2) SEEDSTORE_CUDA_RETURN(cudaEventSynchronize(done[b]));
      std::string error;
      if (!fill(offset, pieces[k], h[b], &error))
        return Invalid("StageToDevice: reading piece " + std::to_string(k) + " failed: " + error);
      SEEDSTORE_CUDA_RETURN(cudaMemcpyAsync(static_cast<char*>(d_dst) + offset, h[b], pieces[k],
                                            cudaMemcpyHostToDevice, s));
      SEEDSTORE_CUDA_RETURN(cudaEventRecord(done[b], s));
      offset += pieces[k];
    }
    SEEDSTORE_CUDA_RETURN(cudaStreamSynchronize(s));
    return Ok();
  };
  const KernelStatus st = run();
  if (!st.ok()) (void)cudaStreamSynchronize(s);  // no copy may still read a buffer we free
  cleanup();
  return st;
}

}  // namespace seedstore
