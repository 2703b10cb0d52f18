// The seedstore store format's shared vocabulary: its version and filter ids, the named format
// errors, the options a store is written with, and what a store records of a dense tensor and
// of each chunk. The format itself (normative): docs/FORMAT.md; the layout of a store file is
// summarized in io/store_reader.h.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "store/catalog.h"
#include "store/layout.h"

namespace seedstore {

/// Format version of a one-file store (and of a version 1 rank file), docs/FORMAT.md 9.
constexpr int kStoreFormatVersion = 1;
/// Format version of a rank file whose pieces are packed into cell sets (docs/FORMAT.md 11),
/// what distributed saves are written as. This build reads both versions.
constexpr int kCellsFormatVersion = 2;
/// HDF5 filter ids in a dense tensor's pipeline.
constexpr int kH5FilterShuffle = 2;
constexpr int kH5FilterZstd = 32015;

/// Named format errors; each message starts with "<name>: ".
enum class StoreError {
  kNotHdf5,              // "not-hdf5" (kCorrupt): no HDF5 superblock signature
  kTruncated,            // "truncated" (kCorrupt): the file ends before HDF5's end-of-allocation
  kBadMagic,             // "bad-magic" (kCorrupt): seedstore.format is not "seedstore"
  kUnsupportedVersion,   // "unsupported-version" (kUnsupported)
  kMissingAttribute,     // "missing-attribute" (kCorrupt)
  kMissingObject,        // "missing-object" (kCorrupt): a dataset named by the index is absent
  kBadIndex,             // "bad-index" (kCorrupt): index JSON malformed or its checksum wrong
  kShapeMismatch,        // "shape-mismatch" (kCorrupt): dataset shape differs from its record
  kDtypeMismatch,        // "dtype-mismatch" (kCorrupt)
  kUnknownFilter,        // "unknown-filter" (kUnsupported): a filter other than shuffle/zstd
  kChunkCorrupt,         // "chunk-corrupt" (kCorrupt): checksum mismatch or undecodable chunk
  kFingerprintMismatch,  // "fingerprint-mismatch" (kCorrupt)
  kBadLayout,            // "bad-layout" (kCorrupt): a storage layout the format does not allow
  kTableCorrupt,     // "table-corrupt" (kCorrupt): a checksum or chunk-info table fails its hash
  kMetadataCorrupt,  // "metadata-corrupt" (kCorrupt): HDF5 cannot read an object's metadata
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
  int zstd_level = 1;               // kMinZstdLevel..kMaxZstdLevel (others: clamped)
  uint64_t chunk_bytes = 1u << 20;  // target uncompressed chunk size
  int threads = 0;                  // compression threads (0 = all cores)
  bool shuffle = true;              // byte-shuffle (HDF5 filter 2) before zstd
  /// Codec none (`--codec none`, docs/FORMAT.md 4.2): dense tensors whose names match one of
  /// these globs (GlobMatch; a distributed save's pieces by their tensor's name) are chunked
  /// with no filters -- bigger files, page-cache reads at copy speed. Others get shuffle + zstd.
  std::vector<std::string> uncompressed;
  /// Permissions of a new file (-1: 0644 less the umask); a replaced file keeps its own
  /// (AtomicFile::Create).
  int file_mode = -1;
  /// Pack pieces into cell sets (docs/FORMAT.md 11): the file is a version 2 rank file, whose
  /// chunked pieces (DenseChunking::piece) are cells of a few shared datasets instead of one
  /// dataset each. Distributed saves' rank files are written so.
  bool cells = false;
  /// Bytes reserved at the file's start for the caller: an HDF5 user block, which HDF5 and
  /// every reader skip (0, or a power of 2 >= 512). A distributed save's master keeps its seal
  /// there (docs/FORMAT.md 10).
  uint64_t user_block = 0;
  /// Remove what dead writers on this host left of the same path before creating the file
  /// (AtomicFile::Create). A distributed save's rank files do without: their names are new to
  /// each save, and its commit collects what interrupted saves left (docs/FORMAT.md 10); a
  /// scan of the folder per file would cost O(files) each.
  bool remove_stale_temporaries = true;
};

/// The HDF5 filter ids, in pipeline order, of chunked dense tensor `name` of dtype `dtype`
/// written with `o` (docs/FORMAT.md 4.2): shuffle (when o.shuffle and the elements have more
/// than one byte), then zstd; none when `name` is one of o.uncompressed.
std::vector<int> FilterPipeline(const WriteOptions& o, const std::string& name, DType dtype);

/// Where a dense tensor's elements come from while writing: fills `out` with the elements of
/// `box` (row-major). Called concurrently from several threads with disjoint boxes.
using BoxSource = std::function<Status(const Region& box, void* out)>;

/// Storage details of one tensor of an open store.
struct StoredTensor {
  bool dense = false;
  uint64_t stored_bytes = 0;    // bytes on disk (compressed chunks + checksum table)
  std::vector<uint64_t> chunk;  // chunk shape (empty: contiguous, one "chunk")
  uint64_t num_chunks = 0;
  std::vector<int> filters;  // HDF5 filter ids, pipeline order
  int zstd_level = 0;        // the zstd filter's cd_values[0] (0: no zstd filter)
  std::string dataset;       // HDF5 path of the data ("" for lazy)
  /// A piece of a version 2 rank file (docs/FORMAT.md 11): its chunk j is cell first_cell + j
  /// of the cell set `dataset` (/cells/<cell_set>), which holds `set_cells` cells. -1: the
  /// tensor has a dataset of its own, chunk j at its chunk-grid origin.
  int cell_set = -1;
  uint64_t first_cell = 0, set_cells = 0;
  /// How many chunks the dataset's chunk index holds: num_chunks, or the set's cells.
  uint64_t index_chunks() const { return cell_set >= 0 ? set_cells : num_chunks; }
};

/// Where chunk j of a dense tensor stored as `s` lies in its dataset, HDF5's chunk offset
/// (`off`, one entry per dataset dim; returns their count): the chunk-grid origin of chunk j,
/// whose grid coordinates are `coords` (chunk shape s.chunk), or [first_cell + j, 0, ..., 0]
/// for a cell.
int ChunkOffset(const StoredTensor& s, uint64_t j, const uint64_t* coords, int rank,
                unsigned long long* off);

/// Where a version 2 rank file's piece lies (docs/FORMAT.md 11): cells first, first + 1, ... of
/// cell set `set` (/cells/<set>), of chunk shape `chunk`.
struct PieceCells {
  int set = 0;
  uint64_t first = 0;
  std::vector<uint64_t> chunk;
  bool operator==(const PieceCells& o) const {
    return set == o.set && first == o.first && chunk == o.chunk;
  }
};

/// The HDF5 groups of a version 2 rank file's cell sets and their tables (docs/FORMAT.md 11).
constexpr const char* kCellsGroup = "/cells";
constexpr const char* kCellSumsGroup = "/cellsums";
constexpr const char* kCellInfoGroup = "/cellinfo";

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
  std::vector<uint8_t> data;  // the chunk's elements inside the tensor (its box clipped to
                              // the tensor), row-major, decoded from `bytes` and verified
                              // against `checksum`; empty when read without decoding
};

/// The attribute holding a checksum or chunk-info table's own hash (docs/FORMAT.md 4.3).
constexpr const char* kTableHashAttr = "seedstore.xxh3";
/// A table's own hash: XXH3-64 of its entries as little-endian bytes.
uint64_t TableHash(const std::vector<uint64_t>& entries);

/// Escapes a tensor name into one HDF5 link name: '%' -> "%25", '/' -> "%2F", and a name made
/// only of dots has every '.' -> "%2E".
std::string EscapeH5Name(const std::string& name);

}  // namespace seedstore
