// A full disk (I5), a real one (a tmpfs in a private mount namespace): every writing command
// fails with exit 5 naming the tensor, at one fill level and at every fill level, and the
// previous checkpoint stays intact.
#include "tests/cli/cli_test_util.h"

namespace seedstore {
namespace {

using namespace clitest;  // NOLINT

// A full disk (invariant I5): every command that writes a store, a distributed save or a
// safetensors file fails with exit 5 (IO_ERROR) and a message naming the tensor and "No space
// left on device" -- no crash, no hang -- leaves no temporary or rank file behind, and the
// previous checkpoint at the path stays byte for byte intact and verifies. The full disk is a
// real one: a tmpfs just large enough for the previous checkpoint plus 3 MiB (HDF5 1.10
// crashed at exit after such a failure, before AbandonH5File), mounted in a
// private mount namespace (unshare; root or unprivileged user namespaces). Skipped, saying so,
// where neither is allowed.
TEST(Cli, FullDiskFailsCleanlyAndKeepsThePreviousCheckpoint) {
  if (std::system("unshare -rm true >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "not run: cannot create a mount namespace here (unshare -rm), so no full "
                    "filesystem can be made for the test";
  // A 6.5 MB dense store of uniform floats (hardly compressible) in 16 tensors, whose
  // metadata is still to be written when the disk fills, and its safetensors twin.
  nlohmann::json tensors = nlohmann::json::array();
  for (int k = 0; k < 16; ++k) {
    std::string name = std::to_string(k);
    name.insert(name.begin(), 't');
    tensors.push_back({{"name", name},
                       {"shape", {256, 400}},
                       {"dtype", "float32"},
                       {"init", {{"dist", "uniform"}}}});
  }
  const std::string spec = Write(
      "full.json", nlohmann::json{{"seedstore", 1}, {"seed", 5}, {"tensors", tensors}}.dump());
  const std::string st = TempDir() + "/full.safetensors", src = TempDir() + "/full_src.h5";
  ASSERT_EQ(Exec("export " + spec + " --format safetensors -o " + st).code, 0);
  ASSERT_EQ(Exec("import " + st + " -o " + src).code, 0);
  const std::string layout = Write("full_layout.json", R"({"mesh": {"axes": ["d"], "shape": [2]},
      "placements": [{"match": "*", "spec": ["d", null]}]})");
  const std::string mnt = TempDir() + "/full_mnt";
  ASSERT_EQ(std::system(("mkdir -p " + mnt).c_str()), 0);
  const std::string b = Bin();
  const std::string script =
      Write("full.sh",
            "set -u\n"
            "size=$(( $(stat -c %s " +
                src +
                ") + 3 * 1048576 ))\n"
                "mount -t tmpfs -o size=$size tmpfs " +
                mnt +
                " || exit 90\n"
                "cp " +
                src + " " + mnt +
                "/out.h5 || exit 91\n"
                "try() { echo \"== $1\"; shift; \"$@\" 2>&1 >/dev/null; echo \"rc=$?\"; }\n"
                "try reshard " +
                b + " reshard " + src + " --consolidate --threads 2 -q -o " + mnt +
                "/out.h5\n"
                "try import " +
                b + " import " + st + " -o " + mnt +
                "/out.h5\n"
                "try save " +
                b + " reshard " + src + " --layout " + layout + " --threads 2 -q -o " + mnt +
                "/save.h5\n"
                "try export " +
                b + " export " + src + " --format safetensors -o " + mnt +
                "/out.safetensors\n"
                "try export-split " +
                b + " export " + src + " --max-shard-size 1MB -o " + mnt +
                "/split.safetensors\n"
                "cmp " +
                src + " " + mnt +
                "/out.h5 && echo intact\n"
                "" +
                b + " verify " + mnt +
                "/out.h5 >/dev/null && echo verified\n"
                "echo \"left: $(ls -A " +
                mnt + " | tr '\\n' ' ')\"\n");
  std::string out;
  const int status = RunUnshared(script, &out);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 90)
    GTEST_SKIP() << "not run: tmpfs cannot be mounted in the namespace: " << out;
  ASSERT_TRUE(WIFEXITED(status)) << out;
  for (const char* cmd : {"reshard", "import", "save", "export", "export-split"}) {
    const size_t at = out.find(std::string("== ") + cmd + "\n");
    ASSERT_NE(at, std::string::npos) << out;
    const size_t end = out.find("\n== ", at + 3);
    const std::string part =
        out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    SCOPED_TRACE(part);
    EXPECT_NE(part.find("rc=5"), std::string::npos) << cmd << ": not exit 5 (IO_ERROR)";
    EXPECT_NE(part.find("No space left on device"), std::string::npos) << cmd;
    if (std::string(cmd).rfind("export", 0) != 0) {
      EXPECT_NE(part.find("tensor '"), std::string::npos) << cmd;
    }
  }
  EXPECT_NE(out.find("\nintact\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\nverified\n"), std::string::npos) << out;
  EXPECT_NE(out.find("left: out.h5 \n"), std::string::npos)
      << "temporaries, rank files or split files left:\n"
      << out;
}

// The same, at every fill level of the disk rather than one: the disk fills at each step of
// writing -- a rank file's chunks, tables, index or final flush, the master's index or its
// flush, a store's tables, index or flush -- and every one fails with exit 5, never a crash
// (HDF5 1.10 left the file half-closed after a failed H5Fflush: SIGSEGV at exit, exit 139,
// after "cannot flush master" and "flushing the store") and never a success that committed
// a store missing what a buffered write had lost at H5Dclose (an index of zeros: verify
// failed after import --update exited 0). The previous save and store stay byte for byte as
// they were and verify, and no temporary is left. Each command runs with the disk filled
// (a filler file) in 1000-byte steps down until it succeeds; the steps where the master's
// flush fails are among them (asserted: the test reaches that failure).
TEST(Cli, FullDiskAtEveryFillLevelFailsCleanly) {
  if (std::system("unshare -rm true >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "not run: cannot create a mount namespace here (unshare -rm), so no full "
                    "filesystem can be made for the test";
  // 134 KB of normal floats in 1 KB chunks (132 chunks), and a small tensor. Seed 3 lays the
  // files out so that a store's index is the only write that needs a page more (tmpfs): with
  // the index buffered, update and consolidate then committed a store without it.
  const std::string spec = Write("fill.json", R"({"seedstore": 1, "seed": 3, "tensors": [
      {"name": "w.big", "shape": [257, 131], "dtype": "float32", "init": {"dist": "normal"}},
      {"name": "w.prime", "shape": [13, 7], "dtype": "float32", "init": {"dist": "normal"}}]})");
  const std::string st = TempDir() + "/fill.safetensors", src = TempDir() + "/fill_src.h5";
  ASSERT_EQ(Exec("export " + spec + " --format safetensors -o " + st).code, 0);
  ASSERT_EQ(Exec("import " + st + " -o " + src + " --chunk-bytes 1024").code, 0);
  const std::string l3 = Write("fill_l3.json", R"({"mesh": {"axes": ["d"], "shape": [3]},
      "placements": [{"match": "*", "flat": ["d"]}]})");
  const std::string l4 = Write("fill_l4.json", R"({"mesh": {"axes": ["d", "t"], "shape": [2, 2]},
      "placements": [{"match": "*", "spec": ["d", "t"]}]})");
  const std::string mnt = TempDir() + "/fill_mnt", keep = TempDir() + "/fill_keep";
  ASSERT_EQ(std::system(("mkdir -p " + mnt + " " + keep).c_str()), 0);
  const std::string b = Bin();
  // sweep NAME CMD...: runs CMD with the filler in 1000-byte steps down until CMD succeeds,
  // from where the free space left is 32 KiB less than the source's size (every output is
  // about that size: the last 32 KiB written and what follows them -- the last chunks, the
  // tables, indexes, flushes and the master -- fail in turn; earlier failures are the other
  // test's). Prints "NAME <filler> rc=<rc> <error>", and BROKEN / CHANGED / LEFT lines for a
  // save or store that no longer verifies, one changed by a failed CMD, and files left behind.
  const std::string script = Write(
      "fill.sh",
      "set -u\n"
      "mount -t tmpfs -o size=420k tmpfs " +
          mnt +
          " || exit 90\n"
          "cd " +
          mnt +
          " || exit 91\n"
          "check() {\n"  // the save or store as a checksum of its files' bytes; verified when new
          "  for f in p.h5 out.h5; do\n"
          "    [ -e " +
          keep +
          "/$f.sum ] || continue\n"
          "    sum=$(cat $f $f.*.rank*.h5 2>/dev/null | cksum)\n"
          "    [ \"$sum\" = \"$(cat " +
          keep +
          "/$f.sum)\" ] && continue\n"
          "    [ $2 = 0 ] || echo \"CHANGED $f by $1\"\n"
          "    " +
          b +
          " verify $f >/dev/null 2>&1 || echo \"BROKEN $f after $1\"\n"
          "    echo \"$sum\" > " +
          keep +
          "/$f.sum\n"
          "  done\n"
          "  left=$(ls -A | grep -vxE 'filler|out\\.h5|p\\.h5(\\.[0-9a-f]{8}\\.rank[0-9]\\.h5)?')\n"
          "  [ -z \"$left\" ] || { echo \"LEFT by $1: $left\"; rm -f $left; }\n"
          "}\n"
          "sweep() {\n"
          "  name=$1; shift\n"
          "  rm -f filler; s=$(( $(stat -f -c '%a * %S' .) - $(stat -c %s " +
          src +
          ") + 32768 ))\n"
          "  while [ $s -ge 0 ]; do\n"
          "    rm -f filler; head -c $s /dev/zero > filler 2>/dev/null\n"
          "    \"$@\" >/dev/null 2>" +
          keep +
          "/err; rc=$?\n"
          "    echo \"$name $s rc=$rc $(head -n 1 " +
          keep +
          "/err)\"\n"
          "    check \"$name at $s\" $rc\n"
          "    [ $rc = 0 ] && break\n"
          "    s=$(( s - 1000 ))\n"
          "  done\n"
          "  rm -f filler\n"
          "}\n"
          "" +
          b + " reshard " + src + " --layout " + l4 +
          " -q -o p.h5 || exit 92\n"
          "echo new > " +
          keep +
          "/p.h5.sum && check start 0\n"
          "sweep save " +
          b + " reshard " + src + " --layout " + l3 +
          " -q -o p.h5\n"
          "rm -f p.h5* " +
          keep +
          "/p.h5.sum\n"  // room for two stores
          "cp " +
          src + " out.h5 && echo new > " + keep +
          "/out.h5.sum && check copy 0\n"
          "sweep update " +
          b + " import " + st +
          " -o out.h5 --update --chunk-bytes 1024\n"
          "sweep consolidate " +
          b + " reshard " + src +
          " --consolidate -q -o out.h5\n"
          "sweep import " +
          b + " import " + st +
          " -o out.h5\n"
          "echo done\n");
  std::string out;
  const int status = RunUnshared(script, &out);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 90)
    GTEST_SKIP() << "not run: tmpfs cannot be mounted in the namespace: " << out;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  ASSERT_NE(out.find("\ndone\n"), std::string::npos) << out;
  std::map<std::string, int> steps, successes;
  int master_flush = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    SCOPED_TRACE(line);
    EXPECT_NE(line.rfind("BROKEN ", 0), 0u);
    EXPECT_NE(line.rfind("CHANGED ", 0), 0u);
    EXPECT_NE(line.rfind("LEFT ", 0), 0u);
    const size_t rc = line.find(" rc=");
    if (rc == std::string::npos) continue;
    const std::string name = line.substr(0, line.find(' '));
    const std::string code = line.substr(rc + 4, line.find(' ', rc + 4) - rc - 4);
    ++steps[name];
    if (code == "0") {
      ++successes[name];
    } else {
      EXPECT_EQ(code, "5") << "not exit 5 (IO_ERROR; 139: SIGSEGV)";
      EXPECT_NE(line.find("IO_ERROR: "), std::string::npos);
    }
    // The master is staged under its own name, P.<id>.new, before the commit (FORMAT.md 10).
    if (line.find("IO_ERROR: cannot flush master 'p.h5.") != std::string::npos &&
        line.find(".new.tmp-") != std::string::npos) {
      ++master_flush;
      EXPECT_NE(line.find("No space left on device"), std::string::npos);
    }
  }
  for (const char* name : {"save", "update", "consolidate", "import"}) {
    EXPECT_GT(steps[name], 3) << name << ": the sweep did not run\n" << out;
    EXPECT_EQ(successes[name], 1) << name << ": never succeeded, even with the disk empty\n" << out;
  }
  EXPECT_GT(master_flush, 0) << "no step failed at the master's flush\n" << out;
}

}  // namespace
}  // namespace seedstore
