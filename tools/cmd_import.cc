// seedstore import: safetensors (a file or a model.safetensors.index.json) into a store as
// dense tensors, bit for bit; or, with --update, replace those tensors in an existing store.
#include <sys/stat.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "io/h5store.h"
#include "io/interop.h"
#include "io/open.h"
#include "store/json_text.h"
#include "tools/cli.h"

namespace seedstore::cli {
namespace {

struct Options {
  std::string source, out;
  int level = 1, threads = 0;
  uint64_t chunk_bytes = 1u << 20, seed = 0;
  bool update = false, json = false;
  std::vector<std::string> codecs;
};

int Run(const Options& o) {
  {  // -o must not be the source, nor one of an index's shard files (checked before writing)
    std::unique_ptr<Catalog> index;
    if (IsSafetensorsSource(o.source) && o.source.size() > 5 &&
        o.source.compare(o.source.size() - 5, 5, ".json") == 0) {
      auto c = OpenCatalog(o.source);  // an index that does not open is reported by the import
      if (c.ok()) index = std::move(*c);
    }
    if (auto st = CheckOutputIsNotInput(o.out, o.source, index.get()); !st.ok()) return Fail(st);
  }
  ImportOptions io;
  io.write.zstd_level = o.level;
  io.write.threads = o.threads;
  io.write.chunk_bytes = o.chunk_bytes;
  if (!o.codecs.empty()) {
    auto src = OpenCatalog(o.source);  // one that does not open is reported by the import
    if (src.ok()) {
      if (Status st = ApplyCodecs(o.codecs, **src, &io.write); !st.ok()) return Fail(st);
    }
  }
  io.update = o.update;
  io.seed = o.seed;
  // Progress total: the data bytes (file size, or the index's metadata.total_size).
  uint64_t total = 0;
  struct stat sst;
  if (!NotARegularFile(o.source).empty()) {
    // ImportSafetensors names what it is
  } else if (o.source.size() > 5 && o.source.compare(o.source.size() - 5, 5, ".json") == 0) {
    const Result<std::string> text =
        ReadTextFile(o.source, o.source);  // unreadable: import says why
    const nlohmann::json j = ParseJson(text.ok() ? *text : std::string(), nullptr);
    if (!j.is_discarded() && j.is_object() && j.contains("metadata") && j["metadata"].is_object() &&
        j["metadata"].contains("total_size") && j["metadata"]["total_size"].is_number_unsigned())
      total = j["metadata"]["total_size"].get<uint64_t>();
  } else if (::stat(o.source.c_str(), &sst) == 0) {
    total = static_cast<uint64_t>(sst.st_size);
  }
  Result<int> n = 0;
  {
    Progress p("importing", total);
    n = ImportSafetensors(o.source, o.out, io, [&p](uint64_t b) { p.Advance(b); });
  }
  if (!n.ok()) return Fail(n.status());
  struct stat st;
  const uint64_t size = ::stat(o.out.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  if (o.json) {
    std::printf(
        "%s\n",
        nlohmann::json({{"store", o.out}, {"imported", *n}, {"file_bytes", size}}).dump(2).c_str());
  } else {
    std::printf("%s %d tensor(s) into %s (%llu bytes)\n", o.update ? "updated" : "imported", *n,
                o.out.c_str(), static_cast<unsigned long long>(size));
  }
  return 0;
}

Register reg(
    {"import", "Import safetensors (file or index.json) into a store as dense tensors",
     [](CLI::App& app) {
       auto o = std::make_shared<Options>();
       app.add_option("source", o->source, "model.safetensors or model.safetensors.index.json")
           ->required();
       app.add_option("-o,--output", o->out, "Store file")->required()->check(FileOutput("store"));
       app.add_flag(
           "--update", o->update,
           "Replace these tensors in the existing one-file store (same shape and dtype), keep the "
           "rest; a distributed save is refused (reshard --consolidate makes a store of it)");
       AddInteger(app, "--seed", &o->seed,
                  "Root seed recorded in a new store, 0..2^64-1 (default 0); not with --update "
                  "(the store keeps its own)")
           ->excludes("--update");
       AddInteger(app, "--zstd-level", &o->level, "zstd level 1..22 (default 1)", kMinZstdLevel,
                  kMaxZstdLevel);
       AddInteger<uint64_t>(
           app, "--chunk-bytes", &o->chunk_bytes,
           "Target uncompressed chunk size in bytes, 1..2147483648 (default 1 MiB)", 1,
           uint64_t{1} << 31);
       AddCodecOption(app, &o->codecs);
       AddThreadsOption(app, &o->threads, "Compression threads", "all cores");
       app.add_flag("--json", o->json, "JSON output");
       return [o] { return Run(*o); };
     }});

}  // namespace
}  // namespace seedstore::cli
