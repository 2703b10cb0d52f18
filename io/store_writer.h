// StoreWriter: writes a new seedstore store atomically (a temporary file next to the
// destination, renamed over it on Commit(); until then the previous file is untouched,
// invariant I5). Lazy tensors become index records; dense tensors are chunked, shuffled and
// compressed on worker threads and written in chunk order (docs/FORMAT.md 4).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/store_format.h"
#include "io/store_reader.h"
#include "store/catalog.h"
#include "store/layout.h"

namespace seedstore {

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
  /// Whether chunks of a tensor stored as `s` can be copied as stored into tensor `name` of
  /// `dtype` this writer adds: chunked, with the filter pipeline (FilterPipeline) and zstd
  /// level this writer uses for it.
  bool CopiesChunksOf(const StoredTensor& s, const std::string& name, DType dtype) const;
  /// The same for a writer that would be created with `options`.
  static bool CopiesChunksOf(const StoredTensor& s, const std::string& name, DType dtype,
                             const WriteOptions& options);
  /// Chunks written so far: copied as stored (AddDense raw chunks, CopyFrom) or encoded, and
  /// the dense tensors' bytes on disk (each record's stored_bytes, docs/FORMAT.md 4.1).
  struct ChunkCounts {
    uint64_t copied = 0, encoded = 0, stored_bytes = 0;
  };
  ChunkCounts chunk_counts() const;
  /// The fingerprint recorded for the last dense tensor added (zero before the first).
  Fingerprint last_dense_fingerprint() const;
  /// Where the last dense tensor added lies, when it went into a cell set (WriteOptions::cells);
  /// nullopt otherwise.
  std::optional<PieceCells> last_dense_cells() const;
  /// The options this writer was created with (zstd_level clamped as it writes).
  const WriteOptions& options() const;
  /// Records the layout rank whose shards the store's pieces are (the index's "rank",
  /// Catalog::shard_rank); none by default.
  void SetShardRank(std::optional<int> rank);
  /// Copies tensor `i` of `src` unchanged: lazy record, or dense chunks as stored (no
  /// recompression).
  Status CopyFrom(const H5Store& src, size_t i);
  /// Writes the index, closes the file, fsyncs and renames it over the destination. When
  /// given, `before_rename(temp)` runs between the close and the fsync, on the closed
  /// temporary file (its path): what it adds to the file (the distributed save's master
  /// objects, io/master_vds.h) is made durable and renamed with it. Its error fails the
  /// commit; the temporary is then removed and the destination left untouched.
  Status Commit(const std::function<Status(const std::string& temp)>& before_rename = {});
  /// Commit of several stores at once (a process's rank files): each is written and closed in
  /// turn, then they are made durable and renamed together (AtomicFile::CommitAll: their
  /// fsyncs overlap, one fsync per folder). Errors as Commit's; none of them is in place
  /// unless all their fsyncs succeeded.
  static Status CommitAll(const std::vector<std::unique_ptr<StoreWriter>>& writers);
  const std::string& path() const;

 private:
  StoreWriter() = default;
  // Commit up to the closed temporary file: tables, index, flush, close.
  Status Finish();
  // Both AddDense overloads: `whole`, when not null, holds the whole tensor (as above) and
  // contiguous chunks are read from it in place; other chunks come from `source`.
  Status AddDenseFrom(const std::string& name, const std::vector<uint64_t>& shape, DType dtype,
                      const BoxSource& source, const uint8_t* whole,
                      std::function<void(uint64_t)> progress, const DenseChunking& chunking);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seedstore
