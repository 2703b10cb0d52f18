#include "store/selftest.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>

#include "gen/fingerprint.h"
#include "gen/jax_keys.h"
#include "gen/philox.h"
#include "gen/threefry.h"
#include "store/lazy.h"

namespace seedstore {
namespace {

std::string Hex(const uint32_t* v, int n) {
  std::string s;
  char b[12];
  for (int i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%s%08x", i ? " " : "", v[i]);
    s += b;
  }
  return s;
}

template <int R>
SelfTestCase Threefry(const char* name, uint32_t c0, uint32_t c1, uint32_t k0, uint32_t k1,
                      uint32_t e0, uint32_t e1) {
  const Word2 w = Threefry2x32<R>(k0, k1, c0, c1);
  const uint32_t got[2] = {w.v0, w.v1}, want[2] = {e0, e1};
  return {name, got[0] == e0 && got[1] == e1, "want " + Hex(want, 2) + ", got " + Hex(got, 2)};
}

SelfTestCase Philox(const char* name, const uint32_t c[4], const uint32_t k[2],
                    const uint32_t e[4]) {
  const Word4 w = Philox4x32<10>(k[0], k[1], c[0], c[1], c[2], c[3]);
  const bool ok = std::memcmp(w.v, e, 16) == 0;
  return {name, ok, "want " + Hex(e, 4) + ", got " + Hex(w.v, 4)};
}

// Samples `n` elements of a tensor built from the arguments and compares their storage bits.
SelfTestCase Sample(const char* name, DType dt, const char* dist_json_name, Dist dist, double scale,
                    KeySpec key, const std::vector<uint64_t>& want) {
  TensorSpec t;
  t.name = name;
  t.shape = {want.size()};
  t.dtype = dt;
  t.init.dist = dist;
  t.init.scale = scale;
  t.key = key;
  (void)dist_json_name;
  auto lazy = LazyTensor::Resolve(t, 0);
  if (!lazy.ok()) return {name, false, lazy.status().ToString()};
  std::vector<unsigned char> buf(want.size() * DTypeSize(dt));
  if (auto st = lazy->Materialize(WholeTensor(t.shape), buf.data(), CpuOptions{1}); !st.ok())
    return {name, false, st.ToString()};
  std::string detail;
  bool ok = true;
  for (size_t i = 0; i < want.size(); ++i) {
    uint64_t got = 0;
    std::memcpy(&got, buf.data() + i * DTypeSize(dt), DTypeSize(dt));
    if (got != want[i]) {
      ok = false;
      detail += "element " + std::to_string(i) + ": want " + std::to_string(want[i]) + ", got " +
                std::to_string(got) + "; ";
    }
  }
  return {name, ok, detail};
}

KeySpec Seed(int64_t s) {
  KeySpec k;
  k.kind = KeySpec::Kind::kSeed;
  k.seed = s;
  return k;
}

}  // namespace

std::vector<SelfTestCase> RunSelfTest() {
  std::vector<SelfTestCase> r;
  // Random123 kat_vectors: threefry2x32_{13,20,32}, ctr ctr key key -> out out.
  r.push_back(Threefry<13>("threefry2x32_13 zeros", 0, 0, 0, 0, 0x9d1c5ec6, 0x8bd50731));
  r.push_back(Threefry<13>("threefry2x32_13 ones", ~0u, ~0u, ~0u, ~0u, 0xfd36d048, 0x2d17272c));
  r.push_back(Threefry<13>("threefry2x32_13 pi", 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344,
                           0xba3e4725, 0xf27d669e));
  r.push_back(Threefry<20>("threefry2x32_20 zeros", 0, 0, 0, 0, 0x6b200159, 0x99ba4efe));
  r.push_back(Threefry<20>("threefry2x32_20 ones", ~0u, ~0u, ~0u, ~0u, 0x1cb996fc, 0xbb002be7));
  r.push_back(Threefry<20>("threefry2x32_20 pi", 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344,
                           0xc4923a9c, 0x483df7a0));
  r.push_back(Threefry<32>("threefry2x32_32 zeros", 0, 0, 0, 0, 0xcee3d47e, 0xa23dfd5c));
  r.push_back(Threefry<32>("threefry2x32_32 ones", ~0u, ~0u, ~0u, ~0u, 0x6e2fe0d0, 0xb1b76f82));
  r.push_back(Threefry<32>("threefry2x32_32 pi", 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344,
                           0xe2827716, 0xc3c05cdf));
  // Random123 kat_vectors: philox4x32_10.
  {
    const uint32_t c0[4] = {0, 0, 0, 0}, k0[2] = {0, 0},
                   e0[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
    const uint32_t c1[4] = {~0u, ~0u, ~0u, ~0u}, k1[2] = {~0u, ~0u},
                   e1[4] = {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd};
    const uint32_t c2[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                   k2[2] = {0xa4093822, 0x299f31d0},
                   e2[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
    r.push_back(Philox("philox4x32_10 zeros", c0, k0, e0));
    r.push_back(Philox("philox4x32_10 ones", c1, k1, e1));
    r.push_back(Philox("philox4x32_10 pi", c2, k2, e2));
  }
  // JAX-published values (jax tests and docs; see docs/JAX-EXACTNESS.md).
  {
    const Key k = FoldIn(KeyFromSeed32(0), 4);
    const uint32_t got[2] = {k.k0, k.k1}, want[2] = {2285895361u, 433833334u};
    r.push_back({"jax fold_in(key(0), 4)", k.k0 == want[0] && k.k1 == want[1],
                 "want " + Hex(want, 2) + ", got " + Hex(got, 2)});
    const Key s = SplitKey(KeyFromSeed32(0), 1);
    const uint32_t sg[2] = {s.k0, s.k1}, sw[2] = {928981903u, 3453687069u};
    r.push_back({"jax split(key(0), 3)[1]", s == Key{sw[0], sw[1]},
                 "want " + Hex(sw, 2) + ", got " + Hex(sg, 2)});
  }
  r.push_back(Sample("jax bits(key(1701), (3,), uint32)", DType::kU32, "bits", Dist::kBits, 1.0,
                     Seed(1701), {1111271205u, 2679469115u, 974515252u}));
  r.push_back(Sample("jax uniform(key(0), (3,))", DType::kF32, "uniform", Dist::kUniform, 1.0,
                     Seed(0), {1064475214u, 1064993846u, 1051337244u}));
  r.push_back(Sample("jax normal(PRNGKey(0), (4,))", DType::kF32, "normal", Dist::kNormal, 1.0,
                     Seed(0), {1070576317u, 1073847792u, 3202220055u, 3181445666u}));
  r.push_back(Sample("jax normal(PRNGKey(43), (4,), bfloat16)", DType::kBF16, "normal",
                     Dist::kNormal, 1.0, Seed(43), {49028, 15868, 15827, 48979}));
  // The fingerprint's XXH3-128 path against libxxhash.
  {
    bool ok = true;
    std::string detail;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 64 && ok; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const uint64_t idx = x >> (i % 40), val = x * 0xD1B54A32D192ED03ull, seed = x ^ (x >> 29);
      unsigned char rec[16];
      for (int b = 0; b < 8; ++b) {
        rec[b] = static_cast<unsigned char>(idx >> (8 * b));
        rec[8 + b] = static_cast<unsigned char>(val >> (8 * b));
      }
      const XXH128_hash_t want = XXH3_128bits_withSeed(rec, 16, seed);
      const Fingerprint got = HashElement(idx, val, seed);
      if (got.lane0 != want.low64 || got.lane1 != want.high64) {
        ok = false;
        detail = "record " + std::to_string(i) + " differs from libxxhash";
      }
    }
    r.push_back(
        {"fingerprint record hash == XXH3_128bits_withSeed (64 random records)", ok, detail});
  }
  return r;
}

}  // namespace seedstore
