// Where commands write (I5): never over one of their inputs; -o names a file; split exports all
// or nothing and files left from an earlier export named; reports that cannot reach standard
// output fail; long output names work or are refused first; a renamed master's save is kept;
// one-file writers honour a save's writer lock.
#include "tests/cli/cli_test_util.h"

namespace seedstore {
namespace {

using namespace clitest;  // NOLINT

// No command writes its output over one of its inputs: -o naming the source (by another
// spelling, a symbolic or a hard link), a shard file of a Hugging Face index, a rank file of a
// distributed save, the layout or the spec is refused (exit 2) before anything is written, and
// the input stays byte for byte as it was (materialize model.h5 ... -o model.h5 must not
// replace the store by one rank's shard, nor init --spec s.json -o s.json the spec).
// reshard and import --update may rewrite the store they read (atomically, same weights).
TEST(Cli, OutputThatIsAnInputIsRefusedAndTheInputKept) {
  const std::string d = TempDir() + "/same";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = d + "/spec.json", layout = d + "/layout.json", st = d + "/w.safetensors";
  std::ofstream(spec) << kSpec;
  std::ofstream(layout) << kLayout;
  const std::string model = d + "/model.h5", save = d + "/save.h5";
  ASSERT_EQ(Exec("export " + spec + " -o " + st).code, 0);
  ASSERT_EQ(Exec("import " + st + " -o " + model).code, 0);
  ASSERT_EQ(Exec("export " + spec + " -o " + d + "/m.safetensors --max-shard-size 1KB").code, 0);
  const std::string index = d + "/m.safetensors.index.json";
  ASSERT_EQ(Exec("reshard " + model + " --layout " + layout + " -q -o " + save).code, 0);
  std::string shard, shard2, rank0;  // the index's two shard files, the save's rank 0 file
  for (const auto& e : std::filesystem::directory_iterator(d)) {
    const std::string n = e.path().filename();
    if (n.rfind("m-00001-of-", 0) == 0) shard = e.path();
    if (n == "m-00002-of-00002.safetensors") shard2 = e.path();  // norm, flat.w, layers.0.w
    if (n.rfind("save.h5.", 0) == 0 && n.size() > 9 && n.substr(n.size() - 9) == ".rank0.h5")
      rank0 = e.path();
  }
  ASSERT_FALSE(shard.empty());
  ASSERT_FALSE(shard2.empty());
  ASSERT_FALSE(rank0.empty());
  ASSERT_EQ(::symlink("model.h5", (d + "/link.h5").c_str()), 0);
  ASSERT_EQ(::link(model.c_str(), (d + "/hard.h5").c_str()), 0);
  const std::vector<std::string> inputs = {spec,  layout, st,   model, index,
                                           shard, shard2, save, rank0};
  std::map<std::string, std::string> before;
  for (const auto& f : inputs) before[f] = ReadFile(f);
  struct Case {
    std::string args, needle;
  };
  const std::string lr = " --layout " + layout + " --rank 0";
  const Case cases[] = {
      {"materialize " + model + lr + " -o " + model,
       "-o '" + model + "' is the input '" + model + "'; write to another path"},
      {"materialize " + model + lr + " -o " + d + "/link.h5", "is the input '" + model + "'"},
      {"materialize " + spec + lr + " -o " + layout,
       "-o '" + layout + "' is the input '" + layout + "'"},
      {"export " + model + " -o " + d + "/./model.h5", "is the input '" + model + "'"},
      {"export " + d + "/hard.h5 -o " + model, "is the input '" + d + "/hard.h5'"},
      {"export " + index + " -o " + shard,
       "-o '" + shard + "' is a file of the input '" + index + "'"},
      {"export " + index + " -o " + d + "/m.safetensors --max-shard-size 1KB",
       "-o '" + shard + "' is a file of the input '" + index + "'"},
      {"export " + index + " -o " + d + "/m.safetensors --max-shard-size 1",
       "-o '" + index + "' is the input '" + index + "'"},
      // Split, the files written are named after -o: d/m -> d/m-00001-of-00002.safetensors, ...
      // (flat.w, then layers.0.w), the index's own files, and a file named like one of them.
      {"export " + index + " -o " + d + "/m --tensors '*.w' --max-shard-size 100",
       "-o '" + shard + "' is a file of the input '" + index + "'"},
      {"export " + shard2 + " -o " + d + "/m --tensors '*.w' --max-shard-size 100",
       "-o '" + shard2 + "' is the input '" + shard2 + "'"},
      {"export " + save + " -o " + rank0, "is a file of the input '" + save + "'"},
      {"export " + spec + lr + " -o " + layout, "is the input '" + layout + "'"},
      {"import " + st + " -o " + st, "-o '" + st + "' is the input '" + st + "'"},
      {"import " + st + " -o " + st + " --update", "is the input '" + st + "'"},
      {"import " + index + " -o " + shard, "is a file of the input '" + index + "'"},
      {"import " + index + " -o " + index, "is the input '" + index + "'"},
      {"init --spec " + spec + " -o " + spec, "-o '" + spec + "' is the input '" + spec + "'"},
      {"reshard " + spec + " --consolidate -q -o " + spec, "is the input '" + spec + "'"},
      {"reshard " + st + " --consolidate -q -o " + st, "is the input '" + st + "'"},
      {"reshard " + save + " --consolidate -q -o " + rank0,
       "is a file of the input '" + save + "'"},
      {"reshard " + model + " --layout " + layout + " -q -o " + layout,
       "is the input '" + layout + "'"},
  };
  for (const auto& c : cases) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
  }
  for (const auto& f : inputs) EXPECT_TRUE(ReadFile(f) == before[f]) << f << " changed";
  for (const auto& e : std::filesystem::directory_iterator(d))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  // A store rewritten in place (atomically, the same weights) stays allowed.
  const Proc a = Exec("reshard " + model + " --consolidate -q -o " + model);
  EXPECT_EQ(a.code, 0) << a.err;
  const Proc b = Exec("reshard " + save + " --layout " + layout + " -q -o " + save);
  EXPECT_EQ(b.code, 0) << b.err;
  const Proc u = Exec("import " + st + " -o " + model + " --update");
  EXPECT_EQ(u.code, 0) << u.err;
  EXPECT_EQ(Exec("verify " + model).code, 0);
  EXPECT_EQ(Exec("verify " + save).code, 0);
  EXPECT_EQ(Exec("diff " + model + " " + spec).code, 0);
}

// A split export is all or nothing: every shard file and the index are written to temporaries
// first and renamed only once all are complete, so an error part-way -- here a corrupt chunk
// of t2, which lands in the third of four files -- leaves the previous export byte for byte,
// and no temporary (not files 1 and 2 replaced, with the old index loading the mix). A
// successful export then replaces them all.
TEST(Cli, SplitExportThatFailsPartWayKeepsThePreviousExport) {
  const std::string d = TempDir() + "/split_fail", out = d + "/m.safetensors";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string old_spec = FourTensorSpec("split_old.json", 5),
                    new_spec = FourTensorSpec("split_new.json", 6);
  const std::string st = TempDir() + "/split_new.safetensors", good = TempDir() + "/split_new.h5",
                    bad = TempDir() + "/split_bad.h5";
  ASSERT_EQ(Exec("export " + new_spec + " -o " + st).code, 0);
  ASSERT_EQ(Exec("import " + st + " -o " + good).code, 0);
  ASSERT_EQ(std::system(("cp " + good + " " + bad).c_str()), 0);
  ASSERT_TRUE(testutil::FlipChunkByte(bad, "t2", {0, 0}));
  const Proc prev = Exec("export " + old_spec + " -o " + out + " --max-shard-size 16KiB");
  ASSERT_EQ(prev.code, 0) << prev.err;
  const std::map<std::string, std::string> before = Folder(d);
  ASSERT_EQ(before.size(), 5u);  // m-0000k-of-00004.safetensors, m.safetensors.index.json
  ASSERT_EQ(before.count("m-00004-of-00004.safetensors"), 1u);
  const Proc r = Exec("export " + bad + " -o " + out + " --max-shard-size 16KiB");
  EXPECT_EQ(r.code, 4) << r.err;
  EXPECT_NE(r.err.find("chunk-corrupt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'t2'"), std::string::npos) << r.err;
  const std::map<std::string, std::string> after = Folder(d);
  for (const auto& [name, bytes] : before) {
    EXPECT_TRUE(after.count(name) && after.at(name) == bytes) << name << " changed";
  }
  for (const auto& [name, bytes] : after)
    EXPECT_EQ(before.count(name), 1u) << name << " left behind";
  EXPECT_EQ(Exec("diff " + out + ".index.json " + old_spec).code, 0);
  // The good store replaces every file.
  const Proc ok = Exec("export " + good + " -o " + out + " --max-shard-size 16KiB");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.err.find("warning"), std::string::npos) << ok.err;
  const std::map<std::string, std::string> now = Folder(d);
  EXPECT_EQ(now.size(), 5u);
  for (const auto& [name, bytes] : now) {
    if (name != "m.safetensors.index.json") {
      EXPECT_NE(before.at(name), bytes) << name << " not replaced";
    }
  }
  EXPECT_EQ(Exec("diff " + out + ".index.json " + new_spec).code, 0);
}

// An export to a path that an earlier export split otherwise (or not at all) leaves that
// export's other files, which still load (an old index names its old shards): the command
// names them on stderr and removes nothing -- they may be another tool's, or wanted. Files
// that are the export's own input (consolidating an index into one file) are not named.
TEST(Cli, ExportNamesTheFilesLeftFromAnEarlierExportSplitOtherwise) {
  const std::string d = TempDir() + "/leftover", out = d + "/m.safetensors";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = FourTensorSpec("leftover.json", 3);
  const std::string warning = "left from an earlier export to '" + out + "' (split otherwise)";
  auto q = [&d](const std::string& f) { return "'" + d + "/" + f + "'"; };
  ASSERT_EQ(Exec("export " + spec + " -o " + out + " --max-shard-size 32KiB").code, 0);  // 2 files
  const std::map<std::string, std::string> split2 = Folder(d);
  {  // Unsplit over split: the index and its shards remain, untouched.
    const Proc r = Exec("export " + spec + " -o " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("warning: " + q("m.safetensors.index.json") + ", " +
                         q("m-00001-of-00002.safetensors") + ", " +
                         q("m-00002-of-00002.safetensors") + ": " + warning),
              std::string::npos)
        << r.err;
    for (const auto& [name, bytes] : split2) EXPECT_EQ(ReadFile(d + "/" + name), bytes) << name;
  }
  {  // Split in 4 over split in 2 and a single file: the single file and the 2 shards.
    const Proc r = Exec("export " + spec + " -o " + out + " --max-shard-size 16KiB");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(
        r.err.find("warning: " + q("m.safetensors") + ", " + q("m-00001-of-00002.safetensors") +
                   ", " + q("m-00002-of-00002.safetensors") + ": " + warning),
        std::string::npos)
        << r.err;
    EXPECT_TRUE(std::filesystem::exists(out));
  }
  ASSERT_EQ(std::system(("rm " + out + " " + d + "/m-0000?-of-00002.safetensors").c_str()), 0);
  {  // The same split again: nothing left over.
    const Proc r = Exec("export " + spec + " -o " + out + " --max-shard-size 16KiB");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  }
  {  // Consolidating the index into one file: its files are the input, not named.
    const Proc r = Exec("export " + out + ".index.json -o " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
    EXPECT_EQ(Exec("diff " + out + " " + spec).code, 0);
  }
}

// -o must name a file: a folder ("out/", an existing directory, ".") is refused (exit 2) split
// or not (split, "out/" would write out/.index.json and out/-00001-of-00004.safetensors), as
// is split output with no name to call its files by (".safetensors"), and "-" (stdout) for
// every command that writes a file by name (not a file called "-").
// Nothing is written.
TEST(Cli, OutputMustNameAFile) {
  const std::string d = TempDir() + "/out_file";
  ASSERT_EQ(std::system(("mkdir -p " + d + "/dir").c_str()), 0);
  const std::string spec = Write("out_file/spec.json", kSpec),
                    layout = Write("out_file/layout.json", kLayout);
  const std::map<std::string, std::string> before = Folder(d);
  struct Case {
    std::string args, needle;
  };
  const std::string e = "export " + spec + " -o ", split = " --max-shard-size 100";
  const std::string stdout_refused = " output must be a file; '-' (stdout) is not supported";
  const Case cases[] = {
      {e + d + "/dir" + split, "'" + d + "/dir' is a directory; give a file to write"},
      {e + d + "/dir/" + split, "'" + d + "/dir/' is a directory; give a file to write"},
      {e + d + "/new/" + split,
       "'" + d + "/new/' names a folder, not a file; give a file to write"},
      {e + d + "/new/", "'" + d + "/new/' names a folder, not a file"},
      {e + d + "/.safetensors" + split,
       "'" + d + "/.safetensors' has no name to call the split files by"},
      {e + "-", "safetensors" + stdout_refused},
      {e + "-" + split, "safetensors" + stdout_refused},
      {"materialize " + spec + " --layout " + layout + " --rank 0 -o -",
       "safetensors" + stdout_refused},
      {"init --spec " + spec + " -o -", "store" + stdout_refused},
      {"init --preset gpt2 -o -", "store" + stdout_refused},
      {"reshard " + spec + " --consolidate -q -o -", "store" + stdout_refused},
  };
  const std::string cwd = std::filesystem::current_path();
  std::filesystem::current_path(d);  // where a file "-" would appear
  for (const auto& c : cases) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
  }
  std::filesystem::current_path(cwd);
  EXPECT_TRUE(Folder(d) == before) << "a file was written";
  EXPECT_TRUE(std::filesystem::is_empty(d + "/dir"));
}

// A report that cannot be written to standard output fails the command: exit 5 with "cannot
// write standard output: <reason>" (`fingerprint X --json > /dev/full` and `inspect X >&-`
// must not exit 0). A closed descriptor is never the next file opened.
TEST(Cli, ReportsThatCannotReachStandardOutputFail) {
  struct stat full;
  if (::stat("/dev/full", &full) != 0 || !S_ISCHR(full.st_mode))
    GTEST_SKIP() << "not run: no /dev/full here";
  const std::string spec = Write("out_spec.json", kSpec), store = TempDir() + "/out.h5";
  ASSERT_EQ(Exec("init --spec " + spec + " -o " + store).code, 0);
  for (const std::string& cmd :
       {"fingerprint " + store + " --json", "fingerprint " + store, "inspect " + store,
        "diff " + store + " " + spec + " --all", "verify " + store, std::string("gen --shape 4"),
        std::string("--help")}) {
    for (const auto& [redirect, reason] :
         {std::pair<std::string, std::string>{" >/dev/full", "No space left on device"},
          {" >&-", "Bad file descriptor"}}) {
      const std::string log = Shell(Bin() + " " + cmd + redirect + "; echo rc=$?");
      EXPECT_NE(log.find("error: IO_ERROR: cannot write standard output: " + reason + "\nrc=5\n"),
                std::string::npos)
          << cmd << redirect << "\n"
          << log;
    }
  }
  // Standard output closed while a store is written: the store is whole, and verifies.
  const std::string copy = TempDir() + "/out_copy.h5";
  const std::string log =
      Shell(Bin() + " reshard " + store + " --consolidate -o " + copy + " >&-; echo rc=$?");
  EXPECT_NE(log.find("rc=5"), std::string::npos) << log;
  EXPECT_EQ(Exec("verify " + copy).code, 0);
}

// Names near NAME_MAX (255 bytes): a store gets a temporary that fits; a distributed save whose
// rank files' names ("<P>.<8 hex>.rank<r>.h5") or commit files ("<P>.<8 hex>.commit",
// docs/FORMAT.md 10) would not fit is refused before any work, naming the limit (not at the
// last rename, "File name too long").
TEST(Cli, LongOutputNamesWorkOrAreRefusedFirst) {
  const std::string d = TempDir() + "/long_names";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = Write("long_names/spec.json", kSpec),
                    layout = Write("long_names/layout.json", kLayout);
  const std::string store = d + "/" + std::string(252, 's') + ".h5";  // 255 bytes
  const Proc init = Exec("init --spec " + spec + " -o " + store);
  ASSERT_EQ(init.code, 0) << init.err;
  EXPECT_EQ(Exec("verify " + store).code, 0);
  const Proc save = Exec("reshard " + store + " --layout " + layout + " -q -o " + d + "/" +
                         std::string(240, 'p') + ".h5");
  EXPECT_EQ(save.code, 2) << save.err;
  EXPECT_NE(save.err.find("the name is too long for its rank files"), std::string::npos)
      << save.err;
  EXPECT_NE(save.err.find("a file name has at most 255"), std::string::npos) << save.err;
  const Proc one =
      Exec("reshard " + store + " --consolidate -q -o " + d + "/" + std::string(252, 'c') + ".h5");
  EXPECT_EQ(one.code, 2) << one.err;
  EXPECT_NE(one.err.find("the name is too long for its commit files (as '" + std::string(252, 'c') +
                         ".h5.ffffffff.commit'"),
            std::string::npos)
      << one.err;
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(d)) files += e.is_regular_file();
  EXPECT_EQ(files, 3u) << "only the spec, the layout and the store";
  // Names that fit save as usual.
  const Proc ok = Exec("reshard " + store + " --layout " + layout + " -q -o " + d + "/" +
                       std::string(200, 'p') + ".h5");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// A distributed save whose master was renamed keeps its rank files' names; a later save to
// the old name replaces its own save only (removing every "<old name>.<id>.rank<r>.h5" would
// lose the renamed save). The replaced save's own rank files are still removed.
TEST(Cli, ASaveToTheNameOfARenamedMasterKeepsTheRenamedSave) {
  const std::string d = TempDir() + "/renamed";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = Write("renamed/spec.json", kSpec),
                    layout = Write("renamed/layout.json", kLayout);
  const std::string store = d + "/m.h5";
  ASSERT_EQ(Exec("init --spec " + spec + " -o " + store).code, 0);
  ASSERT_EQ(Exec("export " + store + " -o " + d + "/m.safetensors").code, 0);
  ASSERT_EQ(Exec("import " + d + "/m.safetensors -o " + d + "/dense.h5").code,
            0);  // dense: rank files
  auto rank_files = [&d](const std::string& master) {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(d)) {
      const std::string f = e.path().filename();
      n += f.rfind(master + ".", 0) == 0 && f.size() > 3 && f.compare(f.size() - 3, 3, ".h5") == 0;
    }
    return n;
  };
  const std::string a = d + "/a.h5", keep = d + "/keep.h5";
  ASSERT_EQ(Exec("reshard " + d + "/dense.h5 --layout " + layout + " -q -o " + a).code, 0);
  const size_t per_save = rank_files("a.h5");
  ASSERT_GT(per_save, 0u);
  ASSERT_EQ(std::rename(a.c_str(), keep.c_str()), 0);
  ASSERT_EQ(Exec("verify " + keep).code, 0);
  ASSERT_EQ(Exec("reshard " + d + "/dense.h5 --layout " + layout + " -q -o " + a).code, 0);
  const Proc v = Exec("verify " + keep);
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  EXPECT_EQ(Exec("diff " + keep + " " + spec).code, 0);
  EXPECT_EQ(rank_files("a.h5"), 2 * per_save);  // keep.h5's and the new a.h5's
  // Replacing a.h5 again removes a.h5's replaced rank files, not keep.h5's.
  ASSERT_EQ(Exec("reshard " + d + "/dense.h5 --layout " + layout + " -q -o " + a).code, 0);
  EXPECT_EQ(rank_files("a.h5"), 2 * per_save);
  EXPECT_EQ(Exec("verify " + keep).code, 0);
  EXPECT_EQ(Exec("verify " + a).code, 0);
}

// One-file writers (import, init, export, reshard --consolidate) honour a distributed save's
// writer lock "<P>.lock": while another live process holds it, writing P is refused, named,
// and P is untouched (an import renamed over P mid-save would make the save fail as
// "bad-index" and leave its rank files). A lock file nobody holds (its writer was killed) does
// not stop them, whatever it records.
TEST(Cli, OneFileWritersHonourASavesWriterLock) {
  const std::string d = TempDir() + "/locked";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = Write("locked/spec.json", kSpec), p = d + "/p.h5",
                    st = d + "/m.safetensors";
  ASSERT_EQ(Exec("export " + spec + " -o " + st).code, 0);
  ASSERT_EQ(Exec("init --spec " + spec + " -o " + p).code, 0);
  const std::string before = ReadFile(p);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string live = "pid " + std::to_string(::getpid()) + " on " + host;  // this test: alive
  for (const std::string& holder : {live, std::string("pid 4242 on another-host.example")}) {
    testutil::HeldWriterLock held(p + ".lock", holder);  // this test process holds it
    ASSERT_TRUE(held.ok());
    for (const std::string& cmd : {"import " + st + " -o " + p, "init --spec " + spec + " -o " + p,
                                   "export " + spec + " --format safetensors -o " + p,
                                   "reshard " + spec + " --consolidate -q -o " + p}) {
      const Proc r = Exec(cmd);
      EXPECT_EQ(r.code, 5) << cmd << "\n" << r.err;
      EXPECT_NE(r.err.find("writer-locked: '" + p + "'"), std::string::npos) << cmd << "\n"
                                                                             << r.err;
      EXPECT_NE(r.err.find(holder), std::string::npos) << cmd << "\n" << r.err;
      EXPECT_EQ(ReadFile(p), before) << cmd;
    }
  }
  // A lock file its holder left (released: the holder ended), even one that names a live
  // process: an interrupted save's; every one-file write goes ahead, and leaves the file.
  ASSERT_TRUE(std::filesystem::exists(p + ".lock"));
  ASSERT_NE(ReadFile(p + ".lock").find("another-host"), std::string::npos);
  for (const std::string& holder : {std::string("pid 4242 on another-host.example"), live}) {
    std::ofstream(p + ".lock", std::ios::trunc) << holder << "\n";  // held by nobody
    for (const std::string& cmd : {"import " + st + " -o " + p, "init --spec " + spec + " -o " + p,
                                   "export " + spec + " --format safetensors -o " + p}) {
      struct stat before_cmd, after_cmd;
      ASSERT_EQ(::stat(p.c_str(), &before_cmd), 0);
      const Proc ok = Exec(cmd);
      EXPECT_EQ(ok.code, 0) << holder << ": " << cmd << "\n" << ok.err;
      ASSERT_EQ(::stat(p.c_str(), &after_cmd), 0);
      EXPECT_NE(after_cmd.st_ino, before_cmd.st_ino) << holder << ": " << cmd << ": P replaced";
      EXPECT_EQ(Exec("diff " + p + " " + spec).code, 0) << holder << ": " << cmd;
      EXPECT_EQ(ReadFile(p + ".lock"), holder + "\n") << cmd;
    }
  }
  std::filesystem::remove(p + ".lock");
}

// The previous save's files are removed only once the commit is durable (docs/FORMAT.md 10,
// "Writing", steps 5-6): when the fsync of the folder after the rename fails (the test fault
// "0:sync-commit:fail", as EIO), the save is committed -- exit 0, P holds it and verifies -- and
// a warning names the folder, but the replaced save's rank files stay. The next save whose
// commit is durable removes them.
TEST(Cli, AFailedFsyncAfterTheCommitKeepsTheReplacedSavesFiles) {
  const std::string d = TempDir() + "/unsynced";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = Write("unsynced/spec.json", kSpec),
                    layout = Write("unsynced/layout.json", kLayout);
  ASSERT_EQ(Exec("export " + spec + " -o " + d + "/m.safetensors").code, 0);
  ASSERT_EQ(Exec("import " + d + "/m.safetensors -o " + d + "/dense.h5").code, 0);
  const std::string a = d + "/a.h5",
                    save = "reshard " + d + "/dense.h5 --layout " + layout + " -q -o " + a;
  // The save ids of the rank files "a.h5.<id>.rank<r>.h5" in the folder, and their count.
  auto ids = [&d]() {
    std::map<std::string, int> found;
    for (const auto& e : std::filesystem::directory_iterator(d)) {
      const std::string f = e.path().filename();
      if (f.rfind("a.h5.", 0) == 0 && f.find(".rank") == 13) ++found[f.substr(5, 8)];
    }
    return found;
  };
  ASSERT_EQ(Exec(save).code, 0);
  const auto first = ids();
  ASSERT_EQ(first.size(), 1u);
  ASSERT_GT(first.begin()->second, 0);

  ASSERT_EQ(::setenv("SEEDSTORE_TEST_FAULT", "0:sync-commit:fail", 1), 0);
  const Proc unsynced = Exec(save);
  ::unsetenv("SEEDSTORE_TEST_FAULT");
  EXPECT_EQ(unsynced.code, 0) << unsynced.err;
  EXPECT_NE(unsynced.err.find("warning: fsync of folder '"), std::string::npos) << unsynced.err;
  EXPECT_NE(unsynced.err.find("unsynced' failed: Input/output error: the save '"),
            std::string::npos)
      << unsynced.err;
  EXPECT_NE(unsynced.err.find("the files of the save it replaced are kept"), std::string::npos)
      << unsynced.err;
  const auto second = ids();
  EXPECT_EQ(second.size(), 2u);
  EXPECT_EQ(second.count(first.begin()->first), 1u) << "the replaced save's rank files stay";
  EXPECT_EQ(second.at(first.begin()->first), first.begin()->second);
  const Proc v = Exec("verify " + a);
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  EXPECT_EQ(Exec("diff " + a + " " + spec).code, 0);

  const Proc synced = Exec(save);
  EXPECT_EQ(synced.code, 0) << synced.err;
  EXPECT_EQ(synced.err.find("warning"), std::string::npos) << synced.err;
  const auto third = ids();
  ASSERT_EQ(third.size(), 1u);  // both replaced saves' rank files removed
  EXPECT_EQ(second.count(third.begin()->first), 0u);
  EXPECT_EQ(Exec("verify " + a).code, 0);
}

}  // namespace
}  // namespace seedstore
