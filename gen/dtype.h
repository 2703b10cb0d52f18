// Element types and exact, round-to-nearest-even conversions (no hardware dependence).
#pragma once
#include "gen/common.h"

namespace seedstore {

/// Element types of tensors. The numbering is part of no file format (names are stored).
enum class DType : uint8_t {
  kF32,
  kF64,
  kBF16,
  kF16,
  kU8,
  kU16,
  kU32,
  kU64,
  kI8,
  kI16,
  kI32,
  kI64,
  kBool,
};
constexpr int kNumDTypes = 13;

SEEDSTORE_HD constexpr int DTypeSize(DType t) {
  switch (t) {
    case DType::kF64:
    case DType::kU64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kU32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
    case DType::kU16:
    case DType::kI16:
      return 2;
    default:
      return 1;
  }
}
SEEDSTORE_HD constexpr bool IsFloat(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kBF16 || t == DType::kF16;
}

SEEDSTORE_HD uint32_t FloatBits(float f) { return BitCast<uint32_t>(f); }
SEEDSTORE_HD float BitsFloat(uint32_t u) { return BitCast<float>(u); }

/// float32 -> bfloat16, round to nearest even; NaN stays a (quiet) NaN.
SEEDSTORE_HD uint16_t F32ToBF16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
SEEDSTORE_HD float BF16ToF32(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

/// float32 -> IEEE binary16, round to nearest even, with subnormals, overflow to inf, NaN.
SEEDSTORE_HD uint16_t F32ToF16(float f) {
  uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7FFFFFFFu;
  if (u > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);
  if (u >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65536 or inf
  if (u >= 0x38800000u) {                                              // normal binary16
    u += 0xC8000FFFu + ((u >> 13) & 1u);  // rebias exponent by -112, round on 13 bits
    return static_cast<uint16_t>(sign | (u >> 13));
  }
  if (u < 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 rounds to zero
  const uint32_t e = u >> 23, m = (u & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}
SEEDSTORE_HD float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  if (e == 0) {
    const float mag = static_cast<float>(m) * 5.9604644775390625e-8f;  // exact: m * 2^-24
    return BitsFloat(FloatBits(mag) | sign);
  }
  if (e == 31) return BitsFloat(sign | 0x7F800000u | (m << 13));
  return BitsFloat(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace seedstore
