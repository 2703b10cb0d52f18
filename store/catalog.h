// A catalog: the tensors of a model, each lazy (init spec) or dense (stored bytes), any region
// of which can be read. Spec files and store files (io/) both present themselves as one.
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "store/lazy.h"

namespace seedstore {

/// Splits a flat range [begin, end) of a tensor of `shape` into boxes whose elements, taken in
/// order box by box and row-major within each, are exactly the range in order.
std::vector<Region> FlatRangeToBoxes(const std::vector<uint64_t>& shape, uint64_t begin,
                                     uint64_t end);

/// One tensor of a catalog.
struct TensorRecord {
  std::string name;
  std::vector<uint64_t> shape;
  DType dtype = DType::kF32;
  /// Set for lazy tensors. Shared and immutable: records are copied between catalogs, and a
  /// dense one (a rank file holds hundreds per open file) carries a pointer, not a 288-byte
  /// LazyTensor.
  std::shared_ptr<const LazyTensor> lazy;
  std::optional<Fingerprint> fingerprint;  // the recorded whole-tensor fingerprint, if any
  /// Set when this (dense) tensor is a piece of a larger tensor of the same name and dtype --
  /// a rank file's shard in a distributed save (docs/FORMAT.md 4.1, "piece"): the piece's
  /// region in global indices (`piece->shape` is the global shape; a box's extents, or
  /// `[end - begin]` for a flat range, are `shape`). Its fingerprints are then taken in the
  /// global tensor's frame (global seed, global indices), so the fingerprints of the pieces
  /// of any layout add up to the global tensor's (invariant I4).
  std::optional<Region> piece;
  uint64_t NumElements() const;
  uint64_t NumBytes() const { return NumElements() * DTypeSize(dtype); }
  /// The fingerprint seed of the tensor's frame (the global tensor's for a piece).
  uint64_t fp_seed() const;
  /// Region `r` of this tensor (its own indices) as the regions of the fingerprint frame that
  /// hold the same elements in the same order: {r} unless this is a piece (then global
  /// indices; a flat range of a box piece becomes several boxes). Precondition: r lies in
  /// the tensor.
  std::vector<Region> FrameRegions(const Region& r) const;
};

/// Fingerprint of `data`, the row-major elements of region `r` of tensor `t` (its own
/// indices), in t's frame (TensorRecord::FrameRegions).
Fingerprint FingerprintOf(const TensorRecord& t, const Region& r, const void* data,
                          CpuOptions o = {});

/// Reads region `r` of tensor `t` into `out` (row-major) box by box: `r` itself, or the boxes
/// of a flat range in order (FlatRangeToBoxes), each written by read_box(box, dst) at its
/// place. The first error stops it.
Status ReadByBoxes(const TensorRecord& t, const Region& r, void* out,
                   const std::function<Status(const Region& box, void* dst)>& read_box);

/// Checks that `r` (a box or a flat range) lies inside tensor `t`; the error names the tensor.
Status CheckRegionIn(const TensorRecord& t, const Region& r);

class Catalog;
class StoredChunks;  // io/stored_chunks.h: stored-chunk access, defined where stores are

/// OK unless tensor `t` of `c` is a piece of a larger tensor (TensorRecord::piece: a tensor of
/// a rank's file -- a distributed save's rank file, or a rank's safetensors shard file). What
/// places whole tensors by a layout (reshard, save-ranks, verify-ranks; materialize, export
/// and fingerprint with --layout) refuses a piece: INVALID_ARGUMENT, prefixed by `what` (the
/// command), naming the source, the tensor, its region and global shape.
Status CheckWholeTensor(const Catalog& c, const TensorRecord& t, const std::string& what);

/// How a catalog keeps its tensors, for listings (`seedstore inspect`, io/inspect.h): a
/// one-file store, a distributed save, safetensors files, or any other (a spec: every tensor
/// lazy, nothing on disk).
enum class StorageKind { kOther, kStore, kDistributed, kSafetensors };

/// How one tensor is kept.
struct TensorStorage {
  bool dense = false;           // its elements are stored (a store's record says so; elsewhere:
                                // it has no init spec)
  uint64_t bytes_on_disk = 0;   // compressed chunks and tables (store, distributed pieces); the
                                // raw bytes for safetensors; 0 for a spec
  uint64_t chunks = 0;          // dense in a store or distributed save: chunks on disk
  std::vector<uint64_t> chunk;  // dense in a store: the chunk shape ([] = contiguous)
  bool chunk_info = false;      // dense in a store: it records per-chunk info
  std::string codec;            // dense in a store: its filter pipeline, "shuffle+zstd-1",
                                // "zstd-3" or "none" (docs/FORMAT.md 4.2)
  size_t pieces = 0;            // dense in a distributed save: its pieces over the rank files
};

struct StorageSummary {
  StorageKind kind = StorageKind::kOther;
  uint64_t file_bytes = 0;             // kStore: the file's size
  size_t files = 0;                    // kSafetensors: the number of files
  int world = 0;                       // kDistributed: the number of rank files
  std::vector<TensorStorage> tensors;  // one per tensor asked for, in the order asked
};

class Catalog {
 public:
  virtual ~Catalog() = default;
  virtual const std::vector<TensorRecord>& tensors() const = 0;
  /// Where the catalog came from (a file name), for messages.
  virtual std::string origin() const = 0;
  /// Writes region `r` of tensor `i` (row-major) into `out`. Lazy tensors are materialized;
  /// dense ones are read (only what the region needs). Errors name the tensor.
  virtual Status Read(size_t i, const Region& r, void* out, CpuOptions o = {}) const = 0;
  /// Fingerprint of region `r` of tensor `i`. Lazy: generated and hashed without a full buffer.
  /// Dense, by default: read and hashed at most 64 MiB at a time (FingerprintBySlabs).
  virtual Result<Fingerprint> FingerprintRegion(size_t i, const Region& r, CpuOptions o = {}) const;
  /// Region `r` of tensor `i` where the catalog holds exactly its elements row-major in host
  /// memory (valid while the catalog lives), so a writer may encode them in place; else
  /// null, and Read copies them. By default null.
  virtual const void* HostData(size_t i, const Region& r) const {
    (void)i;
    (void)r;
    return nullptr;
  }
  /// Index of the tensor called `name`, or -1.
  int Find(const std::string& name) const;
  /// The layout rank whose shards this catalog's pieces are, when recorded: a rank's
  /// safetensors shard file's __metadata__["seedstore.rank"], kept by `import` in the store's
  /// index ("rank", docs/FORMAT.md 4.1). By default none.
  virtual std::optional<int> shard_rank() const { return std::nullopt; }
  /// The root seed that derived keys use and the default generator: a spec's, a store's or a
  /// distributed save's (docs/FORMAT.md 4.1), or the ones a live job's buffers are saved with.
  /// By default 0 and threefry (catalogs that record none, e.g. safetensors files).
  virtual uint64_t root_seed() const { return 0; }
  virtual Generator generator() const { return Generator::kThreefry; }
  /// Whether the catalog is a file in seedstore's own format -- a store or a distributed
  /// save (io/) -- which `import --update` and `reshard` may replace in place. By default false.
  virtual bool seedstore_format() const { return false; }
  /// The files the catalog reads besides the one origin() names: a distributed save's rank
  /// files, the shard files of a safetensors index (which may list that one too). By default
  /// none.
  virtual std::vector<std::string> other_files() const { return {}; }
  /// Stored-chunk access: where the catalog keeps its dense tensors as chunks of seedstore
  /// stores (a store, a distributed save), the interface io/ copies chunks and proves pieces
  /// through without decoding them (io/stored_chunks.h). By default null: no stored chunks.
  virtual const StoredChunks* stored_chunks() const { return nullptr; }
  /// How the tensors `listed` (indices into tensors()) are kept. By default kOther and, per
  /// tensor, dense when it has no init spec, nothing on disk. Errors: a listed tensor whose
  /// storage cannot be known (a store's damaged objects; a distributed save's rank file that
  /// cannot be read), naming it.
  virtual Result<StorageSummary> Storage(const std::vector<size_t>& listed) const;
};

/// The fingerprint of region `r` of dense tensor `i` of `c`, read (Catalog::Read) and hashed
/// one slab of at most `slab_bytes` at a time: flat ranges cut into ranges, boxes halved along
/// their outermost dimension of extent > 1 until they fit (a single row may exceed it). In the
/// frame of `frame` when given (a record of the same shape and dtype: e.g. tensor i viewed as
/// a piece of a global tensor), else of tensor i's own record.
Result<Fingerprint> FingerprintBySlabs(const Catalog& c, size_t i, const Region& r, CpuOptions o,
                                       uint64_t slab_bytes, const TensorRecord* frame = nullptr);

/// The fingerprint, in the global tensor's frame, of the elements of global box `g` that tensor
/// i of `c` holds, when that tensor is a flat piece (TensorRecord::piece: the flat range [b, e)
/// of a larger tensor) whose range holds every element of `g` -- e.g. where a flat piece of
/// one layout overlaps a box piece of another. Reads the piece from the first to the last
/// element of `g`, at most `slab_bytes` at a time (g split as FingerprintBySlabs does, by the
/// flat range each part spans), so at most once per element of the piece. INVALID_ARGUMENT
/// naming the source and tensor when the tensor is no flat piece or `g` is no box of its
/// global tensor lying inside the piece's range.
Result<Fingerprint> FingerprintBoxOfFlatPiece(const Catalog& c, size_t i, const Region& g,
                                              CpuOptions o = {},
                                              uint64_t slab_bytes = uint64_t{64} << 20);

/// A catalog of lazy tensors from a spec (the JSON spec file).
class SpecCatalog : public Catalog {
 public:
  static Result<std::unique_ptr<SpecCatalog>> Create(const ModelSpec& spec, std::string origin);
  const std::vector<TensorRecord>& tensors() const override { return records_; }
  std::string origin() const override { return origin_; }
  Status Read(size_t i, const Region& r, void* out, CpuOptions o = {}) const override;
  const ModelSpec& spec() const { return spec_; }
  uint64_t root_seed() const override { return spec_.seed; }
  Generator generator() const override { return spec_.generator; }

 private:
  ModelSpec spec_;
  std::string origin_;
  std::vector<TensorRecord> records_;
};

/// Matches a tensor name against a glob (fnmatch, no special treatment of '.' or '/').
bool GlobMatch(const std::string& pattern, const std::string& name);

/// A tensor-name glob (`--tensors GLOB`, or the option `flag` names): kInvalidArgument when a
/// glob other than "*" matches no tensor of any of `cats` (a typo would otherwise write an
/// empty file, or print nothing,
/// and succeed). The message names the glob and the catalogs' origins.
Status CheckGlobMatches(const std::string& glob, std::initializer_list<const Catalog*> cats,
                        const std::string& flag = "--tensors");

}  // namespace seedstore
