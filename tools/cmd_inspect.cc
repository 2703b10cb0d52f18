// seedstore inspect: the tensors of a store (or spec): name, shape, dtype, lazy/dense, bytes on
// disk, fingerprint.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "io/dist_store.h"
#include "io/h5store.h"
#include "io/interop.h"
#include "io/open.h"
#include "tools/cli.h"
#include "tools/output.h"

namespace seedstore::cli {
namespace {

struct Options {
  std::string source, tensors = "*";
  bool json = false;
};

std::string ShapeStr(const std::vector<uint64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
  return t + "]";
}

int Run(const Options& o) {
  auto cat = OpenCatalog(o.source);
  if (!cat.ok()) return Fail(cat.status());
  const auto* store = dynamic_cast<const H5Store*>(cat->get());
  const auto* dist = dynamic_cast<const DistCatalog*>(cat->get());
  const auto* safetensors = dynamic_cast<const SafetensorsCatalog*>(cat->get());
  if (Status g = CheckGlobMatches(o.tensors, {cat->get()}); !g.ok()) return Fail(g);
  const auto& ts = (*cat)->tensors();
  // A listed tensor whose objects are damaged fails the listing (its storage is unknown); the
  // others list as usual (--tensors).
  for (size_t i = 0; store && i < ts.size(); ++i)
    if (GlobMatch(o.tensors, ts[i].name) && !store->Damage(i).ok()) return Fail(store->Damage(i));
  nlohmann::json rows = nlohmann::json::array();
  uint64_t params = 0, lazy = 0, dense = 0, on_disk = 0;
  size_t wname = 4, wshape = 5;
  for (const auto& t : ts) {
    if (!GlobMatch(o.tensors, t.name)) continue;
    wname = std::max(wname, TextWidth(t.name));
    wshape = std::max(wshape, ShapeStr(t.shape).size());
  }
  if (!o.json)
    std::printf("%s  %-*s  %-8s  %-5s  %14s  %s\n", PadRight("name", wname).c_str(),
                static_cast<int>(wshape), "shape", "dtype", "kind", "bytes_on_disk", "fingerprint");
  std::vector<DistCatalog::Storage> dist_storage;
  if (dist) {  // from the index; a save from before it records them: each rank file in turn
    auto s = dist->StorageOfAll();
    if (!s.ok()) return Fail(s.status());
    dist_storage = std::move(*s);
  }
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorRecord& t = ts[i];
    if (!GlobMatch(o.tensors, t.name)) continue;
    const bool is_dense = store ? store->stored(i).dense : !t.lazy;  // other catalogs: no spec = dense
    uint64_t disk = store ? store->stored(i).stored_bytes : safetensors ? t.NumBytes() : 0;
    uint64_t chunks = store ? store->stored(i).num_chunks : 0;
    if (dist && is_dense) {  // a distributed save: its pieces in the rank files
      disk += dist_storage[i].stored_bytes;
      chunks += dist_storage[i].chunks;
    }
    params += t.NumElements();
    (is_dense ? dense : lazy) += 1;
    on_disk += disk;
    const std::string fp = t.fingerprint ? FingerprintHex(*t.fingerprint) : "-";
    if (o.json) {
      nlohmann::json r = {{"name", t.name},  {"shape", t.shape}, {"dtype", DTypeName(t.dtype)},
                          {"kind", is_dense ? "dense" : "lazy"}, {"bytes", t.NumBytes()},
                          {"bytes_on_disk", disk}};
      r["fingerprint"] = t.fingerprint ? nlohmann::json(fp) : nlohmann::json(nullptr);
      if (is_dense && store) {
        r["chunk"] = store->stored(i).chunk;
        r["chunks"] = chunks;
        r["chunk_info"] = !store->chunk_info(i).empty();
        if (t.piece)
          r["piece"] = {{"shape", std::vector<uint64_t>(t.piece->shape, t.piece->shape + t.piece->rank)},
                        {"region", RegionToJson(*t.piece)}};
      } else if (is_dense && dist) {
        r["pieces"] = dist->pieces(i).size();
        r["chunks"] = chunks;
      } else if (t.lazy) {
        r["init"] = t.lazy->spec.init.ToJson();
        r["generator"] = GeneratorName(t.lazy->spec.generator);
        r["key"] = {t.lazy->key.k0, t.lazy->key.k1};
      }
      rows.push_back(r);
    } else {
      std::printf("%s  %-*s  %-8s  %-5s  %14llu  %s\n", PadRight(t.name, wname).c_str(),
                  static_cast<int>(wshape), ShapeStr(t.shape).c_str(), DTypeName(t.dtype),
                  is_dense ? "dense" : "lazy", static_cast<unsigned long long>(disk), fp.c_str());
    }
  }
  if (o.json) {
    nlohmann::json j = {{"source", o.source}, {"tensors", rows}, {"parameters", params},
                        {"lazy", lazy},       {"dense", dense}};
    if (const std::optional<int> rank = (*cat)->shard_rank()) j["rank"] = *rank;  // a rank's shards
    if (store) {
      j["file_bytes"] = store->file_bytes();
      j["seed"] = store->root_seed();
      j["generator"] = GeneratorName(store->generator());
    } else if (safetensors) {
      j["files"] = safetensors->num_files();
    } else if (dist) {
      j["world"] = dist->world();
      j["seed"] = dist->root_seed();
      j["generator"] = GeneratorName(dist->generator());
    }
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%llu tensors (%llu lazy, %llu dense), %s parameters",
                static_cast<unsigned long long>(lazy + dense), static_cast<unsigned long long>(lazy),
                static_cast<unsigned long long>(dense), CountText(params).c_str());
    if (store)
      std::printf(", file %llu bytes, seed %llu, %s", static_cast<unsigned long long>(store->file_bytes()),
                  static_cast<unsigned long long>(store->root_seed()), GeneratorName(store->generator()));
    if (safetensors)
      std::printf(", safetensors in %zu file%s", safetensors->num_files(), safetensors->num_files() == 1 ? "" : "s");
    if (dist)
      std::printf(", distributed save over %d rank files, %llu bytes on disk in them, seed %llu, %s",
                  dist->world(), static_cast<unsigned long long>(on_disk),
                  static_cast<unsigned long long>(dist->root_seed()), GeneratorName(dist->generator()));
    std::printf("\n");
  }
  return 0;
}

Register reg({"inspect", "List the tensors of a store: shape, dtype, lazy/dense, size, fingerprint",
              [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("source", o->source, "Store, distributed save, spec (.json) or safetensors (file or index.json)")->required();
  app.add_option("--tensors", o->tensors, "Glob of tensor names (default *)");
  app.add_flag("--json", o->json, "JSON output");
  return [o] { return Run(*o); };
}});

}  // namespace
}  // namespace seedstore::cli
