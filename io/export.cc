#include "io/export.h"

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace seedstore {

Result<int> ExportSafetensors(const Catalog& c, const std::string& path, const ExportOptions& o) {
  SafetensorsWriter w;
  nlohmann::json shards = nlohmann::json::object();
  int n = 0;
  const auto& ts = c.tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorRecord& t = ts[i];
    if (!GlobMatch(o.tensors_glob, t.name)) continue;
    Region r = WholeTensor(t.shape);
    std::vector<uint64_t> shape = t.shape;
    if (o.layout) {
      SEEDSTORE_ASSIGN_OR_RETURN(Shard s, o.layout->ShardOf(t.name, t.shape, o.rank));
      if (s.empty()) continue;
      r = s.region;
      nlohmann::json m = {{"global_shape", t.shape}};
      if (r.flat) {
        m["flat"] = {r.begin, r.end};
        shape = {r.end - r.begin};
      } else {
        std::vector<uint64_t> start(r.start, r.start + r.rank), stop(r.stop, r.stop + r.rank);
        m["start"] = start;
        m["stop"] = stop;
        for (int d = 0; d < r.rank; ++d) shape[d] = r.stop[d] - r.start[d];
      }
      shards[t.name] = m;
    }
    const CpuOptions cpu = o.cpu;
    const Device dev = o.device;
    w.Add(t.name, t.dtype, shape,
          [&c, i, r, cpu, dev](void* dst) { return ReadOnDevice(dev, c, i, r, dst, cpu); });
    ++n;
  }
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"seedstore.version", "1"}};
  if (o.layout) {
    meta["seedstore.shards"] = shards.dump();
    meta["seedstore.rank"] = std::to_string(o.rank);
  }
  SEEDSTORE_RETURN_IF_ERROR(w.Write(path, meta));
  return n;
}

}  // namespace seedstore
