#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

#include "io/atomic_file.h"
#include "io/path.h"
#include "store/json_text.h"
#include "store/spec.h"

namespace seedstore {
namespace {
using json = nlohmann::json;
struct Code2 {
  const char* code;
  DType t;
};
constexpr Code2 kCodes[] = {{"F32", DType::kF32},  {"F64", DType::kF64}, {"BF16", DType::kBF16},
                            {"F16", DType::kF16},  {"U8", DType::kU8},   {"U16", DType::kU16},
                            {"U32", DType::kU32},  {"U64", DType::kU64}, {"I8", DType::kI8},
                            {"I16", DType::kI16},  {"I32", DType::kI32}, {"I64", DType::kI64},
                            {"BOOL", DType::kBool}};
constexpr uint64_t kMaxHeader = 100'000'000;  // bytes: the reference's MAX_HEADER_SIZE

// "[begin, end)" of a tensor's bytes, for messages.
std::string Offsets(const SafetensorsEntry& e) {
  std::string s = "[";  // (not "[" + to_string(...): GCC 12 warns falsely, -Wrestrict)
  s += std::to_string(e.begin) + ", " + std::to_string(e.end) + ")";
  return s;
}
}  // namespace

const char* SafetensorsDType(DType t) {
  for (const auto& c : kCodes)
    if (c.t == t) return c.code;
  return "?";
}

Result<DType> ParseSafetensorsDType(const std::string& s) {
  for (const auto& c : kCodes)
    if (s == c.code) return c.t;
  return Unsupported("safetensors dtype '" + s + "' is not supported");
}

Status CheckSafetensorsName(const std::string& name, const std::string& path) {
  const std::string w = "safetensors file '" + path + "' tensor " + Quoted(name);
  if (name == "__metadata__")
    return InvalidArgument(w +
                           ": the name is reserved for the header's metadata; rename the tensor");
  if (name.find('\0') != std::string::npos)
    return InvalidArgument(
        w + ": a name holding a NUL byte cannot be read back (SafetensorsFile::Open refuses it)");
  return Status::Ok();
}

void SafetensorsWriter::Add(std::string name, DType dtype, std::vector<uint64_t> shape, Fill fill) {
  Item it;
  it.entry.name = std::move(name);
  it.entry.dtype = dtype;
  it.entry.shape = std::move(shape);
  it.fill = std::move(fill);
  items_.push_back(std::move(it));
}

Status SafetensorsWriter::Write(const std::string& path,
                                const std::map<std::string, std::string>& metadata) {
  SEEDSTORE_ASSIGN_OR_RETURN(AtomicFile f, WriteTemporary(path, metadata));
  return f.Commit();
}

Result<AtomicFile> SafetensorsWriter::WriteTemporary(
    const std::string& path, const std::map<std::string, std::string>& metadata) {
  for (const Item& it : items_)
    SEEDSTORE_RETURN_IF_ERROR(CheckSafetensorsName(it.entry.name, path));
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t off = 0;
  for (auto& it : items_) {
    uint64_t n = DTypeSize(it.entry.dtype);
    for (uint64_t d : it.entry.shape) n *= d;
    it.entry.begin = off;
    it.entry.end = off + n;
    off += n;
    header[it.entry.name] = {{"dtype", SafetensorsDType(it.entry.dtype)},
                             {"shape", it.entry.shape},
                             {"data_offsets", {it.entry.begin, it.entry.end}}};
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  SEEDSTORE_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::Create(path));
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(h.size() >> (8 * i));
  SEEDSTORE_RETURN_IF_ERROR(f.Append(len, 8));
  SEEDSTORE_RETURN_IF_ERROR(f.Append(h.data(), h.size()));
  std::vector<unsigned char> buf;
  for (auto& it : items_) {
    buf.resize(it.entry.end - it.entry.begin);
    SEEDSTORE_RETURN_IF_ERROR(it.fill(buf.data()).WithContext("tensor '" + it.entry.name + "'"));
    SEEDSTORE_RETURN_IF_ERROR(f.Append(buf.data(), buf.size()));
  }
  SEEDSTORE_RETURN_IF_ERROR(f.Sync());
  return f;
}

Result<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile s;
  s.path_ = path;
  if (const std::string kind = NotARegularFile(path); !kind.empty())
    return InvalidArgument("safetensors file " + Quoted(path) + " is " + kind +
                           ", not a regular file: safetensors files are read by seeking");
  s.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (s.fd_ < 0) return OpenFailure("safetensors file " + Quoted(path), errno);
  struct stat st;
  if (fstat(s.fd_, &st) != 0) return IoError("'" + path + "': cannot stat");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  unsigned char len[8];
  SEEDSTORE_RETURN_IF_ERROR(PreadExact(s.fd_, len, 8, 0, path));
  uint64_t hl = 0;
  for (int i = 7; i >= 0; --i) hl = (hl << 8) | len[i];
  if (hl > kMaxHeader)
    return Corrupt("safetensors file '" + path + "': header length " + std::to_string(hl) +
                   " exceeds the limit of " + std::to_string(kMaxHeader) + " bytes");
  if (8 + hl > size)
    return Corrupt("safetensors file '" + path + "': header length " + std::to_string(hl) +
                   " is invalid for a file of " + std::to_string(size) + " bytes");
  std::string h(hl, '\0');
  SEEDSTORE_RETURN_IF_ERROR(PreadExact(s.fd_, h.data(), hl, 8, path));
  // A JSON object with only JSON whitespace around it, as the reference reads it (serde_json):
  // no byte-order mark or other bytes before the '{', which ParseJson would skip or refuse.
  const size_t first = h.find_first_not_of(" \t\n\r");
  if (first == std::string::npos || h[first] != '{') {
    char what[64] = "only whitespace";
    if (first != std::string::npos)
      std::snprintf(what, sizeof what, "byte 0x%02X at offset %zu",
                    static_cast<unsigned char>(h[first]), first);
    return Corrupt("safetensors file '" + path + "': header is not a JSON object (it begins with " +
                   what + ", not '{')");
  }
  std::string err;
  json j = ParseJson(h, &err);
  if (j.is_discarded()) return Corrupt("safetensors file '" + path + "': header: " + err);
  s.data_start_ = 8 + hl;
  const uint64_t data_size = size - s.data_start_;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string w = "safetensors file '" + path + "' tensor " + Quoted(it.key());
    if (it.key() == "__metadata__") {
      if (it->is_null()) continue;  // no metadata, as the reference reads it
      if (!it->is_object())
        return Corrupt("safetensors file '" + path + "': __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          return Corrupt("safetensors file '" + path + "': __metadata__['" + m.key() +
                         "'] is not a string");
        s.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    // Valid JSON, read by the reference, but C strings (HDF5 names, messages) would cut it.
    if (it.key().find('\0') != std::string::npos)
      return Unsupported(w + ": a tensor name holding a NUL byte is not supported");
    const json& v = *it;
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets") || !v["dtype"].is_string() || !v["shape"].is_array() ||
        !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      return Corrupt(w + ": malformed entry " + JsonPreview(v));
    SafetensorsEntry e;
    e.name = it.key();
    auto dt = ParseSafetensorsDType(v["dtype"].get<std::string>());
    if (!dt.ok()) return dt.status().WithContext(w);
    e.dtype = *dt;
    unsigned __int128 n = DTypeSize(e.dtype);
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) return Corrupt(w + ": bad shape " + JsonPreview(v["shape"]));
      e.shape.push_back(d.get<uint64_t>());
      n *= d.get<uint64_t>();
    }
    if (e.shape.size() > static_cast<size_t>(kMaxRank))  // a valid file; seedstore's limit
      return Unsupported(w + ": shape has " + std::to_string(e.shape.size()) +
                         " dims; seedstore reads at most " + std::to_string(kMaxRank));
    if (Status vs = ValidateShape(e.shape, e.dtype, "shape"); !vs.ok())
      return Corrupt(w + ": " + vs.message());
    if (!v["data_offsets"][0].is_number_unsigned() || !v["data_offsets"][1].is_number_unsigned())
      return Corrupt(w + ": bad data_offsets");
    e.begin = v["data_offsets"][0].get<uint64_t>();
    e.end = v["data_offsets"][1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size)
      return Corrupt(w + ": data_offsets [" + std::to_string(e.begin) + ", " +
                     std::to_string(e.end) + "] outside the data section (" +
                     std::to_string(data_size) + " bytes)");
    if (n != e.end - e.begin)
      return Corrupt(w + ": byte size " + std::to_string(e.end - e.begin) +
                     " does not match shape");
    s.by_name_[e.name] = s.entries_.size();
    s.entries_.push_back(std::move(e));
  }
  // In (begin, end) order, each tensor must start at or after the largest end before it -- the
  // end of every earlier tensor, not only the previous one, so that no overlap hides behind an
  // empty tensor. Gaps are allowed.
  std::vector<const SafetensorsEntry*> sorted;
  for (const SafetensorsEntry& e : s.entries_) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return std::pair(a->begin, a->end) < std::pair(b->begin, b->end);
  });
  const SafetensorsEntry* reach = nullptr;  // the tensor with the largest end so far
  for (const SafetensorsEntry* e : sorted) {
    if (reach && e->begin < reach->end)
      return Corrupt("safetensors file '" + path + "': tensors '" + reach->name + "' " +
                     Offsets(*reach) + " and '" + e->name + "' " + Offsets(*e) + " overlap");
    if (!reach || e->end > reach->end) reach = e;
  }
  return s;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(o.fd_),
      data_start_(o.data_start_),
      entries_(std::move(o.entries_)),
      by_name_(std::move(o.by_name_)),
      metadata_(std::move(o.metadata_)) {
  o.fd_ = -1;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry* SafetensorsFile::Find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

Result<SafetensorsIndex> ParseSafetensorsIndex(std::string_view text, const std::string& path) {
  std::string err;
  const json j = ParseJson(text, &err);
  if (j.is_discarded()) return InvalidArgument("index file '" + path + "': " + err);
  if (!j.is_object() || !j.contains("weight_map"))
    return InvalidArgument("index file '" + path + "': not a safetensors index (no weight_map)");
  if (!j["weight_map"].is_object())
    return InvalidArgument("index file '" + path + "': weight_map is not an object (" +
                           JsonPreview(j["weight_map"]) + ")");
  const std::string dir = DirPrefix(path);
  SafetensorsIndex idx;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string())
      return InvalidArgument("index file '" + path + "': weight_map[" + Quoted(it.key()) +
                             "] is not a file name");
    const std::string f = it->get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f.find('\0') != std::string::npos ||
        f == "." || f == "..")
      return InvalidArgument("index file '" + path + "': weight_map[" + Quoted(it.key()) +
                             "] file name " + Quoted(f) + " must be a file in the index's folder");
    idx.tensors[dir + f].push_back(it.key());
  }
  for (const auto& [file, names] : idx.tensors) idx.files.push_back(file);  // sorted: a std::map
  return idx;
}

Status SafetensorsFile::Read(const SafetensorsEntry& e, void* dst) const {
  return PreadExact(fd_, dst, e.end - e.begin, data_start_ + e.begin, path_);
}

Status SafetensorsFile::ReadBox(const SafetensorsEntry& e, const Region& box, void* dst) const {
  const size_t es = DTypeSize(e.dtype);
  const uint64_t n = box.Count();
  if (n == 0) return Status::Ok();
  const uint64_t run = box.RunLength();
  auto* p = static_cast<uint8_t*>(dst);
  for (uint64_t q = 0; q * run < n; ++q)
    SEEDSTORE_RETURN_IF_ERROR(PreadExact(fd_, p + q * run * es, run * es,
                                         data_start_ + e.begin + box.RunBase(q) * es, path_));
  return Status::Ok();
}

}  // namespace seedstore
