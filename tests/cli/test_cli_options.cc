// Command-line options: integers parsed strictly, --zstd-level and number options only in their
// range, --layout with --rank, a --tensors glob that matches nothing.
#include "tests/cli/cli_test_util.h"

namespace seedstore {
namespace {

using namespace clitest;  // NOLINT

// Every integer option is parsed by one strict parser: a value outside the option's range, a
// negative value for an unsigned one, and anything but a decimal integer are refused (exit 2)
// naming the option and the value -- never clamped or wrapped (--seed 2^64-1 --x64 is not
// what 2^63-1 gives, init --seed -1 does not record 2^64-1, --seed 010 is not octal 8).
TEST(Cli, IntegerOptionsAreParsedStrictly) {
  const std::string st = TempDir() + "/int.safetensors", store = TempDir() + "/int.h5";
  ASSERT_EQ(Exec("export " + Write("int.json", kSpec) + " -o " + st).code, 0);
  const std::string spec = TempDir() + "/int.json";
  const std::string g = "gen --shape 2 --dtype uint32 --init '{\"dist\":\"bits\"}' --format text ";
  struct Case {
    std::string args, needle;
  };
  const Case cases[] = {
      // gen --seed is jax.random.key's seed: an int64 (JAX takes np.int64(seed)), either mode.
      {g + "--seed 18446744073709551615 --x64",
       "--seed: 18446744073709551615 is out of range (-9223372036854775808..9223372036854775807)"},
      {g + "--seed 9223372036854775808", "--seed: 9223372036854775808 is out of range"},
      {g + "--seed 99999999999999999999999", "--seed: 99999999999999999999999 is out of range"},
      {g + "--seed -9223372036854775809", "--seed: -9223372036854775809 is out of range"},
      {g + "--seed 1.5", "--seed: '1.5' is not an integer"},
      {g + "--seed 0x10", "--seed: '0x10' is not an integer"},
      {g + "--seed 1e3", "--seed: '1e3' is not an integer"},
      {g + "--seed ''", "--seed: '' is not an integer"},
      {g + "--seed ' 5'", "--seed: ' 5' is not an integer"},
      {g + "--seed +5", "--seed: '+5' is not an integer"},
      // init's root seed is a uint64.
      {"init --preset gpt2 --no-fingerprints --seed -1 -o " + store,
       "--seed: -1 is out of range (0..18446744073709551615)"},
      {"init --preset gpt2 --no-fingerprints --seed 18446744073709551616 -o " + store,
       "--seed: 18446744073709551616 is out of range"},
      {"import " + st + " -o " + store + " --seed -1", "--seed: -1 is out of range"},
      {"import " + st + " -o " + store + " --chunk-bytes -1",
       "--chunk-bytes: -1 is out of range (1..2147483648)"},
      {"import " + st + " -o " + store + " --chunk-bytes 0", "--chunk-bytes: 0 is out of range"},
      {"import " + st + " -o " + store + " --chunk-bytes 2147483649",
       "--chunk-bytes: 2147483649 is out of range"},
      {"import " + st + " -o " + store + " --threads -1", "--threads: -1 is out of range (0..256)"},
      {g + "--threads 257", "--threads: 257 is out of range (0..256)"},
      {"fingerprint " + spec + " --threads 4294967297", "--threads: 4294967297 is out of range"},
      {"fingerprint " + spec + " --rank -1", "--rank: -1 is out of range (0..2147483647)"},
      {"fingerprint " + spec + " --rank 2147483648", "--rank: 2147483648 is out of range"},
      {"verify " + st + " --threads x", "--threads: 'x' is not an integer"},
      {"reshard " + spec + " --consolidate -o " + store + " --simulate-rank -1",
       "--simulate-rank: -1 is out of range"},
      {"reshard " + spec + " --consolidate -o " + store + " --threads 1.0",
       "--threads: '1.0' is not an integer"},
      {"verify-ranks " + spec + " --layout x.json --simulate-rank 4294967296",
       "--simulate-rank: 4294967296 is out of range"},
      {"demo --ranks 0,-1", "--ranks: -1 is out of range (0..2147483647)"},
      {"demo --seed -1", "--seed: -1 is out of range"},
      // Integers inside option values go through the same parser.
      {"gen --shape 3,18446744073709551616",
       "--shape '3,18446744073709551616': 18446744073709551616 is out of range"},
      {"gen --shape 3,x", "--shape '3,x': 'x' is not an integer"},
      {"gen --shape 3 --key 1,4294967296",
       "--key '1,4294967296': 4294967296 is out of range (0..4294967295)"},
      {"gen --shape 3 --key -1,0", "--key '-1,0': -1 is out of range"},
      {"gen --shape 3 --key 1,2,3", "--key '1,2,3': expected K0,K1"},
  };
  for (const auto& c : cases) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << c.args;
  }
  // The ends of each range are accepted, with JAX's meaning: key(seed) in 32-bit mode is
  // [0, seed mod 2^32], with x64 [seed >> 32, seed & 0xffffffff] (two's complement).
  auto same = [&](const std::string& a, const std::string& b) {
    const Proc x = Exec(g + a), y = Exec(g + b);
    ASSERT_EQ(x.code, 0) << a << "\n" << x.err;
    ASSERT_EQ(y.code, 0) << b << "\n" << y.err;
    EXPECT_EQ(x.out, y.out) << a << " vs " << b;
    EXPECT_EQ(x.out.size() > 0, true);
  };
  same("--seed 9223372036854775807 --x64", "--key 2147483647,4294967295");
  same("--seed -9223372036854775808 --x64", "--key 2147483648,0");
  same("--seed -1 --x64", "--key 4294967295,4294967295");
  same("--seed -1", "--key 0,4294967295");
  same("--seed 9223372036854775807", "--key 0,4294967295");
  same("--seed 010", "--seed 10");  // decimal, not octal
  EXPECT_NE(Exec(g + "--seed 9223372036854775807 --x64").out,
            Exec(g + "--seed 18446744073709551615 --x64").out);
  const Proc i =
      Exec("init --preset gpt2 --no-fingerprints --seed 18446744073709551615 --json -o " + store);
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_EQ(nlohmann::json::parse(i.out)["seed"].get<uint64_t>(), 18446744073709551615ull);
  const Proc c = Exec("import " + st + " -o " + store + " --chunk-bytes 2147483648 --threads 256");
  EXPECT_EQ(c.code, 0) << c.err;
}

// --zstd-level accepts exactly the documented 1..22 (zstd's negative fast levels are not
// used: the writer clamped them to 1), and the floating-point options only finite numbers in
// range (0, -5, 23 and 1000000 are refused, not clamped; so is --max-padding nan).
TEST(Cli, ZstdLevelAndNumberOptionsAcceptOnlyTheirRange) {
  const std::string st = TempDir() + "/z.safetensors", store = TempDir() + "/z.h5";
  ASSERT_EQ(Exec("export " + Write("z.json", kSpec) + " -o " + st).code, 0);
  for (const std::string level : {"0", "-5", "23", "1000000"}) {
    for (const std::string& cmd :
         {"import " + st + " -o " + store, "reshard " + st + " --consolidate -q -o " + store}) {
      const Proc r = Exec(cmd + " --zstd-level " + level);
      EXPECT_EQ(r.code, 2) << cmd << " " << level << "\n" << r.err;
      EXPECT_NE(r.err.find("--zstd-level: " + level + " is out of range (1..22)"),
                std::string::npos)
          << r.err;
    }
  }
  EXPECT_FALSE(std::ifstream(store).good());  // nothing was written
  for (const std::string level : {"1", "22"}) {
    const Proc r = Exec("import " + st + " -o " + store + " --zstd-level " + level + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    const Proc j =
        Exec("reshard " + st + " --consolidate -q -o " + store + " --zstd-level " + level);
    ASSERT_EQ(j.code, 0) << j.err;
  }
  const std::string rs = "reshard " + st + " --consolidate -q -o " + store;
  for (const auto& [args, needle] :
       {std::pair<std::string, std::string>{" --max-padding nan",
                                            "--max-padding: 'nan' is not a finite number"},
        {" --max-padding inf", "--max-padding: 'inf' is not a finite number"},
        {" --max-padding -0.5", "--max-padding: -0.5 is below the minimum 0"},
        {" --max-padding 0.25x", "--max-padding: '0.25x' is not a finite number"},
        {" --timeout nan", "--timeout: 'nan' is not a finite number"},
        {" --timeout -inf", "--timeout: '-inf' is not a finite number"}}) {
    const Proc r = Exec(rs + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
  }
  EXPECT_EQ(Exec(rs + " --max-padding 0 --timeout -1").code, 0);
  EXPECT_EQ(Exec(rs + " --max-padding 0.5 --timeout 30").code, 0);
}

// --layout and --rank go together: each alone is named as such (not as "--rank -1 is outside
// the mesh", an option the user never gave).
TEST(Cli, LayoutAndRankAreGivenTogether) {
  const std::string spec = Write("lr.json", kSpec), layout = Write("lr_layout.json", kLayout);
  const std::string out = TempDir() + "/lr.safetensors";
  struct Case {
    std::string args, needle;
  };
  const Case cases[] = {
      {"fingerprint " + spec + " --layout " + layout, "--layout needs --rank"},
      {"export " + spec + " --layout " + layout + " -o " + out, "--layout needs --rank"},
      {"fingerprint " + spec + " --rank 0", "--rank needs --layout"},
      {"export " + spec + " --rank 0 -o " + out, "--rank needs --layout"},
      {"fingerprint " + spec + " --layout " + layout + " --rank 8",
       "--rank 8 is outside the mesh of '" + layout + "' (8 ranks)"},
      {"export " + spec + " --layout " + layout + " --rank 8 -o " + out,
       "--rank 8 is outside the mesh"},
      {"materialize " + spec + " --layout " + layout + " --rank 8 -o " + out,
       "--rank 8 is outside the mesh"},
  };
  for (const auto& c : cases) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    // Not "-1" alone: the temporary folder's random name may hold it ("seedstore-cli-1...").
    EXPECT_EQ(r.err.find("--rank -1"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(std::ifstream(out).good());
  EXPECT_EQ(Exec("export " + spec + " --layout " + layout + " --rank 7 -o " + out).code, 0);
  EXPECT_EQ(Exec("fingerprint " + spec + " --layout " + layout + " --rank 0").code, 0);
}

// A --tensors glob that matches nothing is an error naming it (a typo wrote an empty file or
// printed nothing, exit 0); one that matches is fine.
TEST(Cli, TensorsGlobMatchingNothingIsAnError) {
  const std::string spec = Write("glob_spec.json", kSpec);
  const std::string layout = Write("glob_layout.json", kLayout);
  const std::string out = TempDir() + "/glob.safetensors";
  for (const std::string& cmd :
       {"inspect " + spec, "fingerprint " + spec, "export " + spec + " -o " + out,
        "materialize " + spec + " --layout " + layout + " --rank 0 -o " + out,
        "diff " + spec + " " + spec}) {
    const Proc p = Exec(cmd + " --tensors 'layer.*'");
    EXPECT_EQ(p.code, 2) << cmd << "\n" << p.err;
    EXPECT_NE(p.err.find("--tensors 'layer.*' matches no tensor of '" + spec + "'"),
              std::string::npos)
        << cmd << "\n"
        << p.err;
    EXPECT_EQ(Exec(cmd + " --tensors 'layers.*'").code, 0) << cmd;
  }
}

}  // namespace
}  // namespace seedstore
