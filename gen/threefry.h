// Threefry-2x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
// Counter-based: a pure function (counter, key) -> 64 random bits. Threefry2x32<20> is the
// generator JAX uses; its round constants and key schedule are those of Random123.
#pragma once
#include "gen/common.h"

namespace seedstore {

struct Word2 {
  uint32_t v0, v1;
};

/// Threefry-2x32 with R rounds: encrypts counter (x0, x1) under key (k0, k1).
/// Key injection after every 4th round; matches Random123's threefry2x32_R for R <= 32.
template <int R = 20>
SEEDSTORE_HD Word2 Threefry2x32(uint32_t k0, uint32_t k1, uint32_t x0, uint32_t x1) {
  const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  constexpr int kRot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  x0 += ks[0];
  x1 += ks[1];
#if defined(__CUDACC__)
#pragma unroll
#else
#pragma GCC unroll 32
#endif
  for (int r = 0; r < R; ++r) {
    x0 += x1;
    x1 = Rotl32(x1, kRot[r % 8]);
    x1 ^= x0;
    if (r % 4 == 3) {
      const int s = (r + 1) / 4;
      x0 += ks[s % 3];
      x1 += ks[(s + 1) % 3] + static_cast<uint32_t>(s);
    }
  }
  return Word2{x0, x1};
}

}  // namespace seedstore
