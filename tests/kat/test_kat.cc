// Known-answer vectors (label kat): Random123, JAX-published values, libxxhash. The vectors
// live in data files (tests/kat/vectors/*.json), which tests/py/test_kat_vectors.py checks
// with independent implementations too.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <random>

#include "gen/dtype.h"
#include "gen/fingerprint.h"
#include "gen/philox.h"
#include "gen/threefry.h"
#include "store/selftest.h"
#include "tests/vectors_test_util.h"

namespace seedstore {
namespace {

TEST(Kat, SelfTestVectors) {
  const auto cases = RunSelfTest();
  ASSERT_GE(cases.size(), 19u);
  for (const auto& c : cases) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
}

// Random123's kat_vectors lines (tests/kat/vectors/random123.json): Threefry-2x32 with 13, 20
// and 32 rounds, Philox-4x32-10.
TEST(Kat, Random123Vectors) {
  using testutil::HexValue;
  const nlohmann::json v = testutil::LoadVectorFile("tests/kat/vectors/random123.json");
  ASSERT_FALSE(v.is_null());
  int n = 0;
  for (const auto& e : v["threefry2x32"]) {
    const auto c = e["ctr"], k = e["key"];
    const uint32_t k0 = HexValue(k[0]), k1 = HexValue(k[1]), c0 = HexValue(c[0]),
                   c1 = HexValue(c[1]);
    Word2 w;
    switch (e["rounds"].get<int>()) {
      case 13:
        w = Threefry2x32<13>(k0, k1, c0, c1);
        break;
      case 20:
        w = Threefry2x32<20>(k0, k1, c0, c1);
        break;
      case 32:
        w = Threefry2x32<32>(k0, k1, c0, c1);
        break;
      default:
        ADD_FAILURE() << "rounds " << e["rounds"];
        continue;
    }
    EXPECT_EQ(w.v0, HexValue(e["out"][0])) << e.dump();
    EXPECT_EQ(w.v1, HexValue(e["out"][1])) << e.dump();
    ++n;
  }
  for (const auto& e : v["philox4x32"]) {
    ASSERT_EQ(e["rounds"], 10);
    const auto c = e["ctr"], k = e["key"];
    const Word4 w = Philox4x32<10>(HexValue(k[0]), HexValue(k[1]), HexValue(c[0]), HexValue(c[1]),
                                   HexValue(c[2]), HexValue(c[3]));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(w.v[i], HexValue(e["out"][i])) << e.dump();
    ++n;
  }
  EXPECT_EQ(n, 12);
}

// The fingerprint record hash equals libxxhash's XXH3_128bits_withSeed, on random and
// boundary records (index 0, 2^32, 2^64-1; all-ones values; seed 0).
TEST(Kat, FingerprintHashMatchesLibxxhash) {
  std::mt19937_64 rng(12345);
  auto check = [](uint64_t idx, uint64_t val, uint64_t seed) {
    unsigned char rec[16];
    for (int b = 0; b < 8; ++b) {
      rec[b] = static_cast<unsigned char>(idx >> (8 * b));
      rec[8 + b] = static_cast<unsigned char>(val >> (8 * b));
    }
    const XXH128_hash_t want = XXH3_128bits_withSeed(rec, 16, seed);
    const Fingerprint got = HashElement(idx, val, seed);
    EXPECT_EQ(got.lane0, want.low64) << idx << " " << val << " " << seed;
    EXPECT_EQ(got.lane1, want.high64) << idx << " " << val << " " << seed;
  };
  for (uint64_t idx : {uint64_t{0}, uint64_t{1}, uint64_t{1} << 32, ~uint64_t{0}})
    for (uint64_t val : {uint64_t{0}, uint64_t{0xFFFF}, ~uint64_t{0}})
      for (uint64_t seed : {uint64_t{0}, ~uint64_t{0}, uint64_t{42}}) check(idx, val, seed);
  for (int i = 0; i < 10000; ++i) check(rng(), rng(), rng());
}

// bfloat16 and float16 conversions, exhaustively over all 16-bit patterns (decode) and on
// the rounding boundaries (encode), against double-precision references.
TEST(Kat, HalfConversionsExhaustive) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    const float bf = BF16ToF32(b);
    if (!std::isnan(bf)) {
      EXPECT_EQ(F32ToBF16(bf), b) << h;
    }
    const float f = F16ToF32(b);
    if (!std::isnan(f)) {
      EXPECT_EQ(F32ToF16(f), b) << h;
    }
    // f16 value reference: sign * 2^(e-15) * (1 + m/1024) or subnormal m * 2^-24.
    const int e = (h >> 10) & 31, m = h & 1023;
    if (e != 31) {
      const double ref =
          (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25)) * ((h & 0x8000) ? -1 : 1);
      EXPECT_EQ(static_cast<double>(f), ref) << h;
    }
  }
  // The rounding boundaries (tests/kat/vectors/rounding.json): ties to even, overflow to inf.
  const nlohmann::json r = testutil::LoadVectorFile("tests/kat/vectors/rounding.json");
  ASSERT_FALSE(r.is_null());
  for (const auto& e : r["f32_to_bf16"])
    EXPECT_EQ(F32ToBF16(BitsFloat(testutil::HexValue(e["in"]))), testutil::HexValue(e["out"]))
        << e.dump();
  for (const auto& e : r["f32_to_f16"])
    EXPECT_EQ(F32ToF16(BitsFloat(testutil::HexValue(e["in"]))), testutil::HexValue(e["out"]))
        << e.dump();
  EXPECT_EQ(r["f32_to_bf16"].size() + r["f32_to_f16"].size(), 9u);
}

}  // namespace
}  // namespace seedstore
