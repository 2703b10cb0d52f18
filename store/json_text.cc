#include "store/json_text.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

namespace seedstore {

using json = nlohmann::json;

Result<std::string> ReadTextFile(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OpenFailure(what, errno);
  std::string text;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return IoError(what + ": read failed: " + std::strerror(err));
    }
    if (text.size() + static_cast<size_t>(n) > kMaxTextFileBytes) {
      ::close(fd);
      return InvalidArgument(what + ": longer than " + std::to_string(kMaxTextFileBytes) +
                             " bytes (64 MiB), the most a spec, layout or index may hold");
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

namespace {

// Whether `text` nests arrays/objects deeper than `max` (brackets inside strings not counted).
bool TooDeep(std::string_view text, int max) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

// `s` with every byte outside printable ASCII as \xNN: the parser's messages quote the input
// ("last read: ..."), which may hold invalid UTF-8 or control bytes.
std::string Printable(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7f) {
      out.push_back(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", b);
      out += hex;
    }
  }
  return out;
}

// Appends `j` to `out` until it holds more than `budget` characters; containers below
// `depth_left` levels are shown as [...] / {...}.
void Preview(const json& j, int depth_left, size_t budget, std::string& out) {
  if (out.size() > budget) return;
  if (!j.is_structured()) {
    out += j.dump(-1, ' ', false, json::error_handler_t::replace);
    return;
  }
  const bool obj = j.is_object();
  if (depth_left == 0 && !j.empty()) {
    out += obj ? "{...}" : "[...]";
    return;
  }
  out += obj ? '{' : '[';
  bool first = true;
  for (auto it = j.begin(); it != j.end() && out.size() <= budget; ++it) {
    if (!first) out += ',';
    first = false;
    if (obj) out += json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace) + ':';
    Preview(*it, depth_left - 1, budget, out);
  }
  out += obj ? '}' : ']';
}

// Where the parser is, for naming a duplicate key: one frame per open object or array.
struct Frame {
  bool object = false;
  std::string key;   // an object's latest key
  size_t index = 0;  // an array's elements so far
  // As new, for another object or array (the buffers kept: the parser opens and closes
  // millions of small objects).
  void Reset(bool is_object) {
    object = is_object;
    key.clear();
    index = 0;
    few.clear();
    many.clear();
  }
  // Whether `k` was an earlier key of this object; records it. Objects of a few keys (nearly
  // all) are searched in a vector, larger ones (a safetensors header) in a set.
  bool Repeats(const std::string& k) {
    if (many.empty()) {
      if (std::find(few.begin(), few.end(), k) != few.end()) return true;
      few.push_back(k);
      if (few.size() <= 16) return false;
      many.insert(few.begin(), few.end());
      few.clear();
      return false;
    }
    return !many.insert(k).second;
  }

 private:
  std::vector<std::string> few;
  std::set<std::string> many;
};

// Whether the value that just completed -- its own frame popped -- is an element of an array
// at `path` (JsonElementSink).
bool AtSinkPath(const std::vector<Frame>& frames, const std::vector<std::string>& path) {
  if (frames.size() != path.size() + 1 || frames.back().object) return false;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == "*" ? frames[i].object : !frames[i].object || frames[i].key != path[i])
      return false;
  }
  return true;
}

// RFC 6901 JSON pointer of the innermost open container ("" for the top level).
std::string PointerOf(const std::vector<Frame>& frames) {
  std::string p;
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    p += '/';
    if (!frames[i].object) {
      p += std::to_string(frames[i].index);
      continue;
    }
    for (const char c : frames[i].key) p += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  }
  return p;
}

// Builds the document from the parser's events (as nlohmann's own DOM builder does), tracking
// where it is to name a repeated key and to hand the sink its elements.
class Builder : public nlohmann::json_sax<json> {
 public:
  explicit Builder(const JsonElementSink* sink) : sink_(sink) {}

  bool null() override { return Value(json(nullptr)); }
  bool boolean(bool v) override { return Value(json(v)); }
  bool number_integer(number_integer_t v) override { return Value(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Value(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return Value(json(v)); }
  bool string(string_t& v) override { return Value(json(std::move(v))); }
  bool binary(binary_t&) override {  // JSON text has none; refused rather than dropped
    error_ = "a binary value";
    return false;
  }
  bool start_object(std::size_t) override { return Open(json::value_t::object); }
  bool start_array(std::size_t) override { return Open(json::value_t::array); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }
  bool key(string_t& k) override {
    Frame& f = frames_.back();
    if (f.Repeats(k) && duplicate_.empty()) {
      const std::string at = PointerOf(frames_);
      duplicate_ = "duplicate key " +
                   Printable(json(k).dump(-1, ' ', false, json::error_handler_t::replace)) +
                   (at.empty() ? " in the top-level object" : " in the object at " + Printable(at));
    }
    f.key = k;
    slot_ = &(*open_.back())[k];  // a repeated key's value replaces the earlier one
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = Printable(e.what());
    return false;
  }

  json root;
  std::string error_, duplicate_;

 private:
  // Where a new value goes: the root, the end of the open array, or the open object's slot for
  // the latest key.
  json* Place(json&& v) {
    if (open_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  bool Value(json&& v) {
    Place(std::move(v));
    Done();
    return true;
  }
  bool Open(json::value_t t) {
    open_.push_back(Place(json(t)));
    if (spare_.empty()) {
      frames_.emplace_back();
    } else {
      frames_.push_back(std::move(spare_.back()));
      spare_.pop_back();
    }
    frames_.back().Reset(t == json::value_t::object);
    return true;
  }
  bool Close() {
    open_.pop_back();
    spare_.push_back(std::move(frames_.back()));
    frames_.pop_back();
    Done();
    return true;
  }
  // A value is complete: an element at the sink's path is handed over and dropped from its
  // array.
  void Done() {
    if (frames_.empty() || frames_.back().object) return;
    if (sink_ && AtSinkPath(frames_, sink_->path)) {
      json& parent = *open_.back();
      sink_->take(frames_.back().index, std::move(parent.back()));
      parent.erase(parent.size() - 1);
    }
    ++frames_.back().index;
  }

  const JsonElementSink* sink_;
  std::vector<json*> open_;  // the open arrays and objects, outermost first
  std::vector<Frame> frames_;
  std::vector<Frame> spare_;  // closed frames, reused by the next opened
  json* slot_ = nullptr;
};

}  // namespace

json ParseJson(std::string_view text, std::string* error, const JsonElementSink* sink) {
  // nlohmann's parser takes a NUL byte for the end of the input and ignores what follows.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    if (error) *error = "malformed JSON: a NUL byte at offset " + std::to_string(nul);
    return json(json::value_t::discarded);
  }
  if (TooDeep(text, kMaxJsonDepth)) {
    if (error) *error = "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return json(json::value_t::discarded);
  }
  // JSON leaves a repeated key's meaning open and nlohmann keeps the last one silently: a
  // document with one is refused, naming the key and where it is.
  Builder b(sink);
  const bool ok = json::sax_parse(text.begin(), text.end(), &b);
  if (!ok || !b.duplicate_.empty()) {
    if (error) *error = "malformed JSON: " + (ok ? b.duplicate_ : b.error_);
    return json(json::value_t::discarded);
  }
  return std::move(b.root);
}

std::string JsonPreview(const json& j, size_t max_chars) {
  std::string s;
  Preview(j, 4, max_chars, s);
  if (s.size() > max_chars) s = s.substr(0, max_chars > 3 ? max_chars - 3 : 0) + "...";
  return s;
}

}  // namespace seedstore
