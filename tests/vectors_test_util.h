// Known-answer vectors kept as data files (tests/kat/vectors/README.md): loading them, and
// reading their hex fields.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace seedstore::testutil {

/// The JSON file at `relative` (e.g. "tests/kat/vectors/random123.json") under
/// $SEEDSTORE_SOURCE_DIR (ctest sets it; "." otherwise). A file that cannot be opened or
/// parsed fails the test (ADD_FAILURE, naming it) and gives null.
inline nlohmann::json LoadVectorFile(const std::string& relative) {
  const char* root = std::getenv("SEEDSTORE_SOURCE_DIR");
  const std::string path = std::string(root ? root : ".") + "/" + relative;
  std::ifstream in(path);
  if (!in.good()) {
    ADD_FAILURE() << "cannot open " << path << " (set SEEDSTORE_SOURCE_DIR)";
    return nullptr;
  }
  nlohmann::json v = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) {
    ADD_FAILURE() << "malformed JSON in " << path;
    return nullptr;
  }
  return v;
}

/// A hex string of at most 16 digits as its value ("3f800000" -> 0x3f800000).
inline uint64_t HexValue(const nlohmann::json& s) {
  const std::string t = s.get<std::string>();
  EXPECT_TRUE(!t.empty() && t.size() <= 16) << "not a hex value: " << t;
  return std::stoull(t, nullptr, 16);
}

/// A hex string of bytes in order ("0aff" -> {0x0a, 0xff}).
inline std::vector<uint8_t> HexBytes(const nlohmann::json& s) {
  const std::string t = s.get<std::string>();
  EXPECT_EQ(t.size() % 2, 0u) << "odd hex length: " << t;
  std::vector<uint8_t> b;
  for (size_t i = 0; i + 1 < t.size(); i += 2)
    b.push_back(static_cast<uint8_t>(std::stoul(t.substr(i, 2), nullptr, 16)));
  return b;
}

}  // namespace seedstore::testutil
