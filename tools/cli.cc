#include "tools/cli.h"

#include <unistd.h>

#include <cstdio>

namespace seedstore::cli {

std::string g_command = "seedstore";

std::vector<Command>& Registry() {
  static std::vector<Command> r;
  return r;
}

int ExitCode(const Status& s) { return s.ok() ? 0 : 1 + static_cast<int>(s.code()); }

int Fail(const Status& s) {
  std::fprintf(stderr, "%s: error: %s\n", g_command.c_str(), s.ToString().c_str());
  return ExitCode(s);
}

bool StdoutIsTty() { return isatty(STDOUT_FILENO) == 1; }
bool StderrIsTty() { return isatty(STDERR_FILENO) == 1; }

void AddSimulateOptions(CLI::App& app, std::string* simulate, int* simulate_rank) {
  app.add_option("--simulate", *simulate,
                 "Testing: process --simulate-rank hangs, dies (exit 3) or is killed (SIGKILL) "
                 "mid-save, after writing its rank files")
      ->check(CLI::IsMember({"none", "hang", "die", "kill"}));
  app.add_option("--simulate-rank", *simulate_rank, "Testing: the process that hangs/dies");
}

void AddThreadsAndDeviceOptions(CLI::App& app, int* threads, std::string* device) {
  app.add_option("--threads", *threads, "CPU threads (0 = all cores)");
  app.add_option("--device", *device, "auto (CUDA when a GPU is present), cpu or cuda");
}

int SaveStepFailure(Collective& c, const Status& st) {
  if (st.ok()) return 0;
  if (c.rank() == 0 || st.message().find("another rank") == std::string::npos) Fail(st);
  if (c.broken()) c.Abort(ExitCode(st));
  return ExitCode(st);
}

int RankVerdict(const Status& verdict, int rank) {
  if (!verdict.ok() && rank == 0) return Fail(verdict);
  return ExitCode(verdict);
}

void AddCollectiveOptions(CLI::App& app, std::string* backend, double* timeout, int* threads) {
  app.add_option("--backend", *backend,
                 "auto (mpi under mpirun, else self), mpi, nccl (GPU collectives bootstrapped "
                 "over mpi) or self")
      ->check(CLI::IsMember({"auto", "mpi", "nccl", "self"}));
  app.add_option("--timeout", *timeout,
                 "Seconds a rank waits for the others at each step before the job is ended "
                 "(<= 0: forever)");
  app.add_option("--threads", *threads, "CPU threads per rank (0 = cores / ranks per node)");
}

Progress::Progress(std::string label, uint64_t total)
    : label_(std::move(label)), total_(total), on_(StderrIsTty() && total > 1) {}

void Progress::Advance(uint64_t n) {
  done_ += n;
  if (!on_ || total_ == 0) return;
  const int pct = static_cast<int>(100 * done_ / total_);
  if (pct == last_pct_) return;
  last_pct_ = pct;
  const int width = 30, fill = pct * width / 100;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% (%llu/%llu)", label_.c_str(), fill,
               "##############################", width - fill, "", pct,
               static_cast<unsigned long long>(done_), static_cast<unsigned long long>(total_));
  std::fflush(stderr);
}

Progress::~Progress() {
  if (on_ && last_pct_ >= 0) std::fprintf(stderr, "\r\033[K");
}

}  // namespace seedstore::cli
