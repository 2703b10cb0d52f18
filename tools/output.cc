#include "tools/output.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "io/atomic_file.h"
#include "store/spec.h"
#include "tools/cli.h"

namespace seedstore::cli {
namespace {

const char* NpyDescr(DType t) {
  switch (t) {
    case DType::kF32:
      return "<f4";
    case DType::kF64:
      return "<f8";
    case DType::kF16:
      return "<f2";
    case DType::kBF16:
      return "<u2";
    case DType::kU8:
      return "|u1";
    case DType::kU16:
      return "<u2";
    case DType::kU32:
      return "<u4";
    case DType::kU64:
      return "<u8";
    case DType::kI8:
      return "|i1";
    case DType::kI16:
      return "<i2";
    case DType::kI32:
      return "<i4";
    case DType::kI64:
      return "<i8";
    case DType::kBool:
      return "|b1";
  }
  return "|u1";
}

std::string ElementText(DType t, const unsigned char* p) {
  char buf[64];
  switch (t) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      std::snprintf(buf, sizeof buf, "%.9g", v);
      break;
    }
    case DType::kF64: {
      double v;
      std::memcpy(&v, p, 8);
      std::snprintf(buf, sizeof buf, "%.17g", v);
      break;
    }
    case DType::kBF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      std::snprintf(buf, sizeof buf, "%.9g", BF16ToF32(v));
      break;
    }
    case DType::kF16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      std::snprintf(buf, sizeof buf, "%.9g", F16ToF32(v));
      break;
    }
    case DType::kU8:
    case DType::kBool:
      std::snprintf(buf, sizeof buf, "%u", p[0]);
      break;
    case DType::kU16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      std::snprintf(buf, sizeof buf, "%u", v);
      break;
    }
    case DType::kU32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      std::snprintf(buf, sizeof buf, "%u", v);
      break;
    }
    case DType::kU64: {
      unsigned long long v;
      std::memcpy(&v, p, 8);
      std::snprintf(buf, sizeof buf, "%llu", v);
      break;
    }
    case DType::kI8:
      std::snprintf(buf, sizeof buf, "%d", static_cast<int8_t>(p[0]));
      break;
    case DType::kI16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      std::snprintf(buf, sizeof buf, "%d", v);
      break;
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      std::snprintf(buf, sizeof buf, "%d", v);
      break;
    }
    case DType::kI64: {
      long long v;
      std::memcpy(&v, p, 8);
      std::snprintf(buf, sizeof buf, "%lld", v);
      break;
    }
  }
  return buf;
}

}  // namespace

Status WriteArray(const std::string& path, const std::string& format, DType dtype,
                  const std::vector<uint64_t>& shape, const void* bytes, size_t n) {
  std::string head;
  if (format == "npy") {
    std::string dict =
        std::string("{'descr': '") + NpyDescr(dtype) + "', 'fortran_order': False, 'shape': (";
    for (size_t i = 0; i < shape.size(); ++i)
      dict +=
          std::to_string(shape[i]) + (shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
    dict += "), }";
    size_t total = 10 + dict.size() + 1;
    const size_t pad = (64 - total % 64) % 64;
    dict.append(pad, ' ');
    dict.push_back('\n');
    head = std::string("\x93NUMPY\x01\x00", 8);
    head.push_back(static_cast<char>(dict.size() & 0xFF));
    head.push_back(static_cast<char>(dict.size() >> 8));
    head += dict;
  }
  // The output's bytes, handed to `put` in pieces (text in pieces of about 1 MiB).
  auto produce = [&](const std::function<Status(const void*, size_t)>& put) -> Status {
    SEEDSTORE_RETURN_IF_ERROR(put(head.data(), head.size()));
    if (format != "text") return put(bytes, n);
    const int es = DTypeSize(dtype);
    const auto* p = static_cast<const unsigned char*>(bytes);
    std::string text;
    for (size_t i = 0; i < n; i += es) {
      text += ElementText(dtype, p + i);
      text.push_back('\n');
      if (text.size() >= (1u << 20)) {
        SEEDSTORE_RETURN_IF_ERROR(put(text.data(), text.size()));
        text.clear();
      }
    }
    return put(text.data(), text.size());
  };
  // stdout, or an open descriptor named by -o (/dev/stdout, /dev/fd/N): written where it
  // stands, sharing its offset as a shell redirection would (never truncated or replaced).
  int fd = path.empty() || path == "-" || path == "/dev/stdout" ? 1
           : path == "/dev/stderr"                              ? 2
                                                                : -1;
  for (const char* dir : {"/dev/fd/", "/proc/self/fd/"})
    if (path.rfind(dir, 0) == 0) {
      auto n = ParseInteger<int>(std::string_view(path).substr(std::strlen(dir)), "-o", 0);
      if (n.ok()) fd = *n;
    }
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (fd >= 0 || (exists && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))) {
    // A descriptor, or a device or pipe: nothing to replace atomically.
    const std::string name = path.empty() || path == "-" || fd == 1 ? std::string() : path;
    const int dup_fd = fd > 1 ? ::dup(fd) : -1;
    std::FILE* f = fd == 1  ? stdout
                   : fd > 1 ? (dup_fd >= 0 ? ::fdopen(dup_fd, "wb") : nullptr)
                            : std::fopen(path.c_str(), "wb");
    if (!f) {
      const std::string e = std::strerror(errno);
      if (dup_fd >= 0) ::close(dup_fd);
      return IoError("cannot open output '" + path + "' for writing: " + e);
    }
    Status s = produce([&](const void* data, size_t k) {
      return std::fwrite(data, 1, k, f) == k ? Status::Ok() : OutputError(name, errno);
    });
    if (Status flushed = FlushOutput(f, name); s.ok()) s = flushed;
    if (f != stdout && std::fclose(f) != 0 && s.ok()) s = OutputError(name, errno);
    return s;
  }
  // A regular file: replaced atomically, so a failure leaves the previous one intact (a
  // directory is refused by AtomicFile).
  SEEDSTORE_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::Create(path));
  SEEDSTORE_RETURN_IF_ERROR(
      produce([&f](const void* data, size_t k) { return f.Append(data, k); }));
  return f.Commit();
}

Status OutputError(const std::string& name, int err) {
  const std::string why = err != 0 ? std::strerror(err) : "a write failed";
  return IoError(name.empty() ? "cannot write standard output: " + why
                              : "writing output '" + name + "' failed: " + why);
}

Status FlushOutput(std::FILE* f, const std::string& name) {
  errno = 0;
  if (std::fflush(f) == 0 && !std::ferror(f)) return Status::Ok();
  int err = errno;
  if (err == 0 && ::write(::fileno(f), "", 0) < 0) err = errno;
  return OutputError(name, err);
}

std::string CountText(uint64_t n) {
  char buf[32];
  if (n >= 1000000000ull) std::snprintf(buf, sizeof buf, "%.3g B", n / 1e9);
  else if (n >= 1000000ull) std::snprintf(buf, sizeof buf, "%.4g M", n / 1e6);
  else if (n >= 1000ull) std::snprintf(buf, sizeof buf, "%.3g K", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(n));
  return buf;
}

}  // namespace seedstore::cli
