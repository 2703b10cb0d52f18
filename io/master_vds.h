// The distributed save's master objects (docs/FORMAT.md 10, "Master objects"; internal to io/):
// /distributed/index and, per dense tensor, the HDF5 virtual dataset that stitches its pieces so
// that any HDF5 reader (h5py included) sees the global tensor. One function, MasterDatasetOf,
// says what the master holds at /tensors/<escaped name>: the writer (AddDistributedObjects)
// creates exactly that, and the verifier (DistCatalog::VerifyMasterDatasets) compares with it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/dist_catalog.h"
#include "io/save_plan.h"
#include "store/catalog.h"
#include "store/layout.h"

namespace seedstore {

// How a flat piece is mapped (docs/FORMAT.md 10; the index's "flat_mappings"). kBoxes (what this
// writer writes): one mapping per box of the range's row-major
// decomposition (FlatRangeToBoxes: at most 2 x rank - 1), each from a contiguous run of the
// piece's 1-d dataset. kRuns (saves without the field): one mapping per innermost run; a tensor
// whose flat pieces could need more than kMaxFlatRuns of them (counted as (end - begin) /
// innermost extent + 2 per flat piece) has no virtual dataset.
enum class FlatMappings { kRuns, kBoxes };
constexpr uint64_t kMaxFlatRuns = 65536;

// One mapping of a virtual dataset: the box `to` of the global tensor (to.shape: the tensor's
// shape) is the box `from` of dataset `source` in the rank file of `rank`. A version 1 piece's
// source is /tensors/<escaped name> (from.shape: that dataset's shape, the local shape of the
// piece's stored box; [end - begin] for a flat piece); a cell's is /cells/<k> (from: a block of
// one cell, [1, extents...] at [cell, offsets...]; from.shape: [cell + 1, chunk shape], the
// least extent holding it). `piece` is the index of the piece in the tensor's pieces.
struct VdsMapping {
  int rank = 0;
  size_t piece = 0;
  Region to, from;
  std::string source;
};

struct MasterDataset {
  enum Kind {
    kNone,     // no dataset: a lazy tensor, a tensor without elements, or too many flat runs
    kScalar,   // a plain scalar dataset holding the value (a virtual dataset needs rank >= 1)
    kVirtual,  // a virtual dataset of the global shape with `mappings`, in this order
  } kind = kNone;
  std::string why_none;  // kNone: why there is no dataset, for messages
  std::vector<VdsMapping> mappings;
};

/// A virtual dataset's source file and dataset names are patterns to HDF5: `%b` stands for a
/// block number and `%%` for one `%` (H5Pset_virtual). Escaped tensor names hold `%` (`/` is
/// written `%2F`, docs/FORMAT.md 4), and so may a save's path: every `%` is doubled.
std::string VdsSourceName(const std::string& name);

/// What the master holds for dense tensor `t` (lazy: nothing) whose non-empty pieces are
/// `pieces`, in index order. A box piece maps its region (owned box) from where that lies in its
/// (maybe padded) stored box; a flat piece maps, in order, each box of its range (`style`
/// kBoxes) or each innermost run (kRuns) from the same elements of its 1-d dataset. Without
/// `with_mappings`, only the kind (and why_none) is set.
MasterDataset MasterDatasetOf(const TensorRecord& t, const std::vector<DistCatalog::Piece>& pieces,
                              FlatMappings style, bool with_mappings = true);

/// Adds the index and the virtual datasets to the (closed, committed) master file at `file`
/// of save `id` at `path`: the plan's pieces of `src` under `layout`, the tensors'
/// fingerprints `fps`, the counts per tensor (kCounts) and each piece's recorded fingerprint
/// and cells (`reports`); the distributed index is version `version`, its rank files'. kIo naming
/// the master when HDF5 fails; on failure the master is abandoned (AbandonH5File), never left
/// half-closed.
Status AddDistributedObjects(const std::string& file, const Catalog& src, const Plan& plan,
                             const Layout& layout, uint32_t id, const std::string& path,
                             const std::vector<Fingerprint>& fps,
                             const std::vector<uint64_t>& counts, const PieceReports& reports,
                             int version);

}  // namespace seedstore
