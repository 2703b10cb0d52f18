// seedstore save-ranks: what a training job does at checkpoint time, from the command line.
// Under mpirun, every rank materializes its own shards of a model (as a job that initialized
// its parameters from the spec holds them), and the job saves them as a distributed save, each
// rank writing its own file in parallel (SaveBuffers in io/dist_store.h), then proves it.
#include <cstdio>

#include "io/collective.h"
#include "io/dist_store.h"
#include "io/interop.h"
#include "io/open.h"
#include "tools/cli.h"

namespace seedstore::cli {
namespace {

struct SaveRanksOptions {
  std::string source, layout, output, backend = "auto", simulate = "none";
  bool quiet = false, full_proof = false;
  int rank_file_version = kCellsFormatVersion;
  double timeout = 600;
  int threads = 0, simulate_rank = 1;
  std::vector<std::string> codecs;
};

int RunOn(Collective& c, const SaveRanksOptions& o, std::string* outcome) {
  const int me = c.rank();
  auto finish = [&](const Status& st) { return SaveStepFailure(c, st); };
  auto sim = ParseSimulate(o.simulate);
  if (!sim.ok()) return finish(sim.status());
  auto layout = Layout::Load(o.layout);
  if (!layout.ok()) return finish(layout.status());
  auto cat = OpenCatalog(o.source);
  if (!cat.ok()) return finish(cat.status());
  for (auto st : {CheckOutputIsNotInput(o.output, o.source, cat->get(), true),
                  CheckOutputIsNotInput(o.output, o.layout)})
    if (!st.ok()) return finish(st);
  CpuOptions cpu;
  cpu.threads = o.threads > 0 ? o.threads : DefaultThreadsPerRank();
  // This rank's shards, as the job holds them: each is checked to fit in memory before any is
  // allocated, and the ranks agree on it, so that a shard too large for one rank's memory is
  // refused by name on every rank before anything is written (never std::bad_alloc).
  std::vector<Shard> shards;
  Status planned = [&]() -> Status {
    for (const TensorRecord& t : (*cat)->tensors()) {
      SEEDSTORE_RETURN_IF_ERROR(CheckWholeTensor(**cat, t, "save-ranks"));
      SEEDSTORE_ASSIGN_OR_RETURN(Shard sh, layout->ShardOf(t.name, t.shape, me));
      SEEDSTORE_RETURN_IF_ERROR(
          CheckFitsInMemory(sh.region.Count() * DTypeSize(t.dtype),
                            "tensor " + Quoted(t.name) + " shard " + DescribeRegion(sh.region)));
      shards.push_back(std::move(sh));
    }
    return Status::Ok();
  }();
  uint64_t failed = planned.ok() ? 0 : 1;
  if (Status a = c.AllReduceSum(&failed, 1, "save-ranks: shards"); !a.ok()) return finish(a);
  if (!planned.ok()) return finish(planned);
  if (failed)
    return finish(Status(Code::kUnsupported,
                         "save-ranks: another rank cannot hold its shards (see its message)"));
  std::vector<std::vector<unsigned char>> storage;
  std::vector<ParamBuffer> params;
  for (size_t i = 0; i < (*cat)->tensors().size(); ++i) {
    storage.emplace_back(shards[i].region.Count() * DTypeSize((*cat)->tensors()[i].dtype));
    Status st = (*cat)->Read(i, shards[i].region, storage.back().data(), cpu);
    if (!st.ok()) return finish(st);
  }
  for (size_t i = 0; i < storage.size(); ++i) {
    const TensorRecord& t = (*cat)->tensors()[i];
    params.push_back(
        ParamBuffer{t.name, t.shape, t.dtype, storage[i].data(), storage[i].size(), false});
  }
  DistSaveOptions so;
  so.cpu = cpu;
  so.write.threads = cpu.threads;
  if (Status st = ApplyCodecs(o.codecs, **cat, &so.write); !st.ok()) return finish(st);
  so.simulate = *sim;
  so.simulate_rank = o.simulate_rank;
  so.full_proof = o.full_proof;
  so.rank_file_version = o.rank_file_version;
  RootSeedOf(**cat, &so.root_seed, &so.generator);  // the save records the source's
  auto rep = SaveBuffers(c, params, *layout, o.output, so);
  if (!rep.ok()) return finish(rep.status());
  *outcome = "the save '" + o.output + "' is " + (rep->committed ? "committed" : "not committed");
  if (me == 0 && !o.quiet) {
    std::printf("save-ranks: %s -> %s (%d ranks, each writing its own file, %s)\n\n",
                o.source.c_str(), o.output.c_str(), c.size(), c.backend());
    std::printf("%s", rep->Table().c_str());
    std::fflush(stdout);
  }
  return SaveVerdict(c, rep->ToStatus());
}

int Run(const SaveRanksOptions& o) {
  return RunRanks(o.backend, o.timeout,
                  [&](Collective& c, std::string* outcome) { return RunOn(c, o, outcome); });
}

Register reg({"save-ranks",
              "Under mpirun: every rank saves its own shards of a model to its own file (a "
              "distributed save), proven against the ranks' fingerprints",
              [](CLI::App& app) {
                auto o = std::make_shared<SaveRanksOptions>();
                AddSourceArg(app, &o->source);
                app.add_option("--layout", o->layout,
                               "Layout JSON; its world size must be the job's")
                    ->required();
                app.add_option("-o,--output", o->output, "Output path (the master file)")
                    ->required()
                    ->check(FileOutput("distributed save"));
                app.add_flag("-q,--quiet", o->quiet, "Print nothing on success");
                AddCodecOption(app, &o->codecs);
                AddDistSaveOptions(app, &o->full_proof, &o->rank_file_version);
                AddCollectiveOptions(app, &o->backend, &o->timeout, &o->threads);
                AddSimulateOptions(app, &o->simulate, &o->simulate_rank);
                return [o] { return Run(*o); };
              }});

}  // namespace
}  // namespace seedstore::cli
