#include "io/inspect.h"

#include "io/dist_store.h"
#include "io/h5store.h"
#include "io/interop.h"
#include "store/layout.h"

namespace seedstore {

Result<InspectReport> Inspect(const Catalog& c, const std::string& source,
                              const std::string& glob) {
  const auto* store = dynamic_cast<const H5Store*>(&c);
  const auto* dist = dynamic_cast<const DistCatalog*>(&c);
  const auto* safetensors = dynamic_cast<const SafetensorsCatalog*>(&c);
  SEEDSTORE_RETURN_IF_ERROR(CheckGlobMatches(glob, {&c}));
  const auto& ts = c.tensors();
  for (size_t i = 0; store && i < ts.size(); ++i)
    if (GlobMatch(glob, ts[i].name) && !store->Damage(i).ok()) return store->Damage(i);
  InspectReport r;
  r.source = source;
  r.rank = c.shard_rank();
  std::vector<DistCatalog::Storage> dist_storage;
  if (store) {
    r.kind = InspectSource::kStore;
    r.file_bytes = store->file_bytes();
    r.seed = store->root_seed();
    r.generator = store->generator();
  } else if (dist) {
    r.kind = InspectSource::kDistributed;
    r.world = dist->world();
    r.seed = dist->root_seed();
    r.generator = dist->generator();
    // From the index; a save from before it records them: each rank file in turn.
    SEEDSTORE_ASSIGN_OR_RETURN(dist_storage, dist->StorageOfAll());
  } else if (safetensors) {
    r.kind = InspectSource::kSafetensors;
    r.files = safetensors->num_files();
  }
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorRecord& t = ts[i];
    if (!GlobMatch(glob, t.name)) continue;
    InspectRow row;
    row.record = &t;
    row.dense = store ? store->stored(i).dense : !t.lazy;  // other catalogs: no spec = dense
    row.bytes_on_disk = store ? store->stored(i).stored_bytes : safetensors ? t.NumBytes() : 0;
    if (store && row.dense) {
      row.chunks = store->stored(i).num_chunks;
      row.chunk = store->stored(i).chunk;
      row.chunk_info = !store->chunk_info(i).empty();
    }
    if (dist && row.dense) {  // a distributed save: its pieces in the rank files
      row.bytes_on_disk += dist_storage[i].stored_bytes;
      row.chunks += dist_storage[i].chunks;
      row.pieces = dist->pieces(i).size();
    }
    r.parameters += t.NumElements();
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
    if (row.dense && kind == InspectSource::kStore) {
      j["chunk"] = row.chunk;
      j["chunks"] = row.chunks;
      j["chunk_info"] = row.chunk_info;
      if (t.piece)
        j["piece"] = {
            {"shape", std::vector<uint64_t>(t.piece->shape, t.piece->shape + t.piece->rank)},
            {"region", RegionToJson(*t.piece)}};
    } else if (row.dense && kind == InspectSource::kDistributed) {
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
  if (kind == InspectSource::kStore) {
    j["file_bytes"] = file_bytes;
    j["seed"] = seed;
    j["generator"] = GeneratorName(generator);
  } else if (kind == InspectSource::kSafetensors) {
    j["files"] = files;
  } else if (kind == InspectSource::kDistributed) {
    j["world"] = world;
    j["seed"] = seed;
    j["generator"] = GeneratorName(generator);
  }
  return j;
}

}  // namespace seedstore
