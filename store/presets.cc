#include "store/presets.h"

#include <functional>
#include <map>

namespace seedstore {
namespace {

TensorSpec Normal(std::string name, std::vector<uint64_t> shape, double std, DType dt) {
  TensorSpec t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtype = dt;
  t.init.dist = Dist::kNormal;
  t.init.scale = std;
  return t;
}
TensorSpec Ones(std::string name, std::vector<uint64_t> shape, DType dt) {
  TensorSpec t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtype = dt;
  t.init.dist = Dist::kOnes;
  return t;
}

/// Llama family (LlamaForCausalLM): HF init normal(0, initializer_range) for linear and
/// embedding weights, ones for RMSNorm weights.
ModelSpec Llama(uint64_t vocab, uint64_t hidden, uint64_t inter, int layers, uint64_t heads,
                uint64_t kv_heads) {
  const DType bf = DType::kBF16;
  const double sd = 0.02;
  const uint64_t head_dim = hidden / heads, kv = kv_heads * head_dim;
  ModelSpec m;
  m.tensors.push_back(Normal("model.embed_tokens.weight", {vocab, hidden}, sd, bf));
  for (int i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    m.tensors.push_back(Normal(p + "self_attn.q_proj.weight", {hidden, hidden}, sd, bf));
    m.tensors.push_back(Normal(p + "self_attn.k_proj.weight", {kv, hidden}, sd, bf));
    m.tensors.push_back(Normal(p + "self_attn.v_proj.weight", {kv, hidden}, sd, bf));
    m.tensors.push_back(Normal(p + "self_attn.o_proj.weight", {hidden, hidden}, sd, bf));
    m.tensors.push_back(Normal(p + "mlp.gate_proj.weight", {inter, hidden}, sd, bf));
    m.tensors.push_back(Normal(p + "mlp.up_proj.weight", {inter, hidden}, sd, bf));
    m.tensors.push_back(Normal(p + "mlp.down_proj.weight", {hidden, inter}, sd, bf));
    m.tensors.push_back(Ones(p + "input_layernorm.weight", {hidden}, bf));
    m.tensors.push_back(Ones(p + "post_attention_layernorm.weight", {hidden}, bf));
  }
  m.tensors.push_back(Ones("model.norm.weight", {hidden}, bf));
  m.tensors.push_back(Normal("lm_head.weight", {vocab, hidden}, sd, bf));
  return m;
}

const std::map<std::string, std::function<ModelSpec()>>& Table() {
  static const std::map<std::string, std::function<ModelSpec()>> t = {
      {"llama-3-8b", [] { return Llama(128256, 4096, 14336, 32, 32, 8); }},
  };
  return t;
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> n;
  for (const auto& [k, v] : Table()) n.push_back(k);
  return n;
}

Result<ModelSpec> Preset(const std::string& name, uint64_t seed, Generator g) {
  const auto& t = Table();
  auto it = t.find(name);
  if (it == t.end()) {
    std::string known;
    for (const auto& n : PresetNames()) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgument("unknown preset '" + name + "' (known: " + known + ")");
  }
  ModelSpec m = it->second();
  m.seed = seed;
  m.generator = g;
  for (auto& x : m.tensors) x.generator = g;
  return m;
}

}  // namespace seedstore
