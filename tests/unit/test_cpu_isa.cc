// The per-instruction-set copies of the CPU loops (gen/materialize_cpu_kernels.inc,
// gen/checksum_kernels.inc), every copy this CPU can run, against their definitions:
// * the chunk checksum (gen/checksum.h) against libxxhash itself, one-shot and streaming, on
//   xxHash's length classes (0, 1-3, 4-8, 9-16, 17-128, 129-240, and longer inputs through
//   whole and partial stripes and blocks), random bytes, unaligned addresses, a stream cut at
//   random points;
// * the fingerprint's vector loops against the scalar definition (gen/fingerprint.h), for
//   every element size, on index ranges that start, end or straddle a multiple of 2^32 (where
//   the loops for elements of up to 32 bits switch the index's constant high word), ranges
//   far above 2^32, lengths around the vector width, random values and seeds.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gen/checksum.h"
#include "gen/fingerprint.h"
#include "gen/materialize_cpu.h"
#include "gen/materialize_cpu_isa.h"

namespace seedstore {
namespace {

struct Isa {
  const char* name;
  bool runs;
  ChecksumFns (*pick_checksum)();  // called only where `runs`: a copy may use its ISA anywhere
  HashFn (*pick_hash)(int element_size);
  ChecksumFns checksum = {};
};

std::vector<Isa> Isas() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("bmi2");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  return {{"generic", true, &cpu_generic::PickChecksum, &cpu_generic::PickHash},
          {"avx2", avx2, &cpu_avx2::PickChecksum, &cpu_avx2::PickHash},
          {"avx512", avx512, &cpu_avx512::PickChecksum, &cpu_avx512::PickHash}};
}

// The copies this CPU runs; says which it cannot.
std::vector<Isa> Runnable() {
  std::vector<Isa> out;
  for (Isa isa : Isas()) {
    if (isa.runs) {
      isa.checksum = isa.pick_checksum();
      out.push_back(isa);
    } else std::printf("[  SKIP    ] this CPU cannot run the %s copy\n", isa.name);
  }
  return out;
}

// Lengths around every boundary of XXH3's code paths: 0; 1-3; 4-8; 9-16; 17-128; 129-240;
// then 64-byte stripes, 1024-byte blocks (16 stripes with the default secret) and the
// streaming state's 256-byte internal buffer.
std::vector<size_t> Lengths() {
  std::vector<size_t> n;
  for (size_t i = 0; i <= 260; ++i) n.push_back(i);
  for (size_t b : {511, 512, 513, 1023, 1024, 1025, 1087, 1088, 1089, 4095, 4096, 4097, 16384,
                   65537, 1 << 20, (1 << 20) + 7, 3 * (1 << 20) + 13})
    n.push_back(b);
  return n;
}

TEST(CpuIsa, ChecksumOfEveryCopyEqualsLibxxhashOnEveryLengthClass) {
  std::mt19937_64 rng(20261201);
  std::vector<unsigned char> buf((3 << 20) + 64);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  const std::vector<Isa> isas = Runnable();
  ASSERT_GE(isas.size(), 1u);
  for (const Isa& isa : isas) {
    for (size_t n : Lengths()) {
      for (size_t off : {size_t{0}, size_t{1}, size_t{13}}) {  // unaligned starts too
        const unsigned char* p = buf.data() + off;
        const uint64_t want = XXH3_64bits(p, n);
        ASSERT_EQ(isa.checksum.one_shot(p, n), want) << isa.name << " n=" << n << " off=" << off;
      }
    }
  }
  EXPECT_EQ(Checksum64(nullptr, 0), XXH3_64bits(nullptr, 0));
  EXPECT_EQ(Checksum64(buf.data(), 1 << 20), XXH3_64bits(buf.data(), 1 << 20));
}

TEST(CpuIsa, ChecksumStreamsCutAnywhereEqualTheOneShotHash) {
  std::mt19937_64 rng(7);
  std::vector<unsigned char> buf(200000);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (const Isa& isa : Runnable()) {
    for (int trial = 0; trial < 200; ++trial) {
      const size_t n = trial < 20 ? static_cast<size_t>(trial) : rng() % buf.size();
      alignas(64) unsigned char state[Checksum64Stream::kStateBytes];
      isa.checksum.reset(state);
      size_t at = 0;
      while (at < n) {  // pieces of 0 to ~2 KiB, so the 256-byte buffer fills at every phase
        const size_t k = std::min(n - at, static_cast<size_t>(rng() % 2100));
        isa.checksum.update(state, buf.data() + at, k);
        at += k;
      }
      ASSERT_EQ(isa.checksum.digest(state), XXH3_64bits(buf.data(), n)) << isa.name << " n=" << n;
    }
  }
  // The public class, copied mid-stream: both copies go on independently.
  Checksum64Stream a;
  a.Update(buf.data(), 1000);
  Checksum64Stream b = a;
  a.Update(buf.data() + 1000, 5000);
  b.Update(buf.data() + 1000, 7);
  EXPECT_EQ(a.Digest(), XXH3_64bits(buf.data(), 6000));
  EXPECT_EQ(b.Digest(), XXH3_64bits(buf.data(), 1007));
  a.Reset();
  EXPECT_EQ(a.Digest(), XXH3_64bits(nullptr, 0));
  std::printf("checksum: dispatcher picked the %s copy\n", CpuIsaName());
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

TEST(CpuIsa, FingerprintOfEveryCopyEqualsTheScalarDefinitionAcrossMultiplesOf2To32) {
  constexpr uint64_t k32 = uint64_t{1} << 32;
  struct Range {
    uint64_t i, n;
  };
  std::vector<Range> ranges = {{0, 0},
                               {0, 1},
                               {0, 7},
                               {0, 8},
                               {0, 9},
                               {3, 1000},
                               {k32 - 37, 90},
                               {k32 - 8, 16},
                               {k32 - 1, 2},
                               {k32, 33},
                               {k32 - 5, 5},
                               {2 * k32 - 3, 17},
                               {3 * k32 - 100, 300},
                               {(uint64_t{1} << 40) + 3, 1001},
                               {~uint64_t{0} - 40, 41}};
  std::mt19937_64 rng(4);
  for (int t = 0; t < 20; ++t) {  // random ranges straddling a multiple of 2^32
    const uint64_t m = (1 + rng() % 1000) * k32;
    ranges.push_back({m - 1 - rng() % 64, 1 + rng() % 200});
  }
  std::vector<unsigned char> data(8 * 4096);
  const std::vector<Isa> isas = Runnable();
  ASSERT_GE(isas.size(), 1u);
  for (const Isa& isa : isas) {
    for (int es : {1, 2, 4, 8}) {
      const HashFn hash = isa.pick_hash(es);
      for (const Range& r : ranges) {
        for (auto& b : data) b = static_cast<unsigned char>(rng());
        const uint64_t seed = rng();
        ASSERT_LE(r.n * es + 8, data.size());
        const size_t off = rng() % 8;  // callers' buffers need not be aligned
        const unsigned char* p = data.data() + off;
        const Fingerprint got = hash(r.i, r.n, p, seed);
        const Fingerprint want = Scalar(r.i, r.n, p, es, seed);
        ASSERT_EQ(got, want) << isa.name << " es=" << es << " i=" << r.i << " n=" << r.n
                             << " offset=" << off;
      }
    }
  }
}

}  // namespace
}  // namespace seedstore
