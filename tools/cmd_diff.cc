// seedstore diff: whether two checkpoints hold the same weights, tensor by tensor, by
// layout-independent fingerprints -- whatever each one is (a spec, a store, a distributed save
// under any layout, safetensors files) and without comparing or moving dense bytes between
// them. Exit 0 when every tensor is identical, 7 (MISMATCH) when any differs.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "io/device.h"
#include "io/dist_store.h"
#include "io/h5store.h"
#include "io/interop.h"
#include "io/open.h"
#include "tools/cli.h"

namespace seedstore::cli {
namespace {

struct Options {
  std::string a, b, tensors = "*", device = "auto";
  int threads = 0;
  bool json = false, recorded = false, all = false;
};

enum class Verdict { kIdentical, kValues, kShape, kDType, kShard, kOnlyA, kOnlyB, kNotCompared };
const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kIdentical: return "identical";
    case Verdict::kValues: return "values-differ";
    case Verdict::kShape: return "shape-differs";
    case Verdict::kDType: return "dtype-differs";
    case Verdict::kShard: return "other-shards";
    case Verdict::kOnlyA: return "only-in-a";
    case Verdict::kOnlyB: return "only-in-b";
    case Verdict::kNotCompared: return "not-compared";
  }
  return "?";
}

struct Row {
  std::string name;
  Verdict verdict = Verdict::kIdentical;
  const TensorRecord* a = nullptr;
  const TensorRecord* b = nullptr;
  std::optional<Fingerprint> fa, fb;
  bool by_spec = false;  // both lazy with the same resolved spec: equal without generating
  std::optional<Region> shard;  // a side is a rank's file (its piece): the region compared
  bool empty_shard = false;     // ... and that piece is empty (an empty shard: FORMAT.md 4.1)
  bool overlap = false;         // both are pieces of other regions: `shard` is their overlap
  // ... a box piece and a flat piece: their overlap as global boxes (`shard` is the box piece's)
  std::vector<Region> overlap_boxes;
};

// What a row's `shard` describes: the overlap's boxes when a box piece met a flat piece.
std::string ShardText(const Row& r) {
  if (r.overlap_boxes.empty()) return DescribeRegion(*r.shard);
  std::string s;
  for (const Region& b : r.overlap_boxes) s += (s.empty() ? "" : " + ") + DescribeRegion(b);
  return s;
}

std::vector<uint64_t> GlobalShape(const Region& r) { return std::vector<uint64_t>(r.shape, r.shape + r.rank); }

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
  return dynamic_cast<const H5Store*>(&c) != nullptr && ParseRankFileName(c.origin(), &save, &id, &rank);
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

int Run(const Options& o) {
  auto device = ResolveDevice(o.device);
  if (!device.ok()) return Fail(device.status());
  auto ca = OpenCatalog(o.a);
  if (!ca.ok()) return Fail(ca.status());
  auto cb = OpenCatalog(o.b);
  if (!cb.ok()) return Fail(cb.status());
  const Catalog& A = **ca;
  const Catalog& B = **cb;
  if (Status g = CheckGlobMatches(o.tensors, {&A, &B}); !g.ok()) return Fail(g);
  // Where tensor i of c lies in a larger tensor, when c is a rank's file (a rank's
  // safetensors shard file, or a distributed save's rank file): TensorRecord::piece.
  auto shard_of = [](const Catalog& c, size_t i) { return c.tensors()[i].piece; };
  // The fingerprint of region `r` (the tensor's own indices) of tensor i of c: recorded (with
  // --recorded, for a whole tensor whose source records one) or computed from its values
  // (lazy ones generated from their spec, dense ones read). A piece's fingerprint is taken in
  // the global tensor's frame, so it equals that of the same elements of the whole tensor.
  auto fingerprint = [&](const Catalog& c, size_t i, const Region& r) -> Result<Fingerprint> {
    const TensorRecord& t = c.tensors()[i];
    if (o.recorded && !t.piece && t.fingerprint && SameRegion(r, WholeTensor(t.shape))) return *t.fingerprint;
    auto f = FingerprintOnDevice(*device, c, i, r, CpuOptions{o.threads});
    if (!f.ok()) return f.status().WithContext("'" + c.origin() + "'");
    return f;
  };
  std::vector<Row> rows;
  std::map<std::string, size_t> in_b;
  for (size_t j = 0; j < B.tensors().size(); ++j) in_b[B.tensors()[j].name] = j;
  uint64_t work = 0;
  for (const auto& t : A.tensors())
    if (GlobMatch(o.tensors, t.name)) work += t.NumBytes();
  for (const auto& t : B.tensors())
    if (GlobMatch(o.tensors, t.name)) work += t.NumBytes();
  Progress bar("diff", work);
  for (size_t i = 0; i < A.tensors().size(); ++i) {
    const TensorRecord& ta = A.tensors()[i];
    if (!GlobMatch(o.tensors, ta.name)) continue;
    Row r;
    r.name = ta.name;
    r.a = &ta;
    auto it = in_b.find(ta.name);
    if (it == in_b.end()) {
      r.verdict = IsRankFile(B) ? Verdict::kNotCompared : Verdict::kOnlyA;
      bar.Advance(ta.NumBytes());
    } else {
      r.b = &B.tensors()[it->second];
      // A rank's file's piece is compared with the same region of the other side.
      const std::optional<Region> sa = shard_of(A, i), sb = shard_of(B, it->second);
      r.shard = sa ? sa : sb;
      r.empty_shard = r.shard && r.shard->Count() == 0;
      const std::vector<uint64_t> ga = sa ? GlobalShape(*sa) : ta.shape, gb = sb ? GlobalShape(*sb) : r.b->shape;
      // What is compared, in each side's own indices: the whole piece of a side that is one,
      // the same region of the other side; of two pieces of other regions, their overlap.
      Region own_a = WholeTensor(ta.shape), own_b = WholeTensor(r.b->shape), both;
      if (r.shard && !sa) own_a = *r.shard;
      if (r.shard && !sb) own_b = *r.shard;
      if (ga != gb) {
        r.verdict = Verdict::kShape;
      } else if (r.b->dtype != ta.dtype) {
        r.verdict = Verdict::kDType;
      } else if (sa && sb && sa->flat != sb->flat) {
        // A box piece against a flat piece: compared on the boxes they share, each side's
        // fingerprint taken in the global frame (the box side over its local boxes, the flat
        // side gathered from its range).
        const Region& box = sa->flat ? *sb : *sa;
        r.overlap_boxes = BoxFlatOverlap(box, sa->flat ? *sa : *sb);
        if (r.overlap_boxes.empty()) {
          r.verdict = Verdict::kShard;
        } else {
          r.shard = box;
          r.overlap = true;
          r.empty_shard = false;
          auto side = [&](const Catalog& c, size_t k, const Region& piece) -> Result<Fingerprint> {
            Fingerprint f;
            for (const Region& q : r.overlap_boxes) {
              Result<Fingerprint> g = Fingerprint{};
              if (piece.flat) {
                g = FingerprintBoxOfFlatPiece(c, k, q, CpuOptions{o.threads});
              } else {
                Region local = WholeTensor(c.tensors()[k].shape);
                for (int d = 0; d < q.rank; ++d) {
                  local.start[d] = q.start[d] - piece.start[d];
                  local.stop[d] = q.stop[d] - piece.start[d];
                }
                g = fingerprint(c, k, local);
              }
              if (!g.ok()) return g.status().WithContext("'" + c.origin() + "'");
              f.Add(*g);
            }
            return f;
          };
          auto fa = side(A, i, *sa);
          if (!fa.ok()) return Fail(fa.status());
          bar.Advance(ta.NumBytes());
          auto fb = side(B, it->second, *sb);
          if (!fb.ok()) return Fail(fb.status());
          r.fa = *fa;
          r.fb = *fb;
          if (*fa != *fb) r.verdict = Verdict::kValues;
        }
      } else if (sa && sb && !SameRegion(*sa, *sb) && !Overlap(*sa, *sb, &both, &own_a, &own_b)) {
        r.verdict = Verdict::kShard;
      } else if (!r.shard && SameLazySpec(ta, *r.b)) {
        r.by_spec = true;
      } else {
        if (sa && sb && !SameRegion(*sa, *sb)) {
          r.shard = both;
          r.overlap = true;
          r.empty_shard = false;
        }
        auto fa = fingerprint(A, i, own_a);
        if (!fa.ok()) return Fail(fa.status());
        bar.Advance(ta.NumBytes());
        auto fb = fingerprint(B, it->second, own_b);
        if (!fb.ok()) return Fail(fb.status());
        r.fa = *fa;
        r.fb = *fb;
        if (*fa != *fb) r.verdict = Verdict::kValues;
      }
      bar.Advance(r.b->NumBytes());
      in_b.erase(it);
    }
    rows.push_back(std::move(r));
  }
  for (size_t j = 0; j < B.tensors().size(); ++j) {
    const TensorRecord& tb = B.tensors()[j];
    if (!GlobMatch(o.tensors, tb.name) || !in_b.count(tb.name)) continue;
    Row r;
    r.name = tb.name;
    r.verdict = IsRankFile(A) ? Verdict::kNotCompared : Verdict::kOnlyB;
    r.b = &tb;
    rows.push_back(std::move(r));
    bar.Advance(tb.NumBytes());
  }
  std::map<Verdict, int> count;
  int by_spec = 0, shards = 0;
  for (const Row& r : rows) {
    ++count[r.verdict];
    by_spec += r.by_spec;
    shards += r.shard.has_value() && r.verdict != Verdict::kShard;  // disjoint shards were not compared
  }
  // Pieces of two disjoint regions of a tensor are not compared: nothing tells whether they
  // are pieces of one tensor, and they are no difference.
  const int compared = static_cast<int>(rows.size()) - count[Verdict::kNotCompared] - count[Verdict::kShard];
  const int differing = compared - count[Verdict::kIdentical];
  int overlaps = 0;
  for (const Row& r : rows) overlaps += r.overlap;
  if (o.json) {
    auto side = [](const TensorRecord* t, const std::optional<Fingerprint>& f) {
      if (!t) return nlohmann::json(nullptr);
      nlohmann::json s = {{"shape", t->shape}, {"dtype", DTypeName(t->dtype)}, {"kind", t->lazy ? "lazy" : "dense"}};
      s["fingerprint"] = f ? nlohmann::json(FingerprintHex(*f)) : nlohmann::json(nullptr);
      return s;
    };
    nlohmann::json ts = nlohmann::json::array();
    for (const Row& r : rows)
      ts.push_back({{"name", r.name},
                    {"result", VerdictName(r.verdict)},
                    {"by", r.by_spec ? "spec" : r.empty_shard ? "empty shard" : r.overlap ? "overlap"
                           : r.fa ? "fingerprint" : r.verdict == Verdict::kNotCompared ? "absent from a rank file"
                           : r.verdict == Verdict::kShard ? "disjoint shards" : "shape/dtype/name"},
                    {"shard", r.shard ? nlohmann::json(ShardText(r)) : nlohmann::json(nullptr)},
                    {"a", side(r.a, r.fa)},
                    {"b", side(r.b, r.fb)}});
    nlohmann::json counts = nlohmann::json::object();
    for (Verdict v : {Verdict::kIdentical, Verdict::kValues, Verdict::kShape, Verdict::kDType, Verdict::kShard,
                      Verdict::kOnlyA, Verdict::kOnlyB, Verdict::kNotCompared})
      counts[VerdictName(v)] = count[v];
    nlohmann::json j = {{"a", o.a}, {"b", o.b}, {"identical", differing == 0}, {"compared", compared},
                        {"recorded", o.recorded},
                        {"counts", counts}, {"tensors", ts}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    auto desc = [](const TensorRecord* t) { return ShapeText(t->shape) + " " + DTypeName(t->dtype); };
    for (const Row& r : rows) {
      if (r.verdict == Verdict::kIdentical && !o.all) continue;
      std::string what;
      switch (r.verdict) {
        case Verdict::kIdentical:
          what = r.by_spec ? "same spec" : r.empty_shard ? "no elements on this rank" : FingerprintHex(*r.fa);
          break;
        case Verdict::kValues: what = "a " + FingerprintHex(*r.fa) + "  b " + FingerprintHex(*r.fb); break;
        case Verdict::kShape:
        case Verdict::kDType:
          if (r.empty_shard) {  // the other side's shape and dtype, against the empty piece's
            what = desc(r.a->piece && r.a->NumElements() == 0 ? r.b : r.a) +
                   " against an empty shard of another shape or dtype";
            break;
          }
          [[fallthrough]];
        case Verdict::kShard: what = "a " + desc(r.a) + "  b " + desc(r.b); break;
        case Verdict::kOnlyA: what = desc(r.a); break;
        case Verdict::kOnlyB: what = desc(r.b); break;
        case Verdict::kNotCompared:
          what = desc(r.a ? r.a : r.b) + "  (absent from the rank file " + (r.a ? "b" : "a") + ")";
          break;
      }
      if (r.shard)
        what += std::string("  (") +
                (r.empty_shard ? "an empty shard"
                 : r.overlap   ? "the overlap " + ShardText(r) + " of the two shards"
                               : "shard " + DescribeRegion(*r.shard)) +
                " of " + ShapeText(GlobalShape(*r.shard)) + ")";
      else if (r.verdict == Verdict::kShard)
        what += "  (disjoint shards: not compared)";
      std::printf("%-13s %s  %s\n", VerdictName(r.verdict), ShownText(r.name).c_str(), what.c_str());
    }
    std::printf("a: %s (%zu tensors)\nb: %s (%zu tensors)\n", o.a.c_str(), A.tensors().size(), o.b.c_str(),
                B.tensors().size());
    std::printf("%d compared%s: %d identical, %d values differ, %d shape differs, %d dtype differs, "
                "%d only in a, %d only in b\n",
                compared, o.recorded ? " (recorded fingerprints where present)" : "",
                count[Verdict::kIdentical], count[Verdict::kValues], count[Verdict::kShape],
                count[Verdict::kDType], count[Verdict::kOnlyA], count[Verdict::kOnlyB]);
    if (count[Verdict::kShard])
      std::printf("%d not compared: the two sides hold disjoint shards of them\n", count[Verdict::kShard]);
    if (shards - overlaps)
      std::printf("%d compared as shards: a rank's shard file against the same region of the other side\n",
                  shards - overlaps);
    if (overlaps)
      std::printf("%d compared on the overlap of two rank files' shards of other regions\n", overlaps);
    if (by_spec)
      std::printf("%d identical by spec: lazy on both sides with the same init rule, key and generator\n", by_spec);
    if (count[Verdict::kNotCompared])
      std::printf("%d not compared: absent from a distributed save's rank file, which holds only the dense "
                  "pieces its rank owns (lazy tensors are in the master, a replica in its owner's file, an "
                  "empty shard in none); diff the save's master to compare every tensor\n",
                  count[Verdict::kNotCompared]);
  }
  if (differing == 0) return 0;
  const Status verdict = Mismatch("'" + o.a + "' and '" + o.b + "' differ in " + std::to_string(differing) +
                                  " of " + std::to_string(compared) + " tensors compared");
  return o.json ? ExitCode(verdict) : Fail(verdict);
}

Register reg({"diff", "Whether two checkpoints hold the same weights: tensor by tensor, by fingerprints",
              [](CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.footer(
      "Compares two checkpoints tensor by tensor -- names, shapes, dtypes and layout-independent "
      "fingerprints (docs/FORMAT.md 3) -- whatever each one is: a spec (.json), a store, a "
      "distributed save under any layout, a .safetensors file or a model.safetensors.index.json. "
      "Two lazy tensors with the same init rule, key and generator are identical by their spec; "
      "other lazy tensors are generated, dense ones read; no bytes move between the two. "
      "A rank's file -- a safetensors shard file (materialize, export --layout) or a distributed "
      "save's rank file -- is compared with the same region of the other side; two ranks' "
      "files of other layouts on their overlap (their shards' common elements -- a flat FSDP "
      "shard against a box TP shard too; disjoint shards "
      "are other-shards, not compared and no difference); a shard that is "
      "empty on its rank (seedstore.empty_shards) is identical to any tensor of its shape and "
      "dtype. A distributed save's rank file (P.<id>.rank<r>.h5) holds only the dense pieces its "
      "rank owns -- lazy tensors are in the master, a replica in its owner's file, an empty shard "
      "in none -- and does not list the save's other tensors: what it lacks is reported as "
      "not-compared and is no difference (diff the master P to compare every tensor). "
      "Lists what differs and what was not compared (--all: every tensor); exit 0 when every "
      "tensor compared is identical, 7 when any differs. Fingerprints are 128-bit sums of per-element XXH3 hashes: they catch accidental "
      "differences, not a forger's.");
  app.add_option("a", o->a, "First checkpoint")->required();
  app.add_option("b", o->b, "Second checkpoint")->required();
  app.add_option("--tensors", o->tensors, "Glob of tensor names to compare (default *)");
  app.add_flag("--recorded", o->recorded,
               "Trust fingerprints the sources record (stores, distributed saves; `verify` checks "
               "them) instead of recomputing them: O(#tensors)");
  app.add_flag("--all", o->all, "List identical tensors too");
  app.add_flag("--json", o->json, "JSON output");
  AddThreadsAndDeviceOptions(app, &o->threads, &o->device);
  return [o] { return Run(*o); };
}});

}  // namespace
}  // namespace seedstore::cli
