// The fingerprint's vector loops (gen/materialize_cpu_kernels.inc) against the scalar
// definition (gen/fingerprint.h), for every instruction-set copy this CPU can run and every
// element size: index ranges that start, end or straddle a multiple of 2^32 (where the loops
// for elements of up to 32 bits switch the index's constant high word), ranges far above
// 2^32, lengths around the vector width, random values and seeds.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "gen/fingerprint.h"
#include "gen/materialize_cpu_isa.h"

namespace seedstore {
namespace {

struct Isa {
  const char* name;
  bool runs;
  HashFn (*pick)(int element_size);
};

std::vector<Isa> Isas() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("bmi2");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  return {{"generic", true, &cpu_generic::PickHash},
          {"avx2", avx2, &cpu_avx2::PickHash},
          {"avx512", avx512, &cpu_avx512::PickHash}};
}

Fingerprint Scalar(uint64_t i, uint64_t n, const unsigned char* data, int es, uint64_t seed) {
  Fingerprint f;
  for (uint64_t k = 0; k < n; ++k) {
    uint64_t v = 0;
    std::memcpy(&v, data + k * es, es);  // little-endian bytes, zero-extended
    f.Add(HashElement(i + k, v, seed));
  }
  return f;
}

TEST(HashIsa, EveryCopyEqualsTheScalarDefinitionAcrossMultiplesOf2To32) {
  constexpr uint64_t k32 = uint64_t{1} << 32;
  struct Range {
    uint64_t i, n;
  };
  std::vector<Range> ranges = {{0, 0},           {0, 1},           {0, 7},          {0, 8},
                               {0, 9},           {3, 1000},        {k32 - 37, 90},  {k32 - 8, 16},
                               {k32 - 1, 2},     {k32, 33},        {k32 - 5, 5},    {2 * k32 - 3, 17},
                               {3 * k32 - 100, 300}, {(uint64_t{1} << 40) + 3, 1001},
                               {~uint64_t{0} - 40, 41}};
  std::mt19937_64 rng(4);
  for (int t = 0; t < 20; ++t) {  // random ranges straddling a multiple of 2^32
    const uint64_t m = (1 + rng() % 1000) * k32;
    ranges.push_back({m - 1 - rng() % 64, 1 + rng() % 200});
  }
  std::vector<unsigned char> data(8 * 4096);
  int ran = 0;
  for (const Isa& isa : Isas()) {
    if (!isa.runs) {
      std::printf("[  SKIP    ] fingerprint: this CPU cannot run the %s copy\n", isa.name);
      continue;
    }
    ++ran;
    for (int es : {1, 2, 4, 8}) {
      const HashFn hash = isa.pick(es);
      for (const Range& r : ranges) {
        for (auto& b : data) b = static_cast<unsigned char>(rng());
        const uint64_t seed = rng();
        ASSERT_LE(r.n * es, data.size());
        const Fingerprint got = hash(r.i, r.n, data.data(), seed);
        const Fingerprint want = Scalar(r.i, r.n, data.data(), es, seed);
        ASSERT_EQ(got, want) << isa.name << " es=" << es << " i=" << r.i << " n=" << r.n;
      }
    }
  }
  EXPECT_GE(ran, 1);
}

}  // namespace
}  // namespace seedstore
