// What a distributed save writes where (internal to io/): the distinct pieces of each dense
// tensor under the layout, the box each piece's rank file stores, and which process writes
// which rank files.
#pragma once
#include <cstddef>
#include <vector>

#include "io/dist_catalog.h"
#include "store/catalog.h"
#include "store/layout.h"

namespace seedstore {

struct Plan {
  // Per tensor: its distinct non-empty shards as pieces (rank: the shard's first replica, who
  // writes it; region: the shard's), in the layout's order; empty for lazy tensors. Each
  // stores its region until PadPieces widens it to a padded box (ChunkMatcher::Pad;
  // docs/FORMAT.md 10). Cells and fingerprints are left unset (PieceReports carry them).
  std::vector<std::vector<DistCatalog::Piece>> pieces;
  // Pieces numbered tensor by tensor, in plan order: tensor i's first is first_piece[i]; the
  // count is first_piece.back(). Set by NumberPieces once `pieces` is final.
  std::vector<size_t> first_piece;
};

/// The plan of `src` under `layout`: every dense tensor's distinct non-empty shards, each
/// stored as its own region (PadPieces may widen them). A lazy tensor has none, but the layout
/// must apply to it. Errors: the layout's (a tensor it cannot place).
Result<Plan> MakePlan(const Catalog& src, const Layout& layout);

/// Sets p->first_piece from p->shards.
void NumberPieces(Plan* p);

/// What each piece's writer reports to the master's writer: the fingerprint it recorded and,
/// for a piece packed into a version 2 rank file's cells, where they are (docs/FORMAT.md 11).
/// The words are summed over the writing processes (AllReduceSum), each piece's being zero
/// except in the process that wrote it.
struct PieceReports {
  /// Piece p's words from at[p]: fingerprint lane0, lane1; cell set + 1 (0: no cells); first
  /// cell; chunk shape (one word per dim of the piece's local shape: 1 for a flat piece).
  std::vector<uint64_t> words;
  std::vector<size_t> at;
  /// Zeroed reports for the plan's pieces (NumberPieces done).
  static PieceReports For(const Plan& plan);
  void Set(size_t p, const Fingerprint& f, const std::optional<PieceCells>& cells);
  Fingerprint fingerprint(size_t p) const;
  std::optional<PieceCells> cells(size_t p) const;
};

/// The plan's pieces of tensor i, as the index lists them (with their cells when `reports`).
std::vector<DistCatalog::Piece> PlannedPieces(const Plan& plan, size_t i,
                                              const PieceReports* reports = nullptr);

/// Per tensor, what a save counts as it writes: chunks copied, chunks encoded, bytes stored
/// (counts[kCounts * i + 0, 1, 2]).
constexpr size_t kCounts = 3;

/// The process of `np` that writes layout rank r's file (which also proves its pieces), and
/// the layout ranks process `me` writes: a contiguous block.
int WriterOf(int r, int np, int world);
std::vector<int> RanksWrittenBy(int me, int np, int world);

}  // namespace seedstore
