// Transcendental functions that reproduce XLA's decompositions bit for bit, written with
// explicit operations only (no libm beyond IEEE sqrt), so host and device give equal bits.
// PROVISIONAL: owned by the "XLA math exactness" work item; being replaced.
#pragma once
#include <cmath>
#include "gen/common.h"

namespace seedstore {

SEEDSTORE_HD float SqrtF32(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return __builtin_sqrtf(x);
#endif
}
SEEDSTORE_HD double SqrtF64(double x) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(x);
#else
  return __builtin_sqrt(x);
#endif
}

/// log1p for float32 (Cephes-style logf of 1+x with a compensation term).
SEEDSTORE_HD float XlaLog1pF32(float x) {
  const float u = 1.0f + x;
  // frexp-like decomposition of u into m in [sqrt(0.5), sqrt(2)) and exponent e.
  const uint32_t ub = BitCast<uint32_t>(u);
  int e = static_cast<int>((ub >> 23) & 0xFF) - 126;
  float m = BitCast<float>((ub & 0x007FFFFFu) | 0x3F000000u);  // [0.5, 1)
  const bool small = m < 0.707106781186547524f;
  e = small ? e - 1 : e;
  m = small ? (m + m) - 1.0f : m - 1.0f;
  const float z = m * m;
  float y = 7.0376836292E-2f;
  y = y * m + -1.1514610310E-1f;
  y = y * m + 1.1676998740E-1f;
  y = y * m + -1.2420140846E-1f;
  y = y * m + 1.4249322787E-1f;
  y = y * m + -1.6668057665E-1f;
  y = y * m + 2.0000714765E-1f;
  y = y * m + -2.4999993993E-1f;
  y = y * m + 3.3333331174E-1f;
  y = y * m * z;
  const float fe = static_cast<float>(e);
  y = y + -2.12194440e-4f * fe;
  y = y + -0.5f * z;
  float r = m + y;
  r = r + 0.693359375f * fe;
  // Compensate the rounding of 1+x: log1p(x) ~= log(u) + (x - (u - 1)) / u.
  const float c = (x - (u - 1.0f)) / u;
  return r + c;
}

/// erf_inv for float32 as XLA's ErfInv32 (Giles' single-precision approximation).
SEEDSTORE_HD float XlaErfInvF32(float x) {
  const float w0 = -XlaLog1pF32(x * -x);
  const bool lt = w0 < 5.0f;
  const float w = lt ? w0 - 2.5f : SqrtF32(w0) - 3.0f;
  const float a[9] = {2.81022636e-08f, 3.43273939e-07f, -3.5233877e-06f, -4.39150654e-06f,
                      0.00021858087f, -0.00125372503f, -0.00417768164f, 0.246640727f,
                      1.50140941f};
  const float b[9] = {-0.000200214257f, 0.000100950558f, 0.00134934322f, -0.00367342844f,
                      0.00573950773f, -0.0076224613f, 0.00943887047f, 1.00167406f,
                      2.83297682f};
  float p = lt ? a[0] : b[0];
  for (int i = 1; i < 9; ++i) p = (lt ? a[i] : b[i]) + p * w;
  return p * x;
}

/// erf_inv for float64 (PROVISIONAL: host libm based; to be replaced by XLA's ErfInv64).
SEEDSTORE_HD double XlaErfInvF64(double x) {
  double y = static_cast<double>(XlaErfInvF32(static_cast<float>(x)));
#if !defined(__CUDA_ARCH__)
  for (int i = 0; i < 3; ++i) y -= (std::erf(y) - x) / (1.1283791670955126 * std::exp(-y * y));
#endif
  return y;
}

/// erf for float32 (PROVISIONAL).
SEEDSTORE_HD float XlaErfF32(float x) {
#if !defined(__CUDA_ARCH__)
  return static_cast<float>(std::erf(static_cast<double>(x)));
#else
  return erff(x);
#endif
}
SEEDSTORE_HD double XlaErfF64(double x) {
#if !defined(__CUDA_ARCH__)
  return std::erf(x);
#else
  return erf(x);
#endif
}

}  // namespace seedstore
