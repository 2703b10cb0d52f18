#include "io/dist_store.h"

#include <fcntl.h>
#include <hdf5.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <random>

#include "gen/checksum.h"
#include "gen/materialize_cpu.h"
#include "io/atomic_file.h"
#include "io/h5_util.h"
#include "store/json_text.h"

namespace seedstore {
namespace {

using json = nlohmann::json;
constexpr const char* kIndexPath = kDistIndexPath;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool FileExists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::string DirOf(const std::string& p) {
  const size_t s = p.rfind('/');
  return s == std::string::npos ? "" : p.substr(0, s + 1);
}
std::string BaseOf(const std::string& p) {
  const size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// A virtual dataset's source file and dataset names are patterns to HDF5: `%b` stands for a
// block number and `%%` for one `%` (H5Pset_virtual). Escaped tensor names hold `%` (`/` is
// written `%2F`, docs/FORMAT.md 4), and so may a save's path: every `%` is doubled.
std::string VdsSourceName(const std::string& name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

// RAII for HDF5 ids.
struct H {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  H(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~H() {
    if (id >= 0 && close) close(id);
  }
  H(const H&) = delete;
  H& operator=(const H&) = delete;
};

// Copies a box of extent `ext` out of a row-major buffer of extent `sext`, where the box
// starts at `soff`, into a row-major buffer of extent `dext` at `doff` (null offsets: 0).
void CopyBox(const unsigned char* src, const uint64_t* sext, const uint64_t* soff,
             unsigned char* dst, const uint64_t* dext, const uint64_t* doff, const uint64_t* ext,
             int rank, size_t es) {
  if (rank == 0) {
    std::memcpy(dst, src, es);
    return;
  }
  uint64_t rows = 1;
  for (int d = 0; d < rank - 1; ++d) rows *= ext[d];
  const size_t row_bytes = ext[rank - 1] * es;
  if (row_bytes == 0) return;
  std::vector<uint64_t> idx(rank, 0);
  for (uint64_t q = 0; q < rows; ++q) {
    uint64_t so = 0, dof = 0;
    for (int d = 0; d < rank; ++d) {
      const uint64_t i = d < rank - 1 ? idx[d] : 0;
      so = so * sext[d] + (soff ? soff[d] : 0) + i;
      dof = dof * dext[d] + (doff ? doff[d] : 0) + i;
    }
    std::memcpy(dst + dof * es, src + so * es, row_bytes);
    for (int d = rank - 2; d >= 0; --d) {
      if (++idx[d] < ext[d]) break;
      idx[d] = 0;
    }
  }
}

Status DistError(const char* name, Code code, const std::string& path, int rank,
                 const std::string& file, const std::string& msg) {
  std::string m = std::string(name) + ": distributed save '" + path + "'";
  if (rank >= 0) m += " rank " + std::to_string(rank) + " file '" + file + "'";
  return Status(code, m + ": " + msg);
}

// Why a rank file cannot be reached, or OK: rank-file-missing (NOT_FOUND) when nothing is
// there or a symbolic link points nowhere, rank-file-unreadable (IO_ERROR) when the path
// cannot be resolved (a symbolic link loop, a directory that may not be searched).
Status RankFileReachable(const std::string& save, int rank, const std::string& f,
                         const std::string& reading) {
  struct stat st;
  if (::stat(f.c_str(), &st) == 0) return Status::Ok();
  const int err = errno;
  if (err == ENOENT) {
    std::string target(4096, '\0');
    const ssize_t n = ::readlink(f.c_str(), target.data(), target.size());
    if (n >= 0) {
      target.resize(static_cast<size_t>(n));
      return DistError("rank-file-missing", Code::kNotFound, save, rank, f,
                       reading + "the file is a symbolic link to '" + target + "', which does not exist");
    }
    return DistError("rank-file-missing", Code::kNotFound, save, rank, f, reading + "the file does not exist");
  }
  return DistError("rank-file-unreadable", Code::kIo, save, rank, f,
                   reading + "cannot reach the file: " + std::strerror(err));
}

// ---- The master's seal (docs/FORMAT.md 10) ---------------------------------------------
// The master's first kSealBytes are an HDF5 user block: kSealMagic (16 bytes, NUL-padded), then
// the XXH3-64 and the length (little-endian uint64 each) of every byte after the user block.
// HDF5 does not checksum everything it parses: a global heap collection, where a virtual
// dataset's mappings lie, has no checksum, and one flipped bit in an object's size there makes
// libhdf5 1.10 loop forever opening the dataset. The seal is checked before HDF5 reads a byte.
constexpr uint64_t kSealBytes = 512;
constexpr char kSealMagic[16] = "seedstore-seal1";

// Hashes `fd`'s bytes from kSealBytes to its end; their count in *n. False on a read error.
bool HashAfterSeal(int fd, uint64_t* hash, uint64_t* n) {
  Checksum64Stream h;
  std::vector<unsigned char> buf(1 << 20);
  *n = 0;
  for (off_t at = kSealBytes;;) {
    const ssize_t got = ::pread(fd, buf.data(), buf.size(), at);
    if (got < 0) return false;
    if (got == 0) break;
    h.Update(buf.data(), static_cast<size_t>(got));
    at += got;
    *n += static_cast<uint64_t>(got);
  }
  *hash = h.Digest();
  return true;
}

// Seals the master's temporary `file` (written with a kSealBytes user block, closed).
Status SealMaster(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return IoError("cannot open master '" + file + "' to seal it: " + std::strerror(errno));
  uint64_t hash = 0, n = 0;
  unsigned char seal[32] = {};
  bool ok = HashAfterSeal(fd, &hash, &n);
  std::memcpy(seal, kSealMagic, 16);
  for (int b = 0; b < 8; ++b) {
    seal[16 + b] = static_cast<unsigned char>(hash >> (8 * b));
    seal[24 + b] = static_cast<unsigned char>(n >> (8 * b));
  }
  ok = ok && ::pwrite(fd, seal, sizeof seal, 0) == static_cast<ssize_t>(sizeof seal);
  const std::string err = ok ? "" : std::strerror(errno);
  ::close(fd);
  return ok ? Status::Ok() : IoError("cannot seal master '" + file + "': " + err);
}

// The seal words of a master's first 32 bytes `head`: the hash and the length it covers.
void SealWords(const unsigned char* head, uint64_t* hash, uint64_t* n) {
  *hash = *n = 0;
  for (int b = 7; b >= 0; --b) {
    *hash = *hash << 8 | head[16 + b];
    *n = *n << 8 | head[24 + b];
  }
}

}  // namespace

Status CheckMasterSeal(const std::string& path, bool is_master, bool* sealed) {
  if (sealed) *sealed = false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Ok();  // H5Store::Open names what is wrong with it
  unsigned char head[32] = {};
  const ssize_t got = ::pread(fd, head, sizeof head, 0);
  static const unsigned char kHdf5[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  const bool magic = got == static_cast<ssize_t>(sizeof head) && std::memcmp(head, kSealMagic, 16) == 0;
  Status st;
  uint64_t want = 0, want_n = 0, hash = 0, n = 0;
  SealWords(head, &want, &want_n);
  if (got < static_cast<ssize_t>(sizeof head) || std::memcmp(head, kHdf5, 8) == 0) {
    st = Status::Ok();  // unsealed (older) master or a store; or unreadable or short: H5Store::Open names it
  } else if (!HashAfterSeal(fd, &hash, &n)) {
    st = IoError("cannot read '" + path + "': " + std::strerror(errno));
  } else if (!magic) {
    // Neither the seal nor HDF5's signature: a master whose seal's magic is damaged (the
    // rest of the seal still matches the file), or, for a file not known to be a master, an
    // HDF5 file with a user block of its own, which HDF5 reads.
    if (is_master || (n == want_n && hash == want)) {
      if (sealed) *sealed = true;
      st = DistError("master-corrupt", Code::kCorrupt, path, -1, "",
                     "the master starts with neither its seal nor HDF5's signature (docs/FORMAT.md 10)");
    }
  } else {
    if (sealed) *sealed = true;
    if (n != want_n)
      st = DistError("master-corrupt", Code::kCorrupt, path, -1, "",
                     "its seal covers " + std::to_string(want_n) + " bytes after the user block, the file has " +
                         std::to_string(n) + " (truncated or extended)");
    else if (hash != want)
      st = DistError("master-corrupt", Code::kCorrupt, path, -1, "",
                     "its bytes do not match its seal (XXH3-64 " + Hex64(hash) + ", sealed " + Hex64(want) +
                         "): the master is damaged");
  }
  ::close(fd);
  return st;
}

namespace {

// ---- Writer lock ------------------------------------------------------------------------

// "<path>.lock": its writer holds a write lock on it (fcntl F_OFD_SETLK), which the kernel
// drops when the writer ends however it ends, so a lock file whose writer was killed never
// blocks the next save: it is taken over (docs/FORMAT.md 10, "Writer lock").
class WriterLock {
 public:
  Status Acquire(const std::string& path) {
    lock_ = path + ".lock";
    for (int attempt = 0; attempt < 100; ++attempt) {
      // Opened, locked and registered (Ctrl-C, preemption: the handler removes it) under
      // BeginChange, so that a signal handled meanwhile waits for the registration.
      if (!signal_cleanup::BeginChange())
        return IoError("cannot save to '" + path + "': the process is ending on a signal");
      const int fd = ::open(lock_.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
      if (fd < 0) {  // no such folder, no permission, read-only: not a writer
        const std::string e = std::strerror(errno);
        signal_cleanup::EndChange();
        return IoError("cannot save to '" + path + "': cannot create its lock file '" + lock_ + "': " + e);
      }
      struct flock fl = {};
      fl.l_type = F_WRLCK;
      fl.l_whence = SEEK_SET;
      if (::fcntl(fd, F_OFD_SETLK, &fl) != 0) {
        const int e = errno;
        ::close(fd);
        signal_cleanup::EndChange();
        std::string holder;
        (void)WriterLockHeld(lock_, &holder);
        if (e == EAGAIN || e == EACCES)
          return IoError("writer-locked: '" + path + "' is being written by another writer (" +
                         (holder.empty() ? std::string("lock file") : holder) + "; lock file '" + lock_ +
                         "', held by a running process); the second writer is refused");
        return IoError("cannot save to '" + path + "': cannot lock '" + lock_ + "': " + std::strerror(e));
      }
      // The file locked must still be the one at the name: a writer releasing its lock
      // removes the name first, and a new writer may have created another since.
      struct stat at_fd, at_name;
      if (::fstat(fd, &at_fd) != 0 || ::stat(lock_.c_str(), &at_name) != 0 || at_fd.st_ino != at_name.st_ino ||
          at_fd.st_dev != at_name.st_dev) {
        ::close(fd);
        signal_cleanup::EndChange();
        continue;
      }
      char buf[256] = {};
      std::string left(buf, static_cast<size_t>(std::max<ssize_t>(0, ::pread(fd, buf, sizeof buf - 1, 0))));
      while (!left.empty() && (left.back() == '\n' || left.back() == ' ')) left.pop_back();
      const std::string who = "pid " + std::to_string(::getpid()) + " on " + HostName() + "\n";
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, who.data(), who.size(), 0) < 0) { /* informative only */ }
      cleanup_slot_ = signal_cleanup::Register(lock_);
      signal_cleanup::EndChange();
      fd_ = fd;
      if (!left.empty())  // a writer that ended without releasing it (killed, or its job ended)
        std::fprintf(stderr,
                     "seedstore: note: '%s' was left by a writer that no longer runs (%s): its save "
                     "was interrupted. '%s' holds the last save that was committed there; this save "
                     "replaces it and then removes what the interrupted one left\n",
                     lock_.c_str(), left.c_str(), path.c_str());
      return Status::Ok();
    }
    return IoError("cannot save to '" + path + "': its lock file '" + lock_ +
                   "' keeps being replaced by other writers");
  }
  ~WriterLock() {
    if (fd_ >= 0) {
      ::unlink(lock_.c_str());  // the name first, then the lock (see Acquire)
      ::close(fd_);
    }
    signal_cleanup::Unregister(cleanup_slot_);
  }

 private:
  std::string lock_;
  int fd_ = -1;
  int cleanup_slot_ = -1;
};

// The commit protocol's files of save `id` at `path`: "<path>.<8 hex>.<kind>", kind "new" (the
// staged master or store), "commit" (its gate) or "veto" (docs/FORMAT.md 10).
std::string ProtocolName(const std::string& path, uint32_t id, const char* kind) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ".%08x.%s", id, kind);
  return path + buf;
}
// `rest`, a name after "<path>.": "<8 hex>.<kind>" with kind new, commit or veto; or a staged
// file's temporary, "<8 hex>.new.tmp-..." (kind "new.tmp").
bool ParseProtocolName(const std::string& rest, uint32_t* id, std::string* kind) {
  if (rest.size() < 10 || rest[8] != '.' || rest.substr(0, 8).find_first_not_of("0123456789abcdef") != std::string::npos)
    return false;
  const std::string k = rest.substr(9);
  if (k == "new" || k == "commit" || k == "veto") {
    *kind = k;
  } else if (k.rfind("new.tmp-", 0) == 0) {
    *kind = "new.tmp";
  } else {
    return false;
  }
  *id = static_cast<uint32_t>(std::stoul(rest.substr(0, 8), nullptr, 16));
  return true;
}

// Removes the pieces of every save at `path` but save `keep` (of all saves when keep < 0):
// the files "<path>.<8 hex>.rank<r>.h5" in its folder -- the replaced save's, and those an
// interrupted save left (a rank killed or hung mid-save) -- plus the stale temporaries of any
// such piece (the rule of io/atomic_file.h: their writer is gone), and the commit-protocol
// files of other saves (ProtocolName). Only the writer holding the lock calls it, after its
// own commit is durable (CommitStaged), so no live save at `path` owns them.
// A piece another distributed save's master in the folder names is kept: a master renamed
// (`mv P Q`) keeps reading its rank files by their old names, and removing them lost Q.
void RemoveOtherPieces(const std::string& path, int64_t keep) {
  const std::string dir = DirOf(path), prefix = BaseOf(path) + ".";
  DIR* d = ::opendir(dir.empty() ? "." : dir.c_str());
  if (!d) return;
  std::vector<std::string> pieces, with_temps, protocol;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    // A commit-protocol file of another save (CommitStaged), or a staged file's temporary.
    uint32_t other_id = 0;
    std::string kind;
    if (ParseProtocolName(name.substr(prefix.size()), &other_id, &kind)) {
      if (kind == "new.tmp") {
        with_temps.push_back(ProtocolName(path, other_id, "new"));
      } else if (keep < 0 || other_id != static_cast<uint32_t>(keep)) {
        protocol.push_back(dir + name);
      }
      continue;
    }
    // A piece, or its temporary (the piece's name, then ".tmp-...").
    const size_t temp = name.find(".h5.tmp-", prefix.size());
    std::string save;
    uint32_t id = 0;
    int rank = 0;
    if (!ParseRankFileName(dir + name.substr(0, temp == std::string::npos ? temp : temp + 3), &save, &id, &rank) ||
        BaseOf(save) != BaseOf(path))
      continue;
    const std::string piece = RankFileName(path, id, rank);
    if (temp != std::string::npos) {
      with_temps.push_back(piece);
    } else if (keep < 0 || id != static_cast<uint32_t>(keep)) {
      pieces.push_back(piece);
    }
  }
  ::closedir(d);
  std::set<std::string> named_elsewhere;  // base names of rank files other masters name
  if (!pieces.empty() && (d = ::opendir(dir.empty() ? "." : dir.c_str()))) {
    std::vector<std::string> masters;
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name, full = dir + name;
      std::string save;
      uint32_t id = 0;
      int rank = 0;
      if (name == BaseOf(path) || name.compare(0, prefix.size(), prefix) == 0 ||
          ParseRankFileName(full, &save, &id, &rank))
        continue;  // this save, its pieces, temporaries and lock; any rank file
      if (IsDistributedSave(full)) masters.push_back(full);
    }
    ::closedir(d);
    for (const std::string& m : masters) {
      auto c = DistCatalog::Open(m);
      if (!c.ok()) return;  // which files it names is unknown: keep them all (space, not data)
      for (const std::string& f : (*c)->rank_files()) named_elsewhere.insert(BaseOf(f));
    }
  }
  for (const std::string& p : pieces)
    if (!named_elsewhere.count(BaseOf(p))) ::unlink(p.c_str());
  for (const std::string& p : protocol) ::unlink(p.c_str());
  for (const std::string& p : with_temps) AtomicFile::RemoveStaleTemporaries(p);
}

// ---- Commit protocol (docs/FORMAT.md 10, "Commit protocol") --------------------------------
//
// Save `id` at `path` stages its master (or consolidated store) complete, sealed and durable
// as "<path>.<id>.new", hard-links it as the gate "<path>.<id>.commit", proves it, and rank 0
// commits by renaming the gate over `path`. A rank that gives up first vetoes: it creates
// "<path>.<id>.veto" and removes the gate. Whichever comes first wins, and afterwards every
// rank can tell which did: committed iff `path` is the staged file (same inode).

bool SameFile(const std::string& a, const std::string& b) {
  struct stat x, y;
  return ::stat(a.c_str(), &x) == 0 && ::stat(b.c_str(), &y) == 0 && x.st_ino == y.st_ino && x.st_dev == y.st_dev;
}

// fsync of `path` (a file or, with `dir`, a folder); errors ignored: the caller's rename or
// write has happened, and a failed fsync leaves nothing to undo.
void SyncPath(const std::string& path, bool dir) {
  const int fd = ::open(path.empty() ? "." : path.c_str(), O_RDONLY | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

// Rank 0's commit point: unless a rank has vetoed, renames the gate over `path` (inside a
// signal_cleanup bracket, so that a signal cannot remove the staged file between the rename
// and releasing `registered`), then makes the rename durable (fsync of the folder; the staged
// file is durable already). *committed: the rename happened.
Status CommitStaged(const std::string& path, uint32_t id, signal_cleanup::Scope* registered, bool* committed) {
  const std::string gate = ProtocolName(path, id, "commit"), veto = ProtocolName(path, id, "veto");
  if (!signal_cleanup::BeginChange())
    return IoError("save: '" + path + "' not replaced: the process is ending on a signal");
  struct stat vs;
  if (::stat(veto.c_str(), &vs) == 0) {
    signal_cleanup::EndChange();
    return IoError("save: '" + path + "' not replaced: another rank gave up (see its message) and vetoed the commit");
  }
  if (::rename(gate.c_str(), path.c_str()) != 0) {
    const int e = errno;
    signal_cleanup::EndChange();
    if (e == ENOENT)
      return IoError("save: '" + path + "' not replaced: another rank gave up (see its message) and vetoed the commit");
    return IoError("save: rename '" + gate + "' -> '" + path + "' failed: " + std::strerror(e));
  }
  *committed = true;
  registered->Release();
  signal_cleanup::EndChange();
  TestFaultPoint(0, "after-rename");
  SyncPath(DirOf(path), true);
  return Status::Ok();
}

// A rank that gives up (a timeout, an error) before it knows the outcome: forbids the commit
// from now on -- the veto file makes rank 0's check fail, removing the gate makes its rename
// fail -- and tells whether rank 0 committed before that (then `path` is made durable here
// too). Final either way: after it, the outcome can no longer change.
bool VetoCommit(const std::string& path, uint32_t id) {
  const std::string gate = ProtocolName(path, id, "commit"), veto = ProtocolName(path, id, "veto");
  const int fd = ::open(veto.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
  (void)::unlink(gate.c_str());
  if (!SameFile(path, ProtocolName(path, id, "new"))) return false;
  SyncPath(path, false);
  SyncPath(DirOf(path), true);
  return true;
}

// Every rank learns whether any rank failed; the failing rank keeps its own message.
Status Agree(Exchange& comm, const Status& mine, const char* what) {
  uint64_t bad = mine.ok() ? 0 : 1;
  SEEDSTORE_RETURN_IF_ERROR(comm.AllReduceSum(&bad, 1, what));
  if (!mine.ok()) return mine;
  if (bad) return Status(Code::kIo, std::string(what) + ": failed on another rank (see its message)");
  return Status::Ok();
}

struct Plan {
  // Per tensor: distinct non-empty shards (owner = replicas[0]); empty for lazy tensors.
  std::vector<std::vector<Shard>> shards;
  // Per tensor and shard: the box its rank file stores, the shard's region or a padded box
  // around it (ChunkMatcher::Pad; docs/FORMAT.md 10). Set by PadPieces.
  std::vector<std::vector<Region>> stored;
  // Pieces numbered tensor by tensor, in plan order: tensor i's first is first_piece[i]; the
  // count is first_piece.back(). Set by NumberPieces once `shards` is final.
  std::vector<size_t> first_piece;
};

void NumberPieces(Plan* p) {
  p->first_piece.assign(1, 0);
  for (const auto& s : p->shards) p->first_piece.push_back(p->first_piece.back() + s.size());
}

Result<Plan> MakePlan(const Catalog& src, const Layout& layout) {
  Plan p;
  for (const TensorRecord& t : src.tensors()) {
    std::vector<Shard> keep;
    std::vector<Region> stored;
    if (t.lazy) {  // no pieces, but the layout must still apply to it (as it would once dense)
      SEEDSTORE_RETURN_IF_ERROR(layout.ShardOf(t.name, t.shape, 0).status());
    } else {
      SEEDSTORE_ASSIGN_OR_RETURN(std::vector<Shard> all, layout.DistinctShards(t.name, t.shape));
      for (auto& s : all)
        if (!s.empty()) {
          stored.push_back(s.region);
          keep.push_back(std::move(s));
        }
    }
    p.shards.push_back(std::move(keep));
    p.stored.push_back(std::move(stored));
  }
  return p;
}

// ---- Raw chunk copies (see Reshard in io/dist_store.h) -----------------------------------

// Whether box `inner` lies in box `outer`.
bool BoxWithin(const Region& inner, const Region& outer) {
  for (int d = 0; d < inner.rank; ++d)
    if (inner.start[d] < outer.start[d] || inner.stop[d] > outer.stop[d]) return false;
  return true;
}

// Finds the stored source chunks that an output piece of dense tensor i can copy as stored.
// The source's stored parts: the tensor itself (a store) or its box pieces (a distributed
// save, flat pieces excluded); other catalogs have none. A part owns its piece's region and
// stores its (possibly padded, docs/FORMAT.md 10) stored box, whose chunk grid starts at the
// stored box's start.
class ChunkMatcher {
 public:
  ChunkMatcher(const Catalog& src, size_t i, const WriteOptions& w) : src_(src), i_(i), w_(w) {
    const TensorRecord& t = src.tensors()[i];
    if (dynamic_cast<const H5Store*>(&src)) {
      parts_.push_back({WholeTensor(t.shape), WholeTensor(t.shape), -1});
    } else if (const auto* d = dynamic_cast<const DistCatalog*>(&src)) {
      for (size_t p = 0; p < d->pieces(i).size(); ++p) {
        const DistCatalog::Piece& piece = d->pieces(i)[p];
        if (!piece.region.flat) parts_.push_back({piece.region, piece.stored, static_cast<int>(p)});
      }
    }
  }

  // The box an output piece owning the global box `g` stores (docs/FORMAT.md 10, "Padded
  // pieces"): g itself, or g widened in each dim to the chunk grid of the stored source part
  // owning g's first element (clipped to the tensor), when g is off that grid and widening
  // adds at most `max_padding` times g's elements -- then every chunk of the piece can be
  // copied from a source that stores the same grid.
  Result<Region> Pad(const Region& g, double max_padding) {
    if (g.flat || g.rank == 0 || g.Count() == 0) return g;
    SEEDSTORE_ASSIGN_OR_RETURN(const Stored* s, Holding(g.start));
    if (!s) return g;
    Region p = g;
    const Region& sb = s->part->stored;
    for (int d = 0; d < g.rank; ++d) {
      const uint64_t c = s->chunk[d], o = sb.start[d];
      p.start[d] = o + (g.start[d] - o) / c * c;
      p.stop[d] = std::min(g.shape[d], o + (g.stop[d] - o + c - 1) / c * c);
    }
    if (SameRegion(p, g) ||
        static_cast<double>(p.Count() - g.Count()) > max_padding * static_cast<double>(g.Count()))
      return g;
    return p;
  }

  // How the writer chunks the output piece stored as global box `g`: like the source part
  // owning g's first element when g starts on its chunk grid and spans at least one of its
  // chunks in every dim (then its aligned chunks can be copied), else the writer's rule.
  Result<DenseChunking> For(const Region& g) {
    DenseChunking c;
    if (g.flat || g.rank == 0 || g.Count() == 0) return c;
    SEEDSTORE_ASSIGN_OR_RETURN(const Stored* s, Holding(g.start));
    if (!s) return c;
    for (int d = 0; d < g.rank; ++d)
      if ((g.start[d] - s->part->stored.start[d]) % s->chunk[d] != 0 ||
          s->chunk[d] > g.stop[d] - g.start[d])
        return c;
    c.chunk = s->chunk;
    c.raw = [this, g, chunk = s->chunk](uint64_t, const Region& local, StoredChunk* out) {
      return Copy(g, chunk, local, out);
    };
    return c;
  }

 private:
  struct Part {
    Region owned;    // global indices: the elements this part holds for readers
    Region stored;   // global indices: the box its file stores (owned, or padded around it)
    int piece = -1;  // piece index of a distributed save; -1: the store's tensor itself
  };
  struct Stored {
    const Part* part = nullptr;
    // The source when it is a store; a rank file is fetched for each use (DistCatalog keeps
    // only so many open: holding every one a tensor's pieces touch would defeat that).
    const H5Store* self = nullptr;
    size_t k = 0;                  // the tensor's index in its store
    std::vector<uint64_t> chunk;   // its chunk shape
    bool global_frame = false;     // its fingerprints are the global tensor's (TensorRecord::piece)
  };

  // The stored source part owning global index `at`, when its chunks could be copied by this
  // writer (null otherwise).
  Result<const Stored*> Holding(const uint64_t* at) {
    const TensorRecord& t = src_.tensors()[i_];
    for (const Part& p : parts_) {
      bool in = true;
      for (int d = 0; d < p.owned.rank; ++d) in &= p.owned.start[d] <= at[d] && at[d] < p.owned.stop[d];
      if (!in) continue;
      std::lock_guard<std::mutex> l(mu_);
      auto it = stored_.find(&p);
      if (it == stored_.end()) {
        Stored s;
        s.part = &p;
        std::shared_ptr<const H5Store> held;
        const H5Store* store = nullptr;
        if (p.piece < 0) {
          store = s.self = static_cast<const H5Store*>(&src_);
          s.k = i_;
        } else {
          SEEDSTORE_ASSIGN_OR_RETURN(auto sk, static_cast<const DistCatalog&>(src_).PieceStore(i_, p.piece));
          held = std::move(sk.first);
          store = held.get();
          s.k = sk.second;
        }
        const StoredTensor& st = store->stored(s.k);
        if (StoreWriter::CopiesChunksOf(st, t.dtype, w_)) s.chunk = st.chunk;
        const TensorRecord& sr = store->tensors()[s.k];
        s.global_frame = sr.fp_seed() == t.fp_seed() &&
                         (sr.piece ? SameRegion(*sr.piece, p.stored) : p.piece < 0);
        it = stored_.emplace(&p, std::move(s)).first;
      }
      return it->second.chunk.empty() ? nullptr : &it->second;
    }
    return static_cast<const Stored*>(nullptr);
  }

  // Output chunk `local` (clipped, local indices) of the piece stored as global box `g`, whose
  // chunk shape is `chunk`: copied when a stored source chunk has the same full box [at, at +
  // chunk) and is clipped alike (so its unfiltered bytes, edge padding included, are the same).
  Result<bool> Copy(const Region& g, const std::vector<uint64_t>& chunk, const Region& local,
                    StoredChunk* out) {
    uint64_t at[kMaxRank];
    for (int d = 0; d < g.rank; ++d) at[d] = g.start[d] + local.start[d];
    SEEDSTORE_ASSIGN_OR_RETURN(const Stored* s, Holding(at));
    if (!s || s->chunk != chunk) return false;
    const Region& pb = s->part->stored;
    uint64_t j = 0;
    for (int d = 0; d < g.rank; ++d) {
      const uint64_t c = chunk[d], rel = at[d] - pb.start[d];
      if (rel % c != 0 || std::min(at[d] + c, pb.stop[d]) != std::min(at[d] + c, g.stop[d]))
        return false;
      j = j * ((pb.stop[d] - pb.start[d] + c - 1) / c) + rel / c;
    }
    // The source chunk's recorded fingerprint carries over when the stored part's frame is
    // the global tensor's (a store's tensor, or a rank file's piece recorded as such): then the
    // chunk is not decoded, its stored bytes are checked against the chunk-info table.
    if (s->self) {
      SEEDSTORE_RETURN_IF_ERROR(s->self->ReadStoredChunk(s->k, j, out, /*decode=*/!s->global_frame));
      return true;
    }
    const auto& d = static_cast<const DistCatalog&>(src_);
    SEEDSTORE_ASSIGN_OR_RETURN(auto sk, d.PieceStore(i_, s->part->piece));  // held while read
    Status st = sk.first->ReadStoredChunk(s->k, j, out, /*decode=*/!s->global_frame);
    if (st.ok()) return true;
    const int rank = d.pieces(i_)[s->part->piece].rank;
    return DistError("rank-file-corrupt", st.code(), d.origin(), rank, d.rank_files()[rank],
                     st.message());
  }

  const Catalog& src_;
  const size_t i_;
  const WriteOptions& w_;
  std::vector<Part> parts_;
  std::mutex mu_;
  std::map<const Part*, Stored> stored_;
};

// Pads the plan's box pieces to the chunk grid of the source's stored parts where that lets
// their chunks be copied (ChunkMatcher::Pad). Deterministic: every process computes the same.
Status PadPieces(const Catalog& src, const WriteOptions& wo, double max_padding, Plan* plan) {
  if (!(max_padding > 0)) return Status::Ok();
  for (size_t i = 0; i < plan->shards.size(); ++i) {
    if (plan->shards[i].empty()) continue;
    ChunkMatcher m(src, i, wo);
    for (size_t k = 0; k < plan->shards[i].size(); ++k) {
      SEEDSTORE_ASSIGN_OR_RETURN(plan->stored[i][k], m.Pad(plan->shards[i][k].region, max_padding));
    }
  }
  return Status::Ok();
}

// Per tensor, what a save counts as it writes: chunks copied, chunks encoded, bytes stored.
constexpr size_t kCounts = 3;

// Adds dense tensor i of `src`, restricted to the global box or flat range `g`, to `w` as a
// tensor of g's local shape (the whole tensor when g is), chunked as `chunking` says (from
// ChunkMatcher::For: copying the source's stored chunks where they line up); counts the chunks
// copied and encoded and the bytes stored into counts[0, 1, 2]. The elements come from `data`
// when it is not null (g's elements, row-major in its local shape), else from the source.
// The fingerprint recorded for it goes to *fp when fp is not null.
Status AddPiece(StoreWriter& w, const Catalog& src, size_t i, const Region& g, DenseChunking chunking,
                bool as_piece, const void* data, uint64_t* counts, Fingerprint* fp = nullptr) {
  const TensorRecord& t = src.tensors()[i];
  const std::vector<uint64_t> shape = t.shape;
  BoxSource source = [&src, i, g, shape](const Region& local, void* out) -> Status {
    if (g.flat) {
      return src.Read(i, FlatRegion(shape, g.begin + local.start[0], g.begin + local.stop[0]), out,
                      CpuOptions{1});
    }
    Region glob = g;
    for (int d = 0; d < g.rank; ++d) {
      glob.start[d] = g.start[d] + local.start[d];
      glob.stop[d] = g.start[d] + local.stop[d];
    }
    return src.Read(i, glob, out, CpuOptions{1});
  };
  if (as_piece) chunking.piece = g;
  const StoreWriter::ChunkCounts before = w.chunk_counts();
  if (!data) data = src.HostData(i, g);  // a live job's own shard buffer
  if (data) {
    SEEDSTORE_RETURN_IF_ERROR(w.AddDense(t.name, LocalShape(g), t.dtype, data, {}, chunking));
  } else {
    SEEDSTORE_RETURN_IF_ERROR(w.AddDense(t.name, LocalShape(g), t.dtype, source, {}, chunking));
  }
  const StoreWriter::ChunkCounts after = w.chunk_counts();
  counts[0] += after.copied - before.copied;
  counts[1] += after.encoded - before.encoded;
  counts[2] += after.stored_bytes - before.stored_bytes;
  if (fp) *fp = w.last_dense_fingerprint();
  return Status::Ok();
}

// The layout ranks whose files process `me` of `np` writes, a contiguous block; and the
// process that writes rank r's file (which also proves its pieces).
int WriterOf(int r, int np, int world) {
  return static_cast<int>((int64_t{r + 1} * np - 1) / world);
}
std::vector<int> RanksWrittenBy(int me, int np, int world) {
  std::vector<int> r;
  for (int k = static_cast<int>(int64_t{me} * world / np); k < int64_t{me + 1} * world / np; ++k) r.push_back(k);
  return r;
}

// The most bytes of the source WriteRankFiles reads at once for pieces that share it, and
// the most rank files one call keeps open.
constexpr uint64_t kWindowBytes = uint64_t{32} << 20;
constexpr size_t kMaxOpenRankFiles = 8;

// The smallest box (or flat range) holding boxes (or flat ranges) a and b of one tensor.
Region Cover(const Region& a, const Region& b) {
  Region c = a;
  if (a.flat) {
    c.begin = std::min(a.begin, b.begin);
    c.end = std::max(a.end, b.end);
    return c;
  }
  for (int d = 0; d < a.rank; ++d) {
    c.start[d] = std::min(a.start[d], b.start[d]);
    c.stop[d] = std::max(a.stop[d], b.stop[d]);
  }
  return c;
}

// Writes the files of layout ranks `ranks` (files[k] for ranks[k]), tensor by tensor with all
// of them open; per tensor i, adds the chunks copied and encoded and the bytes stored to
// counts[kCounts * i + 0, 1, 2]. The pieces of a tensor that these ranks hold are written in
// plan order; those whose chunks are all encoded (none lines up with a stored source chunk) go
// in runs of neighbours read from the source as one covering box of at most kWindowBytes (and
// at most twice the runs' own elements): so a source chunk that many small pieces share --
// flat pieces over hundreds of ranks -- is read and decoded once per run, not once per piece.
// The fingerprint each piece k of tensor i is recorded with goes to piece_fps[p], p =
// plan.first_piece[i] + k (two words each; other entries are left as they are).
Status WriteRankFiles(const Catalog& src, const Plan& plan, const std::vector<int>& ranks,
                      const std::vector<std::string>& files, const DistSaveOptions& o, uint64_t* bytes,
                      std::vector<uint64_t>& counts, std::vector<uint64_t>& piece_fps) {
  auto record = [&](size_t i, size_t k, const Fingerprint& f) {
    const size_t p = plan.first_piece[i] + k;
    piece_fps[2 * p] = f.lane0;
    piece_fps[2 * p + 1] = f.lane1;
  };
  uint64_t seed;
  Generator gen;
  RootSeedOf(src, &seed, &gen);
  std::map<int, size_t> slot;
  std::vector<std::unique_ptr<StoreWriter>> w(ranks.size());
  for (size_t k = 0; k < ranks.size(); ++k) {
    SEEDSTORE_ASSIGN_OR_RETURN(w[k], StoreWriter::Create(files[k], seed, gen, o.write));
    slot[ranks[k]] = k;
  }
  const auto& ts = src.tensors();
  std::vector<unsigned char> window, piece;
  for (size_t i = 0; i < ts.size(); ++i) {
    const size_t es = DTypeSize(ts[i].dtype);
    ChunkMatcher matcher(src, i, o.write);
    struct Item {
      size_t k;  // index in plan.shards[i]
      StoreWriter* w;
      DenseChunking chunking;
      bool shared;  // may be read as part of a covering box
    };
    std::vector<Item> items;
    for (size_t k = 0; k < plan.shards[i].size(); ++k) {
      const auto it = slot.find(plan.shards[i][k].replicas[0]);
      if (it == slot.end()) continue;
      const Region& g = plan.stored[i][k];
      SEEDSTORE_ASSIGN_OR_RETURN(DenseChunking c, matcher.For(g));
      const bool shared = !c.raw && g.rank > 0 && g.Count() > 0 && g.Count() * es <= kWindowBytes &&
                          !src.HostData(i, g);
      items.push_back({k, w[it->second].get(), std::move(c), shared});
      *bytes += plan.shards[i][k].region.Count() * es;
    }
    for (size_t a = 0; a < items.size();) {
      // The run [a, b) and the box it is read as.
      Region cover = plan.stored[i][items[a].k];
      uint64_t own = cover.Count();
      size_t b = a + 1;
      for (; items[a].shared && b < items.size() && items[b].shared; ++b) {
        const Region& g = plan.stored[i][items[b].k];
        if (g.flat != cover.flat) break;
        const Region c = Cover(cover, g);
        if (c.Count() * es > kWindowBytes || c.Count() > 2 * (own + g.Count())) break;
        cover = c;
        own += g.Count();
      }
      if (b == a + 1) {  // alone: read as it is written, chunk by chunk (or copied as stored)
        Fingerprint f;
        SEEDSTORE_RETURN_IF_ERROR(AddPiece(*items[a].w, src, i, plan.stored[i][items[a].k],
                                           items[a].chunking, true, nullptr, &counts[kCounts * i], &f));
        record(i, items[a].k, f);
        ++a;
        continue;
      }
      window.resize(cover.Count() * es);
      SEEDSTORE_RETURN_IF_ERROR(src.Read(i, cover, window.data(), CpuOptions{1}));
      uint64_t cext[kMaxRank];
      for (int d = 0; d < cover.rank; ++d) cext[d] = cover.stop[d] - cover.start[d];
      for (; a < b; ++a) {
        const Region& g = plan.stored[i][items[a].k];
        const unsigned char* data;
        if (g.flat) {
          data = window.data() + (g.begin - cover.begin) * es;
        } else {
          uint64_t off[kMaxRank], ext[kMaxRank];
          for (int d = 0; d < g.rank; ++d) {
            off[d] = g.start[d] - cover.start[d];
            ext[d] = g.stop[d] - g.start[d];
          }
          piece.resize(g.Count() * es);
          CopyBox(window.data(), cext, off, piece.data(), ext, nullptr, ext, g.rank, es);
          data = piece.data();
        }
        Fingerprint f;
        SEEDSTORE_RETURN_IF_ERROR(AddPiece(*items[a].w, src, i, g, items[a].chunking, true, data,
                                           &counts[kCounts * i], &f));
        record(i, items[a].k, f);
      }
    }
  }
  for (auto& x : w) SEEDSTORE_RETURN_IF_ERROR(x->Commit());
  return Status::Ok();
}

// The proof's read-back of one written piece -- global box or flat range `r` of tensor i of the
// output `out` (a store or a distributed save) -- as its fingerprint with global indices. A box
// is read back one stored chunk at a time (the cells of the stored chunk grid that meet r),
// through the catalog's Read (which decodes every chunk and checks its checksum), on o.threads
// threads that each reuse one buffer; a flat range or a contiguous tensor is read whole.
Result<Fingerprint> ReadBackFingerprint(const Catalog& out, size_t i, const Region& r, CpuOptions o) {
  const TensorRecord& t = out.tensors()[i];
  std::vector<uint64_t> chunk;
  Region grid = r;  // the chunk grid starts at grid.start
  if (!r.flat && r.rank > 0 && r.Count() > 0) {
    if (const auto* s = dynamic_cast<const H5Store*>(&out)) {
      chunk = s->stored(i).chunk;
      grid = WholeTensor(t.shape);
    } else if (const auto* d = dynamic_cast<const DistCatalog*>(&out)) {
      for (size_t p = 0; p < d->pieces(i).size(); ++p) {
        if (!SameRegion(d->pieces(i)[p].region, r)) continue;
        SEEDSTORE_ASSIGN_OR_RETURN(auto sk, d->PieceStore(i, p));
        chunk = sk.first->stored(sk.second).chunk;
        grid = d->pieces(i)[p].stored;
        break;
      }
    }
  }
  if (chunk.empty()) return out.FingerprintRegion(i, r, o);
  const GridTiles tiles(r, grid.start, chunk);
  const int threads = ThreadCount(o.threads, tiles.Count());
  std::vector<Fingerprint> parts(threads);
  std::vector<std::vector<unsigned char>> bufs(threads);
  const size_t es = DTypeSize(t.dtype);
  SEEDSTORE_RETURN_IF_ERROR(ParallelFor(tiles.Count(), threads, false, [&](uint64_t q, int th) -> Status {
    const Region tile = tiles.Tile(q);
    bufs[th].resize(tile.Count() * es);
    SEEDSTORE_RETURN_IF_ERROR(out.Read(i, tile, bufs[th].data(), CpuOptions{1}));
    parts[th].Add(FingerprintOf(t, tile, bufs[th].data(), CpuOptions{1}));
    return Status::Ok();
  }));
  Fingerprint f;
  for (const Fingerprint& p : parts) f.Add(p);
  return f;
}

// The proof of one written piece -- global box or flat range `r` of dense tensor i of the
// output `out` (a store or a distributed save) -- as its share of the tensor's fingerprint
// (global indices). By default from the stored chunks (H5Store::ProveStored: every chunk's
// stored bytes checked against the chunk-info table, whose fingerprints are the global
// tensor's): with `cells` (every piece of the tensor stores whole cells of one chunk grid),
// the cells whose first element r holds (DistCatalog::ProveCells); else less what a padded
// piece stores beyond r (decoded: DistCatalog::PaddingFingerprint). With `full`, or for a
// piece without a table in the global frame, decoded and fingerprinted (ReadBackFingerprint).
Result<Fingerprint> ProvePiece(const Catalog& out, size_t i, const Region& r, CpuOptions o, bool full,
                               bool cells) {
  if (!full) {
    if (const auto* s = dynamic_cast<const H5Store*>(&out)) {
      if (!s->chunk_info(i).empty() && !s->tensors()[i].piece) return s->ProveStored(i, o);
    } else if (const auto* d = dynamic_cast<const DistCatalog*>(&out)) {
      for (size_t p = 0; p < d->pieces(i).size(); ++p) {
        if (!SameRegion(d->pieces(i)[p].region, r)) continue;
        if (cells) return d->ProveCells(i, p, o);
        SEEDSTORE_ASSIGN_OR_RETURN(auto sk, d->PieceStore(i, p));
        const TensorRecord& pr = sk.first->tensors()[sk.second];
        if (sk.first->chunk_info(sk.second).empty() || !pr.piece ||
            !SameRegion(*pr.piece, d->pieces(i)[p].stored))
          break;
        SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint f, sk.first->ProveStored(sk.second, o));
        SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint pad, d->PaddingFingerprint(i, p, o));
        f.Sub(pad);
        return f;
      }
    }
  }
  return ReadBackFingerprint(out, i, r, o);
}

// ---- The master's datasets (docs/FORMAT.md 10, "Master objects") -------------------------
//
// One function, MasterDatasetOf, says what the master holds at /tensors/<escaped name> for a
// dense tensor: the writer (AddDistributedObjects) creates exactly that, and the verifier
// (DistCatalog::VerifyMasterDatasets) compares the master's objects with it.

// How a flat piece is mapped (docs/FORMAT.md 10; the index's "flat_mappings"). kBoxes (what this
// writer writes): one mapping per box of the range's row-major
// decomposition (FlatRangeToBoxes: at most 2 x rank - 1), each from a contiguous run of the
// piece's 1-d dataset. kRuns (saves without the field): one mapping per innermost run; a tensor
// whose flat pieces could need more than kMaxFlatRuns of them (counted as (end - begin) /
// innermost extent + 2 per flat piece) has no virtual dataset.
enum class FlatMappings { kRuns, kBoxes };
constexpr uint64_t kMaxFlatRuns = 65536;

// One mapping of a virtual dataset: the box `to` of the global tensor (to.shape: the tensor's
// shape) is the box `from` of /tensors/<escaped name> in the rank file of `rank` (from.shape:
// that dataset's shape, the local shape of the piece's stored box; [end - begin] for a flat
// piece). `piece` is the index of the piece in the tensor's pieces.
struct VdsMapping {
  int rank = 0;
  size_t piece = 0;
  Region to, from;
};

struct MasterDataset {
  enum Kind {
    kNone,     // no dataset: a lazy tensor, a tensor without elements, or too many flat runs
    kScalar,   // a plain scalar dataset holding the value (a virtual dataset needs rank >= 1)
    kVirtual,  // a virtual dataset of the global shape with `mappings`, in this order
  } kind = kNone;
  std::string why_none;  // kNone: why there is no dataset, for messages
  std::vector<VdsMapping> mappings;
};

// A box of `shape` (rank `n`) from start `st` with extents `cnt`.
Region BoxOf(int n, const uint64_t* shape, const uint64_t* st, const uint64_t* cnt) {
  Region r;
  r.rank = n;
  for (int d = 0; d < n; ++d) {
    r.shape[d] = shape[d];
    r.start[d] = st[d];
    r.stop[d] = st[d] + cnt[d];
  }
  return r;
}

// What the master holds for dense tensor `t` (lazy: nothing) whose non-empty pieces are
// `pieces`, in index order. A box piece maps its region (owned box) from where that lies in its
// (maybe padded) stored box; a flat piece maps, in order, each box of its range (`style`
// kBoxes) or each innermost run (kRuns) from the same elements of its 1-d dataset. Without
// `with_mappings`, only the kind (and why_none) is set.
MasterDataset MasterDatasetOf(const TensorRecord& t, const std::vector<DistCatalog::Piece>& pieces,
                              FlatMappings style, bool with_mappings = true) {
  MasterDataset m;
  const int rank = static_cast<int>(t.shape.size());
  if (t.lazy) {
    m.why_none = "it is lazy";
    return m;
  }
  if (t.NumElements() == 0) {
    m.why_none = "it has no elements";
    return m;
  }
  if (rank == 0) {
    m.kind = MasterDataset::kScalar;
    return m;
  }
  uint64_t flat_runs = 0;
  for (const DistCatalog::Piece& p : pieces)
    if (p.region.flat) flat_runs += (p.region.end - p.region.begin) / t.shape.back() + 2;
  if (style == FlatMappings::kRuns && flat_runs > kMaxFlatRuns) {
    m.why_none = "its flat pieces would need more than " + std::to_string(kMaxFlatRuns) +
                 " mappings";
    return m;
  }
  m.kind = MasterDataset::kVirtual;
  if (!with_mappings) return m;
  const uint64_t* gshape = t.shape.data();
  for (size_t k = 0; k < pieces.size(); ++k) {
    const DistCatalog::Piece& p = pieces[k];
    const Region& g = p.region;
    if (!g.flat) {
      const Region& sb = p.stored;
      uint64_t cnt[kMaxRank], sdims[kMaxRank], sst[kMaxRank];
      for (int d = 0; d < rank; ++d) {
        cnt[d] = g.stop[d] - g.start[d];
        sdims[d] = sb.stop[d] - sb.start[d];
        sst[d] = g.start[d] - sb.start[d];
      }
      m.mappings.push_back({p.rank, k, BoxOf(rank, gshape, g.start, cnt), BoxOf(rank, sdims, sst, cnt)});
      continue;
    }
    const uint64_t local_n = g.end - g.begin;
    if (style == FlatMappings::kBoxes) {
      uint64_t ls = 0;  // boxes in row-major order: each is the next run of the 1-d dataset
      for (const Region& b : FlatRangeToBoxes(t.shape, g.begin, g.end)) {
        uint64_t cnt[kMaxRank];
        for (int d = 0; d < rank; ++d) cnt[d] = b.stop[d] - b.start[d];
        const uint64_t lc = b.Count();
        m.mappings.push_back({p.rank, k, BoxOf(rank, gshape, b.start, cnt), BoxOf(1, &local_n, &ls, &lc)});
        ls += lc;
      }
      continue;
    }
    const uint64_t inner = t.shape.back();
    for (uint64_t g0 = g.begin; g0 < g.end;) {
      const uint64_t g1 = std::min(g.end, (g0 / inner + 1) * inner);
      uint64_t st[kMaxRank], cnt[kMaxRank];
      uint64_t q = g0;
      for (int d = rank - 1; d >= 0; --d) {
        st[d] = q % t.shape[d];
        q /= t.shape[d];
        cnt[d] = 1;
      }
      cnt[rank - 1] = g1 - g0;
      const uint64_t ls = g0 - g.begin, lc = g1 - g0;
      m.mappings.push_back({p.rank, k, BoxOf(rank, gshape, st, cnt), BoxOf(1, &local_n, &ls, &lc)});
      g0 = g1;
    }
  }
  return m;
}

// A dataspace of box `b`'s shape with the box selected (a hyperslab).
hid_t BoxSpace(const Region& b) {
  std::vector<hsize_t> dims(b.shape, b.shape + b.rank), st(b.start, b.start + b.rank), cnt(b.rank);
  for (int d = 0; d < b.rank; ++d) cnt[d] = b.stop[d] - b.start[d];
  const hid_t s = H5Screate_simple(b.rank, dims.data(), nullptr);
  if (s >= 0 && H5Sselect_hyperslab(s, H5S_SELECT_SET, st.data(), nullptr, cnt.data(), nullptr) < 0) {
    H5Sclose(s);
    return -1;
  }
  return s;
}

// The plan's pieces of tensor i, as the index lists them.
std::vector<DistCatalog::Piece> PlannedPieces(const Plan& plan, size_t i) {
  std::vector<DistCatalog::Piece> ps;
  for (size_t k = 0; k < plan.shards[i].size(); ++k)
    ps.push_back({plan.shards[i][k].replicas[0], plan.shards[i][k].region, plan.stored[i][k], std::nullopt});
  return ps;
}

// Adds the index and the virtual datasets to the (closed, committed) master file at `file`.
Status AddDistributedObjects(const std::string& file, const Catalog& src, const Plan& plan,
                             const Layout& layout, uint32_t id, const std::string& path,
                             const std::vector<Fingerprint>& fps, const std::vector<uint64_t>& counts,
                             const std::vector<uint64_t>& piece_fps) {
  const auto& ts = src.tensors();
  json tensors = json::array();
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].lazy) {
      tensors.push_back(json{{"name", ts[i].name}, {"kind", "lazy"}});
      continue;
    }
    json pieces = json::array();
    for (size_t k = 0; k < plan.shards[i].size(); ++k) {
      const Shard& s = plan.shards[i][k];
      json piece = {{"rank", s.replicas[0]}, {"region", RegionToJson(s.region)}};
      if (!SameRegion(plan.stored[i][k], s.region)) piece["stored"] = RegionToJson(plan.stored[i][k]);
      const size_t q = plan.first_piece[i] + k;
      piece["fingerprint"] = FingerprintHex(Fingerprint{piece_fps[2 * q], piece_fps[2 * q + 1]});
      pieces.push_back(std::move(piece));
    }
    tensors.push_back(json{{"name", ts[i].name},
                           {"kind", "dense"},
                           {"shape", ts[i].shape},
                           {"dtype", DTypeName(ts[i].dtype)},
                           {"fingerprint", FingerprintHex(fps[i])},
                           {"chunks", counts[kCounts * i] + counts[kCounts * i + 1]},
                           {"stored_bytes", counts[kCounts * i + 2]},
                           {"pieces", pieces}});
  }
  json files = json::array();
  for (int r = 0; r < layout.world_size(); ++r) files.push_back(BaseOf(RankFileName(path, id, r)));
  char idhex[16];
  std::snprintf(idhex, sizeof idhex, "%08x", id);
  const json index = {{"format", "seedstore-distributed"}, {"version", 1},   {"save_id", idhex},
                      {"world", layout.world_size()},      {"layout", layout.ToJson()},
                      {"rank_files", files},               {"flat_mappings", "boxes"},
                      {"tensors", tensors}};
  const std::string text = index.dump();

  H fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.id, H5F_LIBVER_V110, H5F_LIBVER_LATEST);
  // No sieve buffer (as StoreWriter::Create): the index and the scalars are written, and a
  // full disk fails, at their H5Dwrite, not at an H5Dclose whose failure goes unseen.
  H5Pset_sieve_buf_size(fapl.id, 0);
  // Closed below: kept when every object is written and flushed, else abandoned (the master
  // is an uncommitted temporary: AbandonH5File), never left half-closed by a failed flush.
  const hid_t fid = H5Fopen(file.c_str(), H5F_ACC_RDWR, fapl.id);
  if (fid < 0) return IoError("cannot reopen master '" + file + "' to add its index");
  const Status st = [&]() -> Status {
    SEEDSTORE_RETURN_IF_ERROR(WriteStringAttr(fid, kRoleAttr, kMasterRole));
    H gcpl(UntimedCreationList(H5P_GROUP_CREATE), H5Pclose);
    H untimed(UntimedCreationList(H5P_DATASET_CREATE), H5Pclose);
    {
      H g(H5Gcreate2(fid, "/distributed", H5P_DEFAULT, gcpl.id, H5P_DEFAULT), H5Gclose);
      hsize_t n = text.size();
      H space(H5Screate_simple(1, &n, nullptr), H5Sclose);
      H d(H5Dcreate2(fid, kIndexPath, H5T_STD_U8LE, space.id, H5P_DEFAULT, untimed.id,
                     H5P_DEFAULT),
          H5Dclose);
      if (g.id < 0 || d.id < 0)
        return IoError("cannot create " + std::string(kIndexPath) + " in '" + file + "': " + H5ErrorText());
      if (H5Dwrite(d.id, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) < 0)
        return IoError("cannot write " + std::string(kIndexPath) + " to '" + file + "': " + H5ErrorText());
      const uint64_t h = Checksum64(text.data(), text.size());
      H as(H5Screate(H5S_SCALAR), H5Sclose);
      H a(H5Acreate2(d.id, "seedstore.xxh3", H5T_STD_U64LE, as.id, H5P_DEFAULT, H5P_DEFAULT),
          H5Aclose);
      H5Awrite(a.id, H5T_NATIVE_UINT64, &h);
    }
    // /tensors/<escaped> of each dense tensor, as MasterDatasetOf says.
    for (size_t i = 0; i < ts.size(); ++i) {
      const TensorRecord& t = ts[i];
      const MasterDataset want = MasterDatasetOf(t, PlannedPieces(plan, i), FlatMappings::kBoxes);
      if (want.kind == MasterDataset::kNone) continue;
      const int rank = static_cast<int>(t.shape.size());
      const std::string dset = "/tensors/" + EscapeH5Name(t.name);
      // File type: the one the rank file holding the first piece uses.
      const std::string f0 = RankFileName(path, id, plan.shards[i].at(0).replicas[0]);
      H rf(H5Fopen(f0.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
      H rd(rf.id >= 0 ? H5Dopen2(rf.id, dset.c_str(), H5P_DEFAULT) : -1, H5Dclose);
      if (rd.id < 0) return IoError("cannot open '" + f0 + "' " + dset + " for its type");
      H ftype(H5Dget_type(rd.id), H5Tclose);
      auto add_attrs = [&](hid_t d) -> Status {
        SEEDSTORE_RETURN_IF_ERROR(WriteStringAttr(d, "seedstore.name", t.name));
        SEEDSTORE_RETURN_IF_ERROR(WriteStringAttr(d, "seedstore.dtype", DTypeName(t.dtype)));
        hsize_t two = 2;
        H as(H5Screate_simple(1, &two, nullptr), H5Sclose);
        H a(H5Acreate2(d, "seedstore.fingerprint", H5T_STD_U64LE, as.id, H5P_DEFAULT, H5P_DEFAULT),
            H5Aclose);
        const uint64_t lanes[2] = {fps[i].lane0, fps[i].lane1};
        if (a.id < 0 || H5Awrite(a.id, H5T_NATIVE_UINT64, lanes) < 0)
          return IoError("cannot write the attributes of '" + t.name + "' in the master");
        return Status::Ok();
      };
      if (want.kind == MasterDataset::kScalar) {
        std::vector<unsigned char> v(DTypeSize(t.dtype));
        SEEDSTORE_RETURN_IF_ERROR(src.Read(i, WholeTensor(t.shape), v.data(), CpuOptions{1}));
        H space(H5Screate(H5S_SCALAR), H5Sclose);
        H d(H5Dcreate2(fid, dset.c_str(), ftype.id, space.id, H5P_DEFAULT, untimed.id,
                       H5P_DEFAULT),
            H5Dclose);
        if (d.id < 0 || H5Dwrite(d.id, ftype.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
          return IoError("cannot write the scalar '" + t.name + "' to the master");
        SEEDSTORE_RETURN_IF_ERROR(add_attrs(d.id));
        continue;
      }
      H dcpl(UntimedCreationList(H5P_DATASET_CREATE), H5Pclose);
      bool failed = dcpl.id < 0;
      for (const VdsMapping& mp : want.mappings) {
        const std::string src_file = BaseOf(RankFileName(path, id, mp.rank));
        H vs(BoxSpace(mp.to), H5Sclose);
        H ss(BoxSpace(mp.from), H5Sclose);
        failed |= vs.id < 0 || ss.id < 0 ||
                  H5Pset_virtual(dcpl.id, vs.id, VdsSourceName(src_file).c_str(),
                                 VdsSourceName(dset).c_str(), ss.id) < 0;
      }
      if (failed) return IoError("cannot map the pieces of '" + t.name + "' (H5Pset_virtual)");
      std::vector<hsize_t> gdims(t.shape.begin(), t.shape.end());
      H space(H5Screate_simple(rank, gdims.data(), nullptr), H5Sclose);
      H d(H5Dcreate2(fid, dset.c_str(), ftype.id, space.id, H5P_DEFAULT, dcpl.id, H5P_DEFAULT),
          H5Dclose);
      if (d.id < 0) return IoError("cannot create the virtual dataset of '" + t.name + "'");
      SEEDSTORE_RETURN_IF_ERROR(add_attrs(d.id));
    }
    return H5Fflush(fid, H5F_SCOPE_GLOBAL) < 0
               ? IoError("cannot flush master '" + file + "': " + H5ErrorText())
               : Status::Ok();
  }();
  if (!st.ok()) {
    AbandonH5File(fid);
    return st;
  }
  return H5Fclose(fid) < 0 ? IoError("cannot close master '" + file + "': " + H5ErrorText())
                           : Status::Ok();
}

// This rank's shard buffers as a catalog: any region inside the rank's own shard can be read.
class BufferCatalog : public Catalog {
 public:
  static Result<std::unique_ptr<BufferCatalog>> Create(const std::vector<ParamBuffer>& params,
                                                      const Layout& layout, int rank,
                                                      const DistSaveOptions& o) {
    auto c = std::make_unique<BufferCatalog>();
    c->root_seed_ = o.root_seed;
    c->generator_ = o.generator;
    for (const ParamBuffer& p : params) {
      TensorRecord rec;
      rec.name = p.name;
      rec.shape = p.shape;
      rec.dtype = p.dtype;
      SEEDSTORE_ASSIGN_OR_RETURN(Shard sh, layout.ShardOf(p.name, p.shape, rank));
      const uint64_t want = sh.region.Count() * DTypeSize(p.dtype);
      if (p.on_device)
        return InvalidArgument("save: tensor '" + p.name + "': device buffers are not supported");
      if (p.bytes != want)
        return InvalidArgument("save: tensor '" + p.name + "': buffer of " +
                               std::to_string(p.bytes) + " bytes, the shard " +
                               DescribeRegion(sh.region) + " needs " + std::to_string(want));
      if (!p.data && want > 0) return InvalidArgument("save: tensor '" + p.name + "': null data");
      c->records_.push_back(std::move(rec));
      c->shards_.push_back(sh.region);
      c->data_.push_back(static_cast<const unsigned char*>(p.data));
    }
    return c;
  }
  const std::vector<TensorRecord>& tensors() const override { return records_; }
  std::string origin() const override { return "<buffers>"; }
  Status Read(size_t i, const Region& r, void* out, CpuOptions) const override {
    const Region& s = shards_.at(i);
    const size_t es = DTypeSize(records_[i].dtype);
    auto outside = [&] {
      return InvalidArgument("save: tensor '" + records_[i].name + "': region " +
                             DescribeRegion(r) + " is outside this rank's shard " +
                             DescribeRegion(s));
    };
    if (r.Count() == 0) return Status::Ok();
    if (s.flat || r.flat) {
      if (!(s.flat && r.flat) || r.begin < s.begin || r.end > s.end) return outside();
      std::memcpy(out, data_[i] + (r.begin - s.begin) * es, r.Count() * es);
      return Status::Ok();
    }
    uint64_t sext[kMaxRank], off[kMaxRank], ext[kMaxRank];
    for (int d = 0; d < r.rank; ++d) {
      if (r.start[d] < s.start[d] || r.stop[d] > s.stop[d]) return outside();
      sext[d] = s.stop[d] - s.start[d];
      off[d] = r.start[d] - s.start[d];
      ext[d] = r.stop[d] - r.start[d];
    }
    CopyBox(data_[i], sext, off, static_cast<unsigned char*>(out), ext, nullptr, ext, r.rank, es);
    return Status::Ok();
  }
  const void* HostData(size_t i, const Region& r) const override {
    return SameRegion(r, shards_.at(i)) ? data_[i] : nullptr;
  }
  uint64_t root_seed() const { return root_seed_; }
  Generator generator() const { return generator_; }

 private:
  uint64_t root_seed_ = 0;
  Generator generator_ = Generator::kThreefry;
  std::vector<TensorRecord> records_;
  std::vector<Region> shards_;
  std::vector<const unsigned char*> data_;
};

}  // namespace

Result<ReshardReport> SaveBuffers(Exchange& comm, const std::vector<ParamBuffer>& params,
                                  const Layout& layout, const std::string& path,
                                  const DistSaveOptions& o) {
  if (layout.world_size() != comm.size())
    return InvalidArgument("save: the layout has " + std::to_string(layout.world_size()) +
                           " ranks but the job has " + std::to_string(comm.size()));
  if (o.consolidate) return InvalidArgument("save: buffers cannot be consolidated; reshard later");
  auto cat = BufferCatalog::Create(params, layout, comm.rank(), o);
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm, cat.status(), "save: buffers"));
  return Reshard(comm, **cat, layout, path, o);
}

std::string RankFileName(const std::string& path, uint32_t id, int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ".%08x.rank%d.h5", id, rank);
  return path + buf;
}

bool ParseRankFileName(const std::string& path, std::string* save, uint32_t* id, int* rank) {
  const std::string name = BaseOf(path);
  const size_t at = name.rfind(".rank");  // "<P>.<8 hex>" before it, "<r>.h5" after
  if (at == std::string::npos || at < 10 || name[at - 9] != '.') return false;
  const std::string hex = name.substr(at - 8, 8), tail = name.substr(at + 5);
  if (hex.find_first_not_of("0123456789abcdef") != std::string::npos || tail.size() < 4 ||
      tail.compare(tail.size() - 3, 3, ".h5") != 0)
    return false;
  const std::string digits = tail.substr(0, tail.size() - 3);
  if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos ||
      (digits.size() > 1 && digits[0] == '0'))
    return false;
  *save = DirOf(path) + name.substr(0, at - 9);
  *id = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
  *rank = std::stoi(digits);
  return true;
}

bool IsDistributedSave(const std::string& path) {
  // A sealed master, intact or not, is one without asking HDF5 (which must not parse a damaged
  // one: DistCatalog::Open names it).
  bool sealed = false;
  if (NotARegularFile(path).empty() && (!CheckMasterSeal(path, false, &sealed).ok() || sealed)) return true;
  if (!LooksLikeHdf5(path)) return false;
  auto lock = LockH5();
  H f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  return f.id >= 0 && FileIsDistributedMaster(f.id, path);
}

void RootSeedOf(const Catalog& c, uint64_t* seed, Generator* generator) {
  *seed = 0;
  *generator = Generator::kThreefry;
  if (auto* s = dynamic_cast<const SpecCatalog*>(&c)) {
    *seed = s->spec().seed;
    *generator = s->spec().generator;
  } else if (auto* h = dynamic_cast<const H5Store*>(&c)) {
    *seed = h->root_seed();
    *generator = h->generator();
  } else if (auto* d = dynamic_cast<const DistCatalog*>(&c)) {
    *seed = d->root_seed();
    *generator = d->generator();
  } else if (auto* b = dynamic_cast<const BufferCatalog*>(&c)) {
    *seed = b->root_seed();
    *generator = b->generator();
  }
}

// ---- Reader -----------------------------------------------------------------------------

DistCatalog::~DistCatalog() = default;

Result<std::unique_ptr<DistCatalog>> DistCatalog::Open(const std::string& path, bool check_rank_files) {
  std::unique_ptr<DistCatalog> c(new DistCatalog());
  c->path_ = path;
  // The seal, before HDF5 reads the master (H5Store::Open checks a sealed one too); a master
  // that starts with neither the seal nor HDF5's signature is damaged.
  SEEDSTORE_RETURN_IF_ERROR(CheckMasterSeal(path, /*is_master=*/true, nullptr));
  SEEDSTORE_ASSIGN_OR_RETURN(c->master_, H5Store::Open(path));
  auto bad = [&](const std::string& m) {
    return DistError("bad-index", Code::kCorrupt, path, -1, "", std::string(kIndexPath) + ": " + m);
  };
  std::string text;
  {
    H d(H5Dopen2(c->master_->h5_file(), kIndexPath, H5P_DEFAULT), H5Dclose);
    if (d.id < 0) return bad("missing");
    H space(H5Dget_space(d.id), H5Sclose);
    const hssize_t n = H5Sget_simple_extent_npoints(space.id);
    if (n < 0) return bad("unreadable");
    text.resize(n);
    if (H5Dread(d.id, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) < 0)
      return bad("unreadable");
    uint64_t h = 0;
    H a(H5Aopen(d.id, "seedstore.xxh3", H5P_DEFAULT), H5Aclose);
    if (a.id < 0 || H5Aread(a.id, H5T_NATIVE_UINT64, &h) < 0) return bad("no seedstore.xxh3");
    if (h != Checksum64(text.data(), text.size())) return bad("checksum mismatch");
  }
  try {
    std::string err;
    const json j = ParseJson(text, &err);
    if (j.is_discarded()) return bad(err);
    if (j.at("format") != "seedstore-distributed" || j.at("version") != 1)
      return bad("not a version 1 distributed index");
    SEEDSTORE_ASSIGN_OR_RETURN(c->layout_, Layout::FromJson(j.at("layout")));
    // Rank files lie next to the master itself, wherever symbolic links to it are.
    SEEDSTORE_ASSIGN_OR_RETURN(const std::string master_file, ResolveSymlinks(path));
    const std::string dir = DirOf(master_file);
    for (const auto& f : j.at("rank_files")) {
      const std::string name = f.get<std::string>();
      if (name.find('/') != std::string::npos) return bad("rank file with a '/'");
      c->rank_files_.push_back(dir + name);
    }
    if (static_cast<int>(c->rank_files_.size()) != j.at("world").get<int>() ||
        c->layout_.world_size() != c->world())
      return bad("world size differs from the rank files / layout");
    c->rank_stores_.resize(c->rank_files_.size());
    c->last_used_.resize(c->rank_files_.size());
    struct rlimit lim;
    c->max_open_ = 4096;
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
      c->max_open_ = std::clamp<size_t>(static_cast<size_t>(lim.rlim_cur / 2), 1, 4096);
    if (j.contains("flat_mappings")) {  // absent: "runs" (docs/FORMAT.md 9)
      const json& fm = j["flat_mappings"];
      if (fm != "boxes" && fm != "runs")
        return bad("field 'flat_mappings' is " + JsonPreview(fm) + ", not \"boxes\" or \"runs\"");
      c->flat_boxes_ = fm == "boxes";
    }
    std::set<std::string> names;
    for (const auto& t : j.at("tensors")) {
      const std::string name = t.at("name");
      if (name.empty()) return bad("a tensor has an empty name");
      if (!names.insert(name).second) return bad("tensor '" + name + "' is listed twice");
      if (t.at("kind") == "lazy") {
        const int k = c->master_->Find(name);
        if (k < 0) return bad("lazy tensor '" + name + "' is not in the master store");
        c->records_.push_back(c->master_->tensors()[k]);
        c->pieces_.emplace_back();
        c->storage_.emplace_back();
        continue;
      }
      TensorRecord rec;
      rec.name = name;
      rec.shape = t.at("shape").get<std::vector<uint64_t>>();
      SEEDSTORE_ASSIGN_OR_RETURN(rec.dtype, ParseDType(t.at("dtype").get<std::string>()));
      if (Status vs = ValidateShape(rec.shape, rec.dtype, "tensor '" + name + "' shape"); !vs.ok())
        return bad(vs.message());
      SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint fp,
                                 ParseFingerprintHex(t.at("fingerprint").get<std::string>()));
      rec.fingerprint = fp;
      std::vector<Piece> ps;
      uint64_t covered = 0;
      for (const auto& p : t.at("pieces")) {
        Piece piece;
        piece.rank = p.at("rank");
        if (piece.rank < 0 || piece.rank >= c->world()) return bad("piece rank out of range");
        auto reg = RegionFromJson(p.at("region"), rec.shape);
        if (!reg.ok()) return bad("tensor '" + name + "': " + reg.status().message());
        piece.region = piece.stored = *reg;
        if (p.contains("stored")) {
          auto sb = RegionFromJson(p.at("stored"), rec.shape);
          if (!sb.ok()) return bad("tensor '" + name + "': stored: " + sb.status().message());
          if (reg->flat || sb->flat || !BoxWithin(*reg, *sb))
            return bad("tensor '" + name + "': stored box " + DescribeRegion(*sb) +
                       " does not hold the piece " + DescribeRegion(*reg));
          piece.stored = *sb;
        }
        if (p.contains("fingerprint")) {
          auto f = p["fingerprint"].is_string() ? ParseFingerprintHex(p["fingerprint"].get<std::string>())
                                                : Result<Fingerprint>(InvalidArgument("not a string"));
          if (!f.ok())
            return bad("tensor '" + name + "' piece " + std::to_string(ps.size()) + ": fingerprint: " +
                       f.status().message());
          piece.fingerprint = *f;
        }
        covered += piece.region.Count();
        ps.push_back(piece);
      }
      if (covered != rec.NumElements()) return bad("pieces of '" + name + "' do not cover it");
      // The pieces are the layout's distinct shards, in order (as Reshard writes them): so they
      // are disjoint and cover the tensor, and every reader agrees on who holds what.
      SEEDSTORE_ASSIGN_OR_RETURN(std::vector<Shard> want, c->layout_.DistinctShards(name, rec.shape));
      want.erase(std::remove_if(want.begin(), want.end(), [](const Shard& s) { return s.empty(); }),
                 want.end());
      if (want.size() != ps.size())
        return bad("tensor '" + name + "' has " + std::to_string(ps.size()) + " pieces; its layout gives " +
                   std::to_string(want.size()));
      for (size_t k = 0; k < ps.size(); ++k)
        if (ps[k].rank != want[k].replicas[0] || !SameRegion(ps[k].region, want[k].region))
          return bad("tensor '" + name + "' piece " + std::to_string(k) + " (rank " +
                     std::to_string(ps[k].rank) + ", " + DescribeRegion(ps[k].region) +
                     ") is not its layout's (rank " + std::to_string(want[k].replicas[0]) + ", " +
                     DescribeRegion(want[k].region) + ")");
      std::optional<Storage> storage;
      if (t.contains("chunks") || t.contains("stored_bytes")) {
        if (!t.contains("chunks") || !t.contains("stored_bytes") || !t["chunks"].is_number_unsigned() ||
            !t["stored_bytes"].is_number_unsigned())
          return bad("tensor '" + name + "': 'chunks' and 'stored_bytes' must both be unsigned integers");
        storage = Storage{t["chunks"].get<uint64_t>(), t["stored_bytes"].get<uint64_t>()};
      }
      c->records_.push_back(std::move(rec));
      c->pieces_.push_back(std::move(ps));
      c->storage_.push_back(storage);
    }
  } catch (const std::exception& e) {
    return bad(e.what());
  }
  for (int r = 0; check_rank_files && r < c->world(); ++r)
    SEEDSTORE_RETURN_IF_ERROR(RankFileReachable(path, r, c->rank_files_[r], ""));
  return c;
}

Result<Fingerprint> DistCatalog::PaddingFingerprint(size_t i, size_t p, CpuOptions o,
                                                    bool from_owners) const {
  const Piece& piece = pieces_.at(i).at(p);
  const Region &g = piece.region, &sb = piece.stored;
  Fingerprint f;
  if (SameRegion(g, sb)) return f;
  SEEDSTORE_ASSIGN_OR_RETURN(auto sk, PieceStore(i, p));
  const H5Store* s = sk.first.get();  // held by sk
  const size_t k = sk.second;
  std::vector<uint64_t> chunk = s->stored(k).chunk;
  if (chunk.empty()) chunk = LocalShape(sb);
  const std::vector<uint64_t> lshape = LocalShape(sb);
  const size_t es = DTypeSize(records_[i].dtype);
  for (const Region& slab : BoxDifference(sb, g)) {
    const GridTiles tiles(slab, sb.start, chunk);
    const int threads = ThreadCount(o.threads, tiles.Count());
    std::vector<Fingerprint> parts(threads);
    std::vector<std::vector<unsigned char>> bufs(threads);
    SEEDSTORE_RETURN_IF_ERROR(ParallelFor(tiles.Count(), threads, false, [&](uint64_t q, int th) -> Status {
      const Region tile = tiles.Tile(q);
      bufs[th].resize(tile.Count() * es);
      if (from_owners) {
        SEEDSTORE_RETURN_IF_ERROR(Read(i, tile, bufs[th].data(), CpuOptions{1}));
      } else {
        std::vector<uint64_t> ls(g.rank), lp(g.rank);
        for (int e = 0; e < g.rank; ++e) {
          ls[e] = tile.start[e] - sb.start[e];
          lp[e] = tile.stop[e] - sb.start[e];
        }
        Status st = s->Read(k, BoxRegion(lshape, ls, lp), bufs[th].data(), CpuOptions{1});
        if (!st.ok())
          return DistError("rank-file-corrupt", st.code(), path_, piece.rank, rank_files_[piece.rank],
                           st.message());
      }
      parts[th].Add(FingerprintOf(records_[i], tile, bufs[th].data(), CpuOptions{1}));
      return Status::Ok();
    }));
    for (const Fingerprint& x : parts) f.Add(x);
  }
  return f;
}

Result<std::vector<uint64_t>> DistCatalog::PieceGrid(size_t i, size_t p) const {
  const Piece& piece = pieces_.at(i).at(p);
  std::vector<uint64_t> none;
  const Region& sb = piece.stored;
  if (sb.flat || sb.rank == 0) return none;
  SEEDSTORE_ASSIGN_OR_RETURN(auto sk, PieceStore(i, p));
  const TensorRecord& pr = sk.first->tensors()[sk.second];
  const std::vector<uint64_t>& c = sk.first->stored(sk.second).chunk;
  if (c.empty() || sk.first->chunk_info(sk.second).empty() || !pr.piece ||
      pr.fp_seed() != records_[i].fp_seed())
    return none;
  for (int d = 0; d < sb.rank; ++d)
    if (sb.start[d] % c[d] != 0 || (sb.stop[d] % c[d] != 0 && sb.stop[d] != sb.shape[d]))
      return none;
  return c;
}

Result<Fingerprint> DistCatalog::ProveCells(size_t i, size_t p, CpuOptions o) const {
  const Piece& me = pieces_.at(i).at(p);
  SEEDSTORE_ASSIGN_OR_RETURN(auto sk, PieceStore(i, p));
  SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint f, sk.first->ProveStored(sk.second, o));
  const std::vector<uint64_t>& c = sk.first->stored(sk.second).chunk;
  const std::vector<ChunkInfo>& info = sk.first->chunk_info(sk.second);
  const int rank = me.stored.rank;
  // The chunk index, in piece q's grid, of the cell starting at global index x.
  auto index_in = [&](const Piece& q, const uint64_t* x) {
    uint64_t j = 0;
    for (int d = 0; d < rank; ++d)
      j = j * ((q.stored.stop[d] - q.stored.start[d] + c[d] - 1) / c[d]) +
          (x[d] - q.stored.start[d]) / c[d];
    return j;
  };
  uint64_t count[kMaxRank], cells = 1;
  for (int d = 0; d < rank; ++d) {
    count[d] = (me.stored.stop[d] - me.stored.start[d] + c[d] - 1) / c[d];
    cells *= count[d];
  }
  for (uint64_t j = 0; j < cells; ++j) {
    uint64_t x[kMaxRank], q = j;
    bool mine = true;
    for (int d = rank - 1; d >= 0; --d) {
      x[d] = me.stored.start[d] + (q % count[d]) * c[d];
      q /= count[d];
      mine &= me.region.start[d] <= x[d] && x[d] < me.region.stop[d];
    }
    if (mine) continue;
    // A cell of p's padding: the owner of its first element stores it too.
    size_t owner = pieces_[i].size();
    for (size_t k = 0; k < pieces_[i].size() && owner == pieces_[i].size(); ++k) {
      const Region& g = pieces_[i][k].region;
      bool in = !g.flat;
      for (int d = 0; in && d < rank; ++d) in = g.start[d] <= x[d] && x[d] < g.stop[d];
      if (in) owner = k;
    }
    auto mismatch = [&](const std::string& why) {
      return DistError("padding-mismatch", Code::kMismatch, path_, me.rank, rank_files_[me.rank],
                       "tensor '" + records_[i].name + "' piece " + DescribeRegion(me.region) +
                           " stored as " + DescribeRegion(me.stored) + ": chunk " +
                           std::to_string(j) + " " + why);
    };
    if (owner == pieces_[i].size()) return mismatch("starts where no piece is");
    SEEDSTORE_ASSIGN_OR_RETURN(auto ok, PieceStore(i, owner));
    const std::vector<ChunkInfo>& oinfo = ok.first->chunk_info(ok.second);
    const uint64_t oj = index_in(pieces_[i][owner], x);
    if (ok.first->stored(ok.second).chunk != c || oj >= oinfo.size())
      return mismatch("is not stored alike by the piece owning its first element");
    if (oinfo[oj].fingerprint != info[j].fingerprint)
      return mismatch("differs from the owning piece's (rank " +
                      std::to_string(pieces_[i][owner].rank) + " chunk " + std::to_string(oj) + ")");
    f.Sub(info[j].fingerprint);
  }
  return f;
}

size_t DistCatalog::open_rank_files() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& s : rank_stores_) n += s != nullptr;
  return n;
}

Result<std::pair<std::shared_ptr<const H5Store>, size_t>> DistCatalog::PieceStore(size_t i, size_t p) const {
  SEEDSTORE_ASSIGN_OR_RETURN(std::shared_ptr<const H5Store> s, RankStore(pieces_.at(i).at(p).rank, records_[i].name));
  const size_t k = static_cast<size_t>(s->Find(records_[i].name));  // checked at open
  return std::make_pair(std::move(s), k);
}

void DistCatalog::set_max_open_rank_files(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  max_open_ = std::max<size_t>(n, 1);
}

Result<std::shared_ptr<const H5Store>> DistCatalog::RankStore(int rank, const std::string& tensor) const {
  std::lock_guard<std::mutex> lock(mu_);
  last_used_[rank] = ++use_clock_;
  if (rank_stores_[rank]) return rank_stores_[rank];
  // Close the least recently used beyond the cap (a reader still holding it keeps it alive
  // until it is done). O(world) per open, against an HDF5 file open of ~10 ms.
  size_t open = 0;
  for (const auto& s : rank_stores_) open += s != nullptr;
  while (open >= max_open_) {
    int lru = -1;
    for (int r = 0; r < static_cast<int>(rank_stores_.size()); ++r)
      if (rank_stores_[r] && (lru < 0 || last_used_[r] < last_used_[lru])) lru = r;
    rank_stores_[lru].reset();
    --open;
  }
  SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<H5Store> s, OpenRank(rank, tensor));
  rank_stores_[rank] = std::move(s);
  return rank_stores_[rank];
}

Result<std::unique_ptr<H5Store>> DistCatalog::OpenRank(int rank, const std::string& tensor) const {
  const std::string& f = rank_files_[rank];
  const std::string reading = tensor.empty() ? "" : "reading tensor '" + tensor + "': ";
  SEEDSTORE_RETURN_IF_ERROR(RankFileReachable(path_, rank, f, reading));
  auto s = H5Store::Open(f);
  if (!s.ok() && !FileExists(f))  // gone meanwhile: another writer replaced the save
    return DistError("rank-file-missing", Code::kNotFound, path_, rank, f,
                     reading + "the file was removed while it was opened (the save replaced by another "
                               "writer? open it again): " + s.status().message());
  if (!s.ok() && s.status().code() == Code::kInvalidArgument)  // a directory, a pipe: the save is damaged
    return DistError("rank-file-corrupt", Code::kCorrupt, path_, rank, f, reading + s.status().message());
  if (!s.ok())  // an I/O failure (e.g. too many open files) is not the file's fault
    return DistError(s.status().code() == Code::kIo ? "rank-file-unreadable" : "rank-file-corrupt",
                     s.status().code(), path_, rank, f, reading + s.status().message());
  // Every piece this rank holds must be there with its local shape and dtype.
  for (size_t i = 0; i < records_.size(); ++i)
    for (const Piece& p : pieces_[i]) {
      if (p.rank != rank) continue;
      const int k = (*s)->Find(records_[i].name);
      if (k < 0 || (*s)->tensors()[k].lazy || (*s)->tensors()[k].dtype != records_[i].dtype ||
          (*s)->tensors()[k].shape != LocalShape(p.stored))
        return DistError("rank-file-corrupt", Code::kCorrupt, path_, rank, f,
                         reading + "tensor '" + records_[i].name + "' piece " + DescribeRegion(p.stored) +
                             " is missing or has another shape or dtype");
      // A padded piece must be recorded as such (its padding is in the global frame).
      const std::optional<Region>& rp = (*s)->tensors()[k].piece;
      if ((rp && !SameRegion(*rp, p.stored)) || (!rp && !SameRegion(p.stored, p.region)))
        return DistError("rank-file-corrupt", Code::kCorrupt, path_, rank, f,
                         reading + "tensor '" + records_[i].name + "' is recorded as piece " +
                             (rp ? DescribeRegion(*rp) : std::string("(none)")) +
                             ", the index says " + DescribeRegion(p.stored));
      // The same piece of this save: its record's fingerprint is the one the index took from
      // the writer (a rank file of another save, or one changed since, holds other values).
      const std::optional<Fingerprint>& rf = (*s)->tensors()[k].fingerprint;
      if (p.fingerprint && (!rf || *rf != *p.fingerprint))
        return DistError("rank-file-corrupt", Code::kCorrupt, path_, rank, f,
                         reading + "tensor '" + records_[i].name + "' piece " + DescribeRegion(p.stored) +
                             " has fingerprint " + (rf ? FingerprintHex(*rf) : std::string("(none)")) +
                             ", the index says " + FingerprintHex(*p.fingerprint) +
                             ": the file is not this save's (another save's rank file, or changed since)");
    }
  return std::move(*s);
}

Result<std::vector<DistCatalog::Storage>> DistCatalog::StorageOfAll() const {
  std::vector<Storage> out(records_.size());
  bool recorded = true;
  for (size_t i = 0; i < records_.size(); ++i) {
    if (storage_[i]) out[i] = *storage_[i];
    else recorded = recorded && pieces_[i].empty();
  }
  if (recorded) return out;
  out.assign(records_.size(), Storage{});
  for (int r = 0; r < world(); ++r) {
    SEEDSTORE_ASSIGN_OR_RETURN(const std::unique_ptr<H5Store> s, OpenRank(r));
    for (size_t i = 0; i < records_.size(); ++i)
      for (const Piece& p : pieces_[i]) {
        if (p.rank != r) continue;
        const size_t k = static_cast<size_t>(s->Find(records_[i].name));  // checked by OpenRank
        if (const Status& d = s->Damage(k); !d.ok())
          return DistError("rank-file-corrupt", d.code(), path_, r, rank_files_[r], d.message());
        const StoredTensor& st = s->stored(k);
        out[i].chunks += st.num_chunks;
        out[i].stored_bytes += st.stored_bytes;
      }
  }
  return out;
}

H5Store::VerifyReport DistCatalog::Verify(CpuOptions o, std::function<void(uint64_t)> progress) const {
  H5Store::VerifyReport rep = master_->Verify(o, progress);  // the lazy tensors
  std::vector<Fingerprint> lazy = std::move(rep.fingerprints);
  std::vector<bool> lazy_complete = std::move(rep.complete);
  rep.tensors = records_.size();
  rep.fingerprints.assign(records_.size(), Fingerprint{});
  std::vector<bool> bad(records_.size(), false);  // not every piece could be read and hashed
  std::vector<Storage> counted(records_.size());
  // Rank by rank, each file opened for its turn and closed after it (the cache keeps only
  // those that padding checks read from).
  for (int r = 0; r < world(); ++r) {
    auto s = OpenRank(r);
    if (!s.ok()) {
      // Name what the file's loss leaves unchecked: its tensors get no fingerprint.
      std::vector<std::string> affected;
      for (size_t i = 0; i < records_.size(); ++i) {
        bool holds = false;
        for (const Piece& p : pieces_[i]) holds = holds || p.rank == r;
        if (holds) affected.push_back(records_[i].name);
        bad[i] = bad[i] || holds;
      }
      std::string names;
      for (size_t k = 0; k < affected.size() && k < 4; ++k)
        names += (k ? ", '" : "'") + affected[k] + "'";
      if (affected.size() > 4) names += ", ...";
      rep.problems.push_back(
          {"", -1,
           Status(s.status().code(),
                  s.status().message() + " (its pieces of " + std::to_string(affected.size()) +
                      " tensor(s) were not checked" + (affected.empty() ? "" : ": " + names) +
                      ")")});
      continue;
    }
    H5Store::VerifyReport rr = (*s)->Verify(o, progress);
    rep.chunks += rr.chunks;
    rep.bytes += rr.bytes;
    for (auto& p : rr.problems) {
      const int i = Find(p.tensor);
      if (i >= 0) bad[i] = true;
      rep.problems.push_back(std::move(p));
    }
    for (size_t i = 0; i < records_.size(); ++i)
      for (size_t q = 0; q < pieces_[i].size(); ++q) {
        const Piece& p = pieces_[i][q];
        if (p.rank != r) continue;
        const size_t k = static_cast<size_t>((*s)->Find(records_[i].name));  // checked by OpenRank
        counted[i].chunks += (*s)->stored(k).num_chunks;
        counted[i].stored_bytes += (*s)->stored(k).stored_bytes;
        if ((*s)->tensors()[k].piece) {
          rep.fingerprints[i].Add(rr.fingerprints[k]);  // already in the global frame
          if (SameRegion(p.stored, p.region)) continue;
          // A padded piece: less its padding, which must hold what the pieces owning those
          // elements hold (a later reshard may copy it).
          auto pad = PaddingFingerprint(i, q, o);
          Status st = pad.status();
          Fingerprint owners;
          if (st.ok()) {
            auto f = PaddingFingerprint(i, q, o, /*from_owners=*/true);
            st = f.status();
            if (f.ok()) owners = *f;
          }
          if (st.ok() && *pad != owners)
            st = DistError("padding-mismatch", Code::kMismatch, path_, r, rank_files_[r],
                           "tensor '" + records_[i].name + "' piece " + DescribeRegion(p.region) +
                               " stored as " + DescribeRegion(p.stored) +
                               ": its padding differs from the pieces that own those elements");
          if (!st.ok()) {
            rep.problems.push_back({records_[i].name, -1, st});
            bad[i] = true;
          } else {
            rep.fingerprints[i].Sub(*pad);
          }
          continue;
        }
        // A rank file from before piece records: its fingerprints are in its own frame.
        auto f = FingerprintRegion(i, p.region, o);
        if (!f.ok()) {
          rep.problems.push_back({records_[i].name, -1, f.status()});
          bad[i] = true;
        } else {
          rep.fingerprints[i].Add(*f);
        }
      }
  }
  VerifyMasterDatasets(bad, &rep.problems);
  rep.complete.assign(records_.size(), false);
  for (size_t i = 0; i < records_.size(); ++i) {
    const TensorRecord& t = records_[i];
    if (t.lazy) {
      const int k = master_->Find(t.name);
      if (k >= 0) {
        rep.fingerprints[i] = lazy[k];
        rep.complete[i] = lazy_complete[k];
      }
      continue;
    }
    rep.complete[i] = !bad[i];
    if (!bad[i] && storage_[i] &&
        (storage_[i]->chunks != counted[i].chunks || storage_[i]->stored_bytes != counted[i].stored_bytes))
      rep.problems.push_back(
          {t.name, -1,
           DistError("bad-index", Code::kCorrupt, path_, -1, "",
                     std::string(kIndexPath) + ": tensor '" + t.name + "' is recorded as " +
                         std::to_string(storage_[i]->chunks) + " chunks, " +
                         std::to_string(storage_[i]->stored_bytes) + " bytes stored; its rank files hold " +
                         std::to_string(counted[i].chunks) + " chunks, " +
                         std::to_string(counted[i].stored_bytes) + " bytes")});
    if (!bad[i] && t.fingerprint && *t.fingerprint != rep.fingerprints[i])
      rep.problems.push_back(
          {t.name, -1,
           StoreStatus(StoreError::kFingerprintMismatch,
                       "distributed save '" + path_ + "' tensor '" + t.name + "': its pieces' fingerprints add up to " +
                           FingerprintHex(rep.fingerprints[i]) + ", the index says " +
                           FingerprintHex(*t.fingerprint))});
  }
  rep.FinishOk(records_);
  return rep;
}

// ---- Verify: the master's datasets against the index --------------------------------------

namespace {

// ---- A virtual dataset's mappings, checked before HDF5 decodes them ------------------------
//
// HDF5 keeps a virtual dataset's mappings in one object of the file's global heap, which has no
// checksum of its own; the object ends in a checksum (Jenkins lookup3, as all HDF5 metadata),
// but HDF5 1.10 decodes every mapping before it checks it, and a damaged selection crashes it
// (a flipped bit in a rank: a buffer overflow, tests/golden/test_flip_sweep.cc). So before the
// verifier opens a master's dataset, SafeToOpen finds that object in the file's
// bytes -- the dataset's object header (version 2, itself checksummed, or 1), its layout message
// (version 4, class virtual: the heap collection's address and the object's index), the heap
// collection ("GCOL") -- and checks its checksum (SafeToOpen). Formats: the HDF5 file format specification,
// sections III.A.2 (object header), IV.A.2.i (layout) and III.E (global heap).

// Bob Jenkins' lookup3 hashlittle() over bytes, initial value 0 (HDF5's metadata checksum).
uint32_t Lookup3(const unsigned char* k, size_t length) {
  auto rot = [](uint32_t x, int r) { return (x << r) | (x >> (32 - r)); };
  uint32_t a, b, c;
  a = b = c = 0xdeadbeefu + static_cast<uint32_t>(length);
  auto word = [&](const unsigned char* p, size_t n) {  // n <= 4 little-endian bytes
    uint32_t w = 0;
    for (size_t q = 0; q < n; ++q) w |= static_cast<uint32_t>(p[q]) << (8 * q);
    return w;
  };
  while (length > 12) {
    a += word(k, 4);
    b += word(k + 4, 4);
    c += word(k + 8, 4);
    a -= c; a ^= rot(c, 4);  c += b;
    b -= a; b ^= rot(a, 6);  a += c;
    c -= b; c ^= rot(b, 8);  b += a;
    a -= c; a ^= rot(c, 16); c += b;
    b -= a; b ^= rot(a, 19); a += c;
    c -= b; c ^= rot(b, 4);  b += a;
    length -= 12;
    k += 12;
  }
  if (length == 0) return c;
  a += word(k, std::min<size_t>(length, 4));
  if (length > 4) b += word(k + 4, std::min<size_t>(length - 4, 4));
  if (length > 8) c += word(k + 8, length - 8);
  c ^= b; c -= rot(b, 14);
  a ^= c; a -= rot(c, 11);
  b ^= a; b -= rot(a, 25);
  c ^= b; c -= rot(b, 16);
  a ^= c; a -= rot(c, 4);
  b ^= a; b -= rot(a, 14);
  c ^= b; c -= rot(b, 24);
  return c;
}

// Little-endian unsigned integer of n <= 8 bytes.
uint64_t LE(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t q = 0; q < n; ++q) v |= static_cast<uint64_t>(p[q]) << (8 * q);
  return v;
}

// Empty when dataset `dset` of the open HDF5 file `f` (stored at `file`) can be opened safely:
// its layout is not virtual, or the global heap object holding its mappings is intact; else
// what is wrong.
std::string SafeToOpen(const std::string& file, hid_t f, const std::string& dset) {
  H fcpl(H5Fget_create_plist(f), H5Pclose);
  size_t sa = 0, ss = 0;
  hsize_t ub = 0;
  if (fcpl.id < 0 || H5Pget_sizes(fcpl.id, &sa, &ss) < 0 || H5Pget_userblock(fcpl.id, &ub) < 0 || sa == 0 ||
      sa > 8 || ss == 0 || ss > 8)
    return "the file's address sizes cannot be read";
  H5O_info_t info;
  if (H5Oget_info_by_name2(f, dset.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
    return "its object header cannot be read";
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "the file cannot be read";
  struct stat st;
  const uint64_t size = ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  std::vector<unsigned char> buf;
  // Bytes [addr, addr + n) of the file (addresses are relative to the user block's end).
  auto read = [&](uint64_t addr, uint64_t n) -> bool {
    if (addr > size || n > size || addr + ub > size - n) return false;
    buf.resize(n);
    return ::pread(fd, buf.data(), n, static_cast<off_t>(addr + ub)) == static_cast<ssize_t>(n);
  };
  const std::string why = [&]() -> std::string {
    // The object header's chunks (the first, then continuations), each checksummed: find the
    // layout message.
    std::vector<std::pair<uint64_t, uint64_t>> chunks;  // (address, length) of continuations
    uint64_t heap_addr = 0, heap_index = 0;
    bool found = false, virtual_layout = false;
    // Version 2 ("OHDR"; checksummed chunks, continuations "OCHK") or version 1 (no checksums;
    // 8-byte aligned messages with 8-byte headers).
    if (!read(info.addr, 16)) return "its object header is truncated";
    const bool v2 = std::memcmp(buf.data(), "OHDR", 4) == 0 && buf[4] == 2;
    if (!v2 && buf[0] != 1) return "its object header is of an unknown version";
    const unsigned flags = v2 ? buf[5] : 0;
    const uint64_t fixed = v2 ? 6 + ((flags & 0x20) ? 16 : 0) + ((flags & 0x10) ? 4 : 0) : 16;
    const size_t width = v2 ? size_t{1} << (flags & 3) : 0;
    if (!read(info.addr, fixed + width)) return "its object header is truncated";
    const uint64_t len0 = v2 ? LE(buf.data() + fixed, width) : LE(buf.data() + 8, 4);
    const size_t msg_hdr = v2 ? ((flags & 0x04) ? 6 : 4) : 8;
    // Walks the chunk in buf: its messages from `from` (to its checksum, which must match).
    auto walk = [&](uint64_t from) -> std::string {
      if (buf.size() < from + (v2 ? 4 : 0)) return "its object header is truncated";
      const size_t end = buf.size() - (v2 ? 4 : 0);
      if (v2 && Lookup3(buf.data(), end) != LE(buf.data() + end, 4)) return "its object header's checksum differs";
      for (size_t p = from; p + msg_hdr <= end;) {
        const unsigned type = v2 ? buf[p] : static_cast<unsigned>(LE(buf.data() + p, 2));
        const size_t n = LE(buf.data() + p + (v2 ? 1 : 2), 2);
        const size_t body = p + msg_hdr;
        if (body + n > end) return "an object header message runs past its chunk";
        if (type == 0x10 && n >= sa + ss)  // continuation
          chunks.push_back({LE(buf.data() + body, sa), LE(buf.data() + body + sa, ss)});
        if (type == 0x08) {  // layout: version 3 or 4, class (3: virtual)
          if (n < 2) return "its layout message is truncated";
          virtual_layout = buf[body] >= 3 && buf[body + 1] == 3;
          found = true;
          if (!virtual_layout) return "";
          if (buf[body] != 4 || n < 2 + sa + 4) return "its virtual layout message is malformed";
          heap_addr = LE(buf.data() + body + 2, sa);
          heap_index = LE(buf.data() + body + 2 + sa, 4);
          return "";
        }
        p = body + n;
      }
      return "";
    };
    if (!read(info.addr, fixed + width + len0 + (v2 ? 4 : 0))) return "its object header is truncated";
    if (std::string e = walk(fixed + width); !e.empty()) return e;
    for (size_t c = 0; c < chunks.size() && !found; ++c) {
      if (c >= 64) return "its object header has too many chunks";
      if (!read(chunks[c].first, chunks[c].second) ||
          (v2 && (buf.size() < 8 || std::memcmp(buf.data(), "OCHK", 4) != 0)))
        return "an object header continuation is not one";
      if (std::string e = walk(v2 ? 4 : 0); !e.empty()) return e;
    }
    if (!found) return "its object header has no layout message";
    if (!virtual_layout) return "";
    // The heap collection: header (signature, version 1, its size), then objects (index,
    // reference count, reserved, size, data padded to 8 bytes); index 0 is the free space.
    const uint64_t hdr = (8 + ss + 7) / 8 * 8, obj_hdr = (8 + ss + 7) / 8 * 8;
    if (!read(heap_addr, 8 + ss) || std::memcmp(buf.data(), "GCOL", 4) != 0 || buf[4] != 1)
      return "its mappings' global heap collection is not one";
    const uint64_t coll = LE(buf.data() + 8, ss);
    if (coll < hdr || coll > (uint64_t{1} << 32) || !read(heap_addr, coll))
      return "its mappings' global heap collection is truncated";
    for (uint64_t p = hdr; p + obj_hdr <= coll;) {
      const uint64_t idx = LE(buf.data() + p, 2), n = LE(buf.data() + p + 8, ss);
      const uint64_t need = idx == 0 ? n : obj_hdr + (n + 7) / 8 * 8;
      if (need < obj_hdr || need > coll - p) return "its mappings' global heap collection is damaged";
      if (idx == heap_index) {
        if (n < 5) return "its mappings' heap object is too short";
        const unsigned char* d = buf.data() + p + obj_hdr;
        if (Lookup3(d, n - 4) != LE(d + n - 4, 4)) return "its mappings' checksum differs (damaged)";
        return "";
      }
      if (idx == 0) break;  // the free space ends the objects
      p += need;
    }
    return "its mappings' heap object is missing";
  }();
  ::close(fd);
  return why;
}


// What a dataspace selects: a box (when the selection is exactly the box its bounds span), or
// `points` elements within `box`.
struct Selection {
  Region box;  // box.shape: the dataspace's extent
  uint64_t points = 0;
  bool is_box = false;
};

// The selection of `space`. A mapping's source space may select "all" without an extent (HDF5
// keeps no source extent; the first writer, before padded pieces, mapped every box piece from
// its whole dataset so): it is then the whole of `source`'s shape (the rank file's dataset,
// whose shape is checked there).
Selection SelectionOf(hid_t space, const Region* source = nullptr) {
  Selection s;
  const int n = H5Sget_simple_extent_ndims(space);
  if (n < 0 || n > kMaxRank) return s;
  if (H5Sget_select_type(space) == H5S_SEL_ALL && n == 0 && source) {
    s.box = WholeRegion(source->rank, source->shape);
    s.points = s.box.Count();
    s.is_box = true;
    return s;
  }
  hsize_t dims[kMaxRank], lo[kMaxRank], hi[kMaxRank];
  if (H5Sget_simple_extent_dims(space, dims, nullptr) < 0) return s;
  s.box.rank = n;
  for (int d = 0; d < n; ++d) s.box.shape[d] = dims[d];
  const hssize_t np = H5Sget_select_npoints(space);
  s.points = np > 0 ? static_cast<uint64_t>(np) : 0;
  if (np > 0 && H5Sget_select_bounds(space, lo, hi) >= 0) {
    for (int d = 0; d < n; ++d) {
      s.box.start[d] = lo[d];
      s.box.stop[d] = hi[d] + 1;
    }
    s.is_box = s.box.Count() == s.points;
  }
  return s;
}

std::string ShapeOf(const Region& r) {
  std::string s = "[";
  for (int d = 0; d < r.rank; ++d) s += (d ? ", " : "") + std::to_string(r.shape[d]);
  return s + "]";
}

std::string DescribeSelection(const Selection& s) {
  if (s.is_box) return DescribeRegion(s.box);
  if (s.points == 0) return "nothing";
  return std::to_string(s.points) + " elements within " + DescribeRegion(s.box);
}

// Whether two boxes have the same rank, start and stop (their extents aside: HDF5 keeps no
// source dataspace extent in a virtual dataset's mappings).
bool SameBox(const Region& a, const Region& b) {
  if (a.flat || b.flat || a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d)
    if (a.start[d] != b.start[d] || a.stop[d] != b.stop[d]) return false;
  return true;
}

// "[2:4, 0:8] from [0:2, 0:8] of '/tensors/x' in 'F'", for mapping messages.
std::string DescribeMapping(const Selection& to, const Selection& from, const std::string& file,
                            const std::string& dset) {
  return DescribeSelection(to) + " from " + DescribeSelection(from) + " of '" + dset + "' in '" +
         file + "'";
}

// HDF5's two-call string getters (H5Pget_virtual_filename / _dsetname).
std::string VirtualString(ssize_t (*get)(hid_t, size_t, char*, size_t), hid_t dcpl, size_t k) {
  const ssize_t n = get(dcpl, k, nullptr, 0);
  if (n < 0) return "?";
  std::string s(static_cast<size_t>(n) + 1, '\0');
  get(dcpl, k, s.data(), s.size());
  s.resize(static_cast<size_t>(n));
  return s;
}

const char* LayoutName(H5D_layout_t l) {
  switch (l) {
    case H5D_COMPACT: return "compact";
    case H5D_CONTIGUOUS: return "contiguous";
    case H5D_CHUNKED: return "chunked";
    case H5D_VIRTUAL: return "virtual";
    default: return "unknown-layout";
  }
}

}  // namespace

void DistCatalog::VerifyMasterDatasets(const std::vector<bool>& bad,
                                       std::vector<H5Store::Problem>* problems) const {
  std::vector<MasterDataset> want(records_.size());  // kinds only; mappings one tensor at a time
  for (size_t i = 0; i < records_.size(); ++i)
    want[i] = MasterDatasetOf(records_[i], pieces_[i], (flat_boxes_ ? FlatMappings::kBoxes : FlatMappings::kRuns), /*with_mappings=*/false);
  // The scalars' values as their pieces hold them (read through the rank files, before taking
  // the HDF5 lock: reads take it themselves, maybe on other threads).
  std::map<size_t, std::vector<unsigned char>> scalar;
  for (size_t i = 0; i < records_.size(); ++i) {
    if (want[i].kind != MasterDataset::kScalar || bad[i]) continue;
    std::vector<unsigned char> v(DTypeSize(records_[i].dtype));
    if (Read(i, WholeTensor(records_[i].shape), v.data(), CpuOptions{1}).ok()) scalar[i] = std::move(v);
  }
  const Result<std::string> resolved = ResolveSymlinks(path_);
  const std::string master_file = resolved.ok() ? *resolved : path_;
  const auto lock = LockH5();
  const hid_t f = master_->h5_file();
  auto problem = [&](const std::string& tensor, const std::string& what) {
    problems->push_back({tensor, -1,
                         DistError("vds-mismatch", Code::kCorrupt, path_, -1, "",
                                   "master " + what)});
  };
  // Link name under /tensors -> tensor (dense or lazy): every link must be an expected dataset.
  std::map<std::string, size_t> by_link;
  for (size_t i = 0; i < records_.size(); ++i) by_link[EscapeH5Name(records_[i].name)] = i;
  const bool have_group = H5Lexists(f, "/tensors", H5P_DEFAULT) > 0;
  for (size_t i = 0; i < records_.size(); ++i) {
    const TensorRecord& t = records_[i];
    if (want[i].kind == MasterDataset::kNone) continue;
    const MasterDataset w = MasterDatasetOf(t, pieces_[i], (flat_boxes_ ? FlatMappings::kBoxes : FlatMappings::kRuns));
    const std::string dset = "/tensors/" + EscapeH5Name(t.name);
    const std::string where = "tensor '" + t.name + "' " + dset + ": ";
    const std::string expected =
        w.kind == MasterDataset::kScalar
            ? "a scalar dataset holding the value"
            : "a virtual dataset of its " + std::to_string(pieces_[i].size()) + " pieces";
    if (!have_group || H5Lexists(f, dset.c_str(), H5P_DEFAULT) <= 0) {
      problem(t.name, where + "missing (the index's tensor needs " + expected + ")");
      continue;
    }
    H5L_info_t li;
    if (H5Lget_info(f, dset.c_str(), &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD) {
      problem(t.name, where + "is a soft or external link, not " + expected + " of the master");
      continue;
    }
    // Opening a dataset decodes its layout: a virtual one's mappings only once they are known
    // intact (VdsHeapIntact). A dataset of another layout is not virtual; that is named below.
    H5O_info_t oi;
    if (H5Oget_info_by_name2(f, dset.c_str(), &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0 || oi.type != H5O_TYPE_DATASET) {
      problem(t.name, where + "is not a dataset (the index's tensor needs " + expected + ")");
      continue;
    }
    if (const std::string why = SafeToOpen(master_file, f, dset); !why.empty()) {
      problem(t.name, where + "cannot be opened safely: " + why);
      continue;
    }
    H d(H5Dopen2(f, dset.c_str(), H5P_DEFAULT), H5Dclose);
    if (d.id < 0) {
      problem(t.name, where + "cannot be opened (the index's tensor needs " + expected + ")");
      continue;
    }
    // Attributes (docs/FORMAT.md 4.2), against the index.
    auto name = ReadStringAttr(d.id, "seedstore.name", where);
    if (!name.ok()) problem(t.name, name.status().message());
    else if (*name != t.name) problem(t.name, where + "seedstore.name is '" + *name + "'");
    auto dt = ReadStringAttr(d.id, "seedstore.dtype", where);
    if (!dt.ok()) problem(t.name, dt.status().message());
    else if (*dt != DTypeName(t.dtype))
      problem(t.name, where + "seedstore.dtype is '" + *dt + "', the index says '" + DTypeName(t.dtype) + "'");
    auto fp = ReadU64ArrayAttr(d.id, "seedstore.fingerprint", where);
    if (!fp.ok()) {
      problem(t.name, fp.status().message());
    } else if (fp->size() != 2 || !t.fingerprint || (*fp)[0] != t.fingerprint->lane0 ||
               (*fp)[1] != t.fingerprint->lane1) {
      std::string got;
      if (fp->size() == 2) got = FingerprintHex(Fingerprint{(*fp)[0], (*fp)[1]});
      else got = std::to_string(fp->size()) + " words";
      problem(t.name, where + "seedstore.fingerprint is " + got + ", the index says " +
                          (t.fingerprint ? FingerprintHex(*t.fingerprint) : std::string("none")));
    }
    // Shape and type.
    H space(H5Dget_space(d.id), H5Sclose);
    const Selection all = SelectionOf(space.id);
    const std::vector<uint64_t> dshape(all.box.shape, all.box.shape + all.box.rank);
    const bool shape_ok = space.id >= 0 && H5Sget_simple_extent_type(space.id) != H5S_NULL &&
                          dshape == t.shape;
    if (!shape_ok)
      problem(t.name, where + "its shape is " + ShapeOf(all.box) + ", the index says " +
                          ShapeOf(WholeTensor(t.shape)));
    H type(H5Dget_type(d.id), H5Tclose);
    const bool type_ok = type.id >= 0 && H5TypeStores(type.id, t.dtype);
    if (!type_ok) problem(t.name, where + "its HDF5 type does not store " + DTypeName(t.dtype));
    H dcpl(H5Dget_create_plist(d.id), H5Pclose);
    const H5D_layout_t layout = H5Pget_layout(dcpl.id);
    if (w.kind == MasterDataset::kScalar) {
      if (layout == H5D_VIRTUAL) {
        problem(t.name, where + "is a virtual dataset, not " + expected);
        continue;
      }
      const auto v = scalar.find(i);
      if (v == scalar.end() || !shape_ok || !type_ok) continue;  // nothing to compare it with
      std::vector<unsigned char> got(v->second.size());
      if (H5Dread(d.id, type.id, H5S_ALL, H5S_ALL, H5P_DEFAULT, got.data()) < 0)
        problem(t.name, where + "its value cannot be read");
      else if (got != v->second)
        problem(t.name, where + "its value differs from the one its piece holds (rank " +
                            std::to_string(pieces_[i][0].rank) + " file '" + BaseOf(rank_files_[pieces_[i][0].rank]) + "')");
      continue;
    }
    if (layout != H5D_VIRTUAL) {
      problem(t.name, where + "is a " + std::string(LayoutName(layout)) + " dataset, not " + expected);
      continue;
    }
    // The mappings, in order, against those the writer makes from the index's pieces.
    size_t n = 0;
    if (H5Pget_virtual_count(dcpl.id, &n) < 0) {
      problem(t.name, where + "its mappings cannot be read");
      continue;
    }
    if (n != w.mappings.size())
      problem(t.name, where + "has " + std::to_string(n) + " mappings, the index's pieces give " +
                          std::to_string(w.mappings.size()));
    size_t differ = 0;
    std::string first;
    for (size_t k = 0; k < std::min(n, w.mappings.size()); ++k) {
      const VdsMapping& m = w.mappings[k];
      H vs(H5Pget_virtual_vspace(dcpl.id, k), H5Sclose);
      H ss(H5Pget_virtual_srcspace(dcpl.id, k), H5Sclose);
      const Selection to = SelectionOf(vs.id), from = SelectionOf(ss.id, &m.from);
      const std::string file = VirtualString(H5Pget_virtual_filename, dcpl.id, k);
      const std::string src = VirtualString(H5Pget_virtual_dsetname, dcpl.id, k);
      // Compared (and shown) as the patterns HDF5 keeps: a lone `%b` must not pass for `%%b`.
      const std::string want_file = VdsSourceName(BaseOf(rank_files_[m.rank])), want_src = VdsSourceName(dset);
      if (vs.id >= 0 && ss.id >= 0 && to.is_box && from.is_box && SameBox(to.box, m.to) &&
          SameBox(from.box, m.from) && file == want_file && src == want_src)
        continue;
      if (differ++ == 0) {
        const Piece& p = pieces_[i][m.piece];
        first = "mapping " + std::to_string(k) + " maps " + DescribeMapping(to, from, file, src) +
                "; the index says " +
                DescribeMapping({m.to, m.to.Count(), true}, {m.from, m.from.Count(), true}, want_file, want_src) +
                " (piece " + std::to_string(m.piece) + ", " + DescribeRegion(p.region) + " of rank " +
                std::to_string(p.rank) +
                (SameRegion(p.region, p.stored) ? "" : " stored as " + DescribeRegion(p.stored)) + ")";
      }
    }
    if (differ)
      problem(t.name, where + first +
                          (differ > 1 ? " (" + std::to_string(differ - 1) + " more mappings differ)" : ""));
  }
  // Every dataset under /tensors must be one of those above.
  if (!have_group) return;
  std::vector<std::string> links;
  H g(H5Gopen2(f, "/tensors", H5P_DEFAULT), H5Gclose);
  if (g.id < 0) {
    problem("", "/tensors: is not a group");
    return;
  }
  hsize_t at = 0;
  H5Literate(
      g.id, H5_INDEX_NAME, H5_ITER_INC, &at,
      [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
        static_cast<std::vector<std::string>*>(out)->push_back(name);
        return 0;
      },
      &links);
  for (const std::string& l : links) {
    const auto it = by_link.find(l);
    if (it != by_link.end() && want[it->second].kind != MasterDataset::kNone) continue;
    if (it == by_link.end()) {
      problem("", "/tensors/" + l + ": no dense tensor of the index has this name");
    } else {
      const TensorRecord& t = records_[it->second];
      problem(t.name, "tensor '" + t.name + "' /tensors/" + l + ": exists, but the master holds no dataset for this tensor: " +
                          want[it->second].why_none);
    }
  }
}

namespace {
// Region `local` of tensor k of rank file `s` (a file from before piece records, whose
// fingerprints are in its own frame) read and hashed as region `global` of tensor `t`.
Result<Fingerprint> ReadAndFingerprint(const H5Store& s, int k, const Region& local, const TensorRecord& t,
                                       const Region& global, CpuOptions o) {
  std::vector<unsigned char> tmp(local.Count() * DTypeSize(t.dtype));
  SEEDSTORE_RETURN_IF_ERROR(s.Read(k, local, tmp.data(), o));
  return FingerprintOf(t, global, tmp.data(), o);
}

// The part of `box` (global indices) that box piece `p` serves, as a region of its rank
// file's tensor (the stored box's local indices); lo/hi get the part in global indices.
// False when the box does not meet the piece.
bool PiecePart(const DistCatalog::Piece& p, const Region& box, Region* local, uint64_t* lo, uint64_t* hi) {
  const Region& g = p.region;
  std::vector<uint64_t> ls(box.rank), lp(box.rank);
  for (int d = 0; d < box.rank; ++d) {
    lo[d] = std::max(box.start[d], g.start[d]);
    hi[d] = std::min(box.stop[d], g.stop[d]);
    if (hi[d] <= lo[d]) return false;
    ls[d] = lo[d] - p.stored.start[d];
    lp[d] = hi[d] - p.stored.start[d];
  }
  *local = BoxRegion(LocalShape(p.stored), ls, lp);
  return true;
}
}  // namespace

Status DistCatalog::ReadBox(size_t i, const Region& box, unsigned char* out, CpuOptions o) const {
  const TensorRecord& t = records_[i];
  const size_t es = DTypeSize(t.dtype);
  const int rank = box.rank;
  if (box.Count() == 0) return Status::Ok();
  for (const Piece& p : pieces_[i]) {
    const Region& g = p.region;
    std::vector<unsigned char> tmp;
    auto read_local = [&](const Region& local, void* dst) -> Status {
      SEEDSTORE_ASSIGN_OR_RETURN(std::shared_ptr<const H5Store> s, RankStore(p.rank, t.name));
      const int k = s->Find(t.name);
      Status st = s->Read(k, local, dst, o);
      if (!st.ok())
        return DistError("rank-file-corrupt", st.code(), path_, p.rank, rank_files_[p.rank],
                         st.message());
      return Status::Ok();
    };
    if (!g.flat) {
      uint64_t lo[kMaxRank], hi[kMaxRank];
      Region local;
      if (!PiecePart(p, box, &local, lo, hi)) continue;
      uint64_t ext[kMaxRank], dext[kMaxRank], off[kMaxRank];
      bool whole = true;
      for (int d = 0; d < rank; ++d) {
        ext[d] = hi[d] - lo[d];
        dext[d] = box.stop[d] - box.start[d];
        off[d] = lo[d] - box.start[d];
        whole &= ext[d] == dext[d];
      }
      if (whole) {
        SEEDSTORE_RETURN_IF_ERROR(read_local(local, out));
        continue;
      }
      tmp.resize(local.Count() * es);
      SEEDSTORE_RETURN_IF_ERROR(read_local(local, tmp.data()));
      CopyBox(tmp.data(), ext, nullptr, out, dext, off, ext, rank, es);
      continue;
    }
    // Flat piece [b, e): read the span of it the box touches once, then copy run by run.
    const uint64_t L = box.RunLength(), runs = box.Count() / L;
    const uint64_t first = box.RunBase(0), last = box.RunBase(runs - 1) + L;
    const uint64_t s0 = std::max(first, g.begin), s1 = std::min(last, g.end);
    if (s1 <= s0) continue;
    tmp.resize((s1 - s0) * es);
    SEEDSTORE_RETURN_IF_ERROR(
        read_local(BoxRegion({g.end - g.begin}, {s0 - g.begin}, {s1 - g.begin}), tmp.data()));
    for (uint64_t q = 0; q < runs; ++q) {
      const uint64_t a = box.RunBase(q), b = a + L;
      const uint64_t x0 = std::max(a, s0), x1 = std::min(b, s1);
      if (x1 <= x0) continue;
      std::memcpy(out + (q * L + (x0 - a)) * es, tmp.data() + (x0 - s0) * es, (x1 - x0) * es);
    }
  }
  return Status::Ok();
}

Result<Fingerprint> DistCatalog::FingerprintRegion(size_t i, const Region& r, CpuOptions o) const {
  const TensorRecord& t = records_.at(i);
  if (t.lazy) return t.lazy->FingerprintRegion(r, o);
  SEEDSTORE_RETURN_IF_ERROR(CheckRegionIn(t, r).WithContext("distributed save '" + path_ + "'"));
  const size_t es = DTypeSize(t.dtype);
  Fingerprint f;
  for (const Region& box : r.flat ? FlatRangeToBoxes(t.shape, r.begin, r.end) : std::vector<Region>{r}) {
    if (box.Count() == 0) continue;
    for (const Piece& p : pieces_[i]) {
      if (!p.region.flat) {
        // The rank file hashes its part chunk by chunk, in the global frame (its piece record).
        uint64_t lo[kMaxRank], hi[kMaxRank];
        Region local;
        if (!PiecePart(p, box, &local, lo, hi)) continue;
        SEEDSTORE_ASSIGN_OR_RETURN(std::shared_ptr<const H5Store> s, RankStore(p.rank, t.name));
        const int k = s->Find(t.name);
        auto pf = s->tensors()[k].piece
                      ? s->FingerprintRegion(k, local, o)
                      : ReadAndFingerprint(*s, k, local, t, BoxRegion(t.shape, {lo, lo + box.rank}, {hi, hi + box.rank}), o);
        if (!pf.ok())
          return DistError("rank-file-corrupt", pf.status().code(), path_, p.rank, rank_files_[p.rank],
                           pf.status().message());
        f.Add(*pf);
        continue;
      }
      // A flat piece [b, e): its rank file's tensor is 1-D, element k at global flat index
      // b + k. A contiguous box's part is one range of it, hashed there chunk by chunk; other
      // boxes read the span they touch once and hash it run by run at the global indices.
      const uint64_t L = box.RunLength(), runs = box.Count() / L, b = p.region.begin;
      const uint64_t s0 = std::max(box.RunBase(0), b), s1 = std::min(box.RunBase(runs - 1) + L, p.region.end);
      if (s1 <= s0) continue;
      SEEDSTORE_ASSIGN_OR_RETURN(std::shared_ptr<const H5Store> s, RankStore(p.rank, t.name));
      const int k = s->Find(t.name);
      const Region local = BoxRegion({p.region.end - b}, {s0 - b}, {s1 - b});
      auto corrupt = [&](const Status& st) {
        return DistError("rank-file-corrupt", st.code(), path_, p.rank, rank_files_[p.rank], st.message());
      };
      if (IsContiguous(box)) {
        auto pf = s->tensors()[k].piece ? s->FingerprintRegion(k, local, o)
                                        : ReadAndFingerprint(*s, k, local, t, FlatRegion(t.shape, s0, s1), o);
        if (!pf.ok()) return corrupt(pf.status());
        f.Add(*pf);
        continue;
      }
      std::vector<unsigned char> tmp(local.Count() * es);
      if (Status st = s->Read(k, local, tmp.data(), o); !st.ok()) return corrupt(st);
      for (uint64_t q = 0; q < runs; ++q) {
        const uint64_t x0 = std::max(box.RunBase(q), s0), x1 = std::min(box.RunBase(q) + L, s1);
        if (x0 < x1) f.Add(FingerprintOf(t, FlatRegion(t.shape, x0, x1), tmp.data() + (x0 - s0) * es, CpuOptions{1}));
      }
    }
  }
  return f;
}

Status DistCatalog::Read(size_t i, const Region& r, void* out, CpuOptions o) const {
  const TensorRecord& t = records_.at(i);
  if (t.lazy) return t.lazy->Materialize(r, out, o);
  return ReadByBoxes(t, r, out, [&](const Region& b, void* dst) {
    return ReadBox(i, b, static_cast<unsigned char*>(dst), o);
  });
}

// ---- Reshard ----------------------------------------------------------------------------

bool ReshardReport::ok() const {
  for (const auto& r : rows)
    if (!r.ok()) return false;
  return true;
}

std::string ReshardReport::Table() const {
  std::string s;
  char line[512];
  std::snprintf(line, sizeof line, "%-40s %-5s %6s %12s %-8s %-32s %s\n", "tensor", "kind",
                "pieces", "bytes", "source", "fingerprint (source)", "proof");
  s += line;
  size_t bad = 0;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof line, "%s %-5s %6zu %12llu %-8s %-32s %s\n", PadRight(r.name, 40).c_str(),
                  r.lazy ? "lazy" : "dense", r.pieces, static_cast<unsigned long long>(r.bytes),
                  r.source_ref.c_str(), FingerprintHex(r.source).c_str(),
                  r.ok() ? "ok" : ("MISMATCH (output " + FingerprintHex(r.output) + ")").c_str());
    s += line;
    bad += !r.ok();
  }
  std::snprintf(line, sizeof line,
                "%zu tensors: %zu proven equal to the source, %zu mismatch(es); %llu bytes "
                "written in %.3f s (chunks: %llu copied as stored, %llu encoded), proof %.3f s "
                "(%s)\n",
                rows.size(), rows.size() - bad, bad, static_cast<unsigned long long>(bytes),
                write_s, static_cast<unsigned long long>(chunks_copied),
                static_cast<unsigned long long>(chunks_encoded), prove_s,
                full_proof ? "every chunk decoded" : "stored chunks vs chunk-info");
  s += line;
  return s;
}

Status ReshardReport::ToStatus() const {
  std::string names;
  size_t n = 0;
  for (const auto& r : rows)
    if (!r.ok() && n++ < 3) names += (names.empty() ? "'" : ", '") + r.name + "'";
  if (n == 0) return Status::Ok();
  return Mismatch("reshard: " + std::to_string(n) + " tensor(s) of '" + path +
                  "' differ from the source: " + names);
}

Result<ReshardReport> Reshard(Exchange& comm, const Catalog& src, const Layout& layout,
                              const std::string& requested, const DistSaveOptions& options) {
  // Through a symbolic link: the save (master, rank files, lock) goes where it points.
  auto resolved = ResolveSymlinks(requested);
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm, resolved.status(), "save: path"));
  const std::string& path = *resolved;
  // A save that replaces a file keeps its permissions: its new rank files get them too (the
  // master keeps them as any replaced file does).
  DistSaveOptions o = options;
  if (struct stat old; o.write.file_mode < 0 && ::stat(path.c_str(), &old) == 0 && S_ISREG(old.st_mode))
    o.write.file_mode = static_cast<int>(old.st_mode & 07777);
  const double t0 = Now();
  const int me = comm.rank(), np = comm.size();
  const int world = o.consolidate ? 1 : layout.world_size();
  const auto& ts = src.tensors();
  const size_t n = ts.size();
  ReshardReport rep;
  rep.path = path;
  rep.world = world;
  rep.writers = np;
  rep.consolidated = o.consolidate;
  rep.full_proof = o.full_proof;
  for (const TensorRecord& t : ts) SEEDSTORE_RETURN_IF_ERROR(CheckWholeTensor(src, t, "reshard"));
  // The names next to the master -- its lock, the commit protocol's files and, unless
  // consolidated, its rank files -- must fit NAME_MAX: found out at the last rename, all the
  // work would be lost.
  const std::string longest =
      o.consolidate ? ProtocolName(path, 0xffffffffu, "commit") : RankFileName(path, 0xffffffffu, world - 1);
  if (BaseOf(longest).size() > NAME_MAX)
    return InvalidArgument("save: '" + requested + "': the name is too long for its " +
                           (o.consolidate ? "commit files (as '" : "rank files (as '") + BaseOf(longest) +
                           "', " + std::to_string(BaseOf(longest).size()) + " bytes; a file name has at most " +
                           std::to_string(NAME_MAX) + "): give a shorter name");
  uint64_t seed;
  Generator gen;
  RootSeedOf(src, &seed, &gen);

  WriterLock lock;
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm, me == 0 ? lock.Acquire(path) : Status::Ok(), "lock"));
  TestFaultPoint(me, "lock");

  Plan plan;
  if (!o.consolidate) {
    auto p = MakePlan(src, layout);
    Status ps = p.status();
    if (ps.ok() && !(o.max_padding >= 0))
      ps = InvalidArgument("reshard: max padding must be >= 0, not " + std::to_string(o.max_padding));
    if (ps.ok()) ps = PadPieces(src, o.write, o.max_padding, &*p);
    SEEDSTORE_RETURN_IF_ERROR(Agree(comm, ps, "plan"));
    plan = std::move(*p);
  } else {
    plan.shards.resize(n);
    plan.stored.resize(n);
  }
  NumberPieces(&plan);
  TestFaultPoint(me, "plan");
  // Save id: rank 0 draws it, the sum spreads it.
  uint64_t id64 = 0;
  if (me == 0) id64 = std::random_device{}() ^ static_cast<uint32_t>(::getpid() * 2654435761u);
  SEEDSTORE_RETURN_IF_ERROR(comm.AllReduceSum(&id64, 1, "save id"));
  const uint32_t id = static_cast<uint32_t>(id64);

  // Source fingerprints: recorded, or computed piece by piece by the owning process.
  std::vector<uint64_t> sfp(2 * n, 0);
  Status st;
  for (size_t i = 0; i < n && st.ok(); ++i) {
    if (ts[i].fingerprint) {
      if (me == 0) {
        sfp[2 * i] = ts[i].fingerprint->lane0;
        sfp[2 * i + 1] = ts[i].fingerprint->lane1;
      }
      continue;
    }
    std::vector<Region> mine;
    if (ts[i].lazy || o.consolidate) {
      if (me == static_cast<int>(i % np)) mine.push_back(WholeTensor(ts[i].shape));
    } else {
      for (const Shard& s : plan.shards[i])
        if (WriterOf(s.replicas[0], np, world) == me) mine.push_back(s.region);
    }
    for (const Region& r : mine) {
      auto f = src.FingerprintRegion(i, r, o.cpu);
      if (!f.ok()) {
        st = f.status();
        break;
      }
      sfp[2 * i] += f->lane0;
      sfp[2 * i + 1] += f->lane1;
    }
  }
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm, st, "source fingerprints"));
  SEEDSTORE_RETURN_IF_ERROR(comm.AllReduceSum(sfp.data(), sfp.size(), "source fingerprints"));
  TestFaultPoint(me, "source-fingerprints");
  std::vector<Fingerprint> src_fp(n);
  for (size_t i = 0; i < n; ++i) src_fp[i] = Fingerprint{sfp[2 * i], sfp[2 * i + 1]};

  // Write. Until the commit point (CommitStaged) the save already at `path` is untouched;
  // the files of this save are removed on failure only while they can never be committed
  // (docs/FORMAT.md 10, "Commit protocol").
  uint64_t bytes = 0;
  std::vector<uint64_t> counts(kCounts * n, 0);  // per tensor: chunks copied, encoded; bytes stored
  std::vector<uint64_t> piece_fps;               // per piece: lane0, lane1 (distributed saves)
  const std::string staged = ProtocolName(path, id, "new"), gate = ProtocolName(path, id, "commit");
  const std::vector<int> mine = o.consolidate ? std::vector<int>{} : RanksWrittenBy(me, np, layout.world_size());
  // Rank 0 knows when its commit happens: until then a signal removes its files (after that
  // they may be the save's). The others do not, so theirs stay on a signal, as on SIGKILL, for
  // the next save to remove.
  signal_cleanup::Scope registered;
  if (me == 0) {
    for (int r : mine) registered.Add(RankFileName(path, id, r));
    registered.Add(staged);
    registered.Add(gate);
  }
  bool committed = false;  // rank 0: it renamed the gate over `path`; the others: they learned so
  auto drop_mine = [&] {
    for (int r : mine) ::unlink(RankFileName(path, id, r).c_str());
    if (me == 0) {
      ::unlink(gate.c_str());
      ::unlink(staged.c_str());
    }
  };
  // Every failure after the save id is drawn ends here. A rank other than 0 that does not know
  // the outcome vetoes the commit first (VetoCommit), which makes the outcome final and tells
  // it; it removes its new files only when the save was not committed.
  auto give_up = [&](const Status& why) -> Result<ReshardReport> {
    if (me != 0 && !committed) committed = VetoCommit(path, id);
    if (!committed) {
      drop_mine();
      return why;
    }
    std::fprintf(stderr,
                 "seedstore: %s\nseedstore: rank %d: the save was committed before that: '%s' "
                 "holds the new save, proven before its commit\n",
                 why.message().c_str(), me, path.c_str());
    rep.committed = true;
    return rep;
  };
  if (o.consolidate) {
    if (me == 0) {
      st = [&]() -> Status {
        SEEDSTORE_ASSIGN_OR_RETURN(auto w, StoreWriter::Create(staged, seed, gen, o.write));
        // Dense tensors go through AddPiece for every kind of source: chunks are copied as
        // stored only after their checksums verify, so a corrupt source fails here.
        for (size_t i = 0; i < n; ++i) {
          if (ts[i].lazy) {
            SEEDSTORE_RETURN_IF_ERROR(w->AddLazy(ts[i].lazy->spec, &src_fp[i], true, o.cpu));
          } else {
            ChunkMatcher matcher(src, i, o.write);
            const Region whole = WholeTensor(ts[i].shape);
            SEEDSTORE_ASSIGN_OR_RETURN(DenseChunking chunking, matcher.For(whole));
            SEEDSTORE_RETURN_IF_ERROR(AddPiece(*w, src, i, whole, std::move(chunking),
                                               /*as_piece=*/false, nullptr, &counts[kCounts * i]));
            bytes += ts[i].NumBytes();
          }
        }
        return w->Commit();
      }();
    }
  } else {
    // This process's rank files (a contiguous block of ranks, so that its pieces of a flat
    // tensor are neighbours), in groups written at once (WriteRankFiles), several groups at a
    // time: their chunk reads, hashing and fsyncs overlap (HDF5 calls themselves take turns
    // under the store's lock).
    const int threads = ThreadCount(o.cpu.threads, mine.size());
    const size_t groups = std::min(mine.size(), std::max<size_t>(threads, (mine.size() + kMaxOpenRankFiles - 1) /
                                                                              kMaxOpenRankFiles));
    std::vector<uint64_t> file_bytes(groups, 0);
    std::vector<std::vector<uint64_t>> file_counts(groups, std::vector<uint64_t>(kCounts * n, 0));
    // Each piece's recorded fingerprint, from the process that wrote it (zero elsewhere; the
    // groups write disjoint pieces), all-reduced for the master's index.
    piece_fps.assign(2 * plan.first_piece.back(), 0);
    st = ParallelFor(groups, threads, false, [&](uint64_t k, int) -> Status {
      std::vector<int> ranks(mine.begin() + k * mine.size() / groups, mine.begin() + (k + 1) * mine.size() / groups);
      std::vector<std::string> files;
      for (int r : ranks) files.push_back(RankFileName(path, id, r));
      return WriteRankFiles(src, plan, ranks, files, o, &file_bytes[k], file_counts[k], piece_fps);
    });
    for (size_t k = 0; k < groups; ++k) {
      bytes += file_bytes[k];
      for (size_t c = 0; c < counts.size(); ++c) counts[c] += file_counts[k][c];
    }
    SimulateFault(o.simulate, o.simulate_rank, me, "write rank files");
    TestFaultPoint(me, "rank-files");
    Status a = Agree(comm, st, "write rank files");
    // The index records each tensor's chunks and bytes over all its pieces (inspect shows
    // them without opening a rank file).
    if (a.ok()) a = comm.AllReduceSum(counts.data(), counts.size(), "chunk counts");
    if (a.ok()) a = comm.AllReduceSum(piece_fps.data(), piece_fps.size(), "piece fingerprints");
    if (!a.ok()) return give_up(a);
    if (me == 0) {
      st = [&]() -> Status {
        // One temporary, one rename: the index and virtual datasets are added to the
        // writer's closed temporary, and it is sealed, before it is made durable and renamed
        // to the staged name.
        WriteOptions mo = o.write;
        mo.user_block = kSealBytes;
        SEEDSTORE_ASSIGN_OR_RETURN(auto w, StoreWriter::Create(staged, seed, gen, mo));
        for (size_t i = 0; i < n; ++i)
          if (ts[i].lazy)
            SEEDSTORE_RETURN_IF_ERROR(w->AddLazy(ts[i].lazy->spec, &src_fp[i], true, o.cpu));
        return w->Commit([&](const std::string& temp) {
          SEEDSTORE_RETURN_IF_ERROR(
              AddDistributedObjects(temp, src, plan, layout, id, path, src_fp, counts, piece_fps));
          return SealMaster(temp);
        });
      }();
    }
  }
  // Staged: complete, sealed (a master) and durable. The gate is its second name.
  if (me == 0) {
    if (st.ok() && ::link(staged.c_str(), gate.c_str()) != 0)
      st = IoError("save: cannot link '" + staged + "' as '" + gate + "': " + std::strerror(errno));
  }
  TestFaultPoint(me, "master");
  if (Status a = Agree(comm, st, "write master"); !a.ok()) return give_up(a);
  if (o.consolidate)
    if (Status a = comm.AllReduceSum(counts.data(), counts.size(), "chunk counts"); !a.ok()) return give_up(a);
  if (Status a = comm.AllReduceSum(&bytes, 1, "bytes"); !a.ok()) return give_up(a);
  rep.bytes = bytes;
  const double t1 = Now();
  rep.write_s = t1 - t0;

  // Prove: read back what was written, fingerprint each distinct piece once (its writer does),
  // sum over processes.
  std::vector<uint64_t> ofp(2 * n, 0);
  std::unique_ptr<Catalog> out;
  if (o.consolidate) {
    auto s = H5Store::Open(staged);
    st = s.status();
    if (s.ok()) out = std::move(*s);
  } else {
    auto s = DistCatalog::Open(staged);
    st = s.status();
    if (s.ok()) out = std::move(*s);
  }
  if (st.ok() && out->tensors().size() != n) st = Corrupt("reshard: output has another tensor count");
  // Per dense tensor of a distributed save: whether every piece stores whole cells of one
  // chunk grid (then the stored-chunks proof goes by cells: DistCatalog::ProveCells). Each
  // process looks at the pieces it wrote (PieceGrid; the index lists them in plan order):
  // first the writer of piece 0 tells its chunk shape, then every process counts its pieces
  // that store another grid or none.
  const size_t gw = 1 + kMaxRank;
  std::vector<uint64_t> ref(n * gw, 0), off(n, 0);
  std::vector<std::vector<std::vector<uint64_t>>> mine_grid(n);
  const auto* dout = dynamic_cast<const DistCatalog*>(out.get());
  const bool try_cells = dout && !o.full_proof;
  for (size_t i = 0; i < n && st.ok() && try_cells; ++i) {
    mine_grid[i].resize(plan.shards[i].size());
    for (size_t k = 0; k < plan.shards[i].size() && st.ok(); ++k) {
      if (WriterOf(plan.shards[i][k].replicas[0], np, world) != me) continue;
      auto c = dout->PieceGrid(i, k);
      st = c.status();
      if (!c.ok()) break;
      mine_grid[i][k] = *c;
      if (k == 0) {
        ref[i * gw] = c->empty();
        for (size_t e = 0; e < c->size(); ++e) ref[i * gw + 1 + e] = (*c)[e];
      }
    }
  }
  if (Status e = Agree(comm, st, "prove: chunk grids"); !e.ok()) return give_up(e);
  if (Status e = comm.AllReduceSum(ref.data(), ref.size(), "prove: chunk grids"); !e.ok()) return give_up(e);
  for (size_t i = 0; i < n; ++i) {
    if (!try_cells || plan.shards[i].empty() || ref[i * gw] != 0) {
      off[i] = 1;
      continue;
    }
    const std::vector<uint64_t> c0(ref.begin() + i * gw + 1, ref.begin() + i * gw + 1 + ts[i].shape.size());
    for (size_t k = 0; k < plan.shards[i].size(); ++k)
      if (WriterOf(plan.shards[i][k].replicas[0], np, world) == me && mine_grid[i][k] != c0) ++off[i];
  }
  if (Status e = comm.AllReduceSum(off.data(), off.size(), "prove: chunk grids"); !e.ok()) return give_up(e);
  for (size_t i = 0; i < n && st.ok(); ++i) {
    const TensorRecord& t = out->tensors()[i];
    if (t.name != ts[i].name || t.shape != ts[i].shape || t.dtype != ts[i].dtype) {
      st = Corrupt("reshard: output tensor " + std::to_string(i) + " is '" + t.name +
                   "', not the source's '" + ts[i].name + "' with its shape and dtype");
      break;
    }
    std::vector<Region> mine;
    if (t.lazy) {
      // No data moved: the record's fingerprint stands for it, checked against the spec
      // (same spec, same resolved key).
      if (me == 0) {
        const bool same = ts[i].lazy && t.lazy->key == ts[i].lazy->key &&
                          TensorSpecToJson(t.lazy->spec) == TensorSpecToJson(ts[i].lazy->spec);
        Fingerprint f = t.fingerprint.value_or(Fingerprint{});
        if (!same) f.lane0 ^= 1;  // forces a mismatch
        ofp[2 * i] = f.lane0;
        ofp[2 * i + 1] = f.lane1;
      }
      continue;
    }
    if (o.consolidate) {
      if (me == static_cast<int>(i % np)) mine.push_back(WholeTensor(t.shape));
    } else {
      for (const Shard& s : plan.shards[i])
        if (WriterOf(s.replicas[0], np, world) == me) mine.push_back(s.region);
    }
    for (const Region& r : mine) {
      auto f = ProvePiece(*out, i, r, o.cpu, o.full_proof, off[i] == 0);
      if (!f.ok()) {
        st = f.status();
        break;
      }
      ofp[2 * i] += f->lane0;
      ofp[2 * i + 1] += f->lane1;
    }
  }
  if (Status e = Agree(comm, st, "prove"); !e.ok()) return give_up(e);
  if (Status e = comm.AllReduceSum(ofp.data(), ofp.size(), "prove"); !e.ok()) return give_up(e);
  for (size_t i = 0; i < n; ++i) {
    ReshardRow row;
    row.name = ts[i].name;
    row.lazy = ts[i].lazy.has_value();
    if (!row.lazy) {
      row.pieces = o.consolidate ? 1 : plan.shards[i].size();
      row.bytes = ts[i].NumBytes();
    }
    row.source_ref = ts[i].fingerprint ? "recorded" : "computed";
    row.chunks_copied = counts[kCounts * i];
    row.chunks_encoded = counts[kCounts * i + 1];
    rep.chunks_copied += row.chunks_copied;
    rep.chunks_encoded += row.chunks_encoded;
    row.source = src_fp[i];
    row.output = Fingerprint{ofp[2 * i], ofp[2 * i + 1]};
    rep.rows.push_back(std::move(row));
  }
  TestFaultPoint(me, "prove");
  rep.prove_s = Now() - t1;
  // The commit point: only a proven save is committed, so that exit 0 means proven and any
  // failure before it leaves `path` as it was.
  const bool proven = rep.ok();
  TestFaultPoint(me, "before-rename");
  if (me == 0 && proven) {
    st = CommitStaged(path, id, &registered, &committed);
    // Durable: the replaced save's files, and what interrupted saves left, go.
    if (committed) RemoveOtherPieces(path, id);
  }
  if (me != 0) TestFaultPoint(me, "after-rename");
  uint64_t outcome = committed ? 1 : 0;
  if (Status a = comm.AllReduceSum(&outcome, 1, "commit"); !a.ok()) return give_up(a);
  if (outcome == 0) {  // not proven, or rank 0 could not commit: nobody will
    drop_mine();
    if (!st.ok()) return st;
    if (!proven) return rep;  // the rows name the tensors that differ (ToStatus)
    return IoError("save: '" + path + "' not replaced: rank 0 could not commit the save (see its message)");
  }
  committed = true;
  rep.committed = true;
  TestFaultPoint(me, "done");
  if (Status a = comm.Barrier("reshard done"); !a.ok()) return give_up(a);
  // Every rank knows the outcome, so none will look at the staged name again.
  if (me == 0) ::unlink(staged.c_str());
  rep.total_s = Now() - t0;
  return rep;
}

}  // namespace seedstore
