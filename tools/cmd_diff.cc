// seedstore diff: whether two checkpoints hold the same weights, tensor by tensor, by
// layout-independent fingerprints (io/diff.h). Exit 0 when every tensor is identical, 7
// (MISMATCH) when any differs.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "io/diff.h"
#include "io/open.h"
#include "tools/cli.h"

namespace seedstore::cli {
namespace {

struct Options {
  std::string a, b, tensors = "*", device = "auto";
  int threads = 0;
  bool json = false, recorded = false, all = false;
};

void PrintTable(const Options& o, const Catalog& A, const Catalog& B, const DiffReport& rep) {
  auto desc = [](const TensorRecord* t) { return ShapeText(t->shape) + " " + DTypeName(t->dtype); };
  for (const DiffRow& r : rep.rows) {
    if (r.verdict == DiffVerdict::kIdentical && !o.all) continue;
    std::string what;
    switch (r.verdict) {
      case DiffVerdict::kIdentical:
        what = r.by_spec       ? "same spec"
               : r.empty_shard ? "no elements on this rank"
                               : FingerprintHex(*r.fa);
        break;
      case DiffVerdict::kValues:
        what = "a " + FingerprintHex(*r.fa) + "  b " + FingerprintHex(*r.fb);
        break;
      case DiffVerdict::kShape:
      case DiffVerdict::kDType:
        if (r.empty_shard) {  // the other side's shape and dtype, against the empty piece's
          what = desc(r.a->piece && r.a->NumElements() == 0 ? r.b : r.a) +
                 " against an empty shard of another shape or dtype";
          break;
        }
        [[fallthrough]];
      case DiffVerdict::kShard:
        what = "a " + desc(r.a) + "  b " + desc(r.b);
        break;
      case DiffVerdict::kOnlyA:
        what = desc(r.a);
        break;
      case DiffVerdict::kOnlyB:
        what = desc(r.b);
        break;
      case DiffVerdict::kNotCompared:
        what = desc(r.a ? r.a : r.b) + "  (absent from the rank file " + (r.a ? "b" : "a") + ")";
        break;
    }
    if (r.shard)
      what += std::string("  (") +
              (r.empty_shard ? "an empty shard"
               : r.overlap   ? "the overlap " + r.ShardText() + " of the two shards"
                             : "shard " + DescribeRegion(*r.shard)) +
              " of " + ShapeText({r.shard->shape, r.shard->shape + r.shard->rank}) + ")";
    else if (r.verdict == DiffVerdict::kShard) what += "  (disjoint shards: not compared)";
    std::printf("%-13s %s  %s\n", DiffVerdictName(r.verdict), ShownText(r.name).c_str(),
                what.c_str());
  }
  std::printf("a: %s (%zu tensors)\nb: %s (%zu tensors)\n", o.a.c_str(), A.tensors().size(),
              o.b.c_str(), B.tensors().size());
  std::printf(
      "%d compared%s: %d identical, %d values differ, %d shape differs, %d dtype differs, "
      "%d only in a, %d only in b\n",
      rep.compared, o.recorded ? " (recorded fingerprints where present)" : "",
      rep.Count(DiffVerdict::kIdentical), rep.Count(DiffVerdict::kValues),
      rep.Count(DiffVerdict::kShape), rep.Count(DiffVerdict::kDType),
      rep.Count(DiffVerdict::kOnlyA), rep.Count(DiffVerdict::kOnlyB));
  if (rep.Count(DiffVerdict::kShard))
    std::printf("%d not compared: the two sides hold disjoint shards of them\n",
                rep.Count(DiffVerdict::kShard));
  if (rep.shards - rep.overlaps)
    std::printf(
        "%d compared as shards: a rank's shard file against the same region of the other side\n",
        rep.shards - rep.overlaps);
  if (rep.overlaps)
    std::printf("%d compared on the overlap of two rank files' shards of other regions\n",
                rep.overlaps);
  if (rep.by_spec)
    std::printf(
        "%d identical by spec: lazy on both sides with the same init rule, key and generator\n",
        rep.by_spec);
  if (rep.Count(DiffVerdict::kNotCompared))
    std::printf(
        "%d not compared: absent from a distributed save's rank file, which holds only the dense "
        "pieces its rank owns (lazy tensors are in the master, a replica in its owner's file, an "
        "empty shard in none); diff the save's master to compare every tensor\n",
        rep.Count(DiffVerdict::kNotCompared));
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
  Progress bar("diff", DiffWorkBytes(A, B, o.tensors));
  DiffOptions d;
  d.tensors = o.tensors;
  d.recorded = o.recorded;
  d.device = *device;
  d.threads = o.threads;
  d.progress = [&bar](uint64_t n) { bar.Advance(n); };
  auto rep = Diff(A, B, d);
  if (!rep.ok()) return Fail(rep.status());
  if (o.json) {
    nlohmann::json j = rep->ToJson(o.recorded);
    j["a"] = o.a;
    j["b"] = o.b;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    PrintTable(o, A, B, *rep);
  }
  if (rep->Identical()) return 0;
  const Status verdict =
      Mismatch("'" + o.a + "' and '" + o.b + "' differ in " + std::to_string(rep->differing) +
               " of " + std::to_string(rep->compared) + " tensors compared");
  return o.json ? ExitCode(verdict) : Fail(verdict);
}

Register reg(
    {"diff", "Whether two checkpoints hold the same weights: tensor by tensor, by fingerprints",
     [](CLI::App& app) {
       auto o = std::make_shared<Options>();
       app.footer(
           "Compares two checkpoints tensor by tensor -- names, shapes, dtypes and "
           "layout-independent "
           "fingerprints (docs/FORMAT.md 3) -- whatever each one is: a spec (.json), a store, a "
           "distributed save under any layout, a .safetensors file or a "
           "model.safetensors.index.json. "
           "Two lazy tensors with the same init rule, key and generator are identical by their "
           "spec; "
           "other lazy tensors are generated, dense ones read; no bytes move between the two. "
           "A rank's file -- a safetensors shard file (materialize, export --layout) or a "
           "distributed "
           "save's rank file -- is compared with the same region of the other side; two ranks' "
           "files of other layouts on their overlap (their shards' common elements -- a flat FSDP "
           "shard against a box TP shard too; disjoint shards "
           "are other-shards, not compared and no difference); a shard that is "
           "empty on its rank (seedstore.empty_shards) is identical to any tensor of its shape and "
           "dtype. A distributed save's rank file (P.<id>.rank<r>.h5) holds only the dense pieces "
           "its "
           "rank owns -- lazy tensors are in the master, a replica in its owner's file, an empty "
           "shard "
           "in none -- and does not list the save's other tensors: what it lacks is reported as "
           "not-compared and is no difference (diff the master P to compare every tensor). "
           "Lists what differs and what was not compared (--all: every tensor); exit 0 when every "
           "tensor compared is identical, 7 when any differs. Fingerprints are 128-bit sums of "
           "per-element XXH3 hashes: they catch accidental "
           "differences, not a forger's.");
       app.add_option("a", o->a, "First checkpoint")->required();
       app.add_option("b", o->b, "Second checkpoint")->required();
       app.add_option("--tensors", o->tensors, "Glob of tensor names to compare (default *)");
       app.add_flag(
           "--recorded", o->recorded,
           "Trust fingerprints the sources record (stores, distributed saves; `verify` checks "
           "them) instead of recomputing them: O(#tensors)");
       app.add_flag("--all", o->all, "List identical tensors too");
       app.add_flag("--json", o->json, "JSON output");
       AddThreadsAndDeviceOptions(app, &o->threads, &o->device);
       return [o] { return Run(*o); };
     }});

}  // namespace
}  // namespace seedstore::cli
