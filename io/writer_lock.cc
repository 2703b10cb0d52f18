#include "io/writer_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "io/atomic_file.h"

namespace seedstore {

Status WriterLock::Acquire(const std::string& path) {
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
      return IoError("cannot save to '" + path + "': cannot create its lock file '" + lock_ +
                     "': " + e);
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
                       (holder.empty() ? std::string("lock file") : holder) + "; lock file '" +
                       lock_ + "', held by a running process); the second writer is refused");
      return IoError("cannot save to '" + path + "': cannot lock '" + lock_ +
                     "': " + std::strerror(e));
    }
    // The file locked must still be the one at the name: a writer releasing its lock
    // removes the name first, and a new writer may have created another since.
    struct stat at_fd, at_name;
    if (::fstat(fd, &at_fd) != 0 || ::stat(lock_.c_str(), &at_name) != 0 ||
        at_fd.st_ino != at_name.st_ino || at_fd.st_dev != at_name.st_dev) {
      ::close(fd);
      signal_cleanup::EndChange();
      continue;
    }
    char buf[256] = {};
    std::string left(
        buf, static_cast<size_t>(std::max<ssize_t>(0, ::pread(fd, buf, sizeof buf - 1, 0))));
    while (!left.empty() && (left.back() == '\n' || left.back() == ' ')) left.pop_back();
    const std::string who = "pid " + std::to_string(::getpid()) + " on " + HostName() + "\n";
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, who.data(), who.size(), 0) < 0) { /* informative only */
    }
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

WriterLock::~WriterLock() {
  if (fd_ >= 0) {
    ::unlink(lock_.c_str());  // the name first, then the lock (see Acquire)
    ::close(fd_);
  }
  signal_cleanup::Unregister(cleanup_slot_);
}

}  // namespace seedstore
