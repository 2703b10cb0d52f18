// The writer lock of a distributed save (docs/FORMAT.md 10, "Writer lock"): "<path>.lock", on
// which the save's writer holds a write lock (fcntl F_OFD_SETLK) that the kernel drops when the
// writer ends however it ends, so a lock file whose writer was killed never blocks the next
// save: it is taken over (internal to io/).
#pragma once
#include <string>

#include "store/status.h"

namespace seedstore {

class WriterLock {
 public:
  WriterLock() = default;
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;
  /// Takes the lock of a save at `path`: "writer-locked" (kIo) while another live process holds
  /// it; a lock file left by a writer that no longer runs is taken over, with a note on stderr.
  /// The lock file is registered for removal on a signal (io/atomic_file.h).
  Status Acquire(const std::string& path);
  /// Releases it: the lock file's name is removed first, then the lock.
  ~WriterLock();

 private:
  std::string lock_;
  int fd_ = -1;
  int cleanup_slot_ = -1;
};

}  // namespace seedstore
