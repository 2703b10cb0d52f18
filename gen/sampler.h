// Per-element samplers: the value of element i of a lazy tensor as a pure function of
// (SamplerParams, i) -- invariant I1 by construction. The CPU materializer and the CUDA
// kernels both call these functions (I2).
//
// Generator kThreefry reproduces jax.random (partitionable mode) bit for bit, including its
// rounding in the tensor's dtype. Generator kPhilox is seedstore's native generator:
//   * Philox-4x32-10 with key (k0, k1) and counter (lo32(b), hi32(b), 0, 0) for block b;
//   * 32-bit-or-narrower dtypes: element i uses word (i & 3) of block b = i >> 2;
//     64-bit dtypes: element i uses words (2*(i&1), 2*(i&1)+1) of block b = i >> 1;
//   * floats are computed in float32 (float64 for f64) and rounded once to the dtype, so
//     bfloat16/float16 values have the dtype's full resolution.
// The exact formulas are normative in docs/FORMAT.md ("Samplers").
#pragma once
#include "gen/dtype.h"
#include "gen/jax_keys.h"
#include "gen/philox.h"
#include "gen/xla_math.h"

namespace seedstore {

enum class Generator : uint8_t { kThreefry, kPhilox };
enum class Dist : uint8_t { kBits, kUniform, kNormal, kTruncatedNormal, kConstant, kZeros, kOnes };

/// Which compiled form of a jax.random init a kThreefry tensor reproduces (docs/JAX-EXACTNESS.md
/// "Flavours"). They differ only for normal and truncated_normal:
///   kEager: op by op -- `jax.random.normal(key, shape, dtype) * scale + mean` run outside jit
///           (each op rounded in the dtype); the truncation bounds are runtime values.
///   kJit:   what XLA-CPU compiles for the same expression inside `jax.jit` with Python-constant
///           parameters: the algebraic simplifier folds `(sqrt2 * erf_inv(u)) * scale` into
///           `erf_inv(u) * round(sqrt2 * scale)`, `x * scale + mean` becomes one FMA, and
///           erf(bound / sqrt2) is constant-folded (with the C library's erff, FoldedErfF32).
/// Philox ignores it.
enum class Flavour : uint8_t { kEager, kJit };

/// Fully resolved, trivially copyable description of a lazy tensor's elements. Built on the
/// host by PrepareSampler (store/) from an init spec; every constant is already rounded to
/// the dtype, held as float (16/32-bit floats) and double (f64).
struct SamplerParams {
  Generator generator = Generator::kThreefry;
  Dist dist = Dist::kZeros;
  DType dtype = DType::kF32;
  Key key;
  // uniform: lo = minval, range = maxval - minval (rounded in dtype for threefry);
  // normal (threefry): lo = nextafter(-1, 0), range = 1 - lo;
  // truncated_normal: lo = erf(lower/sqrt2), range = erf(upper/sqrt2) - lo.
  float lo_f = 0, range_f = 0;
  double lo_d = 0, range_d = 0;
  // truncated_normal clip bounds; philox uniform: clip_hi_f = largest dtype value < maxval.
  float clip_lo_f = 0, clip_hi_f = 0;
  double clip_lo_d = 0, clip_hi_d = 0;
  bool has_scale = false, has_mean = false;  // apply x*scale, then x+mean (only when set)
  // Threefry normal/truncated_normal of float32, float16, float64: the kJit form (see Flavour);
  // bfloat16 has one form (XLA rounds each bf16 op before the simplifier can fold it).
  bool jit = false;
  float sqrt2_scale_f = 1;  // jit normal with scale: round_dtype(round_dtype(sqrt2) * scale)
  double sqrt2_scale_d = 1;
  float scale_f = 1, mean_f = 0;
  double scale_d = 1, mean_d = 0;
  uint64_t const_bits = 0;  // constant/zeros/ones: the value's storage bits
};

template <DType D>
struct StorageOf;
template <>
struct StorageOf<DType::kF32> {
  using type = float;
};
template <>
struct StorageOf<DType::kF64> {
  using type = double;
};
template <>
struct StorageOf<DType::kBF16> {
  using type = uint16_t;
};
template <>
struct StorageOf<DType::kF16> {
  using type = uint16_t;
};
template <>
struct StorageOf<DType::kU8> {
  using type = uint8_t;
};
template <>
struct StorageOf<DType::kU16> {
  using type = uint16_t;
};
template <>
struct StorageOf<DType::kU32> {
  using type = uint32_t;
};
template <>
struct StorageOf<DType::kU64> {
  using type = uint64_t;
};
template <>
struct StorageOf<DType::kI8> {
  using type = int8_t;
};
template <>
struct StorageOf<DType::kI16> {
  using type = int16_t;
};
template <>
struct StorageOf<DType::kI32> {
  using type = int32_t;
};
template <>
struct StorageOf<DType::kI64> {
  using type = int64_t;
};
template <>
struct StorageOf<DType::kBool> {
  using type = uint8_t;
};
template <DType D>
using StorageT = typename StorageOf<D>::type;

/// Zero-extended storage bits of a value (what the fingerprint hashes).
template <class T>
SEEDSTORE_HD uint64_t ValueBits(T v) {
  if constexpr (sizeof(T) == 8) return BitCast<uint64_t>(v);
  if constexpr (sizeof(T) == 4) return BitCast<uint32_t>(v);
  if constexpr (sizeof(T) == 2) return BitCast<uint16_t>(v);
  if constexpr (sizeof(T) == 1) return BitCast<uint8_t>(v);
}

namespace sampler_detail {

/// Round a float32 to dtype D and back (identity for f32): "compute in dtype".
template <DType D>
SEEDSTORE_HD float RoundIn(float x) {
  if constexpr (D == DType::kBF16) return BF16ToF32(F32ToBF16(x));
  if constexpr (D == DType::kF16) return F16ToF32(F32ToF16(x));
  return x;
}
template <DType D>
SEEDSTORE_HD StorageT<D> StoreFloat(float x) {
  if constexpr (D == DType::kBF16) return F32ToBF16(x);
  if constexpr (D == DType::kF16) return F32ToF16(x);
  if constexpr (D == DType::kF32) return x;
}

constexpr float kSqrt2F = 1.41421353816986083984375f;  // float32(sqrt(2))
constexpr double kSqrt2D = 1.4142135623730951;

// ---- threefry (jax.random) --------------------------------------------------------------

SEEDSTORE_HD bool SignBit(float x) { return (BitCast<uint32_t>(x) >> 31) != 0; }
SEEDSTORE_HD bool SignBit(double x) { return (BitCast<uint64_t>(x) >> 63) != 0; }
/// XLA's maximum and minimum of floats (llvm.maximum / llvm.minimum): -0 < +0, so
/// max(-0, +0) = +0 and min(-0, +0) = -0. No NaN reaches them here.
template <class T>
SEEDSTORE_HD T XlaMax(T a, T b) {
  return a > b || (a == b && !SignBit(a)) ? a : b;
}
template <class T>
SEEDSTORE_HD T XlaMin(T a, T b) {
  return a < b || (a == b && SignBit(a)) ? a : b;
}

/// jax.random.uniform's [0, 1) value for element i, exact, as float (16/32-bit dtypes).
template <DType D>
SEEDSTORE_HD float JaxUnit(Key key, uint64_t i) {
  const uint32_t b = JaxBits32(key, i);
  if constexpr (D == DType::kF32) return BitsFloat((b >> 9) | 0x3F800000u) - 1.0f;
  if constexpr (D == DType::kF16)
    return F16ToF32(static_cast<uint16_t>(((b & 0xFFFFu) >> 6) | 0x3C00u)) - 1.0f;
  if constexpr (D == DType::kBF16)
    return BF16ToF32(static_cast<uint16_t>(((b & 0xFFu) >> 1) | 0x3F80u)) - 1.0f;
}
SEEDSTORE_HD double JaxUnitF64(Key key, uint64_t i) {
  return BitCast<double>((JaxBits64(key, i) >> 12) | 0x3FF0000000000000ull) - 1.0;
}

/// floats * range + lo, then max(lo, .), each op rounded in dtype and flushed
/// (jax.random.uniform).
/// XLA-CPU fuses the f32/f16/f64 multiply-add into one FMA (AllowFPOpFusion=Fast; f16 is
/// computed as an f32 FMA rounded to f16); bf16 ops are split by explicit converts, so bf16
/// rounds after each op. Verified against jax.random.uniform (tests/py/test_jax_random.py).
template <DType D>
SEEDSTORE_HD float JaxAffine(float unit, float lo, float range) {
  float v;
  if constexpr (D == DType::kBF16) v = RoundIn<D>(Flush(RoundIn<D>(Flush(unit * range)) + lo));
  else v = RoundIn<D>(Flush(FmaF32(unit, range, lo)));
  return XlaMax(lo, v);
}
SEEDSTORE_HD double JaxAffineF64(double unit, double lo, double range) {
  return XlaMax(lo, Flush(FmaF64(unit, range, lo)));
}

/// `x * scale + mean` (each part only when set). Eager: each op rounded in the dtype. Jit
/// (p.jit, not bf16): XLA-CPU contracts the multiply-add into one FMA (f16: an f32 FMA rounded
/// once to f16, as for uniform). Every result flushed.
template <DType D>
SEEDSTORE_HD float JaxScaleMean(const SamplerParams& p, float x) {
  if (D != DType::kBF16 && p.jit && p.has_scale && p.has_mean)
    return RoundIn<D>(Flush(FmaF32(x, p.scale_f, p.mean_f)));
  if (p.has_scale) x = RoundIn<D>(Flush(p.scale_f * x));
  if (p.has_mean) x = RoundIn<D>(Flush(x + p.mean_f));
  return x;
}
/// float64 `x * scale + mean`, as JaxScaleMean; flushed (Xla: threefry) or not (philox).
template <bool Xla>
SEEDSTORE_HD double ScaleMeanF64(const SamplerParams& p, double x) {
  auto f = [](double v) { return Xla ? Flush(v) : v; };
  if (p.jit && p.has_scale && p.has_mean) return f(FmaF64(x, p.scale_d, p.mean_d));
  if (p.has_scale) x = f(p.scale_d * x);
  if (p.has_mean) x = f(x + p.mean_d);
  return x;
}

/// jax.random.normal's last step `sqrt2 * e` (e = erf_inv(u) rounded to the dtype) with the
/// user's `* scale + mean`. Jit (not bf16): the simplifier folds sqrt2 into the scale, so
/// x = e * m with m = round(sqrt2 * scale) (or sqrt2), and `+ mean` contracts with that
/// multiply into one FMA.
template <DType D>
SEEDSTORE_HD float JaxNormalTail(const SamplerParams& p, float e) {
  const float sqrt2 = RoundIn<D>(kSqrt2F);
  if (D != DType::kBF16 && p.jit) {
    const float m = p.has_scale ? p.sqrt2_scale_f : sqrt2;
    return RoundIn<D>(Flush(p.has_mean ? FmaF32(e, m, p.mean_f) : e * m));
  }
  return JaxScaleMean<D>(p, RoundIn<D>(Flush(sqrt2 * e)));
}
SEEDSTORE_HD double JaxNormalTailF64(const SamplerParams& p, double e) {
  if (p.jit) {
    const double m = p.has_scale ? p.sqrt2_scale_d : kSqrt2D;
    return Flush(p.has_mean ? FmaF64(e, m, p.mean_d) : e * m);
  }
  return ScaleMeanF64<true>(p, Flush(kSqrt2D * e));
}

/// The two halves of a 16/32-bit float threefry element: the uniform u (jax.random.uniform
/// over [lo, lo+range) in dtype D), then the transform of u (erf_inv, clip, scale, mean,
/// store). ThreefryElement is exactly their composition; the CPU loops run them as two passes
/// over a tile (shorter dependency chains, +35% throughput).
template <DType D>
SEEDSTORE_HD float ThreefryUniform(const SamplerParams& p, uint64_t i) {
  return JaxAffine<D>(JaxUnit<D>(p.key, i), p.lo_f, p.range_f);
}
template <Dist X, DType D>
SEEDSTORE_HD StorageT<D> ThreefryFromUniform(const SamplerParams& p, float u) {
  if constexpr (X == Dist::kNormal) {
    return StoreFloat<D>(JaxNormalTail<D>(p, RoundIn<D>(Flush(XlaErfInvF32(u)))));
  } else if constexpr (X == Dist::kTruncatedNormal) {
    float x = RoundIn<D>(Flush(RoundIn<D>(kSqrt2F) * RoundIn<D>(Flush(XlaErfInvF32(u)))));
    x = XlaMin(XlaMax(x, p.clip_lo_f), p.clip_hi_f);  // jnp.clip
    return StoreFloat<D>(JaxScaleMean<D>(p, x));
  } else {
    return StoreFloat<D>(JaxScaleMean<D>(p, u));
  }
}

template <Dist X, DType D>
SEEDSTORE_HD StorageT<D> ThreefryElement(const SamplerParams& p, uint64_t i) {
  if constexpr (X == Dist::kBits) {
    if constexpr (D == DType::kU64) return JaxBits64(p.key, i);
    else return static_cast<StorageT<D>>(JaxBits32(p.key, i));
  } else if constexpr (D == DType::kF64) {
    const double u = JaxAffineF64(JaxUnitF64(p.key, i), p.lo_d, p.range_d);
    if constexpr (X == Dist::kNormal) {
      return JaxNormalTailF64(p, Flush(XlaErfInvF64(u)));
    } else if constexpr (X == Dist::kTruncatedNormal) {
      const double x = Flush(kSqrt2D * Flush(XlaErfInvF64(u)));
      return ScaleMeanF64<true>(p, XlaMin(XlaMax(x, p.clip_lo_d), p.clip_hi_d));  // jnp.clip
    } else {
      return ScaleMeanF64<true>(p, u);
    }
  } else {
    return ThreefryFromUniform<X, D>(p, ThreefryUniform<D>(p, i));
  }
}

// ---- philox (native) --------------------------------------------------------------------

template <DType D>
SEEDSTORE_HD constexpr int PerBlock() {
  return DTypeSize(D) == 8 ? 2 : 4;
}

SEEDSTORE_HD Word4 PhiloxBlock(Key key, uint64_t block) {
  return Philox4x32<10>(key.k0, key.k1, static_cast<uint32_t>(block),
                        static_cast<uint32_t>(block >> 32), 0u, 0u);
}

/// Element `lane` of a Philox block, for 32-bit-or-narrower dtypes (one word).
template <Dist X, DType D>
SEEDSTORE_HD StorageT<D> PhiloxFromWord(const SamplerParams& p, uint32_t w) {
  if constexpr (X == Dist::kBits) {
    return static_cast<StorageT<D>>(w);
  } else {
    float x;
    if constexpr (X == Dist::kUniform) {
      const float unit = static_cast<float>(w >> 8) * 5.9604644775390625e-8f;  // [0,1), 2^-24
      x = p.lo_f + unit * p.range_f;
    } else {
      // Odd multiple of 2^-24 in (-1, 1): exact and symmetric.
      const float u = static_cast<float>(static_cast<int32_t>((w >> 8) * 2u + 1u) - (1 << 24)) *
                      5.9604644775390625e-8f;
      if constexpr (X == Dist::kNormal) {
        x = kSqrt2F * XlaErfInvF32(u);
      } else {  // truncated: map u to (lo, lo + range) in erf space
        const float t = p.lo_f + (u + 1.0f) * 0.5f * p.range_f;
        x = kSqrt2F * XlaErfInvF32(t);
        x = x > p.clip_lo_f ? x : p.clip_lo_f;
        x = x < p.clip_hi_f ? x : p.clip_hi_f;
      }
    }
    if (p.has_scale) x = p.scale_f * x;
    if (p.has_mean) x = x + p.mean_f;
    float r = RoundIn<D>(x);
    if constexpr (X == Dist::kUniform) r = r < p.clip_hi_f ? r : p.clip_hi_f;
    return StoreFloat<D>(r);
  }
}

/// Element from two words (hi, lo), for 64-bit dtypes.
template <Dist X, DType D>
SEEDSTORE_HD StorageT<D> PhiloxFromWords(const SamplerParams& p, uint32_t hi, uint32_t lo) {
  const uint64_t w = (static_cast<uint64_t>(hi) << 32) | lo;
  if constexpr (X == Dist::kBits) {
    return w;
  } else {
    double x;
    if constexpr (X == Dist::kUniform) {
      const double unit = static_cast<double>(w >> 11) * 1.1102230246251565e-16;  // 2^-53
      x = p.lo_d + unit * p.range_d;
      x = x < p.clip_hi_d ? x : p.clip_hi_d;
    } else {
      const double u =
          static_cast<double>(static_cast<int64_t>((w >> 11) * 2u + 1u) - (int64_t{1} << 53)) *
          1.1102230246251565e-16;
      if constexpr (X == Dist::kNormal) {
        x = kSqrt2D * XlaErfInvF64(u);
      } else {
        const double t = p.lo_d + (u + 1.0) * 0.5 * p.range_d;
        x = kSqrt2D * XlaErfInvF64(t);
        x = x > p.clip_lo_d ? x : p.clip_lo_d;
        x = x < p.clip_hi_d ? x : p.clip_hi_d;
      }
    }
    return ScaleMeanF64<false>(p, x);
  }
}

template <Dist X, DType D>
SEEDSTORE_HD StorageT<D> PhiloxElement(const SamplerParams& p, uint64_t i) {
  if constexpr (PerBlock<D>() == 4) {
    const Word4 w = PhiloxBlock(p.key, i >> 2);
    return PhiloxFromWord<X, D>(p, w.v[i & 3]);
  } else {
    const Word4 w = PhiloxBlock(p.key, i >> 1);
    const int l = static_cast<int>(i & 1) * 2;
    return PhiloxFromWords<X, D>(p, w.v[l], w.v[l + 1]);
  }
}

}  // namespace sampler_detail

/// Value of element i (row-major global flat index) for a lazy tensor, as storage bits of D.
/// Preconditions (checked by PrepareSampler): the (dist, dtype) pair is supported.
template <Generator G, Dist X, DType D>
SEEDSTORE_HD StorageT<D> SampleElement(const SamplerParams& p, uint64_t i) {
  if constexpr (X == Dist::kConstant || X == Dist::kZeros || X == Dist::kOnes) {
    if constexpr (sizeof(StorageT<D>) == 8) return BitCast<StorageT<D>>(p.const_bits);
    if constexpr (sizeof(StorageT<D>) == 4)
      return BitCast<StorageT<D>>(static_cast<uint32_t>(p.const_bits));
    if constexpr (sizeof(StorageT<D>) == 2)
      return BitCast<StorageT<D>>(static_cast<uint16_t>(p.const_bits));
    if constexpr (sizeof(StorageT<D>) == 1)
      return BitCast<StorageT<D>>(static_cast<uint8_t>(p.const_bits));
  } else if constexpr (G == Generator::kThreefry) {
    return sampler_detail::ThreefryElement<X, D>(p, i);
  } else {
    return sampler_detail::PhiloxElement<X, D>(p, i);
  }
}

/// Whether a (dist, dtype) pair can be sampled: bits needs an unsigned dtype; uniform, normal
/// and truncated_normal need a float dtype; constant/zeros/ones take any dtype.
SEEDSTORE_HD constexpr bool Supported(Dist x, DType d) {
  switch (x) {
    case Dist::kBits:
      return d == DType::kU8 || d == DType::kU16 || d == DType::kU32 || d == DType::kU64;
    case Dist::kUniform:
    case Dist::kNormal:
    case Dist::kTruncatedNormal:
      return IsFloat(d);
    default:
      return true;
  }
}

}  // namespace seedstore
