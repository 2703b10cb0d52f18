// Writing arrays for the command line: raw little-endian bytes, .npy, or text; counts as text.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "gen/dtype.h"
#include "store/status.h"

namespace seedstore::cli {

/// A parameter count for people: "8.03 B", "124.4 M", "52.1 K" or the exact count below 1000.
std::string CountText(uint64_t n);

/// Writes `bytes` (row-major elements of `dtype`, shape `shape`) to `path` ("" or "-" =
/// stdout) in `format`: raw, npy (bfloat16 as '<u2': view it with ml_dtypes.bfloat16), text.
/// A regular file (or a new one) is replaced atomically (AtomicFile): on failure the previous
/// file is intact. A device, a pipe or an open descriptor (/dev/stdout, /dev/fd/N) is written
/// in place. Errors: kInvalidArgument when `path`
/// is a directory (AtomicFile::Create); kIo naming the file and the system's reason.
/// Flushes `f`, the output `name` ("" = standard output), and says whether everything written
/// to it arrived: kIo "cannot write standard output: <reason>" or "writing output '<name>'
/// failed: <reason>". The reason is the failed flush's, or -- when an earlier write failed and
/// the stream no longer knows why (printf to a line-buffered stream) -- a zero-byte write's to
/// its descriptor (/dev/full: "No space left on device"; a closed one: "Bad file descriptor").
Status FlushOutput(std::FILE* f, const std::string& name);

/// The error FlushOutput reports, for a write to `name` that failed with errno `err`.
Status OutputError(const std::string& name, int err);

Status WriteArray(const std::string& path, const std::string& format, DType dtype,
                  const std::vector<uint64_t>& shape, const void* bytes, size_t n);

}  // namespace seedstore::cli
