#include "gen/materialize_cpu.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "gen/checksum.h"
#include "gen/materialize_cpu_isa.h"

namespace seedstore {
namespace {

enum class Isa { kGeneric, kAvx2, kAvx512 };

Isa DetectIsa() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2"))
    return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2"))
    return Isa::kAvx2;
#endif
  return Isa::kGeneric;
}

/// SEEDSTORE_CPU_ISA=generic|avx2|avx512 in the environment caps the choice (for testing the
/// fallbacks and for benchmarks); it never selects an ISA the CPU lacks.
Isa PickIsa() {
  Isa isa = DetectIsa();
  if (const char* e = std::getenv("SEEDSTORE_CPU_ISA")) {
    const std::string_view v(e);
    if (v == "generic") isa = Isa::kGeneric;
    else if (v == "avx2" && isa == Isa::kAvx512) isa = Isa::kAvx2;
  }
  return isa;
}
// A function-local static, not a namespace-scope one: code run by another translation unit's
// static initializers must see the CPU's ISA too, not a zero-initialized kGeneric.
Isa TheIsa() {
  static const Isa isa = PickIsa();
  return isa;
}

// The loops themselves live in materialize_cpu_kernels.inc, compiled once per ISA.
FillFn PickFill(const SamplerParams& p) {
  switch (TheIsa()) {
    case Isa::kAvx512:
      return cpu_avx512::PickFill(p);
    case Isa::kAvx2:
      return cpu_avx2::PickFill(p);
    default:
      return cpu_generic::PickFill(p);
  }
}

HashFn PickHash(DType dtype) {
  const int size = DTypeSize(dtype);
  switch (TheIsa()) {
    case Isa::kAvx512:
      return cpu_avx512::PickHash(size);
    case Isa::kAvx2:
      return cpu_avx2::PickHash(size);
    default:
      return cpu_generic::PickHash(size);
  }
}

/// Calls f(global_flat_base, count, box_linear_offset) for every run piece of box-linear
/// range [a, b), in order.
template <class F>
void ForEachRun(const Region& r, uint64_t a, uint64_t b, F&& f) {
  const uint64_t len = r.RunLength();
  if (len == 0) return;
  uint64_t q = a / len, off = a % len;
  while (a < b) {
    const uint64_t n = std::min(len - off, b - a);
    f(r.RunBase(q) + off, n, a);
    a += n;
    ++q;
    off = 0;
  }
}

/// Splits box-linear range [0, count) over threads; f(thread, a, b).
template <class F>
void Parallel(uint64_t count, CpuOptions o, F&& f) {
  int t = o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  t = std::clamp(t, 1, kMaxCpuThreads);
  constexpr uint64_t kMinPerThread = 1 << 15;
  t = static_cast<int>(std::min<uint64_t>(t, std::max<uint64_t>(1, count / kMinPerThread)));
  if (t == 1) {
    f(0, uint64_t{0}, count);
    return;
  }
  std::vector<std::thread> pool;
  const uint64_t per = (count + t - 1) / t;
  for (int k = 0; k < t; ++k) {
    const uint64_t a = std::min(count, per * k), b = std::min(count, per * (k + 1));
    pool.emplace_back([&f, k, a, b] { f(k, a, b); });
  }
  for (auto& th : pool) th.join();
}

}  // namespace

const char* CpuIsaName() {
  switch (TheIsa()) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "generic";
  }
}

// Function-local static, as TheIsa: a checksum taken during another translation unit's
// static initialization must not see null pointers.
static const ChecksumFns& Checksum() {
  static const ChecksumFns f = [] {
    switch (TheIsa()) {
      case Isa::kAvx512:
        return cpu_avx512::PickChecksum();
      case Isa::kAvx2:
        return cpu_avx2::PickChecksum();
      default:
        return cpu_generic::PickChecksum();
    }
  }();
  return f;
}

uint64_t Checksum64(const void* data, size_t n) { return Checksum().one_shot(data, n); }
void Checksum64Stream::Reset() { Checksum().reset(state_); }
void Checksum64Stream::Update(const void* data, size_t n) { Checksum().update(state_, data, n); }
uint64_t Checksum64Stream::Digest() const { return Checksum().digest(state_); }

void MaterializeCpu(const SamplerParams& p, const Region& r, void* out, CpuOptions o) {
  const FillFn fill = PickFill(p);
  const size_t es = DTypeSize(p.dtype);
  auto* base = static_cast<unsigned char*>(out);
  Parallel(r.Count(), o, [&](int, uint64_t a, uint64_t b) {
    ForEachRun(r, a, b,
               [&](uint64_t i, uint64_t n, uint64_t at) { fill(p, i, n, base + at * es); });
  });
}

Fingerprint FingerprintCpu(DType dtype, const Region& r, const void* data, uint64_t seed,
                           CpuOptions o) {
  const HashFn hash = PickHash(dtype);
  const size_t es = DTypeSize(dtype);
  const auto* base = static_cast<const unsigned char*>(data);
  std::vector<Fingerprint> parts(kMaxCpuThreads);
  Parallel(r.Count(), o, [&](int k, uint64_t a, uint64_t b) {
    Fingerprint s;
    ForEachRun(r, a, b, [&](uint64_t i, uint64_t n, uint64_t at) {
      s.Add(hash(i, n, base + at * es, seed));
    });
    parts[k] = s;
  });
  Fingerprint total;
  for (const auto& s : parts) total.Add(s);
  return total;
}

Fingerprint MaterializeFingerprintCpu(const SamplerParams& p, const Region& r, void* out,
                                      uint64_t seed, CpuOptions o) {
  const FillFn fill = PickFill(p);
  const HashFn hash = PickHash(p.dtype);
  const size_t es = DTypeSize(p.dtype);
  auto* base = static_cast<unsigned char*>(out);
  std::vector<Fingerprint> parts(kMaxCpuThreads);
  Parallel(r.Count(), o, [&](int k, uint64_t a, uint64_t b) {
    constexpr uint64_t kTile = 4096;
    alignas(64) unsigned char tile[kTile * 8];
    Fingerprint s;
    ForEachRun(r, a, b, [&](uint64_t i, uint64_t n, uint64_t at) {
      for (uint64_t done = 0; done < n;) {
        const uint64_t m = std::min(kTile, n - done);
        unsigned char* dst = base ? base + (at + done) * es : tile;
        fill(p, i + done, m, dst);
        s.Add(hash(i + done, m, dst, seed));
        done += m;
      }
    });
    parts[k] = s;
  });
  Fingerprint total;
  for (const auto& s : parts) total.Add(s);
  return total;
}

}  // namespace seedstore
