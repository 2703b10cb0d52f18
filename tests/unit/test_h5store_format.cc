// The known answers quoted in docs/FORMAT.md sections 2 and 3 (key derivation, fingerprint).
#include "tests/unit/h5store_test_util.h"

namespace seedstore {
namespace {

using namespace h5storetest;  // NOLINT

// The known answers quoted in docs/FORMAT.md sections 2 and 3.
TEST(H5Store, FormatDocVectors) {
  TensorSpec w;
  w.name = "w";
  w.shape = {2, 3};
  w.dtype = DType::kF32;
  w.init.dist = Dist::kConstant;
  w.init.value = 1.5;
  const Key kw = TensorKey(0, w);
  EXPECT_EQ(kw.k0, 1102451320u);
  EXPECT_EQ(kw.k1, 355204562u);
  std::string seed_text("seedstore-fp-v1\0w\0float32\0" "2,3", 29);
  EXPECT_EQ(FingerprintSeed("w", DType::kF32, {2, 3}), XXH3_64bits(seed_text.data(), seed_text.size()));
  auto lw = LazyTensor::Resolve(w, 0);
  ASSERT_TRUE(lw.ok());
  EXPECT_EQ(FingerprintHex(*lw->FingerprintWhole()), "d804fb055f9b480a1b149ac338031420");
  // Per element: XXH3_128bits_withSeed(LE64(i) || LE64(bits), fp_seed), lanes summed.
  Fingerprint manual;
  for (uint64_t i = 0; i < 6; ++i) {
    unsigned char rec[16];
    const uint64_t v = 0x3fc00000u;
    for (int b = 0; b < 8; ++b) {
      rec[b] = static_cast<unsigned char>(i >> (8 * b));
      rec[8 + b] = static_cast<unsigned char>(v >> (8 * b));
    }
    const XXH128_hash_t h = XXH3_128bits_withSeed(rec, 16, lw->fp_seed);
    manual.Add(Fingerprint{h.low64, h.high64});
  }
  EXPECT_EQ(FingerprintHex(manual), "d804fb055f9b480a1b149ac338031420");
  TensorSpec n;
  n.name = "model.norm.weight";
  n.shape = {4};
  n.dtype = DType::kBF16;
  n.init.dist = Dist::kNormal;
  n.init.scale = 0.02;
  const Key kn = TensorKey(0, n);
  EXPECT_EQ(kn.k0, 1830306819u);
  EXPECT_EQ(kn.k1, 365711039u);
  auto ln = LazyTensor::Resolve(n, 0);
  ASSERT_TRUE(ln.ok());
  EXPECT_EQ(FingerprintHex(*ln->FingerprintWhole()), "1b341c22085c51ee8b9e93ab540821ac");
}

}  // namespace
}  // namespace seedstore
