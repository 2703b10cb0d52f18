#include "io/demo.h"

#include <map>

#include "gen/jax_keys.h"
#include "store/lazy.h"

namespace seedstore {
namespace {

const char* kFsdp8 = R"J({"mesh": {"axes": ["fsdp"], "shape": [8]},
  "placements": [{"match": "*", "flat": ["fsdp"]}]})J";
const char* kFsdp4Tp2 = R"J({"mesh": {"axes": ["fsdp", "tp"], "shape": [4, 2]},
  "placements": [
    {"match": "*.self_attn.[qkv]_proj.weight", "spec": ["tp", "fsdp"]},
    {"match": "*.mlp.gate_proj.weight", "spec": ["tp", "fsdp"]},
    {"match": "*.mlp.up_proj.weight", "spec": ["tp", "fsdp"]},
    {"match": "*.self_attn.o_proj.weight", "spec": ["fsdp", "tp"]},
    {"match": "*.mlp.down_proj.weight", "spec": ["fsdp", "tp"]},
    {"match": "model.embed_tokens.weight", "dtensor": ["Shard(1)", "Shard(0)"]},
    {"match": "lm_head.weight", "dtensor": ["Shard(1)", "Shard(0)"]},
    {"match": "*norm.weight", "spec": [null]}]})J";

}  // namespace

Result<std::vector<NamedLayout>> DemoLayouts() {
  std::vector<NamedLayout> layouts;
  for (auto [name, text] :
       {std::pair{"FSDP=8 (flat)", kFsdp8}, std::pair{"FSDP=4 x TP=2", kFsdp4Tp2}}) {
    SEEDSTORE_ASSIGN_OR_RETURN(Layout l, Layout::Parse(text, name));
    layouts.push_back({name, std::move(l)});
  }
  return layouts;
}

Result<Fingerprint> LayoutFingerprint(const Catalog& c, size_t i, const Layout& layout,
                                      CpuOptions o) {
  const TensorRecord& t = c.tensors()[i];
  SEEDSTORE_ASSIGN_OR_RETURN(std::vector<Shard> shards, layout.DistinctShards(t.name, t.shape));
  Fingerprint sum;
  for (const Shard& s : shards) {
    SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint f, c.FingerprintRegion(i, s.region, o));
    sum.Add(f);
  }
  return sum;
}

Result<RankShards> MaterializeRank(const Catalog& c, const Layout& layout, int rank, CpuOptions o) {
  if (rank < 0 || rank >= layout.world_size())
    return InvalidArgument("rank " + std::to_string(rank) + " is outside the mesh (" +
                           std::to_string(layout.world_size()) + " ranks)");
  RankShards r;
  std::vector<unsigned char> buf;
  for (size_t i = 0; i < c.tensors().size(); ++i) {
    const TensorRecord& rec = c.tensors()[i];
    SEEDSTORE_ASSIGN_OR_RETURN(Shard s, layout.ShardOf(rec.name, rec.shape, rank));
    buf.resize(s.region.Count() * DTypeSize(rec.dtype));
    SEEDSTORE_RETURN_IF_ERROR(c.Read(i, s.region, buf.data(), o));
    r.bytes += buf.size();
    ++r.shards;
  }
  return r;
}

const std::vector<std::string>& DemoUpdatedTensors() {
  static const std::vector<std::string> names = {"model.layers.0.self_attn.k_proj.weight",
                                                 "model.layers.0.input_layernorm.weight",
                                                 "model.norm.weight"};
  return names;
}

Result<BoxSource> TrainLikeUpdate(const Catalog& c, size_t i) {
  const TensorRecord& t = c.tensors()[i];
  if (!t.lazy)
    return InvalidArgument("demo: tensor " + Quoted(t.name) + " is dense: no init spec to update");
  if (t.dtype != DType::kBF16 && t.dtype != DType::kF32)
    return InvalidArgument("demo: tensor " + Quoted(t.name) + " is " + DTypeName(t.dtype) +
                           "; the update is defined for bfloat16 and float32");
  TensorSpec noise = t.lazy->spec;
  noise.key.kind = KeySpec::Kind::kRaw;
  noise.key.raw = FoldIn(t.lazy->key, 1);
  noise.init = InitSpec{};
  noise.init.dist = Dist::kNormal;
  noise.init.scale = 0.001;
  SEEDSTORE_ASSIGN_OR_RETURN(LazyTensor n, LazyTensor::Resolve(noise, 0));
  return BoxSource([&c, i, n = std::move(n), bf16 = t.dtype == DType::kBF16](const Region& box,
                                                                             void* out) -> Status {
    SEEDSTORE_RETURN_IF_ERROR(c.Read(i, box, out, CpuOptions{1}));
    if (bf16) {
      std::vector<uint16_t> d(box.Count());
      SEEDSTORE_RETURN_IF_ERROR(n.Materialize(box, d.data(), CpuOptions{1}));
      auto* w = static_cast<uint16_t*>(out);
      for (size_t k = 0; k < d.size(); ++k) w[k] = F32ToBF16(BF16ToF32(w[k]) + BF16ToF32(d[k]));
    } else {
      std::vector<float> d(box.Count());
      SEEDSTORE_RETURN_IF_ERROR(n.Materialize(box, d.data(), CpuOptions{1}));
      auto* w = static_cast<float*>(out);
      for (size_t k = 0; k < d.size(); ++k) w[k] += d[k];
    }
    return Status::Ok();
  });
}

Status SaveLazyStore(const std::string& path, const ModelSpec& spec,
                     const std::vector<Fingerprint>& fingerprints) {
  SEEDSTORE_ASSIGN_OR_RETURN(auto w, StoreWriter::Create(path, spec.seed, spec.generator));
  for (size_t i = 0; i < spec.tensors.size(); ++i)
    SEEDSTORE_RETURN_IF_ERROR(w->AddLazy(spec.tensors[i], &fingerprints.at(i)));
  return w->Commit();
}

Status UpdateToDense(const std::string& path, const Catalog& c,
                     const std::vector<std::string>& names) {
  std::map<std::string, BoxSource> values;
  for (const auto& n : names) {
    const int i = c.Find(n);
    if (i < 0) return NotFound("demo: tensor " + Quoted(n) + " is not in the model");
    SEEDSTORE_ASSIGN_OR_RETURN(values[n], TrainLikeUpdate(c, i));
  }
  return ReplaceWithDense(path, values);
}

Result<Fingerprint> VerifyDense(const H5Store& store, const std::string& name) {
  const int i = store.Find(name);
  if (i < 0) return NotFound("demo: tensor " + Quoted(name) + " is not in the store");
  const TensorRecord& r = store.tensors()[i];
  if (r.lazy) return Internal("demo: " + Quoted(name) + " is still lazy after the update");
  std::vector<unsigned char> buf(r.NumBytes());
  const Region whole = WholeTensor(r.shape);
  SEEDSTORE_RETURN_IF_ERROR(store.Read(i, whole, buf.data()));
  const Fingerprint f = FingerprintCpu(r.dtype, whole, buf.data(), r.fp_seed());
  if (!r.fingerprint || *r.fingerprint != f)
    return Mismatch("demo: tensor " + Quoted(name) +
                    ": recorded fingerprint does not match its data");
  return f;
}

}  // namespace seedstore
