#include "io/rank_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "io/atomic_file.h"
#include "io/h5_handle.h"
#include "io/master_seal.h"
#include "io/path.h"

namespace seedstore {

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
      return DistError(
          "rank-file-missing", Code::kNotFound, save, rank, f,
          reading + "the file is a symbolic link to '" + target + "', which does not exist");
    }
    return DistError("rank-file-missing", Code::kNotFound, save, rank, f,
                     reading + "the file does not exist");
  }
  return DistError("rank-file-unreadable", Code::kIo, save, rank, f,
                   reading + "cannot reach the file: " + std::strerror(err));
}

std::string RankFileName(const std::string& path, uint32_t id, int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ".%08x.rank%d.h5", id, rank);
  return path + buf;
}

bool ParseRankFileName(const std::string& path, std::string* save, uint32_t* id, int* rank) {
  const std::string name = BaseName(path);
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
  *save = DirPrefix(path) + name.substr(0, at - 9);
  *id = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
  *rank = std::stoi(digits);
  return true;
}

bool IsDistributedSave(const std::string& path) {
  // A sealed master, intact or not, is one without asking HDF5 (which must not parse a damaged
  // one: DistCatalog::Open names it).
  bool sealed = false;
  if (NotARegularFile(path).empty() && (!CheckMasterSeal(path, false, &sealed).ok() || sealed))
    return true;
  if (!LooksLikeHdf5(path)) return false;
  auto lock = LockH5();
  Hid f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  return f.get() >= 0 && FileIsDistributedMaster(f.get(), path);
}

bool FileIsDistributedMaster(int64_t file, const std::string& where) {
  // The root's attributes lie in its object header, which HDF5 checksums.
  auto role = H5Aexists(file, kRoleAttr) > 0 ? ReadStringAttr(file, kRoleAttr, where)
                                             : Result<std::string>("");
  const htri_t group = H5Lexists(file, "/distributed", H5P_DEFAULT);
  const bool yes = !role.ok() || *role == kMasterRole || group < 0 ||
                   (group > 0 && H5Lexists(file, kDistIndexPath, H5P_DEFAULT) != 0);
  H5ErrorText();  // what the probes left on HDF5's error stack
  return yes;
}

}  // namespace seedstore
