// Reading a distributed save (docs/FORMAT.md 10; the files of one are summarized in
// io/dist_store.h): DistCatalog opens its master and reads each dense tensor through the rank
// files holding its pieces (io/dist_catalog.cc), and verifies the whole save (io/dist_verify.cc).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/store_reader.h"
#include "io/stored_chunks.h"
#include "store/catalog.h"
#include "store/layout.h"

namespace seedstore {

/// A distributed save opened for reading. Lazy tensors come from the master; a dense tensor's
/// Read opens (once, lazily) and reads only the rank files whose pieces intersect the region,
/// through H5Store, so every chunk read is checksum-verified.
///
/// Errors (named, message "<name>: distributed save '<P>' rank R file '<F>': ..."):
///   rank-file-missing (kNotFound) at Open (or, without Open's check, at the first read of
///   it) when a rank file the index names does not exist; rank-file-unreadable (kIo) when it
///   cannot be reached or opened (a symbolic link loop, too many open files);
///   rank-file-corrupt (the inner error's code) when a rank file fails to open, lacks a piece
///   or holds it with another shape or dtype, or a chunk fails its checksum;
///   bad-index (kCorrupt) for a malformed or tampered /distributed/index.
class DistCatalog : public Catalog, public StoredChunks {
 public:
  /// A piece of a dense tensor: the elements rank `rank` serves, and how its rank file holds
  /// them. A reader holds every piece of the save (740,352 for Llama-3-70B over 1,024 ranks),
  /// so a piece keeps its coordinates in one small array rather than in `Region`s (416 bytes
  /// each, room for 16 dims): 80 bytes and a 32-byte array for a 1-D flat piece with cells.
  class Piece {
   public:
    Piece() = default;
    /// A piece of `rank` serving `region` (global indices: a box or a flat range), stored as
    /// it is, without cells.
    Piece(int rank, const Region& region);
    int rank = 0;
    /// The elements this piece serves, in global indices.
    Region region() const;
    bool flat() const { return flat_; }  // region() is a flat range
    /// The global box its rank file stores: region(), or a padded box around it (docs/FORMAT.md
    /// 10, "Padded pieces"): the rank file's tensor has this box's shape and piece record.
    Region stored() const;
    bool padded() const { return stored_len_ != 0; }
    /// Sets stored(): a region of the same global shape as region() that holds it.
    void set_stored(const Region& s);
    /// The elements region() serves (its Count()), without building it.
    uint64_t Count() const;
    /// Whether region() is a box holding global index `x` (one coordinate per dim).
    bool BoxHolds(const uint64_t* x) const;
    /// In a version 2 save, where the piece's chunks lie in its rank file when they are cells
    /// (docs/FORMAT.md 11): the rank file's record must say the same.
    std::optional<PieceCells> cells() const;
    bool has_cells() const { return cell_set_ >= 0; }
    /// Sets cells() (nullopt: none). Precondition: c->set >= 0, c->chunk at most 16 dims.
    void set_cells(const std::optional<PieceCells>& c);
    /// The fingerprint the rank file records for it (its stored() box, in the global frame),
    /// when the index gives one (docs/FORMAT.md 9): a rank file whose record differs is not
    /// this save's (rank-file-corrupt at open).
    std::optional<Fingerprint> fingerprint;

   private:
    // c_: the global shape (dims_ values), then region()'s [begin, end] (flat) or start and
    // stop (a box); then stored()'s, when padded (stored_len_ values, stored_flat_ saying
    // which); then the cells' chunk shape (chunk_len_ values).
    std::vector<uint64_t> c_;
    uint8_t dims_ = 0, stored_len_ = 0, chunk_len_ = 0;
    bool flat_ = false, stored_flat_ = false;
    int32_t cell_set_ = -1;  // -1: no cells
    uint64_t first_cell_ = 0;
    Region At(size_t off, bool flat) const;
  };
  /// Opens the save at `path` (its master). With `check_rank_files`, every rank file the index
  /// names must be reachable (rank-file-missing / rank-file-unreadable otherwise); without,
  /// that is left to the reads and to Verify, which then report every unreachable rank file
  /// with the tensors it leaves unchecked, and check the others (`seedstore verify`).
  static Result<std::unique_ptr<DistCatalog>> Open(const std::string& path,
                                                   bool check_rank_files = true);
  ~DistCatalog() override;

  const std::vector<TensorRecord>& tensors() const override { return records_; }
  std::string origin() const override { return path_; }
  Status Read(size_t i, const Region& r, void* out, CpuOptions o = {}) const override;
  /// Fingerprint of a box or flat range, from the data: each box piece's part is hashed by its
  /// rank file's store chunk by chunk (H5Store::FingerprintRegion; no buffer of the region's
  /// size); a flat piece's part is read and hashed. Errors as Read.
  Result<Fingerprint> FingerprintRegion(size_t i, const Region& r,
                                        CpuOptions o = {}) const override;

  /// The non-empty pieces of dense tensor i (empty for lazy tensors).
  const std::vector<Piece>& pieces(size_t i) const { return pieces_.at(i); }
  int world() const { return static_cast<int>(rank_files_.size()); }
  const std::vector<std::string>& rank_files() const { return rank_files_; }  // full paths
  const Layout& layout() const { return layout_; }
  /// The fingerprint (global frame) of what piece p of dense tensor i stores beyond its region:
  /// the padding of a padded piece, decoded from its rank file -- or, with `from_owners`, the
  /// same elements as the pieces owning them hold (zero for an unpadded piece). Read one
  /// chunk of p's grid at a time (memory: a chunk per thread). Errors as Read.
  Result<Fingerprint> PaddingFingerprint(size_t i, size_t p, CpuOptions o = {},
                                         bool from_owners = false) const;
  /// The chunk shape of piece p of dense tensor i when its rank file stores whole cells of
  /// the tensor's global chunk grid: chunked, with a chunk-info table in the global frame, its
  /// stored box starting on multiples of the chunk shape and stopping on them or at the
  /// tensor's end. Empty otherwise (flat pieces included). Errors as Read.
  Result<std::vector<uint64_t>> PieceGrid(size_t i, size_t p) const;
  /// The proof of piece p of dense tensor i by cells, when every piece of the tensor stores
  /// whole cells of one global chunk grid (PieceGrid equal for all; the caller checks): every
  /// stored chunk's bytes checked against the chunk-info table (H5Store::ProveStored), and the
  /// sum of the table fingerprints of the chunks whose first element p owns. Those cells,
  /// over all pieces, are the grid's cells, each once. Each other chunk p stores (a cell its
  /// padding shares with the piece owning the cell's first element) must have the owner's
  /// fingerprint for that cell (padding-mismatch otherwise): so every stored copy of every cell
  /// is proven, without decoding any.
  Result<Fingerprint> ProveCells(size_t i, size_t p, CpuOptions o = {}) const;
  /// How many rank files are open now: reads open only those they need and keep at most
  /// max_open_rank_files() of them open (the least recently used is closed first, once no
  /// reading thread holds it); Verify and StorageOfAll open each in turn and close it.
  size_t open_rank_files() const;
  /// Reads keep at most this many rank files open, so that a process reads a save of any
  /// world size whatever its limit on open files (`ulimit -n`; HDF5 holds one descriptor and
  /// ~1 MB per open file). Default, at Open: half the process's soft limit on open files
  /// (the other half left to the rest of the process), at most 4096. A read that needs more
  /// reopens them (~1 ms each). At least 1.
  size_t max_open_rank_files() const { return max_open_; }
  void set_max_open_rank_files(size_t n);
  /// Closes rank `rank`'s file if open (a reader still holding it keeps it until it is done):
  /// for a reader going file by file that is done with this one, so that memory stays that of
  /// the few files in use (~1 MB each) however many files the save has.
  void CloseRankFile(int rank) const;
  /// Rank files opened from now on are for one pass each (H5Store::OpenFor::kOnePass: the
  /// metadata their open checked stays cached, no second open): for a reader that goes file by
  /// file and closes each (CloseRankFile) when done with it. Default false.
  void set_rank_files_read_once(bool once) { read_once_ = once; }
  /// Chunks and bytes on disk (compressed chunks and their tables) of a dense tensor, over all
  /// its pieces.
  struct StoredTotals {
    uint64_t chunks = 0, stored_bytes = 0;
  };
  /// Storage of every tensor (zero for lazy ones), as the index records it (docs/FORMAT.md 10);
  /// for a save whose index does not (written before it did), counted from the rank files,
  /// opened one at a time and closed again: memory O(one rank file), however many there are.
  /// Errors as Read.
  Result<std::vector<StoredTotals>> StorageOfAll() const;
  /// kDistributed, the world, and per dense tensor its totals and pieces. Errors as StorageOfAll.
  Result<StorageSummary> Storage(const std::vector<size_t>& listed) const override;
  /// The store holding piece p of dense tensor i (its rank file, opened on first use) and the
  /// tensor's index there. Errors as Read (rank-file-missing, rank-file-corrupt). Thread-safe.
  /// The store is shared: it stays open while the caller holds it, even if closed here to
  /// respect max_open_rank_files().
  Result<std::pair<std::shared_ptr<const H5Store>, size_t>> PieceStore(size_t i, size_t p) const;
  /// Verifies the whole save: the master and every rank file as H5Store::Verify does (every
  /// chunk's checksum and chunk-info entry, every fingerprint recomputed), that each rank file
  /// holds its pieces as the index says (rank-file-missing, rank-file-corrupt), and that the
  /// recomputed fingerprints of every dense tensor's pieces add up to the index's fingerprint
  /// (fingerprint-mismatch naming the save and tensor; invariant I4), and that the master's own
  /// HDF5 objects under /tensors -- what h5py and other HDF5 readers read -- are exactly those
  /// the writer makes from the index (vds-mismatch, kCorrupt, naming the save, the tensor and
  /// what differs; docs/FORMAT.md 10):
  ///   * each dense tensor with elements and rank >= 1 (in a save whose index maps flat pieces
  ///     by "runs", the old way, but for one whose flat pieces need more than 65536) has
  ///     /tensors/<escaped name>, a hard-linked virtual dataset of the tensor's shape, an HDF5 type
  ///     storing its dtype (as H5Store::Open checks), attributes seedstore.name, seedstore.dtype
  ///     and seedstore.fingerprint equal to the index's, and the mappings, in order, that the
  ///     writer derives from the index's pieces (source file the rank file's base name, source
  ///     dataset the same path, virtual box the piece's region or a box (or run) of its flat range,
  ///     source box its place in the stored box);
  ///   * a dense scalar has a plain scalar dataset (shape, type and attributes as above) whose
  ///     bytes are the value its piece holds;
  ///   * nothing else lies under /tensors (no dataset for lazy or element-less tensors, or for
  ///     names the index does not list as dense).
  /// The report's `fingerprints` follow tensors() (a dense tensor's is the sum over its pieces);
  /// problems name the file they were found in. Continues past problems.
  H5Store::VerifyReport Verify(CpuOptions o = {},
                               std::function<void(uint64_t)> progress = {}) const;
  uint64_t root_seed() const override { return master_->root_seed(); }
  Generator generator() const override { return master_->generator(); }
  bool seedstore_format() const override { return true; }
  /// The rank files.
  std::vector<std::string> other_files() const override { return rank_files_; }
  /// Stored-chunk access (io/stored_chunks.h): a dense tensor's parts are its box pieces, held
  /// by the rank files (PartStore is PieceStore; PartError names the rank file,
  /// rank-file-corrupt).
  const StoredChunks* stored_chunks() const override { return this; }
  std::vector<StoredPart> StoredParts(size_t i) const override;
  Result<std::pair<std::shared_ptr<const H5Store>, size_t>> PartStore(size_t i,
                                                                      int piece) const override;
  Status PartError(size_t i, int piece, const Status& st) const override;
  /// For the piece whose region is `r`: by cells (ProveCells) with `cells`; else, when its rank
  /// file records it as a piece of this save with a chunk-info table, that file's ProveStored
  /// less the padding it stores beyond r (PaddingFingerprint, decoded); else nullopt.
  Result<std::optional<Fingerprint>> ProveStoredPiece(size_t i, const Region& r, bool cells,
                                                      CpuOptions o, size_t hint) const override;

 private:
  DistCatalog() = default;
  // Rank `rank`'s store, opened on first use and kept among the max_open_ used last; errors
  // name the rank file (and `tensor`, when given: the tensor being read).
  Result<std::shared_ptr<const H5Store>> RankStore(int rank, const std::string& tensor = "") const;
  // Rank `rank`'s store opened anew (not kept), checked to hold its pieces as the index says.
  Result<std::unique_ptr<H5Store>> OpenRank(int rank, const std::string& tensor = "",
                                            H5Store::OpenFor use = H5Store::OpenFor::kReads) const;
  Status ReadBox(size_t i, const Region& box, unsigned char* out, CpuOptions o) const;
  // Verify's check of the master's datasets under /tensors against the index (as the writer
  // makes them: MasterDatasetOf in io/master_vds.h): vds-mismatch problems, per tensor and then
  // those of links that name no tensor. It takes the HDF5 lock a dataset at a time, so that it
  // can run beside the rank files' checks. A scalar dataset's value, which needs its piece
  // read, is compared afterwards (CompareMasterScalars).
  struct MasterCheck {
    std::vector<std::vector<H5Store::Problem>> tensor;  // by tensor index
    std::vector<H5Store::Problem> other;
    std::vector<size_t> scalars;  // scalar datasets fit to compare with their piece's value
  };
  MasterCheck CheckMasterDatasets() const;
  // Compares each of check->scalars with its piece's value, unless bad[i] (tensor i's pieces
  // could not all be read); a difference goes to check->tensor[i].
  void CompareMasterScalars(const std::vector<bool>& bad, MasterCheck* check) const;
  // A vds-mismatch problem of `tensor` ("" for none): "master <what>".
  H5Store::Problem VdsProblem(const std::string& tensor, const std::string& what) const;
  std::string path_;
  std::unique_ptr<H5Store> master_;
  Layout layout_;
  std::vector<TensorRecord> records_;
  std::vector<std::vector<Piece>> pieces_;
  // Per rank, its pieces (tensor i, piece p of pieces_[i]) in tensor order: what a rank file
  // holds, found without a pass over every piece of the save (740,000 at 1,024 ranks).
  struct PieceAt {
    uint32_t i, p;
  };
  std::vector<std::vector<PieceAt>> by_rank_;
  // The record of rank file `s` for tensor `name`: record *hint when it is that (a writer
  // stores a rank's pieces in tensor order, so the one after the last found is tried first),
  // else found by name (-1: none); *hint becomes the record after it.
  static int FindRecord(const H5Store& s, const std::string& name, size_t* hint);
  std::vector<std::optional<StoredTotals>> storage_;  // per tensor, from the index (none: not
                                                      // recorded)
  int version_ = kStoreFormatVersion;  // the index's "version" (docs/FORMAT.md 9, 11)
  bool flat_boxes_ = false;  // the index's flat_mappings: "boxes" (else "runs", docs/FORMAT.md 10)
  std::vector<std::string> rank_files_;
  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<const H5Store>> rank_stores_;
  mutable std::vector<uint64_t> last_used_;  // per rank: use_clock_ at its last RankStore
  mutable uint64_t use_clock_ = 0;
  size_t max_open_ = 64;
  std::atomic<bool> read_once_{false};
};

}  // namespace seedstore
