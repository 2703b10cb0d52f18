#include "store/integer_text.h"

namespace seedstore {
namespace {

std::string Int128Text(__int128 v) {
  if (v == 0) return "0";
  const bool neg = v < 0;
  unsigned __int128 u = static_cast<unsigned __int128>(v);
  if (neg) u = -u;
  std::string s;
  for (; u != 0; u /= 10) s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
  return neg ? "-" + s : s;
}

}  // namespace

std::string ShownValue(std::string_view text) {
  return text.size() <= 64 ? std::string(text) : std::string(text.substr(0, 61)) + "...";
}

std::string ParseIntegerIn(std::string_view text, __int128 min, __int128 max, __int128* out) {
  const bool neg = !text.empty() && text[0] == '-';
  const std::string range = Int128Text(min) + ".." + Int128Text(max);
  // (not "'" + ShownValue(text) + ...: GCC 12 warns falsely, -Wrestrict)
  std::string not_integer(1, '\'');
  not_integer += ShownValue(text);
  not_integer += "' is not an integer (expected " + range + ")";
  if (text.size() == (neg ? 1u : 0u)) return not_integer;
  __int128 v = 0;
  bool huge = false;  // beyond every 64-bit range: keep checking the digits, stop accumulating
  for (size_t i = neg ? 1 : 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c < '0' || c > '9') return not_integer;
    if (!huge) {
      v = v * 10 + (c - '0');
      huge = v > (static_cast<__int128>(1) << 80);
    }
  }
  if (neg) v = -v;
  if (huge || v < min || v > max) return ShownValue(text) + " is out of range (" + range + ")";
  *out = v;
  return "";
}

}  // namespace seedstore
