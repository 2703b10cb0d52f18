// Copyright seedstore authors. Shared macros for code compiled both by the host compiler and nvcc.
#pragma once
#include <cstdint>
#include <cstring>

/// SEEDSTORE_HD marks a pure function callable from host and device code (house style H1).
#if defined(__CUDACC__)
#define SEEDSTORE_HD __host__ __device__ __forceinline__
#else
#define SEEDSTORE_HD inline __attribute__((always_inline))
#endif

namespace seedstore {

/// Bit casts usable on host and device (memcpy is understood by both compilers).
template <class To, class From>
SEEDSTORE_HD To BitCast(From from) {
  static_assert(sizeof(To) == sizeof(From), "BitCast needs equal sizes");
  To to;
  memcpy(&to, &from, sizeof(To));
  return to;
}

SEEDSTORE_HD uint32_t Rotl32(uint32_t x, int d) { return (x << d) | (x >> (32 - d)); }

SEEDSTORE_HD uint64_t ByteSwap64(uint64_t x) {
  return ((x & 0x00000000000000FFull) << 56) | ((x & 0x000000000000FF00ull) << 40) |
         ((x & 0x0000000000FF0000ull) << 24) | ((x & 0x00000000FF000000ull) << 8) |
         ((x & 0x000000FF00000000ull) >> 8) | ((x & 0x0000FF0000000000ull) >> 24) |
         ((x & 0x00FF000000000000ull) >> 40) | ((x & 0xFF00000000000000ull) >> 56);
}

/// Full 64x64 -> 128-bit product.
SEEDSTORE_HD void Mul64To128(uint64_t a, uint64_t b, uint64_t* lo, uint64_t* hi) {
#if defined(__CUDA_ARCH__)
  *lo = a * b;
  *hi = __umul64hi(a, b);
#else
  unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  *lo = static_cast<uint64_t>(p);
  *hi = static_cast<uint64_t>(p >> 64);
#endif
}

}  // namespace seedstore
