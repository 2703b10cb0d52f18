// Helpers shared by the store tests of several tiers (unit, golden): a temporary folder,
// random bytes, an owned HDF5 file handle, and rewriting a store's index the way a tampering
// user (or a bug) would. Test code only.
#pragma once
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/h5store.h"

namespace seedstore::testutil {

/// A fresh folder under /tmp, removed at the end of the scope (kept when SEEDSTORE_KEEP_TMP is
/// set).
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "seedstore-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;  // never throw (a static one is destroyed at exit)
    if (!std::getenv("SEEDSTORE_KEEP_TMP")) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& f) const { return path_ + "/" + f; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline uint64_t Numel(const std::vector<uint64_t>& s) {
  uint64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

/// The error H5Store::Open gives for `path`, or, when it opens, the damage it records for its
/// first damaged tensor (H5Store::Damage: a tensor's own objects failed its checks); OK when
/// neither.
inline Status OpenOrDamage(const std::string& path) {
  auto st = H5Store::Open(path);
  if (!st.ok()) return st.status();
  for (size_t i = 0; i < (*st)->tensors().size(); ++i)
    if (!(*st)->Damage(i).ok()) return (*st)->Damage(i);
  return Status::Ok();
}

/// n bytes from mt19937_64(seed).
inline std::vector<uint8_t> RandomBytes(uint64_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(g());
  return v;
}

/// An HDF5 file opened with the C API (read-write by default), closed at the end of the scope.
struct H5File {
  hid_t id;
  explicit H5File(const std::string& p, unsigned flags = H5F_ACC_RDWR)
      : id(H5Fopen(p.c_str(), flags, H5P_DEFAULT)) {}
  ~H5File() {
    if (id >= 0) H5Fclose(id);
  }
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;
};

/// Sets the seedstore.xxh3 attribute of an open checksum or chunk-info table (docs/FORMAT.md
/// 4.3) to the hash of `entries` -- what a writer that put those entries there would have
/// written -- computed with libxxhash, independently of the library. False when the table has
/// no such attribute or it cannot be written.
inline bool SetTableHash(hid_t table, const std::vector<uint64_t>& entries) {
  const uint64_t h = XXH3_64bits(entries.data(), entries.size() * sizeof(uint64_t));
  const hid_t a = H5Aopen(table, "seedstore.xxh3", H5P_DEFAULT);
  const bool ok = a >= 0 && H5Awrite(a, H5T_NATIVE_UINT64, &h) >= 0;
  if (a >= 0) H5Aclose(a);
  return ok;
}

/// The bytes of the 1-d uint8 dataset `dataset` ("/seedstore/index", "/distributed/index") of
/// the open file `f`; empty when it cannot be read.
inline std::string DatasetText(hid_t f, const char* dataset) {
  hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
  if (d < 0) return "";
  hid_t sp = H5Dget_space(d);
  std::string text(static_cast<size_t>(H5Sget_simple_extent_npoints(sp)), '\0');
  H5Sclose(sp);
  const bool read = H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) >= 0;
  H5Dclose(d);
  return read ? text : "";
}

/// Rewrites the index of the store at `path` through `edit` (chunked + zstd as the writer
/// stores it), with its seedstore.xxh3 checksum correct when `fix_sum`, else off by one bit.
/// Returns false when an HDF5 call fails.
inline bool RewriteIndex(const std::string& path, const std::function<void(nlohmann::json&)>& edit,
                         bool fix_sum = true) {
  RegisterZstdFilter();
  H5File f(path);
  if (f.id < 0) return false;
  const std::string text = DatasetText(f.id, "/seedstore/index");
  if (text.empty()) return false;
  nlohmann::json j = nlohmann::json::parse(text);
  edit(j);
  const std::string out = j.dump();
  if (H5Ldelete(f.id, "/seedstore/index", H5P_DEFAULT) < 0) return false;
  const hsize_t n = out.size();
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &n);
  const unsigned level = 3;
  H5Pset_filter(dcpl, kH5FilterZstd, H5Z_FLAG_MANDATORY, 1, &level);
  hid_t d =
      H5Dcreate2(f.id, "/seedstore/index", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  bool ok = d >= 0 && H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0;
  const uint64_t sum = XXH3_64bits(out.data(), out.size()) ^ (fix_sum ? 0 : 1);
  hid_t s1 = H5Screate(H5S_SCALAR);
  hid_t a = ok ? H5Acreate2(d, "seedstore.xxh3", H5T_STD_U64LE, s1, H5P_DEFAULT, H5P_DEFAULT) : -1;
  ok = ok && a >= 0 && H5Awrite(a, H5T_NATIVE_UINT64, &sum) >= 0;
  if (a >= 0) H5Aclose(a);
  H5Sclose(s1);
  if (d >= 0) H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
  return ok;
}

/// Flips `bits` in the byte in the middle of the stored bytes of the chunk at `offset` (chunk
/// origin, tensor coordinates) of dense tensor `name` in the store at `path`. Returns false when
/// the chunk cannot be located.
inline bool FlipChunkByte(const std::string& path, const std::string& name,
                          std::vector<hsize_t> offset, char bits = 0x10) {
  haddr_t addr = 0;
  hsize_t size = 0;
  {
    H5File f(path, H5F_ACC_RDONLY);
    if (f.id < 0) return false;
    hid_t d = H5Dopen2(f.id, ("/tensors/" + EscapeH5Name(name)).c_str(), H5P_DEFAULT);
    if (d < 0) return false;
    unsigned mask = 0;
    const bool found = H5Dget_chunk_info_by_coord(d, offset.data(), &mask, &addr, &size) >= 0;
    H5Dclose(d);
    if (!found || size == 0) return false;
  }
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(addr + size / 2));
  char c;
  io.read(&c, 1);
  c ^= bits;
  io.seekp(static_cast<std::streamoff>(addr + size / 2));
  io.write(&c, 1);
  return static_cast<bool>(io);
}

/// A writer lock "<path>.lock" held by this process as a live writer holds it (an OFD write
/// lock, docs/FORMAT.md 10 "Writing", step 1), recording `holder`; released (and the file
/// left, as a killed writer leaves it) when destroyed.
class HeldWriterLock {
 public:
  HeldWriterLock(const std::string& lock, const std::string& holder) {
    fd_ = ::open(lock.c_str(), O_CREAT | O_RDWR | O_TRUNC | O_CLOEXEC, 0644);
    struct flock fl = {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    ok_ = fd_ >= 0 && ::fcntl(fd_, F_OFD_SETLK, &fl) == 0 &&
          ::write(fd_, (holder + "\n").data(), holder.size() + 1) ==
              static_cast<ssize_t>(holder.size() + 1);
  }
  ~HeldWriterLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  HeldWriterLock(const HeldWriterLock&) = delete;
  HeldWriterLock& operator=(const HeldWriterLock&) = delete;
  bool ok() const { return ok_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

}  // namespace seedstore::testutil
