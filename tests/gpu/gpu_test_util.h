// Shared by the gpu tier: sampler parameters for every (generator, dist, dtype), random
// regions (boxes, flat ranges, 0-d, empty, flat indices >= 2^32), and a byte-diff message.
#pragma once
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gen/dispatch.h"
#include "gen/region.h"
#include "gen/sampler.h"

namespace seedstore::gpu_test {

/// tools/gpu-check.sh sets SEEDSTORE_REQUIRE_GPU=1 on a lent GPU machine: there a gpu test that
/// finds no device (or no NCCL) fails instead of skipping.
inline bool GpuRequired() {
  const char* e = std::getenv("SEEDSTORE_REQUIRE_GPU");
  return e != nullptr && *e != '\0' && std::string(e) != "0";
}

// Skips the test with `msg` (streamed), or fails it when GpuRequired().
#define SEEDSTORE_GPU_UNAVAILABLE(msg)                    \
  do {                                                    \
    if (::seedstore::gpu_test::GpuRequired()) {           \
      FAIL() << msg << " (SEEDSTORE_REQUIRE_GPU is set)"; \
    } else {                                              \
      GTEST_SKIP() << msg;                                \
    }                                                     \
  } while (0)

// Asserts that a KernelStatus (kernels/materialize.h) is ok, printing its message.
#define ASSERT_KOK(expr)                                 \
  do {                                                   \
    const KernelStatus s_ = (expr);                      \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.message; \
  } while (0)

constexpr Dist kDists[] = {Dist::kBits,     Dist::kUniform, Dist::kNormal, Dist::kTruncatedNormal,
                           Dist::kConstant, Dist::kZeros,   Dist::kOnes};
constexpr DType kDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kU8,
                             DType::kU16, DType::kU32, DType::kU64,  DType::kI8,  DType::kI16,
                             DType::kI32, DType::kI64, DType::kBool};
constexpr Generator kGenerators[] = {Generator::kThreefry, Generator::kPhilox};

inline std::string Name(Generator g, Dist x, DType d) {
  static const char* gn[] = {"threefry", "philox"};
  static const char* xn[] = {"bits",     "uniform", "normal", "truncated_normal",
                             "constant", "zeros",   "ones"};
  static const char* dn[] = {"f32", "f64", "bf16", "f16", "u8",  "u16", "u32",
                             "u64", "i8",  "i16",  "i32", "i64", "bool"};
  return std::string(gn[static_cast<int>(g)]) + "/" + xn[static_cast<int>(x)] + "/" +
         dn[static_cast<int>(d)];
}

/// Round a float to the dtype (the store's PrepareSampler rounds constants this way).
inline float InDType(DType d, float x) {
  if (d == DType::kBF16) return BF16ToF32(F32ToBF16(x));
  if (d == DType::kF16) return F16ToF32(F32ToF16(x));
  return x;
}

/// Plausible, fully resolved parameters (the equivalence tests need any valid values).
inline SamplerParams MakeParams(Generator g, Dist x, DType d, std::mt19937_64& rng) {
  SamplerParams p;
  p.generator = g;
  p.dist = x;
  p.dtype = d;
  p.key = Key{static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng())};
  const bool scale = rng() % 2, mean = rng() % 2;
  p.has_scale = scale;
  p.has_mean = mean;
  p.scale_f = InDType(d, 0.02f);
  p.mean_f = InDType(d, 0.5f);
  p.scale_d = 0.02;
  p.mean_d = 0.5;
  if (x == Dist::kUniform) {
    p.lo_f = InDType(d, -0.5f);
    p.range_f = InDType(d, 1.25f);
    p.lo_d = -0.5;
    p.range_d = 1.25;
    p.clip_hi_f = std::nextafter(InDType(d, 0.75f), 0.0f);
    if (d == DType::kBF16) p.clip_hi_f = 0.74609375f;
    if (d == DType::kF16) p.clip_hi_f = 0.74951171875f;
    p.clip_hi_d = std::nextafter(0.75, 0.0);
  } else if (x == Dist::kNormal) {
    p.lo_f = d == DType::kBF16 ? -0.99609375f : d == DType::kF16 ? -0.99951171875f : -0.99999994f;
    p.range_f = InDType(d, 1.0f - p.lo_f);
    p.lo_d = std::nextafter(-1.0, 0.0);
    p.range_d = 1.0 - p.lo_d;
  } else if (x == Dist::kTruncatedNormal) {
    p.lo_f = static_cast<float>(std::erf(-2.0 / std::sqrt(2.0)));
    p.range_f = -2.0f * p.lo_f;
    p.lo_d = std::erf(-2.0 / std::sqrt(2.0));
    p.range_d = -2.0 * p.lo_d;
    p.clip_lo_f = InDType(d, -2.0f);
    p.clip_hi_f = InDType(d, 2.0f);
    p.clip_lo_d = -2.0;
    p.clip_hi_d = 2.0;
  }
  p.const_bits = x == Dist::kZeros ? 0 : rng();
  return p;
}

inline Region Box(std::vector<uint64_t> shape, std::vector<uint64_t> start,
                  std::vector<uint64_t> stop) {
  return BoxRegion(shape, start, stop);
}

inline Region FlatRange(uint64_t numel, uint64_t begin, uint64_t end) {
  Region r = Box({numel}, {0}, {numel});
  r.flat = true;
  r.begin = begin;
  r.end = end;
  return r;
}

/// Fixed edge cases plus random boxes whose element count stays below max_count.
inline std::vector<Region> Regions(std::mt19937_64& rng, int random_boxes,
                                   uint64_t max_count = 6000) {
  const uint64_t k2_31 = uint64_t{1} << 31, k2_32 = uint64_t{1} << 32;
  std::vector<Region> rs = {
      Box({}, {}, {}),                                             // 0-d scalar
      Box({5}, {2}, {2}),                                          // empty 1-d
      Box({4, 6}, {1, 3}, {3, 3}),                                 // empty inner dim
      Box({1000}, {0}, {1000}),                                    // whole 1-d
      Box({64, 48}, {0, 0}, {64, 48}),                             // whole 2-d (one run)
      Box({64, 48}, {8, 0}, {40, 48}),                             // row shard (one run)
      Box({64, 48}, {0, 17}, {64, 31}),                            // column shard, odd start
      Box({64, 48}, {3, 8}, {60, 40}),                             // aligned columns
      Box({3, 5, 7, 9}, {1, 0, 2, 1}, {3, 5, 6, 8}),               // 4-d box
      Box({2, 1, 30, 1, 11}, {1, 0, 4, 0, 0}, {2, 1, 29, 1, 11}),  // unit dims merge
      Box({4, k2_31 + 3}, {1, k2_31 - 20}, {3, k2_31 + 3}),        // flat indices >= 2^32
      Box({3, k2_32 + 8}, {2, k2_32 - 9}, {3, k2_32 + 7}),         // >= 2^33, straddles 2^33
      FlatRange(k2_32 * 2, k2_32 - 7, k2_32 + 1001),               // flat range over 2^32
      FlatRange(1000, 3, 997),                                     // misaligned flat range
      FlatRange(1000, 500, 500),                                   // empty flat range
  };
  std::uniform_int_distribution<int> rank_dist(0, 5);
  for (int k = 0; k < random_boxes; ++k) {
    const int rank = rank_dist(rng);
    std::vector<uint64_t> shape(rank), start(rank), stop(rank);
    uint64_t count = 1;
    for (int d = 0; d < rank; ++d) {
      shape[d] = 1 + rng() % (d + 1 == rank ? 300 : 12);
      const int mode = static_cast<int>(rng() % 4);
      if (mode == 0) {  // full dim
        start[d] = 0;
        stop[d] = shape[d];
      } else {
        start[d] = rng() % shape[d];
        stop[d] = start[d] + rng() % (shape[d] - start[d] + 1);
        if (mode == 1 && stop[d] == start[d])
          stop[d] = start[d] + 1 <= shape[d] ? start[d] + 1 : stop[d];
      }
      count *= stop[d] - start[d];
    }
    if (count > max_count) {
      --k;
      continue;
    }
    rs.push_back(Box(shape, start, stop));
  }
  return rs;
}

inline std::string Describe(const Region& r) {
  std::string s = "shape [";
  for (int d = 0; d < r.rank; ++d) {
    if (d) s += ",";
    s += std::to_string(r.shape[d]);
  }
  s += "] ";
  return s + DescribeRegion(r);
}

/// "" when equal, else the first differing element.
inline std::string FirstDiff(const std::vector<unsigned char>& a,
                             const std::vector<unsigned char>& b, int es) {
  if (a.size() != b.size()) return "sizes differ";
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k] != b[k]) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "element %zu differs (byte %zu: %02x vs %02x)", k / es, k,
                    a[k], b[k]);
      return buf;
    }
  }
  return "";
}

}  // namespace seedstore::gpu_test
