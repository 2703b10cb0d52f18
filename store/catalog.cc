#include "store/catalog.h"

#include <fnmatch.h>

#include <vector>

namespace seedstore {

uint64_t TensorRecord::NumElements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

Result<Fingerprint> Catalog::FingerprintRegion(size_t i, const Region& r, CpuOptions o) const {
  const TensorRecord& t = tensors().at(i);
  if (t.lazy) return t.lazy->FingerprintRegion(r, o);
  std::vector<unsigned char> buf(r.Count() * DTypeSize(t.dtype));
  SEEDSTORE_RETURN_IF_ERROR(Read(i, r, buf.data(), o));
  return FingerprintCpu(t.dtype, r, buf.data(), t.fp_seed(), o);
}

int Catalog::Find(const std::string& name) const {
  const auto& ts = tensors();
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i].name == name) return static_cast<int>(i);
  return -1;
}

Result<std::unique_ptr<SpecCatalog>> SpecCatalog::Create(const ModelSpec& spec, std::string origin) {
  auto c = std::make_unique<SpecCatalog>();
  c->spec_ = spec;
  c->origin_ = std::move(origin);
  for (const auto& t : spec.tensors) {
    TensorRecord rec;
    rec.name = t.name;
    rec.shape = t.shape;
    rec.dtype = t.dtype;
    SEEDSTORE_ASSIGN_OR_RETURN(rec.lazy, LazyTensor::Resolve(t, spec.seed));
    c->records_.push_back(std::move(rec));
  }
  return c;
}

Status SpecCatalog::Read(size_t i, const Region& r, void* out, CpuOptions o) const {
  return records_.at(i).lazy->Materialize(r, out, o);
}

bool GlobMatch(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

}  // namespace seedstore
