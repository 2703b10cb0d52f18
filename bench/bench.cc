// seedstore CPU micro-benchmark (docs/PERF.md, "Generators and fingerprint, CPU"; not part of
// the test suite).
// Measures elements/s of the CPU materializer (threefry and philox normal, f32 and bf16) and
// of the fingerprint, on one thread and on all cores. One output buffer is allocated and
// pre-faulted up front and reused by every repetition, so page faults are never timed.
// Prints one JSON object per line (bench/compare.py reads them) or a table with --table.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "gen/materialize_cpu.h"

namespace {

using seedstore::DType;
using seedstore::SamplerParams;

struct Options {
  uint64_t n = uint64_t{1} << 24;
  int reps = 7;
  int threads = 0;  // 0: run both 1 thread and all cores
  bool table = false;
  std::string only;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Timing {
  double wall = 0;  // median wall-clock seconds
  double cpu = 0;   // median process CPU seconds (all threads): immune to being descheduled
};

template <class F>
Timing Measure(int reps, F&& f) {
  f();  // warm-up (also faults in any lazily touched page)
  std::vector<double> w, c;
  for (int r = 0; r < reps; ++r) {
    const double c0 = ProcessCpuSeconds();
    const auto a = std::chrono::steady_clock::now();
    f();
    const auto b = std::chrono::steady_clock::now();
    c.push_back(ProcessCpuSeconds() - c0);
    w.push_back(std::chrono::duration<double>(b - a).count());
  }
  return Timing{Median(w), Median(c)};
}

SamplerParams NormalParams(seedstore::Generator g, DType d) {
  SamplerParams p;
  p.generator = g;
  p.dist = seedstore::Dist::kNormal;
  p.dtype = d;
  p.key = seedstore::KeyFromSeed32(0);
  p.lo_f = std::nextafter(-1.0f, 0.0f);  // what PrepareSampler sets for threefry normal
  p.range_f = 1.0f - p.lo_f;
  return p;
}

/// elems_per_s: n / median wall time (what a user waits for). elems_per_cpu_s: n / median
/// process CPU time, i.e. throughput per busy core; on a shared, noisy machine it is the
/// stable per-core number.
void Report(const Options& o, const char* name, const char* dtype, int threads, uint64_t n,
            Timing t) {
  const double eps = static_cast<double>(n) / t.wall;
  const double eps_cpu = static_cast<double>(n) / t.cpu;
  if (o.table) {
    std::printf("%-16s %-9s %3d thr n=%-10llu %9.3f ms wall %8.1f M el/s  %8.1f M el/s per CPU-s\n",
                name, dtype, threads, static_cast<unsigned long long>(n), t.wall * 1e3, eps / 1e6,
                eps_cpu / 1e6);
  } else {
    std::printf(
        "{\"bench\": \"%s\", \"dtype\": \"%s\", \"threads\": %d, \"n\": %llu, "
        "\"median_wall_s\": %.6e, \"median_cpu_s\": %.6e, \"elems_per_s\": %.6e, "
        "\"elems_per_cpu_s\": %.6e, \"isa\": \"%s\"}\n",
        name, dtype, threads, static_cast<unsigned long long>(n), t.wall, t.cpu, eps, eps_cpu,
        seedstore::CpuIsaName());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int a = 1; a < argc; ++a) {
    const std::string s = argv[a];
    auto next = [&]() -> const char* {
      if (a + 1 >= argc) {
        std::fprintf(stderr, "bench: %s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++a];
    };
    if (s == "--n") o.n = std::strtoull(next(), nullptr, 10);
    else if (s == "--reps") o.reps = std::atoi(next());
    else if (s == "--threads") o.threads = std::atoi(next());
    else if (s == "--only") o.only = next();
    else if (s == "--table") o.table = true;
    else {
      std::fprintf(stderr,
                   "usage: seedstore_bench [--n N] [--reps R] [--threads T] [--only NAME] "
                   "[--table]\n  T = 0 runs 1 thread and all cores; NAME filters benches "
                   "(substring of e.g. threefry_normal, philox_normal, fingerprint)\n");
      return 2;
    }
  }
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<int> thread_counts;
  if (o.threads > 0) thread_counts = {o.threads};
  else if (all > 1) thread_counts = {1, all};
  else thread_counts = {1};

  // One buffer, 8 bytes per element (enough for every dtype benchmarked), pre-faulted.
  std::vector<unsigned char> buf(o.n * 8);
  std::memset(buf.data(), 1, buf.size());
  const seedstore::Region region = seedstore::WholeRegion(1, &o.n);
  if (!o.table)
    std::fprintf(stderr, "seedstore_bench: isa=%s n=%llu reps=%d\n", seedstore::CpuIsaName(),
                 static_cast<unsigned long long>(o.n), o.reps);

  struct Gen {
    const char* name;
    seedstore::Generator g;
  };
  const Gen gens[] = {{"threefry_normal", seedstore::Generator::kThreefry},
                      {"philox_normal", seedstore::Generator::kPhilox}};
  struct Dt {
    const char* name;
    DType d;
  };
  const Dt dts[] = {{"float32", DType::kF32}, {"bfloat16", DType::kBF16}};
  for (const Gen& g : gens) {
    if (!o.only.empty() && std::string(g.name).find(o.only) == std::string::npos) continue;
    for (const Dt& d : dts) {
      const SamplerParams p = NormalParams(g.g, d.d);
      for (int t : thread_counts) {
        const Timing s = Measure(o.reps, [&] {
          seedstore::MaterializeCpu(p, region, buf.data(), seedstore::CpuOptions{t});
        });
        Report(o, g.name, d.name, t, o.n, s);
      }
    }
  }
  if (o.only.empty() || std::string("fingerprint").find(o.only) != std::string::npos) {
    // Fingerprint of an existing buffer (the f32 normal values just written).
    const SamplerParams p = NormalParams(seedstore::Generator::kPhilox, DType::kF32);
    seedstore::MaterializeCpu(p, region, buf.data());
    volatile uint64_t sink = 0;
    for (const Dt& d : dts) {
      for (int t : thread_counts) {
        const Timing s = Measure(o.reps, [&] {
          const seedstore::Fingerprint f =
              seedstore::FingerprintCpu(d.d, region, buf.data(), 12345, seedstore::CpuOptions{t});
          sink = sink + f.lane0 + f.lane1;
        });
        Report(o, "fingerprint", d.name, t, o.n, s);
      }
    }
  }
  return 0;
}
