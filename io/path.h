// Path strings: the folder part and the file name of a path, as io/ splits them everywhere.
#pragma once
#include <string>

namespace seedstore {

/// The folder part of `path` with its trailing '/' ("a/b/c.h5" -> "a/b/", "/c.h5" -> "/"), or
/// "" when `path` has no '/': prefix it to a file name to name a file beside `path`.
inline std::string DirPrefix(const std::string& path) {
  const size_t s = path.rfind('/');
  return s == std::string::npos ? "" : path.substr(0, s + 1);
}

/// The folder holding `path`, to open it: "." for a bare name, "/" for a file in the root,
/// else DirPrefix without its trailing '/'.
inline std::string DirToOpen(const std::string& path) {
  const std::string p = DirPrefix(path);
  if (p.empty()) return ".";
  return p.size() == 1 ? p : p.substr(0, p.size() - 1);
}

/// The file name of `path`: what follows its last '/' (all of it without one).
inline std::string BaseName(const std::string& path) {
  const size_t s = path.rfind('/');
  return s == std::string::npos ? path : path.substr(s + 1);
}

}  // namespace seedstore
