// Shared plumbing of the seedstore command line: subcommand registry, error reporting.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "io/collective.h"
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

/// --simulate none|hang|die|kill and --simulate-rank R of the commands that write a
/// distributed save (save-ranks, reshard): the fault-injection hook of tests/mpi/test_faults.cc
/// (DistSaveOptions::simulate in io/dist_store.h).
void AddSimulateOptions(CLI::App& app, std::string* simulate, int* simulate_rank);

/// --backend auto|mpi|nccl|self, --timeout SECONDS and --threads N of the multi-rank commands
/// (verify-ranks, save-ranks, reshard); see OpenCollective in io/collective.h.
void AddCollectiveOptions(CLI::App& app, std::string* backend, double* timeout, int* threads);

/// --threads N (CPU threads, 0 = all cores) and --device auto|cpu|cuda of the single-process
/// commands that generate or hash tensors (gen, materialize, fingerprint, diff).
void AddThreadsAndDeviceOptions(CLI::App& app, int* threads, std::string* device);

/// The name of the running subcommand (for messages).
extern std::string g_command;

}  // namespace seedstore::cli
