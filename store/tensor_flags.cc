#include "store/tensor_flags.h"

#include <nlohmann/json.hpp>

#include "store/integer_text.h"
#include "store/json_text.h"

namespace seedstore {

Result<std::vector<uint64_t>> ParseShapeFlag(const std::string& s) {
  std::vector<uint64_t> shape;
  if (s.empty()) return shape;  // scalar
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = s.find(',', pos);
    const std::string part =
        s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    SEEDSTORE_ASSIGN_OR_RETURN(const uint64_t n,
                               ParseInteger<uint64_t>(part, "--shape '" + s + "'"));
    shape.push_back(n);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return shape;
}

Result<TensorSpec> TensorSpecFromFlags(const TensorFlags& o) {
  TensorSpec t;
  t.name = o.name;
  SEEDSTORE_ASSIGN_OR_RETURN(t.shape, ParseShapeFlag(o.shape));
  auto dt = ParseDType(o.dtype);
  if (!dt.ok()) return dt.status().WithContext("--dtype");
  t.dtype = *dt;
  SEEDSTORE_RETURN_IF_ERROR(ValidateShape(t.shape, t.dtype, "--shape"));
  auto g = ParseGenerator(o.generator);
  if (!g.ok()) return g.status().WithContext("--generator");
  t.generator = *g;
  auto f = ParseFlavour(o.flavour);
  if (!f.ok()) return f.status().WithContext("--flavour");
  t.flavour = *f;
  std::string err;
  const nlohmann::json ij = ParseJson(o.init, &err);
  if (ij.is_discarded()) return InvalidArgument("--init: " + err);
  SEEDSTORE_ASSIGN_OR_RETURN(t.init, InitSpec::FromJson(ij, "--init"));
  if (!Supported(t.init.dist, t.dtype))
    return InvalidArgument(std::string("--init: distribution '") + DistName(t.init.dist) +
                           "' does not support dtype " + DTypeName(t.dtype));
  if (!o.key.empty()) {
    const size_t comma = o.key.find(',');
    if (comma == std::string::npos || o.key.find(',', comma + 1) != std::string::npos)
      return InvalidArgument("--key '" + o.key + "': expected K0,K1 (two uint32 words)");
    const std::string what = "--key '" + o.key + "'";
    SEEDSTORE_ASSIGN_OR_RETURN(const uint32_t k0,
                               ParseInteger<uint32_t>(o.key.substr(0, comma), what));
    SEEDSTORE_ASSIGN_OR_RETURN(const uint32_t k1,
                               ParseInteger<uint32_t>(o.key.substr(comma + 1), what));
    t.key.kind = KeySpec::Kind::kRaw;
    t.key.raw = Key{k0, k1};
  } else {
    t.key.kind = KeySpec::Kind::kSeed;
    t.key.seed = o.seed;
    t.key.x64 = o.x64;
  }
  return t;
}

}  // namespace seedstore
