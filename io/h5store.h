// The seedstore HDF5 store: one file holding lazy tensors (init spec + key + fingerprint, a few
// bytes each) and dense tensors (chunked, byte-shuffled, zstd, per-chunk XXH3-64 checksums).
// Normative description: docs/FORMAT.md. Summary:
//
//   /                       attrs seedstore.format = "seedstore", seedstore.version = 1
//   /seedstore/index        uint8 JSON text (zstd): every tensor record, lazy and dense
//   /tensors/<escaped>      dense data: chunked dataset, filters [shuffle(2)], zstd(32015)
//   /checksums/<escaped>    uint64 XXH3-64 of each chunk's unfiltered bytes (chunk-grid order)
//   /chunkinfo/<escaped>    uint64 [chunks, 3]: XXH3-64 of each chunk's stored (filtered)
//                           bytes, and the chunk's fingerprint (its share of the tensor's)
//
// Chunks are compressed and decompressed in our own threads, written with H5Dwrite_chunk and
// read with pread at their file addresses (H5Dread_chunk for files with a user block); the
// zstd encoding is the HDF5 Zstandard plugin's (one frame per chunk with its content size;
// cd_values[0] = level), so h5py + hdf5plugin read our files unchanged. An open store keeps
// reading the file it opened when another writer replaces its path.
//
// Writes are atomic (invariant I5): a StoreWriter writes a temporary file next to the
// destination and renames it over the destination on Commit(); until then the previous file is
// untouched. Every read of a dense chunk checks its checksum.
//
// Errors are named: the message of every format error starts with one of the names of
// StoreError (e.g. "chunk-corrupt: tensor 'w' chunk 3 ..."), listed in docs/FORMAT.md.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "store/catalog.h"
#include "store/layout.h"

namespace seedstore {

/// Format version written by this build, and the only one it reads.
constexpr int kStoreFormatVersion = 1;
/// HDF5 filter ids in a dense tensor's pipeline.
constexpr int kH5FilterShuffle = 2;
constexpr int kH5FilterZstd = 32015;

/// Named format errors; each message starts with "<name>: ".
enum class StoreError {
  kNotHdf5,             // "not-hdf5" (kCorrupt): no HDF5 superblock signature
  kTruncated,           // "truncated" (kCorrupt): the file ends before HDF5's end-of-allocation
  kBadMagic,            // "bad-magic" (kCorrupt): seedstore.format is not "seedstore"
  kUnsupportedVersion,  // "unsupported-version" (kUnsupported)
  kMissingAttribute,    // "missing-attribute" (kCorrupt)
  kMissingObject,       // "missing-object" (kCorrupt): a dataset named by the index is absent
  kBadIndex,            // "bad-index" (kCorrupt): index JSON malformed or its checksum wrong
  kShapeMismatch,       // "shape-mismatch" (kCorrupt): dataset shape differs from its record
  kDtypeMismatch,       // "dtype-mismatch" (kCorrupt)
  kUnknownFilter,       // "unknown-filter" (kUnsupported): a filter other than shuffle/zstd
  kChunkCorrupt,        // "chunk-corrupt" (kCorrupt): checksum mismatch or undecodable chunk
  kFingerprintMismatch, // "fingerprint-mismatch" (kCorrupt)
  kBadLayout,           // "bad-layout" (kCorrupt): a storage layout the format does not allow
  kTableCorrupt,        // "table-corrupt" (kCorrupt): a checksum or chunk-info table fails its hash
  kMetadataCorrupt,     // "metadata-corrupt" (kCorrupt): HDF5 cannot read an object's metadata
                        // (an object header, B-tree node or heap fails its checksum or check)
};
const char* StoreErrorName(StoreError e);
/// A Status whose message is "<name>: <message>", with the error's code.
Status StoreStatus(StoreError e, const std::string& message);

/// The zstd levels a store is written with (zstd's 1..ZSTD_maxCLevel(); its negative "fast"
/// levels are not used). WriteOptions::zstd_level outside is clamped to them.
constexpr int kMinZstdLevel = 1, kMaxZstdLevel = 22;

/// Options for writing dense tensors.
struct WriteOptions {
  int zstd_level = 1;                 // kMinZstdLevel..kMaxZstdLevel (others: clamped)
  uint64_t chunk_bytes = 1u << 20;    // target uncompressed chunk size
  int threads = 0;                    // compression threads (0 = all cores)
  bool shuffle = true;                // byte-shuffle (HDF5 filter 2) before zstd
  /// Permissions of a new file (-1: 0644 less the umask); a replaced file keeps its own
  /// (AtomicFile::Create).
  int file_mode = -1;
  /// Bytes reserved at the file's start for the caller: an HDF5 user block, which HDF5 and
  /// every reader skip (0, or a power of 2 >= 512). A distributed save's master keeps its seal
  /// there (docs/FORMAT.md 10).
  uint64_t user_block = 0;
};

/// Where a dense tensor's elements come from while writing: fills `out` with the elements of
/// `box` (row-major). Called concurrently from several threads with disjoint boxes.
using BoxSource = std::function<Status(const Region& box, void* out)>;

/// Storage details of one tensor of an open store.
struct StoredTensor {
  bool dense = false;
  uint64_t stored_bytes = 0;           // bytes on disk (compressed chunks + checksum table)
  std::vector<uint64_t> chunk;         // chunk shape (empty: contiguous, one "chunk")
  uint64_t num_chunks = 0;
  std::vector<int> filters;            // HDF5 filter ids, pipeline order
  int zstd_level = 0;                  // the zstd filter's cd_values[0] (0: no zstd filter)
  std::string dataset;                 // HDF5 path of the data ("" for lazy)
};

struct ChunkScratch;  // io/h5store.cc

/// Internal to H5Store's chunk reads: where one chunk of a chunked dataset is stored.
struct ChunkLoc {
  uint64_t addr = 0, size = 0;  // file address and stored size; size 0: the chunk is missing
  unsigned mask = 0;            // HDF5 filter mask (bit k set: filter k skipped)
};
/// Internal to H5Store's chunk reads: how a dense tensor's chunks are found -- through its open
/// dataset (HDF5's chunk index), or, for a tensor of few chunks read with pread, from the
/// locations H5Store::Open recorded (then no dataset need be open).
struct ChunkWhere {
  std::shared_ptr<const int64_t> dataset;          // the open dataset; null with `located`
  const std::vector<ChunkLoc>* located = nullptr;  // one per chunk
  int64_t dset() const { return dataset ? *dataset : -1; }
};

/// Per-thread work buffers kept between calls: fresh multi-MiB buffers would be page-faulted
/// and zeroed by the kernel on every call (measured: ~15% of a dense write's time). Take(n)
/// hands out n objects (pooled, else new T), Return puts them back. Thread-safe.
template <class T>
class ScratchPool {
 public:
  std::vector<std::unique_ptr<T>> Take(int n) {
    std::vector<std::unique_ptr<T>> out(static_cast<size_t>(n));
    std::lock_guard<std::mutex> l(mu_);
    for (auto& x : out) {
      if (free_.empty()) {
        x = std::make_unique<T>();
      } else {
        x = std::move(free_.back());
        free_.pop_back();
      }
    }
    return out;
  }
  void Return(std::vector<std::unique_ptr<T>> v) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& x : v) free_.push_back(std::move(x));
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<T>> free_;
};

/// What a store's chunk-info table (/chunkinfo/<escaped>, docs/FORMAT.md 4.3) says of one
/// chunk: the XXH3-64 of its stored bytes, and its fingerprint -- the sum over the chunk's
/// elements inside the tensor, in the record's frame (TensorRecord::FrameRegions) -- whose sum
/// over the chunks is the record's fingerprint.
struct ChunkInfo {
  uint64_t stored_hash = 0;
  Fingerprint fingerprint;
};

/// One chunk of a dense tensor as it lies in a store, read by H5Store::ReadStoredChunk to be
/// copied into another store without re-encoding it (StoreWriter::AddDense, DenseChunking).
struct StoredChunk {
  std::vector<uint8_t> bytes;  // the stored bytes: the chunk after the filter pipeline
  uint32_t filter_mask = 0;    // HDF5 filter mask of the chunk (bit k set: filter k skipped)
  uint64_t checksum = 0;       // XXH3-64 of the unfiltered full chunk (docs/FORMAT.md 4.3)
  uint64_t stored_hash = 0;    // XXH3-64 of `bytes`
  /// The chunk's fingerprint in its record's frame, from the chunk-info table: set only when
  /// the chunk was read without decoding (ReadStoredChunk with decode false); decoded data is
  /// the caller's to fingerprint in whatever frame it needs.
  std::optional<Fingerprint> fingerprint;
  std::vector<uint8_t> data;   // the chunk's elements inside the tensor (its box clipped to
                               // the tensor), row-major, decoded from `bytes` and verified
                               // against `checksum`; empty when read without decoding
};

/// A seedstore file opened for reading; a Catalog (lazy and dense tensors alike).
class H5Store : public Catalog {
 public:
  /// Opens and validates a store: root attributes, index checksum and JSON, and for each dense
  /// record its dataset (shape, dtype, filters, checksum table) -- then closes the datasets
  /// and lets go of the metadata HDF5 cached checking them (reads open what they use; memory
  /// per tensor is the record and its tables). Errors name the file and are
  /// named StoreErrors (not-hdf5, truncated, bad-magic, unsupported-version, metadata-corrupt,
  /// ...); a missing file is kNotFound, a directory kInvalidArgument. A file that starts with a
  /// distributed save's seal has it checked before HDF5 reads a byte (master-corrupt,
  /// CheckMasterSeal in io/h5_util.h).
  ///
  /// A dense tensor whose own objects fail those checks (its dataset, checksum or chunk-info
  /// table: missing, unreadable metadata, another shape or dtype, a table failing its hash...)
  /// does not fail the open: the index's record of it is intact (checksummed), so the store
  /// opens and Damage(i) holds the named error, which every read, fingerprint, chunk copy and
  /// Verify of that tensor returns; the other tensors read as usual.
  static Result<std::unique_ptr<H5Store>> Open(const std::string& path);
  ~H5Store() override;

  const std::vector<TensorRecord>& tensors() const override { return records_; }
  std::string origin() const override { return path_; }
  /// Reads a box or flat range. Dense: reads and decompresses only the intersecting chunks,
  /// `o.threads` at a time, each decoded straight into its place in `out` and its checksum
  /// verified on the way (chunk-corrupt names tensor and chunk; after an error the contents
  /// of `out` are unspecified). Lazy: materialized.
  Status Read(size_t i, const Region& r, void* out, CpuOptions o = {}) const override;
  /// Fingerprint of a box or flat range, computed from the data. Dense: every intersecting
  /// chunk is read, its checksum verified, and its part of the region decoded into a
  /// per-thread buffer and hashed there (`o.threads` chunks at a time; memory O(threads x
  /// chunk), not O(region)). Lazy: generated.
  Result<Fingerprint> FingerprintRegion(size_t i, const Region& r, CpuOptions o = {}) const override;

  const StoredTensor& stored(size_t i) const { return stored_.at(i); }
  /// Why tensor i cannot be read (a named kCorrupt or kUnsupported error naming the file and
  /// tensor), or OK: a dense tensor whose objects failed Open's checks. Its record is the
  /// index's; stored(i) then holds only `dense`, `dataset` and `stored_bytes`, and it has no
  /// chunk-info table.
  const Status& Damage(size_t i) const { return damage_.at(i); }
  uint64_t root_seed() const { return seed_; }
  Generator generator() const { return generator_; }
  std::optional<int> shard_rank() const override { return rank_; }
  /// File size in bytes.
  uint64_t file_bytes() const { return file_bytes_; }
  /// Whether the file is a distributed save's master (FileIsDistributedMaster, io/h5_util.h):
  /// then this store holds only its lazy tensors and scalars; DistCatalog reads the save.
  bool distributed_master() const;

  /// One problem found by Verify.
  struct Problem {
    std::string tensor;
    int64_t chunk = -1;  // -1: the whole tensor
    Status status;
  };
  struct VerifyReport {
    uint64_t tensors = 0, chunks = 0, bytes = 0;
    std::vector<Problem> problems;
    /// Recomputed, per tensor (over the chunks that could be read: meaningless unless
    /// `complete[i]`).
    std::vector<Fingerprint> fingerprints;
    /// Per tensor: every element was read and hashed, so fingerprints[i] is the tensor's
    /// actual content hash (which may still differ from the recorded one).
    std::vector<bool> complete;
    /// Per tensor: complete and no problem names it (nor a file holding a piece of it).
    std::vector<bool> ok;
    /// Fills `ok` from `complete` and the problems (call once problems are final).
    void FinishOk(const std::vector<TensorRecord>& records);
  };
  /// Checks every chunk checksum of every dense tensor and recomputes every fingerprint (lazy
  /// ones from their spec), comparing with the recorded ones. Continues past problems: a
  /// damaged tensor (Damage) is one problem, and the others are still checked.
  /// `progress(bytes)` is called as work completes (any thread-safe callback, may be empty).
  VerifyReport Verify(CpuOptions o = {}, std::function<void(uint64_t)> progress = {}) const;

  /// Reads chunk j (chunk-grid order, docs/FORMAT.md 4.3) of chunked dense tensor i as stored
  /// -- bytes, filter mask and checksum -- for copying it unchanged into another store, and
  /// decodes those very bytes into out->data (the chunk's box clipped to the tensor), verifying
  /// the checksum exactly as Read does: a corrupt chunk is never handed out (chunk-corrupt
  /// names file, tensor and chunk). kInvalidArgument for a lazy or contiguous tensor or j out
  /// of range. Thread-safe.
  ///
  /// With `decode` false and a chunk-info table present, the chunk is not decoded: `bytes` are
  /// checked against the table's stored hash instead (chunk-corrupt on a mismatch), `data` is
  /// left empty and `fingerprint` is the table's. Otherwise the chunk is decoded as above (its
  /// stored hash checked too when there is a table) and `fingerprint` is left unset.
  Status ReadStoredChunk(size_t i, uint64_t j, StoredChunk* out, bool decode = true) const;

  /// The chunk-info table of dense tensor i (empty: the file has none for it, as files
  /// written before it existed). Open checks that it has one entry per chunk and that its
  /// fingerprints add up to the record's (fingerprint-mismatch).
  const std::vector<ChunkInfo>& chunk_info(size_t i) const { return info_.at(i); }

  /// The fingerprint of dense tensor i as its stored chunks prove it, without decoding them:
  /// every chunk's stored bytes are read and checked against the chunk-info table's hash
  /// (chunk-corrupt names the chunk), and the table's chunk fingerprints are summed. The
  /// result vouches for the stored bytes and for the table; that the table describes what the
  /// bytes decode to is what the writer recorded and Verify checks. A tensor without a table
  /// is decoded and fingerprinted chunk by chunk (as Verify does). `o.threads` threads.
  Result<Fingerprint> ProveStored(size_t i, CpuOptions o = {}) const;

  /// Most datasets an open store keeps open: Open checks each dense tensor's dataset and
  /// closes it; reads open the one they need, and the last few used stay open.
  static constexpr size_t kOpenDatasets = 8;
  /// Reads of a tensor of at most this many chunks open no dataset: Open records where its
  /// chunks are (when it reads chunks with pread). A 256-rank reshard's proof reopened 37,888
  /// datasets, each already opened by Open's checks, for their chunk addresses.
  static constexpr uint64_t kLocatedChunks = 4;
  /// Chunks of a tensor of more chunks are read with H5Dread_chunk under the HDF5 lock, not by
  /// file address with pread: HDF5 1.10's only way to an address, H5Dget_chunk_info_by_coord,
  /// walks the chunk index from its start (O(chunks) per chunk, O(chunks^2) per read: 16,000
  /// chunks took 8 s), while H5Dread_chunk and H5Dget_chunk_storage_size look a chunk up in
  /// the index directly. Below it the addresses cost little and buy overlapped reads and
  /// readahead hints (docs/PERF.md).
  static constexpr uint64_t kAddressedChunks = 512;

  /// Raw access for copying: HDF5 file id (valid while the store is open).
  int64_t h5_file() const { return file_; }

 private:
  H5Store() = default;
  Status ReadDense(size_t i, const Region& box, void* out, CpuOptions o) const;
  // Calls f for every chunk of chunked dense tensor i that intersects `box` (non-empty, inside
  // the tensor), o.threads chunks at a time, with the intersection [is, ie) in tensor
  // indices, a scratch and the thread's index; prefetches ahead. The first error stops it.
  // `where` finds the tensor's chunks (ChunksOf), valid during the call.
  Status ForEachChunkIn(size_t i, const Region& box, CpuOptions o,
                        const std::function<Status(const ChunkWhere& where, uint64_t j, const uint64_t* is,
                                                   const uint64_t* ie, ChunkScratch& s, int th)>& f) const;
  // Decodes chunk j of dense tensor i (its box clipped to the tensor, packed row-major) into
  // `out`, checking its checksum and, with `check_info`, its chunk-info stored hash; s.raw
  // keeps the stored bytes, *mask (when not null) their filter mask.
  Status DecodeChunk(const ChunkWhere& where, size_t i, uint64_t j, std::vector<uint8_t>* out, ChunkScratch& s,
                     bool check_info, unsigned* mask) const;
  // An open HDF5 dataset id, closed (under the HDF5 lock) when the last holder lets go.
  using DatasetHandle = std::shared_ptr<const int64_t>;
  // Dense tensor i's dataset, for its chunk addresses. Open checks every dataset and closes
  // it (an open one costs ~12 KB of HDF5 state: a store's tensors, or a distributed save's
  // rank files, would hold them all); calls that read chunks open theirs here, and the
  // kOpenDatasets used last stay open for the next. Thread-safe (the HDF5 lock).
  Result<DatasetHandle> Dataset(size_t i) const;
  // How reads find dense tensor i's chunks: the locations recorded at open when it has them
  // and chunks are read with pread (fd_), else its dataset (Dataset).
  Result<ChunkWhere> ChunksOf(size_t i) const;
  // The descriptor to give readahead hints for chunks of `chunk_bytes` (decoded), or -1
  // when the kernel's own readahead of this file's device already runs far enough ahead.
  int HintFd(uint64_t chunk_bytes) const;
  // Sets fd_ (and the readahead window) from the open HDF5 file.
  void AttachDescriptor();
  // After Open's checks: the file opened again, without the metadata they left cached.
  Status DropCachedMetadata();
  friend class StoreWriter;
  std::string path_;
  int64_t file_ = -1;
  int fd_ = -1;  // the HDF5 file's descriptor, for pread of chunks (-1: use H5Dread_chunk)
  uint64_t kernel_readahead_ = 0;  // the kernel's readahead window for fd_'s device (0: unknown)
  uint64_t seed_ = 0, file_bytes_ = 0;
  Generator generator_ = Generator::kThreefry;
  std::optional<int> rank_;  // the index's "rank"
  std::vector<TensorRecord> records_;
  std::vector<StoredTensor> stored_;
  mutable std::vector<std::pair<size_t, DatasetHandle>> open_;  // Dataset(): least recent first
  std::vector<std::vector<uint64_t>> checksums_;
  std::vector<std::vector<ChunkInfo>> info_;  // chunk-info tables (empty when absent)
  std::vector<std::vector<ChunkLoc>> located_;  // where the chunks are (kLocatedChunks; else empty)
  std::vector<Status> damage_;  // Damage(i)
};

/// How StoreWriter::AddDense chunks a dense tensor and, optionally, where it may take chunks
/// already encoded elsewhere (raw copy: no decode, re-chunk or recompression).
struct DenseChunking {
  /// Chunk shape; empty: the writer's rule (docs/FORMAT.md 4.2). Otherwise it must have the
  /// tensor's rank and 1 <= chunk[d] <= shape[d] (kInvalidArgument). Ignored for tensors stored
  /// contiguously (rank 0 or no elements).
  std::vector<uint64_t> chunk;
  /// Optional. Called (concurrently, from the writer's threads) for each chunk j of the new
  /// tensor, `box` being the chunk's box clipped to the tensor. Either fills `out` with a chunk
  /// whose unfiltered full-size bytes are exactly those the writer would encode for that chunk
  /// (the box's elements, zeros outside the tensor), stored with this writer's chunk shape and
  /// filter pipeline (see StoreWriter::CopiesChunksOf), `out->data` holding the box's elements
  /// decoded from those bytes and verified against `out->checksum` (as ReadStoredChunk does),
  /// and returns true; or returns false, and the chunk is encoded from the BoxSource. The
  /// writer stores the bytes, mask and checksum as given and fingerprints `out->data` -- or,
  /// when `out->fingerprint` is set, takes that as the chunk's fingerprint (the callback
  /// vouches that it is in this tensor's frame; `data` may then be empty).
  std::function<Result<bool>(uint64_t j, const Region& box, StoredChunk* out)> raw;
  /// Optional: the tensor is this region of a larger tensor (a rank file's piece of a
  /// distributed save; TensorRecord::piece). Its record says so and its fingerprints are taken
  /// in the global tensor's frame. Must lie in `piece->shape` and have the tensor's local
  /// shape (LocalShape), else kInvalidArgument.
  std::optional<Region> piece;
};

/// Writes a new store atomically at `path` (temporary file + fsync + rename on Commit()).
/// Its bytes are reproducible: the same calls with the same WriteOptions other than `threads`
/// make a byte-identical file (chunks written in index order, no object times; docs/FORMAT.md
/// 4, "Reproducible bytes").
class StoreWriter {
 public:
  /// Starts a store whose derived keys use `root_seed` (spec "seed") and default generator.
  static Result<std::unique_ptr<StoreWriter>> Create(const std::string& path, uint64_t root_seed,
                                                     Generator generator = Generator::kThreefry,
                                                     WriteOptions options = {});
  ~StoreWriter();  // without Commit(): the temporary is removed, `path` untouched

  /// Adds a lazy tensor. `fingerprint`, when given, is recorded (else computed now unless
  /// `compute_fingerprint` is false, in which case the record has none).
  Status AddLazy(const TensorSpec& t, const Fingerprint* fingerprint = nullptr,
                 bool compute_fingerprint = true, CpuOptions o = {});
  /// Adds a dense tensor whose elements come from `source`; records its fingerprint and chunk
  /// checksums. `progress(bytes)` is called as chunks are written, one call at a time (may be
  /// empty).
  /// `chunking` may set the chunk shape and supply chunks to copy as stored (DenseChunking).
  Status AddDense(const std::string& name, const std::vector<uint64_t>& shape, DType dtype,
                  const BoxSource& source, std::function<void(uint64_t)> progress = {},
                  const DenseChunking& chunking = {});
  /// The same for a tensor held whole in host memory: `data` holds all its elements row-major
  /// (element count x DTypeSize(dtype) bytes) and is read during the call only. Chunks that
  /// are contiguous in `data` (1-D tensors and flat ranges, or chunks of whole trailing rows)
  /// are fingerprinted, checksummed and compressed where they lie, without the copy a
  /// BoxSource makes (1-D bf16: writes 4% faster); others are gathered as from a BoxSource.
  /// The stored bytes are the same either way. `data` must not change during the call (it is
  /// read several times: fingerprint, checksum, compression); any alignment is fine.
  Status AddDense(const std::string& name, const std::vector<uint64_t>& shape, DType dtype,
                  const void* data, std::function<void(uint64_t)> progress = {},
                  const DenseChunking& chunking = {});
  /// Whether chunks of a tensor stored as `s` can be copied as stored into a tensor of `dtype`
  /// this writer adds: chunked, with the filter pipeline (shuffle or not, zstd) and zstd level
  /// this writer uses for `dtype`.
  bool CopiesChunksOf(const StoredTensor& s, DType dtype) const;
  /// The same for a writer that would be created with `options`.
  static bool CopiesChunksOf(const StoredTensor& s, DType dtype, const WriteOptions& options);
  /// Chunks written so far: copied as stored (AddDense raw chunks, CopyFrom) or encoded, and
  /// the dense tensors' bytes on disk (each record's stored_bytes, docs/FORMAT.md 4.1).
  struct ChunkCounts {
    uint64_t copied = 0, encoded = 0, stored_bytes = 0;
  };
  ChunkCounts chunk_counts() const;
  /// The fingerprint recorded for the last dense tensor added (zero before the first).
  Fingerprint last_dense_fingerprint() const;
  /// Records the layout rank whose shards the store's pieces are (the index's "rank",
  /// Catalog::shard_rank); none by default.
  void SetShardRank(std::optional<int> rank);
  /// Copies tensor `i` of `src` unchanged: lazy record, or dense chunks as stored (no
  /// recompression).
  Status CopyFrom(const H5Store& src, size_t i);
  /// Writes the index, closes the file, fsyncs and renames it over the destination. When
  /// given, `before_rename(temp)` runs between the close and the fsync, on the closed
  /// temporary file (its path): what it adds to the file (the distributed save's master
  /// objects, io/dist_store.cc) is made durable and renamed with it. Its error fails the
  /// commit; the temporary is then removed and the destination left untouched.
  Status Commit(const std::function<Status(const std::string& temp)>& before_rename = {});
  const std::string& path() const;

 private:
  StoreWriter() = default;
  // Both AddDense overloads: `whole`, when not null, holds the whole tensor (as above) and
  // contiguous chunks are read from it in place; other chunks come from `source`.
  Status AddDenseFrom(const std::string& name, const std::vector<uint64_t>& shape, DType dtype,
                      const BoxSource& source, const uint8_t* whole,
                      std::function<void(uint64_t)> progress, const DenseChunking& chunking);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Rewrites the store at `path` with the named tensors replaced by dense values from their
/// sources (typically trained values replacing lazy ones); every other tensor is copied as is,
/// and a piece (a rank file's tensor) stays the same piece. Atomic. `progress`, when set, gets
/// the bytes of each chunk written. Errors: kNotFound for a name the store lacks; a
/// distributed save's master or rank file is refused (kInvalidArgument, CheckRewritableAsStore:
/// rewriting the master as a store would drop its dense tensors, a rank file alone would break
/// the save); shapes come from the store's records.
Status ReplaceWithDense(const std::string& path, const std::map<std::string, BoxSource>& values,
                        WriteOptions options = {}, std::function<void(uint64_t)> progress = {});

/// The refusal ReplaceWithDense gives for a distributed save's master at `path`, for callers
/// that check before they read anything.
Status RewriteOfMasterRefused(const std::string& path);

/// Whether the store `store`, opened from `path`, may be rewritten in place as a one-file store
/// (ReplaceWithDense, import --update), checked before anything is written. kInvalidArgument
/// naming the file for a distributed save's master (RewriteOfMasterRefused) and for a rank file
/// of a save: named as one (ParseRankFileName) with its save's master next to it -- rewritten
/// alone, the file no longer matches the fingerprints the save's index records for its pieces,
/// and the save fails to verify and read; the message says to update the save instead. A file
/// so named without a master beside it is an ordinary store.
Status CheckRewritableAsStore(const H5Store& store, const std::string& path);

/// Escapes a tensor name into one HDF5 link name: '%' -> "%25", '/' -> "%2F", and a name made
/// only of dots has every '.' -> "%2E".
std::string EscapeH5Name(const std::string& name);

/// Registers the zstd filter (id 32015, the HDF5 Zstandard plugin's encoding) with the HDF5
/// library in this process; idempotent. Called by Open/Create.
void RegisterZstdFilter();

/// Threads for `work_items` items: `requested` (0: all cores), at most kMaxCpuThreads and at
/// most the items.
int ThreadCount(int requested, uint64_t work_items);

/// Runs f(item, thread) for items 0..n-1 on `threads` threads (thread = 0..threads-1; the
/// calling thread alone when threads <= 1); stops handing out items after the first error
/// unless `keep_going`. Returns the first error; an exception f throws (std::bad_alloc
/// included) is that item's error (kInternal), never std::terminate in a worker thread.
Status ParallelFor(uint64_t n, int threads, bool keep_going,
                   const std::function<Status(uint64_t, int)>& f);

/// Like ParallelFor (keep_going false), with each item in two steps: work(item, slot) runs on
/// `threads` threads in parallel; commit(item, slot) then runs for the items in order 0, 1, 2,
/// ..., one at a time, on whichever thread finds the item next to commit finished -- work done
/// in parallel, its results written in one order whatever the thread count (what makes a
/// writer's files byte-reproducible). `slot`, 0 <= slot < InOrderSlots(threads), is the item's
/// alone from its work until its commit returns: what work leaves for commit lives in per-slot
/// state (a buffer). Each thread has two slots, so a thread whose item must wait for an earlier
/// one goes on with the next item; it waits only when both its slots hold uncommitted items.
/// After the first error (of either step) no further item is committed; that error is
/// returned.
Status ParallelForInOrder(uint64_t n, int threads, const std::function<Status(uint64_t, int)>& work,
                          const std::function<Status(uint64_t, int)>& commit);

/// The slots ParallelForInOrder hands out on `threads` threads: 2 x threads (1 for one thread).
int InOrderSlots(int threads);

/// Whether a file starts with the HDF5 signature (at offset 0, 512, 1024, ...).
bool LooksLikeHdf5(const std::string& path);

}  // namespace seedstore
