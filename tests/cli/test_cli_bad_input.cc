// Bad input through the CLI (I5): a named error and exit code, never INTERNAL -- unreadable and
// missing inputs, pipes, wrong kinds of input, rank files that are not files, dims of 2^63 or
// more, directories as sources, shards too large for memory, empty tensor names.
#include "tests/cli/cli_test_util.h"

namespace seedstore {
namespace {

using namespace clitest;  // NOLINT

TEST(Cli, BadInputGivesNamedErrorAndExitCode) {
  struct Case {
    std::string args, needle;
    int code;
  };
  const std::string spec = Write("spec.json", kSpec);
  const std::string layout = Write("layout.json", kLayout);
  const std::string twice = Write(
      "twice.json",
      R"({"mesh": {"axes": ["a"], "shape": [2]}, "placements": [{"match": "*", "spec": ["a", "a"]}]})");
  const Case cases[] = {
      {"gen --shape 3 --dtype float99", "unknown dtype 'float99'", 2},
      {"gen --shape 3 --init '{\"dist\":\"cauchy\"}'", "unknown distribution 'cauchy'", 2},
      {"gen --shape 3 --init '{\"dist\":'", "--init: malformed JSON", 2},
      {"gen --shape -3", "--shape", 2},
      {"gen --shape 4294967296,4294967296", "overflows", 2},
      {"gen --shape 3 --init '{\"dist\":\"truncated_normal\",\"lower\":2,\"upper\":1}'", "lower (2",
       2},
      {"gen --shape 3 --box 0:4", "outside the tensor", 2},
      {"gen --shape 3 --key 1", "--key '1'", 2},
      {"fingerprint /nonexistent/spec.json", "cannot open", 3},
      {"fingerprint " + spec + " --layout " + layout + " --rank 8", "--rank 8 is outside the mesh",
       2},
      {"fingerprint " + spec + " --layout " + twice + " --rank 0", "used twice", 2},
      {"materialize " + spec + " --layout " + layout + " --rank -1 -o /tmp/x.safetensors",
       "--rank: -1 is out of range", 2},
  };
  for (const auto& c : cases) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;  // never a crash
  }
}

// An input that exists but cannot be read -- a safetensors file, an index, a spec, a layout, a
// store -- is IO_ERROR (exit 5) naming the file and the reason; NOT_FOUND (exit 3) only when it
// does not exist (not "NOT_FOUND: ... cannot open", no reason, for a file mode 600 read by
// another user). Run as user nobody (setpriv), since root reads any file.
TEST(Cli, UnreadableInputsAreIoErrorsAndMissingOnesNotFound) {
  const std::string nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  if (Shell(nobody + "true && echo ok") != "ok\n")
    GTEST_SKIP()
        << "not run: cannot run a command as another user here (setpriv missing or not root)";
  const std::string d = TempDir() + "/unreadable";
  ASSERT_EQ(
      std::system(("mkdir -p " + d + " && chmod 711 " + TempDir() + " && chmod 755 " + d).c_str()),
      0);
  const std::string spec = d + "/spec.json", layout = d + "/layout.json", st = d + "/w.safetensors";
  std::ofstream(spec) << kSpec;
  std::ofstream(layout) << kLayout;
  ASSERT_EQ(Exec("export " + spec + " -o " + st).code, 0);
  ASSERT_EQ(Exec("init --spec " + spec + " -o " + d + "/m.h5").code, 0);
  std::ofstream(d + "/i.index.json") << R"({"weight_map": {"norm": "w.safetensors"}})";
  const std::string ok_spec = d + "/ok.json";  // readable, for the unreadable layout
  std::ofstream(ok_spec) << kSpec;
  std::ofstream(d + "/ok.index.json") << R"({"weight_map": {"norm": "w.safetensors"}})";
  ASSERT_EQ(std::system(("chmod 600 " + spec + " " + layout + " " + st + " " + d + "/m.h5 " + d +
                         "/i.index.json && chmod 644 " + ok_spec + " " + d + "/ok.index.json")
                            .c_str()),
            0);
  if (Shell(nobody + "cat " + spec + " >/dev/null 2>&1 && echo readable").find("readable") !=
      std::string::npos)
    GTEST_SKIP() << "not run: user nobody can read a file of mode 600 here";
  struct Case {
    std::string args, needle;
  };
  const std::string denied = "': cannot open: Permission denied";
  const Case cases[] = {
      {"fingerprint " + st, "IO_ERROR: safetensors file '" + st + denied},
      {"fingerprint " + d + "/i.index.json", "IO_ERROR: file '" + d + "/i.index.json" + denied},
      {"fingerprint " + d + "/ok.index.json", "safetensors file '" + st + denied},
      {"import " + st + " -o " + d + "/out.h5", "safetensors file '" + st + denied},
      {"fingerprint " + spec, "IO_ERROR: file '" + spec + denied},
      {"init --spec " + spec + " -o " + d + "/out.h5", "IO_ERROR: spec file '" + spec + denied},
      {"fingerprint " + ok_spec + " --layout " + layout + " --rank 0",
       "IO_ERROR: layout file '" + layout + denied},
      {"inspect " + d + "/m.h5", "IO_ERROR: file '" + d + "/m.h5" + denied},
  };
  for (const auto& c : cases) {
    const std::string log = Shell(nobody + Bin() + " " + c.args + "; echo rc=$?");
    EXPECT_NE(log.find(c.needle), std::string::npos) << c.args << "\n" << log;
    EXPECT_NE(log.find("rc=5"), std::string::npos) << c.args << "\n" << log;
  }
  const std::string none = "': cannot open: No such file or directory";
  const Case missing[] = {
      {"fingerprint " + d + "/no.safetensors",
       "NOT_FOUND: safetensors file '" + d + "/no.safetensors" + none},
      {"fingerprint " + d + "/no.json", "NOT_FOUND: file '" + d + "/no.json" + none},
      {"init --spec " + d + "/no.json -o " + d + "/out.h5",
       "NOT_FOUND: spec file '" + d + "/no.json" + none},
      {"fingerprint " + ok_spec + " --layout " + d + "/no.json --rank 0",
       "NOT_FOUND: layout file '" + d + "/no.json" + none},
      {"inspect " + d + "/no.h5", "NOT_FOUND: file '" + d + "/no.h5" + none},
  };
  for (const auto& c : missing) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, 3) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
  }
}

// A spec or a layout may come from a pipe (`<(...)`, /dev/stdin, a named FIFO): read once,
// as a spec (`inspect <(cat spec.json)` must not say "not an HDF5 file" by reading the pipe
// while guessing its kind). What is read by seeking -- a store, a distributed save, a
// safetensors file, an index naming files next to it -- given as a pipe is refused at once,
// naming it (a FIFO with no writer yet would hang the command in HDF5's open).
TEST(Cli, ASpecOrALayoutMayComeFromAPipeAndNothingElseHangsOnOne) {
  const std::string d = TempDir() + "/pipes";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = Write("pipes/spec.json", kSpec),
                    layout = Write("pipes/layout.json", kLayout);
  const Proc want = Exec("fingerprint " + spec + " --layout " + layout + " --rank 3 --json");
  ASSERT_EQ(want.code, 0) << want.err;
  const std::string b = Bin();
  EXPECT_EQ(Shell("bash -c '" + b + " fingerprint <(cat " + spec + ") --layout <(cat " + layout +
                  ") --rank 3 --json 2>/dev/null'"),
            want.out);
  EXPECT_EQ(Shell("cat " + spec + " | " + b + " fingerprint /dev/stdin --layout " + layout +
                  " --rank 3 --json"),
            want.out);
  const Proc inspect = Exec("inspect " + spec);
  ASSERT_EQ(inspect.code, 0);
  const std::string fifo = d + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(Shell("cat " + spec + " > " + fifo + " & " + b + " inspect " + fifo).find("norm"),
            std::string::npos);
  // Not a spec: named as a pipe.
  const std::string junk = Shell("bash -c '" + b + " inspect <(echo junk); echo rc=$?'");
  EXPECT_NE(
      junk.find("is a pipe (FIFO): of the model sources only a spec (JSON) can be read from one"),
      std::string::npos)
      << junk;
  EXPECT_NE(junk.find("malformed JSON"), std::string::npos) << junk;
  EXPECT_NE(junk.find("rc=2"), std::string::npos) << junk;
  // What must be seeked: refused at once, though the FIFO has no writer (each under `timeout`:
  // a hang fails the case with rc=124 rather than the suite).
  const std::string fifo_st = d + "/fifo.safetensors", fifo_index = d + "/fifo.index.json";
  ASSERT_EQ(::mkfifo(fifo_st.c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(fifo_index.c_str(), 0600), 0);
  struct Case {
    std::string args, needle;
  };
  const Case cases[] = {
      {"verify " + fifo,
       "file '" + fifo + "': is a pipe (FIFO), not a store: a store is read by seeking"},
      {"import " + fifo_st + " -o " + d + "/out.h5",
       "safetensors file '" + fifo_st +
           "' is a pipe (FIFO), not a regular file: safetensors files are read by seeking"},
      {"import " + fifo_index + " -o " + d + "/out.h5",
       "index file '" + fifo_index +
           "' is a pipe (FIFO), not a regular file: an index names the files next to it"},
      {"fingerprint " + fifo_st, "safetensors file '" + fifo_st + "' is a pipe (FIFO)"},
  };
  for (const auto& c : cases) {
    const std::string log = Shell("timeout 20 " + b + " " + c.args + "; echo rc=$?");
    EXPECT_NE(log.find(c.needle), std::string::npos) << c.args << "\n" << log;
    EXPECT_NE(log.find("rc=2"), std::string::npos) << c.args << "\n" << log;
  }
}

// Inputs of the wrong kind, or beyond what seedstore reads, are named as such -- not CORRUPT, a
// damaged file's error (not `import m.h5`: "header length ... exceeds the limit", nor
// `verify spec.json`: not-hdf5) -- and options that would be ignored are refused.
TEST(Cli, WrongKindsOfInputAreNamedNotCorrupt) {
  const std::string d = TempDir() + "/kinds";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = Write("kinds/spec.json", kSpec), store = d + "/m.h5",
                    st = d + "/m.safetensors";
  ASSERT_EQ(Exec("init --spec " + spec + " -o " + store).code, 0);
  ASSERT_EQ(Exec("export " + spec + " -o " + st).code, 0);
  struct Case {
    std::string args, needle;
    int code;
  };
  const Case cases[] = {
      {"import " + store + " -o " + d + "/out.h5",
       "is an HDF5 file (a seedstore store or distributed save?), not safetensors", 2},
      {"verify " + spec, "is a spec (JSON), not a seedstore store: it stores no data", 6},
      {"export " + spec + " -o " + d + "/o.safetensors --max-shard-size ''",
       "--max-shard-size: empty: give a size such as 5GB", 2},
      {"import " + st + " -o " + store + " --update --seed 3", "--update excludes --seed", 2},
  };
  for (const auto& c : cases) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(d + "/out.h5"));
  EXPECT_FALSE(std::filesystem::exists(d + "/o.safetensors"));
  // --update names both shapes and dtypes when they differ.
  const std::string other = Write("kinds/other.json", R"({"seedstore": 1, "tensors": [
    {"name": "norm", "shape": [11], "dtype": "float32", "init": {"dist": "ones"}}]})");
  ASSERT_EQ(Exec("export " + other + " -o " + d + "/norm.safetensors").code, 0);
  const std::string before = ReadFile(store);
  const Proc u = Exec("import " + d + "/norm.safetensors -o " + store + " --update");
  EXPECT_EQ(u.code, 2) << u.err;
  EXPECT_NE(u.err.find("tensor 'norm' is [11] float32; the store's is [10] float32"),
            std::string::npos)
      << u.err;
  EXPECT_EQ(ReadFile(store), before);
  // safetensors by any name (export -o writes any) is read as safetensors, by its first bytes
  // (not CORRUPT not-hdf5 from inspect and diff of export's own output).
  ASSERT_EQ(Exec("export " + spec + " -o " + d + "/odd.h5").code, 0);
  const Proc i = Exec("inspect " + d + "/odd.h5");
  EXPECT_EQ(i.code, 0) << i.err;
  EXPECT_NE(i.out.find("safetensors in 1 file"), std::string::npos) << i.out;
  EXPECT_EQ(Exec("diff " + d + "/odd.h5 " + spec).code, 0);
  EXPECT_EQ(Exec("verify " + d + "/odd.h5").code, 6);
}

// A save whose rank file has become a directory or a pipe is damaged: CORRUPT
// (rank-file-corrupt, exit 4), named, and read at once (not INVALID_ARGUMENT, exit 2, as if
// the user had given a bad argument).
TEST(Cli, ARankFileThatIsNotAFileIsCorruptNotAnArgument) {
  const std::string d = TempDir() + "/rank_kinds";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = Write("rank_kinds/spec.json", kSpec),
                    layout = Write("rank_kinds/layout.json", kLayout);
  ASSERT_EQ(Exec("export " + spec + " -o " + d + "/m.safetensors").code, 0);
  ASSERT_EQ(Exec("import " + d + "/m.safetensors -o " + d + "/dense.h5").code, 0);
  const std::string p = d + "/p.h5";
  ASSERT_EQ(Exec("reshard " + d + "/dense.h5 --layout " + layout + " -q -o " + p).code, 0);
  std::string rank1;
  for (const auto& e : std::filesystem::directory_iterator(d)) {
    const std::string n = e.path().filename();
    if (n.rfind("p.h5.", 0) == 0 && n.size() > 9 && n.substr(n.size() - 9) == ".rank1.h5")
      rank1 = e.path();
  }
  ASSERT_FALSE(rank1.empty());
  ASSERT_EQ(std::rename(rank1.c_str(), (d + "/rank1.bak").c_str()), 0);
  ASSERT_TRUE(std::filesystem::create_directory(rank1));
  for (const std::string& cmd : {"verify " + p, "export " + p + " -o " + d + "/e.safetensors"}) {
    const Proc r = Exec(cmd);
    EXPECT_EQ(r.code, 4) << cmd << "\n" << r.err;
    const std::string all = r.out + r.err;  // verify lists its problems on stdout
    EXPECT_NE(all.find("rank-file-corrupt"), std::string::npos) << cmd << "\n" << all;
    EXPECT_NE(all.find("is a directory"), std::string::npos) << cmd << "\n" << all;
  }
  std::filesystem::remove(rank1);
  ASSERT_EQ(::mkfifo(rank1.c_str(), 0600), 0);
  const std::string log =
      Shell("timeout 20 " + Bin() + " export " + p + " -o " + d + "/e.safetensors; echo rc=$?");
  EXPECT_NE(log.find("rank-file-corrupt"), std::string::npos) << log;
  EXPECT_NE(log.find("rc=4"), std::string::npos) << log;
  std::filesystem::remove(rank1);
  ASSERT_EQ(std::rename((d + "/rank1.bak").c_str(), rank1.c_str()), 0);
  EXPECT_EQ(Exec("verify " + p).code, 0);
}

// One rule for a dimension, wherever a shape is read, whether the tensor has elements or not:
// at most 2^63 - 1, refused otherwise naming the tensor, the dim and the limit (so [0, 2^63]
// does not pass fingerprint/diff and fail import inside HDF5, [2^64 - 1, 0] is not "more than
// 2^62 bytes", a spec dim 2^63 is not "expected a non-negative integer").
TEST(Cli, DimensionsOf2To63OrMoreAreRefusedEverywhere) {
  const std::string big = EmptyTensorFile("dim63.safetensors", "[0, 9223372036854775808]");
  const std::string huge = EmptyTensorFile("dim64.safetensors", "[18446744073709551615, 0]");
  const std::string ok = EmptyTensorFile("dimok.safetensors", "[0, 9223372036854775807]");
  const std::string store = TempDir() + "/dim.h5";
  for (const std::string& cmd :
       {"fingerprint " + big, "diff " + big + " " + ok, "import " + big + " -o " + store}) {
    const Proc r = Exec(cmd);
    EXPECT_EQ(r.code, 4) << cmd << "\n" << r.err;
    EXPECT_NE(
        r.err.find("tensor 't': shape: dim 1 is 9223372036854775808, more than the limit 2^63 - 1"),
        std::string::npos)
        << cmd << "\n"
        << r.err;
  }
  const Proc h = Exec("import " + huge + " -o " + store);
  EXPECT_EQ(h.code, 4) << h.err;
  EXPECT_NE(h.err.find("dim 0 is 18446744073709551615, more than the limit 2^63 - 1"),
            std::string::npos)
      << h.err;
  const Proc spec = Exec("fingerprint " + Write("dim.json", R"({"seedstore": 1, "tensors": [
    {"name": "e", "shape": [0, 9223372036854775808], "dtype": "float32", "init": {"dist": "zeros"}}]})"));
  EXPECT_EQ(spec.code, 2) << spec.err;
  EXPECT_NE(
      spec.err.find("('e').shape: dim 1 is 9223372036854775808, more than the limit 2^63 - 1"),
      std::string::npos)
      << spec.err;
  const Proc g = Exec("gen --shape 0,9223372036854775808");
  EXPECT_EQ(g.code, 2) << g.err;
  EXPECT_NE(g.err.find("--shape: dim 1 is 9223372036854775808, more than the limit 2^63 - 1"),
            std::string::npos)
      << g.err;
  // The limit itself is a valid (empty) tensor, end to end.
  const Proc i = Exec("import " + ok + " -o " + store);
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_EQ(Exec("verify " + store).code, 0);
  EXPECT_EQ(Exec("diff " + store + " " + ok).code, 0);
}

// A directory given where a model source is expected is named as the wrong kind of path
// (exit 2), not reported as a corrupt HDF5 file (exit 4).
TEST(Cli, DirectoryAsSourceIsTheWrongKindOfPath) {
  const std::string d = TempDir() + "/adir";
  ASSERT_EQ(std::system(("mkdir -p " + d + " " + d + ".json " + d + ".safetensors").c_str()), 0);
  for (const std::string& src : {d, d + ".json", d + ".safetensors"}) {
    for (const std::string& cmd : {std::string("inspect "), std::string("fingerprint "),
                                   "export -o " + TempDir() + "/adir.out.safetensors "}) {
      const Proc r = Exec(cmd + src);
      EXPECT_EQ(r.code, 2) << cmd << src << "\n" << r.err;
      EXPECT_NE(r.err.find("'" + src + "' is a directory, not a model source"), std::string::npos)
          << r.err;
    }
  }
  const Proc v = Exec("verify " + d);
  EXPECT_EQ(v.code, 2) << v.err;
  EXPECT_NE(v.err.find("file '" + d + "': is a directory, not a store"), std::string::npos)
      << v.err;
  const Proc diff = Exec("diff " + d + " " + d + ".json");
  EXPECT_EQ(diff.code, 2) << diff.err;
  EXPECT_NE(diff.err.find("is a directory"), std::string::npos) << diff.err;
}

TEST(BadInput, AShardTooLargeForMemoryIsRefusedUpFront) {
  // 2^60 float32 elements: 4 EiB, refused before any is allocated, naming tensor and bytes.
  const std::string spec = Write("huge.json", R"({"seedstore": 1, "seed": 1, "tensors": [
      {"name": "huge.w", "shape": [1152921504606846976], "dtype": "float32", "init": {"dist": "normal"}}]})");
  const std::string layout =
      Write("one.json", R"({"mesh": {"axes": ["d"], "shape": [1]}, "placements": []})");
  const std::string out = TempDir() + "/huge.safetensors", save = TempDir() + "/huge-save.h5";
  for (const std::string& args :
       {"export " + spec + " -o " + out,
        "materialize " + spec + " --layout " + layout + " --rank 0 -o " + out,
        std::string("gen --shape 1152921504606846976"),
        "save-ranks " + spec + " --layout " + layout + " -o " + save,
        "verify-ranks " + spec + " --layout " + layout + " --simulate flip --simulate-rank 0",
        "verify-ranks " + spec + " --layout " + layout +
            " --simulate layout-rng --simulate-rank 0"}) {
    const Proc r = Exec(args);
    EXPECT_EQ(r.code, 6) << args << ": " << r.err;  // UNSUPPORTED
    EXPECT_NE(r.err.find("needs 4611686018427387904 bytes in memory"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(args[0] == 'g' ? "tensor 'tensor'" : "tensor 'huge.w'"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("INTERNAL"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  // save-ranks writes nothing, not even its lock, rank files or temporaries.
  for (const auto& e : std::filesystem::directory_iterator(TempDir()))
    EXPECT_EQ(e.path().filename().string().rfind("huge-save.h5", 0), std::string::npos) << e.path();
}

TEST(BadInput, ASpecOrLayoutFromAPipeHasASizeLimit) {
  // 64 MiB + 1 byte of JSON whitespace from a pipe: refused at the limit, naming the file.
  const std::string big = "<(head -c 67108865 /dev/zero | tr '\\0' ' ')";
  for (const std::string& args :
       {"inspect " + big, "materialize " + Write("s2.json", kSpec) + " --layout " + big +
                              " --rank 0 -o " + TempDir() + "/p.safetensors"}) {
    const std::string cmd = "bash -c \"'" + Bin() + "' " + args + "\" 2>" + TempDir() + "/pipe.err";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[4096];
    while (fread(buf, 1, sizeof buf, p) > 0) {
    }
    const int st = pclose(p);
    const std::string err = ReadFile(TempDir() + "/pipe.err");
    EXPECT_EQ(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 2) << args << ": " << err;  // INVALID_ARGUMENT
    EXPECT_NE(err.find("longer than 67108864 bytes (64 MiB)"), std::string::npos) << err;
    EXPECT_NE(err.find("/dev/fd/"), std::string::npos) << "names the file: " << err;
  }
}

TEST(BadInput, AnEmptyTensorNameIsRefusedByEveryCommand) {
  // A valid safetensors file (the reference reads it) holding a tensor named "".
  const std::string header = R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  std::string bytes(8, '\0');
  for (int k = 0; k < 8; ++k) bytes[k] = static_cast<char>((header.size() >> (8 * k)) & 0xff);
  bytes += header + std::string(8, '\0');
  const std::string st = Write("empty-name.safetensors", bytes);
  const std::string layout =
      Write("one3.json", R"({"mesh": {"axes": ["d"], "shape": [1]}, "placements": []})");
  const std::string o = TempDir() + "/empty-out";
  for (const std::string& args :
       {"inspect " + st, "fingerprint " + st, "export " + st + " -o " + o + ".safetensors",
        "import " + st + " -o " + o + ".h5",
        "materialize " + st + " --layout " + layout + " --rank 0 -o " + o + ".safetensors",
        "reshard " + st + " --layout " + layout + " -o " + o + ".h5", "diff " + st + " " + st}) {
    const Proc r = Exec(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find("empty name"), std::string::npos) << args << ": " << r.err;
  }
}

TEST(BadInput, AnEmptyTensorNameInASpecIsRefusedByEveryCommand) {
  // The second tensor of a JSON spec is named "": refused by position, before anything is
  // written.
  const std::string spec = Write("empty-name.json", R"({"seedstore": 1, "seed": 1, "tensors": [
      {"name": "a", "shape": [4], "dtype": "float32", "init": {"dist": "normal"}},
      {"name": "", "shape": [4], "dtype": "float32", "init": {"dist": "normal"}}]})");
  const std::string layout =
      Write("one4.json", R"({"mesh": {"axes": ["d"], "shape": [1]}, "placements": []})");
  const std::string o = TempDir() + "/empty-spec-out";
  for (const std::string& args :
       {"inspect " + spec, "fingerprint " + spec, "init --spec " + spec + " -o " + o + ".h5",
        "export " + spec + " -o " + o + ".safetensors",
        "materialize " + spec + " --layout " + layout + " --rank 0 -o " + o + ".safetensors",
        "reshard " + spec + " --layout " + layout + " -o " + o + ".h5",
        "diff " + spec + " " + spec}) {
    const Proc r = Exec(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find("tensors[1].name: an empty name"), std::string::npos)
        << args << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(o + ".h5")) << args;
    EXPECT_FALSE(std::filesystem::exists(o + ".safetensors")) << args;
  }
}

TEST(BadInput, ReshardOfLazyTensorsChecksTheLayoutAgainstThem) {
  // A placement with more entries than a lazy tensor's rank: refused as for a dense one.
  const std::string spec = Write("lazy-only.json", kSpec);
  const std::string layout = Write("too-long.json", R"({"mesh": {"axes": ["d"], "shape": [2]},
      "placements": [{"match": "norm", "spec": ["d", null]}]})");
  const std::string out = TempDir() + "/lazy-resharded.h5";
  const Proc r = Exec("reshard " + spec + " --layout " + layout + " -o " + out);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("tensor 'norm' of shape [10]: spec has 2 entries"), std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace seedstore
