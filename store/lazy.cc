#include "store/lazy.h"

#include <string>

namespace seedstore {

Result<LazyTensor> LazyTensor::Resolve(const TensorSpec& t, uint64_t root_seed) {
  LazyTensor l;
  l.spec = t;
  l.key = TensorKey(root_seed, t);
  SEEDSTORE_ASSIGN_OR_RETURN(l.params, PrepareSampler(t, l.key));
  l.fp_seed = FingerprintSeed(t.name, t.dtype, t.shape);
  return l;
}

Status LazyTensor::CheckRegion(const Region& r) const {
  const std::string w = "tensor '" + spec.name + "'";
  if (r.rank != static_cast<int>(spec.shape.size()))
    return InvalidArgument(w + ": region has rank " + std::to_string(r.rank) + ", tensor has " +
                           std::to_string(spec.shape.size()));
  for (int d = 0; d < r.rank; ++d) {
    if (r.shape[d] != spec.shape[d])
      return InvalidArgument(w + ": region shape differs at dim " + std::to_string(d));
    if (!r.flat && (r.start[d] > r.stop[d] || r.stop[d] > spec.shape[d]))
      return InvalidArgument(w + ": region dim " + std::to_string(d) + " [" +
                             std::to_string(r.start[d]) + ":" + std::to_string(r.stop[d]) +
                             "] is outside [0:" + std::to_string(spec.shape[d]) + "]");
  }
  if (r.flat && (r.begin > r.end || r.end > spec.NumElements()))
    return InvalidArgument(w + ": flat range [" + std::to_string(r.begin) + ":" +
                           std::to_string(r.end) +
                           "] is outside [0:" + std::to_string(spec.NumElements()) + "]");
  return Status::Ok();
}

Status LazyTensor::Materialize(const Region& r, void* out, CpuOptions o) const {
  SEEDSTORE_RETURN_IF_ERROR(CheckRegion(r));
  MaterializeCpu(params, r, out, o);
  return Status::Ok();
}

Result<Fingerprint> LazyTensor::FingerprintRegion(const Region& r, CpuOptions o) const {
  SEEDSTORE_RETURN_IF_ERROR(CheckRegion(r));
  return MaterializeFingerprintCpu(params, r, nullptr, fp_seed, o);
}

}  // namespace seedstore
