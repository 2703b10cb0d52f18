// `seedstore verify-ranks` without mpirun: the process is a world of one (the self backend),
// and the table says so. (Worlds of several ranks: tests/mpi/test_verify_mpi.cc.)
#include "tests/cli/cli_test_util.h"
#include "tests/rank_test_util.h"

namespace seedstore {
namespace {

using namespace clitest;  // NOLINT

TEST(VerifyRanksCli, TableWithoutMpirunIsAWorldOfOne) {
  const std::string spec = Write("small.json", ranktest::kSmallSpec);
  const std::string layout = Write("mesh1.json", ranktest::MeshLayout(1));
  Proc p = Exec("verify-ranks " + spec + " --layout " + layout);
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  EXPECT_NE(p.out.find("1 rank(s) (self)"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("5 tensors over 1 ranks: 5 ok"), std::string::npos) << p.out;
}

}  // namespace
}  // namespace seedstore
