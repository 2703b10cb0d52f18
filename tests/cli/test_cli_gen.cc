// `seedstore gen` run as a user would: raw values equal JAX's, a box equals the slice of the
// whole, every output format, outputs it cannot write named and files replaced atomically, the
// dtypes --help lists.
#include "tests/cli/cli_test_util.h"

namespace seedstore {
namespace {

using namespace clitest;  // NOLINT

TEST(Cli, GenRawMatchesJax) {
  // jax.random.uniform(jax.random.key(0), (3,)) -> bits 1064475214 1064993846 1051337244.
  const Proc r =
      Exec("gen --shape 3 --dtype float32 --init '{\"dist\":\"uniform\"}' --seed 0 --format raw");
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.out.size(), 12u);
  uint32_t v[3];
  std::memcpy(v, r.out.data(), 12);
  EXPECT_EQ(v[0], 1064475214u);
  EXPECT_EQ(v[1], 1064993846u);
  EXPECT_EQ(v[2], 1051337244u);
}

TEST(Cli, GenBoxEqualsSliceOfWhole) {
  const Proc whole =
      Exec("gen --shape 4,5,6 --dtype bfloat16 --init '{\"dist\":\"normal\"}' --seed 3");
  const Proc box = Exec(
      "gen --shape 4,5,6 --dtype bfloat16 --init '{\"dist\":\"normal\"}' --seed 3 --box "
      "1:3,2:5,0:6");
  ASSERT_EQ(whole.code, 0);
  ASSERT_EQ(box.code, 0);
  ASSERT_EQ(box.out.size(), 2u * 3 * 6 * 2);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(box.out.substr((i * 3 + j) * 12, 12),
                whole.out.substr((((1 + i) * 5) + 2 + j) * 12, 12));
}

TEST(Cli, GenFormats) {
  const Proc t =
      Exec("gen --shape 2 --dtype uint32 --init '{\"dist\":\"bits\"}' --seed 1701 --format text");
  ASSERT_EQ(t.code, 0);
  EXPECT_EQ(t.out, "1111271205\n2679469115\n");
  const std::string npy = TempDir() + "/x.npy";
  const Proc n =
      Exec("gen --shape 2,3 --dtype float32 --init '{\"dist\":\"zeros\"}' --format npy -o " + npy);
  ASSERT_EQ(n.code, 0) << n.err;
  std::ifstream f(npy, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(f)), {});
  ASSERT_GE(data.size(), 64u + 24u);
  EXPECT_EQ(data.substr(0, 6), "\x93NUMPY");
  EXPECT_NE(data.find("'shape': (2, 3)"), std::string::npos);
  EXPECT_EQ(data.size() % 16, (64u + 24u) % 16);
}

// gen reports an output it cannot write, naming it (not exit 5 without a word), and
// replaces a regular file atomically: a failure mid-write leaves the previous file whole
// (fopen("wb") would truncate it first). stdout and devices are written in place.
TEST(Cli, GenOutputErrorsAreNamedAndFilesReplacedAtomically) {
  const std::string dir = TempDir() + "/gen_out";
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/folder").c_str()), 0);
  const std::string g = "gen --shape 4 --init '{\"dist\":\"ones\"}' ";
  {
    const Proc r = Exec(g + "-o " + dir + "/folder");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("'" + dir + "/folder' is a directory"), std::string::npos) << r.err;
  }
  {
    const Proc r = Exec(g + "-o " + dir + "/nodir/x.bin");
    EXPECT_EQ(r.code, 5) << r.err;
    EXPECT_NE(r.err.find(dir + "/nodir/x.bin"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("No such file or directory"), std::string::npos) << r.err;
  }
  struct stat full;
  if (::stat("/dev/full", &full) == 0 && S_ISCHR(full.st_mode)) {
    const Proc r = Exec(g + "-o /dev/full");
    EXPECT_EQ(r.code, 5) << r.err;
    EXPECT_NE(r.err.find("writing output '/dev/full' failed: No space left on device"),
              std::string::npos)
        << r.err;
    ASSERT_EQ(::stat("/dev/full", &full), 0);
    EXPECT_TRUE(S_ISCHR(full.st_mode)) << "/dev/full is no longer a device";
  }
  // A write that fails half-way (over the file size limit: EFBIG, with SIGXFSZ ignored)
  // leaves the previous file as it was, and no temporary.
  const std::string out = dir + "/out.bin";
  std::ofstream(out) << "previous";
  const std::string log = Shell("bash -c \"trap '' XFSZ; ulimit -f 8; exec " + Bin() +
                                " gen --shape 100000 --init '{\\\"dist\\\":\\\"ones\\\"}' -o " +
                                out + "\"; echo rc=$?");
  EXPECT_NE(log.find("rc=5"), std::string::npos) << log;
  EXPECT_NE(log.find("File too large"), std::string::npos) << log;
  EXPECT_EQ(ReadFile(out), "previous");
  // A successful write replaces the file (a new inode: a hard link keeps the old bytes).
  ASSERT_EQ(::link(out.c_str(), (dir + "/keep.bin").c_str()), 0);
  const Proc ok = Exec(g + "--format text -o " + out);
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ReadFile(out), "1\n1\n1\n1\n");
  EXPECT_EQ(ReadFile(dir + "/keep.bin"), "previous");
  EXPECT_EQ(Shell("ls -A " + dir), "folder\nkeep.bin\nout.bin\n");
  // stdout, by default, "-" or /dev/stdout.
  for (const std::string o : {"", "-o - ", "-o /dev/stdout "}) {
    const Proc s = Exec(g + "--format text " + o);
    EXPECT_EQ(s.code, 0) << o << s.err;
    EXPECT_EQ(s.out, "1\n1\n1\n1\n") << o;
  }
}

// gen --help lists every dtype it accepts, from the dtype table (int8..int64 and bool
// included).
TEST(Cli, GenHelpListsEveryDtype) {
  const Proc h = Exec("gen --help");
  ASSERT_EQ(h.code, 0);
  for (const char* dt : {"float32", "float64", "bfloat16", "float16", "uint8", "uint64", "int8",
                         "int16", "int32", "int64", "bool"}) {
    EXPECT_NE(h.out.find(dt), std::string::npos) << dt << "\n" << h.out;
  }
  EXPECT_EQ(
      Exec("gen --shape 3 --dtype int8 --init '{\"dist\":\"constant\",\"value\":-2}' --format text")
          .out,
      "-2\n-2\n-2\n");
}

}  // namespace
}  // namespace seedstore
