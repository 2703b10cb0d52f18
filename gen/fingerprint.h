// The per-element fingerprint hash (invariant I4). Normative definition: docs/FORMAT.md.
//
// Element e of a tensor, at row-major global flat index i with value bits v (the element's
// little-endian storage bytes, zero-extended to 64 bits), contributes
//     h = XXH3_128bits_withSeed(record, 16, seed),  record = LE64(i) || LE64(v)
// and a fingerprint is the pair of lane sums (sum h.low64, sum h.high64) mod 2^64. Sums of
// disjoint pieces add up to the sum of their union, so the result is independent of layout.
// This is an independent implementation of XXH3's 9-16 byte, 128-bit path for exactly 16-byte
// inputs; tests compare it with libxxhash on random inputs.
#pragma once
#include "gen/common.h"

namespace seedstore {

struct Fingerprint {
  uint64_t lane0 = 0, lane1 = 0;
  SEEDSTORE_HD void Add(const Fingerprint& o) {
    lane0 += o.lane0;
    lane1 += o.lane1;
  }
  SEEDSTORE_HD void Sub(const Fingerprint& o) {
    lane0 -= o.lane0;
    lane1 -= o.lane1;
  }
  friend SEEDSTORE_HD bool operator==(const Fingerprint& a, const Fingerprint& b) {
    return a.lane0 == b.lane0 && a.lane1 == b.lane1;
  }
  friend SEEDSTORE_HD bool operator!=(const Fingerprint& a, const Fingerprint& b) {
    return !(a == b);
  }
};

namespace fp_detail {
constexpr uint64_t kPrime32_2 = 0x85EBCA77ull;
constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4Full;
// XXH3's default secret, little-endian 64-bit words at byte offsets 32, 40, 48, 56.
constexpr uint64_t kSecret32 = 0x78E5C0CC4EE679CBull;
constexpr uint64_t kSecret40 = 0x2172FFCC7DD05A82ull;
constexpr uint64_t kSecret48 = 0x8E2443F7744608B8ull;
constexpr uint64_t kSecret56 = 0x4C263A81E69035E0ull;
SEEDSTORE_HD uint64_t Avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= 0x165667919E3779F9ull;
  return h ^ (h >> 32);
}
}  // namespace fp_detail

/// XXH3_128bits_withSeed of the 16-byte record LE64(index) || LE64(value_bits).
SEEDSTORE_HD Fingerprint HashElement(uint64_t index, uint64_t value_bits, uint64_t seed) {
  using namespace fp_detail;
  const uint64_t bitflip_lo = (kSecret32 ^ kSecret40) - seed;
  const uint64_t bitflip_hi = (kSecret48 ^ kSecret56) + seed;
  uint64_t m_lo, m_hi;
  Mul64To128(index ^ value_bits ^ bitflip_lo, kPrime64_1, &m_lo, &m_hi);
  m_lo += static_cast<uint64_t>(15) << 54;  // (len - 1) << 54 with len = 16
  const uint64_t in_hi = value_bits ^ bitflip_hi;
  m_hi += in_hi + static_cast<uint64_t>(static_cast<uint32_t>(in_hi)) * (kPrime32_2 - 1);
  m_lo ^= ByteSwap64(m_hi);
  uint64_t h_lo, h_hi;
  Mul64To128(m_lo, kPrime64_2, &h_lo, &h_hi);
  h_hi += m_hi * kPrime64_2;
  return Fingerprint{Avalanche(h_lo), Avalanche(h_hi)};
}

}  // namespace seedstore
