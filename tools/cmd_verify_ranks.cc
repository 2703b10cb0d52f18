// seedstore verify-ranks: do the ranks of a job hold one model, sharded as the layout says?
// Run it under mpirun (one process per rank); alone it is a world of one.
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "io/collective.h"
#include "io/open.h"
#include "tools/cli.h"

namespace seedstore::cli {
namespace {

struct VerifyRanksOptions {
  std::string source, layout, backend = "auto", device = "cpu", simulate = "none", simulate_tensor;
  bool json = false, problems_only = false;
  double timeout = 600;
  int threads = 0, simulate_rank = 1;
};

// The report goes to the process's standard output; everything else written there while the
// job runs (NCCL's own log lines under NCCL_DEBUG, the MPI library's notices) goes to standard
// error, so that `--json` output is JSON alone.
std::FILE* ReportStream() {
  std::fflush(stdout);
  const int fd = dup(STDOUT_FILENO);
  if (fd < 0) return stdout;
  std::FILE* f = fdopen(fd, "w");
  if (f == nullptr) {
    close(fd);
    return stdout;
  }
  dup2(STDERR_FILENO, STDOUT_FILENO);
  return f;
}

int RunOn(Collective& c, const VerifyRanksOptions& o, std::FILE* report, std::string* outcome) {
  const int me = c.rank();
  // Every rank opens the inputs itself; errors are the same on every rank unless the files
  // differ between nodes, which the input digest then reports.
  auto finish = [&](const Status& st) -> int {
    if (st.ok()) return 0;
    if (me == 0 || st.code() == Code::kIo) Fail(st);
    if (st.code() == Code::kIo) c.Abort(ExitCode(st));  // a collective failed: end the job
    return ExitCode(st);
  };
  auto sim = ParseSimulate(o.simulate);
  if (!sim.ok()) return finish(sim.status());
  auto layout = Layout::Load(o.layout);
  if (!layout.ok()) return finish(layout.status());
  auto cat = OpenCatalog(o.source);
  if (!cat.ok()) return finish(cat.status());
  VerifyOptions vo;
  vo.cpu.threads = o.threads > 0 ? o.threads : DefaultThreadsPerRank();
  vo.device = o.device;
  vo.simulate = *sim;
  vo.simulate_rank = o.simulate_rank;
  vo.simulate_tensor = o.simulate_tensor;
  auto rep = VerifyCatalog(c, **cat, *layout, vo);
  if (!rep.ok()) return finish(rep.status());
  if (me == 0) {
    if (o.json) {
      nlohmann::json j = rep->ToJson(o.problems_only);
      j["source"] = o.source;
      j["layout"] = o.layout;
      j["backend"] = c.backend();
      std::fprintf(report, "%s\n", j.dump(2).c_str());
    } else {
      std::fprintf(report, "verify-ranks: %s under %s: %d rank(s) (%s), %zu tensors\n\n",
                   o.source.c_str(), o.layout.c_str(), c.size(), c.backend(), rep->tensors.size());
      std::fprintf(report, "%s", rep->Table(o.problems_only).c_str());
      std::fprintf(report,
                   "time: %.3f s (fingerprint %.3f s, wait %.3f s, exchange %.4f s, %llu bytes)\n",
                   rep->timing.total_s, rep->timing.fingerprint_s, rep->timing.wait_s,
                   rep->timing.exchange_s, static_cast<unsigned long long>(rep->bytes_exchanged));
    }
    std::fflush(report);
  }
  // The job ends together, within the timeout: a rank that stalls after the exchange is named
  // here instead of leaving the others waiting in the launcher's teardown (MPI_Finalize has no
  // deadline).
  if (Status end = c.Barrier("the end of the job"); !end.ok()) return finish(end);
  *outcome = "rank 0 has reported the verdict";
  return RankVerdict(rep->ToStatus(), me);
}

int Run(const VerifyRanksOptions& o) {
  std::FILE* report = ReportStream();
  return RunRanks(o.backend, o.timeout, [&](Collective& c, std::string* outcome) {
    return RunOn(c, o, report, outcome);
  });
}

Register reg(
    {"verify-ranks",
     "Check across ranks (under mpirun) that replicas agree and shards compose to "
     "each tensor",
     [](CLI::App& app) {
       auto o = std::make_shared<VerifyRanksOptions>();
       AddSourceArg(app, &o->source);
       app.add_option("--layout", o->layout, "Layout JSON (mesh + placements)")->required();
       app.add_flag("--json", o->json, "Print the report as JSON (rank 0)");
       app.add_flag("--problems-only", o->problems_only,
                    "List only tensors with a problem, in the table and in --json's \"tensors\" "
                    "(its \"summary\" still counts every tensor)");
       AddCollectiveOptions(app, &o->backend, &o->timeout, &o->threads);
       app.add_option("--device", o->device, "Where lazy shards are hashed: cpu, cuda or auto")
           ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
       app.add_option("--simulate", o->simulate,
                      "Testing: reproduce a failure (unseeded, layout-rng, flip, hang, die, kill)");
       AddInteger(app, "--simulate-rank", &o->simulate_rank,
                  "Testing: the rank that flips/hangs/dies", 0);
       app.add_option("--simulate-tensor", o->simulate_tensor, "Testing: the tensor to flip");
       return [o] { return Run(*o); };
     }});

}  // namespace
}  // namespace seedstore::cli
