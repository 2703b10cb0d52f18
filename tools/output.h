// Writing arrays for the command line: raw little-endian bytes, .npy, or text; counts as text.
#pragma once
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
Status WriteArray(const std::string& path, const std::string& format, DType dtype,
                  const std::vector<uint64_t>& shape, const void* bytes, size_t n);

}  // namespace seedstore::cli
