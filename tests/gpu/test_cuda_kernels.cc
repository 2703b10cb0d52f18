// Device tests of the CUDA kernels (label gpu): known-answer vectors inside a kernel, and for
// every generator x distribution x dtype, random boxes (flat indices >= 2^32, empty shards,
// 0-d) compared byte for byte with the CPU path; fingerprints equal to the CPU's (I1, I2, I4).
// Without a CUDA device every test is skipped with a visible "no CUDA device: ..." message.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "gen/materialize_cpu.h"
#include "kernels/materialize.h"
#include "tests/gpu/gpu_test_util.h"

namespace seedstore {
namespace {

using gpu_test::Describe;
using gpu_test::FirstDiff;

#define REQUIRE_CUDA_DEVICE()                                                         \
  do {                                                                                \
    std::string why_;                                                                 \
    if (!CudaAvailable(&why_)) SEEDSTORE_GPU_UNAVAILABLE("no CUDA device: " << why_); \
  } while (0)

TEST(CudaKat, Threefry2x32_20InKernel) {
  REQUIRE_CUDA_DEVICE();
  // Random123 kat_vectors (threefry2x32 20): key, counter -> output.
  const std::vector<uint32_t> in = {0,          0,          0,          0,            //
                                    ~0u,        ~0u,        ~0u,        ~0u,          //
                                    0x13198a2e, 0x03707344, 0x243f6a88, 0x85a308d3};  //
  const std::vector<uint32_t> want = {0x6b200159, 0x99ba4efe, 0x1cb996fc,
                                      0xbb002be7, 0xc4923a9c, 0x483df7a0};
  std::vector<uint32_t> got(6);
  ASSERT_KOK(Threefry2x32Cuda(3, in.data(), got.data()));
  EXPECT_EQ(got, want);
}

TEST(CudaKat, Philox4x32_10InKernel) {
  REQUIRE_CUDA_DEVICE();
  // Random123 kat_vectors (philox4x32 10): key (2 words), counter (4 words) -> output.
  const std::vector<uint32_t> in = {
      0,          0,          0,          0,          0,          0,    //
      ~0u,        ~0u,        ~0u,        ~0u,        ~0u,        ~0u,  //
      0xa4093822, 0x299f31d0, 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
  const std::vector<uint32_t> want = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8,
                                      0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd,
                                      0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
  std::vector<uint32_t> got(12);
  ASSERT_KOK(Philox4x32Cuda(3, in.data(), got.data()));
  EXPECT_EQ(got, want);
}

TEST(CudaKat, HashElementInKernelEqualsHost) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(11);
  const size_t n = 4096;
  std::vector<uint64_t> idx(n), bits(n);
  for (size_t j = 0; j < n; ++j) {
    idx[j] = j < 8 ? j : rng();
    bits[j] = j % 3 == 0 ? 0 : rng() >> (rng() % 64);
  }
  const uint64_t seed = 0x5EED;
  std::vector<Fingerprint> got(n);
  ASSERT_KOK(HashElementCuda(n, idx.data(), bits.data(), seed, got.data()));
  for (size_t j = 0; j < n; ++j)
    ASSERT_TRUE(got[j] == HashElement(idx[j], bits[j], seed)) << "j=" << j;
}

/// For one (generator, dist, dtype): every region, aligned and misaligned device outputs,
/// fingerprint of the device bytes, fused with and without output.
void CheckCombination(Generator g, Dist x, DType d, const std::vector<Region>& regions,
                      std::mt19937_64& rng) {
  const SamplerParams p = gpu_test::MakeParams(g, x, d, rng);
  const int es = DTypeSize(d);
  const uint64_t seed = rng();
  for (const Region& r : regions) {
    SCOPED_TRACE(gpu_test::Name(g, x, d) + " " + Describe(r));
    const uint64_t n = r.Count();
    std::vector<unsigned char> cpu(n * es), got(n * es);
    MaterializeCpu(p, r, cpu.data());
    const Fingerprint want = FingerprintCpu(d, r, cpu.data(), seed);
    DeviceBuffer buf;
    ASSERT_KOK(DeviceBuffer::Allocate(n * es + 16, &buf));
    for (size_t offset : {size_t{0}, static_cast<size_t>(es)}) {  // 16-byte aligned, then not
      ASSERT_KOK(buf.Fill(0xEE));
      void* d_out = static_cast<char*>(buf.data()) + offset;
      ASSERT_KOK(MaterializeCuda(p, r, n ? d_out : nullptr, nullptr));
      ASSERT_KOK(buf.CopyToHost(got.data(), n * es, offset));
      ASSERT_EQ(FirstDiff(cpu, got, es), "") << "output offset " << offset;
      // Nothing written outside [offset, offset + n*es): the guard bytes are still 0xEE.
      auto guards_intact = [&](const char* what) {
        std::vector<unsigned char> all(n * es + 16);
        ASSERT_KOK(buf.CopyToHost(all.data(), all.size(), 0));
        for (size_t k = 0; k < all.size(); ++k) {
          if (k >= offset && k < offset + n * es) continue;
          ASSERT_EQ(all[k], 0xEE) << what << ": byte " << k << " outside the output (offset "
                                  << offset << ", " << n * es << " bytes) was written";
        }
      };
      guards_intact("MaterializeCuda");
      Fingerprint fp;
      ASSERT_KOK(FingerprintCuda(d, r, d_out, seed, nullptr, &fp));
      EXPECT_TRUE(fp == want) << "FingerprintCuda, output offset " << offset;
      ASSERT_KOK(buf.Fill(0xEE));
      ASSERT_KOK(MaterializeFingerprintCuda(p, r, d_out, seed, nullptr, &fp));
      EXPECT_TRUE(fp == want) << "fused, output offset " << offset;
      ASSERT_KOK(buf.CopyToHost(got.data(), n * es, offset));
      ASSERT_EQ(FirstDiff(cpu, got, es), "") << "fused output, offset " << offset;
      guards_intact("MaterializeFingerprintCuda");
    }
    Fingerprint fp;
    ASSERT_KOK(MaterializeFingerprintCuda(p, r, nullptr, seed, nullptr, &fp));
    EXPECT_TRUE(fp == want) << "fused without output";
    EXPECT_TRUE(MaterializeFingerprintCpu(p, r, nullptr, seed) == want);
  }
}

class CudaEquivalence : public ::testing::TestWithParam<Generator> {};

TEST_P(CudaEquivalence, EveryDistAndDTypeEqualsCpuOnRandomBoxes) {
  REQUIRE_CUDA_DEVICE();
  const Generator g = GetParam();
  std::mt19937_64 rng(static_cast<int>(g) + 100);
  const std::vector<Region> regions = gpu_test::Regions(rng, 20);
  for (Dist x : gpu_test::kDists)
    for (DType d : gpu_test::kDTypes)
      if (Supported(x, d)) CheckCombination(g, x, d, regions, rng);
}

INSTANTIATE_TEST_SUITE_P(Generators, CudaEquivalence,
                         ::testing::Values(Generator::kThreefry, Generator::kPhilox),
                         [](const auto& info) {
                           return info.param == Generator::kThreefry ? "threefry" : "philox";
                         });

TEST(CudaMaterialize, LargeShardsUseManyBlocksAndEqualCpu) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(5);
  // Big enough for a full grid with several grid-stride iterations per thread.
  const std::vector<Region> regions = {
      gpu_test::Box({4096, 14336}, {0, 0}, {1024, 14336}),    // row shard, one run
      gpu_test::Box({4096, 14336}, {0, 3584}, {1024, 7168}),  // column shard (TP)
      gpu_test::Box({1024, 4097}, {1, 1}, {1000, 4000}),      // misaligned rows
      gpu_test::FlatRange(uint64_t{1} << 34, (uint64_t{1} << 32) - 3,
                          (uint64_t{1} << 32) + 5000001),
  };
  for (Generator g : gpu_test::kGenerators)
    for (DType d : {DType::kBF16, DType::kF32}) CheckCombination(g, Dist::kNormal, d, regions, rng);
}

TEST(CudaMaterialize, ShardsOfAnyLayoutSumToTheWholeFingerprint) {
  REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(6);
  const SamplerParams p =
      gpu_test::MakeParams(Generator::kPhilox, Dist::kNormal, DType::kBF16, rng);
  const uint64_t seed = 99;
  const uint64_t shape[2] = {384, 1000};
  Fingerprint whole;
  ASSERT_KOK(MaterializeFingerprintCuda(p, WholeRegion(2, shape), nullptr, seed, nullptr, &whole));
  for (uint64_t parts : {2u, 3u, 7u}) {
    Fingerprint sum;
    for (uint64_t k = 0; k < parts; ++k) {  // column shards, uneven (torch.chunk style)
      const uint64_t per = (shape[1] + parts - 1) / parts;
      const uint64_t a = std::min(shape[1], k * per), b = std::min(shape[1], (k + 1) * per);
      Fingerprint f;
      ASSERT_KOK(MaterializeFingerprintCuda(p, gpu_test::Box({384, 1000}, {0, a}, {384, b}),
                                            nullptr, seed, nullptr, &f));
      sum.Add(f);
    }
    EXPECT_TRUE(sum == whole) << parts << " column shards";
  }
}

TEST(CudaErrors, BadArgumentsAreNamed) {
  // Argument checks come before any device use, so these run wherever CUDA was built.
  if (!CudaBuilt()) SEEDSTORE_GPU_UNAVAILABLE("no CUDA device: seedstore was built without CUDA");
  SamplerParams p;
  p.dist = Dist::kNormal;
  p.dtype = DType::kU32;
  const uint64_t shape[1] = {16};
  KernelStatus s = MaterializeCuda(p, WholeRegion(1, shape), reinterpret_cast<void*>(256));
  EXPECT_EQ(s.code, KernelCode::kInvalidArgument);
  EXPECT_NE(s.message.find("not supported"), std::string::npos) << s.message;
  p.dtype = DType::kF32;
  Region bad = gpu_test::Box({4, 4}, {0, 3}, {4, 5});
  s = MaterializeCuda(p, bad, reinterpret_cast<void*>(256));
  EXPECT_EQ(s.code, KernelCode::kInvalidArgument);
  EXPECT_NE(s.message.find("past the tensor's shape"), std::string::npos) << s.message;
  s = MaterializeCuda(p, WholeRegion(1, shape), nullptr);
  EXPECT_EQ(s.code, KernelCode::kInvalidArgument);
  // A pointer not aligned to the elements is refused before the device is touched.
  s = MaterializeCuda(p, WholeRegion(1, shape), reinterpret_cast<void*>(258));
  EXPECT_EQ(s.code, KernelCode::kInvalidArgument);
  EXPECT_NE(s.message.find("not aligned to the 4-byte elements"), std::string::npos) << s.message;
  Fingerprint fp;
  s = FingerprintCuda(DType::kBF16, WholeRegion(1, shape), reinterpret_cast<void*>(257), 0, nullptr,
                      &fp);
  EXPECT_EQ(s.code, KernelCode::kInvalidArgument);
  EXPECT_NE(s.message.find("FingerprintCuda"), std::string::npos) << s.message;
  s = MaterializeFingerprintCuda(p, WholeRegion(1, shape), reinterpret_cast<void*>(260 + 2), 0,
                                 nullptr, &fp);
  EXPECT_EQ(s.code, KernelCode::kInvalidArgument);
  EXPECT_NE(s.message.find("not aligned"), std::string::npos) << s.message;
  // Empty regions need neither a pointer nor a device.
  Region empty = gpu_test::Box({4, 4}, {1, 1}, {1, 4});
  EXPECT_TRUE(MaterializeCuda(p, empty, nullptr).ok());
}

TEST(CudaErrors, WithoutCudaEveryLauncherSaysSo) {
  if (CudaBuilt()) GTEST_SKIP() << "CUDA is built in; the no-CUDA stubs are not linked";
  SamplerParams p;
  const uint64_t shape[1] = {16};
  const KernelStatus s = MaterializeCuda(p, WholeRegion(1, shape), nullptr);
  EXPECT_EQ(s.code, KernelCode::kUnsupported);
  EXPECT_NE(s.message.find("built without CUDA"), std::string::npos) << s.message;
  EXPECT_FALSE(CudaAvailable());
}

}  // namespace
}  // namespace seedstore
