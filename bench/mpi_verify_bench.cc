// verify-ranks at scale: every rank of an mpirun job fingerprints its shards of a preset model
// (lazy: generated and hashed, never materialized) and the ranks cross-check them. Reports the
// total time and the share spent communicating. docs/PERF.md "Multi-rank verification".
//
//   mpirun -np 4 build/bench/seedstore_mpi_bench --preset llama-3-8b --layout fsdp
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "io/collective.h"
#include "store/presets.h"

using namespace seedstore;

int main(int argc, char** argv) {
  std::string preset = "llama-3-8b", layout_kind = "fsdp";
  int threads = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
    else if (!std::strcmp(argv[i], "--layout")) layout_kind = argv[i + 1];
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--preset NAME] [--layout fsdp|replicated|hsdp|FILE] "
                   "[--threads N]\n",
                   argv[0]);
      return 2;
    }
  }
  auto comm = OpenCollective("auto", CollectiveOptions{3600});
  if (!comm.ok()) return std::fprintf(stderr, "%s\n", comm.status().ToString().c_str()), 5;
  Collective& c = **comm;
  const int world = c.size();
  auto spec = Preset(preset);
  if (!spec.ok()) return std::fprintf(stderr, "%s\n", spec.status().ToString().c_str()), 2;
  auto cat = SpecCatalog::Create(*spec, "preset:" + preset);
  if (!cat.ok()) return std::fprintf(stderr, "%s\n", cat.status().ToString().c_str()), 2;
  Result<Layout> layout = layout_kind == "fsdp"         ? Result<Layout>(Layout::Fsdp(world))
                          : layout_kind == "replicated" ? Result<Layout>(Layout::Replicated(world))
                          : layout_kind == "hsdp" && world % 2 == 0
                              ? Result<Layout>(Layout::Hsdp(2, world / 2))
                              : Layout::Load(layout_kind);
  if (!layout.ok()) return std::fprintf(stderr, "%s\n", layout.status().ToString().c_str()), 2;
  uint64_t params = 0;
  for (const auto& t : (*cat)->tensors()) params += t.NumElements();

  VerifyOptions o;
  o.cpu.threads = threads > 0 ? threads : DefaultThreadsPerRank();
  const double comm0 = c.comm_seconds();
  auto rep = VerifyCatalog(c, **cat, *layout, o);
  if (!rep.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", c.rank(), rep.status().ToString().c_str());
    c.Abort(5);
  }
  // Per-rank phase times, gathered to report the slowest rank and the spread.
  double mine[5] = {rep->timing.total_s, rep->timing.fingerprint_s, rep->timing.wait_s,
                    rep->timing.exchange_s, c.comm_seconds() - comm0};
  std::vector<double> all(5 * world);
  if (!c.AllGather(mine, sizeof mine, all.data(), "bench timings").ok()) c.Abort(5);
  if (c.rank() == 0) {
    auto col = [&](int k, bool max) {
      double v = all[k];
      for (int r = 0; r < world; ++r)
        v = max ? std::max(v, all[5 * r + k]) : std::min(v, all[5 * r + k]);
      return v;
    };
    const double total = col(0, true), exch = col(3, true), comm_all = col(4, true);
    std::printf(
        "preset %s: %zu tensors, %.3f G params; layout %s; %d ranks (%s), %d thread(s)/rank\n",
        preset.c_str(), (*cat)->tensors().size(), params / 1e9, layout_kind.c_str(), world,
        c.backend(), o.cpu.threads);
    std::printf("verdict: %s\n", rep->ok() ? "ok" : rep->ToStatus().ToString().c_str());
    std::printf("total (slowest rank)        %9.3f s\n", total);
    std::printf("fingerprint (min..max rank) %9.3f .. %.3f s\n", col(1, false), col(1, true));
    std::printf("wait for slowest (max)      %9.3f s\n", col(2, true));
    std::printf("exchange (max)              %9.6f s  = %.4f%% of total\n", exch,
                100 * exch / total);
    std::printf("all collectives incl. wait  %9.3f s  (digest check, barrier, exchange)\n",
                comm_all);
    std::printf("bytes received per rank     %9llu\n",
                static_cast<unsigned long long>(rep->bytes_exchanged));
    std::printf("throughput                  %9.1f M params/s (all ranks)\n", params / total / 1e6);
  }
  return rep->ok() ? 0 : 7;
}
