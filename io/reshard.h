// Writing a distributed save (or one store) from any catalog under a layout, and proving it
// before it is committed: Reshard, and SaveBuffers for a live job's own shard buffers
// (docs/FORMAT.md 10; the protocol, step by step: docs/ARCHITECTURE.md, "save, distributed").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/collective.h"
#include "io/dist_catalog.h"
#include "io/store_format.h"
#include "store/catalog.h"
#include "store/layout.h"
#include "store/verify.h"

namespace seedstore {

/// The root seed and default generator of a catalog (spec, store, distributed save, or the
/// buffers SaveBuffers writes: DistSaveOptions'); 0 and threefry for other catalogs.
void RootSeedOf(const Catalog& c, uint64_t* seed, Generator* generator);

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
  /// The rank files' format (docs/FORMAT.md 9): kCellsFormatVersion (2, pieces packed into
  /// cell sets, section 11), or kStoreFormatVersion (1, a dataset per piece, section 10) for
  /// readers built before version 2. Others: kInvalidArgument.
  int rank_file_version = kCellsFormatVersion;
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
  size_t pieces = 0;       // non-empty distinct pieces written (0 for lazy)
  uint64_t bytes = 0;      // data bytes written (0 for lazy)
  std::string source_ref;  // "recorded" or "computed"
  /// Chunks written for this tensor: copied as stored from the source (no decode/re-encode,
  /// the source chunk's checksum verified) or encoded anew.
  uint64_t chunks_copied = 0, chunks_encoded = 0;
  Fingerprint source, output;
  bool ok() const { return source == output; }
};

struct ReshardReport {
  std::string path;
  int world = 1;    // output layout's ranks (1 when consolidated)
  int writers = 1;  // processes that wrote
  bool consolidated = false;
  bool full_proof = false;  // DistSaveOptions::full_proof
  /// Whether this save replaced what was at the path (the commit happened; it was proven
  /// first). false with rows that differ (ToStatus): not proven, so not committed.
  bool committed = false;
  /// One per tensor; empty on a rank that learned of the commit only after losing contact with
  /// the others (a timeout after rank 0 committed).
  std::vector<ReshardRow> rows;
  uint64_t bytes = 0;                              // data bytes written (dense, uncompressed)
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
/// io/atomic_file.h: master, rank files and lock all go there) -- then proves every tensor: the sum
/// of the fingerprints of its distinct pieces, read back from `path`, must equal the source's
/// recorded (or computed) fingerprint. `comm`'s ranks split the layout's ranks among them in
/// contiguous blocks (process p of P writes ranks [p * world / P, (p + 1) * world / P), and proves
/// their pieces), writing up to 8 rank files at once tensor by tensor, small neighbouring pieces
/// cut from one read of the source; every process gets the same report. Rank 0 takes the writer
/// lock
/// "<path>.lock" first: while another live process holds it the writer is refused with
/// "writer-locked" (kIo); a lock file whose writer is gone (killed, or its job ended) is held by
/// nobody and is taken over, with a note on stderr. The proof runs before the commit: the new
/// master is staged ("<path>.<id>.new", sealed and durable) and proven, and only a proven save is
/// committed, by rank 0 renaming it over `path` (docs/FORMAT.md 10, "Writing"). So an OK
/// result with report.committed means `path` holds the new, proven save; a mismatch
/// (report.committed false, ToStatus() kMismatch) or an error means `path` is unchanged. When a
/// rank hangs or dies mid-save the others fail within the collective timeout; a process that
/// gives up before it knows the outcome vetoes the commit, which makes the outcome final and
/// tells it: not committed -- it removes its new files and returns the error; committed -- it
/// returns OK (report.committed, rows possibly empty) and removes nothing. No process ever
/// removes a file the committed master names; the replaced save's files are removed by rank 0
/// once the commit is durable, or by the next save.
/// A fingerprint mismatch is not an error here (nothing is committed): inspect the report
/// (ToStatus()).
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

}  // namespace seedstore
