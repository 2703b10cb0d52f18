#include "store/spec.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "store/json_text.h"

namespace seedstore {
namespace {

using json = nlohmann::json;

struct NameD {
  const char* name;
  DType t;
};
constexpr NameD kDTypeNames[] = {
    {"float32", DType::kF32}, {"float64", DType::kF64}, {"bfloat16", DType::kBF16},
    {"float16", DType::kF16}, {"uint8", DType::kU8},    {"uint16", DType::kU16},
    {"uint32", DType::kU32},  {"uint64", DType::kU64},  {"int8", DType::kI8},
    {"int16", DType::kI16},   {"int32", DType::kI32},   {"int64", DType::kI64},
    {"bool", DType::kBool},
};
constexpr NameD kDTypeAliases[] = {
    {"f32", DType::kF32},   {"fp32", DType::kF32}, {"f64", DType::kF64},  {"fp64", DType::kF64},
    {"bf16", DType::kBF16}, {"f16", DType::kF16},  {"fp16", DType::kF16}, {"half", DType::kF16},
    {"u8", DType::kU8},     {"u16", DType::kU16},  {"u32", DType::kU32},  {"u64", DType::kU64},
    {"i8", DType::kI8},     {"i16", DType::kI16},  {"i32", DType::kI32},  {"i64", DType::kI64},
};

Status CheckFields(const json& j, const std::string& where, std::initializer_list<const char*> ok) {
  if (!j.is_object())
    return InvalidArgument(where + ": expected a JSON object, got " + JsonPreview(j));
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* f : ok) known = known || it.key() == f;
    if (!known) return InvalidArgument(where + ": unknown field " + Quoted(it.key()));
  }
  return Status::Ok();
}

Result<double> GetNumber(const json& j, const char* field, double dflt, const std::string& where) {
  if (!j.contains(field)) return dflt;
  const json& v = j.at(field);
  if (!v.is_number())
    return InvalidArgument(where + "." + field + ": expected a number, got " + JsonPreview(v));
  const double d = v.get<double>();
  if (!std::isfinite(d)) return InvalidArgument(where + "." + field + ": must be finite");
  // Parameters are held as float64: an integer it cannot hold exactly (beyond 2^53) would
  // silently become another value (an int64 constant 2^53 + 1 became 2^53).
  const bool inexact =
      v.is_number_unsigned()
          ? d >= 0x1p64 || static_cast<uint64_t>(d) != v.get<uint64_t>()
          : v.is_number_integer() && (d >= 0x1p63 || static_cast<int64_t>(d) != v.get<int64_t>());
  if (inexact)
    return InvalidArgument(
        where + "." + field + ": " + v.dump() +
        " is not exactly a float64 (parameters are float64: integers up to 2^53, "
        "larger ones only where float64 holds them)");
  return d;
}

// Round a float32 to dtype D (f32, bf16, f16) and back.
float RoundTo(DType d, float x) {
  switch (d) {
    case DType::kBF16:
      return BF16ToF32(F32ToBF16(x));
    case DType::kF16:
      return F16ToF32(F32ToF16(x));
    default:
      return x;
  }
}

// Round a float64 to dtype D (f32, bf16, f16) once, to nearest even, and back: the rounding of
// a Python float that JAX converts straight to the dtype (`jnp.full`; a weak-typed constant
// under `jax.jit`). Not RoundTo(d, float(x)): rounding through float32 first can land on a
// bf16/f16 tie that x itself is not on. Subnormals are kept; beyond the largest finite value
// plus half an ulp the result is infinite.
float RoundDirect(DType d, double x) {
  if (d == DType::kF32 || !std::isfinite(x) || x == 0.0) return static_cast<float>(x);
  const bool bf16 = d == DType::kBF16;
  const int digits = bf16 ? 8 : 11;       // significand bits, the implicit one included
  const int min_exp = bf16 ? -126 : -14;  // exponent of the smallest normal
  const double max = bf16 ? 0x1.FEp127 : 65504.0;
  int e = 0;
  std::frexp(x, &e);                                            // |x| in [2^(e-1), 2^e)
  const int quantum = std::max(e - 1, min_exp) - (digits - 1);  // exponent of one ulp at x
  const double r = std::ldexp(std::nearbyint(std::ldexp(x, -quantum)), quantum);  // exact
  if (std::fabs(r) > max) return std::copysign(std::numeric_limits<float>::infinity(), x);
  return static_cast<float>(r);
}

// Next representable value of dtype d (f32/bf16/f16) after x toward +inf (up) or -inf.
float NextAfterIn(DType d, float x, bool up) {
  if (d == DType::kF32) {
    return std::nextafter(
        x, up ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity());
  }
  // 16-bit: step the storage bits (sign-magnitude).
  uint16_t b = d == DType::kBF16 ? F32ToBF16(x) : F32ToF16(x);
  const bool neg = b & 0x8000u;
  const uint16_t mag = b & 0x7FFFu;
  if (mag == 0) {
    b = up ? 1 : 0x8001;
  } else if (neg == up) {  // moving toward zero
    b = static_cast<uint16_t>(b - 1);
  } else {
    b = static_cast<uint16_t>(b + 1);
  }
  return d == DType::kBF16 ? BF16ToF32(b) : F16ToF32(b);
}

Result<uint64_t> ConstantBits(DType d, double v, const std::string& where) {
  // As `jnp.full(shape, v, dtype)`: v rounded once, straight to the dtype.
  const bool is_float = d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
  if (is_float && !std::isfinite(RoundDirect(d, v)))
    return InvalidArgument(where + ": value " + JsonPreview(json(v)) +
                           " is out of range for dtype " + DTypeName(d) +
                           " (it would be infinite)");
  switch (d) {
    case DType::kF32:
      return FloatBits(static_cast<float>(v));
    case DType::kF64:
      return BitCast<uint64_t>(v);
    case DType::kBF16:
      return F32ToBF16(RoundDirect(d, v));  // exact: the value is a bfloat16
    case DType::kF16:
      return F32ToF16(RoundDirect(d, v));
    default:
      break;
  }
  if (v != std::floor(v))
    return InvalidArgument(where + ": value " + JsonPreview(json(v)) +
                           " is not an integer for dtype " + DTypeName(d));
  const int bits = DTypeSize(d) * 8;
  const bool is_unsigned = d == DType::kU8 || d == DType::kU16 || d == DType::kU32 ||
                           d == DType::kU64 || d == DType::kBool;
  double lo = is_unsigned ? 0.0 : -std::ldexp(1.0, bits - 1);
  double hi = is_unsigned ? std::ldexp(1.0, bits) : std::ldexp(1.0, bits - 1);
  if (d == DType::kBool) hi = 2.0;
  if (v < lo || v >= hi)
    return InvalidArgument(where + ": value " + JsonPreview(json(v)) +
                           " is out of range for dtype " + DTypeName(d));
  const uint64_t mask = bits == 64 ? ~uint64_t{0} : ((uint64_t{1} << bits) - 1);
  if (is_unsigned) return static_cast<uint64_t>(v) & mask;
  return static_cast<uint64_t>(static_cast<int64_t>(v)) & mask;
}

}  // namespace

const char* DTypeName(DType t) {
  for (const auto& n : kDTypeNames)
    if (n.t == t) return n.name;
  return "?";
}

Result<DType> ParseDType(std::string_view s) {
  for (const auto& n : kDTypeNames)
    if (s == n.name) return n.t;
  for (const auto& n : kDTypeAliases)
    if (s == n.name) return n.t;
  return InvalidArgument("unknown dtype " + Quoted(s) + " (expected " + DTypeNameList() + ")");
}

std::string DTypeNameList() {
  std::string list;
  for (const auto& n : kDTypeNames) list += (list.empty() ? "" : ", ") + std::string(n.name);
  return list;
}

const char* DistName(Dist d) {
  switch (d) {
    case Dist::kBits:
      return "bits";
    case Dist::kUniform:
      return "uniform";
    case Dist::kNormal:
      return "normal";
    case Dist::kTruncatedNormal:
      return "truncated_normal";
    case Dist::kConstant:
      return "constant";
    case Dist::kZeros:
      return "zeros";
    case Dist::kOnes:
      return "ones";
  }
  return "?";
}

Result<Dist> ParseDist(std::string_view s) {
  for (Dist d : {Dist::kBits, Dist::kUniform, Dist::kNormal, Dist::kTruncatedNormal,
                 Dist::kConstant, Dist::kZeros, Dist::kOnes})
    if (s == DistName(d)) return d;
  return InvalidArgument("unknown distribution " + Quoted(s) +
                         " (expected bits, uniform, normal, truncated_normal, constant, zeros "
                         "or ones)");
}

const char* GeneratorName(Generator g) { return g == Generator::kPhilox ? "philox" : "threefry"; }

Result<Generator> ParseGenerator(std::string_view s) {
  if (s == "threefry") return Generator::kThreefry;
  if (s == "philox") return Generator::kPhilox;
  return InvalidArgument("unknown generator " + Quoted(s) + " (expected threefry or philox)");
}

const char* FlavourName(Flavour f) { return f == Flavour::kEager ? "eager" : "jit"; }

Result<Flavour> ParseFlavour(std::string_view s) {
  if (s == "jit") return Flavour::kJit;
  if (s == "eager") return Flavour::kEager;
  return InvalidArgument("unknown flavour " + Quoted(s) + " (expected jit or eager)");
}

Result<InitSpec> InitSpec::FromJson(const json& j, const std::string& where) {
  if (!j.is_object())
    return InvalidArgument(where + ": expected a JSON object, got " + JsonPreview(j));
  if (!j.contains("dist")) return InvalidArgument(where + ".dist: missing");
  if (!j.at("dist").is_string())
    return InvalidArgument(where + ".dist: expected a string, got " + JsonPreview(j.at("dist")));
  InitSpec s;
  auto dist = ParseDist(j.at("dist").get<std::string>());
  if (!dist.ok()) return dist.status().WithContext(where + ".dist");
  s.dist = *dist;
  switch (s.dist) {
    case Dist::kBits:
    case Dist::kZeros:
    case Dist::kOnes:
      SEEDSTORE_RETURN_IF_ERROR(CheckFields(j, where, {"dist"}));
      break;
    case Dist::kUniform: {
      SEEDSTORE_RETURN_IF_ERROR(CheckFields(j, where, {"dist", "minval", "maxval"}));
      SEEDSTORE_ASSIGN_OR_RETURN(s.minval, GetNumber(j, "minval", 0.0, where));
      SEEDSTORE_ASSIGN_OR_RETURN(s.maxval, GetNumber(j, "maxval", 1.0, where));
      if (!(s.minval < s.maxval))
        return InvalidArgument(where + ": minval (" + JsonPreview(json(s.minval)) +
                               ") must be < maxval (" + JsonPreview(json(s.maxval)) + ")");
      break;
    }
    case Dist::kNormal: {
      SEEDSTORE_RETURN_IF_ERROR(CheckFields(j, where, {"dist", "scale", "mean"}));
      SEEDSTORE_ASSIGN_OR_RETURN(s.scale, GetNumber(j, "scale", 1.0, where));
      SEEDSTORE_ASSIGN_OR_RETURN(s.mean, GetNumber(j, "mean", 0.0, where));
      break;
    }
    case Dist::kTruncatedNormal: {
      SEEDSTORE_RETURN_IF_ERROR(CheckFields(j, where, {"dist", "lower", "upper", "scale", "mean"}));
      SEEDSTORE_ASSIGN_OR_RETURN(s.lower, GetNumber(j, "lower", -2.0, where));
      SEEDSTORE_ASSIGN_OR_RETURN(s.upper, GetNumber(j, "upper", 2.0, where));
      SEEDSTORE_ASSIGN_OR_RETURN(s.scale, GetNumber(j, "scale", 1.0, where));
      SEEDSTORE_ASSIGN_OR_RETURN(s.mean, GetNumber(j, "mean", 0.0, where));
      if (!(s.lower < s.upper))
        return InvalidArgument(where + ": lower (" + JsonPreview(json(s.lower)) +
                               ") must be < upper (" + JsonPreview(json(s.upper)) + ")");
      break;
    }
    case Dist::kConstant: {
      SEEDSTORE_RETURN_IF_ERROR(CheckFields(j, where, {"dist", "value"}));
      if (!j.contains("value")) return InvalidArgument(where + ".value: missing");
      SEEDSTORE_ASSIGN_OR_RETURN(s.value, GetNumber(j, "value", 0.0, where));
      break;
    }
  }
  return s;
}

json InitSpec::ToJson() const {
  json j = {{"dist", DistName(dist)}};
  switch (dist) {
    case Dist::kUniform:
      j["minval"] = minval;
      j["maxval"] = maxval;
      break;
    case Dist::kNormal:
      j["scale"] = scale;
      j["mean"] = mean;
      break;
    case Dist::kTruncatedNormal:
      j["lower"] = lower;
      j["upper"] = upper;
      j["scale"] = scale;
      j["mean"] = mean;
      break;
    case Dist::kConstant:
      j["value"] = value;
      break;
    default:
      break;
  }
  return j;
}

uint64_t TensorSpec::NumElements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

Status ValidateShape(const std::vector<uint64_t>& shape, DType dtype, const std::string& where) {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    return InvalidArgument(where + ": rank " + std::to_string(shape.size()) + " exceeds " +
                           std::to_string(kMaxRank));
  // Every dim, also of a tensor with no elements: HDF5 takes dims below 2^63 (it rounds each
  // up to a power of two), and so does every index computation here.
  bool empty = false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] > kMaxDim)
      return InvalidArgument(where + ": dim " + std::to_string(d) + " is " +
                             std::to_string(shape[d]) + ", more than the limit 2^63 - 1");
    empty = empty || shape[d] == 0;
  }
  if (empty) return Status::Ok();
  unsigned __int128 n = DTypeSize(dtype);
  const unsigned __int128 limit = static_cast<unsigned __int128>(1) << 62;
  for (size_t d = 0; d < shape.size(); ++d) {
    n *= shape[d];  // every dim >= 1: n only grows, and stays below 2^125
    if (n > limit)
      return InvalidArgument(where + ": shape overflows (more than 2^62 bytes at dim " +
                             std::to_string(d) + ")");
  }
  return Status::Ok();
}

Result<TensorSpec> TensorSpecFromJson(const json& j, Generator default_generator,
                                      const std::string& where, Flavour default_flavour) {
  SEEDSTORE_RETURN_IF_ERROR(
      CheckFields(j, where, {"name", "shape", "dtype", "init", "key", "generator", "flavour"}));
  TensorSpec t;
  t.generator = default_generator;
  if (!j.contains("name") || !j.at("name").is_string())
    return InvalidArgument(where + ".name: missing or not a string");
  if (j.at("name").get<std::string>().empty())
    return InvalidArgument(where + ".name: an empty name (\"\"); every tensor needs a name");
  t.name = j.at("name").get<std::string>();
  if (t.name.find('\0') != std::string::npos)  // HDF5 link names and C strings end there
    return InvalidArgument(where + ".name: contains a NUL byte (\\u0000)");
  const std::string w = where + " ('" + t.name + "')";
  if (!j.contains("shape") || !j.at("shape").is_array())
    return InvalidArgument(w + ".shape: missing or not an array");
  for (size_t d = 0; d < j.at("shape").size(); ++d) {
    const json& v = j.at("shape")[d];
    // JSON text gives non-negative integers as unsigned; JSON built in code (the library's
    // and the Python package's callers) may hold them as signed. One too large for a dim is
    // ValidateShape's to name.
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      return InvalidArgument(w + ".shape[" + std::to_string(d) +
                             "]: expected a non-negative integer, got " + JsonPreview(v));
    t.shape.push_back(v.get<uint64_t>());
  }
  if (!j.contains("dtype") || !j.at("dtype").is_string())
    return InvalidArgument(w + ".dtype: missing or not a string");
  auto dt = ParseDType(j.at("dtype").get<std::string>());
  if (!dt.ok()) return dt.status().WithContext(w + ".dtype");
  t.dtype = *dt;
  SEEDSTORE_RETURN_IF_ERROR(ValidateShape(t.shape, t.dtype, w + ".shape"));
  if (j.contains("generator")) {
    if (!j.at("generator").is_string()) return InvalidArgument(w + ".generator: expected a string");
    auto g = ParseGenerator(j.at("generator").get<std::string>());
    if (!g.ok()) return g.status().WithContext(w + ".generator");
    t.generator = *g;
  }
  t.flavour = default_flavour;
  if (j.contains("flavour")) {
    if (!j.at("flavour").is_string())
      return InvalidArgument(w + ".flavour: expected a string, got " +
                             JsonPreview(j.at("flavour")));
    if (t.generator != Generator::kThreefry)
      return InvalidArgument(w + ".flavour: only the threefry generator has flavours");
    auto f = ParseFlavour(j.at("flavour").get<std::string>());
    if (!f.ok()) return f.status().WithContext(w + ".flavour");
    t.flavour = *f;
  }
  if (!j.contains("init")) return InvalidArgument(w + ".init: missing");
  SEEDSTORE_ASSIGN_OR_RETURN(t.init, InitSpec::FromJson(j.at("init"), w + ".init"));
  if (!Supported(t.init.dist, t.dtype))
    return InvalidArgument(
        w + ": distribution '" + DistName(t.init.dist) + "' does not support dtype " +
        DTypeName(t.dtype) +
        (t.init.dist == Dist::kBits ? " (bits needs uint8..uint64)" : " (needs a float dtype)"));
  if (j.contains("key")) {
    const json& k = j.at("key");
    SEEDSTORE_RETURN_IF_ERROR(CheckFields(k, w + ".key", {"seed", "raw", "x64"}));
    if (k.contains("seed") == k.contains("raw"))
      return InvalidArgument(w + ".key: give exactly one of \"seed\" or \"raw\"");
    if (k.contains("seed")) {
      if (!k.at("seed").is_number_integer())
        return InvalidArgument(w + ".key.seed: expected an integer, got " +
                               JsonPreview(k.at("seed")));
      t.key.kind = KeySpec::Kind::kSeed;
      t.key.seed = k.at("seed").is_number_unsigned()
                       ? static_cast<int64_t>(k.at("seed").get<uint64_t>())
                       : k.at("seed").get<int64_t>();
      if (k.contains("x64")) {
        if (!k.at("x64").is_boolean()) return InvalidArgument(w + ".key.x64: expected a boolean");
        t.key.x64 = k.at("x64").get<bool>();
      }
    } else {
      const json& r = k.at("raw");
      if (!r.is_array() || r.size() != 2 || !r[0].is_number_unsigned() ||
          !r[1].is_number_unsigned() || r[0].get<uint64_t>() > 0xFFFFFFFFu ||
          r[1].get<uint64_t>() > 0xFFFFFFFFu)
        return InvalidArgument(w + ".key.raw: expected two uint32 words, got " + JsonPreview(r));
      t.key.kind = KeySpec::Kind::kRaw;
      t.key.raw = Key{r[0].get<uint32_t>(), r[1].get<uint32_t>()};
    }
  }
  return t;
}

json TensorSpecToJson(const TensorSpec& t) {
  json j = {{"name", t.name},
            {"shape", t.shape},
            {"dtype", DTypeName(t.dtype)},
            {"generator", GeneratorName(t.generator)},
            {"init", t.init.ToJson()}};
  if (t.generator == Generator::kThreefry) j["flavour"] = FlavourName(t.flavour);
  if (t.key.kind == KeySpec::Kind::kSeed) {
    j["key"] = {{"seed", t.key.seed}};
    if (t.key.x64) j["key"]["x64"] = true;
  } else if (t.key.kind == KeySpec::Kind::kRaw) {
    j["key"] = {{"raw", {t.key.raw.k0, t.key.raw.k1}}};
  }
  return j;
}

Result<ModelSpec> ModelSpec::FromJson(const json& j, std::string_view origin) {
  const std::string o(origin);
  SEEDSTORE_RETURN_IF_ERROR(
      CheckFields(j, o, {"seedstore", "seed", "generator", "flavour", "tensors"}));
  if (j.contains("seedstore")) {
    if (!j.at("seedstore").is_number_integer() || j.at("seedstore").get<int64_t>() != 1)
      return InvalidArgument(o + ".seedstore: unsupported spec version " +
                             JsonPreview(j.at("seedstore")) + " (this build reads version 1)");
  }
  ModelSpec m;
  if (j.contains("seed")) {
    if (!j.at("seed").is_number_integer())
      return InvalidArgument(o + ".seed: expected an integer, got " + JsonPreview(j.at("seed")));
    m.seed = j.at("seed").is_number_unsigned() ? j.at("seed").get<uint64_t>()
                                               : static_cast<uint64_t>(j.at("seed").get<int64_t>());
  }
  if (j.contains("generator")) {
    if (!j.at("generator").is_string()) return InvalidArgument(o + ".generator: expected a string");
    auto g = ParseGenerator(j.at("generator").get<std::string>());
    if (!g.ok()) return g.status().WithContext(o + ".generator");
    m.generator = *g;
  }
  if (j.contains("flavour")) {
    if (!j.at("flavour").is_string()) return InvalidArgument(o + ".flavour: expected a string");
    auto f = ParseFlavour(j.at("flavour").get<std::string>());
    if (!f.ok()) return f.status().WithContext(o + ".flavour");
    m.flavour = *f;
  }
  if (!j.contains("tensors") || !j.at("tensors").is_array())
    return InvalidArgument(o + ".tensors: missing or not an array");
  std::set<std::string> names;
  for (size_t i = 0; i < j.at("tensors").size(); ++i) {
    SEEDSTORE_ASSIGN_OR_RETURN(
        TensorSpec t, TensorSpecFromJson(j.at("tensors")[i], m.generator,
                                         o + ".tensors[" + std::to_string(i) + "]", m.flavour));
    if (!names.insert(t.name).second)
      return InvalidArgument(o + ".tensors[" + std::to_string(i) + "]: duplicate tensor name '" +
                             t.name + "'");
    m.tensors.push_back(std::move(t));
  }
  return m;
}

Result<ModelSpec> ModelSpec::Parse(std::string_view text, std::string_view origin) {
  std::string err;
  const json j = ParseJson(text, &err);
  if (j.is_discarded()) return InvalidArgument(std::string(origin) + ": " + err);
  return FromJson(j, origin);
}

Result<ModelSpec> ModelSpec::Load(const std::string& path) {
  SEEDSTORE_ASSIGN_OR_RETURN(const std::string text,
                             ReadTextFile(path, "spec file " + Quoted(path)));
  return Parse(text, path);
}

json ModelSpec::ToJson() const {
  json t = json::array();
  for (const auto& x : tensors) t.push_back(TensorSpecToJson(x));
  return {{"seedstore", 1},
          {"seed", seed},
          {"generator", GeneratorName(generator)},
          {"flavour", FlavourName(flavour)},
          {"tensors", t}};
}

int ModelSpec::Find(std::string_view name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return static_cast<int>(i);
  return -1;
}

Key TensorKey(uint64_t root_seed, const TensorSpec& t) {
  switch (t.key.kind) {
    case KeySpec::Kind::kRaw:
      return t.key.raw;
    case KeySpec::Kind::kSeed:
      return t.key.x64 ? KeyFromSeed64(t.key.seed) : KeyFromSeed32(t.key.seed);
    case KeySpec::Kind::kDerived:
      break;
  }
  const Key root = KeyFromSeed64(static_cast<int64_t>(root_seed));
  const uint64_t h = XXH3_64bits(t.name.data(), t.name.size());
  return FoldIn(FoldIn(root, static_cast<uint32_t>(h >> 32)), static_cast<uint32_t>(h));
}

// Long by design: one case per distribution, so that each one's parameter rules (and their
// error messages) read side by side with the others'.
Result<SamplerParams> PrepareSampler(const TensorSpec& t, Key key) {
  const std::string w = "tensor '" + t.name + "'";
  if (!Supported(t.init.dist, t.dtype))
    return InvalidArgument(w + ": distribution '" + DistName(t.init.dist) +
                           "' does not support dtype " + DTypeName(t.dtype));
  SamplerParams p;
  p.generator = t.generator;
  p.dist = t.init.dist;
  p.dtype = t.dtype;
  p.key = key;
  const InitSpec& s = t.init;
  const DType d = t.dtype;
  const bool jax = t.generator == Generator::kThreefry;
  switch (s.dist) {
    case Dist::kZeros:
      p.const_bits = 0;
      return p;
    case Dist::kOnes: {
      SEEDSTORE_ASSIGN_OR_RETURN(p.const_bits, ConstantBits(d, 1.0, w));
      return p;
    }
    case Dist::kConstant: {
      SEEDSTORE_ASSIGN_OR_RETURN(p.const_bits, ConstantBits(d, s.value, w + " init.value"));
      return p;
    }
    case Dist::kBits:
      return p;
    default:
      break;
  }
  const bool gaussian = s.dist == Dist::kNormal || s.dist == Dist::kTruncatedNormal;
  // Every parameter, and a uniform's range, must be finite in the dtype: an infinite bound or
  // scale fills the tensor with infinities or NaNs (and jax.random's NaNs are not ours).
  // How JAX rounds a float64 parameter to a 16/32-bit dtype: `scale` and `mean` under jit are
  // weak-typed Python constants, rounded once, straight to the dtype; op by op they are
  // float32 arrays first, as are uniform's minval/maxval and truncated_normal's bounds in
  // either flavour (jax.random takes them as arguments). Measured on bf16/f16 ties.
  const bool jit = jax && t.flavour == Flavour::kJit;
  auto param = [&](double v, bool affine) {
    return jit && affine ? RoundDirect(d, v) : RoundTo(d, static_cast<float>(v));
  };
  auto finite = [&](const char* what, double v) -> Status {
    const bool affine = std::string_view(what) == "scale" || std::string_view(what) == "mean";
    const bool ok = d == DType::kF64 ? std::isfinite(v) : std::isfinite(param(v, affine));
    if (ok) return Status::Ok();
    return InvalidArgument(w + ": init." + what + " " + JsonPreview(json(v)) +
                           " is out of range for dtype " + DTypeName(d) +
                           " (it would be infinite)");
  };
  if (s.dist == Dist::kUniform) {
    SEEDSTORE_RETURN_IF_ERROR(finite("minval", s.minval));
    SEEDSTORE_RETURN_IF_ERROR(finite("maxval", s.maxval));
    const double range = d == DType::kF64
                             ? s.maxval - s.minval
                             : static_cast<double>(RoundTo(d, static_cast<float>(s.maxval)) -
                                                   RoundTo(d, static_cast<float>(s.minval)));
    if (!std::isfinite(d == DType::kF64 ? range : RoundTo(d, static_cast<float>(range))))
      return InvalidArgument(w + ": init.maxval - init.minval overflows dtype " + DTypeName(d));
  } else if (gaussian) {
    SEEDSTORE_RETURN_IF_ERROR(finite("scale", s.scale));
    SEEDSTORE_RETURN_IF_ERROR(finite("mean", s.mean));
  }
  // XLA-CPU flushes subnormals (gen/xla_math.h Flush); how its clip orders a flushed bound's
  // signed zero is not reproduced, so a truncation bound subnormal in a flushed dtype is refused.
  if (jax && s.dist == Dist::kTruncatedNormal && d != DType::kF16) {
    for (const auto& [what, v] : {std::pair{"lower", s.lower}, std::pair{"upper", s.upper}}) {
      const double b = d == DType::kF64 ? v : RoundTo(d, static_cast<float>(v));
      const double min_normal =
          d == DType::kF64 ? std::numeric_limits<double>::min() : std::numeric_limits<float>::min();
      if (b != 0.0 && std::fabs(b) < min_normal)
        return InvalidArgument(w + ": init." + what + " " + JsonPreview(json(v)) +
                               " is subnormal in " + DTypeName(d) +
                               ", which jax.random flushes to zero (use 0 or a normal value)");
    }
  }
  if (gaussian) {
    p.has_scale = s.scale != 1.0;
    p.has_mean = s.mean != 0.0;
  }
  // The jit flavour's folded forms (gen/sampler.h Flavour); bfloat16 ops are rounded one by
  // one under jit too, so only its constants follow the flavour.
  p.jit = jit && gaussian && d != DType::kBF16;
  // Threefry: XLA-CPU flushes subnormals to zero (gen/xla_math.h Flush) in every op, the
  // constant folder's included (measured: jit with subnormal parameters), so every value below
  // is flushed as XLA computes it; philox values are not.
  auto FD = [&](double v) { return jax ? Flush(v) : v; };
  auto F = [&](float v) { return jax ? Flush(v) : v; };
  if (d == DType::kF64) {
    p.scale_d = FD(s.scale);
    p.mean_d = FD(s.mean);
    const double sqrt2 = 1.4142135623730951;
    p.sqrt2_scale_d = FD(sqrt2 * p.scale_d);
    if (s.dist == Dist::kUniform) {
      p.lo_d = FD(s.minval);
      p.range_d = FD(FD(s.maxval) - p.lo_d);
      p.clip_hi_d = std::nextafter(s.maxval, -std::numeric_limits<double>::infinity());
    } else if (s.dist == Dist::kNormal) {
      p.lo_d = std::nextafter(-1.0, 0.0);
      p.range_d = 1.0 - p.lo_d;
    } else {
      // erf(bound / sqrt2) as XLA computes it: folded (jit) divides; at run time the
      // simplifier has turned the division into a multiply by 1 / sqrt2.
      auto erf_of = [&](double bound) {
        return FD(XlaErfF64(FD(jax && !jit ? bound * (1.0 / sqrt2) : bound / sqrt2)));
      };
      const double a = erf_of(s.lower), b = erf_of(s.upper);  // bounds are not subnormal
      p.lo_d = a;
      p.range_d = FD(b - a);
      p.clip_lo_d =
          jax ? FD(std::nextafter(s.lower, std::numeric_limits<double>::infinity())) : s.lower;
      p.clip_hi_d =
          jax ? FD(std::nextafter(s.upper, -std::numeric_limits<double>::infinity())) : s.upper;
    }
    return p;
  }
  // 16/32-bit floats. Threefry: every constant rounded in the dtype, as JAX computes.
  // Philox: float32 arithmetic, one rounding at the end.
  auto R = [&](float x) { return jax ? RoundTo(d, x) : x; };
  p.scale_f = jax ? F(param(s.scale, true)) : static_cast<float>(s.scale);
  p.mean_f = jax ? F(param(s.mean, true)) : static_cast<float>(s.mean);
  const float sqrt2 = R(1.41421353816986083984375f);
  p.sqrt2_scale_f = R(F(sqrt2 * p.scale_f));
  if (s.dist == Dist::kUniform) {
    p.lo_f = F(R(static_cast<float>(s.minval)));
    const float hi = F(R(static_cast<float>(s.maxval)));
    p.range_f = R(F(hi - p.lo_f));
    // Philox: largest dtype value strictly below maxval (rounding must not reach maxval).
    float top = RoundTo(d, static_cast<float>(s.maxval));
    if (static_cast<double>(top) >= s.maxval) top = NextAfterIn(d, top, false);
    p.clip_hi_f = top;
  } else if (s.dist == Dist::kNormal) {
    p.lo_f = NextAfterIn(d, -1.0f, true);
    p.range_f = R(1.0f - p.lo_f);
  } else {
    const float lower = R(static_cast<float>(s.lower)), upper = R(static_cast<float>(s.upper));
    // erf(bound / sqrt2) as XLA computes it (docs/JAX-EXACTNESS.md "truncated_normal bounds").
    // Eager (runtime bounds): the simplifier turns `/ sqrt2` into `* (1 / sqrt2)`, the
    // reciprocal rounded in the dtype (bfloat16: in float32, as XLA-CPU runs bf16 ops in f32),
    // then the runtime erf kernel. Jit (constant bounds): folded by the constant folder with
    // the C library's erff; float32 and bfloat16 fold the division itself, float16 the
    // multiply by its reciprocal (measured). Philox: float32 division and the kernel.
    const float recip = d == DType::kBF16 ? 1.0f / sqrt2 : R(1.0f / sqrt2);
    auto erf_of = [&](float bound) {  // bounds are not subnormal (refused above)
      if (!jax) return XlaErfF32(bound / sqrt2);
      if (jit)
        return R(F(FoldedErfF32(d == DType::kF16 ? R(F(bound * recip)) : R(F(bound / sqrt2)))));
      return R(F(XlaErfF32(R(F(bound * recip)))));
    };
    const float a = erf_of(lower), b = erf_of(upper);
    p.lo_f = a;
    p.range_f = R(F(b - a));
    // JAX clips to nextafter(bound) toward the interior, in the dtype: flushed, a bound of 0
    // clips to 0 in float32 and bfloat16.
    p.clip_lo_f = jax ? F(NextAfterIn(d, lower, true)) : lower;
    p.clip_hi_f = jax ? F(NextAfterIn(d, upper, false)) : upper;
  }
  // Under jit, `+ mean` whose constant rounds to zero in the dtype is dropped by XLA's
  // simplifier, keeping the -0 that adding +0 would make +0 (measured; a subnormal constant
  // stays and is flushed at run time).
  if (jit && p.has_mean && param(s.mean, true) == 0.0f) p.has_mean = false;
  return p;
}

uint64_t FingerprintSeed(std::string_view name, DType dtype, const std::vector<uint64_t>& shape) {
  std::string s = "seedstore-fp-v1";
  s.push_back('\0');
  s.append(name);
  s.push_back('\0');
  s.append(DTypeName(dtype));
  s.push_back('\0');
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s.push_back(',');
    s.append(std::to_string(shape[i]));
  }
  return XXH3_64bits(s.data(), s.size());
}

std::string FingerprintHex(const Fingerprint& f) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(f.lane0),
                static_cast<unsigned long long>(f.lane1));
  return buf;
}

Result<Fingerprint> ParseFingerprintHex(std::string_view s) {
  if (s.size() != 32)
    return InvalidArgument("fingerprint '" + std::string(s) + "': expected 32 hex digits");
  Fingerprint f;
  for (size_t i = 0; i < 32; ++i) {
    const char c = s[i];
    int v = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
    if (v < 0) return InvalidArgument("fingerprint '" + std::string(s) + "': not lowercase hex");
    uint64_t& lane = i < 16 ? f.lane0 : f.lane1;
    lane = (lane << 4) | static_cast<uint64_t>(v);
  }
  return f;
}

Region WholeTensor(const std::vector<uint64_t>& shape) {
  return WholeRegion(static_cast<int>(shape.size()), shape.data());
}

Result<Region> ParseBox(std::string_view text, const std::vector<uint64_t>& shape) {
  Region r = WholeTensor(shape);
  if (text.empty()) return r;
  std::vector<std::string> parts;
  std::string cur;
  for (char c : text) {
    if (c == ',') {
      parts.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur.push_back(c);
    }
  }
  parts.push_back(cur);
  if (parts.size() != shape.size())
    return InvalidArgument("box '" + std::string(text) + "': has " + std::to_string(parts.size()) +
                           " dims, tensor has " + std::to_string(shape.size()));
  for (size_t d = 0; d < parts.size(); ++d) {
    const std::string& p = parts[d];
    const auto colon = p.find(':');
    if (colon == std::string::npos)
      return InvalidArgument("box '" + std::string(text) + "': dim " + std::to_string(d) + " '" +
                             p + "' is not start:stop");
    auto num = [&](const std::string& s, uint64_t dflt, uint64_t* out) {
      if (s.empty()) {
        *out = dflt;
        return true;
      }
      for (char c : s)
        if (c < '0' || c > '9') return false;
      if (s.size() > 19) return false;
      *out = std::stoull(s);
      return true;
    };
    uint64_t a, b;
    if (!num(p.substr(0, colon), 0, &a) || !num(p.substr(colon + 1), shape[d], &b))
      return InvalidArgument("box '" + std::string(text) + "': dim " + std::to_string(d) + " '" +
                             p + "' is not start:stop with non-negative integers");
    if (a > b)
      return InvalidArgument("box '" + std::string(text) + "': dim " + std::to_string(d) + " " + p +
                             " is reversed (start " + std::to_string(a) + " > stop " +
                             std::to_string(b) + ")");
    if (b > shape[d])
      return InvalidArgument("box '" + std::string(text) + "': dim " + std::to_string(d) + " " + p +
                             " is outside the tensor (size " + std::to_string(shape[d]) + ")");
    r.start[d] = a;
    r.stop[d] = b;
  }
  return r;
}

}  // namespace seedstore
