#include "gen/materialize_cpu.h"

#include <algorithm>
#include <thread>
#include <type_traits>
#include <vector>

#include "gen/dispatch.h"

namespace seedstore {
namespace {

enum class Isa { kGeneric, kAvx2, kAvx512 };

Isa DetectIsa() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2")) return Isa::kAvx2;
#endif
  return Isa::kGeneric;
}
const Isa kIsa = DetectIsa();

#define SEEDSTORE_FORCE_INLINE inline __attribute__((always_inline))

// ---- loop bodies, compiled once per instruction set -------------------------------------

template <Generator G, Dist X, DType D>
SEEDSTORE_FORCE_INLINE void FillBody(const SamplerParams& p, uint64_t i, uint64_t n,
                                     StorageT<D>* __restrict out) {
  constexpr bool kBlocked = G == Generator::kPhilox && X != Dist::kConstant &&
                            X != Dist::kZeros && X != Dist::kOnes;
  if constexpr (kBlocked) {
    // Philox yields several elements per call: whole blocks in the middle, single elements
    // at the ends. Same values as SampleElement by construction (same helpers).
    constexpr uint64_t K = sampler_detail::PerBlock<D>();
    const uint64_t end = i + n;
    while (i < end && i % K != 0) *out++ = SampleElement<G, X, D>(p, i++);
    const uint64_t nb = (end - i) / K, b0 = i / K;
    for (uint64_t b = 0; b < nb; ++b) {
      const Word4 w = sampler_detail::PhiloxBlock(p.key, b0 + b);
      if constexpr (K == 4) {
        for (int l = 0; l < 4; ++l)
          out[b * 4 + l] = sampler_detail::PhiloxFromWord<X, D>(p, w.v[l]);
      } else {
        out[b * 2] = sampler_detail::PhiloxFromWords<X, D>(p, w.v[0], w.v[1]);
        out[b * 2 + 1] = sampler_detail::PhiloxFromWords<X, D>(p, w.v[2], w.v[3]);
      }
    }
    out += nb * K;
    i += nb * K;
    while (i < end) *out++ = SampleElement<G, X, D>(p, i++);
  } else {
    for (uint64_t j = 0; j < n; ++j) out[j] = SampleElement<G, X, D>(p, i + j);
  }
}

template <class T>
SEEDSTORE_FORCE_INLINE Fingerprint HashBody(uint64_t i, uint64_t n, const T* __restrict data,
                                            uint64_t seed) {
  uint64_t s0 = 0, s1 = 0;
  for (uint64_t j = 0; j < n; ++j) {
    const Fingerprint h = HashElement(i + j, ValueBits(data[j]), seed);
    s0 += h.lane0;
    s1 += h.lane1;
  }
  return Fingerprint{s0, s1};
}

#define SEEDSTORE_ISA_VARIANTS(NAME, BODY, RET, PARAMS, ARGS)                               \
  template <TPARAMS>                                                                        \
  __attribute__((noinline)) RET NAME##Generic PARAMS { return BODY ARGS; }                  \
  template <TPARAMS>                                                                        \
  __attribute__((noinline, target("avx2,fma,bmi,bmi2"))) RET NAME##Avx2 PARAMS {            \
    return BODY ARGS;                                                                       \
  }                                                                                         \
  template <TPARAMS>                                                                        \
  __attribute__((noinline, target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,bmi,bmi2"))) \
  RET NAME##Avx512 PARAMS {                                                                 \
    return BODY ARGS;                                                                       \
  }

#define TPARAMS Generator G, Dist X, DType D
SEEDSTORE_ISA_VARIANTS(Fill, (FillBody<G, X, D>), void,
                       (const SamplerParams& p, uint64_t i, uint64_t n, StorageT<D>* out),
                       (p, i, n, out))
#undef TPARAMS
#define TPARAMS class T
SEEDSTORE_ISA_VARIANTS(Hash, (HashBody<T>), Fingerprint,
                       (uint64_t i, uint64_t n, const T* data, uint64_t seed), (i, n, data, seed))
#undef TPARAMS

template <Generator G, Dist X, DType D>
void FillRun(const SamplerParams& p, uint64_t i, uint64_t n, void* out) {
  auto* o = static_cast<StorageT<D>*>(out);
  switch (kIsa) {
    case Isa::kAvx512: return FillAvx512<G, X, D>(p, i, n, o);
    case Isa::kAvx2: return FillAvx2<G, X, D>(p, i, n, o);
    default: return FillGeneric<G, X, D>(p, i, n, o);
  }
}

template <class T>
Fingerprint HashRun(uint64_t i, uint64_t n, const void* data, uint64_t seed) {
  const auto* d = static_cast<const T*>(data);
  switch (kIsa) {
    case Isa::kAvx512: return HashAvx512<T>(i, n, d, seed);
    case Isa::kAvx2: return HashAvx2<T>(i, n, d, seed);
    default: return HashGeneric<T>(i, n, d, seed);
  }
}

using FillFn = void (*)(const SamplerParams&, uint64_t, uint64_t, void*);
using HashFn = Fingerprint (*)(uint64_t, uint64_t, const void*, uint64_t);

FillFn PickFill(const SamplerParams& p) {
  return VisitSampler(p, [](auto g, auto x, auto d) -> FillFn {
    return &FillRun<std::decay_t<decltype(g)>::value, std::decay_t<decltype(x)>::value, std::decay_t<decltype(d)>::value>;
  });
}

HashFn PickHash(DType dtype) {
  switch (DTypeSize(dtype)) {
    case 8: return &HashRun<uint64_t>;
    case 4: return &HashRun<uint32_t>;
    case 2: return &HashRun<uint16_t>;
    default: return &HashRun<uint8_t>;
  }
}

constexpr int kMaxThreads = 256;

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
  t = std::clamp(t, 1, kMaxThreads);
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
  switch (kIsa) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "generic";
  }
}

void MaterializeCpu(const SamplerParams& p, const Region& r, void* out, CpuOptions o) {
  const FillFn fill = PickFill(p);
  const size_t es = DTypeSize(p.dtype);
  auto* base = static_cast<unsigned char*>(out);
  Parallel(r.Count(), o, [&](int, uint64_t a, uint64_t b) {
    ForEachRun(r, a, b, [&](uint64_t i, uint64_t n, uint64_t at) { fill(p, i, n, base + at * es); });
  });
}

Fingerprint FingerprintCpu(DType dtype, const Region& r, const void* data, uint64_t seed,
                           CpuOptions o) {
  const HashFn hash = PickHash(dtype);
  const size_t es = DTypeSize(dtype);
  const auto* base = static_cast<const unsigned char*>(data);
  std::vector<Fingerprint> parts(kMaxThreads);
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
  std::vector<Fingerprint> parts(kMaxThreads);
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
