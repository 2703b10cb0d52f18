// seedstore reshard: any catalog (spec, store, distributed save) -> a distributed save under a
// new layout (or one store with --consolidate), with every tensor's fingerprint proven equal
// to the source's. Alone it writes every rank's file; under mpirun each process writes its
// ranks' files in parallel and rank 0 writes the master after a barrier.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "io/collective.h"
#include "io/dist_store.h"
#include "io/h5store.h"
#include "io/open.h"
#include "tools/cli.h"

namespace seedstore::cli {
namespace {

struct ReshardOptions {
  std::string source, layout, output, backend = "auto", simulate = "none";
  bool consolidate = false, json = false, quiet = false, full_proof = false;
  double timeout = 600, max_padding = 0.25;
  int rank_file_version = kCellsFormatVersion;
  int threads = 0, zstd_level = 1, simulate_rank = 1;
  std::vector<std::string> codecs;
};

int RunOn(Collective& c, const ReshardOptions& o, std::string* outcome) {
  const int me = c.rank();
  auto finish = [&](const Status& st) { return SaveStepFailure(c, st); };
  Layout layout;
  if (!o.layout.empty()) {
    auto l = Layout::Load(o.layout);
    if (!l.ok()) return finish(l.status());
    layout = *l;
  } else if (!o.consolidate) {
    return finish(InvalidArgument("--layout is required unless --consolidate"));
  }
  auto cat = OpenCatalog(o.source);
  if (!cat.ok()) return finish(cat.status());
  // A store rewritten in place is replaced atomically; a spec or safetensors source would be
  // lost (replaced by a store), and a rank file of the source is still to be read.
  for (auto st : {CheckOutputIsNotInput(o.output, o.source, cat->get(), true),
                  CheckOutputIsNotInput(o.output, o.layout)})
    if (!st.ok()) return finish(st);
  DistSaveOptions so;
  so.consolidate = o.consolidate;
  so.cpu.threads = o.threads > 0 ? o.threads : DefaultThreadsPerRank();
  so.write.threads = so.cpu.threads;
  so.write.zstd_level = o.zstd_level;
  if (Status st = ApplyCodecs(o.codecs, **cat, &so.write); !st.ok()) return finish(st);
  auto sim = ParseSimulate(o.simulate);
  if (!sim.ok()) return finish(sim.status());
  so.simulate = *sim;
  so.simulate_rank = o.simulate_rank;
  so.full_proof = o.full_proof;
  so.max_padding = o.max_padding;
  so.rank_file_version = o.rank_file_version;
  auto rep = Reshard(c, **cat, layout, o.output, so);
  if (!rep.ok()) return finish(rep.status());
  *outcome = "the save '" + o.output + "' is " + (rep->committed ? "committed" : "not committed");
  if (me == 0) {
    if (o.json) {
      nlohmann::json j;
      j["source"] = o.source;
      j["output"] = o.output;
      j["world"] = rep->world;
      j["writers"] = rep->writers;
      j["consolidated"] = rep->consolidated;
      j["ok"] = rep->ok();
      j["committed"] = rep->committed;
      j["bytes"] = rep->bytes;
      j["write_s"] = rep->write_s;
      j["prove_s"] = rep->prove_s;
      j["total_s"] = rep->total_s;
      j["chunks_copied"] = rep->chunks_copied;
      j["chunks_encoded"] = rep->chunks_encoded;
      j["proof"] = rep->full_proof ? "decoded" : "stored-chunks";
      j["tensors"] = nlohmann::json::array();
      for (const auto& r : rep->rows)
        j["tensors"].push_back({{"name", r.name},
                                {"kind", r.lazy ? "lazy" : "dense"},
                                {"pieces", r.pieces},
                                {"source_ref", r.source_ref},
                                {"chunks_copied", r.chunks_copied},
                                {"chunks_encoded", r.chunks_encoded},
                                {"source", FingerprintHex(r.source)},
                                {"output", FingerprintHex(r.output)},
                                {"ok", r.ok()}});
      std::printf("%s\n", j.dump(2).c_str());
    } else if (!o.quiet) {
      std::printf("reshard: %s -> %s (%s, %d writer process(es), %s)\n\n", o.source.c_str(),
                  o.output.c_str(),
                  o.consolidate ? "one store" : (std::to_string(rep->world) + " ranks").c_str(),
                  rep->writers, c.backend());
      std::printf("%s", rep->Table().c_str());
    }
    std::fflush(stdout);
  }
  return SaveVerdict(c, rep->ToStatus());
}

int Run(const ReshardOptions& o) {
  return RunRanks(o.backend, o.timeout,
                  [&](Collective& c, std::string* outcome) { return RunOn(c, o, outcome); });
}

Register reg(
    {"reshard",
     "Rewrite a spec, store or distributed save under a new layout (or into one "
     "store), proving every tensor's fingerprint",
     [](CLI::App& app) {
       auto o = std::make_shared<ReshardOptions>();
       AddSourceArg(app, &o->source);
       app.add_option("--layout", o->layout, "Output layout JSON (mesh + placements)");
       app.add_option("-o,--output", o->output, "Output path (the master file)")
           ->required()
           ->check(FileOutput("store"));
       app.add_flag("--consolidate", o->consolidate, "Write one ordinary store instead");
       app.add_flag("--json", o->json, "Print the proof as JSON (rank 0)");
       app.add_flag("-q,--quiet", o->quiet, "Print nothing on success");
       AddDistSaveOptions(app, &o->full_proof, &o->rank_file_version);
       AddCollectiveOptions(app, &o->backend, &o->timeout, &o->threads);
       AddInteger(app, "--zstd-level", &o->zstd_level,
                  "zstd level 1..22 of encoded chunks (default 1)", kMinZstdLevel, kMaxZstdLevel);
       AddCodecOption(app, &o->codecs);
       AddNumber(app, "--max-padding", &o->max_padding,
                 "Store a piece off the source's chunk grid padded to it (its chunks then copied, "
                 "not re-encoded) when that adds at most this fraction of its elements; 0: never "
                 "(default 0.25)",
                 0.0);
       AddSimulateOptions(app, &o->simulate, &o->simulate_rank);
       return [o] { return Run(*o); };
     }});

}  // namespace
}  // namespace seedstore::cli
