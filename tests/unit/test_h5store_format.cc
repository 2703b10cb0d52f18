// The known answers quoted in docs/FORMAT.md sections 2 and 3 (key derivation, fingerprint),
// from tests/kat/vectors/format_doc.json.
#include "tests/unit/h5store_test_util.h"
#include "tests/vectors_test_util.h"

namespace seedstore {
namespace {

using namespace h5storetest;  // NOLINT

// Each tensor's derived key and whole-tensor fingerprint; where given, the fingerprint seed's
// input bytes, and the fingerprint recomputed per element with libxxhash from the elements' bits.
TEST(H5Store, FormatDocVectors) {
  using testutil::HexValue;
  const nlohmann::json v = testutil::LoadVectorFile("tests/kat/vectors/format_doc.json");
  ASSERT_FALSE(v.is_null());
  ASSERT_EQ(v["tensors"].size(), 2u);
  for (const auto& e : v["tensors"]) {
    auto t = TensorSpecFromJson(e["record"], Generator::kThreefry, "record");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    const uint64_t root = e["root_seed"];
    const Key k = TensorKey(root, *t);
    EXPECT_EQ(k.k0, HexValue(e["key"][0])) << t->name;
    EXPECT_EQ(k.k1, HexValue(e["key"][1])) << t->name;
    auto lazy = LazyTensor::Resolve(*t, root);
    ASSERT_TRUE(lazy.ok());
    EXPECT_EQ(FingerprintHex(*lazy->FingerprintWhole()), e["fingerprint"]) << t->name;
    if (e.contains("fp_seed_text")) {
      const std::vector<uint8_t> text = testutil::HexBytes(e["fp_seed_text"]);
      EXPECT_EQ(FingerprintSeed(t->name, t->dtype, t->shape),
                XXH3_64bits(text.data(), text.size()));
    }
    if (e.contains("element_bits")) {
      // Per element: XXH3_128bits_withSeed(LE64(i) || LE64(bits), fp_seed), lanes summed.
      Fingerprint manual;
      const uint64_t bits = HexValue(e["element_bits"]);
      for (uint64_t i = 0; i < t->NumElements(); ++i) {
        unsigned char rec[16];
        for (int b = 0; b < 8; ++b) {
          rec[b] = static_cast<unsigned char>(i >> (8 * b));
          rec[8 + b] = static_cast<unsigned char>(bits >> (8 * b));
        }
        const XXH128_hash_t h = XXH3_128bits_withSeed(rec, 16, lazy->fp_seed);
        manual.Add(Fingerprint{h.low64, h.high64});
      }
      EXPECT_EQ(FingerprintHex(manual), e["fingerprint"]) << t->name;
    }
  }
}

}  // namespace
}  // namespace seedstore
