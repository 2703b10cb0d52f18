#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace seedstore {
namespace {
std::atomic<int> g_counter{0};
std::string Errno() { return std::strerror(errno); }
std::string DirOf(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}
}  // namespace

Result<AtomicFile> AtomicFile::Create(const std::string& path) {
  const std::string temp = path + ".tmp-" + std::to_string(getpid()) + "-" +
                           std::to_string(g_counter.fetch_add(1));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("cannot create '" + temp + "' (for '" + path + "'): " + Errno());
  return AtomicFile(path, temp, fd);
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept
    : path_(std::move(o.path_)), temp_(std::move(o.temp_)), fd_(o.fd_), committed_(o.committed_) {
  o.fd_ = -1;
  o.committed_ = true;  // the moved-from object owns nothing
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
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

Status AtomicFile::Commit() {
  int fd = fd_;
  if (fd < 0) fd = ::open(temp_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError("cannot reopen '" + temp_ + "': " + Errno());
  if (::fsync(fd) != 0) {
    const std::string e = Errno();
    ::close(fd);
    fd_ = -1;
    return IoError("fsync of '" + temp_ + "' failed: " + e);
  }
  ::close(fd);
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0)
    return IoError("rename '" + temp_ + "' -> '" + path_ + "' failed: " + Errno());
  committed_ = true;
  const int dfd = ::open(DirOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
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
