// TensorSpecFromFlags and ParseInteger (store/tensor_flags.h, store/integer_text.h): gen's
// flags as a library call. Random flag sets give the spec that the same tensor written as a
// spec-file record gives (TensorSpecFromJson, another parser); every bad flag is refused with
// an error naming it; integers at and past their limits.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "store/integer_text.h"
#include "store/tensor_flags.h"

namespace seedstore {
namespace {

std::string Join(const std::vector<uint64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

void ExpectError(const TensorFlags& f, const std::string& needle) {
  auto t = TensorSpecFromFlags(f);
  ASSERT_FALSE(t.ok()) << "accepted, expected an error containing: " << needle;
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << t.status().ToString();
  EXPECT_NE(t.status().message().find(needle), std::string::npos)
      << t.status().message() << "\n  does not contain: " << needle;
}

TEST(TensorFlags, RandomFlagsGiveTheSpecOfTheSameRecord) {
  std::mt19937_64 g(20261204);
  const char* kFloat[] = {"float32", "bf16", "float16", "f64", "fp32", "half"};
  const char* kAny[] = {"uint8", "int32", "u64", "bool", "float32"};
  const uint64_t kDims[] = {0, 1, 2, 3, 7, 13, 127, 4096, 65537, (1ull << 32) + 1};
  for (int trial = 0; trial < 300; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    TensorFlags f;
    f.name = "w";  // (not "w" + to_string(..): GCC 12 warns falsely, -Wrestrict)
    f.name += std::to_string(g() % 1000);
    std::vector<uint64_t> shape(g() % 5);
    uint64_t elements = 1;
    for (auto& d : shape) {
      d = kDims[g() % 10];
      if (elements != 0 && d > (1ull << 40) / elements) d = 3;  // stay far below the byte limit
      elements *= d;
    }
    f.shape = Join(shape);
    nlohmann::json init;
    switch (g() % 5) {
      case 0:
        init = {{"dist", "normal"}, {"scale", 0.02}};
        break;
      case 1:
        init = {{"dist", "uniform"}, {"minval", -1.5}, {"maxval", 2.0}};
        break;
      case 2:
        init = {{"dist", "truncated_normal"}, {"lower", -1.0}, {"upper", 3.0}};
        break;
      case 3:
        init = {{"dist", "constant"}, {"value", 1}};
        break;
      default:
        init = {{"dist", "zeros"}};
    }
    const bool floating = init["dist"] != "constant" && init["dist"] != "zeros";
    f.dtype = floating ? kFloat[g() % 6] : kAny[g() % 5];
    f.init = init.dump();
    const bool philox = g() % 3 == 0;
    f.generator = philox ? "philox" : "threefry";
    if (!philox) f.flavour = g() % 2 ? "jit" : "eager";
    nlohmann::json rec = {{"name", f.name},
                          {"shape", shape},
                          {"dtype", f.dtype},
                          {"init", init},
                          {"generator", f.generator}};
    if (!philox) rec["flavour"] = f.flavour;
    if (g() % 2) {
      const uint32_t k0 = static_cast<uint32_t>(g()), k1 = static_cast<uint32_t>(g());
      f.key = std::to_string(k0) + "," + std::to_string(k1);
      rec["key"] = {{"raw", {k0, k1}}};
    } else {
      f.seed = static_cast<int64_t>(g());
      f.x64 = g() % 2;
      rec["key"] = {{"seed", f.seed}, {"x64", f.x64}};
    }
    auto from_flags = TensorSpecFromFlags(f);
    ASSERT_TRUE(from_flags.ok()) << from_flags.status().ToString();
    auto from_json = TensorSpecFromJson(rec, Generator::kThreefry, "rec");
    ASSERT_TRUE(from_json.ok()) << from_json.status().ToString() << " " << rec.dump();
    EXPECT_EQ(TensorSpecToJson(*from_flags), TensorSpecToJson(*from_json)) << rec.dump();
    EXPECT_EQ(from_flags->shape, shape);
  }
}

TEST(TensorFlags, DefaultsAreGensDefaults) {
  auto t = TensorSpecFromFlags(TensorFlags{});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->name, "tensor");
  EXPECT_TRUE(t->shape.empty());  // "" = a scalar
  EXPECT_EQ(t->dtype, DType::kF32);
  EXPECT_EQ(t->generator, Generator::kThreefry);
  EXPECT_EQ(t->flavour, kDefaultFlavour);
  EXPECT_EQ(t->init.dist, Dist::kNormal);
  EXPECT_EQ(t->key.kind, KeySpec::Kind::kSeed);
  EXPECT_EQ(t->key.seed, 0);
  EXPECT_FALSE(t->key.x64);
}

TEST(TensorFlags, ShapeBoundaries) {
  auto shape = [](const std::string& s) {
    TensorFlags f;
    f.shape = s;
    f.init = R"({"dist":"zeros"})";
    f.dtype = "uint8";
    return TensorSpecFromFlags(f);
  };
  auto one = shape("1");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->shape, std::vector<uint64_t>{1});
  auto empty = shape("0,9223372036854775807");  // no elements: any dim up to kMaxDim
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->shape, (std::vector<uint64_t>{0, kMaxDim}));
  auto big = shape("4294967311");  // a prime above 2^32
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->shape, std::vector<uint64_t>{4294967311ull});
  std::string sixteen = "1", seventeen;
  for (int i = 1; i < 16; ++i) sixteen += ",1";
  seventeen = sixteen + ",1";
  EXPECT_TRUE(shape(sixteen).ok());
  EXPECT_FALSE(shape(seventeen).ok());
  for (const char* bad :
       {"4,,2", ",", "4,", "-1", "+4", " 4", "0x10", "4.0", "18446744073709551616"}) {
    SCOPED_TRACE(bad);
    TensorFlags f;
    f.shape = bad;
    ExpectError(f, std::string("--shape '") + bad + "'");
  }
  TensorFlags f;
  f.shape = "9223372036854775808";  // above kMaxDim
  ExpectError(f, "--shape: dim 0 is 9223372036854775808");
  f.shape = "65536,65536,65536,65536";  // 2^64 elements
  ExpectError(f, "--shape");
}

TEST(TensorFlags, EachBadFlagIsNamed) {
  // One flag changed from the defaults -> the error it must give (a substring).
  struct Case {
    std::string TensorFlags::*flag;
    const char* value;
    std::string needle;
  };
  const Case cases[] = {
      {&TensorFlags::dtype, "float128", "--dtype"},
      {&TensorFlags::generator, "mersenne", "--generator"},
      {&TensorFlags::flavour, "lazy", "--flavour"},
      {&TensorFlags::init, "{\"dist\": ", "--init: malformed JSON"},
      {&TensorFlags::init, R"({"dist":"normal","minval":0})", "--init"},  // another dist's field
      {&TensorFlags::init, R"({"dist":"uniform","minval":2,"maxval":1})", "--init"},
      {&TensorFlags::dtype, "int32", "--init: distribution 'normal' does not support dtype int32"},
      {&TensorFlags::key, "1", "--key '1': expected K0,K1 (two uint32 words)"},
      {&TensorFlags::key, "1,2,3", "--key '1,2,3': expected K0,K1 (two uint32 words)"},
      {&TensorFlags::key, "1,2,", "--key '1,2,': expected K0,K1 (two uint32 words)"},
      {&TensorFlags::key, "4294967296,0",
       "--key '4294967296,0': 4294967296 is out of range (0..4294967295)"},
      {&TensorFlags::key, "0,-1", "--key '0,-1': -1 is out of range (0..4294967295)"},
      {&TensorFlags::key, ",", "--key ',': '' is not an integer (expected 0..4294967295)"},
      {&TensorFlags::key, "0,x", "--key '0,x': 'x' is not an integer (expected 0..4294967295)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.value);
    TensorFlags f;
    f.*c.flag = c.value;
    ExpectError(f, c.needle);
  }
  // The first bad flag in the documented order is the one reported.
  TensorFlags f;
  f.shape = "x";
  f.dtype = "nope";
  ExpectError(f, "--shape 'x'");
  f.shape = "9223372036854775808";
  ExpectError(f, "--dtype");
}

TEST(TensorFlags, KeyWordsAtTheirLimits) {
  TensorFlags f;
  f.key = "0,4294967295";
  auto t = TensorSpecFromFlags(f);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->key.kind, KeySpec::Kind::kRaw);
  EXPECT_EQ(t->key.raw.k0, 0u);
  EXPECT_EQ(t->key.raw.k1, 4294967295u);
}

TEST(IntegerText, RandomValuesRoundTripAndNeighboursOfTheLimitsAreRefused) {
  std::mt19937_64 g(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t v = static_cast<int64_t>(g()) >> (g() % 64);
    auto r = ParseInteger<int64_t>(std::to_string(v), "v");
    ASSERT_TRUE(r.ok()) << v;
    EXPECT_EQ(*r, v);
    const uint64_t u = g() >> (g() % 64);
    auto ru = ParseInteger<uint64_t>(std::to_string(u), "u");
    ASSERT_TRUE(ru.ok()) << u;
    EXPECT_EQ(*ru, u);
    // A random window [lo, hi]: the values just outside it are out of range.
    const int32_t lo = static_cast<int32_t>(g() % 2001) - 1000,
                  hi = lo + static_cast<int32_t>(g() % 100);
    EXPECT_TRUE(ParseInteger<int32_t>(std::to_string(lo), "w", lo, hi).ok());
    EXPECT_TRUE(ParseInteger<int32_t>(std::to_string(hi), "w", lo, hi).ok());
    auto below = ParseInteger<int32_t>(std::to_string(lo - 1), "w", lo, hi);
    ASSERT_FALSE(below.ok());
    EXPECT_EQ(below.status().message(), "w: " + std::to_string(lo - 1) + " is out of range (" +
                                            std::to_string(lo) + ".." + std::to_string(hi) + ")");
    EXPECT_FALSE(ParseInteger<int32_t>(std::to_string(hi + 1), "w", lo, hi).ok());
  }
}

TEST(IntegerText, Boundaries) {
  EXPECT_EQ(*ParseInteger<int64_t>("-9223372036854775808", "v"), INT64_MIN);
  EXPECT_EQ(*ParseInteger<uint64_t>("18446744073709551615", "v"), UINT64_MAX);
  EXPECT_EQ(*ParseInteger<uint8_t>("0", "v"), 0);
  EXPECT_EQ(*ParseInteger<int8_t>("-0", "v"), 0);
  auto over = ParseInteger<int64_t>("9223372036854775808", "--seed");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(
      over.status().message(),
      "--seed: 9223372036854775808 is out of range (-9223372036854775808..9223372036854775807)");
  auto neg = ParseInteger<uint64_t>("-1", "--n");
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.status().message(), "--n: -1 is out of range (0..18446744073709551615)");
  for (const char* bad : {"", "-", "+1", " 1", "1 ", "0x1", "1e3", "1.0", "--1", "1-"}) {
    auto r = ParseInteger<int32_t>(bad, "--x");
    ASSERT_FALSE(r.ok()) << "'" << bad << "'";
    EXPECT_EQ(r.status().message(), std::string("--x: '") + bad +
                                        "' is not an integer (expected -2147483648..2147483647)");
  }
  // Digits far beyond 64 bits: out of range, not wrapped; shown cut to 64 characters.
  const std::string huge(200, '9');
  auto h = ParseInteger<uint64_t>(huge, "v");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message(),
            "v: " + huge.substr(0, 61) + "... is out of range (0..18446744073709551615)");
  EXPECT_EQ(ShownValue(std::string(64, 'a')), std::string(64, 'a'));
  EXPECT_EQ(ShownValue(std::string(65, 'a')), std::string(61, 'a') + "...");
}

}  // namespace
}  // namespace seedstore
