// Faults during a distributed save under real mpirun (2 and 4 ranks,
// --oversubscribe): one rank is killed (SIGKILL), exits, or hangs in the middle of
// `seedstore save-ranks` / `seedstore reshard` -- after writing its own rank file, before the
// job agrees that every rank file is there (the --simulate hook, DistSaveOptions in
// io/dist_store.h; the same mechanism as verify-ranks' fault tests). Each test asserts:
//   * the job ends non-zero within --timeout plus a margin, with an error naming the rank
//     (a dead rank is named by the launcher, which ends the job at once; a hung one by rank 0,
//     or by rank 1 when rank 0 is the hung one);
//   * the save already at the path still opens, passes `seedstore verify`, and reads back
//     bit-identical;
//   * the writer lock: released when rank 0 ends the job itself (a hung rank other than 0);
//     when the launcher ends rank 0 (after another rank died, or called MPI_Abort), released by
//     rank 0's SIGTERM handler (io/atomic_file.h, InstallSignalCleanup) -- or, if a SIGKILL
//     comes first, its file left but held by nobody, and the next writer takes it over, saying
//     so. Either way the next save succeeds and removes every piece and temporary the
//     interrupted save left. (Every step and fault: tests/py/test_mpi_fault_matrix.py.)
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/dist_store.h"
#include "io/open.h"
#include "tests/rank_test_util.h"

namespace seedstore {
namespace {

namespace fs = std::filesystem;
using ranktest::Mpirun;
using ranktest::Proc;
using ranktest::Shell;
using ranktest::TempDir;
using ranktest::Write;

using ranktest::Bin;

// The previous save is of seed 7; the interrupted one writes seed 8 (other bytes).
std::string OldSpec() { return Write("faults_old.json", ranktest::kSmallSpec); }
std::string NewSpec() {
  std::string s = ranktest::kSmallSpec;
  s.replace(s.find("\"seed\": 7"), 9, "\"seed\": 8");
  return Write("faults_new.json", s);
}
std::string LayoutFile(int world) {
  return Write("faults_mesh" + std::to_string(world) + ".json", ranktest::MeshLayout(world));
}

Proc SaveRanks(int np, const std::string& spec, const std::string& out, const std::string& extra) {
  return Shell(Mpirun(np) + " " + Bin() + " save-ranks " + spec + " --threads 1 -q --layout " +
               LayoutFile(np) + " -o " + out + " " + extra);
}

// Every tensor of the catalog at `path`, read whole; `seedstore verify` must accept it.
std::vector<std::vector<unsigned char>> ReadVerified(const std::string& path) {
  Proc v = Shell(Bin() + " verify " + path);
  EXPECT_EQ(v.code, 0) << "seedstore verify " << path << "\n" << v.out << v.err;
  std::vector<std::vector<unsigned char>> all;
  auto cat = OpenCatalog(path);
  EXPECT_TRUE(cat.ok()) << cat.status().ToString();
  if (!cat.ok()) return all;
  for (size_t i = 0; i < (*cat)->tensors().size(); ++i) {
    const TensorRecord& t = (*cat)->tensors()[i];
    all.emplace_back(t.NumBytes());
    Status st = (*cat)->Read(i, WholeTensor(t.shape), all.back().data(), CpuOptions{1});
    EXPECT_TRUE(st.ok()) << path << " tensor " << t.name << ": " << st.ToString();
  }
  return all;
}

// Files next to `path` whose names start with "<path>." (pieces, temporaries, the lock).
std::vector<std::string> Siblings(const std::string& path) {
  std::vector<std::string> out;
  const std::string base = fs::path(path).filename().string() + ".";
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    if (e.path().filename().string().rfind(base, 0) == 0) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

// A fresh save of the old spec at `out` by `np` ranks; returns its bytes.
std::vector<std::vector<unsigned char>> PreviousSave(int np, const std::string& out) {
  fs::remove(out);
  for (const auto& f : Siblings(out)) fs::remove(fs::path(out).parent_path() / f);
  Proc p = SaveRanks(np, OldSpec(), out, "");
  EXPECT_EQ(p.code, 0) << p.out << p.err;
  return ReadVerified(out);
}

// After an interrupted save: the lock is either absent (released) or left, held by nobody, and
// then the next writer takes it over; either way a following save succeeds and leaves exactly its
// own pieces, no temporaries. Returns whether the lock had been left behind.
bool NextWriterRecovers(int np, const std::string& out,
                        const std::vector<std::vector<unsigned char>>& before) {
  const std::string lock = out + ".lock";
  // What a rank killed while writing its piece leaves: the piece's temporary, its writer
  // gone. And two files that merely look like pieces, which must be left alone.
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  const std::string orphan_temp = AtomicFile::TempName(out + ".0badcafe.rank1.h5", gone, 0);
  std::ofstream(orphan_temp) << "partial";
  const std::vector<std::string> decoys = {out + ".0badcafe.rank1.h5.bak",
                                           out + ".notes.0badcafe.rank1.h5"};
  for (const auto& d : decoys) std::ofstream(d) << "not a piece";
  const bool stale = fs::exists(lock);
  std::string holder;
  if (stale) {
    holder = ranktest::ReadAll(lock);
    while (!holder.empty() && holder.back() == '\n') holder.pop_back();
  }
  // A lock file left behind is held by nobody: the next writer takes it over, saying so (and
  // what is true of the save at `out`), without anyone removing it by hand.
  Proc again = SaveRanks(np, NewSpec(), out, "");
  EXPECT_EQ(again.code, 0) << again.out << again.err;
  if (stale) {
    EXPECT_NE(again.err.find("seedstore: note: '" + lock +
                             "' was left by a writer that no longer runs (" + holder +
                             "): its save was interrupted. '" + out +
                             "' holds the last save that was committed there"),
              std::string::npos)
        << again.err;
  }
  auto d = DistCatalog::Open(out);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  if (d.ok()) {
    std::vector<std::string> want;
    for (const auto& f : (*d)->rank_files()) want.push_back(fs::path(f).filename());
    for (const auto& f : decoys) want.push_back(fs::path(f).filename());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(Siblings(out), want) << "pieces or temporaries of the interrupted save remain";
  }
  EXPECT_NE(ReadVerified(out), before);  // now the new model
  for (const auto& f : decoys) fs::remove(f);
  return stale;
}

TEST(SaveFaults, SaveRanksKilledRankEndsTheJobAndThePreviousSaveIsIntact) {
  SEEDSTORE_NEED_BIN();
  for (int np : {2, 4}) {
    SCOPED_TRACE(std::to_string(np) + " ranks");
    const std::string out = TempDir() + "/faults_kill" + std::to_string(np) + ".h5";
    const auto before = PreviousSave(np, out);
    const int victim = np - 1;
    Proc p = SaveRanks(np, NewSpec(), out,
                       "--timeout 5 --simulate kill --simulate-rank " + std::to_string(victim));
    EXPECT_NE(p.code, 0) << p.out << p.err;
    EXPECT_LT(p.seconds, 5.0 + 10.0);
    const std::string r = "rank " + std::to_string(victim);
    EXPECT_NE(p.err.find(r + ": --simulate kill"), std::string::npos) << p.err;
    // The launcher names the dead rank (OpenMPI: "process rank R ... exited on signal 9").
    EXPECT_TRUE(p.err.find("process " + r) != std::string::npos ||
                p.err.find(r + " did not reach step") != std::string::npos)
        << p.err;
    EXPECT_EQ(ReadVerified(out), before);
    // Rank 0 ended by the launcher: lock released by its SIGTERM handler, or stale.
    NextWriterRecovers(np, out, before);
  }
}

TEST(SaveFaults, SaveRanksHungRankIsNamedWithinTheTimeoutAndTheLockReleased) {
  SEEDSTORE_NEED_BIN();
  for (int np : {2, 4}) {
    SCOPED_TRACE(std::to_string(np) + " ranks");
    const std::string out = TempDir() + "/faults_hang" + std::to_string(np) + ".h5";
    const auto before = PreviousSave(np, out);
    const int victim = np == 2 ? 1 : 2;
    Proc p = SaveRanks(np, NewSpec(), out,
                       "--timeout 3 --simulate hang --simulate-rank " + std::to_string(victim));
    EXPECT_EQ(p.code, 5) << p.out << p.err;  // kIo, from rank 0, which ended the job
    EXPECT_LT(p.seconds, 3.0 + 10.0);
    EXPECT_NE(p.err.find("rank " + std::to_string(victim) +
                         " did not reach step 'write rank files' within 3.0 s (--timeout)"),
              std::string::npos)
        << p.err;
    EXPECT_EQ(ReadVerified(out), before);
    // Rank 0 times out first (the others wait min(2, timeout / 2) s longer), removes its new
    // piece and the lock, then ends the job.
    EXPECT_FALSE(fs::exists(out + ".lock")) << "rank 0 ended the job itself: lock released";
    EXPECT_FALSE(NextWriterRecovers(np, out, before));
  }
}

TEST(SaveFaults, ReshardHungRankZeroIsNamedByRankOne) {
  SEEDSTORE_NEED_BIN();
  const std::string out = TempDir() + "/faults_reshard_hang0.h5";
  const auto before = PreviousSave(2, out);
  Proc p = Shell(Mpirun(2) + " " + Bin() + " reshard " + NewSpec() + " --threads 1 -q --layout " +
                 LayoutFile(4) + " -o " + out + " --timeout 2 --simulate hang --simulate-rank 0");
  EXPECT_EQ(p.code, 5) << p.out << p.err;
  EXPECT_LT(p.seconds, 2.0 + 10.0);
  EXPECT_NE(p.err.find("rank 0 did not reach step 'write rank files' within 2.0 s (--timeout)"),
            std::string::npos)
      << p.err;
  EXPECT_EQ(ReadVerified(out), before);
  // Rank 0 ended by the launcher: lock released by its SIGTERM handler, or stale.
  NextWriterRecovers(2, out, before);
}

TEST(SaveFaults, ReshardDeadRankEndsTheJob) {
  SEEDSTORE_NEED_BIN();
  const std::string out = TempDir() + "/faults_reshard_die.h5";
  const auto before = PreviousSave(4, out);
  Proc p = Shell(Mpirun(4) + " " + Bin() + " reshard " + NewSpec() + " --threads 1 -q --layout " +
                 LayoutFile(4) + " -o " + out + " --timeout 5 --simulate die --simulate-rank 1");
  EXPECT_NE(p.code, 0) << p.out << p.err;
  EXPECT_LT(p.seconds, 5.0 + 10.0);
  EXPECT_NE(p.err.find("rank 1: --simulate die"), std::string::npos) << p.err;
  EXPECT_EQ(ReadVerified(out), before);
  // Rank 0 ended by the launcher: lock released by its SIGTERM handler, or stale.
  NextWriterRecovers(4, out, before);
}

}  // namespace
}  // namespace seedstore
