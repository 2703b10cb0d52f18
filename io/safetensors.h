// safetensors files (https://github.com/huggingface/safetensors format): an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__":
// {str: str}}, then the tensors' bytes. Written atomically (io/atomic_file.h).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "gen/dtype.h"
#include "gen/region.h"
#include "io/atomic_file.h"
#include "store/status.h"

namespace seedstore {

/// safetensors dtype code ("F32", "BF16", ...) of a dtype, and back. Error names the value.
const char* SafetensorsDType(DType t);
Result<DType> ParseSafetensorsDType(const std::string& s);

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets relative to the data section
};

/// A Hugging Face model.safetensors.index.json: the files its `weight_map` names (paths in the
/// index's folder, sorted -- model-00001-of-N, ... -- each once) and, per file, the tensor
/// names the index maps to it. `path` is the index's own path (for the folder and messages).
/// Any JSON object with a "weight_map" key is meant as an index (IsSafetensorsSource). Errors
/// (INVALID_ARGUMENT) name the index and the entry: not JSON, no "weight_map", a weight_map
/// that is not an object, a file name that is not a string or not local to the folder.
struct SafetensorsIndex {
  std::vector<std::string> files;
  std::map<std::string, std::vector<std::string>> tensors;  // file -> tensor names
};
Result<SafetensorsIndex> ParseSafetensorsIndex(std::string_view text, const std::string& path);

/// Whether `name` may name a tensor in a safetensors file: not "__metadata__", the header's
/// key for the metadata (a tensor so named would be read as the metadata), and without a NUL
/// byte (SafetensorsFile::Open refuses those). INVALID_ARGUMENT naming the file `path` and
/// the tensor (a NUL shown as \0) otherwise.
Status CheckSafetensorsName(const std::string& name, const std::string& path);

/// Streams tensors into a new safetensors file. Each tensor's bytes come from a callback
/// that fills a caller-sized buffer, so memory is O(largest tensor), not O(file).
class SafetensorsWriter {
 public:
  using Fill = std::function<Status(void* dst)>;
  /// Adds a tensor of `bytes` bytes (must equal numel * dtype size).
  void Add(std::string name, DType dtype, std::vector<uint64_t> shape, Fill fill);
  /// Writes the file atomically. `metadata` becomes "__metadata__". A tensor name refused by
  /// CheckSafetensorsName fails before anything is written (an existing file is untouched).
  Status Write(const std::string& path, const std::map<std::string, std::string>& metadata);
  /// Write without the rename: the whole file in a temporary next to `path`, synced
  /// (AtomicFile::Sync), for the caller to commit (with others: AtomicFile::CommitAll) or drop.
  Result<AtomicFile> WriteTemporary(const std::string& path,
                                    const std::map<std::string, std::string>& metadata);

 private:
  struct Item {
    SafetensorsEntry entry;
    Fill fill;
  };
  std::vector<Item> items_;
};

/// A safetensors file opened for reading; tensor bytes are read on demand.
class SafetensorsFile {
 public:
  /// Opens and validates the header (docs/FORMAT.md 8) as the reference does: a length of at
  /// most 100,000,000 bytes; one JSON object and only JSON whitespace around it (no NUL byte,
  /// byte-order mark or trailing bytes); "__metadata__" an object of strings or null (none);
  /// offsets inside the file and sizes matching shapes; no two tensors' bytes overlapping --
  /// in (begin, end) order each tensor starts at or after the largest end before it, so an
  /// empty tensor lying inside another's bytes is refused too. Unlike the reference, gaps
  /// between tensors are accepted. Errors (CORRUPT) name the file and the tensor(s). A tensor
  /// name holding a NUL byte is UNSUPPORTED (the name shown with the NUL as \0), as is a dtype
  /// seedstore lacks.
  static Result<SafetensorsFile> Open(const std::string& path);
  SafetensorsFile(SafetensorsFile&& o) noexcept;
  ~SafetensorsFile();
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// The tensor called `name`, or null. O(log n), so opening an index is not quadratic.
  const SafetensorsEntry* Find(const std::string& name) const;
  /// Reads the tensor's bytes into dst (entry.end - entry.begin bytes).
  Status Read(const SafetensorsEntry& e, void* dst) const;
  /// Reads box `box` of the tensor (its own indices; must lie inside it) into dst, row-major:
  /// one pread per contiguous run.
  Status ReadBox(const SafetensorsEntry& e, const Region& box, void* dst) const;
  const std::string& path() const { return path_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> by_name_;  // name -> index in entries_
  std::map<std::string, std::string> metadata_;
};

}  // namespace seedstore
