// Host-side checks of the CUDA kernels' own code path (kernels/chunk.h, kernels/run_map.h):
// the per-chunk work the kernels run, executed chunk by chunk in a shuffled order on the
// CPU, must equal MaterializeCpu / FingerprintCpu byte for byte. These run without a GPU;
// the device tests (test_cuda_kernels.cc) then only add the CUDA-specific parts.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "gen/materialize_cpu.h"
#include "kernels/chunk.h"
#include "kernels/run_map.h"
#include "tests/gpu/gpu_test_util.h"

namespace seedstore {
namespace {

using gpu_test::Describe;
using gpu_test::FirstDiff;

TEST(FastDivU64, MatchesHardwareDivision) {
  std::mt19937_64 rng(1);
  std::vector<uint64_t> divisors = {1,
                                    2,
                                    3,
                                    5,
                                    7,
                                    10,
                                    255,
                                    256,
                                    4096,
                                    14336,
                                    128256,
                                    (uint64_t{1} << 32) - 1,
                                    uint64_t{1} << 32,
                                    (uint64_t{1} << 63) - 1,
                                    uint64_t{1} << 63,
                                    (uint64_t{1} << 63) + 1,
                                    ~uint64_t{0}};
  for (int k = 0; k < 200; ++k) divisors.push_back(1 + (rng() >> (rng() % 64)));
  for (uint64_t d : divisors) {
    const FastDivU64 f = FastDivU64::Make(d);
    std::vector<uint64_t> ns = {
        0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, ~uint64_t{0}, ~uint64_t{0} - 1, uint64_t{1} << 63};
    for (int k = 0; k < 500; ++k) ns.push_back(rng() >> (rng() % 64));
    for (uint64_t n : ns) ASSERT_EQ(f.Div(n), n / d) << "n=" << n << " d=" << d;
  }
}

TEST(RunMap, LocateMatchesRegionRunBase) {
  std::mt19937_64 rng(2);
  for (const Region& r : gpu_test::Regions(rng, 300)) {
    const RunMap m = MakeRunMap(r);
    ASSERT_EQ(m.count, r.Count()) << Describe(r);
    const uint64_t len = r.RunLength();
    for (uint64_t a = 0; a < r.Count(); ++a) {
      const uint64_t want = r.RunBase(a / len) + a % len;
      uint64_t room = 0;
      ASSERT_EQ(m.Locate(a, &room), want) << Describe(r) << " a=" << a;
      ASSERT_GE(room, 1u);
      // room: consecutive global indices from a within the region.
      if (a + 1 < r.Count() && room > 1) {
        uint64_t r2;
        ASSERT_EQ(m.Locate(a + 1, &r2), want + 1) << Describe(r);
      }
    }
  }
}

TEST(RunMap, MergesContiguousBoxesIntoOneRun) {
  const uint64_t shape[2] = {4096, 14336};
  const RunMap whole = MakeRunMap(WholeRegion(2, shape));
  EXPECT_EQ(whole.rank, 1);
  EXPECT_EQ(whole.run_len, uint64_t{4096} * 14336);
  const RunMap rows = MakeRunMap(gpu_test::Box({4096, 14336}, {1024, 0}, {2048, 14336}));
  EXPECT_EQ(rows.rank, 1);
  EXPECT_EQ(rows.last_start, uint64_t{1024} * 14336);
  const RunMap cols = MakeRunMap(gpu_test::Box({4096, 14336}, {0, 7168}, {4096, 14336}));
  EXPECT_EQ(cols.rank, 2);
  EXPECT_EQ(cols.run_len, 7168u);
  EXPECT_TRUE(cols.RunsAligned(4, 8));
}

/// Runs the kernel's chunk work for every chunk, in shuffled order (any thread order).
template <Generator G, Dist X, DType D, bool kAligned, bool kHash>
Fingerprint Emulate(const SamplerParams& p, const Region& r, StorageT<D>* out, uint64_t seed,
                    std::mt19937_64& rng) {
  const RunMap m = MakeRunMap(r);
  std::vector<uint64_t> order(chunk::NumChunks<D>(m.count));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  uint64_t s0 = 0, s1 = 0;
  for (uint64_t c : order)
    chunk::MaterializeChunk<G, X, D, kAligned, kHash>(p, m, c, out, true, seed, &s0, &s1);
  return Fingerprint{s0, s1};
}

TEST(KernelEmulation, MaterializeAndFingerprintEqualCpuForEveryCombination) {
  std::mt19937_64 rng(3);
  const std::vector<Region> regions = gpu_test::Regions(rng, 25);
  int combos = 0;
  for (Generator g : gpu_test::kGenerators) {
    for (Dist x : gpu_test::kDists) {
      for (DType d : gpu_test::kDTypes) {
        if (!Supported(x, d)) continue;
        ++combos;
        const SamplerParams p = gpu_test::MakeParams(g, x, d, rng);
        const int es = DTypeSize(d);
        const uint64_t seed = rng();
        for (const Region& r : regions) {
          const uint64_t n = r.Count();
          std::vector<unsigned char> cpu(n * es), emu(n * es, 0xEE), emu2(n * es, 0xEE);
          MaterializeCpu(p, r, cpu.data(), CpuOptions{1});
          const Fingerprint want = FingerprintCpu(d, r, cpu.data(), seed, CpuOptions{1});
          auto body = [&](auto gc, auto xc, auto dc) {
            constexpr Generator G = decltype(gc)::value;
            constexpr Dist X = decltype(xc)::value;
            constexpr DType D = decltype(dc)::value;
            auto* o = reinterpret_cast<StorageT<D>*>(emu.data());
            // The unaligned variant is valid for every region; the aligned one when chosen.
            Emulate<G, X, D, false, false>(p, r, o, seed, rng);
            ASSERT_EQ(FirstDiff(cpu, emu, es), "")
                << gpu_test::Name(g, x, d) << " unaligned variant, " << Describe(r);
            if (chunk::UseAligned<G, X, D>(MakeRunMap(r))) {
              std::fill(emu.begin(), emu.end(), 0xEE);
              Emulate<G, X, D, true, false>(p, r, o, seed, rng);
              ASSERT_EQ(FirstDiff(cpu, emu, es), "")
                  << gpu_test::Name(g, x, d) << " aligned variant, " << Describe(r);
            }
            // Fused: with an output and hash-only (null output).
            auto* o2 = reinterpret_cast<StorageT<D>*>(emu2.data());
            const Fingerprint f1 = Emulate<G, X, D, false, true>(p, r, o2, seed, rng);
            EXPECT_EQ(FirstDiff(cpu, emu2, es), "") << gpu_test::Name(g, x, d) << " fused";
            const Fingerprint f2 = Emulate<G, X, D, false, true>(p, r, nullptr, seed, rng);
            EXPECT_TRUE(f1 == want && f2 == want) << gpu_test::Name(g, x, d) << " " << Describe(r);
          };
          VisitSampler(p, [&](auto gc, auto xc, auto dc) -> int {
            body(gc, xc, dc);
            return 0;
          });
          // Fingerprint kernel path over the CPU's bytes.
          const RunMap m = MakeRunMap(r);
          uint64_t s0 = 0, s1 = 0;
          auto hash_all = [&](auto tag) {
            using T = decltype(tag);
            const uint64_t chunks = m.count / (16 / sizeof(T)) + (m.count % (16 / sizeof(T)) != 0);
            for (uint64_t c = chunks; c-- > 0;)
              chunk::FingerprintChunk<T>(m, c, reinterpret_cast<const T*>(cpu.data()), true, seed,
                                         &s0, &s1);
          };
          switch (es) {
            case 8:
              hash_all(uint64_t{});
              break;
            case 4:
              hash_all(uint32_t{});
              break;
            case 2:
              hash_all(uint16_t{});
              break;
            default:
              hash_all(uint8_t{});
              break;
          }
          EXPECT_TRUE((Fingerprint{s0, s1}) == want)
              << gpu_test::Name(g, x, d) << " " << Describe(r);
        }
      }
    }
  }
  EXPECT_GE(combos, 2 * (4 + 3 * 4) + 3 * 13);
}

}  // namespace
}  // namespace seedstore
