// verify-ranks' cost per rank as the rank count grows, with one process acting for every rank
// (ThreadWorld, io/thread_world.h: a thread per rank, exchanging over shared memory): each rank
// fingerprints its FSDP flat range of the first LAYERS decoder layers of a preset (lazy:
// generated and hashed, never materialized) and the ranks cross-check them (VerifyCatalog, the
// code path of `seedstore verify-ranks`). docs/PERF.md "verify-ranks".
//
//   build/bench/seedstore_verify_ranks_scale [--preset llama-3-70b] [--layers 1]
//                                            [--ranks 8,1024] [--runs 3]
//
// Prints per rank count the median wall time, its fingerprint and exchange phases (slowest
// rank), the time per rank and per GB, and the ratio of time per byte to the first count.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "io/collective.h"
#include "io/thread_world.h"
#include "store/presets.h"

using namespace seedstore;

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "llama-3-70b", ranks_text = "8,1024";
  int layers = 1, runs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
    else if (!std::strcmp(argv[i], "--layers")) layers = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--ranks")) ranks_text = argv[i + 1];
    else if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--preset NAME] [--layers N] [--ranks R1,R2,...] [--runs N]\n",
                   argv[0]);
      return 2;
    }
  }
  std::vector<int> counts;
  std::stringstream ss(ranks_text);
  for (std::string t; std::getline(ss, t, ',');) counts.push_back(std::atoi(t.c_str()));
  auto spec = Preset(preset);
  if (!spec.ok()) return std::fprintf(stderr, "%s\n", spec.status().ToString().c_str()), 2;
  // The first `layers` decoder layers: their tensors' names start "model.layers.<i>.".
  ModelSpec sub = *spec;
  sub.tensors.clear();
  for (const TensorSpec& t : spec->tensors)
    for (int l = 0; l < layers; ++l)
      if (t.name.rfind("model.layers." + std::to_string(l) + ".", 0) == 0) sub.tensors.push_back(t);
  auto cat = SpecCatalog::Create(sub, "preset:" + preset);
  if (!cat.ok()) return std::fprintf(stderr, "%s\n", cat.status().ToString().c_str()), 2;
  uint64_t bytes = 0;
  for (const auto& t : (*cat)->tensors()) bytes += t.NumBytes();
  std::printf("%s, first %d layer(s): %zu tensors, %.3f GB; one process, a thread per rank\n",
              preset.c_str(), layers, (*cat)->tensors().size(), bytes / 1e9);
  std::printf(
      "| ranks | wall s | fingerprint s | exchange s | ms per rank | s per GB | "
      "per byte vs %d ranks |\n|---:|---:|---:|---:|---:|---:|---:|\n",
      counts.front());
  double first_per_byte = 0;
  for (int world : counts) {
    std::vector<double> wall, fp, ex;
    for (int run = 0; run < runs; ++run) {
      const Layout layout = Layout::Fsdp(world);
      ThreadWorld w(world);
      std::mutex mu;
      double worst_fp = 0, worst_ex = 0;
      bool all_ok = true;
      const auto t0 = std::chrono::steady_clock::now();
      w.Run([&](Exchange& e) {
        VerifyOptions o;
        o.cpu.threads = 1;
        auto rep = VerifyCatalog(e, **cat, layout, o);
        std::lock_guard<std::mutex> lock(mu);
        all_ok = all_ok && rep.ok() && rep->ok();
        if (rep.ok()) {
          worst_fp = std::max(worst_fp, rep->timing.fingerprint_s);
          worst_ex = std::max(worst_ex, rep->timing.exchange_s);
        }
      });
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!all_ok) return std::fprintf(stderr, "%d ranks: verify failed\n", world), 7;
      wall.push_back(s);
      fp.push_back(worst_fp);
      ex.push_back(worst_ex);
    }
    const double m = Median(wall), per_byte = m / bytes;
    if (first_per_byte == 0) first_per_byte = per_byte;
    std::printf("| %d | %.3f | %.3f | %.4f | %.3f | %.3f | %.2fx |\n", world, m, Median(fp),
                Median(ex), 1e3 * m / world, m / (bytes / 1e9), per_byte / first_per_byte);
    std::fflush(stdout);
  }
  return 0;
}
