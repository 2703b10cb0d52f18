// seedstore demo: the main job on a built-in default. A real architecture (Llama-3-8B with
// Hugging Face's init rules) is described lazily; a few ranks' shards are materialized under
// two layouts (FSDP=8 flat sharding, and FSDP=4 x TP=2 with Megatron-style column/row
// parallel boxes); every tensor's fingerprint is computed under both layouts as the sum of
// its distinct shards' fingerprints, and compared. The lazy model is then saved as a store
// (a few KB), a few tensors get a train-like update and become dense, and the store is
// reopened and the updated tensors verified (chunk checksums and fingerprints).
#include <chrono>
#include <cstdio>

#include "io/demo.h"
#include "io/h5store.h"
#include "store/catalog.h"
#include "store/presets.h"
#include "tools/cli.h"
#include "tools/output.h"

namespace seedstore::cli {
namespace {

struct Options {
  std::string preset = "llama-3-8b", generator = "threefry";
  std::vector<int> ranks = {0, 5};
  uint64_t seed = 0;
  int threads = 0;
  std::string store = "demo-llama-3-8b.seedstore.h5";
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Saves the lazy model as a store with its fingerprints, replaces a few tensors by trained
// (dense) values, reopens the store and verifies the updated tensors.
Status SaveUpdateVerify(const Catalog& c, const ModelSpec& spec,
                        const std::vector<Fingerprint>& fps, const Options& o) {
  double t = Now();
  SEEDSTORE_RETURN_IF_ERROR(SaveLazyStore(o.store, spec, fps));
  {
    SEEDSTORE_ASSIGN_OR_RETURN(auto st, H5Store::Open(o.store));
    std::printf(
        "saved lazily: %s, %zu tensors, %.1f KB (%.2f s); inspect with `seedstore inspect %s`\n",
        o.store.c_str(), st->tensors().size(), st->file_bytes() / 1e3, Now() - t, o.store.c_str());
  }
  // Train-like update of a few tensors: they become dense.
  const std::vector<std::string>& names = DemoUpdatedTensors();
  t = Now();
  SEEDSTORE_RETURN_IF_ERROR(UpdateToDense(o.store, c, names));
  SEEDSTORE_ASSIGN_OR_RETURN(auto st, H5Store::Open(o.store));
  std::printf("updated %zu tensors to dense values and saved atomically: %.1f MB (%.2f s)\n",
              names.size(), st->file_bytes() / 1e6, Now() - t);
  // Verify the updated tensors: every chunk checksum (checked on read) and the fingerprint.
  for (const auto& n : names) {
    SEEDSTORE_ASSIGN_OR_RETURN(const Fingerprint f, VerifyDense(*st, n));
    std::printf("  verified %-40s dense  %s  (was %s)\n", n.c_str(), FingerprintHex(f).c_str(),
                FingerprintHex(fps[c.Find(n)]).c_str());
  }
  std::printf("`seedstore verify %s` checks every chunk and recomputes every fingerprint\n",
              o.store.c_str());
  return Status::Ok();
}

int Run(const Options& o) {
  const double t0 = Now();
  auto g = ParseGenerator(o.generator);
  if (!g.ok()) return Fail(g.status().WithContext("--generator"));
  auto spec = Preset(o.preset, o.seed, *g);
  if (!spec.ok()) return Fail(spec.status());
  auto cat = SpecCatalog::Create(*spec, "preset " + o.preset);
  if (!cat.ok()) return Fail(cat.status());
  const Catalog& c = **cat;
  uint64_t params = 0;
  for (const auto& t : c.tensors()) params += t.NumElements();
  std::printf("model: %s, %zu tensors, %s parameters, generator %s, seed %llu (lazy: no bytes)\n",
              o.preset.c_str(), c.tensors().size(), CountText(params).c_str(), o.generator.c_str(),
              static_cast<unsigned long long>(o.seed));
  auto layouts = DemoLayouts();
  if (!layouts.ok()) return Fail(layouts.status());
  // 1. Materialize a few ranks' shards on the CPU.
  for (const auto& [name, layout] : *layouts) {
    for (int rank : o.ranks) {
      if (rank < 0 || rank >= layout.world_size())
        return Fail(
            InvalidArgument("--ranks: rank " + std::to_string(rank) + " is outside " + name));
      const double t = Now();
      auto done = MaterializeRank(c, layout, rank, CpuOptions{o.threads});
      if (!done.ok()) return Fail(done.status());
      std::printf("materialized %-14s rank %d: %d shards, %.2f GB in %.1f s\n", name.c_str(), rank,
                  done->shards, done->bytes / 1e9, Now() - t);
    }
  }
  // 2. Every tensor's fingerprint under both layouts (sum of distinct shards).
  int agree = 0, differ = 0;
  Progress bar("fingerprinting", c.tensors().size() * layouts->size());
  const double tf = Now();
  std::vector<std::string> examples;
  std::vector<Fingerprint> fingerprints;
  for (size_t i = 0; i < c.tensors().size(); ++i) {
    std::vector<Fingerprint> fps;
    for (const auto& [name, layout] : *layouts) {
      auto f = LayoutFingerprint(c, i, layout, CpuOptions{o.threads});
      if (!f.ok()) return Fail(f.status());
      fps.push_back(*f);
      bar.Advance();
    }
    const bool same = fps[0] == fps[1];
    fingerprints.push_back(fps[0]);
    (same ? agree : differ)++;
    const std::string& nm = c.tensors()[i].name;
    if (!same || i < 3 || i + 1 == c.tensors().size())
      examples.push_back((same ? "  agree   " : "  DIFFER  ") + FingerprintHex(fps[0]) + "  " +
                         FingerprintHex(fps[1]) + "  " + nm);
  }
  std::printf("fingerprints (FSDP=8 | FSDP=4 x TP=2), %.1f s:\n", Now() - tf);
  for (const auto& e : examples) std::printf("%s\n", e.c_str());
  std::printf("%d of %zu tensors agree between the layouts, %d differ (%.1f s so far)\n", agree,
              c.tensors().size(), differ, Now() - t0);
  if (differ) return 1 + static_cast<int>(Code::kMismatch);
  if (auto st = SaveUpdateVerify(c, *spec, fingerprints, o); !st.ok()) return Fail(st);
  std::printf("done in %.1f s\n", Now() - t0);
  return 0;
}

Register reg({"demo", "Main job: lazy Llama-3-8B, shards under two layouts, fingerprints agree",
              [](CLI::App& app) {
                auto o = std::make_shared<Options>();
                app.add_option("--preset", o->preset, "Built-in model preset");
                app.add_option("--generator", o->generator,
                               "threefry (JAX-exact) or philox (native)");
                AddInteger(app, "--ranks", &o->ranks,
                           "Ranks whose shards to materialize (default 0,5)", 0)
                    ->delimiter(',');
                AddInteger(app, "--seed", &o->seed, "Root seed, 0..2^64-1 (default 0)");
                AddThreadsOption(app, &o->threads, "CPU threads", "all cores");
                app.add_option("--store", o->store, "Store file the demo writes");
                return [o] { return Run(*o); };
              }});

}  // namespace
}  // namespace seedstore::cli
