// Atomic file replacement (invariant I5): write to a temporary file in the same folder,
// fsync it, rename it over the destination, fsync the folder. Until Commit() succeeds the
// previous file at `path` is untouched; a crash leaves at most a stray temporary, which the
// next atomic write to the same `path` removes (see below).
//
// Temporary names: "<path>.tmp-<host>-<pid>-<n>", where <host> is this machine's host name
// (characters other than [A-Za-z0-9.] replaced by '_', at most 64), <pid> the writer's process
// id and <n> a per-process counter.
//
// Stale temporaries. A writer killed with SIGKILL (or a machine that lost power) leaves its
// temporary behind. AtomicFile::Create(path) first removes every temporary of that same `path`
// that is stale, by this rule: its name is exactly "<path>.tmp-<host>-<pid>-<n>" with <host>
// equal to this machine's tag, it is a regular file, <pid> is not this process, and process
// <pid> is gone on this host (ProcessIsGone). Temporaries of other hosts (a
// shared file system), of live processes (including ones we may not signal: EPERM), of other
// targets, and any other file are never touched. A reused pid only keeps a stale temporary a
// little longer; it never removes a live one. Names without a host tag (written before the tag
// existed) are left alone.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "store/status.h"

namespace seedstore {

/// `path` with every symbolic link it ends in followed (relative targets taken from the link's
/// folder), up to 40; `path` itself when it is no link or does not exist. A link to nowhere
/// resolves to where it points, which a writer then creates. Errors: kInvalidArgument naming
/// `path` on more than 40 links (a loop), kIo when a link cannot be read.
Result<std::string> ResolveSymlinks(const std::string& path);

/// Files to remove if this process is ended by SIGINT, SIGTERM, SIGHUP or SIGQUIT (Ctrl-C, a
/// scheduler's preemption, a launcher ending a failed job): every AtomicFile's uncommitted
/// temporary, a distributed save's writer lock, and its rank files until its master is in
/// place register here while they exist. The
/// handler, installed by InstallSignalCleanup() (the command line does; a library user may),
/// removes them and then ends the process by the same signal, as if there were no handler.
/// SIGKILL cannot be caught: the temporaries it leaves are removed by the next writer (rules
/// above); a lock file it leaves is no longer held (WriterLockHeld), and the next writer takes
/// it over.
/// Register copies `path` into one of 1024 fixed slots (none free, or a path of 4096 bytes or
/// more: returns -1 and the file is simply not removed on a signal); Unregister(slot) frees it
/// (-1: nothing). Both are thread-safe and safe against the handler running at any moment.
namespace signal_cleanup {
int Register(const std::string& path);
void Unregister(int slot);
/// Brackets creating a file by a name the handler is to remove, or a rename that ends a write
/// (AtomicFile::Create and Commit, HDF5 creating a writer's temporary by name, the writer
/// lock): the handler waits for those in flight (at most 2 s: a creation stuck in the file
/// system), so that no file it is to remove appears after its pass. The calling thread blocks
/// the four signals inside the bracket (nested brackets: until the outermost EndChange), so
/// the handler never interrupts a thread in one: a signal goes to another thread or is handled
/// at EndChange. BeginChange false: the process is ending on a signal, create or rename
/// nothing (the bracket is then closed already). Register a name before its
/// file is created where no other process's file can have it (a temporary), else right after
/// (the lock, created with O_EXCL), both before EndChange; EndChange after the rename and
/// Unregister.
bool BeginChange();
void EndChange();
/// Registers paths for as long as it lives (or until Release()).
class Scope {
 public:
  Scope() = default;
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  ~Scope() { Release(); }
  void Add(const std::string& path) { slots_.push_back(Register(path)); }
  void Release() {
    for (int s : slots_) Unregister(s);
    slots_.clear();
  }

 private:
  std::vector<int> slots_;
};
}  // namespace signal_cleanup
/// Installs the handler for the four signals above, for each one whose disposition is still
/// the default (a signal the caller ignores or handles is left alone). Idempotent.
void InstallSignalCleanup();

class AtomicFile {
 public:
  /// Follows the symbolic links `path` ends in (ResolveSymlinks; path() is then the file they
  /// lead to), removes the stale temporaries of that path (rule above; not with
  /// `remove_stale` false, for a caller that collects them itself), then creates
  /// TempName(path, getpid(), n) next to it: when it replaces a file, with that file's mode
  /// (and group, where allowed); else with `mode` when >= 0, or 0644 less the umask. A mode
  /// without owner read and write (a read-only 0444 checkpoint) is given at Commit: until then
  /// the owner may also read and write the temporary (libraries reopen it by name to write).
  /// Errors: kInvalidArgument naming `path` when it is a directory or another file that is not
  /// a regular one (a device, pipe or socket: the rename would replace it); kIo when the
  /// temporary cannot be created (e.g. the folder does not exist).
  static Result<AtomicFile> Create(const std::string& path, int mode = -1,
                                   bool remove_stale = true);
  AtomicFile(AtomicFile&& o) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  ~AtomicFile();  // removes the temporary if not committed

  /// The temporary's name for a writer `pid` on this host: "<path>.tmp-<host>-<pid>-<n>"; when
  /// that could exceed NAME_MAX (255 bytes) for a long file name, the name's part is cut to fit
  /// and ends in "~<16 hex digits: XXH3-64 of the whole name>" (docs/FORMAT.md 6).
  static std::string TempName(const std::string& path, pid_t pid, unsigned n);
  /// Removes the stale temporaries of `path` (rule above); returns how many were removed.
  /// Errors are ignored (a temporary that cannot be removed is simply left).
  static int RemoveStaleTemporaries(const std::string& path);

  /// The temporary file's path (for libraries that open files by name, like HDF5).
  const std::string& temp_path() const { return temp_; }
  const std::string& path() const { return path_; }
  /// File descriptor of the temporary file (-1 if closed).
  int fd() const { return fd_; }
  /// Writes all bytes at the current end (retries short writes). Errors name the file.
  Status Append(const void* data, size_t n);
  /// Closes the descriptor (for libraries that reopen the temporary by name).
  Status CloseFd();
  /// fsync + close: the temporary is complete and durable, not yet in place (Commit then only
  /// renames). For writers of several files that rename none until all are written.
  Status Sync();
  /// Sync (unless done) + rename + fsync(folder): CommitAll of this one file. A failed folder
  /// fsync is kIo naming the folder: the file is in place but not known to be durable. A large
  /// file replaced at `path` (64 MiB or more) is freed by the kernel on a thread of its own once
  /// the new file is durable, not in Commit.
  Status Commit();
  /// Commits `files`: syncs those not synced yet, several at once (the file system commits
  /// concurrent fsyncs together: 1,024 files of 1 MB, 1.05 s on 2 threads, 0.77 s on 8), then
  /// renames them in order inside one signal_cleanup bracket, so that SIGINT, SIGTERM, SIGHUP
  /// or SIGQUIT cannot end the process between two renames (the signal is handled once all are
  /// done; the handler waits at most 2 s), then fsyncs each of their folders once. Stops at
  /// the first error, leaving the files before it renamed and those after it as temporaries
  /// (removed by their destructors); a failed folder fsync is kIo naming the folder (the files
  /// are in place but not known to be durable). Only a crash (SIGKILL, power loss) during the
  /// renames can leave some renamed and some not.
  static Status CommitAll(const std::vector<AtomicFile*>& files);
  static Status CommitAll(std::vector<AtomicFile>& files);

 private:
  static void ReleaseReplaced(int fd);
  // Commit less the folder's fsync; *held: the replaced file (-1: none), for ReleaseReplaced
  // once the rename is durable.
  Status Rename(int* held);
  AtomicFile(std::string path, std::string temp, int fd, int cleanup_slot)
      : path_(path), temp_(temp), fd_(fd), cleanup_slot_(cleanup_slot) {}
  std::string path_, temp_;
  int fd_ = -1;
  bool committed_ = false;
  bool synced_ = false;    // Sync() done: the temporary is durable and closed
  int cleanup_slot_ = -1;  // signal_cleanup's slot of temp_
  int final_mode_ = -1;    // the mode Commit gives the temporary (-1: it has it already)
};

/// Whether no process `pid` runs on this host any more: kill(pid, 0) fails with ESRCH, or the
/// process has exited and only its zombie waits to be reaped (/proc/<pid>/stat state Z or X;
/// a launcher's children are reparented to init, which may reap them late). False when it
/// runs, when we may not signal it (EPERM), and for pid <= 0.
bool ProcessIsGone(pid_t pid);

/// This host's name (gethostname), as writer locks record it.
std::string HostName();
/// Reads a distributed save's writer lock file `lock` ("<path>.lock", io/writer_lock.h):
/// whether a live process holds it -- its writer keeps a write lock (fcntl F_OFD_SETLK) on it,
/// which the kernel drops when that process ends, however it ends (SIGKILL included) -- and,
/// in `holder`, the "pid <pid> on <host>" it records. false when it does not exist or nobody
/// holds it (a killed writer left it: the next writer takes it over).
bool WriterLockHeld(const std::string& lock, std::string* holder);
/// Whether another writer holds the writer lock "<path>.lock" of a distributed save at `path`:
/// kIo "writer-locked: ..." naming the holder when the lock exists and is not this process's
/// and a live process holds it (WriterLockHeld); OK otherwise. AtomicFile checks it when it creates
/// a temporary and again before it renames it, so that a one-file writer (import, init,
/// export) never replaces a save that another process is writing.
Status CheckNoOtherWriter(const std::string& path);

/// Reads exactly n bytes at offset; errors name the file and say if it is truncated.
Status PreadExact(int fd, void* dst, size_t n, uint64_t offset, const std::string& name);

}  // namespace seedstore
