// Philox-4x32 (Salmon et al., SC'11): counter-based, 128 random bits per call.
#pragma once
#include "gen/common.h"

namespace seedstore {

struct Word4 {
  uint32_t v[4];
};

/// Philox-4x32 with R rounds: encrypts counter c under key (k0, k1). Matches Random123's
/// philox4x32_R (multipliers 0xD2511F53, 0xCD9E8D57; Weyl key bumps 0x9E3779B9, 0xBB67AE85).
template <int R = 10>
SEEDSTORE_HD Word4 Philox4x32(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, uint32_t c2,
                              uint32_t c3) {
#if defined(__CUDACC__)
#pragma unroll
#else
#pragma GCC unroll 16
#endif
  for (int r = 0; r < R; ++r) {
    if (r > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
  }
  return Word4{{c0, c1, c2, c3}};
}

}  // namespace seedstore
