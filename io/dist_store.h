// Distributed saves: one ordinary seedstore store per rank holding that
// rank's distinct shards of the dense tensors, plus a master store that keeps the lazy tensors
// as lazy records, an index of every dense tensor's pieces, and one HDF5 virtual dataset per
// dense tensor stitching the pieces so any HDF5 reader (h5py included) sees the global tensor.
// Normative description: docs/FORMAT.md, "Distributed saves". Summary, for a save at P:
//
//   P                     master: an ordinary store (lazy tensors) + /distributed/index (JSON)
//                         + /tensors/<escaped> virtual datasets of the dense tensors
//   P.<id>.rank<r>.h5     rank r's file: ordinary store; its distinct shard of each dense
//                         tensor as a dense tensor of the same name and the local shape of the
//                         shard's stored box (the shard, or padded to the source's chunk grid so
//                         its chunks are copied, not re-encoded; readers ignore the padding),
//                         recorded as a piece (TensorRecord::piece: fingerprints in the global
//                         tensor's frame, so the pieces of any layout add up to the tensor's,
//                         padding taken out)
//   P.lock                the writer lock: rank 0 of the writer holds an OFD write lock on it
//                         while it saves (the kernel drops it when the writer ends, however it
//                         ends); holds "pid <pid> on <host>" of that rank 0
//   P.<id>.new|commit|veto  the commit protocol's files of save <id> (staged master, its gate,
//                         a veto), present while it commits or left by an interrupted save
//
// <id> is 8 hex digits, new for every save, so writing a save never touches the files of the
// save it replaces until the new master has been renamed over P (the commit point, after the
// proof); then the old rank files are removed. Every file is written atomically
// (io/atomic_file.h). The protocol, as states and who may remove what: docs/FORMAT.md 10.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io/collective.h"
#include "io/h5_util.h"
#include "io/h5store.h"
#include "store/catalog.h"
#include "store/layout.h"
#include "store/verify.h"

namespace seedstore {

/// Whether `path` is an HDF5 file that is a distributed-save master: its root carries the
/// attribute seedstore.role = "distributed-master" (docs/FORMAT.md 10), or, for masters
/// written before that attribute, /distributed/index exists -- or HDF5 cannot tell whether
/// /distributed exists (damaged links): such a file is not taken for an ordinary store holding
/// only its lazy tensors, DistCatalog::Open names what is wrong with it. A file that starts
/// with a master's seal, intact or damaged (CheckMasterSeal, io/h5_util.h), is one without HDF5
/// reading a byte of it.
bool IsDistributedSave(const std::string& path);

/// The root seed and default generator of a catalog (spec, store, distributed save, or the
/// buffers SaveBuffers writes: DistSaveOptions'); 0 and threefry for other catalogs.
void RootSeedOf(const Catalog& c, uint64_t* seed, Generator* generator);

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
class DistCatalog : public Catalog {
 public:
  struct Piece {
    int rank = 0;
    Region region;  // global indices (box or flat range): the elements this piece serves
    /// Global box its rank file stores: `region`, or a padded box around it (docs/FORMAT.md
    /// 10, "Padded pieces"): the rank file's tensor has this box's shape and piece record.
    Region stored;
    /// The fingerprint the rank file records for it (its `stored` box, in the global frame),
    /// when the index gives one (docs/FORMAT.md 9): a rank file whose
    /// record differs is not this save's (rank-file-corrupt at open).
    std::optional<Fingerprint> fingerprint;
  };
  /// Opens the save at `path` (its master). With `check_rank_files`, every rank file the index
  /// names must be reachable (rank-file-missing / rank-file-unreadable otherwise); without,
  /// that is left to the reads and to Verify, which then report every unreachable rank file
  /// with the tensors it leaves unchecked, and check the others (`seedstore verify`).
  static Result<std::unique_ptr<DistCatalog>> Open(const std::string& path, bool check_rank_files = true);
  ~DistCatalog() override;

  const std::vector<TensorRecord>& tensors() const override { return records_; }
  std::string origin() const override { return path_; }
  Status Read(size_t i, const Region& r, void* out, CpuOptions o = {}) const override;
  /// Fingerprint of a box or flat range, from the data: each box piece's part is hashed by its
  /// rank file's store chunk by chunk (H5Store::FingerprintRegion; no buffer of the region's
  /// size); a flat piece's part is read and hashed. Errors as Read.
  Result<Fingerprint> FingerprintRegion(size_t i, const Region& r, CpuOptions o = {}) const override;

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
  /// reading thread holds it); Verify and Storage open each in turn and close it.
  size_t open_rank_files() const;
  /// Reads keep at most this many rank files open, so that a process reads a save of any
  /// world size whatever its limit on open files (`ulimit -n`; HDF5 holds one descriptor and
  /// ~0.5 MB per open file). Default, at Open: half the process's soft limit on open files
  /// (the other half left to the rest of the process), at most 4096. A read that needs more
  /// reopens them (~10 ms each). At least 1.
  size_t max_open_rank_files() const { return max_open_; }
  void set_max_open_rank_files(size_t n);
  /// Chunks and bytes on disk (compressed chunks and their tables) of a dense tensor, over all
  /// its pieces.
  struct Storage {
    uint64_t chunks = 0, stored_bytes = 0;
  };
  /// Storage of every tensor (zero for lazy ones), as the index records it (docs/FORMAT.md 10);
  /// for a save whose index does not (written before it did), counted from the rank files,
  /// opened one at a time and closed again: memory O(one rank file), however many there are.
  /// Errors as Read.
  Result<std::vector<Storage>> StorageOfAll() const;
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
  ///     by "runs", the old way, but for one whose flat pieces need more than 65536) has /tensors/<escaped name>, a hard-linked virtual dataset of the
  ///     tensor's shape, an HDF5 type storing its dtype (as H5Store::Open checks), attributes
  ///     seedstore.name, seedstore.dtype and seedstore.fingerprint equal to the index's, and
  ///     the mappings, in order, that the writer derives from the index's pieces (source file
  ///     the rank file's base name, source dataset the same path, virtual box the piece's
  ///     region or a box (or run) of its flat range, source box its place in the stored box);
  ///   * a dense scalar has a plain scalar dataset (shape, type and attributes as above) whose
  ///     bytes are the value its piece holds;
  ///   * nothing else lies under /tensors (no dataset for lazy or element-less tensors, or for
  ///     names the index does not list as dense).
  /// The report's `fingerprints` follow tensors() (a dense tensor's is the sum over its pieces);
  /// problems name the file they were found in. Continues past problems.
  H5Store::VerifyReport Verify(CpuOptions o = {}, std::function<void(uint64_t)> progress = {}) const;
  uint64_t root_seed() const { return master_->root_seed(); }
  Generator generator() const { return master_->generator(); }

 private:
  DistCatalog() = default;
  // Rank `rank`'s store, opened on first use and kept among the max_open_ used last; errors
  // name the rank file (and `tensor`, when given: the tensor being read).
  Result<std::shared_ptr<const H5Store>> RankStore(int rank, const std::string& tensor = "") const;
  // Rank `rank`'s store opened anew (not kept), checked to hold its pieces as the index says.
  Result<std::unique_ptr<H5Store>> OpenRank(int rank, const std::string& tensor = "") const;
  Status ReadBox(size_t i, const Region& box, unsigned char* out, CpuOptions o) const;
  // Verify's check of the master's datasets under /tensors against the index (as the writer
  // makes them: MasterDatasetOf in io/dist_store.cc); appends vds-mismatch problems. bad[i]:
  // tensor i's pieces could not all be read (a scalar's value is then not compared).
  void VerifyMasterDatasets(const std::vector<bool>& bad, std::vector<H5Store::Problem>* problems) const;
  std::string path_;
  std::unique_ptr<H5Store> master_;
  Layout layout_;
  std::vector<TensorRecord> records_;
  std::vector<std::vector<Piece>> pieces_;
  std::vector<std::optional<Storage>> storage_;
  bool flat_boxes_ = false;  // the index's flat_mappings: "boxes" (else "runs", docs/FORMAT.md 10)  // per tensor, from the index (none: not recorded)
  std::vector<std::string> rank_files_;
  mutable std::mutex mu_;
  mutable std::vector<std::shared_ptr<const H5Store>> rank_stores_;
  mutable std::vector<uint64_t> last_used_;  // per rank: use_clock_ at its last RankStore
  mutable uint64_t use_clock_ = 0;
  size_t max_open_ = 64;
};

struct DistSaveOptions {
  WriteOptions write;
  CpuOptions cpu;
  /// Consolidate: write one ordinary store at the path instead of a distributed save.
  bool consolidate = false;
  /// Testing (--simulate on save-ranks and reshard): process `simulate_rank` hangs, exits or
  /// is killed (kHang, kDie, kKill; SimulateFault in io/collective.h) mid-save, at step
  /// "write rank files": after writing its own rank files, before the job agrees that every
  /// rank file is written -- the new pieces exist, the previous save at the path is still the
  /// one the master names. Distributed saves only (ignored with `consolidate`).
  Simulate simulate = Simulate::kNone;
  int simulate_rank = 1;
  /// The proof's read-back. false (default): every written chunk's stored bytes are read and
  /// checked against its chunk-info hash, and the tables' chunk fingerprints (global frame)
  /// are summed -- no decoding (H5Store::ProveStored). true: every written chunk is decoded,
  /// checked against its checksum and fingerprinted anew (what `verify` does).
  bool full_proof = false;
  /// Padded pieces (docs/FORMAT.md 10): a piece off its source's chunk grid is stored padded
  /// to it when that adds at most this fraction of its elements (then its chunks are copied,
  /// not re-encoded). 0: never pad. Must be >= 0 (kInvalidArgument).
  double max_padding = 0.25;
  /// SaveBuffers: the model's root seed and default generator, recorded in the save's files
  /// as a store records them (docs/FORMAT.md 4.1; `inspect` shows them). Reshard takes its
  /// source's (RootSeedOf) and ignores these.
  uint64_t root_seed = 0;
  Generator generator = Generator::kThreefry;
};

/// One row of the proof: the output tensor's fingerprint, read back from what was written,
/// against the source's.
struct ReshardRow {
  std::string name;
  bool lazy = false;
  size_t pieces = 0;            // non-empty distinct pieces written (0 for lazy)
  uint64_t bytes = 0;           // data bytes written (0 for lazy)
  std::string source_ref;       // "recorded" or "computed"
  /// Chunks written for this tensor: copied as stored from the source (no decode/re-encode,
  /// the source chunk's checksum verified) or encoded anew.
  uint64_t chunks_copied = 0, chunks_encoded = 0;
  Fingerprint source, output;
  bool ok() const { return source == output; }
};

struct ReshardReport {
  std::string path;
  int world = 1;           // output layout's ranks (1 when consolidated)
  int writers = 1;         // processes that wrote
  bool consolidated = false;
  bool full_proof = false;  // DistSaveOptions::full_proof
  /// Whether this save replaced what was at the path (the commit happened; it was proven
  /// first). false with rows that differ (ToStatus): not proven, so not committed.
  bool committed = false;
  /// One per tensor; empty on a rank that learned of the commit only after losing contact with
  /// the others (a timeout after rank 0 committed).
  std::vector<ReshardRow> rows;
  uint64_t bytes = 0;      // data bytes written (dense, uncompressed)
  uint64_t chunks_copied = 0, chunks_encoded = 0;  // sums of the rows'
  double write_s = 0, prove_s = 0, total_s = 0;
  bool ok() const;
  /// One row per tensor, then a summary line.
  std::string Table() const;
  /// OK, or kMismatch naming the first tensors whose fingerprints differ.
  Status ToStatus() const;
};

/// Writes `src` to `path` under `layout` as a distributed save (or one store when
/// o.consolidate) -- where `path` points, when it is a symbolic link (ResolveSymlinks in
/// io/atomic_file.h: master, rank files and lock all go there) -- then proves every tensor: the sum of the fingerprints of its distinct
/// pieces, read back from `path`, must equal the source's recorded (or computed) fingerprint.
/// `comm`'s ranks split the layout's ranks among them in contiguous blocks (process p of P
/// writes ranks [p * world / P, (p + 1) * world / P), and proves their pieces), writing up to 8
/// rank files at once tensor by tensor, small neighbouring pieces cut from one read of the
/// source; every process gets the same report. Rank 0 takes the writer lock
/// "<path>.lock" first: while another live process holds it the writer is refused with
/// "writer-locked" (kIo); a lock file whose writer is gone (killed, or its job ended) is held by
/// nobody and is taken over, with a note on stderr. The proof runs before the commit: the new
/// master is staged ("<path>.<id>.new", sealed and durable) and proven, and only a proven save is
/// committed, by rank 0 renaming it over `path` (docs/FORMAT.md 10, "Commit protocol"). So an OK
/// result with report.committed means `path` holds the new, proven save; a mismatch
/// (report.committed false, ToStatus() kMismatch) or an error means `path` is unchanged. When a
/// rank hangs or dies mid-save the others fail within the collective timeout; a process that
/// gives up before it knows the outcome vetoes the commit, which makes the outcome final and
/// tells it: not committed -- it removes its new files and returns the error; committed -- it
/// returns OK (report.committed, rows possibly empty) and removes nothing. No process ever
/// removes a file the committed master names; the replaced save's files are removed by rank 0
/// once the commit is durable, or by the next save.
/// A fingerprint mismatch is not an error here (nothing is committed): inspect the report (ToStatus()).
///
/// Raw chunk copies: when `src` is a store or a distributed save, an output piece off the
/// chunk grid of the stored source part owning its first element is first padded to that grid
/// when that adds at most o.max_padding (a quarter) of its elements (docs/FORMAT.md 10,
/// "Padded pieces"); a
/// piece whose stored box then starts on that grid (and spans at least one chunk in every
/// dim) is chunked like the source, and each output chunk whose box
/// is exactly a stored source chunk's box, clipped alike (same chunk shape, filter pipeline
/// and zstd level), is copied as stored: its stored bytes are checked against the source's
/// chunk-info hash (a corrupt source chunk fails the save, named) and written with their
/// checksum and chunk fingerprint unchanged -- no decoding -- when the source part's
/// fingerprints are the global tensor's (a store, or rank files written with piece records);
/// otherwise the chunk is decoded, checked against its checksum and fingerprinted. Other
/// chunks are decoded and re-encoded. Rank files record their tensors as pieces
/// (TensorRecord::piece), so their fingerprints add up to the global tensor's. The proof
/// reads back every written chunk (DistSaveOptions::full_proof says how; padded pieces by
/// cells where every piece stores whole cells of one grid: DistCatalog::ProveCells). A source whose
/// records are pieces (a rank file opened alone) is refused (kInvalidArgument).
Result<ReshardReport> Reshard(Exchange& comm, const Catalog& src, const Layout& layout,
                              const std::string& path, const DistSaveOptions& o = {});

/// The live-job save: every rank of `comm` passes the buffers of its own shards
/// (Layout::ShardOf(name, shape, rank).region, row-major; as for VerifyBuffers in
/// io/collective.h, host pointers only) and the job writes a distributed save at `path` in
/// parallel -- each rank its own file, replica index 0 only -- then proves it as Reshard does
/// (the reference being the sum of the owners' buffer fingerprints). Every rank must pass the
/// same names, shapes and dtypes in the same order. The buffers must not change until it
/// returns (each rank's own shard is encoded in place, StoreWriter::AddDense from memory).
/// Errors: kInvalidArgument (layout world size != comm.size(), a buffer of the wrong size,
/// null data, a device buffer), as Reshard.
Result<ReshardReport> SaveBuffers(Exchange& comm, const std::vector<ParamBuffer>& params,
                                  const Layout& layout, const std::string& path,
                                  const DistSaveOptions& o = {});

// RankFileName and ParseRankFileName (defined in dist_store.cc) are declared in io/h5_util.h,
// where the store's rewrite check (CheckRewritableAsStore, io/h5store.h) reaches them too.

}  // namespace seedstore
