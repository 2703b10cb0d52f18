// seedstore init: a new store from a built-in preset or a spec file, every tensor lazy.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "io/h5store.h"
#include "store/presets.h"
#include "tools/cli.h"
#include "tools/output.h"

namespace seedstore::cli {
namespace {

struct Options {
  std::string preset, spec, out, generator = "threefry";
  uint64_t seed = 0;
  bool no_fingerprints = false, json = false, list = false;
  int threads = 0;
};

int Run(const Options& o) {
  if (o.list) {
    for (const auto& n : PresetNames()) std::printf("%s\n", n.c_str());
    return 0;
  }
  if (o.preset.empty() == o.spec.empty())
    return Fail(InvalidArgument("give exactly one of --preset NAME or --spec SPEC.json"));
  if (o.out.empty()) return Fail(InvalidArgument("-o STORE is required"));
  if (!o.spec.empty())
    if (auto st = CheckOutputIsNotInput(o.out, o.spec); !st.ok()) return Fail(st);
  auto g = ParseGenerator(o.generator);
  if (!g.ok()) return Fail(g.status().WithContext("--generator"));
  Result<ModelSpec> spec =
      o.preset.empty() ? ModelSpec::Load(o.spec) : Preset(o.preset, o.seed, *g);
  if (!spec.ok()) return Fail(spec.status());
  auto w = StoreWriter::Create(o.out, spec->seed, spec->generator);
  if (!w.ok()) return Fail(w.status());
  uint64_t params = 0, bytes = 0;
  for (const auto& t : spec->tensors) {
    params += t.NumElements();
    bytes += t.NumElements() * DTypeSize(t.dtype);
  }
  {
    Progress p("fingerprinting", o.no_fingerprints ? 0 : params);
    for (const auto& t : spec->tensors) {
      if (auto s = (*w)->AddLazy(t, nullptr, !o.no_fingerprints, CpuOptions{o.threads}); !s.ok())
        return Fail(s);
      p.Advance(t.NumElements());
    }
  }
  if (auto s = (*w)->Commit(); !s.ok()) return Fail(s);
  if (o.json) {
    nlohmann::json j = {{"store", o.out},
                        {"tensors", spec->tensors.size()},
                        {"parameters", params},
                        {"dense_bytes", bytes},
                        {"seed", spec->seed},
                        {"generator", GeneratorName(spec->generator)},
                        {"fingerprints", !o.no_fingerprints}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("wrote %s: %zu lazy tensors, %s parameters (%.6g GB if dense), seed %llu, %s\n",
                o.out.c_str(), spec->tensors.size(), CountText(params).c_str(), bytes / 1e9,
                static_cast<unsigned long long>(spec->seed), GeneratorName(spec->generator));
  }
  return 0;
}

Register reg(
    {"init", "Create a store from a preset or a spec, every tensor lazy", [](CLI::App& app) {
       auto o = std::make_shared<Options>();
       auto* preset = app.add_option("--preset", o->preset, "Built-in model (see --list)");
       auto* spec = app.add_option("--spec", o->spec, "Spec JSON file");
       preset->excludes(spec);
       AddInteger(app, "--seed", &o->seed, "Root seed of the preset, 0..2^64-1 (default 0)")
           ->excludes(spec);
       app.add_option("--generator", o->generator, "threefry (JAX-exact, default) or philox")
           ->excludes(spec);
       app.add_option("-o,--output", o->out, "Store file to create (replaced atomically)")
           ->check(FileOutput("store"));
       app.add_flag("--no-fingerprints", o->no_fingerprints,
                    "Do not compute fingerprints now (verify and fingerprint compute them later)");
       app.add_flag("--list", o->list, "List the presets");
       app.add_flag("--json", o->json, "JSON summary");
       AddThreadsOption(app, &o->threads, "CPU threads for fingerprints", "all cores");
       return [o] { return Run(*o); };
     }});

}  // namespace
}  // namespace seedstore::cli
