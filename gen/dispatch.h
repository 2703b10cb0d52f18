// Turns the run-time (generator, dist, dtype) of SamplerParams into compile-time template
// arguments, instantiating only supported pairs. Shared by the CPU and CUDA launchers.
#pragma once
#include <type_traits>

#include "gen/sampler.h"

namespace seedstore {

template <Generator G>
using GenC = std::integral_constant<Generator, G>;
template <Dist X>
using DistC = std::integral_constant<Dist, X>;
template <DType D>
using DTypeC = std::integral_constant<DType, D>;

template <class F>
decltype(auto) VisitDType(DType d, F&& f) {
  switch (d) {
    case DType::kF32:
      return f(DTypeC<DType::kF32>{});
    case DType::kF64:
      return f(DTypeC<DType::kF64>{});
    case DType::kBF16:
      return f(DTypeC<DType::kBF16>{});
    case DType::kF16:
      return f(DTypeC<DType::kF16>{});
    case DType::kU8:
      return f(DTypeC<DType::kU8>{});
    case DType::kU16:
      return f(DTypeC<DType::kU16>{});
    case DType::kU32:
      return f(DTypeC<DType::kU32>{});
    case DType::kU64:
      return f(DTypeC<DType::kU64>{});
    case DType::kI8:
      return f(DTypeC<DType::kI8>{});
    case DType::kI16:
      return f(DTypeC<DType::kI16>{});
    case DType::kI32:
      return f(DTypeC<DType::kI32>{});
    case DType::kI64:
      return f(DTypeC<DType::kI64>{});
    default:
      return f(DTypeC<DType::kBool>{});
  }
}

template <class F>
decltype(auto) VisitDist(Dist x, F&& f) {
  switch (x) {
    case Dist::kBits:
      return f(DistC<Dist::kBits>{});
    case Dist::kUniform:
      return f(DistC<Dist::kUniform>{});
    case Dist::kNormal:
      return f(DistC<Dist::kNormal>{});
    case Dist::kTruncatedNormal:
      return f(DistC<Dist::kTruncatedNormal>{});
    case Dist::kConstant:
      return f(DistC<Dist::kConstant>{});
    case Dist::kZeros:
      return f(DistC<Dist::kZeros>{});
    default:
      return f(DistC<Dist::kOnes>{});
  }
}

template <Dist X, DType D>
constexpr bool kSupported = Supported(X, D);

/// Distributions whose values do not depend on the generator.
template <Dist X>
constexpr bool kConstantDist = X == Dist::kConstant || X == Dist::kZeros || X == Dist::kOnes;

/// Calls f(GenC, DistC, DTypeC) for p's combination. Constant distributions ignore the
/// generator: they are instantiated with threefry only (philox x constant would be dead
/// code: 3 dists x 13 dtypes of every kernel). Unsupported pairs return R{} (PrepareSampler
/// rejects them).
template <class F>
auto VisitSampler(const SamplerParams& p, F&& f) {
  using R = decltype(f(GenC<Generator::kThreefry>{}, DistC<Dist::kZeros>{}, DTypeC<DType::kF32>{}));
  const bool constant =
      p.dist == Dist::kConstant || p.dist == Dist::kZeros || p.dist == Dist::kOnes;
  auto inner = [&](auto g) -> R {
    constexpr Generator G = std::decay_t<decltype(g)>::value;
    return VisitDist(p.dist, [&](auto x) -> R {
      constexpr Dist X = std::decay_t<decltype(x)>::value;
      if constexpr (G == Generator::kPhilox && kConstantDist<X>) {
        return R{};  // not reached: constant distributions take the threefry branch below
      } else {
        return VisitDType(p.dtype, [&](auto d) -> R {
          if constexpr (kSupported<X, std::decay_t<decltype(d)>::value>) return f(g, x, d);
          else return R{};
        });
      }
    });
  };
  if (constant || p.generator == Generator::kThreefry) return inner(GenC<Generator::kThreefry>{});
  return inner(GenC<Generator::kPhilox>{});
}

}  // namespace seedstore
