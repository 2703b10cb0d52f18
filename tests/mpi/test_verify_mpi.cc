// Multi-rank tests under real mpirun (1, 2 and 4 ranks, --oversubscribe): the shipped
// `seedstore verify-ranks` (found through $SEEDSTORE_BIN) and the live-job API, which this
// very test binary runs as the MPI program (MpiWorker.Run, selected by $SEEDSTORE_MPI_WORKER).
// Every test skips with a visible message where mpirun is missing.
#include <nlohmann/json.hpp>
#include <set>

#include "io/collective.h"
#include "tests/rank_test_util.h"

namespace seedstore {
namespace {

using ranktest::Mpirun;
using ranktest::Proc;
using ranktest::Shell;
using ranktest::Write;

using ranktest::Bin;

std::string Spec() { return Write("small.json", ranktest::kSmallSpec); }
std::string LayoutFile(int world) {
  return Write("mesh" + std::to_string(world) + ".json", ranktest::MeshLayout(world));
}

Proc VerifyRanks(int np, const std::string& args) {
  return Shell(Mpirun(np) + " " + Bin() + " verify-ranks " + Spec() + " --layout " +
               LayoutFile(np) + " --threads 1 " + args);
}

// --backend nccl reaches the NCCL backend (bootstrapped over MPI under mpirun): without a
// GPU or an NCCL build it is refused with a named error (exit 1 + kUnsupported = 6); with one,
// the check runs over NCCL and agrees (tools/gpu-check.sh's machine runs the gpu tier only,
// so the GPU branch of this test runs wherever mpirun and a GPU meet).
TEST(VerifyRanksCli, NcclBackendRunsOrIsRefusedByName) {
  SEEDSTORE_NEED_BIN();
  Proc p = VerifyRanks(1, "--json --backend nccl --timeout 60");
  if (p.code == 0) {
    auto j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["backend"], "nccl");
    EXPECT_TRUE(j["ok"].get<bool>());
  } else {
    EXPECT_EQ(p.code, 6) << p.out << p.err;
    EXPECT_NE(p.err.find("NCCL backend: "), std::string::npos) << p.err;
    std::printf("[ NOTE ] NCCL backend NOT run (refused as expected): %s\n", p.err.c_str());
  }
  // An unknown backend is a usage error naming the option.
  Proc bad = VerifyRanks(1, "--backend gloo");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE((bad.out + bad.err).find("--backend"), std::string::npos) << bad.out << bad.err;
}

TEST(VerifyRanksCli, AgreesAt1_2_4Ranks) {
  SEEDSTORE_NEED_BIN();
  std::vector<nlohmann::json> tensors;
  for (int np : {1, 2, 4}) {
    Proc p = VerifyRanks(np, "--json");
    ASSERT_EQ(p.code, 0) << np << " ranks\n" << p.out << p.err;
    auto j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["world"], np);
    EXPECT_EQ(j["backend"], "mpi");
    EXPECT_TRUE(j["ok"].get<bool>());
    for (const auto& t : j["tensors"]) EXPECT_EQ(t["composition"], "ok") << t.dump();
    tensors.push_back(j["tensors"]);
  }
  // The composed fingerprints do not depend on the world size or layout (I4).
  for (size_t i = 0; i < tensors[0].size(); ++i)
    for (size_t k = 1; k < tensors.size(); ++k)
      EXPECT_EQ(tensors[k][i]["composed"], tensors[0][i]["composed"]);
}

TEST(VerifyRanksCli, UnseededRanksAreNamed) {
  SEEDSTORE_NEED_BIN();
  for (int np : {2, 4}) {
    Proc p = VerifyRanks(np, "--json --simulate unseeded");
    EXPECT_EQ(p.code, 7) << p.out << p.err;
    auto j = nlohmann::json::parse(p.out);
    EXPECT_FALSE(j["ok"].get<bool>());
    EXPECT_GT(j["summary"]["replica_problems"].get<int>(), 0);
    // Rank r drew from seed + r: every rank but 0 holds an off-spec shard somewhere.
    std::set<int> off;
    for (const auto& t : j["tensors"])
      for (const auto& g : t["problems"])
        for (int r : g["off_spec"]) off.insert(r);
    std::set<int> want;
    for (int r = 1; r < np; ++r) want.insert(r);
    EXPECT_EQ(off, want) << p.out;
    EXPECT_NE(p.err.find("MISMATCH"), std::string::npos);
  }
}

TEST(VerifyRanksCli, LayoutDependentRngDoesNotCompose) {
  SEEDSTORE_NEED_BIN();
  Proc p = VerifyRanks(4, "--simulate layout-rng");
  EXPECT_EQ(p.code, 7) << p.out << p.err;
  EXPECT_NE(p.out.find("0 replica disagreement(s), 4 composition mismatch(es)"), std::string::npos)
      << p.out;
  EXPECT_NE(p.out.find("'layers.0.wq': shards do not compose to the tensor"), std::string::npos)
      << p.out;
}

TEST(VerifyRanksCli, FlippedElementNamesRankAndTensor) {
  SEEDSTORE_NEED_BIN();
  Proc p =
      VerifyRanks(4, "--simulate flip --simulate-rank 3 --simulate-tensor bias --problems-only");
  EXPECT_EQ(p.code, 7) << p.out << p.err;
  EXPECT_NE(p.out.find("'bias' [0:32] (held by ranks 0, 1, 2, 3): replicas disagree: rank 3 "
                       "deviates from the majority {0, 1, 2}"),
            std::string::npos)
      << p.out;
  // --json honours --problems-only too: only bias is listed; the summary counts every tensor.
  p = VerifyRanks(
      4, "--simulate flip --simulate-rank 3 --simulate-tensor bias --problems-only --json");
  EXPECT_EQ(p.code, 7) << p.out << p.err;
  {
    const auto j = nlohmann::json::parse(p.out);
    ASSERT_EQ(j["tensors"].size(), 1u) << p.out;
    EXPECT_EQ(j["tensors"][0]["name"], "bias");
    EXPECT_GT(j["summary"]["tensors"].get<size_t>(), 1u) << p.out;
  }
  p = VerifyRanks(2, "--simulate flip --simulate-rank 1 --simulate-tensor bias");
  EXPECT_EQ(p.code, 7);
  EXPECT_NE(p.out.find("vote is a TIE"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("rank 1 holds a shard that differs from the spec"), std::string::npos)
      << p.out;
  p = VerifyRanks(1, "--simulate flip --simulate-rank 0 --simulate-tensor embed");
  EXPECT_EQ(p.code, 7);
  EXPECT_NE(p.out.find("'embed': shards do not compose to the tensor"), std::string::npos) << p.out;
}

TEST(VerifyRanksCli, DifferentCatalogsOnDifferentRanksAreNamed) {
  SEEDSTORE_NEED_BIN();
  std::string other = ranktest::kSmallSpec;
  other.replace(other.find("\"seed\": 7"), 9, "\"seed\": 8");
  nlohmann::json oj = nlohmann::json::parse(other);
  oj["tensors"][0]["shape"] = {64, 31};
  const std::string b = Write("other.json", oj.dump());
  const std::string l = LayoutFile(2);
  Proc p = Shell(Mpirun(1) + " " + Bin() + " verify-ranks " + Spec() + " --layout " + l +
                 " : -np 1 " + Bin() + " verify-ranks " + b + " --layout " + l);
  EXPECT_EQ(p.code, 2) << p.out << p.err;
  EXPECT_NE(p.err.find("rank 1 passed a different catalog or layout than rank 0"),
            std::string::npos)
      << p.err;
}

TEST(VerifyRanksCli, HungRankEndsTheJobWithinTheTimeout) {
  SEEDSTORE_NEED_BIN();
  Proc p = VerifyRanks(4, "--simulate hang --simulate-rank 2 --timeout 2");
  EXPECT_EQ(p.code, 5) << p.out << p.err;
  EXPECT_LT(p.seconds, 20.0);
  EXPECT_NE(p.err.find("rank 2 did not reach step"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("within 2.0 s (--timeout)"), std::string::npos) << p.err;
}

TEST(VerifyRanksCli, HungRankZeroIsCaughtByTheOthers) {
  SEEDSTORE_NEED_BIN();
  Proc p = VerifyRanks(2, "--simulate hang --simulate-rank 0 --timeout 1");
  EXPECT_EQ(p.code, 5) << p.out << p.err;
  EXPECT_LT(p.seconds, 20.0);
  EXPECT_NE(p.err.find("rank 0 did not reach step"), std::string::npos) << p.err;
}

TEST(VerifyRanksCli, DeadRankEndsTheJob) {
  SEEDSTORE_NEED_BIN();
  Proc p = VerifyRanks(4, "--simulate die --simulate-rank 1 --timeout 5");
  EXPECT_NE(p.code, 0) << p.out << p.err;
  EXPECT_LT(p.seconds, 30.0);
  EXPECT_NE(p.err.find("rank 1: --simulate die"), std::string::npos) << p.err;
}

// Rank 0 exiting or killed mid-job is named too: by its own message, or by mpirun.
TEST(VerifyRanksCli, DeadRankZeroIsNamed) {
  SEEDSTORE_NEED_BIN();
  Proc p = VerifyRanks(3, "--simulate die --simulate-rank 0 --timeout 5");
  EXPECT_NE(p.code, 0) << p.out << p.err;
  EXPECT_LT(p.seconds, 30.0);
  EXPECT_NE(p.err.find("rank 0: --simulate die"), std::string::npos) << p.err;
  p = VerifyRanks(3, "--simulate kill --simulate-rank 0 --timeout 5");
  EXPECT_NE(p.code, 0) << p.out << p.err;
  EXPECT_LT(p.seconds, 30.0);
  EXPECT_NE(p.err.find("process rank 0"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("signal 9"), std::string::npos) << p.err;
}

// ---- The live-job API under mpirun ---------------------------------------------------------

// The MPI program: a "training job" that builds its shards (as $SEEDSTORE_MPI_WORKER says)
// and calls VerifyBuffers, then writes its report to $SEEDSTORE_MPI_OUT/rank<r>.json.
TEST(MpiWorker, Run) {
  const char* scenario = std::getenv("SEEDSTORE_MPI_WORKER");
  if (!scenario) GTEST_SKIP() << "MPI program of the MpiLive tests (runs under mpirun only)";
  auto comm = CreateMpiCollective(CollectiveOptions{30});
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  Collective& c = **comm;
  const std::string sc = scenario;
  auto spec = ModelSpec::Parse(ranktest::kSmallSpec, "small");
  auto ref = SpecCatalog::Create(*spec, "small.json");
  auto layout = Layout::Parse(sc == "unseeded-replicated" || sc == "flip-replicated"
                                  ? Layout::Replicated(c.size()).ToJson().dump()
                                  : ranktest::MeshLayout(c.size()));
  ASSERT_TRUE(layout.ok());
  ranktest::Init init = sc.rfind("unseeded", 0) == 0 ? ranktest::Init::kUnseeded
                        : sc == "layout-rng"         ? ranktest::Init::kLayoutRng
                                                     : ranktest::Init::kSeeded;
  const bool flip = sc.rfind("flip", 0) == 0;
  ranktest::JobShards job =
      ranktest::BuildJob(*spec, *layout, c.rank(), init, flip ? c.size() - 1 : -1, "layers.0.wq");
  VerifyOptions o;
  o.cpu.threads = 1;
  auto rep =
      VerifyBuffers(c, job.params, *layout, sc == "unseeded-replicated" ? nullptr : ref->get(), o);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  nlohmann::json j = rep->ToJson();
  j.erase("timing");
  const char* dir = std::getenv("SEEDSTORE_MPI_OUT");
  ASSERT_NE(dir, nullptr);
  std::ofstream(std::string(dir) + "/rank" + std::to_string(c.rank()) + ".json") << j.dump();
}

// Launches the worker under mpirun; returns each rank's report.
std::vector<nlohmann::json> RunWorker(int np, const std::string& scenario) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  EXPECT_GT(n, 0);
  self[n > 0 ? n : 0] = '\0';
  static int run = 0;
  const std::string dir = ranktest::TempDir() + "/worker" + std::to_string(run++);
  mkdir(dir.c_str(), 0755);
  Proc p = Shell("SEEDSTORE_MPI_WORKER=" + scenario + " SEEDSTORE_MPI_OUT=" + dir + " " +
                 Mpirun(np) + " " + self + " --gtest_filter=MpiWorker.Run");
  EXPECT_EQ(p.code, 0) << p.out << p.err;
  std::vector<nlohmann::json> reps(np);
  for (int r = 0; r < np; ++r) {
    const std::string text = ranktest::ReadAll(dir + "/rank" + std::to_string(r) + ".json");
    if (text.empty()) {
      ADD_FAILURE() << "no report from rank " << r << "\n" << p.out << p.err;
      continue;
    }
    reps[r] = nlohmann::json::parse(text);
  }
  return reps;
}

TEST(MpiLive, SeededJobAgreesAt1_2_4Ranks) {
  SEEDSTORE_NEED_MPIRUN();
  for (int np : {1, 2, 4}) {
    auto reps = RunWorker(np, "seeded");
    for (const auto& j : reps) {
      if (j.is_null()) continue;
      EXPECT_TRUE(j["ok"].get<bool>()) << j.dump();
      EXPECT_EQ(j, reps[0]);  // every rank reaches the same verdict
    }
  }
}

TEST(MpiLive, UnseededReplicasAreDetected) {
  SEEDSTORE_NEED_MPIRUN();
  for (int np : {2, 4}) {
    auto reps = RunWorker(np, "unseeded-replicated");
    if (reps[0].is_null()) continue;
    EXPECT_FALSE(reps[0]["ok"].get<bool>());
    EXPECT_EQ(reps[0]["summary"]["replica_problems"], 5);
    for (const auto& t : reps[0]["tensors"]) {
      EXPECT_EQ(t["replicas"], "tie");
      EXPECT_EQ(t["problems"][0]["votes"].size(), static_cast<size_t>(np));
    }
  }
}

TEST(MpiLive, LayoutDependentRngReportedAsNotComposing) {
  SEEDSTORE_NEED_MPIRUN();
  auto reps = RunWorker(4, "layout-rng");
  if (reps[0].is_null()) return;
  EXPECT_EQ(reps[0]["summary"]["replica_problems"], 0);
  EXPECT_EQ(reps[0]["summary"]["composition_problems"], 4);
}

TEST(MpiLive, FlippedElementNamesRankAndTensor) {
  SEEDSTORE_NEED_MPIRUN();
  auto reps = RunWorker(4, "flip-replicated");
  if (reps[0].is_null()) return;
  ASSERT_EQ(reps[0]["summary"]["replica_problems"], 1);
  for (const auto& t : reps[0]["tensors"]) {
    if (t["name"] != "layers.0.wq") continue;
    EXPECT_EQ(t["replicas"], "mismatch");
    EXPECT_EQ(t["problems"][0]["deviating"], nlohmann::json({3}));
    EXPECT_EQ(t["problems"][0]["off_spec"], nlohmann::json({3}));
  }
}

}  // namespace
}  // namespace seedstore

// ---- Store files: recorded fingerprints are the composition reference ----------------------

#include <hdf5.h>

#include "io/h5store.h"

namespace seedstore {
namespace {

// A store with the small model: "embed" and "bias" dense (their bytes from the spec), the rest
// lazy. `corrupt` flips a byte in the middle of the file afterwards.
std::string MakeStore(const std::string& name, bool corrupt) {
  auto spec = ModelSpec::Parse(ranktest::kSmallSpec, "small");
  const std::string path = ranktest::TempDir() + "/" + name;
  WriteOptions wo;
  wo.chunk_bytes = 1024;  // embed: 4 chunks of 16 rows
  auto w = StoreWriter::Create(path, spec->seed, spec->generator, wo);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  for (const TensorSpec& t : spec->tensors) {
    if (t.name == "embed" || t.name == "bias") {
      auto lazy = LazyTensor::Resolve(t, spec->seed);
      BoxSource src = [l = *lazy](const Region& box, void* out) { return l.Materialize(box, out); };
      EXPECT_TRUE((*w)->AddDense(t.name, t.shape, t.dtype, src).ok());
    } else {
      EXPECT_TRUE((*w)->AddLazy(t).ok());
    }
  }
  EXPECT_TRUE((*w)->Commit().ok());
  if (corrupt) {
    // Flip a byte in the middle of embed's first stored chunk.
    std::string dataset;
    {
      auto st = H5Store::Open(path);
      EXPECT_TRUE(st.ok()) << st.status().ToString();
      dataset = (*st)->stored(0).dataset;
    }
    haddr_t addr = 0;
    hsize_t size = 0;
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
    unsigned mask = 0;
    hsize_t offset[2] = {0, 0};
    EXPECT_GE(H5Dget_chunk_info_by_coord(d, offset, &mask, &addr, &size), 0) << dataset;
    EXPECT_GT(size, 0u);
    H5Dclose(d);
    H5Fclose(f);
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(addr + size / 2);
    char c = 0;
    io.read(&c, 1);
    c ^= 0x5a;
    io.seekp(addr + size / 2);
    io.write(&c, 1);
  }
  return path;
}

TEST(VerifyRanksStore, RecordedFingerprintsAreTheReference) {
  SEEDSTORE_NEED_BIN();
  const std::string store = MakeStore("small.h5", false);
  for (int np : {1, 2, 4}) {
    Proc p = Shell(Mpirun(np) + " " + Bin() + " verify-ranks " + store + " --layout " +
                   LayoutFile(np) + " --threads 1 --json");
    ASSERT_EQ(p.code, 0) << p.out << p.err;
    auto j = nlohmann::json::parse(p.out);
    for (const auto& t : j["tensors"]) {
      EXPECT_EQ(t["composition"], "ok") << t.dump();
      EXPECT_EQ(t["reference"], "recorded") << t.dump();
    }
  }
  Proc p = Shell(Mpirun(4) + " " + Bin() + " verify-ranks " + store + " --layout " + LayoutFile(4) +
                 " --threads 1 --simulate flip --simulate-rank 2 --simulate-tensor embed");
  EXPECT_EQ(p.code, 7) << p.out << p.err;
  EXPECT_NE(p.out.find("'embed': shards do not compose to the tensor"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("!= recorded"), std::string::npos) << p.out;
}

TEST(VerifyRanksStore, CorruptShardIsNamedAndNobodyHangs) {
  SEEDSTORE_NEED_BIN();
  const std::string store = MakeStore("corrupt.h5", true);
  Proc p = Shell(Mpirun(2) + " " + Bin() + " verify-ranks " + store + " --layout " + LayoutFile(2) +
                 " --threads 1 --timeout 20");
  EXPECT_EQ(p.code, 4) << p.out << p.err;  // the failure's own code: corrupt, not "mismatch"
  EXPECT_LT(p.seconds, 30.0);
  // Rank 0 holds embed's first rows (the corrupt chunk): it names the chunk, the table names
  // the rank; rank 1's shard is fine.
  EXPECT_NE(p.err.find("seedstore: rank 0: tensor 'embed'"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("chunk-corrupt"), std::string::npos) << p.err;
  EXPECT_NE(p.out.find("rank 0 could not fingerprint the shard (CORRUPT"), std::string::npos)
      << p.out;
  EXPECT_NE(p.out.find("FAILED: rank 0"), std::string::npos) << p.out;
}

}  // namespace
}  // namespace seedstore
