// Lazy tensors: a TensorSpec resolved into everything needed to materialize or fingerprint
// any region of it on the CPU (the CUDA path lives in kernels/).
#pragma once
#include "gen/materialize_cpu.h"
#include "store/spec.h"

namespace seedstore {

/// A tensor spec with its key, sampler parameters and fingerprint seed resolved.
struct LazyTensor {
  TensorSpec spec;
  Key key;
  SamplerParams params;
  uint64_t fp_seed = 0;

  /// Resolves `t` within a model whose root seed is `root_seed`.
  static Result<LazyTensor> Resolve(const TensorSpec& t, uint64_t root_seed);
  /// Bytes of a region of this tensor.
  uint64_t RegionBytes(const Region& r) const { return r.Count() * DTypeSize(spec.dtype); }
  /// Checks that `r` lies inside the tensor (names the tensor, dim and bounds on error).
  Status CheckRegion(const Region& r) const;
  /// Writes the region's elements (row-major) into `out`.
  Status Materialize(const Region& r, void* out, CpuOptions o = {}) const;
  /// Fingerprint of the region's elements, generated in tiles (memory O(threads)).
  Result<Fingerprint> FingerprintRegion(const Region& r, CpuOptions o = {}) const;
  /// Fingerprint of the whole tensor.
  Result<Fingerprint> FingerprintWhole(CpuOptions o = {}) const {
    return FingerprintRegion(WholeTensor(spec.shape), o);
  }
};

}  // namespace seedstore
