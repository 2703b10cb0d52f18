// A live job's own shard buffers as a catalog, for SaveBuffers (io/reshard.h; internal to io/).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/chunk_grid.h"
#include "io/collective.h"
#include "io/reshard.h"
#include "store/catalog.h"
#include "store/layout.h"

namespace seedstore {

// This rank's shard buffers as a catalog: any region inside the rank's own shard can be read.
class BufferCatalog : public Catalog {
 public:
  static Result<std::unique_ptr<BufferCatalog>> Create(const std::vector<ParamBuffer>& params,
                                                       const Layout& layout, int rank,
                                                       const DistSaveOptions& o) {
    auto c = std::make_unique<BufferCatalog>();
    c->root_seed_ = o.root_seed;
    c->generator_ = o.generator;
    for (const ParamBuffer& p : params) {
      TensorRecord rec;
      rec.name = p.name;
      rec.shape = p.shape;
      rec.dtype = p.dtype;
      SEEDSTORE_ASSIGN_OR_RETURN(Shard sh, layout.ShardOf(p.name, p.shape, rank));
      const uint64_t want = sh.region.Count() * DTypeSize(p.dtype);
      if (p.on_device)
        return InvalidArgument("save: tensor '" + p.name + "': device buffers are not supported");
      if (p.bytes != want)
        return InvalidArgument("save: tensor '" + p.name + "': buffer of " +
                               std::to_string(p.bytes) + " bytes, the shard " +
                               DescribeRegion(sh.region) + " needs " + std::to_string(want));
      if (!p.data && want > 0) return InvalidArgument("save: tensor '" + p.name + "': null data");
      c->records_.push_back(std::move(rec));
      c->shards_.push_back(sh.region);
      c->data_.push_back(static_cast<const unsigned char*>(p.data));
    }
    return c;
  }
  const std::vector<TensorRecord>& tensors() const override { return records_; }
  std::string origin() const override { return "<buffers>"; }
  Status Read(size_t i, const Region& r, void* out, CpuOptions) const override {
    const Region& s = shards_.at(i);
    const size_t es = DTypeSize(records_[i].dtype);
    auto outside = [&] {
      return InvalidArgument("save: tensor '" + records_[i].name + "': region " +
                             DescribeRegion(r) + " is outside this rank's shard " +
                             DescribeRegion(s));
    };
    if (r.Count() == 0) return Status::Ok();
    if (s.flat || r.flat) {
      if (!(s.flat && r.flat) || r.begin < s.begin || r.end > s.end) return outside();
      std::memcpy(out, data_[i] + (r.begin - s.begin) * es, r.Count() * es);
      return Status::Ok();
    }
    uint64_t sext[kMaxRank], off[kMaxRank], ext[kMaxRank];
    for (int d = 0; d < r.rank; ++d) {
      if (r.start[d] < s.start[d] || r.stop[d] > s.stop[d]) return outside();
      sext[d] = s.stop[d] - s.start[d];
      off[d] = r.start[d] - s.start[d];
      ext[d] = r.stop[d] - r.start[d];
    }
    CopyBox(data_[i], sext, off, static_cast<unsigned char*>(out), ext, nullptr, ext, r.rank, es);
    return Status::Ok();
  }
  const void* HostData(size_t i, const Region& r) const override {
    return SameRegion(r, shards_.at(i)) ? data_[i] : nullptr;
  }
  uint64_t root_seed() const override { return root_seed_; }
  Generator generator() const override { return generator_; }

 private:
  uint64_t root_seed_ = 0;
  Generator generator_ = Generator::kThreefry;
  std::vector<TensorRecord> records_;
  std::vector<Region> shards_;
  std::vector<const unsigned char*> data_;
};

}  // namespace seedstore
