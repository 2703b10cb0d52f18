// LD_PRELOAD shim for tests/py/test_open_counts.py: every successful open(), open64(),
// openat() or openat64() of a path that contains $SEEDSTORE_COUNT_OPENS_MATCH appends the path
// and a newline to the file $SEEDSTORE_COUNT_OPENS_LOG (opened with O_APPEND per line, so the
// lines of several threads and processes do not interleave). Nothing else changes.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void Log(int fd, const char* path) {
  const char* match = getenv("SEEDSTORE_COUNT_OPENS_MATCH");
  const char* log = getenv("SEEDSTORE_COUNT_OPENS_LOG");
  if (fd < 0 || !match || !log || !strstr(path, match)) return;
  static int (*real)(const char*, int, ...);
  if (!real) real = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, "open");
  const int out = real(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (out < 0) return;
  char line[4096];
  const size_t n = strlen(path) < sizeof(line) - 1 ? strlen(path) : sizeof(line) - 1;
  memcpy(line, path, n);
  line[n] = '\n';
  (void)!write(out, line, n + 1);
  close(out);
}

static mode_t ModeArg(int flags, va_list ap) {
  return (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
}

#define SHIM_OPEN(name)                                                        \
  int name(const char* path, int flags, ...) {                                 \
    static int (*real)(const char*, int, ...);                                 \
    if (!real) real = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, #name); \
    va_list ap;                                                                \
    va_start(ap, flags);                                                       \
    const mode_t mode = ModeArg(flags, ap);                                    \
    va_end(ap);                                                                \
    const int fd = real(path, flags, mode);                                    \
    Log(fd, path);                                                             \
    return fd;                                                                 \
  }
#define SHIM_OPENAT(name)                                                           \
  int name(int dirfd, const char* path, int flags, ...) {                           \
    static int (*real)(int, const char*, int, ...);                                 \
    if (!real) real = (int (*)(int, const char*, int, ...))dlsym(RTLD_NEXT, #name); \
    va_list ap;                                                                     \
    va_start(ap, flags);                                                            \
    const mode_t mode = ModeArg(flags, ap);                                         \
    va_end(ap);                                                                     \
    const int fd = real(dirfd, path, flags, mode);                                  \
    Log(fd, path);                                                                  \
    return fd;                                                                      \
  }
SHIM_OPEN(open)
SHIM_OPEN(open64)
SHIM_OPENAT(openat)
SHIM_OPENAT(openat64)
