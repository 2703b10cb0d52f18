// Known-answer vectors (label kat): Random123, JAX-published values, libxxhash.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <random>

#include "gen/dtype.h"
#include "gen/fingerprint.h"
#include "store/selftest.h"

namespace seedstore {
namespace {

TEST(Kat, SelfTestVectors) {
  const auto cases = RunSelfTest();
  ASSERT_GE(cases.size(), 19u);
  for (const auto& c : cases) EXPECT_TRUE(c.passed) << c.name << ": " << c.detail;
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
      const double ref = (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25)) *
                         ((h & 0x8000) ? -1 : 1);
      EXPECT_EQ(static_cast<double>(f), ref) << h;
    }
  }
  // Ties round to even; just above a tie rounds up.
  EXPECT_EQ(F32ToBF16(BitsFloat(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(F32ToBF16(BitsFloat(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(F32ToBF16(BitsFloat(0x3F808001u)), 0x3F81);
  EXPECT_EQ(F32ToF16(65519.0f), 0x7BFF);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7C00);                  // rounds to inf
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);     // tie to even (zero)
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 ulp tie -> even 2
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000);
}

}  // namespace
}  // namespace seedstore
