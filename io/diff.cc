// Diff of two catalogs by fingerprints (io/diff.h).
#include "io/diff.h"

#include <algorithm>
#include <functional>
#include <map>

#include "io/dist_store.h"
#include "io/h5store.h"
#include "io/interop.h"

namespace seedstore {
namespace {

// A failure reading or generating a tensor of `c`, with the source named.
Status InSource(const Status& s, const Catalog& c) {
  std::string where = "'";
  where += c.origin();
  where += "'";
  return s.WithContext(where);
}

std::vector<uint64_t> GlobalShape(const Region& r) {
  return std::vector<uint64_t>(r.shape, r.shape + r.rank);
}

// The elements two pieces of one tensor share (global indices: `a` and `b` of the same global
// shape), as a region of each piece's own indices (`in_a`, `in_b`): a box of two boxes, a
// flat range of two flat ranges (a piece that is a flat range is a 1-d tensor). False when
// they share no element, or one is a box and the other a flat range (BoxFlatOverlap).
bool Overlap(const Region& a, const Region& b, Region* global, Region* in_a, Region* in_b) {
  if (a.flat != b.flat) return false;
  *global = a;
  if (a.flat) {
    global->begin = std::max(a.begin, b.begin);
    global->end = std::min(a.end, b.end);
    if (global->begin >= global->end) return false;
    auto local = [&](const Region& p) {
      Region r = WholeTensor({p.end - p.begin});
      r.start[0] = global->begin - p.begin;
      r.stop[0] = global->end - p.begin;
      return r;
    };
    *in_a = local(a);
    *in_b = local(b);
    return true;
  }
  for (int d = 0; d < a.rank; ++d) {
    global->start[d] = std::max(a.start[d], b.start[d]);
    global->stop[d] = std::min(a.stop[d], b.stop[d]);
    if (global->start[d] >= global->stop[d]) return false;
  }
  auto local = [&](const Region& p) {
    Region r = p;
    for (int d = 0; d < p.rank; ++d) {
      r.shape[d] = p.stop[d] - p.start[d];
      r.start[d] = global->start[d] - p.start[d];
      r.stop[d] = global->stop[d] - p.start[d];
    }
    return r;
  };
  *in_a = local(a);
  *in_b = local(b);
  return true;
}

// The elements a box piece and a flat piece of one tensor share (global indices, the same
// global shape), as global boxes in row-major order: the flat range's row-major boxes
// (FlatRangeToBoxes) cut by the box. Empty when they share no element.
std::vector<Region> BoxFlatOverlap(const Region& box, const Region& flat) {
  std::vector<Region> out;
  for (Region q : FlatRangeToBoxes(GlobalShape(flat), flat.begin, flat.end)) {
    bool any = true;
    for (int d = 0; d < q.rank && any; ++d) {
      q.start[d] = std::max(q.start[d], box.start[d]);
      q.stop[d] = std::min(q.stop[d], box.stop[d]);
      any = q.start[d] < q.stop[d];
    }
    if (any) out.push_back(q);
  }
  return out;
}

// Whether `c` is one rank's file of a distributed save, opened alone: a store named as rank
// files are (P.<id>.rank<r>.h5, docs/FORMAT.md 10). It holds only the dense pieces its rank
// owns -- lazy tensors live in the master, a replica in its owner's file, an empty shard in
// none -- and does not know the save's other tensors: a tensor it lacks is not compared.
bool IsRankFile(const Catalog& c) {
  std::string save;
  uint32_t id = 0;
  int rank = 0;
  // A one-file store: seedstore's format, reading no other file (a distributed save reads its
  // rank files).
  return c.seedstore_format() && c.other_files().empty() &&
         ParseRankFileName(c.origin(), &save, &id, &rank);
}

// Both lazy, and every element is the same pure function of its index: the same init rule,
// key, generator (and threefry flavour), dtype and shape (the fingerprint seed follows from
// name, dtype and shape).
bool SameLazySpec(const TensorRecord& a, const TensorRecord& b) {
  if (!a.lazy || !b.lazy) return false;
  const TensorSpec &x = a.lazy->spec, &y = b.lazy->spec;
  return a.lazy->key == b.lazy->key && x.generator == y.generator &&
         (x.generator != Generator::kThreefry || x.flavour == y.flavour) && x.dtype == y.dtype &&
         x.shape == y.shape && x.init.ToJson() == y.init.ToJson();
}

}  // namespace

const char* DiffVerdictName(DiffVerdict v) {
  switch (v) {
    case DiffVerdict::kIdentical:
      return "identical";
    case DiffVerdict::kValues:
      return "values-differ";
    case DiffVerdict::kShape:
      return "shape-differs";
    case DiffVerdict::kDType:
      return "dtype-differs";
    case DiffVerdict::kShard:
      return "other-shards";
    case DiffVerdict::kOnlyA:
      return "only-in-a";
    case DiffVerdict::kOnlyB:
      return "only-in-b";
    case DiffVerdict::kNotCompared:
      return "not-compared";
  }
  return "?";
}

std::string DiffRow::ShardText() const {
  if (!shard) return "";
  if (overlap_boxes.empty()) return DescribeRegion(*shard);
  std::string s;
  for (const Region& b : overlap_boxes) s += (s.empty() ? "" : " + ") + DescribeRegion(b);
  return s;
}

const char* DiffRow::By() const {
  if (by_spec) return "spec";
  if (empty_shard) return "empty shard";
  if (overlap) return "overlap";
  if (fa) return "fingerprint";
  if (verdict == DiffVerdict::kNotCompared) return "absent from a rank file";
  if (verdict == DiffVerdict::kShard) return "disjoint shards";
  return "shape/dtype/name";
}

nlohmann::json DiffReport::ToJson(bool recorded) const {
  auto side = [](const TensorRecord* t, const std::optional<Fingerprint>& f) {
    if (!t) return nlohmann::json(nullptr);
    nlohmann::json s = {
        {"shape", t->shape}, {"dtype", DTypeName(t->dtype)}, {"kind", t->lazy ? "lazy" : "dense"}};
    s["fingerprint"] = f ? nlohmann::json(FingerprintHex(*f)) : nlohmann::json(nullptr);
    return s;
  };
  nlohmann::json ts = nlohmann::json::array();
  for (const DiffRow& r : rows)
    ts.push_back({{"name", r.name},
                  {"result", DiffVerdictName(r.verdict)},
                  {"by", r.By()},
                  {"shard", r.shard ? nlohmann::json(r.ShardText()) : nlohmann::json(nullptr)},
                  {"a", side(r.a, r.fa)},
                  {"b", side(r.b, r.fb)}});
  nlohmann::json counts = nlohmann::json::object();
  for (int v = 0; v <= static_cast<int>(DiffVerdict::kNotCompared); ++v)
    counts[DiffVerdictName(static_cast<DiffVerdict>(v))] = count[v];
  return {{"identical", Identical()},
          {"compared", compared},
          {"recorded", recorded},
          {"counts", counts},
          {"tensors", ts}};
}

uint64_t DiffWorkBytes(const Catalog& a, const Catalog& b, const std::string& glob) {
  uint64_t work = 0;
  for (const Catalog* c : {&a, &b})
    for (const auto& t : c->tensors())
      if (GlobMatch(glob, t.name)) work += t.NumBytes();
  return work;
}

namespace {

// One Diff call: the two catalogs, the options, and the comparison of a tensor of one with the
// tensor of the same name of the other.
class Differ {
 public:
  Differ(const Catalog& a, const Catalog& b, const DiffOptions& o) : A(a), B(b), o(o) {}

  void Advance(uint64_t n) const {
    if (o.progress) o.progress(n);
  }

  // The row of tensor i of A against tensor j of B (the same name).
  Result<DiffRow> Pair(size_t i, size_t j) const {
    const TensorRecord &ta = A.tensors()[i], &tb = B.tensors()[j];
    DiffRow r;
    r.name = ta.name;
    r.a = &ta;
    r.b = &tb;
    // A rank's file's piece (TensorRecord::piece) is compared with the same region of the
    // other side.
    const std::optional<Region>&sa = ta.piece, &sb = tb.piece;
    r.shard = sa ? sa : sb;
    r.empty_shard = r.shard && r.shard->Count() == 0;
    const std::vector<uint64_t> ga = sa ? GlobalShape(*sa) : ta.shape,
                                gb = sb ? GlobalShape(*sb) : tb.shape;
    // What is compared, in each side's own indices: the whole piece of a side that is one,
    // the same region of the other side; of two pieces of other regions, their overlap.
    Region own_a = WholeTensor(ta.shape), own_b = WholeTensor(tb.shape), both;
    if (r.shard && !sa) own_a = *r.shard;
    if (r.shard && !sb) own_b = *r.shard;
    if (ga != gb) {
      r.verdict = DiffVerdict::kShape;
    } else if (tb.dtype != ta.dtype) {
      r.verdict = DiffVerdict::kDType;
    } else if (sa && sb && sa->flat != sb->flat) {
      SEEDSTORE_RETURN_IF_ERROR(BoxAgainstFlat(r, i, j));
    } else if (sa && sb && !SameRegion(*sa, *sb) && !Overlap(*sa, *sb, &both, &own_a, &own_b)) {
      r.verdict = DiffVerdict::kShard;
    } else if (!r.shard && SameLazySpec(ta, tb)) {
      r.by_spec = true;
    } else {
      if (sa && sb && !SameRegion(*sa, *sb)) {
        r.shard = both;
        r.overlap = true;
        r.empty_shard = false;
      }
      SEEDSTORE_RETURN_IF_ERROR(Compare(r, Of(A, i, own_a), Of(B, j, own_b)));
    }
    Advance(tb.NumBytes());
    return r;
  }

 private:
  // The fingerprint of region `r` (the tensor's own indices) of tensor i of c: recorded (with
  // o.recorded, for a whole tensor whose source records one) or computed from its values
  // (lazy ones generated from their spec, dense ones read). A piece's fingerprint is taken in
  // the global tensor's frame, so it equals that of the same elements of the whole tensor.
  // Returns a thunk: the sides are computed in order, with progress between them (Compare).
  std::function<Result<Fingerprint>()> Of(const Catalog& c, size_t i, const Region& r) const {
    return [this, &c, i, r]() -> Result<Fingerprint> {
      const TensorRecord& t = c.tensors()[i];
      if (o.recorded && !t.piece && t.fingerprint && SameRegion(r, WholeTensor(t.shape)))
        return *t.fingerprint;
      auto f = FingerprintOnDevice(o.device, c, i, r, CpuOptions{o.threads});
      if (!f.ok()) return InSource(f.status(), c);
      return f;
    };
  }

  // Side a, then b: their fingerprints and the verdict (values-differ when they differ).
  Status Compare(DiffRow& r, const std::function<Result<Fingerprint>()>& a,
                 const std::function<Result<Fingerprint>()>& b) const {
    SEEDSTORE_ASSIGN_OR_RETURN(r.fa, a());
    Advance(r.a->NumBytes());
    SEEDSTORE_ASSIGN_OR_RETURN(r.fb, b());
    if (*r.fa != *r.fb) r.verdict = DiffVerdict::kValues;
    return Status::Ok();
  }

  // A box piece against a flat piece: compared on the boxes they share, each side's
  // fingerprint taken in the global frame (the box side over its local boxes, the flat side
  // gathered from its range); disjoint shards when they share none.
  Status BoxAgainstFlat(DiffRow& r, size_t i, size_t j) const {
    const Region &sa = *r.a->piece, &sb = *r.b->piece;
    const Region& box = sa.flat ? sb : sa;
    r.overlap_boxes = BoxFlatOverlap(box, sa.flat ? sa : sb);
    if (r.overlap_boxes.empty()) {
      r.verdict = DiffVerdict::kShard;
      return Status::Ok();
    }
    r.shard = box;
    r.overlap = true;
    r.empty_shard = false;
    return Compare(r, OverBoxes(A, i, sa, r.overlap_boxes), OverBoxes(B, j, sb, r.overlap_boxes));
  }

  // The fingerprint of the global boxes `boxes` of tensor k of c, a piece at `piece`.
  std::function<Result<Fingerprint>()> OverBoxes(const Catalog& c, size_t k, const Region& piece,
                                                 const std::vector<Region>& boxes) const {
    return [this, &c, k, &piece, &boxes]() -> Result<Fingerprint> {
      Fingerprint f;
      for (const Region& q : boxes) {
        Result<Fingerprint> g = Fingerprint{};
        if (piece.flat) {
          g = FingerprintBoxOfFlatPiece(c, k, q, CpuOptions{o.threads});
          if (!g.ok()) return InSource(g.status(), c);
        } else {
          Region local = WholeTensor(c.tensors()[k].shape);
          for (int d = 0; d < q.rank; ++d) {
            local.start[d] = q.start[d] - piece.start[d];
            local.stop[d] = q.stop[d] - piece.start[d];
          }
          g = Of(c, k, local)();
          if (!g.ok()) return g.status();
        }
        f.Add(*g);
      }
      return f;
    };
  }

  const Catalog &A, &B;
  const DiffOptions& o;
};

}  // namespace

Result<DiffReport> Diff(const Catalog& A, const Catalog& B, const DiffOptions& o) {
  if (Status g = CheckGlobMatches(o.tensors, {&A, &B}); !g.ok()) return g;
  const Differ differ(A, B, o);
  DiffReport rep;
  std::vector<DiffRow>& rows = rep.rows;
  std::map<std::string, size_t> in_b;
  for (size_t j = 0; j < B.tensors().size(); ++j) in_b[B.tensors()[j].name] = j;
  for (size_t i = 0; i < A.tensors().size(); ++i) {
    const TensorRecord& ta = A.tensors()[i];
    if (!GlobMatch(o.tensors, ta.name)) continue;
    auto it = in_b.find(ta.name);
    if (it != in_b.end()) {
      SEEDSTORE_ASSIGN_OR_RETURN(DiffRow r, differ.Pair(i, it->second));
      rows.push_back(std::move(r));
      in_b.erase(it);
      continue;
    }
    DiffRow r;
    r.name = ta.name;
    r.a = &ta;
    r.verdict = IsRankFile(B) ? DiffVerdict::kNotCompared : DiffVerdict::kOnlyA;
    differ.Advance(ta.NumBytes());
    rows.push_back(std::move(r));
  }
  for (size_t j = 0; j < B.tensors().size(); ++j) {
    const TensorRecord& tb = B.tensors()[j];
    if (!GlobMatch(o.tensors, tb.name) || !in_b.count(tb.name)) continue;
    DiffRow r;
    r.name = tb.name;
    r.verdict = IsRankFile(A) ? DiffVerdict::kNotCompared : DiffVerdict::kOnlyB;
    r.b = &tb;
    rows.push_back(std::move(r));
    differ.Advance(tb.NumBytes());
  }
  for (const DiffRow& r : rows) {
    ++rep.count[static_cast<int>(r.verdict)];
    rep.by_spec += r.by_spec;
    rep.shards +=
        r.shard.has_value() && r.verdict != DiffVerdict::kShard;  // disjoint: not compared
    rep.overlaps += r.overlap;
  }
  // Pieces of two disjoint regions of a tensor are not compared: nothing tells whether they
  // are pieces of one tensor, and they are no difference.
  rep.compared = static_cast<int>(rows.size()) - rep.Count(DiffVerdict::kNotCompared) -
                 rep.Count(DiffVerdict::kShard);
  rep.differing = rep.compared - rep.Count(DiffVerdict::kIdentical);
  return rep;
}

}  // namespace seedstore
