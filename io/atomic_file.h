// Atomic file replacement (invariant I5): write to a temporary file in the same folder,
// fsync it, rename it over the destination, fsync the folder. Until Commit() succeeds the
// previous file at `path` is untouched; a crash leaves at most a stray "*.tmp-*" file.
#pragma once
#include <string>

#include "store/status.h"

namespace seedstore {

class AtomicFile {
 public:
  /// Creates "<path>.tmp-<pid>-<n>" next to `path`.
  static Result<AtomicFile> Create(const std::string& path);
  AtomicFile(AtomicFile&& o) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  ~AtomicFile();  // removes the temporary if not committed

  /// The temporary file's path (for libraries that open files by name, like HDF5).
  const std::string& temp_path() const { return temp_; }
  const std::string& path() const { return path_; }
  /// File descriptor of the temporary file (-1 if closed).
  int fd() const { return fd_; }
  /// Writes all bytes at the current end (retries short writes). Errors name the file.
  Status Append(const void* data, size_t n);
  /// Closes the descriptor (for libraries that reopen the temporary by name).
  Status CloseFd();
  /// fsync + rename + fsync(folder).
  Status Commit();

 private:
  AtomicFile(std::string path, std::string temp, int fd) : path_(path), temp_(temp), fd_(fd) {}
  std::string path_, temp_;
  int fd_ = -1;
  bool committed_ = false;
};

/// Reads exactly n bytes at offset; errors name the file and say if it is truncated.
Status PreadExact(int fd, void* dst, size_t n, uint64_t offset, const std::string& name);

}  // namespace seedstore
