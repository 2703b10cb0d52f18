// The CLI's reports: verify of safetensors points to diff, the built-in self-test passes,
// inspect aligns non-ASCII names.
#include "tests/cli/cli_test_util.h"

namespace seedstore {
namespace {

using namespace clitest;  // NOLINT

// `verify` of safetensors (a file or an index): not "corrupt" -- the input is valid, it just
// records no checksums or fingerprints -- but UNSUPPORTED (exit 6), pointing to `diff`.
TEST(Cli, VerifyOfSafetensorsPointsToDiff) {
  const std::string spec = Write("spec.json", kSpec);
  const std::string st = TempDir() + "/verify.safetensors";
  ASSERT_EQ(Exec("export " + spec + " -o " + st).code, 0);
  const std::string index =
      Write("verify.safetensors.index.json", R"({"weight_map": {"norm": "verify.safetensors"}})");
  for (const std::string& source : {st, index}) {
    for (const std::string& flags : {std::string(), std::string(" --json")}) {
      const Proc v = Exec("verify " + source + flags);
      EXPECT_EQ(v.code, 6) << v.err;
      EXPECT_NE(v.err.find("UNSUPPORTED: '" + source + "' is safetensors, not a seedstore store"),
                std::string::npos)
          << v.err;
      EXPECT_NE(v.err.find("records no checksums or fingerprints"), std::string::npos) << v.err;
      EXPECT_NE(v.err.find("seedstore diff " + source + " OTHER"), std::string::npos) << v.err;
      EXPECT_EQ(v.err.find("corrupt"), std::string::npos) << v.err;
    }
  }
}

TEST(Cli, SelfTestPasses) {
  const Proc r = Exec("selftest");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(" passed, 0 failed"), std::string::npos) << r.out;
}

// inspect pads names by UTF-8 code points, not bytes: the columns after a non-ASCII name line
// up ('größe' takes 5 columns, not 7).
TEST(Cli, InspectAlignsNonAsciiNames) {
  const std::string spec = Write("utf8.json", R"({"seedstore": 1, "seed": 0, "tensors": [
    {"name": "größe", "shape": [2], "dtype": "float32", "init": {"dist": "zeros"}},
    {"name": "weight", "shape": [3], "dtype": "float32", "init": {"dist": "zeros"}}]})");
  const Proc r = Exec("inspect " + spec);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\ngröße   [2]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nweight  [3]"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace seedstore
