#include "io/master_seal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "gen/checksum.h"
#include "io/h5_util.h"
#include "io/rank_files.h"

namespace seedstore {

namespace {

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

void SealWords(const unsigned char* head, uint64_t* hash, uint64_t* n) {
  *hash = *n = 0;
  for (int b = 7; b >= 0; --b) {
    *hash = *hash << 8 | head[16 + b];
    *n = *n << 8 | head[24 + b];
  }
}

}  // namespace

// Seals the master's temporary `file` (written with a kSealBytes user block, closed).
Status SealMaster(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return IoError("cannot open master '" + file + "' to seal it: " + std::strerror(errno));
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

Status CheckMasterSeal(const std::string& path, bool is_master, bool* sealed) {
  if (sealed) *sealed = false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Ok();  // H5Store::Open names what is wrong with it
  unsigned char head[32] = {};
  const ssize_t got = ::pread(fd, head, sizeof head, 0);
  static const unsigned char kHdf5[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  const bool magic =
      got == static_cast<ssize_t>(sizeof head) && std::memcmp(head, kSealMagic, 16) == 0;
  Status st;
  uint64_t want = 0, want_n = 0, hash = 0, n = 0;
  SealWords(head, &want, &want_n);
  if (got < static_cast<ssize_t>(sizeof head) || std::memcmp(head, kHdf5, 8) == 0) {
    st = Status::Ok();  // unsealed (older) master or a store; or unreadable or short: H5Store::Open
                        // names it
  } else if (!HashAfterSeal(fd, &hash, &n)) {
    st = IoError("cannot read '" + path + "': " + std::strerror(errno));
  } else if (!magic) {
    // Neither the seal nor HDF5's signature: a master whose seal's magic is damaged (the
    // rest of the seal still matches the file), or, for a file not known to be a master, an
    // HDF5 file with a user block of its own, which HDF5 reads.
    if (is_master || (n == want_n && hash == want)) {
      if (sealed) *sealed = true;
      st = DistError(
          "master-corrupt", Code::kCorrupt, path, -1, "",
          "the master starts with neither its seal nor HDF5's signature (docs/FORMAT.md 10)");
    }
  } else {
    if (sealed) *sealed = true;
    if (n != want_n)
      st = DistError("master-corrupt", Code::kCorrupt, path, -1, "",
                     "its seal covers " + std::to_string(want_n) +
                         " bytes after the user block, the file has " + std::to_string(n) +
                         " (truncated or extended)");
    else if (hash != want)
      st = DistError("master-corrupt", Code::kCorrupt, path, -1, "",
                     "its bytes do not match its seal (XXH3-64 " + Hex64(hash) + ", sealed " +
                         Hex64(want) + "): the master is damaged");
  }
  ::close(fd);
  return st;
}

}  // namespace seedstore
