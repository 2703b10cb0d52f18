// LD_PRELOAD shim for tests/py/test_dir_fsync_error.py: fsync() and fdatasync() of a folder
// fail with EIO, as on a file system that loses its journal or a device that goes read-only
// just after a rename. Files are synced as usual; nothing else changes.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/stat.h>

static int IsFolder(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
}

#define SHIM(name)                                              \
  int name(int fd) {                                            \
    static int (*real)(int);                                    \
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, #name);    \
    if (IsFolder(fd)) {                                         \
      errno = EIO;                                              \
      return -1;                                                \
    }                                                           \
    return real(fd);                                            \
  }
SHIM(fsync)
SHIM(fdatasync)
