#include "store/status.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace seedstore {

const char* CodeName(Code c) {
  switch (c) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case Code::kNotFound:
      return "NOT_FOUND";
    case Code::kCorrupt:
      return "CORRUPT";
    case Code::kIo:
      return "IO_ERROR";
    case Code::kUnsupported:
      return "UNSUPPORTED";
    case Code::kMismatch:
      return "MISMATCH";
    case Code::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

Status OpenFailure(const std::string& what, int err) {
  std::string limit;  // too many open files: say how many this process may open
  struct rlimit l;
  if (err == EMFILE && ::getrlimit(RLIMIT_NOFILE, &l) == 0)
    limit = " (this process may open " + std::to_string(l.rlim_cur) +
            " files: raise it with `ulimit -n`)";
  return Status(err == ENOENT ? Code::kNotFound : Code::kIo,
                what + ": cannot open: " + std::strerror(err) + limit);
}

std::string NotARegularFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return "";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISFIFO(st.st_mode)) return "a pipe (FIFO)";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

std::string Status::ToString() const {
  return ok() ? std::string("OK") : std::string(CodeName(code_)) + ": " + message_;
}

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string t = "[";
  for (size_t i = 0; i < shape.size(); ++i) t += (i ? ", " : "") + std::to_string(shape[i]);
  return t + "]";
}

std::string Quoted(std::string_view s) {
  std::string q;
  q.reserve(s.size() + 2);
  q.push_back('\'');
  for (const char c : s) {
    if (c == '\0') q += "\\0";
    else q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

std::string ShownText(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b != 0x7f) {
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", b);
      out += hex;
    }
  }
  return out;
}

size_t TextWidth(std::string_view s) {
  size_t n = 0;
  for (const char c : ShownText(s)) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string PadRight(std::string_view s, size_t width) {
  std::string out = ShownText(s);
  const size_t w = TextWidth(s);
  if (w < width) out.append(width - w, ' ');
  return out;
}

}  // namespace seedstore
