// Presets: real architectures with their Hugging Face parameter names, shapes and init rules.
// Parameter counts are the published ones (HF model cards / num_parameters()).
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "store/presets.h"

namespace seedstore {
namespace {

uint64_t Params(const ModelSpec& m) {
  uint64_t n = 0;
  for (const auto& t : m.tensors) n += t.NumElements();
  return n;
}

const TensorSpec& Get(const ModelSpec& m, const std::string& name) {
  const int i = m.Find(name);
  EXPECT_GE(i, 0) << name;
  return m.tensors.at(i < 0 ? 0 : i);
}

TEST(Presets, ParameterCountsMatchThePublishedModels) {
  const std::map<std::string, std::pair<uint64_t, size_t>> want = {
      {"llama-3-8b", {8030261248ull, 291}},
      {"llama-3-70b", {70553706496ull, 723}},
      {"gpt2", {124439808ull, 148}},
      {"mixtral-8x7b", {46702792704ull, 995}},
  };
  for (const auto& [name, w] : want) {
    auto m = Preset(name, 1);
    ASSERT_TRUE(m.ok()) << name;
    EXPECT_EQ(Params(*m), w.first) << name;
    EXPECT_EQ(m->tensors.size(), w.second) << name;
    EXPECT_EQ(m->seed, 1u);
  }
}

TEST(Presets, NamesShapesAndInitRules) {
  auto l = Preset("llama-3-70b");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(Get(*l, "model.layers.79.self_attn.k_proj.weight").shape,
            (std::vector<uint64_t>{1024, 8192}));
  EXPECT_EQ(Get(*l, "model.layers.0.mlp.down_proj.weight").shape,
            (std::vector<uint64_t>{8192, 28672}));
  EXPECT_EQ(Get(*l, "lm_head.weight").dtype, DType::kBF16);
  EXPECT_EQ(Get(*l, "model.norm.weight").init.dist, Dist::kOnes);
  EXPECT_EQ(Get(*l, "model.embed_tokens.weight").init.scale, 0.02);

  auto g = Preset("gpt2");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(Get(*g, "wte.weight").shape, (std::vector<uint64_t>{50257, 768}));
  EXPECT_EQ(Get(*g, "wpe.weight").shape, (std::vector<uint64_t>{1024, 768}));
  EXPECT_EQ(Get(*g, "h.11.attn.c_attn.weight").shape, (std::vector<uint64_t>{768, 2304}));
  EXPECT_EQ(Get(*g, "h.0.mlp.c_proj.weight").shape, (std::vector<uint64_t>{3072, 768}));
  EXPECT_DOUBLE_EQ(Get(*g, "h.0.attn.c_proj.weight").init.scale, 0.02 / std::sqrt(24.0));
  EXPECT_DOUBLE_EQ(Get(*g, "h.0.mlp.c_proj.weight").init.scale, 0.02 / std::sqrt(24.0));
  EXPECT_DOUBLE_EQ(Get(*g, "h.0.mlp.c_fc.weight").init.scale, 0.02);
  EXPECT_EQ(Get(*g, "h.3.ln_1.weight").init.dist, Dist::kOnes);
  EXPECT_EQ(Get(*g, "h.3.ln_1.bias").init.dist, Dist::kZeros);
  EXPECT_EQ(Get(*g, "h.3.attn.c_attn.bias").init.dist, Dist::kZeros);
  EXPECT_EQ(Get(*g, "ln_f.bias").dtype, DType::kF32);

  auto x = Preset("mixtral-8x7b", 0, Generator::kPhilox);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(Get(*x, "model.layers.31.block_sparse_moe.gate.weight").shape,
            (std::vector<uint64_t>{8, 4096}));
  EXPECT_EQ(Get(*x, "model.layers.0.block_sparse_moe.experts.7.w2.weight").shape,
            (std::vector<uint64_t>{4096, 14336}));
  EXPECT_EQ(Get(*x, "model.layers.0.block_sparse_moe.experts.0.w1.weight").generator,
            Generator::kPhilox);
  EXPECT_FALSE(Preset("llama-4-9000b").ok());
}

}  // namespace
}  // namespace seedstore
