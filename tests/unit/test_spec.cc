// Spec parsing, key derivation and sampler preparation (label unit).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "store/catalog.h"
#include "store/json_text.h"
#include "store/layout.h"
#include "store/lazy.h"
#include "store/spec.h"
#include "tests/vectors_test_util.h"

namespace seedstore {
namespace {

Status ParseError(const std::string& text) { return ModelSpec::Parse(text, "spec.json").status(); }

void ExpectError(const std::string& text, Code code, const std::string& needle) {
  const Status s = ParseError(text);
  EXPECT_EQ(s.code(), code) << text << " -> " << s.ToString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
}

std::string Tensor(const std::string& fields) {
  return R"({"seedstore": 1, "tensors": [{"name": "w", )" + fields + "}]}";
}

TEST(Spec, ParsesIssueExample) {
  const auto m = ModelSpec::Parse(
      R"({"seedstore": 1, "seed": 0, "generator": "threefry", "tensors": [{"name": "act", "shape": [32, 8192, 4096], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.05}, "key": {"seed": 43}}, {"name": "norm", "shape": [4096], "dtype": "float32", "init": {"dist": "ones"}}]})",
      "x");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->tensors.size(), 2u);
  EXPECT_EQ(m->tensors[0].NumElements(), 32ull * 8192 * 4096);
  EXPECT_EQ(TensorKey(0, m->tensors[0]), (Key{0, 43}));
  // Round trip through JSON.
  const auto again = ModelSpec::FromJson(m->ToJson(), "y");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ToJson(), m->ToJson());
}

TEST(Spec, BadInputNamesFieldAndValue) {
  ExpectError("{", Code::kInvalidArgument, "malformed JSON");
  ExpectError(R"({"tensors": [], "bogus": 1})", Code::kInvalidArgument, "unknown field 'bogus'");
  ExpectError(R"({"seedstore": 2, "tensors": []})", Code::kInvalidArgument, "version 2");
  ExpectError(Tensor(R"("shape": [2], "dtype": "float99", "init": {"dist": "zeros"})"),
              Code::kInvalidArgument, "unknown dtype 'float99'");
  ExpectError(Tensor(R"("shape": [2], "dtype": "float32", "init": {"dist": "cauchy"})"),
              Code::kInvalidArgument, "unknown distribution 'cauchy'");
  ExpectError(Tensor(R"("shape": [-2], "dtype": "float32", "init": {"dist": "zeros"})"),
              Code::kInvalidArgument, "shape[0]");
  ExpectError(
      Tensor(R"("shape": [4294967296, 4294967296], "dtype": "float32", "init": {"dist": "zeros"})"),
      Code::kInvalidArgument, "overflows");
  ExpectError(
      Tensor(
          R"("shape": [2], "dtype": "float32", "init": {"dist": "truncated_normal", "lower": 1, "upper": 1})"),
      Code::kInvalidArgument, "lower (1");
  ExpectError(
      Tensor(
          R"("shape": [2], "dtype": "float32", "init": {"dist": "uniform", "minval": 2, "maxval": 1})"),
      Code::kInvalidArgument, "minval (2");
  ExpectError(
      Tensor(R"("shape": [2], "dtype": "float32", "init": {"dist": "normal", "scale": "x"})"),
      Code::kInvalidArgument, "scale: expected a number");
  ExpectError(
      Tensor(R"("shape": [2], "dtype": "float32", "init": {"dist": "normal", "minval": 0})"),
      Code::kInvalidArgument, "unknown field 'minval'");
  ExpectError(Tensor(R"("shape": [2], "dtype": "float32", "init": {"dist": "bits"})"),
              Code::kInvalidArgument, "bits needs uint8..uint64");
  ExpectError(Tensor(R"("shape": [2], "dtype": "int32", "init": {"dist": "normal"})"),
              Code::kInvalidArgument, "needs a float dtype");
  ExpectError(
      Tensor(
          R"("shape": [2], "dtype": "float32", "init": {"dist": "zeros"}, "key": {"seed": 1, "raw": [1, 2]})"),
      Code::kInvalidArgument, "exactly one");
  ExpectError(
      Tensor(
          R"("shape": [2], "dtype": "float32", "init": {"dist": "zeros"}, "key": {"raw": [1, 4294967296]})"),
      Code::kInvalidArgument, "two uint32 words");
  ExpectError(
      Tensor(
          R"("shape": [2], "dtype": "float32", "init": {"dist": "zeros"}, "generator": "mt19937")"),
      Code::kInvalidArgument, "unknown generator 'mt19937'");
  ExpectError(Tensor(R"("shape": [2], "dtype": "float32", "init": {"dist": "constant"})"),
              Code::kInvalidArgument, "value: missing");
  ExpectError(
      R"({"tensors": [{"name": "a", "shape": [], "dtype": "f32", "init": {"dist": "zeros"}}, {"name": "a", "shape": [], "dtype": "f32", "init": {"dist": "zeros"}}]})",
      Code::kInvalidArgument, "duplicate tensor name 'a'");
  // A name with a NUL byte: HDF5 and C strings would cut it ("a\0b" stored as "a").
  ExpectError(
      R"({"seedstore": 1, "tensors": [{"name": "a\u0000b", "shape": [1], "dtype": "float32", "init": {"dist": "zeros"}}]})",
      Code::kInvalidArgument, "tensors[0].name: contains a NUL byte");
}

TEST(Spec, ConstantRangeChecked) {
  TensorSpec t;
  t.name = "c";
  t.dtype = DType::kU8;
  t.init.dist = Dist::kConstant;
  t.init.value = 256;
  EXPECT_EQ(PrepareSampler(t, Key{}).status().code(), Code::kInvalidArgument);
  t.init.value = 1.5;
  EXPECT_EQ(PrepareSampler(t, Key{}).status().code(), Code::kInvalidArgument);
  t.init.value = 255;
  ASSERT_TRUE(PrepareSampler(t, Key{}).ok());
  EXPECT_EQ(PrepareSampler(t, Key{})->const_bits, 255u);
  t.dtype = DType::kI16;
  t.init.value = -2;
  EXPECT_EQ(PrepareSampler(t, Key{})->const_bits, 0xFFFEu);
}

// A constant rounds once, straight from float64 to the dtype, as `jnp.full` does (values from
// JAX 0.10.2): through float32 first, the first two would land on a tie and round elsewhere.
TEST(Spec, ConstantsRoundOnceToTheDtype) {
  auto bits = [](DType d, double v) -> Result<uint64_t> {
    TensorSpec t;
    t.name = "c";
    t.dtype = d;
    t.init.dist = Dist::kConstant;
    t.init.value = v;
    SEEDSTORE_ASSIGN_OR_RETURN(SamplerParams p, PrepareSampler(t, Key{}));
    return p.const_bits;
  };
  EXPECT_EQ(*bits(DType::kBF16, -0.14697265811264515), 0xBE17u);
  EXPECT_EQ(*bits(DType::kF16, 65519.999), 0x7BFFu);  // float32 65520: a tie, to infinity
  EXPECT_EQ(bits(DType::kF16, 65520.0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(*bits(DType::kBF16, 1e-40), 0x0001u);  // subnormal, kept
  EXPECT_EQ(*bits(DType::kBF16, 3.3961e38), 0x7F7Fu);
  EXPECT_EQ(*bits(DType::kF16, -1e-8), 0x8000u);
  EXPECT_EQ(*bits(DType::kF32, 0.1), 0x3DCCCCCDu);
}

// XLA flushes subnormals to zero; a jax.random truncation bound subnormal in a flushed dtype
// (float32, bfloat16, float64) is refused, naming it; float16's subnormals, zero and philox
// tensors are accepted.
TEST(Spec, SubnormalTruncationBoundsRefusedWhereXlaFlushes) {
  auto prep = [](DType d, double lower, double upper, Generator g = Generator::kThreefry) {
    TensorSpec t;
    t.name = "w";
    t.dtype = d;
    t.generator = g;
    t.init.dist = Dist::kTruncatedNormal;
    t.init.lower = lower;
    t.init.upper = upper;
    return PrepareSampler(t, Key{}).status();
  };
  const Status a = prep(DType::kF32, -1e-40, 2.0);
  EXPECT_EQ(a.code(), Code::kInvalidArgument);
  EXPECT_NE(a.message().find("tensor 'w': init.lower -1e-40 is subnormal in float32"),
            std::string::npos)
      << a.message();
  const Status b = prep(DType::kBF16, -2.0, 3e-39);
  EXPECT_NE(b.message().find("init.upper 3e-39 is subnormal in bfloat16"), std::string::npos)
      << b.message();
  EXPECT_EQ(prep(DType::kF64, -1e-310, 1.0).code(), Code::kInvalidArgument);
  EXPECT_TRUE(prep(DType::kF64, -1e-300, 1.0).ok());
  EXPECT_TRUE(prep(DType::kF32, 0.0, 2e-38).ok());
  EXPECT_TRUE(prep(DType::kF16, -1e-6, 1.0).ok());
  EXPECT_TRUE(prep(DType::kF32, -1e-40, 2.0, Generator::kPhilox).ok());
}

// A parameter, or a uniform's range, that is infinite in the tensor's dtype is refused, naming
// it (it silently gave infinities, and -inf where jax.random gives NaN); the largest finite
// values are accepted. Integers float64 cannot hold exactly are refused, not rounded.
TEST(Spec, ParametersMustBeFiniteInTheDtype) {
  auto prep = [](DType d, InitSpec init) {
    TensorSpec t;
    t.name = "w";
    t.dtype = d;
    t.init = init;
    return PrepareSampler(t, Key{}).status();
  };
  // An InitSpec of `dist` with its two parameters (uniform: minval, maxval; normal: scale,
  // mean; constant: value).
  auto init = [](Dist dist, double a, double b = 0) {
    InitSpec s;
    s.dist = dist;
    (dist == Dist::kUniform ? s.minval : dist == Dist::kNormal ? s.scale : s.value) = a;
    (dist == Dist::kUniform ? s.maxval : s.mean) = b;
    return s;
  };
  auto uniform = [&](double lo, double hi) { return init(Dist::kUniform, lo, hi); };
  auto constant = [&](double v) { return init(Dist::kConstant, v); };
  auto normal = [&](double scale, double mean) { return init(Dist::kNormal, scale, mean); };
  struct Case {
    DType d;
    InitSpec init;
    const char* needle;  // nullptr: accepted
  };
  const Case cases[] = {
      {DType::kF32, uniform(-1e39, 1e39), "init.minval -1e+39 is out of range for dtype float32"},
      {DType::kF32, uniform(-3e38, 3e38), "init.maxval - init.minval overflows dtype float32"},
      {DType::kF32, uniform(-1.7e38, 1.7e38), nullptr},
      {DType::kF16, uniform(0, 1e6), "init.maxval 1000000.0 is out of range for dtype float16"},
      {DType::kF16, uniform(0, 65504), nullptr},
      {DType::kF16, uniform(-65504, 65504), "overflows dtype float16"},
      {DType::kBF16, uniform(0, 3.3e38), nullptr},
      {DType::kF64, uniform(-1e308, 1e308), "overflows dtype float64"},
      {DType::kF64, uniform(-1e39, 1e39), nullptr},
      {DType::kBF16, constant(1e40), "value 1e+40 is out of range for dtype bfloat16"},
      {DType::kF16, constant(70000), "value 70000.0 is out of range for dtype float16"},
      {DType::kF16, constant(65504), nullptr},
      {DType::kF64, constant(1e300), nullptr},
      {DType::kF16, normal(1e6, 0), "init.scale 1000000.0 is out of range for dtype float16"},
      {DType::kBF16, normal(1, 1e39), "init.mean 1e+39 is out of range for dtype bfloat16"},
      {DType::kF16, normal(1000, 0), nullptr},  // values may overflow, as in jax.random
  };
  for (const Case& c : cases) {
    const Status st = prep(c.d, c.init);
    if (!c.needle) {
      EXPECT_TRUE(st.ok()) << DTypeName(c.d) << ": " << st.ToString();
      continue;
    }
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << DTypeName(c.d) << " " << c.needle;
    EXPECT_NE(st.message().find(c.needle), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("tensor 'w'"), std::string::npos) << st.message();
  }
  // 2^53 + 1 would have been stored as 2^53; 2^62 is exact and kept.
  ExpectError(
      Tensor(
          R"("shape": [2], "dtype": "int64", "init": {"dist": "constant", "value": 9007199254740993})"),
      Code::kInvalidArgument, "init.value: 9007199254740993 is not exactly a float64");
  ExpectError(
      Tensor(
          R"("shape": [2], "dtype": "uint64", "init": {"dist": "constant", "value": 18446744073709551615})"),
      Code::kInvalidArgument, "18446744073709551615 is not exactly a float64");
  auto exact = ModelSpec::Parse(
      Tensor(
          R"("shape": [2], "dtype": "int64", "init": {"dist": "constant", "value": -4611686018427387904})"),
      "spec.json");
  ASSERT_TRUE(exact.ok()) << exact.status().ToString();
  auto p = PrepareSampler(exact->tensors[0], Key{});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->const_bits, static_cast<uint64_t>(int64_t{-4611686018427387904}));
}

// Derived keys are stable forever: pinned values.
TEST(Spec, DerivedKeyIsPinned) {
  TensorSpec t;
  t.name = "model.layers.0.mlp.up_proj.weight";
  const Key k = TensorKey(0, t);
  const Key k2 = TensorKey(1, t);
  EXPECT_NE(k, k2);
  t.name = "model.layers.1.mlp.up_proj.weight";
  EXPECT_NE(TensorKey(0, t), k);
  // Pinned (computed once; a change here breaks every stored derived key).
  t.name = "w";
  const Key w = TensorKey(0, t);
  EXPECT_EQ(w.k0, 0x41b61278u) << std::hex << w.k0 << " " << w.k1;
  EXPECT_EQ(w.k1, 0x152bfdd2u) << std::hex << w.k0 << " " << w.k1;
}

TEST(Spec, FingerprintHexRoundTrip) {
  const Fingerprint f{0x0123456789abcdefull, 0xfedcba9876543210ull};
  EXPECT_EQ(FingerprintHex(f), "0123456789abcdeffedcba9876543210");
  auto g = ParseFingerprintHex(FingerprintHex(f));
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, f);
  EXPECT_FALSE(ParseFingerprintHex("xyz").ok());
}

TEST(Spec, BoxParsing) {
  const std::vector<uint64_t> shape = {32, 8192, 4096};
  auto r = ParseBox("0:2,100:104,0:8", shape);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->Count(), 2u * 4 * 8);
  EXPECT_TRUE(ParseBox(":,:,:", shape).ok());
  EXPECT_EQ(ParseBox(":,:,:", shape)->Count(), 32ull * 8192 * 4096);
  EXPECT_NE(ParseBox("0:2,100:104", shape).status().message().find("has 2 dims"),
            std::string::npos);
  EXPECT_NE(ParseBox("0:33,:,:", shape).status().message().find("outside the tensor"),
            std::string::npos);
  EXPECT_NE(ParseBox("a:b,:,:", shape).status().message().find("start:stop"), std::string::npos);
  EXPECT_EQ(ParseBox("5:5,:,:", shape)->Count(), 0u);  // empty box is fine
  EXPECT_NE(ParseBox("5:3,:,:", shape)
                .status()
                .message()
                .find("dim 0 5:3 is reversed (start 5 > stop 3)"),
            std::string::npos)
      << ParseBox("5:3,:,:", shape).status().ToString();
}

// A scalar (0-d) tensor has one element, index 0.
TEST(Spec, ScalarTensor) {
  TensorSpec t;
  t.name = "s";
  t.dtype = DType::kF32;
  t.init.dist = Dist::kNormal;
  t.key.kind = KeySpec::Kind::kSeed;
  auto l = LazyTensor::Resolve(t, 0);
  ASSERT_TRUE(l.ok());
  float v = 0;
  ASSERT_TRUE(l->Materialize(WholeTensor({}), &v).ok());
  // jax.random.normal(PRNGKey(0), ()) == element 0 of normal(PRNGKey(0), (1,)) = 1.6226422
  EXPECT_EQ(v, 1.6226422f);
}

}  // namespace
}  // namespace seedstore

namespace seedstore {
namespace {

// Philox bfloat16/float16 normals are an f32 sample rounded once: full resolution. JAX's
// bfloat16 normal (threefry) draws 8 bits: at most 128 distinct values.
TEST(Spec, PhiloxHalfPrecisionHasFullResolution) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    size_t distinct[2];
    for (Generator g : {Generator::kThreefry, Generator::kPhilox}) {
      TensorSpec t;
      t.name = "w";
      t.shape = {200000};
      t.dtype = dt;
      t.generator = g;
      t.init.dist = Dist::kNormal;
      auto l = LazyTensor::Resolve(t, 0);
      ASSERT_TRUE(l.ok());
      std::vector<uint16_t> v(t.shape[0]);
      ASSERT_TRUE(l->Materialize(WholeTensor(t.shape), v.data()).ok());
      std::sort(v.begin(), v.end());
      distinct[g == Generator::kPhilox] = std::unique(v.begin(), v.end()) - v.begin();
    }
    if (dt == DType::kBF16) {
      EXPECT_LE(distinct[0], 128u);
    }
    EXPECT_GT(distinct[1], dt == DType::kBF16 ? 2000u : 10000u) << DTypeName(dt);
    EXPECT_GT(distinct[1], 8 * distinct[0]) << DTypeName(dt);
  }
}

// JSON nested 100,000 deep (200 KB) would crash a reader whose error message printed the
// value with nlohmann's dump, which recurses once per level. Every document is refused
// before parsing (store/json_text.h) -- specs, --init values, layouts, safetensors headers --
// and values shown in messages are bounded previews.
TEST(Spec, DeeplyNestedJsonIsRefusedNotACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ExpectError(deep, Code::kInvalidArgument, "spec.json: JSON nested deeper than 64 levels");
  ExpectError(Tensor(R"("shape": [2], "dtype": "float32", "init": )" + deep),
              Code::kInvalidArgument, "nested deeper than 64 levels");
  const Status l = Layout::Parse(R"({"mesh": )" + deep + "}", "l.json").status();
  EXPECT_EQ(l.code(), Code::kInvalidArgument) << l.ToString();
  EXPECT_NE(l.message().find("l.json: layout: JSON nested deeper than 64 levels"),
            std::string::npos)
      << l.message();
  // 64 levels parse; brackets inside strings do not count.
  std::string err;
  EXPECT_FALSE(ParseJson(std::string(64, '[') + std::string(64, ']'), &err).is_discarded()) << err;
  EXPECT_TRUE(ParseJson(std::string(65, '[') + std::string(65, ']'), &err).is_discarded());
  EXPECT_FALSE(ParseJson("[\"" + std::string(1000, '[') + "\\\"{\"]", &err).is_discarded()) << err;
  EXPECT_TRUE(ParseJson("[1,", &err).is_discarded());
  EXPECT_EQ(err.rfind("malformed JSON: ", 0), 0u) << err;
  // A NUL byte is malformed wherever it is (nlohmann's parser would stop there and ignore the
  // rest); the parser's quotes of the input show bytes outside printable ASCII escaped.
  EXPECT_TRUE(ParseJson(std::string("{}\0 {{{ garbage", 15), &err).is_discarded());
  EXPECT_EQ(err, "malformed JSON: a NUL byte at offset 2");
  EXPECT_TRUE(ParseJson("[\"\xff\"]", &err).is_discarded());
  EXPECT_NE(err.find("\\xFF"), std::string::npos) << err;
  EXPECT_EQ(err.find('\xff'), std::string::npos) << err;
  // A value deep and wide, where a message shows it: a bounded preview.
  nlohmann::json v = nlohmann::json::array();
  for (int i = 0; i < 50; ++i) v = nlohmann::json::array({v, std::string(100, 'x')});
  const std::string p = JsonPreview(v);
  EXPECT_LE(p.size(), 60u);
  EXPECT_EQ(p.substr(p.size() - 3), "...");
  EXPECT_EQ(JsonPreview(nlohmann::json{{"a", 1}}), R"({"a":1})");
  EXPECT_EQ(JsonPreview(nlohmann::json::array({nlohmann::json::array(
                {nlohmann::json::array({nlohmann::json::array({nlohmann::json::array({1})})})})})),
            "[[[[[...]]]]]");
  const Status bad =
      ModelSpec::Parse(Tensor(R"("shape": [2], "dtype": "float32", "init": )" + v.dump()),
                       "spec.json")
          .status();
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_LT(bad.message().size(), 200u) << bad.message();
}

// Names in text tables: control bytes escaped (a tensor named "a\nidentical  b" cannot forge a
// line of a diff or inspect table), UTF-8 kept and counted by code points.
TEST(Text, TableNamesShowControlBytesEscaped) {
  EXPECT_EQ(ShownText("plain.w"), "plain.w");
  EXPECT_EQ(ShownText("a\nidentical  b"), "a\\nidentical  b");
  EXPECT_EQ(ShownText(std::string("t\tr\rz\x01\x7f\0", 8)), "t\\tr\\rz\\x01\\x7F\\x00");
  EXPECT_EQ(ShownText("gr\xc3\xb6\xc3\x9f"
                      "e"),
            "gr\xc3\xb6\xc3\x9f"
            "e");
  EXPECT_EQ(TextWidth("gr\xc3\xb6\xc3\x9f"
                      "e"),
            5u);
  EXPECT_EQ(TextWidth("a\nb"), 4u);
  EXPECT_EQ(PadRight("a\nb", 6), "a\\nb  ");
  EXPECT_EQ(PadRight("longer", 3), "longer");
}

// JSON leaves a repeated key's meaning open, and nlohmann keeps the last one silently: a spec
// with "seed" twice, or a tensor with two "dtype"s, would be read as whichever came last. Every
// document seedstore reads is refused instead, naming the key and the object (a JSON pointer).
TEST(Spec, ARepeatedKeyIsRefusedNamingItAndWhere) {
  ExpectError(R"({"seedstore": 1, "seed": 1, "seed": 2, "tensors": []})", Code::kInvalidArgument,
              "spec.json: malformed JSON: duplicate key \"seed\" in the top-level object");
  ExpectError(
      R"({"seedstore": 1, "tensors": [{"name": "a", "shape": [2], "dtype": "float32", "init": {"dist": "ones"}},
                 {"name": "w", "shape": [2], "dtype": "float32", "dtype": "bfloat16", "init": {"dist": "ones"}}]})",
      Code::kInvalidArgument, "duplicate key \"dtype\" in the object at /tensors/1");
  ExpectError(
      Tensor(
          R"("shape": [2], "dtype": "float32", "init": {"dist": "normal", "scale": 1, "scale": 2})"),
      Code::kInvalidArgument, "duplicate key \"scale\" in the object at /tensors/0/init");
  const Status l =
      Layout::Parse(R"({"mesh": {"dp": 2, "dp": 4}, "placements": {}})", "l.json").status();
  EXPECT_EQ(l.code(), Code::kInvalidArgument) << l.ToString();
  EXPECT_NE(l.message().find("duplicate key \"dp\" in the object at /mesh"), std::string::npos)
      << l.message();
  std::string err;
  // Pointers escape '~' and '/'; array positions count every kind of element before them.
  EXPECT_TRUE(ParseJson(R"({"a/b~": [1, [2], {"x": 0}, "s", null, {"k": 1, "k": 1}]})", &err)
                  .is_discarded());
  EXPECT_EQ(err, "malformed JSON: duplicate key \"k\" in the object at /a~1b~0/5");
  // The same key in different objects, or nested at another level, is no repeat.
  EXPECT_FALSE(ParseJson(R"({"k": {"k": 1}, "j": [{"k": 1}, {"k": 2}]})", &err).is_discarded())
      << err;
  EXPECT_FALSE(ParseJson(R"([{"a": 1}, {"a": 1}])", &err).is_discarded()) << err;
  // A closed object's record of its keys is reused for the next, never carried over: siblings
  // of a large object (more than 16 keys) may hold its keys once, and a repeat is still found.
  std::string big = "{";
  for (int i = 0; i < 20; ++i) big += (i ? ",\"k" : "\"k") + std::to_string(i) + "\": 1";
  big += "}";
  EXPECT_FALSE(ParseJson("[" + big + R"(, {"k0": 1, "k19": 2}, [{"k5": 0}], )" + big + "]", &err)
                   .is_discarded())
      << err;
  EXPECT_TRUE(ParseJson("[" + big + R"(, {"k3": 1, "k4": 1, "k3": 2}])", &err).is_discarded());
  EXPECT_EQ(err, "malformed JSON: duplicate key \"k3\" in the object at /1");
  // Keys that differ only after an escape are different keys; escaped spellings of one key are one.
  EXPECT_FALSE(ParseJson(R"({"a": 1, "A": 1, "a\u0000": 1})", &err).is_discarded()) << err;
  EXPECT_TRUE(ParseJson(R"({"a": 1, "\u0061": 2})", &err).is_discarded());
  EXPECT_EQ(err, "malformed JSON: duplicate key \"a\" in the top-level object");
  // Objects of many keys (searched in a set past 16): a repeat found wherever it is.
  for (int at : {0, 15, 16, 17, 999}) {
    std::string many = "{";
    for (int k = 0; k < 1000; ++k) many += "\"k" + std::to_string(k) + "\": 0, ";
    many += "\"k" + std::to_string(at) + "\": 1}";
    EXPECT_TRUE(ParseJson(many, &err).is_discarded()) << at;
    EXPECT_EQ(err, "malformed JSON: duplicate key \"k" + std::to_string(at) +
                       "\" in the top-level object");
    many.replace(many.rfind("\"k"), 1, "\"x");
    EXPECT_FALSE(ParseJson(many, &err).is_discarded()) << at << ": " << err;
  }
}

// A sink takes the elements of the arrays at its path as they are parsed, in document order,
// and the document comes back without them; everything else is kept, and refusals stand.
TEST(ParseJson, ElementSinkTakesTheArraysElementsAtItsPath) {
  std::vector<std::pair<size_t, nlohmann::json>> got;
  JsonElementSink sink{{"t", "*", "p"},
                       [&](size_t k, nlohmann::json&& e) { got.emplace_back(k, std::move(e)); }};
  std::string err;
  const std::string text =
      R"({"p": [9], "t": [{"p": [1, {"a": [2]}, [3], "s"], "n": "x"}, 5, {"q": [4], "p": []},)"
      R"( {"p": {"p": [6]}}, {"n": "y", "p": [null, 7]}], "z": {"t": [{"p": [8]}]}})";
  const nlohmann::json j = ParseJson(text, &err, &sink);
  ASSERT_FALSE(j.is_discarded()) << err;
  const std::vector<std::pair<size_t, nlohmann::json>> want = {
      {0, 1}, {1, {{"a", {2}}}}, {2, {3}}, {3, "s"}, {0, nullptr}, {1, 7}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(j, nlohmann::json::parse(
                   R"({"p": [9], "t": [{"p": [], "n": "x"}, 5, {"q": [4], "p": []},)"
                   R"( {"p": {"p": [6]}}, {"n": "y", "p": []}], "z": {"t": [{"p": [8]}]}})"));
  // Every element of a top-level array; a repeated key inside a taken element still refuses
  // the document (after the elements before it were taken).
  got.clear();
  sink.path = {};
  EXPECT_FALSE(ParseJson("[1, [2], {}]", &err, &sink).is_discarded()) << err;
  EXPECT_EQ(got.size(), 3u);
  got.clear();
  sink.path = {"t"};
  EXPECT_TRUE(
      ParseJson(R"({"t": [{"a": 1}, {"a": 1, "a": 2}, {"b": 3}]})", &err, &sink).is_discarded());
  EXPECT_EQ(err, "malformed JSON: duplicate key \"a\" in the object at /t/1");
  EXPECT_TRUE(ParseJson(R"({"t": [{"a": 1}, )", &err, &sink).is_discarded());
  EXPECT_NE(err.find("malformed JSON"), std::string::npos) << err;
}

}  // namespace
}  // namespace seedstore

namespace seedstore {
namespace {

// A spec built as JSON in code holds its integers as signed; a shape of non-negative signed
// integers is the same spec as the one parsed from text, and a negative extent is named.
TEST(Spec, ShapeBuiltInCodeWithSignedIntegers) {
  nlohmann::json t = {{"name", "w"},
                      {"shape", {int64_t{3}, int64_t{5}}},
                      {"dtype", "float32"},
                      {"init", {{"dist", "normal"}}}};
  nlohmann::json j = {{"seedstore", 1}, {"seed", 2}, {"tensors", {t}}};
  auto a = ModelSpec::FromJson(j, "<code>");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b =
      ModelSpec::Parse(R"({"seedstore": 1, "seed": 2, "tensors": [{"name": "w", "shape": [3, 5],
      "dtype": "float32", "init": {"dist": "normal"}}]})",
                       "<text>");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->tensors[0].shape, b->tensors[0].shape);
  j["tensors"][0]["shape"][1] = int64_t{-5};
  auto bad = ModelSpec::FromJson(j, "<code>");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("shape[1]: expected a non-negative integer, got -5"),
            std::string::npos)
      << bad.status().ToString();
}

TEST(Flavour, ParsedDefaultedAndWritten) {
  const auto m = ModelSpec::Parse(
      R"({"flavour": "eager", "tensors": [
           {"name": "a", "shape": [2], "dtype": "float32", "init": {"dist": "normal"}},
           {"name": "b", "shape": [2], "dtype": "float32", "init": {"dist": "normal"}, "flavour": "jit"},
           {"name": "c", "shape": [2], "dtype": "float32", "init": {"dist": "normal"}, "generator": "philox"}]})",
      "x");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->tensors[0].flavour, Flavour::kEager);  // the model's
  EXPECT_EQ(m->tensors[1].flavour, Flavour::kJit);    // its own
  // Written for threefry tensors only; a round trip keeps it.
  EXPECT_EQ(TensorSpecToJson(m->tensors[0]).at("flavour"), "eager");
  EXPECT_FALSE(TensorSpecToJson(m->tensors[2]).contains("flavour"));
  const auto again = ModelSpec::FromJson(m->ToJson(), "y");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->ToJson(), m->ToJson());
  // A spec without one: jit. A stored record without one (default_flavour kEager): eager.
  const auto rec = nlohmann::json::parse(
      R"({"name": "w", "shape": [2], "dtype": "float32", "init": {"dist": "normal"}})");
  ASSERT_TRUE(TensorSpecFromJson(rec, Generator::kThreefry, "t").ok());
  EXPECT_EQ(kDefaultFlavour, Flavour::kJit);
  EXPECT_EQ(TensorSpecFromJson(rec, Generator::kThreefry, "t")->flavour, Flavour::kJit);
  EXPECT_EQ(TensorSpecFromJson(rec, Generator::kThreefry, "t", Flavour::kEager)->flavour,
            Flavour::kEager);
}

TEST(Flavour, BadInputNamesField) {
  ExpectError(
      Tensor(R"("shape": [2], "dtype": "float32", "init": {"dist": "normal"}, "flavour": "xla")"),
      Code::kInvalidArgument,
      "tensors[0] ('w').flavour: unknown flavour 'xla' (expected jit or eager)");
  ExpectError(
      Tensor(R"("shape": [2], "dtype": "float32", "init": {"dist": "normal"}, "flavour": 1)"),
      Code::kInvalidArgument, "flavour: expected a string");
  ExpectError(
      Tensor(
          R"("shape": [2], "dtype": "float32", "init": {"dist": "normal"}, "generator": "philox", "flavour": "jit")"),
      Code::kInvalidArgument, "only the threefry generator has flavours");
  ExpectError(R"({"flavour": "fast", "tensors": []})", Code::kInvalidArgument,
              "spec.json.flavour: unknown flavour 'fast'");
}

/// Element bits of a threefry float32 tensor, from the sampler directly.
std::vector<uint32_t> F32Bits(const std::string& init, Flavour f, int64_t seed, int n) {
  TensorSpec t;
  t.name = "t";
  t.shape = {static_cast<uint64_t>(n)};
  t.flavour = f;
  t.init = *InitSpec::FromJson(nlohmann::json::parse(init), "init");
  t.key.kind = KeySpec::Kind::kSeed;
  t.key.seed = seed;
  const auto p = PrepareSampler(t, TensorKey(0, t));
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  std::vector<uint32_t> out;
  for (int i = 0; i < n; ++i) {
    const float v =
        p->dist == Dist::kNormal
            ? SampleElement<Generator::kThreefry, Dist::kNormal, DType::kF32>(*p, i)
            : SampleElement<Generator::kThreefry, Dist::kTruncatedNormal, DType::kF32>(*p, i);
    out.push_back(FloatBits(v));
  }
  return out;
}

// Known answers from JAX 0.10.2 on CPU (tests/kat/vectors/jax_flavours.json; tests/py/
// test_jax_flavours.py checks such values live): jax.random.normal(key(1), (4,), float32) * 0.02
// and jax.random.truncated_normal(key(77), -1.5, 1.7, (4,), float32), op by op and under jax.jit.
TEST(Flavour, KnownAnswersOfBothFlavours) {
  const nlohmann::json v = testutil::LoadVectorFile("tests/kat/vectors/jax_flavours.json");
  ASSERT_FALSE(v.is_null());
  ASSERT_EQ(v["samples"].size(), 4u);
  for (const auto& e : v["samples"]) {
    ASSERT_EQ(e["dtype"], "float32");
    const Flavour f = e["flavour"] == "jit" ? Flavour::kJit : Flavour::kEager;
    const std::vector<uint32_t> got =
        F32Bits(e["init"].dump(), f, e["seed"].get<int64_t>(), static_cast<int>(e["bits"].size()));
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], testutil::HexValue(e["bits"][i])) << e["name"] << " element " << i;
  }
}

}  // namespace
}  // namespace seedstore
