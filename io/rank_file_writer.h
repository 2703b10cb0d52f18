// Writing a save's rank files from a source catalog, piece by piece (Reshard in io/reshard.h;
// internal to io/).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/reshard.h"
#include "io/save_plan.h"
#include "io/store_writer.h"
#include "store/catalog.h"

namespace seedstore {

/// The most rank files one WriteRankFiles call keeps open, with `threads` such calls at once:
/// 64, fewer under a low open-file limit (a quarter of it shared by the calls), at least 8.
/// The more a call holds, the more of a flat tensor's neighbouring pieces it writes from one
/// read of the source: pieces over 1,024 ranks are a few rows each, and a source chunk's rows
/// span dozens of ranks' pieces.
size_t MaxOpenRankFiles(int threads);

/// Adds dense tensor i of `src`, restricted to the global box or flat range `g`, to `w` as a
/// tensor of g's local shape (the whole tensor when g is), chunked as `chunking` says (from
/// ChunkMatcher::For: copying the source's stored chunks where they line up), recorded as a
/// piece of the global tensor when `as_piece`; counts the chunks copied and encoded and the
/// bytes stored into counts[0, 1, 2]. The elements come from `data` when it is not null (g's
/// elements, row-major in its local shape), else from the source. The fingerprint recorded
/// for it goes to *fp when fp is not null.
Status AddPiece(StoreWriter& w, const Catalog& src, size_t i, const Region& g,
                DenseChunking chunking, bool as_piece, const void* data, uint64_t* counts,
                Fingerprint* fp = nullptr);

/// Writes the files of layout ranks `ranks` (files[k] for ranks[k]), tensor by tensor with all
/// of them open; per tensor i, adds the chunks copied and encoded and the bytes stored to
/// counts[kCounts * i + 0, 1, 2]. The pieces of a tensor that these ranks hold are written in
/// plan order; those whose chunks are all encoded (none lines up with a stored source chunk) go
/// in runs of neighbours read from the source as one covering box of at most 32 MiB (and
/// at most twice the runs' own elements): so a source chunk that many small pieces share --
/// flat pieces over hundreds of ranks -- is read and decoded once per run, not once per piece.
/// The files are version o.rank_file_version. What each piece k of tensor i is recorded with
/// (fingerprint, cells) goes to reports, piece p = plan.first_piece[i] + k (other pieces' are
/// left as they are). *bytes grows by the data bytes of the pieces written.
Status WriteRankFiles(const Catalog& src, const Plan& plan, const std::vector<int>& ranks,
                      const std::vector<std::string>& files, const DistSaveOptions& o,
                      uint64_t* bytes, std::vector<uint64_t>& counts, PieceReports& reports);

}  // namespace seedstore
