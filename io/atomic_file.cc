#include "io/atomic_file.h"

#include "gen/checksum.h"
#include "io/parallel.h"
#include "io/path.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <set>
#include <system_error>
#include <thread>

namespace seedstore {
namespace {
std::atomic<unsigned> g_counter{0};
std::string Errno() { return std::strerror(errno); }
// This machine's tag in temporary names: [A-Za-z0-9.] kept, anything else '_', at most 64.
const std::string& HostTag() {
  static const std::string tag = [] {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == 0) std::strcpy(host, "unknown");
    std::string t;
    for (const char* c = host; *c && t.size() < 64; ++c) {
      const bool keep = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                        (*c >= '0' && *c <= '9') || *c == '.';
      t += keep ? *c : '_';
    }
    return t;
  }();
  return tag;
}
// The first part of the temporaries' names of a file named `base`: `base` itself, or, when
// "<base>.tmp-<host>-<pid>-<n>" could exceed NAME_MAX (255 bytes) with the longest pid and n,
// as much of `base` as fits followed by "~" and the XXH3-64 of all of it (16 hex digits).
std::string TempStem(const std::string& base) {
  const size_t fixed = std::strlen(".tmp-") + HostTag().size() + 2 * (1 + 10);  // "-<pid>-<n>"
  const size_t room = NAME_MAX - fixed;
  if (base.size() <= room) return base;
  char hash[24];
  std::snprintf(hash, sizeof hash, "~%016llx",
                static_cast<unsigned long long>(Checksum64(base.data(), base.size())));
  return base.substr(0, room - std::strlen(hash)) + hash;
}
// "<digits>" -> value (at most INT_MAX); -1 if s is empty, has another character or overflows.
long ParseDecimal(const std::string& s) {
  if (s.empty() || s.size() > 10) return -1;
  long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v <= INT_MAX ? v : -1;
}
}  // namespace

std::string AtomicFile::TempName(const std::string& path, pid_t pid, unsigned n) {
  const std::string base = BaseName(path);
  return path.substr(0, path.size() - base.size()) + TempStem(base) + ".tmp-" + HostTag() + "-" +
         std::to_string(pid) + "-" + std::to_string(n);
}

int AtomicFile::RemoveStaleTemporaries(const std::string& path) {
  const std::string dir = DirToOpen(path);
  // Every temporary of `path` written on this host starts with this; "<pid>-<n>" follows.
  const std::string prefix = TempStem(BaseName(path)) + ".tmp-" + HostTag() + "-";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const auto dash = rest.find('-');
    if (dash == std::string::npos) continue;
    const long pid = ParseDecimal(rest.substr(0, dash));
    if (pid <= 0 || ParseDecimal(rest.substr(dash + 1)) < 0) continue;
    if (pid == ::getpid()) continue;  // ours: possibly in flight in another thread
    if (!ProcessIsGone(static_cast<pid_t>(pid))) continue;
    const std::string full = dir + "/" + name;
    struct stat st;
    if (::lstat(full.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::unlink(full.c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

namespace signal_cleanup {
namespace {
// A slot is free (0), being filled or emptied (1), or holds a live path (2). The handler reads
// only slots in state 2, whose path is not written until the slot has gone back to 0 and then
// been claimed again (state 1), so it never sees a half-written path.
struct Slot {
  std::atomic<int> state{0};
  char path[4096];
};
constexpr int kSlots = 1024;  // untouched slots cost no memory (zero pages)
Slot g_slots[kSlots];

// Creations and renames in flight (BeginChange), and whether the handler runs: it waits for
// them so that no file it is to remove appears after its pass, and one that starts once it
// runs does not happen. A thread blocks the four signals while it is inside such a bracket, so
// the handler never runs on a thread in the middle of one (it would wait for itself): the
// signal goes to another thread, or waits for EndChange. The wait is bounded (2 s) only for a
// creation stuck in the file system (a hung network mount), where ending matters more.
std::atomic<int> g_changing{0};
std::atomic<bool> g_dying{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "the handler needs lock-free atomics");
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
thread_local int t_depth = 0;   // this thread's brackets open (nested ones count)
thread_local sigset_t t_saved;  // its signal mask before the outermost one

void OnSignal(int sig) {
  const int saved = errno;
  g_dying.store(true);
  for (int i = 0; i < 2000 && g_changing.load() > 0; ++i) {
    const timespec ms = {0, 1000000};
    ::nanosleep(&ms, nullptr);
  }
  for (Slot& s : g_slots)
    if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);
  errno = saved;
  ::signal(sig, SIG_DFL);  // end as the signal would have: status and core dump alike
  ::raise(sig);
}
}  // namespace

bool BeginChange() {
  if (t_depth++ == 0) {
    sigset_t block;
    sigemptyset(&block);
    for (int sig : kCleanupSignals) sigaddset(&block, sig);
    pthread_sigmask(SIG_BLOCK, &block, &t_saved);
  }
  g_changing.fetch_add(1);
  if (!g_dying.load()) return true;
  EndChange();
  return false;
}

void EndChange() {
  g_changing.fetch_sub(1);
  // A signal that came meanwhile is handled here, once the bracket's file is registered.
  if (--t_depth == 0) pthread_sigmask(SIG_SETMASK, &t_saved, nullptr);
}

int Register(const std::string& path) {
  if (path.size() >= sizeof g_slots[0].path) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int free = 0;
    if (!g_slots[i].state.compare_exchange_strong(free, 1, std::memory_order_acquire)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

void Unregister(int slot) {
  if (slot >= 0 && slot < kSlots) g_slots[slot].state.store(0, std::memory_order_release);
}
}  // namespace signal_cleanup

void InstallSignalCleanup() {
  for (const int sig : signal_cleanup::kCleanupSignals) {
    struct sigaction old;
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL ||
        (old.sa_flags & SA_SIGINFO))
      continue;
    struct sigaction sa = {};
    sa.sa_handler = signal_cleanup::OnSignal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

Result<std::string> ResolveSymlinks(const std::string& path) {
  std::string p = path;
  for (int hops = 0;; ++hops) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    if (hops == 40) return InvalidArgument("'" + path + "': more than 40 symbolic links (a loop?)");
    std::string target(4096, '\0');
    const ssize_t n = ::readlink(p.c_str(), target.data(), target.size());
    if (n < 0 || static_cast<size_t>(n) >= target.size())
      return IoError("cannot read the symbolic link '" + p +
                     "': " + (n < 0 ? Errno() : "target too long"));
    target.resize(static_cast<size_t>(n));
    p = target[0] == '/' ? target : DirPrefix(p) + target;
  }
}

Result<AtomicFile> AtomicFile::Create(const std::string& requested, int mode, bool remove_stale) {
  SEEDSTORE_ASSIGN_OR_RETURN(const std::string path, ResolveSymlinks(requested));
  SEEDSTORE_RETURN_IF_ERROR(CheckNoOtherWriter(path));
  struct stat existing;
  if (::stat(path.c_str(), &existing) == 0 && !S_ISREG(existing.st_mode)) {
    // Renaming over a directory fails only after all the work; over a device or a pipe it
    // would replace that node (as root: /dev/full became a regular file).
    const std::string shown =
        "'" + requested + "'" + (path != requested ? " (-> '" + path + "')" : "");
    const char* what = S_ISDIR(existing.st_mode)
                           ? " is a directory"
                           : " is not a regular file (a device, pipe or socket)";
    return InvalidArgument(shown + what + "; give a file to write");
  }
  if (remove_stale) RemoveStaleTemporaries(path);
  const std::string temp = TempName(path, ::getpid(), g_counter.fetch_add(1));
  // Registered before it exists (the name is this process's alone): a signal at any moment
  // leaves no temporary behind (signal_cleanup::BeginChange).
  if (!signal_cleanup::BeginChange())
    return IoError("cannot create '" + temp + "' (for '" + path +
                   "'): the process is ending on a signal");
  const int slot = signal_cleanup::Register(temp);
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const std::string e = Errno();
    signal_cleanup::Unregister(slot);
    signal_cleanup::EndChange();
    return IoError("cannot create '" + temp + "' (for '" + path + "'): " + e);
  }
  signal_cleanup::EndChange();
  AtomicFile file(path, temp, fd, slot);
  // Replacing a file keeps its permissions and group (a private checkpoint stays private), as
  // writing into it would; best effort for the group (not every user may give it).
  struct stat old;
  const bool replaces = ::stat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode);
  if (replaces || mode >= 0) {
    const mode_t want = replaces ? old.st_mode & 07777 : static_cast<mode_t>(mode) & 07777;
    if ((want & 0600) != 0600) file.final_mode_ = static_cast<int>(want);
    if (::fchmod(fd, want | 0600) != 0)
      return IoError("cannot give '" + temp + "' the permissions of '" + path + "': " + Errno());
    if (replaces) (void)::fchown(fd, static_cast<uid_t>(-1), old.st_gid);
  }
  return file;
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : path_(std::move(o.path_)),
      temp_(std::move(o.temp_)),
      fd_(o.fd_),
      committed_(o.committed_),
      synced_(o.synced_),
      cleanup_slot_(o.cleanup_slot_),
      final_mode_(o.final_mode_) {
  o.fd_ = -1;
  o.committed_ = true;  // the moved-from object owns nothing
  o.cleanup_slot_ = -1;
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
  signal_cleanup::Unregister(cleanup_slot_);
}

Status AtomicFile::Append(const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return IoError("write to '" + temp_ + "' failed: " + Errno());
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

Status AtomicFile::CloseFd() {
  if (fd_ >= 0 && ::close(fd_) != 0) {
    fd_ = -1;
    return IoError("close of '" + temp_ + "' failed: " + Errno());
  }
  fd_ = -1;
  return Status::Ok();
}

Status AtomicFile::Sync() {
  int fd = fd_;
  if (fd < 0) fd = ::open(temp_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot reopen '" + temp_ + "': " + Errno());
  if (final_mode_ >= 0 && ::fchmod(fd, static_cast<mode_t>(final_mode_)) != 0) {
    const std::string e = Errno();
    ::close(fd);
    fd_ = -1;
    return IoError("cannot give '" + temp_ + "' the permissions of '" + path_ + "': " + e);
  }
  if (::fsync(fd) != 0) {
    const std::string e = Errno();
    ::close(fd);
    fd_ = -1;
    return IoError("fsync of '" + temp_ + "' failed: " + e);
  }
  ::close(fd);
  fd_ = -1;
  synced_ = true;
  return Status::Ok();
}

Status AtomicFile::Commit() { return CommitAll({this}); }

Status AtomicFile::Rename(int* held) {
  if (!synced_) SEEDSTORE_RETURN_IF_ERROR(Sync());
  SEEDSTORE_RETURN_IF_ERROR(CheckNoOtherWriter(path_));  // a save begun meanwhile keeps its path
  // The file being replaced, held so that the rename does not free it (see ReleaseReplaced).
  const int replaced = ::open(path_.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  *held = -1;
  if (!signal_cleanup::BeginChange()) {
    if (replaced >= 0) ::close(replaced);
    return IoError("'" + temp_ + "' not renamed to '" + path_ +
                   "': the process is ending on a signal");
  }
  if (::rename(temp_.c_str(), path_.c_str()) != 0) {
    const std::string e = Errno();
    signal_cleanup::EndChange();
    if (replaced >= 0) ::close(replaced);
    return IoError("rename '" + temp_ + "' -> '" + path_ + "' failed: " + e);
  }
  committed_ = true;
  signal_cleanup::Unregister(cleanup_slot_);  // the name is the real file's now
  cleanup_slot_ = -1;
  signal_cleanup::EndChange();
  *held = replaced;
  return Status::Ok();
}

Status AtomicFile::CommitAll(std::vector<AtomicFile>& files) {
  std::vector<AtomicFile*> p;
  for (AtomicFile& f : files) p.push_back(&f);
  return CommitAll(p);
}

Status AtomicFile::CommitAll(const std::vector<AtomicFile*>& files) {
  if (files.empty()) return Status::Ok();
  constexpr int kSyncThreads = 16;  // fsyncs wait on the disk, not the CPU
  std::vector<AtomicFile*> unsynced;
  for (AtomicFile* f : files)
    if (!f->synced_) unsynced.push_back(f);
  SEEDSTORE_RETURN_IF_ERROR(
      ParallelFor(unsynced.size(), std::min<int>(kSyncThreads, static_cast<int>(unsynced.size())),
                  false, [&](uint64_t k, int) { return unsynced[k]->Sync(); }));
  if (!signal_cleanup::BeginChange())
    return IoError(std::to_string(files.size()) + " files (the first for '" + files[0]->path_ +
                   "') not renamed into place: the process is ending on a signal");
  Status st;
  std::vector<int> replaced;  // released once the renames are durable
  for (AtomicFile* f : files) {
    int held = -1;
    if (st = f->Rename(&held); !st.ok()) break;
    replaced.push_back(held);
  }
  signal_cleanup::EndChange();
  std::set<std::string> folders;
  for (size_t k = 0; k < replaced.size(); ++k) folders.insert(DirToOpen(files[k]->path_));
  for (const std::string& d : folders) {
    if (!st.ok()) break;
    const int dfd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
      st = IoError("fsync of folder '" + d + "': cannot open it: " + Errno());
      break;
    }
    const bool ok = ::fsync(dfd) == 0;
    const std::string e = ok ? "" : Errno();
    ::close(dfd);
    if (!ok) st = IoError("fsync of folder '" + d + "' failed: " + e);
  }
  for (int fd : replaced) ReleaseReplaced(fd);
  return st;
}

void AtomicFile::ReleaseReplaced(int fd) {
  if (fd < 0) return;
  // Dropping the last reference to a replaced file makes the kernel free its blocks and page
  // cache right there: 32 ms per 180 MB on ext4 here (docs/PERF.md), tens of seconds for a
  // checkpoint of a large model. For large files that happens on a thread of its own, after
  // the new file is durable; small ones are released at once.
  struct stat st;
  constexpr off_t kInBackground = 64 << 20;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= kInBackground) {
    try {
      std::thread([fd] { ::close(fd); }).detach();
      return;
    } catch (const std::system_error&) {  // no thread: release it here
    }
  }
  ::close(fd);
}

std::string HostName() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

bool WriterLockHeld(const std::string& lock, std::string* holder) {
  holder->clear();
  const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[256] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n > 0) holder->assign(buf, static_cast<size_t>(n));
  while (!holder->empty() && (holder->back() == '\n' || holder->back() == ' ')) holder->pop_back();
  struct flock fl = {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  // Asks whether a write lock could be taken; the answer names a conflicting lock if one is
  // held. A file system without OFD locks (EINVAL): held, as the lock file says.
  const bool held = ::fcntl(fd, F_OFD_GETLK, &fl) != 0 ? true : fl.l_type != F_UNLCK;
  ::close(fd);
  return held;
}

Status CheckNoOtherWriter(const std::string& path) {
  const std::string lock = path + ".lock";
  std::string holder;
  if (!WriterLockHeld(lock, &holder)) return Status::Ok();  // none, or an interrupted save's
  if (holder == "pid " + std::to_string(::getpid()) + " on " + HostName()) return Status::Ok();
  return IoError("writer-locked: '" + path +
                 "' is being written as a distributed save by another writer (" +
                 (holder.empty() ? std::string("lock file") : holder) + "; lock file '" + lock +
                 "'): this write is refused and nothing was replaced");
}

bool ProcessIsGone(pid_t pid) {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  // It exists; it may be a zombie. "/proc/<pid>/stat" is "<pid> (<comm>) <state> ...", and
  // <comm> may hold spaces or parentheses: the state follows the last ')'.
  char buf[512];
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  const std::string stat(buf, static_cast<size_t>(n));
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  const char state = stat[close + 2];
  return state == 'Z' || state == 'X';
}

Status PreadExact(int fd, void* dst, size_t n, uint64_t offset, const std::string& name) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return IoError("read of '" + name + "' failed: " + Errno());
    }
    if (r == 0)
      return Corrupt("'" + name + "' is truncated (wanted " + std::to_string(n) +
                     " more bytes at offset " + std::to_string(offset) + ")");
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

}  // namespace seedstore
