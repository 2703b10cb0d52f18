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
// This header: H5Store, the reader (io/store_reader.cc: opening and checking a store;
// io/store_chunks.cc: chunk reads, the stored-bytes proof and Verify).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/store_format.h"
#include "io/stored_chunks.h"
#include "store/catalog.h"
#include "store/layout.h"

namespace seedstore {

struct ChunkScratch;  // io/chunk_grid.h

/// Internal to H5Store's chunk reads: where one chunk of a chunked dataset is stored.
struct ChunkLoc {
  uint64_t addr = 0, size = 0;  // file address and stored size; size 0: the chunk is missing
  unsigned mask = 0;            // HDF5 filter mask (bit k set: filter k skipped)
};
/// Internal to H5Store's chunk reads: how a dense tensor's chunks are found -- through its open
/// dataset (HDF5's chunk index), or, for a tensor of few chunks read with pread, from the
/// locations H5Store::Open recorded (then no dataset need be open).
class Hid;  // io/h5_handle.h

struct ChunkWhere {
  std::shared_ptr<const Hid> dataset;              // the open dataset; null with `located`
  const std::vector<ChunkLoc>* located = nullptr;  // one per chunk
  const StoredTensor* stored = nullptr;            // the tensor's storage (ChunkOffset)
  int64_t dset() const;                            // the dataset's HDF5 id, or -1
};

/// A seedstore file opened for reading; a Catalog (lazy and dense tensors alike).
class H5Store : public Catalog, public StoredChunks {
 public:
  /// Opens and validates a store: root attributes, index checksum and JSON, and for each dense
  /// record its dataset (shape, dtype, filters, checksum table) -- then closes the datasets
  /// and lets go of the metadata HDF5 cached checking them (reads open what they use; memory
  /// per tensor is the record and its tables). Errors name the file and are
  /// named StoreErrors (not-hdf5, truncated, bad-magic, unsupported-version, metadata-corrupt,
  /// ...); a missing file is kNotFound, a directory kInvalidArgument. A file that starts with a
  /// distributed save's seal has it checked before HDF5 reads a byte (master-corrupt,
  /// CheckMasterSeal in io/master_seal.h).
  ///
  /// A dense tensor whose own objects fail those checks (its dataset, checksum or chunk-info
  /// table: missing, unreadable metadata, another shape or dtype, a table failing its hash...)
  /// does not fail the open: the index's record of it is intact (checksummed), so the store
  /// opens and Damage(i) holds the named error, which every read, fingerprint, chunk copy and
  /// Verify of that tensor returns; the other tensors read as usual.
  ///
  /// `use` says what the caller does with the store. kReads: keeps it open for reads of any
  /// tensor, so the metadata the checks cached is let go of (the file is opened a second time:
  /// ~0.1 ms, ~2.3 MB less for a rank file of 148 tensors). kOnePass: reads each tensor once
  /// and then closes the store (a proof, a verify): the cache is kept, no second open.
  enum class OpenFor { kReads, kOnePass };
  static Result<std::unique_ptr<H5Store>> Open(const std::string& path,
                                               OpenFor use = OpenFor::kReads);
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
  Result<Fingerprint> FingerprintRegion(size_t i, const Region& r,
                                        CpuOptions o = {}) const override;

  const StoredTensor& stored(size_t i) const { return stored_.at(i); }
  /// Why tensor i cannot be read (a named kCorrupt or kUnsupported error naming the file and
  /// tensor), or OK: a dense tensor whose objects failed Open's checks. Its record is the
  /// index's; stored(i) then holds only `dense`, `dataset` and `stored_bytes`, and it has no
  /// chunk-info table.
  const Status& Damage(size_t i) const { return damage_.at(i); }
  uint64_t root_seed() const override { return seed_; }
  Generator generator() const override { return generator_; }
  bool seedstore_format() const override { return true; }
  /// Stored-chunk access (io/stored_chunks.h): a dense tensor is one part, the whole tensor,
  /// held by this store (PartStore hands out this store, not owned).
  const StoredChunks* stored_chunks() const override { return this; }
  std::vector<StoredPart> StoredParts(size_t i) const override;
  Result<std::pair<std::shared_ptr<const H5Store>, size_t>> PartStore(size_t i,
                                                                      int piece) const override;
  /// ProveStored(i) when tensor i has a chunk-info table and is no piece (its table is then in
  /// the global frame, whatever `r` is: a store's pieces are whole tensors); else nullopt.
  Result<std::optional<Fingerprint>> ProveStoredPiece(size_t i, const Region& r, bool cells,
                                                      CpuOptions o, size_t hint) const override;
  std::optional<int> shard_rank() const override { return rank_; }
  /// The file's format version: kStoreFormatVersion, or kCellsFormatVersion for a rank file
  /// whose pieces are packed into cell sets (docs/FORMAT.md 11).
  int format_version() const { return version_; }
  /// File size in bytes.
  uint64_t file_bytes() const { return file_bytes_; }
  /// kStore, the file's size, and per tensor its stored record. Errors: a listed tensor whose
  /// objects are damaged (Damage(i)).
  Result<StorageSummary> Storage(const std::vector<size_t>& listed) const override;
  /// Whether the file is a distributed save's master (FileIsDistributedMaster, io/rank_files.h):
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
  /// Reads of a tensor (or a version 2 piece: its cells) of at most this many chunks open no
  /// dataset: Open records where its chunks are (when it reads chunks with pread). A 256-rank
  /// reshard's proof reopened 37,888 datasets, each already opened by Open's checks, for their
  /// chunk addresses.
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
  Status ForEachChunkIn(
      size_t i, const Region& box, CpuOptions o,
      const std::function<Status(const ChunkWhere& where, uint64_t j, const uint64_t* is,
                                 const uint64_t* ie, ChunkScratch& s, int th)>& f) const;
  // Decodes chunk j of dense tensor i (its box clipped to the tensor, packed row-major) into
  // `out`, checking its checksum and, with `check_info`, its chunk-info stored hash; s.raw
  // keeps the stored bytes, *mask (when not null) their filter mask.
  Status DecodeChunk(const ChunkWhere& where, size_t i, uint64_t j, std::vector<uint8_t>* out,
                     ChunkScratch& s, bool check_info, unsigned* mask) const;
  // Dense tensor i's dataset (ShareHid: closed when the last holder lets go), for its chunk
  // addresses. Open checks every dataset and closes it (an open one costs ~12 KB of HDF5 state: a
  // store's tensors, or a distributed save's rank files, would hold them all); calls that read
  // chunks open theirs here, and the kOpenDatasets used last stay open for the next. Thread-safe
  // (the HDF5 lock).
  Result<std::shared_ptr<const Hid>> Dataset(size_t i) const;
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
  std::optional<int> rank_;            // the index's "rank"
  int version_ = kStoreFormatVersion;  // format_version()
  std::vector<TensorRecord> records_;
  std::vector<StoredTensor> stored_;
  mutable std::vector<std::pair<std::string, std::shared_ptr<const Hid>>>
      open_;  // Dataset(), by dataset path: least recent first
  std::vector<std::vector<uint64_t>> checksums_;
  std::vector<std::vector<ChunkInfo>> info_;    // chunk-info tables (empty when absent)
  std::vector<std::vector<ChunkLoc>> located_;  // where the chunks are (kLocatedChunks; else empty)
  std::vector<Status> damage_;                  // Damage(i)
};

}  // namespace seedstore
