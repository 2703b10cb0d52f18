// A catalog: the tensors of a model, each lazy (init spec) or dense (stored bytes), any region
// of which can be read. Spec files and store files (io/) both present themselves as one.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/lazy.h"

namespace seedstore {

/// One tensor of a catalog.
struct TensorRecord {
  std::string name;
  std::vector<uint64_t> shape;
  DType dtype = DType::kF32;
  std::optional<LazyTensor> lazy;  // set for lazy tensors
  std::optional<Fingerprint> fingerprint;  // the recorded whole-tensor fingerprint, if any
  uint64_t NumElements() const;
  uint64_t NumBytes() const { return NumElements() * DTypeSize(dtype); }
  uint64_t fp_seed() const { return FingerprintSeed(name, dtype, shape); }
};

class Catalog {
 public:
  virtual ~Catalog() = default;
  virtual const std::vector<TensorRecord>& tensors() const = 0;
  /// Where the catalog came from (a file name), for messages.
  virtual std::string origin() const = 0;
  /// Writes region `r` of tensor `i` (row-major) into `out`. Lazy tensors are materialized;
  /// dense ones are read (only what the region needs). Errors name the tensor.
  virtual Status Read(size_t i, const Region& r, void* out, CpuOptions o = {}) const = 0;
  /// Fingerprint of region `r` of tensor `i`. Lazy: generated and hashed without a full buffer.
  virtual Result<Fingerprint> FingerprintRegion(size_t i, const Region& r,
                                                CpuOptions o = {}) const;
  /// Index of the tensor called `name`, or -1.
  int Find(const std::string& name) const;
};

/// A catalog of lazy tensors from a spec (the JSON spec file).
class SpecCatalog : public Catalog {
 public:
  static Result<std::unique_ptr<SpecCatalog>> Create(const ModelSpec& spec, std::string origin);
  const std::vector<TensorRecord>& tensors() const override { return records_; }
  std::string origin() const override { return origin_; }
  Status Read(size_t i, const Region& r, void* out, CpuOptions o = {}) const override;
  const ModelSpec& spec() const { return spec_; }

 private:
  ModelSpec spec_;
  std::string origin_;
  std::vector<TensorRecord> records_;
};

/// Matches a tensor name against a glob (fnmatch, no special treatment of '.' or '/').
bool GlobMatch(const std::string& pattern, const std::string& name);

}  // namespace seedstore
