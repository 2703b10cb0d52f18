// Status values at library boundaries (house style H3). The CLI maps codes to exit codes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace seedstore {

/// Pinned error codes; the CLI's exit code is 1 + the code's value for errors.
enum class Code : int {
  kOk = 0,
  kInvalidArgument = 1,  // malformed input: JSON, fields, shapes, boxes, layouts
  kNotFound = 2,         // a file, tensor or attribute that does not exist
  kCorrupt = 3,          // a checksum, fingerprint or structural check failed
  kIo = 4,               // the operating system or a library failed to read/write
  kUnsupported = 5,      // valid input that this build cannot serve (e.g. no GPU)
  kMismatch = 6,         // verification found disagreement (ranks, fingerprints)
  kInternal = 7,         // a bug: please report
};

const char* CodeName(Code c);

/// An error code with a message a user can act on, naming the field, file, tensor or chunk.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "CODE: message", or "OK".
  std::string ToString() const;
  /// Prefix the message with context ("file 'x.h5': ...").
  Status WithContext(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + message_);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return Status(Code::kInvalidArgument, std::move(m));
}
inline Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
inline Status Corrupt(std::string m) { return Status(Code::kCorrupt, std::move(m)); }
inline Status IoError(std::string m) { return Status(Code::kIo, std::move(m)); }
inline Status Unsupported(std::string m) { return Status(Code::kUnsupported, std::move(m)); }
inline Status Mismatch(std::string m) { return Status(Code::kMismatch, std::move(m)); }
inline Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }

/// A file that cannot be opened or read, with errno `err`: kNotFound only when it does not
/// exist (ENOENT), else kIo (permission denied, an I/O error...). Message "<what>: cannot
/// open: <strerror(err)>", e.g. "spec file 's.json': cannot open: Permission denied"; for
/// EMFILE it adds the process's limit on open files.
Status OpenFailure(const std::string& what, int err);

/// What the file at `path` is when it exists and is not a regular file: "a directory", "a pipe
/// (FIFO)", "a character device", "a block device", "a socket"; "" for a regular file or when
/// nothing can be found there (the open that follows names why). Stores, distributed saves,
/// safetensors files and indexes are read by seeking or name files next to them, so only a
/// spec or a layout may come from a pipe (`<(...)`, /dev/stdin).
std::string NotARegularFile(const std::string& path);

/// A shape as messages and tables show it: "[4096, 128]", "[]" for a scalar.
std::string ShapeText(const std::vector<uint64_t>& shape);

/// `s` in single quotes, as error messages name fields, tensors and files: 'x'. A NUL byte
/// shows as \0 ('x\0b'), so that a message printed as a C string is not cut there.
std::string Quoted(std::string_view s);

/// `s` as a line of text output shows it: control bytes (below 0x20, and 0x7f) escaped as \n,
/// \t, \r or \xNN, so that a tensor named "a\nidentical  b" cannot forge a line of a table.
/// Everything else (UTF-8 included) is kept.
std::string ShownText(std::string_view s);
/// ShownText(s) padded with spaces to `width` columns for a text table, counting UTF-8 code
/// points, not bytes (a tensor named 'größe' takes 5 columns); never cut.
std::string PadRight(std::string_view s, size_t width);
/// The columns PadRight counts in `s`: the UTF-8 code points of ShownText(s).
size_t TextWidth(std::string_view s);

/// A value or an error.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

#define SEEDSTORE_RETURN_IF_ERROR(expr) \
  do {                                  \
    ::seedstore::Status _st = (expr);   \
    if (!_st.ok()) return _st;          \
  } while (0)

#define SEEDSTORE_CONCAT_INNER(a, b) a##b
#define SEEDSTORE_CONCAT(a, b) SEEDSTORE_CONCAT_INNER(a, b)
#define SEEDSTORE_ASSIGN_OR_RETURN(lhs, expr) \
  SEEDSTORE_ASSIGN_OR_RETURN_IMPL(SEEDSTORE_CONCAT(_res_, __LINE__), lhs, expr)
#define SEEDSTORE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return tmp.status();                   \
  lhs = std::move(tmp).value()

}  // namespace seedstore
