// Hugging Face interop for stores: safetensors export split into several files with a
// model.safetensors.index.json, and import of safetensors files (or such an index) into a
// store as dense tensors, bit for bit.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/export.h"
#include "io/h5store.h"
#include "io/safetensors.h"

namespace seedstore {

/// Writes the selected tensors (or one rank's shards, see ExportOptions) as safetensors;
/// pieces and layouts as ExportSafetensors (io/export.h) says.
/// With max_file_bytes == 0, or when all fit, one file at `path` (as ExportSafetensors).
/// Otherwise tensors are packed in order into files of at most max_file_bytes of tensor data
/// (a tensor larger than the limit gets a file of its own), named like Hugging Face's
/// "<stem>-00001-of-0000N.safetensors" next to `path` (stem = file name of `path` without
/// ".safetensors"), plus "<path>.index.json" = {"metadata": {"total_size": bytes, ...},
/// "weight_map": {name: file}}.
/// The files are planned from the catalog's records first; then ExportOptions::check_output
/// sees each name; then every file is written to a synced temporary, and only once all are
/// complete are they renamed into place, the index last (AtomicFile::CommitAll: a signal
/// cannot come between two renames). Any failure before the renames leaves every previous
/// file as it was and no temporary (docs/FORMAT.md 8). Refused before anything is written
/// (INVALID_ARGUMENT naming it): a selected tensor whose name CheckSafetensorsName refuses;
/// a `path` that is a directory or names one ("out/"); split, a `path` with an empty stem
/// (".safetensors"). Returns the files written (the index last, when there is one).
/// `progress(bytes)` may be empty.
Result<std::vector<std::string>> ExportSafetensorsFiles(
    const Catalog& c, const std::string& path, const ExportOptions& o, uint64_t max_file_bytes,
    std::function<void(uint64_t)> progress = {});

/// The files by the names of an export to `path` -- `path`, "<path>.index.json", and
/// "<stem>-NNNNN-of-MMMMM.safetensors" next to it (five digits each) -- that are regular
/// files and not among `written` (what an export to `path` just wrote): left from an earlier
/// export to `path` that was split otherwise (or not at all), and still loadable -- an old
/// index still names its old files. Nothing is removed: the caller warns.
std::vector<std::string> LeftoverExportFiles(const std::string& path,
                                             const std::vector<std::string>& written);

/// Parses a size such as "5GB", "500MB", "2GiB", "1.5GB", "1e9", "1048576": the whole text is
/// a decimal number (digits, optionally a fraction and an exponent) and an optional unit, case
/// ignored (decimal units are powers of 1000, binary ones of 1024, as huggingface_hub);
/// rounded down to whole bytes, 1 to 9.2e18. Anything else ("1.5.5", "5 GB", "-1", "0") is
/// INVALID_ARGUMENT naming the text.
Result<uint64_t> ParseByteSize(const std::string& text);

/// Whether one buffer of `bytes` can be held in this machine's memory: kUnsupported "<what>
/// needs N bytes in memory at once; this machine has M bytes of memory" when N exceeds its
/// physical memory (or the process's address-space limit), checked before anything is
/// allocated or written. `what` names the tensor and shard ("tensor 'w' shard [0:8, 0:4]").
/// Commands that hold a tensor's shard whole (export, materialize, gen, save-ranks, and
/// verify-ranks' flip and layout-rng simulations) check it up front.
Status CheckFitsInMemory(uint64_t bytes, const std::string& what);

/// The dense tensors of a .safetensors file, or of every file that a Hugging Face
/// model.safetensors.index.json names (its `weight_map`; files in the index's folder), as one
/// read-only Catalog. Any box or flat range is read on demand (one pread per contiguous run),
/// never a whole file. Tensors are listed file by file, files in name order
/// (model-00001-of-N, ...), each file's tensors in the order of their bytes. A rank's shard
/// file (`seedstore materialize`, `export --layout`), whose __metadata__["seedstore.shards"]
/// maps a name to {"global_shape", "start"/"stop" or "flat"}, holds pieces: that tensor's
/// record has `piece` set (TensorRecord::piece, as a distributed save's rank file has), so its
/// fingerprints are taken in the global tensor's frame; Open checks that the region lies in
/// the global shape and has the tensor's shape (CORRUPT otherwise). The tensors such a file
/// leaves out because their shard on its rank is empty (torch.chunk of 3 rows over 4 ranks; a
/// tensor with no elements), named in __metadata__["seedstore.empty_shards"], are listed after
/// the file's own tensors (in name order) as **empty pieces**: dense, shape [0], `piece` the
/// flat range [0, 0) of the global shape (docs/FORMAT.md 4.1) -- so `fingerprint`, `diff`,
/// `import` and `export` see every shard of the rank, as from the model with --layout. Errors name
/// the file and the tensor: a tensor held by two files, an index entry whose file lacks it, a file
/// name that is not local to the index's folder; a file the index names that cannot be opened
/// (missing: NOT_FOUND, or invalid) also names the index and a tensor mapped to it.
class SafetensorsCatalog : public Catalog {
 public:
  static Result<std::unique_ptr<SafetensorsCatalog>> Open(const std::string& path);
  const std::vector<TensorRecord>& tensors() const override { return records_; }
  std::string origin() const override { return origin_; }
  Status Read(size_t i, const Region& r, void* out, CpuOptions o = {}) const override;
  /// The file holding tensor i (for messages).
  const std::string& file_of(size_t i) const { return files_[where_[i].first].path(); }
  /// The files its tensors lie in (file_of), each once, in the order first met.
  std::vector<std::string> other_files() const override;
  size_t num_files() const { return files_.size(); }
  /// kSafetensors, the number of files, and per tensor its raw bytes.
  Result<StorageSummary> Storage(const std::vector<size_t>& listed) const override;
  /// __metadata__["seedstore.rank"] (every file that has it must agree; CORRUPT otherwise).
  std::optional<int> shard_rank() const override { return rank_; }

 private:
  std::string origin_;
  std::optional<int> rank_;
  std::vector<SafetensorsFile> files_;
  std::vector<TensorRecord> records_;
  std::vector<std::pair<size_t, SafetensorsEntry>> where_;  // per record: file index, entry
};

/// True when `path` names safetensors: a ".safetensors" file, or a JSON file holding an
/// object with a `weight_map` key (a Hugging Face index, checked by ParseSafetensorsIndex when
/// opened: a weight_map that is not an object is refused there, not read as a spec), or -- by
/// whatever name (model.bin, M.SAFETENSORS: `export -o` writes any) -- a regular file that is
/// not HDF5 and begins as safetensors do: an 8-byte little-endian header length n with
/// 8 + n <= its size, then '{'. A JSON spec is not.
bool IsSafetensorsSource(const std::string& path);

struct ImportOptions {
  WriteOptions write;
  /// false: create a new store with only the imported tensors (root seed `seed`).
  /// true: `store` exists; imported tensors replace those of the same name (same shape and
  /// dtype required) and every other tensor is kept.
  bool update = false;
  uint64_t seed = 0;
};

/// Imports `source` -- a .safetensors file or a model.safetensors.index.json -- into `store`
/// as dense tensors, keeping dtypes (BF16, F16, F32, F64, I8..I64, U8..U64, BOOL) and bytes
/// exactly. A rank's shard file's tensors are stored as pieces (DenseChunking::piece, their
/// records saying where they lie in the global tensor, fingerprints in its frame), as a
/// distributed save's rank file holds them; with `update`, a piece replaces only the same
/// piece. Atomic. Returns the number of tensors imported. Errors name the file and tensor.
Result<int> ImportSafetensors(const std::string& source, const std::string& store,
                              const ImportOptions& o, std::function<void(uint64_t)> progress = {});

}  // namespace seedstore
