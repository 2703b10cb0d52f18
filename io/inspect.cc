#include "io/inspect.h"

#include "store/layout.h"

namespace seedstore {

Result<InspectReport> Inspect(const Catalog& c, const std::string& source,
                              const std::string& glob) {
  SEEDSTORE_RETURN_IF_ERROR(CheckGlobMatches(glob, {&c}));
  const auto& ts = c.tensors();
  std::vector<size_t> listed;
  for (size_t i = 0; i < ts.size(); ++i)
    if (GlobMatch(glob, ts[i].name)) listed.push_back(i);
  SEEDSTORE_ASSIGN_OR_RETURN(StorageSummary storage, c.Storage(listed));
  InspectReport r;
  r.source = source;
  r.rank = c.shard_rank();
  r.kind = storage.kind;
  r.file_bytes = storage.file_bytes;
  r.files = storage.files;
  r.world = storage.world;
  if (r.kind == StorageKind::kStore || r.kind == StorageKind::kDistributed) {
    r.seed = c.root_seed();
    r.generator = c.generator();
  }
  for (size_t k = 0; k < listed.size(); ++k) {
    InspectRow row;
    static_cast<TensorStorage&>(row) = std::move(storage.tensors[k]);
    row.record = &ts[listed[k]];
    r.parameters += row.record->NumElements();
    (row.dense ? r.dense : r.lazy) += 1;
    r.bytes_on_disk += row.bytes_on_disk;
    r.rows.push_back(std::move(row));
  }
  return r;
}

nlohmann::json InspectReport::ToJson() const {
  nlohmann::json rows_json = nlohmann::json::array();
  for (const InspectRow& row : rows) {
    const TensorRecord& t = *row.record;
    nlohmann::json j = {{"name", t.name},
                        {"shape", t.shape},
                        {"dtype", DTypeName(t.dtype)},
                        {"kind", row.dense ? "dense" : "lazy"},
                        {"bytes", t.NumBytes()},
                        {"bytes_on_disk", row.bytes_on_disk}};
    j["fingerprint"] =
        t.fingerprint ? nlohmann::json(FingerprintHex(*t.fingerprint)) : nlohmann::json(nullptr);
    if (row.dense && kind == StorageKind::kStore) {
      j["chunk"] = row.chunk;
      j["chunks"] = row.chunks;
      j["chunk_info"] = row.chunk_info;
      j["codec"] = row.codec;
      if (t.piece)
        j["piece"] = {
            {"shape", std::vector<uint64_t>(t.piece->shape, t.piece->shape + t.piece->rank)},
            {"region", RegionToJson(*t.piece)}};
    } else if (row.dense && kind == StorageKind::kDistributed) {
      j["pieces"] = row.pieces;
      j["chunks"] = row.chunks;
    } else if (t.lazy) {
      j["init"] = t.lazy->spec.init.ToJson();
      j["generator"] = GeneratorName(t.lazy->spec.generator);
      j["key"] = {t.lazy->key.k0, t.lazy->key.k1};
    }
    rows_json.push_back(std::move(j));
  }
  nlohmann::json j = {{"source", source},
                      {"tensors", std::move(rows_json)},
                      {"parameters", parameters},
                      {"lazy", lazy},
                      {"dense", dense}};
  if (rank) j["rank"] = *rank;  // a rank's shards
  if (kind == StorageKind::kStore) {
    j["file_bytes"] = file_bytes;
    j["seed"] = seed;
    j["generator"] = GeneratorName(generator);
  } else if (kind == StorageKind::kSafetensors) {
    j["files"] = files;
  } else if (kind == StorageKind::kDistributed) {
    j["world"] = world;
    j["seed"] = seed;
    j["generator"] = GeneratorName(generator);
  }
  return j;
}

}  // namespace seedstore
