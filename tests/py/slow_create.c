// LD_PRELOAD shim for tests/py/test_signal_cleanup.py: an open() that creates a file whose
// path holds ".tmp-" (a seedstore temporary) or ends in ".lock" (a distributed save's writer
// lock) sleeps 400 ms after creating it, before the caller sees the descriptor -- widening the
// moment between a file's creation and its registration for removal on a signal
// (io/atomic_file.h, signal_cleanup) to one a test can hit every time. Nothing else changes.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

static int EndsWith(const char* s, const char* tail) {
  const size_t n = strlen(s), k = strlen(tail);
  return n >= k && strcmp(s + n - k, tail) == 0;
}

static int Slow(int fd, const char* path, int flags) {
  if (fd >= 0 && (flags & O_CREAT) && (strstr(path, ".tmp-") || EndsWith(path, ".lock"))) {
    const struct timespec t = {0, 400 * 1000 * 1000};
    nanosleep(&t, NULL);
  }
  return fd;
}

#define SHIM(name)                                                     \
  int name(const char* path, int flags, ...) {                         \
    static int (*real)(const char*, int, ...);                         \
    if (!real) real = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, #name); \
    mode_t mode = 0;                                                   \
    if (flags & (O_CREAT | O_TMPFILE)) {                               \
      va_list ap;                                                      \
      va_start(ap, flags);                                             \
      mode = va_arg(ap, mode_t);                                       \
      va_end(ap);                                                      \
    }                                                                  \
    return Slow(real(path, flags, mode), path, flags);                 \
  }
SHIM(open)
SHIM(open64)
