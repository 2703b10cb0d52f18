// seedstore verify: every chunk checksum of a store or distributed save (all its rank files),
// and every fingerprint recomputed (lazy ones from their spec; a distributed tensor's as the sum
// of its pieces'). Corruption is reported with file, tensor and chunk; exit code non-zero.
// Safetensors (which records neither checksums nor fingerprints) is UNSUPPORTED, pointing to diff.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "io/dist_store.h"
#include "io/h5store.h"
#include "io/interop.h"
#include "tools/cli.h"

namespace seedstore::cli {
namespace {

struct Options {
  std::string source;
  bool json = false;
  int threads = 0;
};

int Run(const Options& o) {
  // A store, or a distributed save (its master and every rank file).
  std::unique_ptr<H5Store> store;
  std::unique_ptr<DistCatalog> dist;
  Status open;
  if (IsSafetensorsSource(o.source)) {  // valid input, but nothing in it to verify
    open = Unsupported(
        "'" + o.source +
        "' is safetensors, not a seedstore store: verify checks the chunk checksums and "
        "recorded fingerprints of seedstore stores and distributed saves, and a safetensors "
        "file records no checksums or fingerprints. To check its weights against another "
        "checkpoint, run: seedstore diff " +
        o.source + " OTHER");
  } else if (o.source.size() > 5 && o.source.compare(o.source.size() - 5, 5, ".json") == 0 &&
             !LooksLikeHdf5(o.source)) {  // a spec: nothing stored
    open = Unsupported(
        "'" + o.source +
        "' is a spec (JSON), not a seedstore store: it stores no data, so there are no chunk "
        "checksums or recorded fingerprints to verify. Its fingerprints: seedstore "
        "fingerprint " +
        o.source + "; against a checkpoint: seedstore diff " + o.source + " OTHER");
  } else if (IsDistributedSave(o.source)) {
    auto d = DistCatalog::Open(o.source, /*check_rank_files=*/false);  // Verify names each one
    open = d.status();
    if (d.ok()) dist = std::move(*d);
  } else {
    auto s = H5Store::Open(o.source);
    open = s.status();
    if (s.ok()) store = std::move(*s);
  }
  if (!open.ok()) {
    if (o.json) {
      nlohmann::json j = {{"file", o.source}, {"ok", false}, {"error", open.ToString()}};
      std::printf("%s\n", j.dump(2).c_str());
    }
    return Fail(open);
  }
  const Catalog& cat = store ? static_cast<const Catalog&>(*store) : *dist;
  uint64_t total = 0;
  for (const auto& t : cat.tensors()) total += t.NumBytes();
  H5Store::VerifyReport rep;
  {
    Progress p("verifying", total);
    auto advance = [&p](uint64_t n) { p.Advance(n); };
    rep = store ? store->Verify(CpuOptions{o.threads}, advance)
                : dist->Verify(CpuOptions{o.threads}, advance);
  }
  const auto& ts = cat.tensors();
  if (o.json) {
    nlohmann::json tensors = nlohmann::json::array();
    for (size_t i = 0; i < ts.size(); ++i) {
      // "fingerprint": the recomputed content hash, null when not every element could be read.
      nlohmann::json t = {
          {"name", ts[i].name},
          {"kind", ts[i].lazy ? "lazy" : "dense"},
          {"ok", static_cast<bool>(rep.ok[i])},
          {"fingerprint", rep.complete[i] ? nlohmann::json(FingerprintHex(rep.fingerprints[i]))
                                          : nlohmann::json(nullptr)}};
      t["recorded"] = ts[i].fingerprint ? nlohmann::json(FingerprintHex(*ts[i].fingerprint))
                                        : nlohmann::json(nullptr);
      tensors.push_back(t);
    }
    nlohmann::json problems = nlohmann::json::array();
    for (const auto& p : rep.problems)
      problems.push_back({{"tensor", p.tensor},
                          {"chunk", p.chunk},
                          {"code", CodeName(p.status.code())},
                          {"message", p.status.message()}});
    nlohmann::json j = {{"file", o.source},
                        {"ok", rep.problems.empty()},
                        {"tensors", tensors},
                        {"chunks", rep.chunks},
                        {"problems", problems}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    for (const auto& p : rep.problems)
      std::printf("FAIL %s%s: %s\n", p.tensor.empty() ? "(file)" : ShownText(p.tensor).c_str(),
                  p.chunk >= 0 ? (" chunk " + std::to_string(p.chunk)).c_str() : "",
                  p.status.ToString().c_str());
    size_t unrecorded = 0;
    for (const auto& t : ts) unrecorded += !t.fingerprint;
    std::printf("%s: %zu tensors, %llu chunks checked, %zu problem(s)%s\n", o.source.c_str(),
                ts.size(), static_cast<unsigned long long>(rep.chunks), rep.problems.size(),
                unrecorded ? (", " + std::to_string(unrecorded) +
                              " tensor(s) had no recorded fingerprint (computed now)")
                                 .c_str()
                           : "");
  }
  return rep.problems.empty() ? 0 : ExitCode(rep.problems[0].status);
}

Register reg(
    {"verify",
     "Check every chunk checksum and recompute every fingerprint of a store or a distributed save",
     [](CLI::App& app) {
       auto o = std::make_shared<Options>();
       app.add_option("file", o->source, "Store file, or a distributed save's master")->required();
       app.add_flag("--json", o->json, "JSON report");
       AddThreadsOption(app, &o->threads, "CPU threads", "all cores");
       return [o] { return Run(*o); };
     }});

}  // namespace
}  // namespace seedstore::cli
