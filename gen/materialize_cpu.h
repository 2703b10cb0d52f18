// CPU materializer and fingerprinter: time and memory O(region), multi-threaded, with a
// vectorized inner loop chosen at run time (AVX-512, AVX2 or generic x86-64).
#pragma once
#include "gen/fingerprint.h"
#include "gen/region.h"
#include "gen/sampler.h"

namespace seedstore {

/// The most threads one CPU computation runs (larger requests use this many).
constexpr int kMaxCpuThreads = 256;

/// Threads to use: 0 means std::thread::hardware_concurrency(); at most kMaxCpuThreads run.
struct CpuOptions {
  int threads = 0;
};

/// Writes the region's elements, row-major, into `out` (Count() * DTypeSize(p.dtype) bytes).
/// Preconditions: Supported(p.dist, p.dtype); the region lies inside the shape.
/// The bytes depend only on (p, global index): never on threads or region (I1).
void MaterializeCpu(const SamplerParams& p, const Region& r, void* out, CpuOptions o = {});

/// Fingerprint (see fingerprint.h) of a buffer that holds the region's elements row-major.
Fingerprint FingerprintCpu(DType dtype, const Region& r, const void* data, uint64_t seed,
                           CpuOptions o = {});

/// Materialize and fingerprint in one pass. `out` may be null: the values are then generated
/// into a small per-thread tile and only hashed (memory O(threads), not O(region)).
Fingerprint MaterializeFingerprintCpu(const SamplerParams& p, const Region& r, void* out,
                                      uint64_t seed, CpuOptions o = {});

/// The instruction set the dispatcher picked on this CPU: "avx512", "avx2" or "generic".
const char* CpuIsaName();

}  // namespace seedstore
