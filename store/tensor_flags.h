// One lazily described tensor from the text of `seedstore gen`'s flags (--shape, --dtype,
// --init, --seed/--key, --x64, --generator, --flavour, --name): the parsing and validation,
// with every error naming the flag it is about.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "store/spec.h"

namespace seedstore {

/// The flags' values as the user typed them (defaults: gen's).
struct TensorFlags {
  std::string name = "tensor";
  std::string shape;                          // "32,8192,4096"; "" = a scalar
  std::string dtype = "float32";              // ParseDType's names and aliases
  std::string init = R"({"dist":"normal"})";  // InitSpec JSON
  std::string generator = "threefry";
  std::string flavour = FlavourName(kDefaultFlavour);
  std::string key;   // "K0,K1": raw key words (jax.random.key_data); "" = by seed
  int64_t seed = 0;  // jax.random.key(seed), when `key` is ""
  bool x64 = false;  // the seed with jax_enable_x64 semantics
};

/// Parses a shape "d0,d1,..." ("" = a scalar, []): each dim by ParseInteger<uint64_t>. Error
/// (kInvalidArgument): "--shape '<text>': '<dim>' is not an integer (expected
/// 0..18446744073709551615)" (an empty dim, as in "4,,2", is one). The dims are not
/// validated (ValidateShape does that with the dtype).
Result<std::vector<uint64_t>> ParseShapeFlag(const std::string& text);

/// The TensorSpec the flags describe: key kSeed (seed, x64) or, when `key` is given, kRaw.
/// Checks in this order, the first failure returned, naming its flag (kInvalidArgument):
///   --shape parses (ParseShapeFlag); --dtype ("--dtype: <ParseDType's error>"); the shape
///   with that dtype (ValidateShape: "--shape: dim 1 is ..."); --generator; --flavour;
///   --init (malformed JSON "--init: malformed JSON: ...", InitSpec::FromJson's field errors
///   "--init...", "--init: distribution 'D' does not support dtype T"); --key ("--key 'x':
///   expected K0,K1 (two uint32 words)", or "--key 'x': 'w' is not an integer ..." / "... is
///   out of range (0..4294967295)").
Result<TensorSpec> TensorSpecFromFlags(const TensorFlags& flags);

}  // namespace seedstore
