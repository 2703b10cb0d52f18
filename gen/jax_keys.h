// jax.random key operations for the threefry2x32 implementation, in partitionable mode
// (jax_threefry_partitionable=True, JAX's default since 0.5.0). A key is two 32-bit words.
// Reference: ../shared/reference/jax-random-spec.md sections 1, 4, 6.
#pragma once
#include "gen/threefry.h"

namespace seedstore {

struct Key {
  uint32_t k0 = 0, k1 = 0;
  friend bool operator==(Key a, Key b) { return a.k0 == b.k0 && a.k1 == b.k1; }
};

/// jax.random.key(seed) in JAX's default 32-bit mode: the seed wraps to 32 bits -> [0, seed].
SEEDSTORE_HD Key KeyFromSeed32(int64_t seed) { return Key{0u, static_cast<uint32_t>(seed)}; }

/// jax.random.key(seed) with jax_enable_x64: [seed >> 32, seed & 0xffffffff] (two's complement).
SEEDSTORE_HD Key KeyFromSeed64(int64_t seed) {
  const uint64_t s = static_cast<uint64_t>(seed);
  return Key{static_cast<uint32_t>(s >> 32), static_cast<uint32_t>(s)};
}

/// Threefry20 of the 64-bit counter i = (hi, lo) under key: the per-element hash of
/// partitionable mode. Element i of any JAX array drawn from `key` uses this value.
SEEDSTORE_HD Word2 HashCounter(Key key, uint64_t i) {
  return Threefry2x32<20>(key.k0, key.k1, static_cast<uint32_t>(i >> 32), static_cast<uint32_t>(i));
}

/// jax.random.split(key, shape)[i] where i is the row-major flat index into shape.
SEEDSTORE_HD Key SplitKey(Key key, uint64_t i) {
  const Word2 w = HashCounter(key, i);
  return Key{w.v0, w.v1};
}

/// jax.random.fold_in(key, data); data is converted to uint32 as jnp.asarray(data, 'uint32').
SEEDSTORE_HD Key FoldIn(Key key, uint32_t data) {
  const Word2 w = Threefry2x32<20>(key.k0, key.k1, 0u, data);
  return Key{w.v0, w.v1};
}

/// jax.random.bits for widths 8/16/32: low bits of o0 ^ o1. 64: (o0 << 32) | o1.
SEEDSTORE_HD uint32_t JaxBits32(Key key, uint64_t i) {
  const Word2 w = HashCounter(key, i);
  return w.v0 ^ w.v1;
}
SEEDSTORE_HD uint64_t JaxBits64(Key key, uint64_t i) {
  const Word2 w = HashCounter(key, i);
  return (static_cast<uint64_t>(w.v0) << 32) | w.v1;
}

}  // namespace seedstore
