#include "tools/cli.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "io/dist_store.h"
#include "io/h5store.h"
#include "io/interop.h"
#include "store/integer_text.h"

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

namespace detail {

std::string OptionDisplayName(const std::string& names) {
  std::string first, shown;
  size_t pos = 0;
  while (pos <= names.size()) {
    const size_t comma = std::min(names.find(',', pos), names.size());
    const std::string part = names.substr(pos, comma - pos);
    if (first.empty()) first = part;
    if (shown.empty() && part.rfind("--", 0) == 0) shown = part;
    pos = comma + 1;
  }
  return shown.empty() ? first : shown;
}

}  // namespace detail

CLI::Option* AddNumber(CLI::App& app, const std::string& name, double* value,
                       const std::string& help, double min) {
  CLI::Option* opt = app.add_option(
      name,
      [value, min, shown = detail::OptionDisplayName(name)](const CLI::results_t& r) {
        const std::string& text = r.back();
        char* end = nullptr;
        const double v = text.empty() || std::isspace(static_cast<unsigned char>(text[0]))
                             ? NAN
                             : std::strtod(text.c_str(), &end);
        if (end != text.c_str() + text.size() || !std::isfinite(v))
          throw CLI::ValidationError(shown, "'" + ShownValue(text) + "' is not a finite number");
        if (v < min) {
          char m[32];
          std::snprintf(m, sizeof m, "%.17g", min);
          throw CLI::ValidationError(shown, ShownValue(text) + " is below the minimum " + m);
        }
        *value = v;
        return true;
      },
      help);
  opt->type_name("FLOAT")->type_size(1)->expected(1);
  return opt;
}

Result<std::optional<Layout>> LayoutForRank(const std::string& layout, int rank) {
  if (layout.empty()) {
    if (rank >= 0) return InvalidArgument("--rank needs --layout");
    return std::optional<Layout>();
  }
  if (rank < 0) return InvalidArgument("--layout needs --rank");
  SEEDSTORE_ASSIGN_OR_RETURN(Layout l, Layout::Load(layout));
  if (rank >= l.world_size())
    return InvalidArgument("--rank " + std::to_string(rank) + " is outside the mesh of '" + layout +
                           "' (" + std::to_string(l.world_size()) + " ranks)");
  return std::optional<Layout>(std::move(l));
}

Status CheckOutputIsNotInput(const std::string& out, const std::string& source, const Catalog* cat,
                             bool may_rewrite_store) {
  struct stat o;
  if (out.empty() || source.empty() || ::stat(out.c_str(), &o) != 0)
    return Status::Ok();  // nothing there to lose
  auto same = [&o](const std::string& f) {
    struct stat s;
    return ::stat(f.c_str(), &s) == 0 && s.st_dev == o.st_dev && s.st_ino == o.st_ino;
  };
  const bool store = cat && cat->seedstore_format();
  if (same(source) && !(may_rewrite_store && store))
    return InvalidArgument("-o '" + out + "' is the input '" + source + "'; write to another path");
  std::set<std::string> files;  // the source's other files
  if (cat)
    for (const std::string& f : cat->other_files()) files.insert(f);
  for (const std::string& f : files)
    if (f != source && same(f))
      return InvalidArgument("-o '" + out + "' is " + (f == out ? "" : "'" + f + "', ") +
                             "a file of the input '" + source + "'; write to another path");
  return Status::Ok();
}

CLI::Validator FileOutput(const std::string& what) {
  return CLI::Validator(
      [what](std::string& out) {
        return out == "-" ? what + " output must be a file; '-' (stdout) is not supported"
                          : std::string();
      },
      "");
}

void AddSimulateOptions(CLI::App& app, std::string* simulate, int* simulate_rank) {
  app.add_option("--simulate", *simulate,
                 "Testing: process --simulate-rank hangs, dies (exit 3) or is killed (SIGKILL) "
                 "mid-save, after writing its rank files")
      ->check(CLI::IsMember({"none", "hang", "die", "kill"}));
  AddInteger(app, "--simulate-rank", simulate_rank, "Testing: the process that hangs/dies", 0);
}

void AddThreadsOption(CLI::App& app, int* threads, const std::string& what,
                      const std::string& zero) {
  AddInteger(app, "--threads", threads,
             what + ", 0.." + std::to_string(kMaxCpuThreads) + " (0 = " + zero + ")", 0,
             kMaxCpuThreads);
}

void AddCodecOption(CLI::App& app, std::vector<std::string>* codecs) {
  app.add_option("--codec", *codecs,
                 "zstd (default: shuffle + zstd), none (dense tensors stored uncompressed: "
                 "page-cache reads at copy speed, bigger files) or none:GLOB (only the tensors "
                 "whose names match GLOB); repeatable")
      ->type_name("CODEC");
}

Status ApplyCodecs(const std::vector<std::string>& codecs, const Catalog& source, WriteOptions* w) {
  for (const std::string& c : codecs) {
    if (c == "zstd") continue;
    if (c == "none") {
      w->uncompressed.push_back("*");
      continue;
    }
    if (c.rfind("none:", 0) != 0 || c.size() == 5)
      return InvalidArgument("--codec '" + c + "': expected zstd, none or none:GLOB");
    const std::string glob = c.substr(5);
    SEEDSTORE_RETURN_IF_ERROR(CheckGlobMatches(glob, {&source}, "--codec none:"));
    w->uncompressed.push_back(glob);
  }
  return Status::Ok();
}

void AddThreadsAndDeviceOptions(CLI::App& app, int* threads, std::string* device) {
  AddThreadsOption(app, threads, "CPU threads", "all cores");
  app.add_option("--device", *device, "auto (CUDA when a GPU is present), cpu or cuda");
}

int SaveStepFailure(Collective& c, const Status& st) {
  if (st.ok()) return 0;
  if (c.rank() == 0 || st.message().find("another rank") == std::string::npos) Fail(st);
  if (c.broken()) c.Abort(RecordTestExit(ExitCode(st)));
  return ExitCode(st);
}

int RankVerdict(const Status& verdict, int rank) {
  if (!verdict.ok() && rank == 0) return Fail(verdict);
  return ExitCode(verdict);
}

int SaveVerdict(Collective& c, const Status& verdict) {
  const int code = RankVerdict(verdict, c.rank());
  if (!c.broken()) return code;
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(RecordTestExit(code));
}

int RunRanks(const std::string& backend, double timeout,
             const std::function<int(Collective& c, std::string* outcome)>& body) {
  auto comm = OpenCollective(backend, CollectiveOptions{timeout});
  if (!comm.ok()) return Fail(comm.status());
  std::string outcome;
  const int code = body(**comm, &outcome);
  const int rank = (*comm)->rank();
  TestFaultPoint(rank, "end");
  if (timeout <= 0) {
    comm->reset();
    return code;
  }
  std::mutex m;
  std::condition_variable cv;
  bool ended = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(m);
    if (cv.wait_for(lock, std::chrono::duration<double>(timeout), [&] { return ended; })) return;
    std::fprintf(stderr,
                 "%s: rank %d: MPI_Finalize did not finish within %g s: another rank stopped or "
                 "hung after the job's last step; %s; rank %d ends with exit code %d without "
                 "MPI_Finalize\n",
                 g_command.c_str(), rank, timeout,
                 outcome.empty() ? "the job's work is done" : outcome.c_str(), rank, code);
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(RecordTestExit(code));
  });
  comm->reset();  // MPI_Finalize
  {
    std::lock_guard<std::mutex> lock(m);
    ended = true;
  }
  cv.notify_one();
  watchdog.join();
  return code;
}

int RecordTestExit(int code) {
  const char* file = std::getenv("SEEDSTORE_TEST_EXIT_FILE");
  if (!file) return code;
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  // Written whole or not at all (the launcher may kill this process meanwhile).
  const std::string name = std::string(file) + "." + (rank ? rank : "0"), temp = name + ".tmp";
  if (FILE* f = std::fopen(temp.c_str(), "w")) {
    std::fprintf(f, "%d\n", code);
    if (std::fclose(f) == 0) std::rename(temp.c_str(), name.c_str());
  }
  return code;
}

CLI::Option* AddSourceArg(CLI::App& app, std::string* source) {
  return app
      .add_option("source", *source,
                  "Spec (.json), store, distributed save or safetensors (file or index.json)")
      ->required();
}

void AddDistSaveOptions(CLI::App& app, bool* full_proof, int* rank_file_version) {
  app.add_flag("--full-proof", *full_proof,
               "Prove by decoding and fingerprinting every written chunk (default: check its "
               "stored bytes against the chunk-info table and sum the recorded fingerprints)");
  AddInteger(app, "--rank-file-version", rank_file_version,
             "Format version of the rank files: 2 (default) packs each file's pieces into a few "
             "datasets; 1 writes a dataset per piece, for readers built before version 2",
             kStoreFormatVersion, kCellsFormatVersion);
}

void AddCollectiveOptions(CLI::App& app, std::string* backend, double* timeout, int* threads) {
  app.add_option("--backend", *backend,
                 "auto (mpi under mpirun, else self), mpi, nccl (GPU collectives bootstrapped "
                 "over mpi) or self")
      ->check(CLI::IsMember({"auto", "mpi", "nccl", "self"}));
  AddNumber(app, "--timeout", timeout,
            "Seconds a rank waits for the others at each step before the job is ended "
            "(<= 0: forever)");
  AddThreadsOption(app, threads, "CPU threads per rank", "cores / ranks per node");
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
