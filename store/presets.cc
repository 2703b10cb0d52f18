#include "store/presets.h"

#include <cmath>
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
TensorSpec Zeros(std::string name, std::vector<uint64_t> shape, DType dt) {
  TensorSpec t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtype = dt;
  t.init.dist = Dist::kZeros;
  return t;
}

/// Grouped-query attention projections of one layer (Llama/Mixtral names), in HF order.
void AddAttention(ModelSpec* m, const std::string& p, uint64_t hidden, uint64_t kv, double sd,
                  DType dt) {
  m->tensors.push_back(Normal(p + "self_attn.q_proj.weight", {hidden, hidden}, sd, dt));
  m->tensors.push_back(Normal(p + "self_attn.k_proj.weight", {kv, hidden}, sd, dt));
  m->tensors.push_back(Normal(p + "self_attn.v_proj.weight", {kv, hidden}, sd, dt));
  m->tensors.push_back(Normal(p + "self_attn.o_proj.weight", {hidden, hidden}, sd, dt));
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
    AddAttention(&m, p, hidden, kv, sd, bf);
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

/// GPT-2 (GPT2Model / GPT2LMHeadModel "transformer." prefix stripped, as in the Hub's
/// model.safetensors; lm_head is tied to wte). Conv1D weights are [in, out]. HF init
/// (GPT2PreTrainedModel._init_weights): normal(0, 0.02) for weights and embeddings, biases
/// zeros, LayerNorm weight ones / bias zeros, and every c_proj.weight normal(0, 0.02 /
/// sqrt(2 * n_layer)). float32, as the released checkpoints.
ModelSpec Gpt2(uint64_t vocab, uint64_t positions, uint64_t d, int layers) {
  const DType f = DType::kF32;
  const double sd = 0.02, proj_sd = 0.02 / std::sqrt(2.0 * layers);
  ModelSpec m;
  m.tensors.push_back(Normal("wte.weight", {vocab, d}, sd, f));
  m.tensors.push_back(Normal("wpe.weight", {positions, d}, sd, f));
  for (int i = 0; i < layers; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    m.tensors.push_back(Ones(p + "ln_1.weight", {d}, f));
    m.tensors.push_back(Zeros(p + "ln_1.bias", {d}, f));
    m.tensors.push_back(Normal(p + "attn.c_attn.weight", {d, 3 * d}, sd, f));
    m.tensors.push_back(Zeros(p + "attn.c_attn.bias", {3 * d}, f));
    m.tensors.push_back(Normal(p + "attn.c_proj.weight", {d, d}, proj_sd, f));
    m.tensors.push_back(Zeros(p + "attn.c_proj.bias", {d}, f));
    m.tensors.push_back(Ones(p + "ln_2.weight", {d}, f));
    m.tensors.push_back(Zeros(p + "ln_2.bias", {d}, f));
    m.tensors.push_back(Normal(p + "mlp.c_fc.weight", {d, 4 * d}, sd, f));
    m.tensors.push_back(Zeros(p + "mlp.c_fc.bias", {4 * d}, f));
    m.tensors.push_back(Normal(p + "mlp.c_proj.weight", {4 * d, d}, proj_sd, f));
    m.tensors.push_back(Zeros(p + "mlp.c_proj.bias", {d}, f));
  }
  m.tensors.push_back(Ones("ln_f.weight", {d}, f));
  m.tensors.push_back(Zeros("ln_f.bias", {d}, f));
  return m;
}

/// Mixtral (MixtralForCausalLM): Llama attention plus a sparse MoE block per layer: router
/// block_sparse_moe.gate [experts, hidden] and experts.E.{w1 [inter, hidden], w2 [hidden, inter],
/// w3 [inter, hidden]}. HF init normal(0, 0.02), RMSNorm ones, bfloat16.
ModelSpec Mixtral(uint64_t vocab, uint64_t hidden, uint64_t inter, int layers, uint64_t heads,
                  uint64_t kv_heads, int experts) {
  const DType bf = DType::kBF16;
  const double sd = 0.02;
  const uint64_t head_dim = hidden / heads, kv = kv_heads * head_dim;
  ModelSpec m;
  m.tensors.push_back(Normal("model.embed_tokens.weight", {vocab, hidden}, sd, bf));
  for (int i = 0; i < layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    AddAttention(&m, p, hidden, kv, sd, bf);
    m.tensors.push_back(Normal(p + "block_sparse_moe.gate.weight",
                               {static_cast<uint64_t>(experts), hidden}, sd, bf));
    for (int e = 0; e < experts; ++e) {
      const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
      m.tensors.push_back(Normal(x + "w1.weight", {inter, hidden}, sd, bf));
      m.tensors.push_back(Normal(x + "w2.weight", {hidden, inter}, sd, bf));
      m.tensors.push_back(Normal(x + "w3.weight", {inter, hidden}, sd, bf));
    }
    m.tensors.push_back(Ones(p + "input_layernorm.weight", {hidden}, bf));
    m.tensors.push_back(Ones(p + "post_attention_layernorm.weight", {hidden}, bf));
  }
  m.tensors.push_back(Ones("model.norm.weight", {hidden}, bf));
  m.tensors.push_back(Normal("lm_head.weight", {vocab, hidden}, sd, bf));
  return m;
}

const std::map<std::string, std::function<ModelSpec()>>& Table() {
  static const std::map<std::string, std::function<ModelSpec()>> t = {
      // meta-llama/Meta-Llama-3-8B config.json: vocab 128256, hidden 4096, intermediate 14336,
      // 32 layers, 32 heads, 8 KV heads.
      {"llama-3-8b", [] { return Llama(128256, 4096, 14336, 32, 32, 8); }},
      // meta-llama/Meta-Llama-3-70B: hidden 8192, intermediate 28672, 80 layers, 64 heads, 8 KV.
      {"llama-3-70b", [] { return Llama(128256, 8192, 28672, 80, 64, 8); }},
      // openai-community/gpt2 (124M): vocab 50257, n_positions 1024, n_embd 768, n_layer 12.
      {"gpt2", [] { return Gpt2(50257, 1024, 768, 12); }},
      {"gpt2-small", [] { return Gpt2(50257, 1024, 768, 12); }},
      // mistralai/Mixtral-8x7B-v0.1: vocab 32000, hidden 4096, intermediate 14336, 32 layers,
      // 32 heads, 8 KV heads, 8 local experts.
      {"mixtral-8x7b", [] { return Mixtral(32000, 4096, 14336, 32, 32, 8, 8); }},
      // Small stand-ins with the same names and rules, for tests and demos.
      {"tiny-llama", [] { return Llama(512, 64, 176, 2, 4, 2); }},
      {"tiny-gpt2", [] { return Gpt2(512, 64, 48, 2); }},
      {"tiny-mixtral", [] { return Mixtral(512, 64, 112, 2, 4, 2, 4); }},
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
