// seedstore demo: the main job on a built-in default. A real architecture (Llama-3-8B with
// Hugging Face's init rules) is described lazily; a few ranks' shards are materialized under
// two layouts (FSDP=8 flat sharding, and FSDP=4 x TP=2 with Megatron-style column/row
// parallel boxes); every tensor's fingerprint is computed under both layouts as the sum of
// its distinct shards' fingerprints, and compared.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "store/catalog.h"
#include "store/layout.h"
#include "store/presets.h"
#include "tools/cli.h"

namespace seedstore::cli {
namespace {

struct Options {
  std::string preset = "llama-3-8b", generator = "threefry";
  std::vector<int> ranks = {0, 5};
  uint64_t seed = 0;
  int threads = 0;
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* kFsdp8 = R"J({"mesh": {"axes": ["fsdp"], "shape": [8]},
  "placements": [{"match": "*", "flat": ["fsdp"]}]})J";
const char* kFsdp4Tp2 = R"J({"mesh": {"axes": ["fsdp", "tp"], "shape": [4, 2]},
  "placements": [
    {"match": "*.self_attn.[qkv]_proj.weight", "spec": ["tp", "fsdp"]},
    {"match": "*.mlp.gate_proj.weight", "spec": ["tp", "fsdp"]},
    {"match": "*.mlp.up_proj.weight", "spec": ["tp", "fsdp"]},
    {"match": "*.self_attn.o_proj.weight", "spec": ["fsdp", "tp"]},
    {"match": "*.mlp.down_proj.weight", "spec": ["fsdp", "tp"]},
    {"match": "model.embed_tokens.weight", "dtensor": ["Shard(1)", "Shard(0)"]},
    {"match": "lm_head.weight", "dtensor": ["Shard(1)", "Shard(0)"]},
    {"match": "*norm.weight", "spec": [null]}]})J";

// Sum of the fingerprints of a tensor's distinct shards under `layout`.
Result<Fingerprint> LayoutFingerprint(const Catalog& c, size_t i, const Layout& layout, int threads) {
  const TensorRecord& t = c.tensors()[i];
  SEEDSTORE_ASSIGN_OR_RETURN(std::vector<Shard> shards, layout.DistinctShards(t.name, t.shape));
  Fingerprint sum;
  for (const Shard& s : shards) {
    SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint f, c.FingerprintRegion(i, s.region, CpuOptions{threads}));
    sum.Add(f);
  }
  return sum;
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
  std::printf("model: %s, %zu tensors, %.3f B parameters, generator %s, seed %llu (lazy: no bytes)\n",
              o.preset.c_str(), c.tensors().size(), params / 1e9, o.generator.c_str(),
              static_cast<unsigned long long>(o.seed));
  struct Named {
    const char* name;
    Layout layout;
  };
  std::vector<Named> layouts;
  for (auto [name, text] : {std::pair{"FSDP=8 (flat)", kFsdp8}, std::pair{"FSDP=4 x TP=2", kFsdp4Tp2}}) {
    auto l = Layout::Parse(text, name);
    if (!l.ok()) return Fail(l.status());
    layouts.push_back({name, std::move(*l)});
  }
  // 1. Materialize a few ranks' shards on the CPU.
  for (const auto& [name, layout] : layouts) {
    for (int rank : o.ranks) {
      if (rank < 0 || rank >= layout.world_size())
        return Fail(InvalidArgument("--ranks: rank " + std::to_string(rank) + " is outside " + name));
      const double t = Now();
      uint64_t bytes = 0;
      int n = 0;
      std::vector<unsigned char> buf;
      for (size_t i = 0; i < c.tensors().size(); ++i) {
        const TensorRecord& rec = c.tensors()[i];
        auto s = layout.ShardOf(rec.name, rec.shape, rank);
        if (!s.ok()) return Fail(s.status());
        buf.resize(s->region.Count() * DTypeSize(rec.dtype));
        if (auto st = c.Read(i, s->region, buf.data(), CpuOptions{o.threads}); !st.ok()) return Fail(st);
        bytes += buf.size();
        ++n;
      }
      std::printf("materialized %-14s rank %d: %d shards, %.2f GB in %.1f s\n", name, rank, n,
                  bytes / 1e9, Now() - t);
    }
  }
  // 2. Every tensor's fingerprint under both layouts (sum of distinct shards).
  int agree = 0, differ = 0;
  Progress bar("fingerprinting", c.tensors().size() * layouts.size());
  const double tf = Now();
  std::vector<std::string> examples;
  for (size_t i = 0; i < c.tensors().size(); ++i) {
    std::vector<Fingerprint> fps;
    for (const auto& [name, layout] : layouts) {
      auto f = LayoutFingerprint(c, i, layout, o.threads);
      if (!f.ok()) return Fail(f.status());
      fps.push_back(*f);
      bar.Advance();
    }
    const bool same = fps[0] == fps[1];
    (same ? agree : differ)++;
    const std::string& nm = c.tensors()[i].name;
    if (!same || i < 3 || i + 1 == c.tensors().size())
      examples.push_back((same ? "  agree   " : "  DIFFER  ") + FingerprintHex(fps[0]) + "  " +
                         FingerprintHex(fps[1]) + "  " + nm);
  }
  std::printf("fingerprints (FSDP=8 | FSDP=4 x TP=2), %.1f s:\n", Now() - tf);
  for (const auto& e : examples) std::printf("%s\n", e.c_str());
  std::printf("%d of %zu tensors agree between the layouts, %d differ (total %.1f s)\n", agree,
              c.tensors().size(), differ, Now() - t0);
  return differ ? 1 + static_cast<int>(Code::kMismatch) : 0;
}

Register reg({"demo", "Main job: lazy Llama-3-8B, shards under two layouts, fingerprints agree",
              [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--preset", o->preset, "Built-in model preset");
  app.add_option("--generator", o->generator, "threefry (JAX-exact) or philox (native)");
  app.add_option("--ranks", o->ranks, "Ranks whose shards to materialize")->delimiter(',');
  app.add_option("--seed", o->seed, "Root seed");
  app.add_option("--threads", o->threads, "CPU threads (0 = all cores)");
  return [o] { return Run(*o); };
}});

}  // namespace
}  // namespace seedstore::cli
