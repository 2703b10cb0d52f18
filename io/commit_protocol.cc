#include "io/commit_protocol.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "io/dist_catalog.h"
#include "io/path.h"
#include "io/rank_files.h"

namespace seedstore {

std::string ProtocolName(const std::string& path, uint32_t id, const char* kind) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ".%08x.%s", id, kind);
  return path + buf;
}

namespace {

// `rest`, a name after "<path>.": "<8 hex>.<kind>" with kind new, commit or veto; or a staged
// file's temporary, "<8 hex>.new.tmp-..." (kind "new.tmp").
bool ParseProtocolName(const std::string& rest, uint32_t* id, std::string* kind) {
  if (rest.size() < 10 || rest[8] != '.' ||
      rest.substr(0, 8).find_first_not_of("0123456789abcdef") != std::string::npos)
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

bool SameFile(const std::string& a, const std::string& b) {
  struct stat x, y;
  return ::stat(a.c_str(), &x) == 0 && ::stat(b.c_str(), &y) == 0 && x.st_ino == y.st_ino &&
         x.st_dev == y.st_dev;
}

}  // namespace

void RemoveOtherPieces(const std::string& path, int64_t keep) {
  const std::string dir = DirPrefix(path), prefix = BaseName(path) + ".";
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
    if (!ParseRankFileName(dir + name.substr(0, temp == std::string::npos ? temp : temp + 3), &save,
                           &id, &rank) ||
        BaseName(save) != BaseName(path))
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
      if (name == BaseName(path) || name.compare(0, prefix.size(), prefix) == 0 ||
          ParseRankFileName(full, &save, &id, &rank))
        continue;  // this save, its pieces, temporaries and lock; any rank file
      if (IsDistributedSave(full)) masters.push_back(full);
    }
    ::closedir(d);
    for (const std::string& m : masters) {
      auto c = DistCatalog::Open(m);
      if (!c.ok()) return;  // which files it names is unknown: keep them all (space, not data)
      for (const std::string& f : (*c)->rank_files()) named_elsewhere.insert(BaseName(f));
    }
  }
  for (const std::string& p : pieces)
    if (!named_elsewhere.count(BaseName(p))) ::unlink(p.c_str());
  for (const std::string& p : protocol) ::unlink(p.c_str());
  for (const std::string& p : with_temps) AtomicFile::RemoveStaleTemporaries(p);
}

Status SyncPath(const std::string& path, bool dir) {
  const std::string what =
      std::string(dir ? "folder '" : "file '") + (path.empty() ? std::string(".") : path) + "'";
  const int fd =
      ::open(path.empty() ? "." : path.c_str(), O_RDONLY | O_CLOEXEC | (dir ? O_DIRECTORY : 0));
  if (fd < 0) return IoError("fsync of " + what + ": cannot open it: " + std::strerror(errno));
  if (::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    return IoError("fsync of " + what + " failed: " + std::strerror(e));
  }
  ::close(fd);
  return Status::Ok();
}

// Rank 0's commit point: unless a rank has vetoed, renames the gate over `path` (inside a
// signal_cleanup bracket, so that a signal cannot remove the staged file between the rename
// and releasing `registered`), then makes the rename durable (fsync of the folder; the staged
// file is durable already). *committed: the rename happened; *durable: whether the fsync
// succeeded.
Status CommitStaged(const std::string& path, uint32_t id, signal_cleanup::Scope* registered,
                    bool* committed, Status* durable) {
  const std::string gate = ProtocolName(path, id, "commit"), veto = ProtocolName(path, id, "veto");
  if (!signal_cleanup::BeginChange())
    return IoError("save: '" + path + "' not replaced: the process is ending on a signal");
  struct stat vs;
  if (::stat(veto.c_str(), &vs) == 0) {
    signal_cleanup::EndChange();
    return IoError("save: '" + path +
                   "' not replaced: another rank gave up (see its message) and vetoed the commit");
  }
  if (::rename(gate.c_str(), path.c_str()) != 0) {
    const int e = errno;
    signal_cleanup::EndChange();
    if (e == ENOENT)
      return IoError(
          "save: '" + path +
          "' not replaced: another rank gave up (see its message) and vetoed the commit");
    return IoError("save: rename '" + gate + "' -> '" + path + "' failed: " + std::strerror(e));
  }
  *committed = true;
  registered->Release();
  signal_cleanup::EndChange();
  TestFaultPoint(0, "after-rename");
  const std::string dir = DirToOpen(path);
  *durable = TestFaultPoint(0, "sync-commit")
                 ? IoError("fsync of folder '" + dir + "' failed: " + std::strerror(EIO))
                 : SyncPath(dir, true);
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
  // Best effort: this rank collects nothing (only rank 0 does, after its own fsync succeeded).
  (void)SyncPath(path, false);
  (void)SyncPath(DirPrefix(path), true);
  return true;
}

// Every rank learns whether any rank failed; the failing rank keeps its own message.
Status Agree(Exchange& comm, const Status& mine, const char* what) {
  uint64_t bad = mine.ok() ? 0 : 1;
  SEEDSTORE_RETURN_IF_ERROR(comm.AllReduceSum(&bad, 1, what));
  if (!mine.ok()) return mine;
  if (bad)
    return Status(Code::kIo, std::string(what) + ": failed on another rank (see its message)");
  return Status::Ok();
}

}  // namespace seedstore
