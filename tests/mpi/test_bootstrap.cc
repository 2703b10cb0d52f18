// The two transports of io/bootstrap.h -- MPI (CreateMpiBootstrap, under real mpirun) and a
// key-value store (CreateCallbackBootstrap over a folder of files, 3 plain processes started
// the way torchrun starts them, no MPI) -- run one rank body, and are held to one contract:
//   * GatherAll of blocks of different sizes (an empty one included), a 100 kB Broadcast from
//     the last rank, Barrier, and a Collective over the bootstrap (CreateBootstrapCollective:
//     all-gather, all-reduce mod 2^64) agree on every rank; a rank late by a quarter of the
//     deadline is waited for;
//   * a rank stopped (SIGSTOP) before an exchange is named by rank 0 (a stopped rank 0 by
//     rank 1) within the deadline plus its grace, and every live rank returns kIo, none hangs;
//   * a killed rank (SIGKILL) is named: by rank 0 on the store transport, by mpirun (which
//     ends the job) on MPI.
// The launcher tests start this same executable with SEEDSTORE_RANK_BODY set; the rank body
// (skipped, saying so, otherwise) prints one line per rank that the launcher checks.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "io/bootstrap.h"
#include "io/collective.h"
#include "tests/rank_test_util.h"

namespace seedstore {
namespace {

using ranktest::Proc;
using ranktest::Shell;

using ranktest::SelfExe;

std::string Env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

// A key-value store in a folder shared by the ranks: one file per key (its name the key in
// hex), written to a temporary and renamed, so a reader sees all of a value or nothing.
BootstrapCallbacks FolderStore(const std::string& dir) {
  const auto path = [dir](const std::string& key) {
    std::string hex;
    for (unsigned char c : key) {
      static const char* d = "0123456789abcdef";
      hex += d[c >> 4];
      hex += d[c & 15];
    }
    return dir + "/" + hex;
  };
  BootstrapCallbacks cb;
  cb.put = [path](const std::string& key, std::string_view bytes) -> Status {
    const std::string p = path(key), tmp = p + ".tmp" + std::to_string(::getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      if (!f) return IoError("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), p.c_str()) != 0) return IoError("cannot rename " + tmp);
    return Status::Ok();
  };
  cb.get = [path](const std::string& key, double timeout_s) -> Result<std::optional<std::string>> {
    const std::string p = path(key);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      std::ifstream f(p, std::ios::binary);
      if (f) return std::optional<std::string>(std::string(std::istreambuf_iterator<char>(f), {}));
      if (std::chrono::steady_clock::now() > end) return std::optional<std::string>();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  cb.has = [path](const std::string& key) { return std::filesystem::exists(path(key)); };
  return cb;
}

Result<std::unique_ptr<Bootstrap>> MakeBootstrap(const std::string& kind) {
  if (kind == "mpi") return CreateMpiBootstrap();
  return CreateCallbackBootstrap(std::atoi(Env("SEEDSTORE_BOOT_RANK", "0").c_str()),
                                 std::atoi(Env("SEEDSTORE_BOOT_SIZE", "1").c_str()), "job/",
                                 FolderStore(Env("SEEDSTORE_BOOT_DIR")));
}

// Rank r's block: r * 1000 + 7 bytes (rank 0's empty), a pattern of r.
std::string Block(int r) {
  std::string s(r == 0 ? 0 : r * 1000 + 7, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(r * 31 + i * 7);
  return s;
}

// One line per rank: "rank R: STEP: ok" or "rank R: STEP: <status>", written in one call.
void Say(int rank, const char* step, const Status& st) {
  std::printf("rank %d: %s: %s\n", rank, step, st.ok() ? "ok" : st.ToString().c_str());
  std::fflush(stdout);
}

// The exchanges of the contract, each checked against what every rank can compute.
Status Exchanges(std::unique_ptr<Bootstrap> b, double timeout) {
  const int me = b->rank(), n = b->size();
  SEEDSTORE_ASSIGN_OR_RETURN(std::vector<std::string> all,
                             b->GatherAll(Block(me), "gather", timeout));
  if (all.size() != static_cast<size_t>(n)) return Internal("gather: wrong block count");
  for (int r = 0; r < n; ++r)
    if (all[r] != Block(r))
      return Internal("gather: rank " + std::to_string(r) + "'s block differs");
  std::string big(100000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 13 + 5);
  SEEDSTORE_ASSIGN_OR_RETURN(
      std::string got, b->Broadcast(me == n - 1 ? big : "ignored", n - 1, "broadcast", timeout));
  if (got != big) return Internal("broadcast: the bytes differ");
  SEEDSTORE_RETURN_IF_ERROR(b->Barrier("barrier", timeout));
  const std::string transport = b->transport();
  SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<Collective> c,
                             CreateBootstrapCollective(std::move(b), {timeout}));
  if (c->backend() != transport)
    return Internal("collective: backend " + std::string(c->backend()));
  uint64_t sum[2] = {static_cast<uint64_t>(me) + 1, 1ull << 63};
  SEEDSTORE_RETURN_IF_ERROR(c->AllReduceSum(sum, 2, "allreduce"));
  if (sum[0] != static_cast<uint64_t>(n) * (n + 1) / 2 || sum[1] != (n % 2 ? 1ull << 63 : 0))
    return Internal("allreduce: wrong sums");
  std::vector<uint64_t> ranks(n);
  const uint64_t mine = 1000 + me;
  SEEDSTORE_RETURN_IF_ERROR(c->AllGather(&mine, 8, ranks.data(), "allgather"));
  for (int r = 0; r < n; ++r)
    if (ranks[r] != 1000u + r) return Internal("allgather: rank " + std::to_string(r) + " differs");
  return Status::Ok();
}

TEST(BootstrapRanks, Body) {
  if (std::getenv("SEEDSTORE_RANK_BODY") == nullptr)
    GTEST_SKIP() << "rank body: runs under a launcher from the Bootstrap tests";
  const std::string kind = Env("SEEDSTORE_BOOT_KIND");
  const double timeout = std::atof(Env("SEEDSTORE_BOOT_TIMEOUT", "2").c_str());
  Result<std::unique_ptr<Bootstrap>> b = MakeBootstrap(kind);
  if (!b.ok()) {
    Say(-1, "create", b.status());
    std::_Exit(1);
  }
  const int me = (*b)->rank();
  if (Env("SEEDSTORE_BOOT_STEP") == "exchanges") {
    TestFaultPoint(me, "exchanges");
    Say(me, "exchanges", Exchanges(std::move(*b), timeout));
    std::_Exit(0);  // the verdict is the printed line
  }
  TestFaultPoint(me, "exchange");
  Result<std::vector<std::string>> r = (*b)->GatherAll("x", "exchange", timeout);
  Say(me, "exchange", r.status());
  // MPI: keep running until the slowest live rank has reported (mpirun ends the job when the
  // first rank exits), then end without finalizing: the world is broken.
  if (kind == "mpi") std::this_thread::sleep_for(std::chrono::duration<double>(timeout + 3));
  std::_Exit(0);
}

// Starts `n` ranks of the body on transport `kind` (mpirun, or n background processes sharing
// a store folder, a stopped one killed once the others ended), with SEEDSTORE_TEST_FAULT =
// `fault` ("" for none) and the step the body runs.
Proc Launch(const std::string& kind, int n, const std::string& step, const std::string& fault,
            double timeout) {
  const std::string env =
      "SEEDSTORE_RANK_BODY=1 SEEDSTORE_BOOT_KIND=" + kind + " SEEDSTORE_BOOT_STEP=" + step +
      " SEEDSTORE_BOOT_TIMEOUT=" + std::to_string(timeout) + " SEEDSTORE_TEST_FAULT=" + fault + " ";
  const std::string body = SelfExe() + " --gtest_filter=BootstrapRanks.Body";
  if (kind == "mpi") return Shell(env + ranktest::Mpirun(n) + " " + body);
  static int runs = 0;
  const std::string dir = ranktest::TempDir() + "/kv" + std::to_string(runs++);
  ::mkdir(dir.c_str(), 0755);
  std::string sh;
  for (int r = 0; r < n; ++r)
    sh += env + "SEEDSTORE_BOOT_DIR=" + dir + " SEEDSTORE_BOOT_RANK=" + std::to_string(r) +
          " SEEDSTORE_BOOT_SIZE=" + std::to_string(n) + " " + body + " & p" + std::to_string(r) +
          "=$!; ";
  // A stopped rank never ends: it is killed once the others have.
  const bool stop = fault.size() > 5 && fault.compare(fault.size() - 5, 5, ":stop") == 0;
  const int faulted = stop ? std::atoi(fault.c_str()) : -1;
  for (int r = 0; r < n; ++r)
    if (r != faulted) sh += "wait $p" + std::to_string(r) + "; ";
  if (faulted >= 0) sh += "kill -9 $p" + std::to_string(faulted) + " 2>/dev/null; wait; ";
  return Shell(sh + "true");
}

// Rank `r`'s line for `step`, or "" when it printed none.
std::string LineOf(const Proc& p, int r, const std::string& step) {
  const std::string head = "rank " + std::to_string(r) + ": " + step + ": ";
  const size_t at = p.out.find(head);
  if (at == std::string::npos) return "";
  return p.out.substr(at + head.size(), p.out.find('\n', at) - at - head.size());
}

class Bootstrap3 : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "mpi") {
      SEEDSTORE_NEED_MPIRUN();
    }
  }
  bool mpi() const { return GetParam() == "mpi"; }
};

TEST_P(Bootstrap3, ExchangesAgreeOnEveryRankAndALateRankIsWaitedFor) {
  const Proc p = Launch(GetParam(), 3, "exchanges", "1:exchanges:sleep=0.75", 3.0);
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(LineOf(p, r, "exchanges"), "ok") << "rank " << r << "\n" << p.out << p.err;
}

// A stopped rank `culprit` of 3 (timeout 2 s): the namer (rank 0; rank 1 for rank 0) says it
// did not arrive; every live rank returns kIo; the store relays the namer's message.
void ExpectStoppedRankNamed(const std::string& kind, int culprit) {
  const double timeout = 2.0;
  const Proc p = Launch(kind, 3, "exchange", std::to_string(culprit) + ":exchange:stop", timeout);
  const int namer = culprit == 0 ? 1 : 0;
  const std::string named = "rank " + std::to_string(culprit) + " did not";
  for (int r = 0; r < 3; ++r) {
    if (r == culprit) continue;
    const std::string line = LineOf(p, r, "exchange");
    EXPECT_EQ(line.rfind("IO_ERROR", 0), 0u) << "rank " << r << ": " << line << "\n"
                                             << p.out << p.err;
    if (r == namer || kind != "mpi") {
      EXPECT_NE(line.find(named), std::string::npos) << "rank " << r << ": " << line << "\n"
                                                     << p.out;
    }
  }
  EXPECT_LT(p.seconds, 2 * timeout + 3 + 10) << p.out << p.err;
}

TEST_P(Bootstrap3, StoppedRankIsNamedByRankZero) { ExpectStoppedRankNamed(GetParam(), 1); }
TEST_P(Bootstrap3, StoppedRankZeroIsNamedByRankOne) { ExpectStoppedRankNamed(GetParam(), 0); }

TEST_P(Bootstrap3, KilledRankIsNamed) {
  const double timeout = 2.0;
  const Proc p = Launch(GetParam(), 3, "exchange", "2:exchange:kill", timeout);
  if (mpi()) {  // mpirun ends the job and names the rank
    EXPECT_NE(p.code, 0) << p.out << p.err;
    EXPECT_NE((p.out + p.err).find("rank 2"), std::string::npos) << p.out << p.err;
  } else {
    const std::string line = LineOf(p, 0, "exchange");
    EXPECT_NE(line.find("rank 2 did not"), std::string::npos) << line << "\n" << p.out << p.err;
    EXPECT_NE(LineOf(p, 1, "exchange").find("rank 2 did not"), std::string::npos) << p.out;
  }
  EXPECT_LT(p.seconds, 2 * timeout + 3 + 10) << p.out << p.err;
}

INSTANTIATE_TEST_SUITE_P(Transport, Bootstrap3, ::testing::Values("mpi", "store"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace seedstore
