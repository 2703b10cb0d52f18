// The node-local rank under real mpirun (io/gpu_select.h): the MPI backend computes it with
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) and records it, so that --device cuda binds
// GPU (local rank % visible GPUs) instead of GPU 0 on every rank. This very test binary runs
// as the MPI program (LocalRankWorker.Run, selected by $SEEDSTORE_LOCAL_RANK_OUT).
#include <set>

#include "io/collective.h"
#include "io/gpu_select.h"
#include "tests/rank_test_util.h"

namespace seedstore {
namespace {

TEST(LocalRankWorker, Run) {
  const char* dir = std::getenv("SEEDSTORE_LOCAL_RANK_OUT");
  if (!dir) GTEST_SKIP() << "MPI program of MpiLocalRank (runs under mpirun only)";
  auto comm = CreateMpiCollective(CollectiveOptions{30});
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  const NodeLocalRank l = CurrentNodeLocalRank();
  const NodeLocalRank env = LocalRankFromEnv([](const char* n) { return std::getenv(n); });
  std::ofstream(std::string(dir) + "/rank" + std::to_string((*comm)->rank()))
      << l.rank << " " << l.size << " " << l.source << " " << env.rank << " " << env.source << " "
      << DefaultThreadsPerRank() << "\n";
}

TEST(MpiLocalRank, EveryRankOfANodeGetsItsOwnLocalRank) {
  SEEDSTORE_NEED_MPIRUN();
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  const std::string dir = ranktest::TempDir() + "/local-rank";
  mkdir(dir.c_str(), 0755);
  const int np = 3;
  ranktest::Proc p =
      ranktest::Shell("SEEDSTORE_LOCAL_RANK_OUT=" + dir + " " + ranktest::Mpirun(np) + " " + self +
                      " --gtest_filter=LocalRankWorker.Run");
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  std::set<int> locals;
  for (int r = 0; r < np; ++r) {
    std::istringstream in(ranktest::ReadAll(dir + "/rank" + std::to_string(r)));
    int local = -1, size = -1, env_local = -1, threads = 0;
    std::string source, env_source;
    in >> local >> size >> source >> env_local >> env_source >> threads;
    EXPECT_EQ(source, "MPI_Comm_split_type") << "rank " << r;
    EXPECT_EQ(size, np) << "rank " << r;  // one node: every rank shares memory with the others
    // The launcher's variables, where it sets them, agree with MPI's answer.
    if (env_source != "default") {
      EXPECT_EQ(env_local, local) << "rank " << r << " " << env_source;
    }
    EXPECT_GE(threads, 1);
    locals.insert(local);
  }
  EXPECT_EQ(locals, (std::set<int>{0, 1, 2}));  // distinct: ranks spread over a node's GPUs
}

}  // namespace
}  // namespace seedstore
