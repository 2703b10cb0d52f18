// JSON text in and out, bounded. Every JSON document seedstore reads (specs, layouts,
// safetensors headers and indexes, store and distributed-save indexes) is parsed by ParseJson,
// which refuses nesting deeper than kMaxJsonDepth before parsing: nlohmann's dump and copy
// recurse once per level, and 60,000 nested '[' in a spec overflowed the stack. Every JSON
// value an error message shows goes through JsonPreview, which prints a bounded prefix.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "store/status.h"

namespace seedstore {

/// The most bytes ReadTextFile reads: seedstore's specs, layouts and indexes are far smaller
/// (a 20,000-tensor spec is a few MB), and a pipe (`<(...)`) can be endless.
constexpr uint64_t kMaxTextFileBytes = 64ull << 20;

/// The whole of the (text) file `path`: a spec, a layout, an index -- a regular file or a pipe.
/// `what` names it in errors ("spec file 's.json'"): OpenFailure's (NOT_FOUND only when it does
/// not exist), kIo "<what>: read failed: <reason>", or kInvalidArgument "<what>: longer than
/// 67108864 bytes (64 MiB), the most a spec, layout or index may hold" (kMaxTextFileBytes;
/// nothing more is read).
Result<std::string> ReadTextFile(const std::string& path, const std::string& what);

/// Deepest nesting of arrays and objects accepted (seedstore's own documents use at most 6).
constexpr int kMaxJsonDepth = 64;

/// Parses `text`, which must be one JSON value with only JSON whitespace around it (a UTF-8
/// byte-order mark at the start is skipped), no object repeating a key. On failure returns a
/// discarded value (is_discarded()) and sets `*error` to "malformed JSON: <the parser's
/// message, bytes outside printable ASCII shown as \xNN>", "malformed JSON: a NUL byte at
/// offset N" (nlohmann would end the text there and ignore the rest), "malformed JSON:
/// duplicate key \"k\" in the object at /tensors/0" (a JSON pointer; "in the top-level
/// object"; JSON leaves which one counts open, nlohmann would keep the last silently) or
/// "JSON nested deeper than 64 levels".
///
/// With `sink`, the elements of the arrays at `sink->path` are handed to `sink->take` as the
/// parser completes each, in document order, and are left out of the returned value (those
/// arrays come back empty): a document of a million such elements is never held whole. A
/// document ParseJson refuses may have had some of its elements taken before the refusal.
struct JsonElementSink {
  /// Object keys from the top level down to the array; "*" stands for any element of an
  /// array on the way. {"tensors"}: the elements of the top-level object's "tensors" array.
  std::vector<std::string> path;
  /// The element's index in its array, and the element.
  std::function<void(size_t index, nlohmann::json&& element)> take;
};
nlohmann::json ParseJson(std::string_view text, std::string* error,
                         const JsonElementSink* sink = nullptr);

/// Appends the decimal integers v[0..n) joined by commas (the inside of a JSON array, as
/// nlohmann's compact dump writes it).
template <typename T>
void AppendJsonIntegers(std::string& out, const T* v, size_t n) {
  for (size_t d = 0; d < n; ++d) {
    if (d) out += ',';
    out += std::to_string(v[d]);
  }
}

/// At most `max_chars` characters of `j`'s compact JSON text ("..." marks the cut), without
/// descending more than a few levels; invalid UTF-8 in strings is replaced.
std::string JsonPreview(const nlohmann::json& j, size_t max_chars = 60);

}  // namespace seedstore
