// The demo's steps (io/demo.h) as library calls, on small random Llama-style models (the
// Hugging Face names the demo's layouts place): the fingerprint under each layout equals the
// whole tensor's (I4), one rank's shards, the train-like update (the same values whatever the
// box), and the store saved, updated and verified -- a flipped stored byte named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gen/dtype.h"
#include "io/demo.h"
#include "io/h5store.h"
#include "tests/store_test_util.h"

namespace seedstore {
namespace {

// A Llama-like model with random small (prime, unit, uneven) dims in bf16 or f32.
ModelSpec SmallLlama(std::mt19937_64& g, DType dt) {
  static const uint64_t kDims[] = {1, 2, 3, 5, 7, 8, 13, 16};
  const uint64_t hidden = kDims[g() % 8], kv = kDims[g() % 8], inter = kDims[g() % 8],
                 vocab = kDims[g() % 8] + 17;
  ModelSpec m;
  m.seed = g();
  auto add = [&](const std::string& name, std::vector<uint64_t> shape, Dist dist) {
    TensorSpec t;
    t.name = name;
    t.shape = std::move(shape);
    t.dtype = dt;
    t.init.dist = dist;
    t.init.scale = 0.02;
    m.tensors.push_back(t);
  };
  add("model.embed_tokens.weight", {vocab, hidden}, Dist::kNormal);
  const int layers = 1 + static_cast<int>(g() % 2);
  for (int l = 0; l < layers; ++l) {
    std::string p = "model.layers.";
    p += std::to_string(l);
    p += ".";
    add(p + "self_attn.q_proj.weight", {hidden, hidden}, Dist::kNormal);
    add(p + "self_attn.k_proj.weight", {kv, hidden}, Dist::kNormal);
    add(p + "self_attn.v_proj.weight", {kv, hidden}, Dist::kNormal);
    add(p + "self_attn.o_proj.weight", {hidden, hidden}, Dist::kNormal);
    add(p + "mlp.gate_proj.weight", {inter, hidden}, Dist::kNormal);
    add(p + "mlp.up_proj.weight", {inter, hidden}, Dist::kNormal);
    add(p + "mlp.down_proj.weight", {hidden, inter}, Dist::kNormal);
    add(p + "input_layernorm.weight", {hidden}, Dist::kOnes);
    add(p + "post_attention_layernorm.weight", {hidden}, Dist::kOnes);
  }
  add("model.norm.weight", {hidden}, Dist::kOnes);
  add("lm_head.weight", {vocab, hidden}, Dist::kNormal);
  return m;
}

std::unique_ptr<SpecCatalog> Catalog(const ModelSpec& m) {
  auto c = SpecCatalog::Create(m, "<test>");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(*c);
}

TEST(Demo, LayoutFingerprintsEqualTheWholeTensorsUnderBothLayouts) {
  auto layouts = DemoLayouts();
  ASSERT_TRUE(layouts.ok()) << layouts.status().ToString();
  ASSERT_EQ(layouts->size(), 2u);
  EXPECT_EQ((*layouts)[0].name, "FSDP=8 (flat)");
  EXPECT_EQ((*layouts)[1].name, "FSDP=4 x TP=2");
  std::mt19937_64 g(20261204);
  for (int trial = 0; trial < 6; ++trial) {
    const ModelSpec m = SmallLlama(g, trial % 2 ? DType::kBF16 : DType::kF32);
    auto c = Catalog(m);
    for (size_t i = 0; i < c->tensors().size(); ++i) {
      auto whole = c->FingerprintRegion(i, WholeTensor(c->tensors()[i].shape));
      ASSERT_TRUE(whole.ok());
      for (const NamedLayout& l : *layouts) {
        auto f = LayoutFingerprint(*c, i, l.layout, CpuOptions{1 + static_cast<int>(g() % 3)});
        ASSERT_TRUE(f.ok()) << f.status().ToString();
        EXPECT_EQ(*f, *whole) << c->tensors()[i].name << " under " << l.name;
      }
    }
  }
}

TEST(Demo, MaterializeRankCoversTheModelOnceUnderFlatSharding) {
  auto layouts = DemoLayouts();
  ASSERT_TRUE(layouts.ok());
  std::mt19937_64 g(11);
  const ModelSpec m = SmallLlama(g, DType::kBF16);
  auto c = Catalog(m);
  uint64_t total = 0;
  for (const auto& t : c->tensors()) total += t.NumBytes();
  const Layout& flat = (*layouts)[0].layout;
  uint64_t sum = 0;
  for (int r = 0; r < flat.world_size(); ++r) {
    auto done = MaterializeRank(*c, flat, r);
    ASSERT_TRUE(done.ok()) << done.status().ToString();
    EXPECT_EQ(done->shards, static_cast<int>(c->tensors().size()));
    sum += done->bytes;
  }
  EXPECT_EQ(sum, total);  // flat ranges: no replicas, every element once
  // Under FSDP x TP the norms are replicated: every rank holds them whole.
  auto tp = MaterializeRank(*c, (*layouts)[1].layout, 7);
  ASSERT_TRUE(tp.ok()) << tp.status().ToString();
  for (int bad : {-1, 8}) {
    auto r = MaterializeRank(*c, flat, bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(r.status().message(),
              "rank " + std::to_string(bad) + " is outside the mesh (8 ranks)");
  }
}

TEST(Demo, TrainLikeUpdateIsSmallAndTheSameWhateverTheBox) {
  std::mt19937_64 g(3);
  for (DType dt : {DType::kBF16, DType::kF32}) {
    const ModelSpec m = SmallLlama(g, dt);
    auto c = Catalog(m);
    const size_t i = static_cast<size_t>(c->Find("lm_head.weight"));
    const TensorRecord& t = c->tensors()[i];
    auto src = TrainLikeUpdate(*c, i);
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    const Region whole = WholeTensor(t.shape);
    std::vector<uint8_t> w(t.NumBytes()), u(t.NumBytes()), parts(t.NumBytes());
    ASSERT_TRUE(c->Read(i, whole, w.data()).ok());
    ASSERT_TRUE((*src)(whole, u.data()).ok());
    // Row by row (boxes of one row) gives the same bytes as the whole (I1).
    const size_t row = t.shape[1] * DTypeSize(dt);
    for (uint64_t r = 0; r < t.shape[0]; ++r) {
      Region box = whole;
      box.start[0] = r;
      box.stop[0] = r + 1;
      ASSERT_TRUE((*src)(box, parts.data() + r * row).ok());
    }
    EXPECT_EQ(u, parts);
    int moved = 0;
    for (uint64_t k = 0; k < t.NumElements(); ++k) {
      float a, b;
      if (dt == DType::kBF16) {
        uint16_t x, y;
        std::memcpy(&x, w.data() + 2 * k, 2);
        std::memcpy(&y, u.data() + 2 * k, 2);
        a = BF16ToF32(x);
        b = BF16ToF32(y);
      } else {
        std::memcpy(&a, w.data() + 4 * k, 4);
        std::memcpy(&b, u.data() + 4 * k, 4);
      }
      EXPECT_LE(std::fabs(a - b), 0.01f) << k;  // 0.001 x normal: far below 10 sigma
      moved += a != b;
    }
    EXPECT_GT(moved, 0);
  }
  // Dtypes without an update, and dense tensors: refused, named.
  ModelSpec half = SmallLlama(g, DType::kF16);
  auto c = Catalog(half);
  auto r = TrainLikeUpdate(*c, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'model.embed_tokens.weight' is float16"), std::string::npos)
      << r.status().message();
}

TEST(Demo, SaveUpdateVerifyAndAFlippedByteIsNamed) {
  testutil::TempDir dir("seedstore-demo");
  std::mt19937_64 g(5);
  const ModelSpec m = SmallLlama(g, DType::kBF16);
  auto c = Catalog(m);
  std::vector<Fingerprint> fps;
  for (size_t i = 0; i < c->tensors().size(); ++i)
    fps.push_back(*c->FingerprintRegion(i, WholeTensor(c->tensors()[i].shape)));
  const std::string path = dir / "demo.h5";
  ASSERT_TRUE(SaveLazyStore(path, m, fps).ok());
  const std::vector<std::string>& names = DemoUpdatedTensors();
  ASSERT_TRUE(UpdateToDense(path, *c, names).ok());
  {
    auto st = H5Store::Open(path);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    for (const std::string& n : names) {
      auto f = VerifyDense(**st, n);
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      // The update moved the normal weights; ones + 0.001 x noise rounds back to 1 in bf16.
      if (n.find("proj") != std::string::npos) {
        EXPECT_NE(*f, fps[c->Find(n)]) << n;
      }
    }
    // The others are still lazy, with the fingerprints given.
    const int q = (*st)->Find("model.layers.0.self_attn.q_proj.weight");
    EXPECT_TRUE((*st)->tensors()[q].lazy);
    auto lazy = VerifyDense(**st, "model.layers.0.self_attn.q_proj.weight");
    EXPECT_EQ(lazy.status().code(), Code::kInternal);
    EXPECT_EQ(VerifyDense(**st, "nope").status().code(), Code::kNotFound);
  }
  auto missing = UpdateToDense(path, *c, {"model.layers.9.mlp.up_proj.weight"});
  EXPECT_EQ(missing.code(), Code::kNotFound);
  EXPECT_EQ(missing.message(),
            "demo: tensor 'model.layers.9.mlp.up_proj.weight' is not in the model");
  // A flipped stored byte: the read names the tensor.
  const std::string k = names[0];
  ASSERT_TRUE(testutil::FlipChunkByte(path, k, {0, 0}));
  auto st = H5Store::Open(path);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  auto bad = VerifyDense(**st, k);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(k), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace seedstore
