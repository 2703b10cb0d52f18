// Invariant I5 over whole files: a store holding every kind of record (lazy tensors, dense
// ones of several dtypes in many chunks, a 0-d, an empty and a contiguous one), and the master
// and a rank file of a distributed save of it, have one bit flipped at a time, at a sample of
// offsets spread over the whole file plus every byte of its first and last 256. For each, in a
// forked child (so a crash or a hang is caught and named by its offset, never taken down with
// the test):
//   * opening fails with an error naming the flipped file, or
//   * every tensor reads back with its exact bytes and fingerprint, or fails with an error
//     naming the tensor -- never a silent wrong answer -- and
//   * Verify then reports a problem naming the flipped file whenever a read failed (it checks
//     at least what reads check).
// A flip that nothing detects must be one that changes no tensor: its reads are exact. Each file
// is also truncated at 65 lengths (0 and every 1/64 of it): always refused or named.
//
// SEEDSTORE_FLIP_EVERY (default: ~200 offsets per file) samples every Nth byte instead; 1
// sweeps them all.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>
#include "gtest/gtest.h"
#include "io/dist_store.h"
#include "io/h5store.h"
#include "io/open.h"
#include "store/spec.h"
#include "tests/store_test_util.h"

namespace seedstore {
namespace {

using testutil::RandomBytes;
using testutil::TempDir;

struct Tensor {
  std::string name;
  std::vector<uint64_t> shape;
  DType dtype;
  std::vector<uint8_t> bytes;  // empty for lazy ones until materialized below
};

// Exit codes of the child.
enum : int {
  kOpenRefused = 10,  // Open failed with a named error
  kDetected = 11,     // some read failed (named) and Verify reported a problem
  kVerifyOnly = 12,   // every read exact; Verify reported a problem (e.g. a table's spare bytes)
  kHarmless = 13,     // every read exact, Verify clean
  kWrong = 1,         // a silent wrong answer, or an unnamed error: the child printed why
};

// Opens the catalog at `path` (a store or a distributed save) whose file `flipped` has a
// flipped bit, reads and verifies it; returns one of the codes above.
int Child(const std::string& path, const std::string& flipped, const std::vector<Tensor>& want) {
  auto cat = OpenCatalog(path);
  if (!cat.ok()) {
    if (cat.status().message().find(flipped) == std::string::npos) {
      std::fprintf(stderr, "open error without the file name: %s\n",
                   cat.status().ToString().c_str());
      return kWrong;
    }
    return kOpenRefused;
  }
  const Catalog& c = **cat;
  bool read_failed = false;
  if (c.tensors().size() != want.size()) {
    std::fprintf(stderr, "opened with %zu tensors, not %zu\n", c.tensors().size(), want.size());
    return kWrong;
  }
  for (size_t i = 0; i < want.size(); ++i) {
    const TensorRecord& t = c.tensors()[i];
    if (t.name != want[i].name || t.shape != want[i].shape || t.dtype != want[i].dtype) {
      std::fprintf(stderr, "tensor %zu opened as '%s' of another shape or dtype\n", i,
                   t.name.c_str());
      return kWrong;
    }
    std::vector<uint8_t> got(want[i].bytes.size());
    const Status r = c.Read(i, WholeTensor(t.shape), got.data(), CpuOptions{1});
    if (!r.ok()) {
      if (r.message().find("'" + t.name + "'") == std::string::npos) {
        std::fprintf(stderr, "read error without the tensor name: %s\n", r.ToString().c_str());
        return kWrong;
      }
      read_failed = true;
      continue;
    }
    if (got != want[i].bytes) {
      std::fprintf(stderr, "tensor '%s' read back other bytes, and no error\n", t.name.c_str());
      return kWrong;
    }
    auto fp = c.FingerprintRegion(i, WholeTensor(t.shape), CpuOptions{1});
    if (fp.ok() && *fp != FingerprintOf(t, WholeTensor(t.shape), want[i].bytes.data())) {
      std::fprintf(stderr, "tensor '%s': wrong fingerprint, and no error\n", t.name.c_str());
      return kWrong;
    }
  }
  H5Store::VerifyReport rep;
  if (IsDistributedSave(path)) {
    auto d = DistCatalog::Open(path);
    if (!d.ok()) return kWrong;  // it opened above
    rep = (*d)->Verify(CpuOptions{1});
  } else {
    auto s = H5Store::Open(path);
    if (!s.ok()) return kWrong;
    rep = (*s)->Verify(CpuOptions{1});
  }
  bool named = false;
  for (const auto& p : rep.problems) named |= p.status.message().find(flipped) != std::string::npos;
  if (!rep.problems.empty() && !named) {
    std::fprintf(stderr, "verify problems, none naming the file: %s\n",
                 rep.problems[0].status.ToString().c_str());
    return kWrong;
  }
  if (read_failed && rep.problems.empty()) {
    std::fprintf(stderr, "a read failed but Verify found nothing\n");
    return kWrong;
  }
  return read_failed ? kDetected : rep.problems.empty() ? kHarmless : kVerifyOnly;
}

// Writes `bytes` over `file` (part of the catalog at `path`) and checks the catalog in a
// forked child as above; returns the child's code (-1: it died, reported). `what` names the
// damage in failures.
int CheckDamaged(const std::string& path, const std::string& file, const std::string& bytes,
                 const std::vector<Tensor>& want, const std::string& what) {
  {
    std::ofstream f(file, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << std::strerror(errno);
    return -1;
  }
  if (pid == 0) {
    alarm(20);  // a hang ends the child with SIGALRM
    _exit(Child(path, file, want));
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || WIFSIGNALED(status)) {
    ADD_FAILURE() << file << ": " << what << ": the reader died of signal " << WTERMSIG(status)
                  << (WTERMSIG(status) == SIGALRM ? " (hung)" : "");
    return -1;
  }
  const int code = WEXITSTATUS(status);
  if (code == kWrong || code < kOpenRefused || code > kHarmless)
    ADD_FAILURE() << file << ": " << what << ": exit " << code << " (see stderr)";
  return code;
}

// Flips one bit at a time in `file` (part of the catalog at `path`), then truncates it at a
// sample of lengths, checking each as above; restores the file.
void Sweep(const std::string& path, const std::string& file, const std::vector<Tensor>& want) {
  std::string original;
  {
    std::ifstream f(file, std::ios::binary);
    original.assign(std::istreambuf_iterator<char>(f), {});
  }
  ASSERT_EQ(Child(path, file, want), kHarmless) << "the untouched " << file;
  const size_t n = original.size();
  const char* every_env = std::getenv("SEEDSTORE_FLIP_EVERY");
  const size_t every = every_env ? std::max<size_t>(1, std::strtoull(every_env, nullptr, 10))
                                 : std::max<size_t>(1, n / 200);
  std::map<int, int> outcomes;
  size_t flips = 0;
  for (size_t o = 0; o < n; ++o) {
    if (!(o % every == every / 2 || o < 256 || o + 256 >= n)) continue;
    std::string bytes = original;
    bytes[o] ^= static_cast<char>(1u << (o * 7 % 8));
    ++outcomes[CheckDamaged(
        path, file, bytes, want,
        "bit flipped at byte " + std::to_string(o) + " of " + std::to_string(n))];
    ++flips;
  }
  // Truncated anywhere (a write cut short outside seedstore's atomic commit): refused or named,
  // never harmless -- every file ends in bytes a reader needs.
  size_t cuts = 0;
  for (size_t len = 0; len < n; len += std::max<size_t>(1, n / 64)) {
    const int code =
        CheckDamaged(path, file, original.substr(0, len), want,
                     "truncated to " + std::to_string(len) + " of " + std::to_string(n) + " bytes");
    if (code == kHarmless)
      ADD_FAILURE() << file << " truncated to " << len << " bytes went unnoticed";
    ++cuts;
  }
  {
    std::ofstream f(file, std::ios::binary | std::ios::trunc);
    f.write(original.data(), static_cast<std::streamsize>(original.size()));
  }
  std::printf(
      "[ flips    ] %s: %zu of %zu bytes: %d refused at open, %d named on read and by verify, "
      "%d by verify only, %d harmless (reads exact); %zu truncations refused or named\n",
      file.substr(file.rfind('/') + 1).c_str(), flips, n, outcomes[kOpenRefused],
      outcomes[kDetected], outcomes[kVerifyOnly], outcomes[kHarmless], cuts);
  EXPECT_GT(outcomes[kOpenRefused] + outcomes[kDetected] + outcomes[kVerifyOnly], 0);
}

// The files the sweeps damage: a store holding every kind of record (lazy tensors, dense ones of
// several dtypes in many chunks, a 0-d, an empty and a contiguous one), a store of lazy tensors
// only, and a distributed save of the first over two ranks (rows of the 2-d tensors, flat
// pieces of the rest): its master and rank 1's file.
struct SweepFiles {
  std::string store, lazy_store, save, rank1;
  std::vector<Tensor> tensors;  // the store's and the save's, bytes included
};

void MakeSweepFiles(const TempDir& dir, SweepFiles* f) {
  f->store = dir / "sweep.h5";
  f->lazy_store = dir / "lazy.h5";
  f->save = dir / "save.h5";
  f->tensors = {
      {"dense.bf16", {37, 29}, DType::kBF16, RandomBytes(37 * 29 * 2, 1)},
      {"dense.f32", {300}, DType::kF32, RandomBytes(300 * 4, 2)},
      {"dense.i8", {5, 7, 3}, DType::kI8, RandomBytes(105, 3)},
      {"scalar", {}, DType::kF64, RandomBytes(8, 4)},
      {"empty", {0, 4}, DType::kF32, {}},
      {"lazy.w", {16, 8}, DType::kBF16, {}},
      {"lazy.b", {5}, DType::kF32, {}},
  };
  auto spec = ModelSpec::Parse(R"({"seedstore": 1, "seed": 3, "tensors": [
      {"name": "lazy.w", "shape": [16, 8], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.02}},
      {"name": "lazy.b", "shape": [5], "dtype": "float32", "init": {"dist": "uniform"}},
      {"name": "lazy.t", "shape": [3, 7], "dtype": "float16", "init": {"dist": "normal", "scale": 0.5}}]})",
                               "sweep spec");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  {
    WriteOptions wo;
    wo.chunk_bytes = 128;  // many chunks, edge chunks in both dims
    auto w = StoreWriter::Create(f->store, spec->seed, Generator::kThreefry, wo);
    ASSERT_TRUE(w.ok());
    for (Tensor& t : f->tensors) {
      if (t.name.rfind("lazy.", 0) == 0) {
        const TensorSpec& ts = spec->tensors[spec->Find(t.name)];
        ASSERT_TRUE((*w)->AddLazy(ts).ok());
        auto l = LazyTensor::Resolve(ts, spec->seed);
        t.bytes.resize(l->RegionBytes(WholeTensor(t.shape)));
        ASSERT_TRUE(l->Materialize(WholeTensor(t.shape), t.bytes.data(), CpuOptions{1}).ok());
        continue;
      }
      ASSERT_TRUE(
          (*w)->AddDense(t.name, t.shape, t.dtype, static_cast<const void*>(t.bytes.data())).ok());
    }
    ASSERT_TRUE((*w)->Commit().ok());
  }
  {
    auto w = StoreWriter::Create(f->lazy_store, spec->seed);
    ASSERT_TRUE(w.ok());
    for (const TensorSpec& ts : spec->tensors) ASSERT_TRUE((*w)->AddLazy(ts).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  {
    auto layout = Layout::Parse(R"({"mesh": {"axes": ["data"], "shape": [2]},
        "placements": [{"match": "dense.bf16", "spec": ["data", null]},
                       {"match": "dense.*", "flat": ["data"]}]})");
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    auto src = OpenCatalog(f->store);
    ASSERT_TRUE(src.ok());
    auto comm = CreateSelfCollective();
    DistSaveOptions o;
    o.write.chunk_bytes = 128;
    auto rep = Reshard(*comm, **src, *layout, f->save, o);
    ASSERT_TRUE(rep.ok()) << rep.status().ToString();
    ASSERT_TRUE(rep->ok()) << rep->Table();
  }
  auto d = DistCatalog::Open(f->save);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  f->rank1 = (*d)->rank_files().at(1);
}

TEST(FlipSweep, EveryFlippedBitIsRefusedNamedOrHarmless) {
  TempDir dir;
  SweepFiles files;
  ASSERT_NO_FATAL_FAILURE(MakeSweepFiles(dir, &files));
  const std::string& path = files.store;
  const std::vector<Tensor>& tensors = files.tensors;
  Sweep(path, path, tensors);
  const std::string& save = files.save;
  const std::string& rank1 = files.rank1;
  Sweep(save, save, tensors);
  Sweep(save, rank1, tensors);

  // The master's global heap collection (its virtual datasets' mappings), every byte of its
  // first 2 KiB: HDF5 keeps no checksum there, and a flipped object size made libhdf5 1.10 loop
  // forever opening the dataset (found by SEEDSTORE_FLIP_EVERY=1: 4 such bytes in this master).
  // The master's seal (docs/FORMAT.md 10) refuses each before HDF5 reads it.
  std::string master;
  {
    std::ifstream f(save, std::ios::binary);
    master.assign(std::istreambuf_iterator<char>(f), {});
  }
  const size_t gcol = master.find("GCOL");
  ASSERT_NE(gcol, std::string::npos) << "no global heap collection in the master";
  int refused = 0;
  for (size_t o = gcol; o < std::min(master.size(), gcol + 2048); ++o) {
    std::string bytes = master;
    bytes[o] ^= static_cast<char>(1u << (o * 7 % 8));
    refused += CheckDamaged(save, save, bytes, tensors,
                            "heap bit flipped at byte " + std::to_string(o)) == kOpenRefused;
  }
  {
    std::ofstream f(save, std::ios::binary | std::ios::trunc);
    f.write(master.data(), static_cast<std::streamsize>(master.size()));
  }
  EXPECT_EQ(refused, static_cast<int>(std::min<size_t>(master.size() - gcol, 2048)));
}

// ---- The command line over damaged files ---------------------------------------------------
//
// Invariant I5 as a user meets it: one random byte of a file (a random non-zero XOR mask at a
// random offset, seeded) is damaged at a time, and `verify`, `inspect --json` and `export` of
// the store or save run on it. Each either exits 4 (CORRUPT) with a named error -- a name such
// as chunk-corrupt or rank-file-corrupt, the damaged file named, no source-file path -- or
// exits 0 with every output (stdout, the exported file) byte-identical to the undamaged run.
// Any other exit code, a signal or a hang fails. File kinds: a one-file store, a store of lazy
// tensors only, a distributed save's master and one of its rank files. SEEDSTORE_CLI_FLIPS sets
// the flips per kind (default 40: ~10 s on 2 cores), SEEDSTORE_CLI_FLIP_SEED the seed.

std::string CliPath() {
  if (const char* b = std::getenv("SEEDSTORE_BIN")) return b;
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const std::filesystem::path p = self.parent_path().parent_path() / "tools" / "seedstore";
  return std::filesystem::exists(p) ? p.string() : "";
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// One run of the command line: its exit code (-1: killed by a signal, -2: hung) and outputs.
struct CliRun {
  int rc = 0;
  std::string out, err, file;  // stdout, stderr, the file it wrote (if any)
};

// Starts `bin args...` with stdout and stderr into `stem`.out / .err.
pid_t Spawn(const std::string& bin, const std::vector<std::string>& args, const std::string& stem) {
  std::vector<char*> argv{const_cast<char*>(bin.c_str())};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, (stem + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&fa, 2, (stem + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  pid_t pid = -1;
  if (posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// Runs the commands at once (each a list of arguments; `outputs[k]` the file command k
// writes, or ""), waiting at most 60 s for each.
std::vector<CliRun> RunAll(const std::string& bin,
                           const std::vector<std::vector<std::string>>& cmds,
                           const std::vector<std::string>& outputs, const std::string& stem) {
  std::vector<pid_t> pids;
  for (size_t k = 0; k < cmds.size(); ++k) {
    if (!outputs[k].empty()) std::filesystem::remove(outputs[k]);
    pids.push_back(Spawn(bin, cmds[k], stem + std::to_string(k)));
  }
  std::vector<CliRun> runs(cmds.size());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (size_t k = 0; k < cmds.size(); ++k) {
    int status = 0;
    pid_t got = 0;
    while (pids[k] > 0 && (got = waitpid(pids[k], &status, WNOHANG)) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pids[k], SIGKILL);
        waitpid(pids[k], &status, 0);
        got = -2;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    runs[k].rc = got == -2 ? -2 : (pids[k] > 0 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
    runs[k].out = ReadAll(stem + std::to_string(k) + ".out");
    runs[k].err = ReadAll(stem + std::to_string(k) + ".err");
    if (!outputs[k].empty()) runs[k].file = ReadAll(outputs[k]);
  }
  return runs;
}

// Whether a failed run's report is a named corrupt error naming `file` (its base name) and no
// source file of seedstore: "CORRUPT: [tensor 'x': ]<name>: ... 'file' ...", on stderr or (verify's
// problems) stdout.
std::string WhyNotNamed(const CliRun& r, const std::string& file) {
  static const std::regex named(R"(CORRUPT: (tensor '[^']*': )?[a-z0-9]+(-[a-z0-9]+)+: )");
  static const std::regex source(R"(\.(cc|c|h|cu):[0-9])");
  const std::string text = r.err + r.out;
  if (!std::regex_search(text, named)) return "no named CORRUPT error";
  if (text.find(file.substr(file.rfind('/') + 1)) == std::string::npos)
    return "the damaged file is not named";
  if (std::regex_search(text, source)) return "a source-file path in the message";
  return "";
}

TEST(FlipSweep, CommandLineNamesEveryDamagedByteOrIsUnchanged) {
  const std::string bin = CliPath();
  if (bin.empty()) GTEST_SKIP() << "the seedstore binary was not found (set SEEDSTORE_BIN)";
  TempDir dir;
  SweepFiles files;
  ASSERT_NO_FATAL_FAILURE(MakeSweepFiles(dir, &files));
  const char* flips_env = std::getenv("SEEDSTORE_CLI_FLIPS");
  const char* seed_env = std::getenv("SEEDSTORE_CLI_FLIP_SEED");
  const int flips = flips_env ? std::atoi(flips_env) : 40;
  const uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : 23;
  struct Kind {
    const char* name;
    std::string file, source;  // the file damaged; the store or save the commands read
  };
  const std::vector<Kind> kinds = {{"one-file store", files.store, files.store},
                                   {"lazy store", files.lazy_store, files.lazy_store},
                                   {"master", files.save, files.save},
                                   {"rank file", files.rank1, files.save}};
  const std::vector<std::string> names = {"verify", "inspect", "export"};
  const std::string exported = dir / "out.safetensors";
  const std::string stem = dir / "run";
  for (size_t k = 0; k < kinds.size(); ++k) {
    const Kind& kind = kinds[k];
    const std::vector<std::vector<std::string>> cmds = {{"verify", kind.source},
                                                        {"inspect", "--json", kind.source},
                                                        {"export", kind.source, "-o", exported}};
    const std::vector<std::string> outputs = {"", "", exported};
    const std::vector<CliRun> want = RunAll(bin, cmds, outputs, stem);
    for (size_t c = 0; c < cmds.size(); ++c)
      ASSERT_EQ(want[c].rc, 0) << names[c] << ": " << want[c].err;
    const std::string original = ReadAll(kind.file);
    std::mt19937_64 rng(seed * 4 + k);
    std::vector<int> unchanged(cmds.size()), named(cmds.size());
    for (int n = 0; n < flips; ++n) {
      const size_t at = rng() % original.size();
      const int mask = 1 + static_cast<int>(rng() % 255);
      std::string bytes = original;
      bytes[at] = static_cast<char>(bytes[at] ^ mask);
      WriteAll(kind.file, bytes);
      const std::vector<CliRun> got = RunAll(bin, cmds, outputs, stem);
      for (size_t c = 0; c < cmds.size(); ++c) {
        const std::string what = std::string(kind.name) + " byte " + std::to_string(at) + " of " +
                                 std::to_string(original.size()) + " ^ " + std::to_string(mask) +
                                 ": " + names[c];
        const CliRun& r = got[c];
        if (r.rc == 0) {
          ++unchanged[c];
          EXPECT_TRUE(r.out == want[c].out && r.file == want[c].file)
              << what << ": exit 0 with other output:\n"
              << r.out.substr(0, 2000);
        } else if (r.rc == 4) {
          ++named[c];
          const std::string why = WhyNotNamed(r, kind.file);
          EXPECT_EQ(why, "") << what << ": " << r.err << r.out.substr(0, 2000);
        } else {
          ADD_FAILURE() << what << ": exit " << r.rc
                        << (r.rc == -2   ? " (hung)"
                            : r.rc == -1 ? " (signal)"
                                         : "")
                        << ": " << r.err.substr(0, 2000);
        }
      }
    }
    WriteAll(kind.file, original);
    std::string line;
    for (size_t c = 0; c < cmds.size(); ++c)
      line += (c ? ", " : "") + names[c] + " " + std::to_string(named[c]) + " named / " +
              std::to_string(unchanged[c]) + " unchanged";
    std::printf("[ cli flips] %s (%zu bytes): %d flips: %s\n", kind.name, original.size(), flips,
                line.c_str());
  }
}

// ---- One object's damage, named, and the rest still served ---------------------------------

// One run of the command line (RunAll), its output file `out` read back when given.
CliRun Cli(const std::vector<std::string>& args, const std::string& stem,
           const std::string& out = "") {
  return RunAll(CliPath(), {args}, {out}, stem)[0];
}

// Flips a byte inside the object header of `object` in HDF5 file `path` (HDF5 checksums it).
void DamageObjectHeader(const std::string& path, const std::string& object) {
  haddr_t addr = HADDR_UNDEF;
  {
    testutil::H5File f(path, H5F_ACC_RDONLY);
    ASSERT_GE(f.id, 0) << path;
    H5O_info_t info;
    ASSERT_GE(H5Oget_info_by_name2(f.id, object.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT), 0)
        << object;
    addr = info.addr;
  }
  std::string bytes = ReadAll(path);
  ASSERT_EQ(bytes.compare(addr, 4, "OHDR"), 0)
      << object << " has no version 2 object header at " << addr;
  bytes[addr + 20] = static_cast<char>(bytes[addr + 20] ^ 0x10);
  WriteAll(path, bytes);
}

// The sweep's files, made afresh for each test, which damages one of them; skipped without the
// command line.
class DamagedMetadata : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CliPath().empty()) GTEST_SKIP() << "the seedstore binary was not found (set SEEDSTORE_BIN)";
    ASSERT_NO_FATAL_FAILURE(MakeSweepFiles(dir, &files));
  }
  TempDir dir;
  SweepFiles files;
};

TEST_F(DamagedMetadata, OneTensorOfAStoreIsNamedAndTheOthersStillWork) {
  const std::string stem = dir / "cli", out = dir / "out.safetensors";
  const std::vector<std::string> inspect_some = {"inspect", "--json", "--tensors", "[dl]*.[bw]*",
                                                 files.store};
  const std::vector<std::string> export_some = {"export",      files.store, "--tensors",
                                                "[dl]*.[bw]*", "-o",        out};
  const CliRun inspect_before = Cli(inspect_some, stem),
               export_before = Cli(export_some, stem, out);
  ASSERT_EQ(inspect_before.rc, 0) << inspect_before.err;
  ASSERT_EQ(export_before.rc, 0) << export_before.err;
  ASSERT_NO_FATAL_FAILURE(DamageObjectHeader(files.store, "/tensors/dense.f32"));

  // verify names the tensor, once, and checks every other one.
  const CliRun verify = Cli({"verify", "--json", files.store}, stem);
  EXPECT_EQ(verify.rc, 4) << verify.err;
  const nlohmann::json v = nlohmann::json::parse(verify.out, nullptr, false);
  ASSERT_TRUE(v.is_object()) << verify.out << verify.err;
  ASSERT_EQ(v["problems"].size(), 1u) << verify.out;
  EXPECT_EQ(v["problems"][0]["tensor"], "dense.f32");
  EXPECT_EQ(v["problems"][0]["code"], "CORRUPT");
  const std::string m = v["problems"][0]["message"];
  EXPECT_EQ(m.rfind("metadata-corrupt: file '" + files.store + "' tensor 'dense.f32': ", 0), 0u)
      << m;
  EXPECT_EQ(WhyNotNamed({4, "", "CORRUPT: " + m, ""}, files.store), "");
  for (const auto& t : v["tensors"]) EXPECT_EQ(t["ok"], t["name"] != "dense.f32") << t.dump();

  // inspect and export of the other tensors: as before; of all of them: named.
  const CliRun inspect_after = Cli(inspect_some, stem), export_after = Cli(export_some, stem, out);
  EXPECT_EQ(inspect_after.rc, 0) << inspect_after.err;
  EXPECT_EQ(inspect_after.out, inspect_before.out);
  EXPECT_EQ(export_after.rc, 0) << export_after.err;
  EXPECT_TRUE(export_after.file == export_before.file);
  for (const std::vector<std::string>& all :
       {std::vector<std::string>{"inspect", files.store},
        std::vector<std::string>{"export", files.store, "-o", out}}) {
    const CliRun r = Cli(all, stem);
    EXPECT_EQ(r.rc, 4) << all[0] << ": " << r.err;
    EXPECT_NE(r.err.find("metadata-corrupt: file '" + files.store + "' tensor 'dense.f32'"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(WhyNotNamed(r, files.store), "") << r.err;
  }
}

TEST_F(DamagedMetadata, TwoTensorsOfAStoreAreBothNamedAndTheOthersPass) {
  const std::string stem = dir / "cli";
  ASSERT_NO_FATAL_FAILURE(DamageObjectHeader(files.store, "/tensors/dense.f32"));
  ASSERT_NO_FATAL_FAILURE(DamageObjectHeader(files.store, "/tensors/dense.i8"));
  // verify goes on after the first damaged tensor: it names both, each once, and checks (and
  // passes) every intact one.
  const CliRun verify = Cli({"verify", "--json", files.store}, stem);
  EXPECT_EQ(verify.rc, 4) << verify.err;
  const nlohmann::json v = nlohmann::json::parse(verify.out, nullptr, false);
  ASSERT_TRUE(v.is_object()) << verify.out << verify.err;
  ASSERT_EQ(v["problems"].size(), 2u) << verify.out;
  std::set<std::string> named;
  for (const auto& p : v["problems"]) {
    const std::string t = p["tensor"], m = p["message"];
    named.insert(t);
    EXPECT_EQ(p["code"], "CORRUPT") << p.dump();
    EXPECT_EQ(m.rfind("metadata-corrupt: file '" + files.store + "' tensor '" + t + "': ", 0), 0u)
        << m;
    EXPECT_EQ(WhyNotNamed({4, "", "CORRUPT: " + m, ""}, files.store), "");
  }
  EXPECT_EQ(named, (std::set<std::string>{"dense.f32", "dense.i8"}));
  ASSERT_EQ(v["tensors"].size(), files.tensors.size()) << verify.out;
  size_t passed = 0;
  for (const auto& t : v["tensors"]) {
    const bool damaged = t["name"] == "dense.f32" || t["name"] == "dense.i8";
    EXPECT_EQ(t["ok"], !damaged) << t.dump();
    passed += !damaged && t["ok"] == true;
  }
  EXPECT_EQ(passed, files.tensors.size() - 2);
  // The plain report too: both named, exit 4.
  const CliRun plain = Cli({"verify", files.store}, stem);
  EXPECT_EQ(plain.rc, 4) << plain.err;
  for (const char* t : {"dense.f32", "dense.i8"})
    EXPECT_NE((plain.out + plain.err).find("tensor '" + std::string(t) + "'"), std::string::npos)
        << t << ": " << plain.out << plain.err;
}

TEST_F(DamagedMetadata, OneTensorOfARankFileIsRankFileCorruptAndTheOthersStillWork) {
  const std::string stem = dir / "cli", out = dir / "out.safetensors";
  // dense.f32 has a piece in rank 1's file too; dense.bf16 is damaged there.
  const std::vector<std::string> export_some = {"export",    files.save, "--tensors",
                                                "dense.f32", "-o",       out};
  const CliRun before = Cli(export_some, stem, out);
  ASSERT_EQ(before.rc, 0) << before.err;
  std::string cells;  // the cell set holding the piece (docs/FORMAT.md 11)
  {
    auto r1 = H5Store::Open(files.rank1);
    ASSERT_TRUE(r1.ok()) << r1.status().ToString();
    cells = (*r1)->stored((*r1)->Find("dense.bf16")).dataset;
    ASSERT_EQ(cells.rfind("/cells/", 0), 0u) << cells;
    for (size_t i = 0; i < (*r1)->tensors().size(); ++i) {  // no other tensor is in that set
      if ((*r1)->tensors()[i].name != "dense.bf16") {
        ASSERT_NE((*r1)->stored(i).dataset, cells);
      }
    }
  }
  ASSERT_NO_FATAL_FAILURE(DamageObjectHeader(files.rank1, cells));
  const CliRun after = Cli(export_some, stem, out);
  EXPECT_EQ(after.rc, 0) << after.err;
  EXPECT_TRUE(after.file == before.file);
  const CliRun all = Cli({"export", files.save, "-o", out}, stem);
  EXPECT_EQ(all.rc, 4) << all.err;
  const std::string base = files.rank1.substr(files.rank1.rfind('/') + 1);
  EXPECT_NE(all.err.find("rank-file-corrupt: distributed save '" + files.save + "' rank 1 file"),
            std::string::npos)
      << all.err;
  EXPECT_NE(all.err.find("metadata-corrupt: file '" + files.rank1 + "' tensor 'dense.bf16'"),
            std::string::npos)
      << all.err;
  EXPECT_EQ(all.err.find("unreadable"), std::string::npos) << all.err;
  EXPECT_EQ(WhyNotNamed(all, base), "") << all.err;
  const CliRun verify = Cli({"verify", "--json", files.save}, stem);
  EXPECT_EQ(verify.rc, 4) << verify.err;
  const nlohmann::json v = nlohmann::json::parse(verify.out, nullptr, false);
  ASSERT_TRUE(v.is_object()) << verify.out << verify.err;
  for (const auto& t : v["tensors"]) EXPECT_EQ(t["ok"], t["name"] != "dense.bf16") << t.dump();
  for (const auto& p : v["problems"]) EXPECT_EQ(p["tensor"], "dense.bf16") << p.dump();
}

TEST_F(DamagedMetadata, TheMastersSealIsCheckedBeforeHdf5ReadsIt) {
  const std::string original = ReadAll(files.save);
  // The seal's magic, its hash, the HDF5 signature after the user block, the superblock.
  for (size_t at : {size_t{2}, size_t{17}, size_t{512}, size_t{530}}) {
    std::string bytes = original;
    bytes[at] = static_cast<char>(bytes[at] ^ 0x04);
    WriteAll(files.save, bytes);
    for (const char* cmd : {"inspect", "verify"}) {
      const CliRun r = Cli({cmd, files.save}, dir / "cli");
      EXPECT_EQ(r.rc, 4) << cmd << " byte " << at << ": " << r.err;
      EXPECT_NE(r.err.find("master-corrupt: distributed save '" + files.save + "'"),
                std::string::npos)
          << cmd << " byte " << at << ": " << r.err;
    }
  }
  WriteAll(files.save, original);
}

}  // namespace
}  // namespace seedstore
