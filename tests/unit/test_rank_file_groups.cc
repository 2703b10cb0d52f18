// How many rank files one writer call keeps open (MaxOpenRankFiles, io/rank_file_writer.h): 64,
// a quarter of a low open-file limit shared by the writing threads, never fewer than 8.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include "io/rank_file_writer.h"

namespace seedstore {
namespace {

TEST(RankFileGroups, SixtyFourOrAQuarterOfTheOpenFileLimitPerThread) {
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  auto with_soft_limit = [&](rlim_t n, int threads) {
    struct rlimit l = saved;
    l.rlim_cur = std::min(n, saved.rlim_max);
    EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &l), 0);
    const size_t most = MaxOpenRankFiles(threads);
    EXPECT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
    return most;
  };
  if (saved.rlim_max < 1024) GTEST_SKIP() << "hard open-file limit " << saved.rlim_max << " < 1024";
  EXPECT_EQ(with_soft_limit(1024, 2), 64u);
  EXPECT_EQ(with_soft_limit(1024, 8), 32u);
  EXPECT_EQ(with_soft_limit(100, 2), 12u);
  EXPECT_EQ(with_soft_limit(40, 2), 8u);
  EXPECT_EQ(with_soft_limit(100, 0), 25u);  // 0 threads counts as one
}

}  // namespace
}  // namespace seedstore
