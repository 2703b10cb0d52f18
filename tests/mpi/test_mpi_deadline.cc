// The MPI deadline machinery (io/mpi_deadline.h) under real mpirun: after a timeout, a late
// message does not land in freed memory. The launcher test starts this same executable under
// mpirun with SEEDSTORE_RANK_BODY set; the rank body (skipped, saying so, outside mpirun) runs
// on each rank.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "io/collective.h"
#include "tests/rank_test_util.h"

#if SEEDSTORE_HAVE_MPI
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace seedstore {
namespace {

using ranktest::Mpirun;
using ranktest::Proc;
using ranktest::Shell;

using ranktest::SelfExe;

#if SEEDSTORE_HAVE_MPI
// Fills a stack frame where the timed-out step's frame was, drives MPI progress while the late
// messages arrive, and reports whether the frame is unchanged: a pending receive into a stack
// local of the returned step would overwrite it.
__attribute__((noinline)) bool StackFrameSurvivesLateMessages(double seconds) {
  volatile unsigned char frame[8192];
  for (size_t i = 0; i < sizeof frame; ++i) frame[i] = static_cast<unsigned char>(0xA5 ^ i);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (size_t i = 0; i < sizeof frame; ++i)
    if (frame[i] != static_cast<unsigned char>(0xA5 ^ i)) return false;
  return true;
}
#endif

// Rank 0 stalls past rank 1's deadline, then continues and joins the step: its arrival token
// (which rank 1 receives, to name a missing rank 0) and the all-gather's data reach rank 1
// after rank 1's step returned kIo. Rank 1 must name rank 0, and the late messages must not
// touch rank 1's stack.
TEST(MpiDeadlineRanks, LateMessageAfterTimeoutBody) {
  if (std::getenv("SEEDSTORE_RANK_BODY") == nullptr)
    GTEST_SKIP() << "rank body: runs under mpirun from MpiDeadline.LateMessageAfterTimeout";
#if !SEEDSTORE_HAVE_MPI
  GTEST_SKIP() << "built without MPI";
#else
  auto c = CreateMpiCollective(CollectiveOptions{.timeout_s = 1.0});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const int rank = (*c)->rank();
  // The caller's buffers of a timed-out collective may be written until exit: kept alive.
  static std::vector<uint64_t> send(1), recv(8);
  send[0] = 100 + rank;
  if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  Status st = (*c)->AllGather(send.data(), sizeof(uint64_t), recv.data(), "late-step");
  if (rank == 1) {
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("rank 0 did not reach step 'late-step'"), std::string::npos)
        << st.message();
    EXPECT_TRUE(StackFrameSurvivesLateMessages(3.0)) << "a late message wrote into freed stack";
    if (!::testing::Test::HasFailure())
      std::printf("rank 1: timed out naming rank 0; stack intact after late messages\n");
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(5000));  // rank 1 reports first
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // A broken world cannot finalize: end without it, with this rank's verdict.
  std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
#endif
}

TEST(MpiDeadline, LateMessageAfterTimeout) {
  SEEDSTORE_NEED_MPIRUN();
  Proc p = Shell("SEEDSTORE_RANK_BODY=1 " + Mpirun(2) + " " + SelfExe() +
                 " --gtest_filter=MpiDeadlineRanks.LateMessageAfterTimeoutBody");
  EXPECT_NE(p.out.find("rank 1: timed out naming rank 0; stack intact after late messages"),
            std::string::npos)
      << p.out << p.err;
  EXPECT_LT(p.seconds, 20) << p.out << p.err;
}

}  // namespace
}  // namespace seedstore
