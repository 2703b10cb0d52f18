// Init specs and tensor records: what a lazy tensor is, parsed from the JSON spec format
// (docs/CLI.md "Spec files"; docs/FORMAT.md "Init spec"). Pure data plus validation.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "gen/fingerprint.h"
#include "gen/region.h"
#include "gen/sampler.h"
#include "store/status.h"

namespace seedstore {

/// Canonical dtype name ("float32", "bfloat16", ...).
const char* DTypeName(DType t);
/// Every canonical dtype name, comma-separated ("float32, float64, bfloat16, ..., bool").
std::string DTypeNameList();
/// Parses a dtype name; accepts canonical names and the aliases f32/fp32, f64/fp64, bf16,
/// f16/fp16/half, u8..u64, i8..i64. Error names the value.
Result<DType> ParseDType(std::string_view s);
const char* DistName(Dist d);
Result<Dist> ParseDist(std::string_view s);
const char* GeneratorName(Generator g);
Result<Generator> ParseGenerator(std::string_view s);

/// The flavour of a spec that does not name one: kJit, what `jax.jit(model.init)` computes --
/// JAX users initialize under jit (docs/JAX-EXACTNESS.md "Flavours"). A stored record without
/// a "flavour" field is kEager (what every store written before the field existed holds).
constexpr Flavour kDefaultFlavour = Flavour::kJit;
/// "eager" or "jit".
const char* FlavourName(Flavour f);
/// Parses "eager" or "jit"; the error names the value.
Result<Flavour> ParseFlavour(std::string_view s);

/// A distribution with its parameters, as the user wrote them (defaults as in jax.random).
struct InitSpec {
  Dist dist = Dist::kZeros;
  double minval = 0.0, maxval = 1.0;  // uniform
  double lower = -2.0, upper = 2.0;   // truncated_normal
  double scale = 1.0, mean = 0.0;     // normal, truncated_normal: x * scale + mean
  double value = 0.0;                 // constant
  /// Parses {"dist": "normal", "scale": 0.05, ...}; rejects unknown fields, parameters that do
  /// not belong to the distribution, non-finite values and lower >= upper / minval >= maxval.
  /// `where` prefixes messages (e.g. "tensors[3].init").
  static Result<InitSpec> FromJson(const nlohmann::json& j, const std::string& where);
  nlohmann::json ToJson() const;
};

/// How a tensor's key is obtained.
struct KeySpec {
  enum class Kind { kDerived, kSeed, kRaw } kind = Kind::kDerived;
  int64_t seed = 0;  // kSeed: jax.random.key(seed) in JAX's default 32-bit mode
  bool x64 = false;  // kSeed: jax_enable_x64 semantics (64-bit seeds)
  Key raw;           // kRaw: the two key words
};

/// A lazily described tensor: name, global shape, dtype and init rule.
struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;
  DType dtype = DType::kF32;
  Generator generator = Generator::kThreefry;
  /// Threefry only (philox has one form): which compiled form of the JAX init to reproduce.
  Flavour flavour = kDefaultFlavour;
  InitSpec init;
  KeySpec key;
  uint64_t NumElements() const;
};

/// A model: root seed, default generator and tensor specs (the spec file).
struct ModelSpec {
  uint64_t seed = 0;
  Generator generator = Generator::kThreefry;
  Flavour flavour = kDefaultFlavour;  // of tensors that do not name theirs
  std::vector<TensorSpec> tensors;
  /// Parses the spec JSON {"seedstore": 1, "seed": 0, "generator": "threefry", "flavour": "jit",
  /// "tensors": [...]}. `origin` (a file name) prefixes error messages.
  static Result<ModelSpec> Parse(std::string_view text, std::string_view origin);
  static Result<ModelSpec> FromJson(const nlohmann::json& j, std::string_view origin);
  static Result<ModelSpec> Load(const std::string& path);
  nlohmann::json ToJson() const;
  /// Index of the tensor with this name, or -1.
  int Find(std::string_view name) const;
};

/// Parses one tensor record (as in "tensors": [...]); `where` prefixes messages. Tensors
/// without a "generator" take `default_generator`; threefry tensors without a "flavour" take
/// `default_flavour` (a spec's: kDefaultFlavour; a stored record's: kEager). A "flavour" on a
/// philox tensor is an error.
Result<TensorSpec> TensorSpecFromJson(const nlohmann::json& j, Generator default_generator,
                                      const std::string& where,
                                      Flavour default_flavour = kDefaultFlavour);
/// The canonical record; threefry tensors always carry their "flavour".
nlohmann::json TensorSpecToJson(const TensorSpec& t);

/// The largest dim a shape may have (also when the tensor has no elements): 2^63 - 1.
constexpr uint64_t kMaxDim = (uint64_t{1} << 63) - 1;

/// The one check of a shape, wherever one is read (specs, --shape, stores, safetensors
/// headers, piece records, distributed indexes, buffers): at most kMaxRank dims, every dim at
/// most kMaxDim ("<where>: dim 1 is 9223372036854775808, more than the limit 2^63 - 1"), and a
/// tensor with elements holds at most 2^62 bytes of `dtype`. `where` names the tensor and field.
Status ValidateShape(const std::vector<uint64_t>& shape, DType dtype, const std::string& where);

/// The tensor's key. Derived keys (stable forever, docs/FORMAT.md "Key derivation"):
///   root = jax.random.key(root_seed) with 64-bit seed semantics ([seed >> 32, seed & ~0u]);
///   h = XXH3_64bits(name bytes, seed 0);
///   key = fold_in(fold_in(root, h >> 32), h & 0xffffffff).
Key TensorKey(uint64_t root_seed, const TensorSpec& t);

/// Resolves a tensor spec into sampler parameters (constants rounded in the dtype).
/// Errors: (dist, dtype) pair unsupported, constant out of the dtype's range.
Result<SamplerParams> PrepareSampler(const TensorSpec& t, Key key);

/// Per-tensor fingerprint seed: XXH3_64bits of "seedstore-fp-v1" NUL name NUL dtype-name NUL
/// dims as decimal joined by ',' (docs/FORMAT.md "Fingerprint").
uint64_t FingerprintSeed(std::string_view name, DType dtype, const std::vector<uint64_t>& shape);

/// 32 lowercase hex digits: lane 0 then lane 1, each 16-digit big-endian.
std::string FingerprintHex(const Fingerprint& f);
Result<Fingerprint> ParseFingerprintHex(std::string_view s);

/// A Region covering the whole tensor.
Region WholeTensor(const std::vector<uint64_t>& shape);
/// Parses "0:2,100:104,0:8" (one start:stop per dim, ':' alone = whole dim) into a box.
Result<Region> ParseBox(std::string_view text, const std::vector<uint64_t>& shape);

}  // namespace seedstore
