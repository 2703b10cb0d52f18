// Integers written as text by a user (command-line options, the integers inside option values
// such as --shape and --key): the one parser, strict and never clamping or wrapping.
#pragma once
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "store/status.h"

namespace seedstore {

/// `text` as a message shows a value the user gave: at most 64 characters (61 and "...").
std::string ShownValue(std::string_view text);

/// Parses `text` into *out when it is decimal digits with an optional leading '-' (nothing
/// else: no '+', spaces, hex, octal, exponent or fraction) of a value in [min, max]; returns ""
/// then. Otherwise returns why not, without naming the field: "'x' is not an integer
/// (expected <min>..<max>)" or "x is out of range (<min>..<max>)", and leaves *out alone.
std::string ParseIntegerIn(std::string_view text, __int128 min, __int128 max, __int128* out);

/// ParseIntegerIn for a T in [min, max] (default: all of T). Error: kInvalidArgument
/// "<what>: <ParseIntegerIn's reason>".
template <class T>
Result<T> ParseInteger(std::string_view text, const std::string& what,
                       T min = std::numeric_limits<T>::min(),
                       T max = std::numeric_limits<T>::max()) {
  static_assert(std::is_integral_v<T> && sizeof(T) <= 8);
  __int128 v = 0;
  const std::string err = ParseIntegerIn(text, min, max, &v);
  if (!err.empty()) return InvalidArgument(what + ": " + err);
  return static_cast<T>(v);
}

}  // namespace seedstore
