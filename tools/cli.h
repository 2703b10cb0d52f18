// Shared plumbing of the seedstore command line: subcommand registry, error reporting.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "io/collective.h"
#include "io/store_format.h"
#include "store/catalog.h"
#include "store/integer_text.h"
#include "store/layout.h"
#include "store/status.h"

namespace seedstore::cli {

/// A subcommand: `setup` declares its options on `app` and returns the function to run.
struct Command {
  const char* name;
  const char* help;
  std::function<std::function<int()>(CLI::App& app)> setup;
};
std::vector<Command>& Registry();
struct Register {
  explicit Register(Command c) { Registry().push_back(std::move(c)); }
};

/// Prints "seedstore <cmd>: error: <CODE>: <message>" to stderr; returns 1 + code (2..8).
int Fail(const Status& s);
/// Exit code for a status (0 when ok).
int ExitCode(const Status& s);
/// A failed step of a command that writes a distributed save (save-ranks, reshard): every rank
/// fails alike, so rank 0 -- or a rank that saw the cause itself, not just "another rank" --
/// prints it; when a collective broke (a rank hung or died) the whole job is ended at once
/// (the world cannot be shut down cleanly). Returns the exit code (0 for OK).
int SaveStepFailure(Collective& c, const Status& st);

/// A multi-rank command's verdict (the same on every rank): rank 0 reports a failure as Fail
/// does; every rank returns its exit code.
int RankVerdict(const Status& verdict, int rank);
/// The verdict of save-ranks or reshard on one rank (RankVerdict). When a collective broke after
/// the commit (a rank hung or died; the save is committed all the same), this process ends here
/// with that exit code: MPI_Finalize would wait for the missing ranks.
int SaveVerdict(Collective& c, const Status& verdict);
/// A multi-rank command (verify-ranks, save-ranks, reshard) on one rank: opens the collective
/// (OpenCollective with `backend` and `timeout`; on failure prints it and returns its exit
/// code), runs `body` on it, then shuts it down -- MPI_Finalize, which waits for every rank
/// and has no deadline of its own -- under a watchdog of `timeout` seconds (none when
/// <= 0). When a rank stops or hangs after the job's last step (its final barrier passed),
/// the others would wait in MPI_Finalize forever and mpirun with them; on expiry the watchdog
/// prints "<command>: rank R: MPI_Finalize did not finish within T s: another rank stopped
/// or hung after the job's last step; <outcome>; rank R ends with exit code C without
/// MPI_Finalize" to stderr and ends this process with `body`'s exit code C (_Exit, recorded
/// by RecordTestExit). A rank that exits without MPI_Finalize makes mpirun end the job: it
/// sends the remaining ranks SIGCONT and SIGTERM (then SIGKILL), so a stopped rank goes too.
/// `body` sets `outcome` to what is true by then ("the save 'P' is committed"). Before the
/// shutdown, the test-only step "end" (TestFaultPoint) runs. Returns `body`'s exit code.
int RunRanks(const std::string& backend, double timeout,
             const std::function<int(Collective& c, std::string* outcome)>& body);
/// Tests only: when SEEDSTORE_TEST_EXIT_FILE is set, writes `code` to "<its value>.<rank>"
/// (rank: OMPI_COMM_WORLD_RANK, else 0), so a test under mpirun sees each rank's exit code
/// (tests/py/test_fault_matrix.py). Returns `code`.
int RecordTestExit(int code);
/// True when stdout is a terminal (progress output is shown only then).
bool StdoutIsTty();
bool StderrIsTty();

/// Progress on stderr for long work, only on a terminal: "label  37% (x/y)".
class Progress {
 public:
  Progress(std::string label, uint64_t total);
  void Advance(uint64_t n = 1);
  ~Progress();

 private:
  std::string label_;
  uint64_t total_, done_ = 0;
  int last_pct_ = -1;
  bool on_;
};

/// Integers on the command line -- every integer option, and the integers inside option values
/// such as --shape and --key -- are parsed by ParseInteger (store/integer_text.h).

/// Adds an integer option (or a list of integers, e.g. --ranks 0,5) whose values are parsed
/// by ParseInteger within [min, max]; a value outside is a usage error (exit 2) naming the
/// option and the value. Use it for every integer option.
template <class T>
CLI::Option* AddInteger(CLI::App& app, const std::string& name, T* value, const std::string& help,
                        T min = std::numeric_limits<T>::min(),
                        T max = std::numeric_limits<T>::max());
template <class T>
CLI::Option* AddInteger(CLI::App& app, const std::string& name, std::vector<T>* values,
                        const std::string& help, T min = std::numeric_limits<T>::min(),
                        T max = std::numeric_limits<T>::max());

/// Adds a floating-point option that must be a finite number >= min (nan and inf are refused).
CLI::Option* AddNumber(CLI::App& app, const std::string& name, double* value,
                       const std::string& help, double min = std::numeric_limits<double>::lowest());

/// --layout L.json with --rank R, for the commands that write or hash one rank's shards: the
/// layout, with R checked to be a rank of its mesh; nullopt when neither is given (rank < 0:
/// --rank not given). Errors (kInvalidArgument): "--layout needs --rank", "--rank needs
/// --layout", "--rank R is outside the mesh of 'L.json' (N ranks)"; Layout::Load's.
Result<std::optional<Layout>> LayoutForRank(const std::string& layout, int rank);

/// Refuses, before anything is written, an output `out` (given as -o) that is the same file
/// (device and inode, links followed) as the input `source` (a model source, a layout file, a
/// spec) or one of its files: the shard files of a Hugging Face index, the rank files of a
/// distributed save (`cat`, when the source is open; may be null). Ok when either is "" or
/// `out` does not exist. With `may_rewrite_store`, a store or distributed save's master may be
/// its own output (reshard and save-ranks replace it atomically with the same weights); its
/// rank files still may not. Error (kInvalidArgument): "-o 'out' is the input 'file'; write to
/// another path".
Status CheckOutputIsNotInput(const std::string& out, const std::string& source,
                             const Catalog* cat = nullptr, bool may_rewrite_store = false);

/// The check of a command's -o that writes `what` ("safetensors", "store", ...) to a file by
/// name, atomically: "-" (stdout) is refused, a usage error (exit 2) "safetensors output must
/// be a file; '-' (stdout) is not supported" (only gen writes to stdout).
CLI::Validator FileOutput(const std::string& what);

/// The required positional "source" of the commands that read any source (OpenSource in
/// io/open.h): a spec, store, distributed save or safetensors file or index.
CLI::Option* AddSourceArg(CLI::App& app, std::string* source);

/// --simulate none|hang|die|kill and --simulate-rank R of the commands that write a
/// distributed save (save-ranks, reshard): the fault-injection hook of tests/mpi/test_faults.cc
/// (DistSaveOptions::simulate in io/dist_store.h).
void AddSimulateOptions(CLI::App& app, std::string* simulate, int* simulate_rank);

/// --full-proof and --rank-file-version 1|2 of the commands that write a distributed save
/// (save-ranks, reshard): DistSaveOptions::full_proof and ::rank_file_version.
void AddDistSaveOptions(CLI::App& app, bool* full_proof, int* rank_file_version);

/// --backend auto|mpi|nccl|self, --timeout SECONDS and --threads N of the multi-rank commands
/// (verify-ranks, save-ranks, reshard); see OpenCollective in io/collective.h.
void AddCollectiveOptions(CLI::App& app, std::string* backend, double* timeout, int* threads);

/// --codec CODEC of the commands that write dense tensors (import, save-ranks, reshard),
/// repeatable: "zstd" (the default: shuffle + zstd), "none" (every dense tensor stored with
/// no filters: docs/FORMAT.md 4.2) or "none:GLOB" (only the tensors whose names match GLOB).
void AddCodecOption(CLI::App& app, std::vector<std::string>* codecs);

/// The --codec values into w->uncompressed, each GLOB checked to match a tensor of `source`
/// (CheckGlobMatches). Errors (kInvalidArgument): "--codec 'x': expected zstd, none or
/// none:GLOB"; "--codec none: 'GLOB' matches no tensor of '<source>'".
Status ApplyCodecs(const std::vector<std::string>& codecs, const Catalog& source, WriteOptions* w);

/// --threads N: CPU threads, 0..kMaxCpuThreads; help "<what>, 0..256 (0 = <zero>)".
void AddThreadsOption(CLI::App& app, int* threads, const std::string& what,
                      const std::string& zero);

/// --threads N (CPU threads, 0 = all cores) and --device auto|cpu|cuda of the single-process
/// commands that generate or hash tensors (gen, materialize, fingerprint, diff).
void AddThreadsAndDeviceOptions(CLI::App& app, int* threads, std::string* device);

/// The name of the running subcommand (for messages).
extern std::string g_command;

// ---- templates' implementation ----
namespace detail {
/// The name an option is shown by in messages: its long name ("--seed" of "-s,--seed").
std::string OptionDisplayName(const std::string& names);
}  // namespace detail

template <class T>
CLI::Option* AddInteger(CLI::App& app, const std::string& name, T* value, const std::string& help,
                        T min, T max) {
  static_assert(std::is_integral_v<T> && sizeof(T) <= 8);
  CLI::Option* opt = app.add_option(
      name,
      [value, min, max, shown = detail::OptionDisplayName(name)](const CLI::results_t& r) {
        __int128 v = 0;
        const std::string err = ParseIntegerIn(r.back(), min, max, &v);
        if (!err.empty()) throw CLI::ValidationError(shown, err);
        *value = static_cast<T>(v);
        return true;
      },
      help);
  opt->type_name(min < 0 ? "INT" : "UINT")->type_size(1)->expected(1);
  return opt;
}

template <class T>
CLI::Option* AddInteger(CLI::App& app, const std::string& name, std::vector<T>* values,
                        const std::string& help, T min, T max) {
  static_assert(std::is_integral_v<T> && sizeof(T) <= 8);
  CLI::Option* opt = app.add_option(
      name,
      [values, min, max, shown = detail::OptionDisplayName(name)](const CLI::results_t& r) {
        std::vector<T> out;
        for (const std::string& text : r) {
          __int128 v = 0;
          const std::string err = ParseIntegerIn(text, min, max, &v);
          if (!err.empty()) throw CLI::ValidationError(shown, err);
          out.push_back(static_cast<T>(v));
        }
        *values = std::move(out);
        return true;
      },
      help);
  opt->type_name(min < 0 ? "INT" : "UINT")
      ->type_size(1)
      ->expected(1, CLI::detail::expected_max_vector_size);
  return opt;
}

}  // namespace seedstore::cli
