// The per-thread work of the CUDA kernels, written once for host and device so that host
// tests can run exactly the kernels' code path (chunk by chunk, in any order) against the
// CPU materializer. A chunk is kVec<D> consecutive box-linear elements (16 bytes of output):
// the fast path generates them in registers (several per Philox block) and stores 16 bytes;
// chunks that straddle a run, end the region, or are misaligned take the per-element path.
// No CUDA syntax beyond the SEEDSTORE_HD macros.
#pragma once
#include "gen/dispatch.h"
#include "gen/fingerprint.h"
#include "gen/sampler.h"
#include "kernels/run_map.h"

#if defined(__CUDACC__)
#define SEEDSTORE_HD_NOINLINE __host__ __device__ __noinline__
#else
#define SEEDSTORE_HD_NOINLINE __attribute__((noinline))
#endif
#if defined(__CUDA_ARCH__)
#define SEEDSTORE_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#define SEEDSTORE_UNROLL
#else
#define SEEDSTORE_UNROLL _Pragma("GCC unroll 16")
#endif

namespace seedstore {
namespace chunk {

/// Elements per chunk: 16 bytes of storage.
template <DType D>
constexpr int kVec = 16 / static_cast<int>(sizeof(StorageT<D>));

/// Whether the generator yields several elements per call (Philox blocks).
template <Generator G, Dist X>
constexpr bool kBlocked = G == Generator::kPhilox && !kConstantDist<X>;

/// Values of global indices i .. i+kVec-1 (one run). kAligned: i % PerBlock == 0 is known.
/// Same helpers as SampleElement / the CPU's FillBody, so the same bits (I2).
template <Generator G, Dist X, DType D, bool kAligned>
SEEDSTORE_HD void GenerateChunk(const SamplerParams& p, uint64_t i, StorageT<D>* v) {
  constexpr int V = kVec<D>;
  if constexpr (!kBlocked<G, X>) {
    SEEDSTORE_UNROLL
    for (int k = 0; k < V; ++k) v[k] = SampleElement<G, X, D>(p, i + k);
  } else {
    constexpr int PB = sampler_detail::PerBlock<D>();
    constexpr int NB = V / PB + (kAligned ? 0 : 1);  // Philox blocks needed
    const uint64_t b0 = i / PB;
    const int s = kAligned ? 0 : static_cast<int>(i % PB);
    uint32_t w[NB * 4];
    SEEDSTORE_UNROLL
    for (int b = 0; b < NB; ++b) {
      const Word4 x = sampler_detail::PhiloxBlock(p.key, b0 + b);
      w[4 * b] = x.v[0];
      w[4 * b + 1] = x.v[1];
      w[4 * b + 2] = x.v[2];
      w[4 * b + 3] = x.v[3];
    }
    if constexpr (PB == 4) {
      SEEDSTORE_UNROLL
      for (int k = 0; k < V; ++k) {
        uint32_t x = w[k];
        if constexpr (!kAligned) {  // static indices only: selects, no local memory
          x = s == 1 ? w[k + 1] : x;
          x = s == 2 ? w[k + 2] : x;
          x = s == 3 ? w[k + 3] : x;
        }
        v[k] = sampler_detail::PhiloxFromWord<X, D>(p, x);
      }
    } else {
      SEEDSTORE_UNROLL
      for (int k = 0; k < V; ++k) {
        uint32_t hi = w[2 * k], lo = w[2 * k + 1];
        if constexpr (!kAligned) {
          hi = s == 1 ? w[2 * k + 2] : hi;
          lo = s == 1 ? w[2 * k + 3] : lo;
        }
        v[k] = sampler_detail::PhiloxFromWords<X, D>(p, hi, lo);
      }
    }
  }
}

/// Copies 16 bytes of values to dst (16-byte aligned on device when vec_ok).
template <class T>
SEEDSTORE_HD void Store16(T* dst, const T* v, bool vec_ok) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
#if defined(__CUDA_ARCH__)
  if (vec_ok) {
    uint4 u;
    memcpy(&u, v, 16);
    *reinterpret_cast<uint4*>(dst) = u;
    return;
  }
#else
  (void)vec_ok;
#endif
  SEEDSTORE_UNROLL
  for (int k = 0; k < V; ++k) dst[k] = v[k];
}

template <class T>
SEEDSTORE_HD void Load16(const T* src, T* v, bool vec_ok) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
#if defined(__CUDA_ARCH__)
  if (vec_ok) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(src));
    memcpy(v, &u, 16);
    return;
  }
#else
  (void)vec_ok;
#endif
  SEEDSTORE_UNROLL
  for (int k = 0; k < V; ++k) v[k] = src[k];
}

/// Per-element path for chunk [a, a+n): one Locate per element (edges only).
/// out may be null (hash only); kHash adds each element's hash to (s0, s1).
template <Generator G, Dist X, DType D, bool kHash>
SEEDSTORE_HD_NOINLINE Fingerprint SlowChunk(const SamplerParams& p, const RunMap& m, uint64_t a,
                                            int n, StorageT<D>* out, uint64_t seed) {
  Fingerprint f;
  for (int k = 0; k < n; ++k) {
    uint64_t room;
    const uint64_t i = m.Locate(a + k, &room);
    const StorageT<D> v = SampleElement<G, X, D>(p, i);
    if (out) out[a + k] = v;
    if constexpr (kHash) {
      f.Add(HashElement(i, ValueBits(v), seed));
    }
  }
  return f;
}

/// The materialize (and optionally fingerprint) work of chunk c. out may be null when kHash.
/// kAligned: the launcher proved every full chunk starts on a Philox block boundary.
template <Generator G, Dist X, DType D, bool kAligned, bool kHash>
SEEDSTORE_HD void MaterializeChunk(const SamplerParams& p, const RunMap& m, uint64_t c,
                                   StorageT<D>* out, bool vec_ok, uint64_t seed, uint64_t* s0,
                                   uint64_t* s1) {
  constexpr int V = kVec<D>;
  const uint64_t a = c * V;
  uint64_t room;
  const uint64_t i = m.Locate(a, &room);
  bool fast = a + V <= m.count && room >= V;
  if constexpr (kAligned && kBlocked<G, X>) fast = fast && i % sampler_detail::PerBlock<D>() == 0;
  if (fast) {
    StorageT<D> v[V];
    GenerateChunk<G, X, D, kAligned>(p, i, v);
    if (out) Store16(out + a, v, vec_ok);
    if constexpr (kHash) {
      uint64_t t0 = 0, t1 = 0;
      SEEDSTORE_UNROLL
      for (int k = 0; k < V; ++k) {
        const Fingerprint h = HashElement(i + k, ValueBits(v[k]), seed);
        t0 += h.lane0;
        t1 += h.lane1;
      }
      *s0 += t0;
      *s1 += t1;
    }
  } else {
    const uint64_t left = m.count - a;
    const Fingerprint f =
        SlowChunk<G, X, D, kHash>(p, m, a, static_cast<int>(left < V ? left : V), out, seed);
    if constexpr (kHash) {
      *s0 += f.lane0;
      *s1 += f.lane1;
    }
  }
}

/// Fingerprint work of chunk c of a buffer holding the region's elements (T = storage word).
template <class T>
SEEDSTORE_HD_NOINLINE Fingerprint SlowHashChunk(const RunMap& m, uint64_t a, int n, const T* data,
                                                uint64_t seed) {
  Fingerprint f;
  for (int k = 0; k < n; ++k) {
    uint64_t room;
    const uint64_t i = m.Locate(a + k, &room);
    f.Add(HashElement(i, ValueBits(data[a + k]), seed));
  }
  return f;
}

template <class T>
SEEDSTORE_HD void FingerprintChunk(const RunMap& m, uint64_t c, const T* data, bool vec_ok,
                                   uint64_t seed, uint64_t* s0, uint64_t* s1) {
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  const uint64_t a = c * V;
  uint64_t room;
  const uint64_t i = m.Locate(a, &room);
  if (a + V <= m.count && room >= V) {
    T v[V];
    Load16(data + a, v, vec_ok);
    uint64_t t0 = 0, t1 = 0;
    SEEDSTORE_UNROLL
    for (int k = 0; k < V; ++k) {
      const Fingerprint h = HashElement(i + k, ValueBits(v[k]), seed);
      t0 += h.lane0;
      t1 += h.lane1;
    }
    *s0 += t0;
    *s1 += t1;
  } else {
    const uint64_t left = m.count - a;
    const Fingerprint f = SlowHashChunk<T>(m, a, static_cast<int>(left < V ? left : V), data, seed);
    *s0 += f.lane0;
    *s1 += f.lane1;
  }
}

/// Whether the launcher may use the kAligned variant for this region: every full chunk then
/// starts on a Philox block boundary. (The unaligned variant is correct for any region.)
template <Generator G, Dist X, DType D>
bool UseAligned(const RunMap& m) {
  if constexpr (kBlocked<G, X>) return m.RunsAligned(sampler_detail::PerBlock<D>(), kVec<D>);
  return false;
}

/// Chunks covering a region of `count` elements of D.
template <DType D>
SEEDSTORE_HD uint64_t NumChunks(uint64_t count) {
  return count / kVec<D> + (count % kVec<D> != 0 ? 1 : 0);
}

}  // namespace chunk
}  // namespace seedstore
