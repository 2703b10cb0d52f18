#include "store/catalog.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

namespace seedstore {

uint64_t TensorRecord::NumElements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

uint64_t TensorRecord::fp_seed() const {
  if (!piece) return FingerprintSeed(name, dtype, shape);
  return FingerprintSeed(name, dtype,
                         std::vector<uint64_t>(piece->shape, piece->shape + piece->rank));
}

std::vector<Region> TensorRecord::FrameRegions(const Region& r) const {
  if (!piece) return {r};
  const Region& p = *piece;
  if (p.flat) {  // this tensor is 1-D [end - begin]: element k is global flat index begin + k
    Region g = p;
    g.begin = p.begin + (r.flat ? r.begin : r.start[0]);
    g.end = p.begin + (r.flat ? r.end : r.stop[0]);
    return {g};
  }
  std::vector<Region> local =
      r.flat ? FlatRangeToBoxes(shape, r.begin, r.end) : std::vector<Region>{r};
  for (Region& b : local) {
    Region g = p;
    for (int d = 0; d < p.rank; ++d) {
      g.start[d] = p.start[d] + b.start[d];
      g.stop[d] = p.start[d] + b.stop[d];
    }
    b = g;
  }
  return local;
}

Fingerprint FingerprintOf(const TensorRecord& t, const Region& r, const void* data, CpuOptions o) {
  Fingerprint f;
  const auto* p = static_cast<const unsigned char*>(data);
  const uint64_t seed = t.fp_seed();
  for (const Region& g : t.FrameRegions(r)) {
    f.Add(FingerprintCpu(t.dtype, g, p, seed, o));
    p += g.Count() * DTypeSize(t.dtype);
  }
  return f;
}

Status ReadByBoxes(const TensorRecord& t, const Region& r, void* out,
                   const std::function<Status(const Region& box, void* dst)>& read_box) {
  if (!r.flat) return read_box(r, out);
  auto* p = static_cast<unsigned char*>(out);
  for (const Region& b : FlatRangeToBoxes(t.shape, r.begin, r.end)) {
    SEEDSTORE_RETURN_IF_ERROR(read_box(b, p));
    p += b.Count() * DTypeSize(t.dtype);
  }
  return Status::Ok();
}

Status CheckWholeTensor(const Catalog& c, const TensorRecord& t, const std::string& what) {
  if (!t.piece) return Status::Ok();
  std::string global;
  for (int d = 0; d < t.piece->rank; ++d)
    global += (d ? ", " : "") + std::to_string(t.piece->shape[d]);
  return InvalidArgument(
      what + ": source '" + c.origin() + "' tensor " + Quoted(t.name) + " is a piece " +
      DescribeRegion(*t.piece) + " of a [" + global +
      "] tensor (a rank's file: a distributed save's rank file or a rank's safetensors "
      "shard file), and " +
      what +
      " needs whole tensors: give the whole model instead -- for "
      "a distributed save, its master (reshard the save's master, not a rank file)");
}

Status CheckRegionIn(const TensorRecord& t, const Region& r) {
  const std::string w = "tensor '" + t.name + "'";
  if (r.rank != static_cast<int>(t.shape.size()))
    return InvalidArgument(w + ": region has rank " + std::to_string(r.rank) + ", tensor has " +
                           std::to_string(t.shape.size()));
  for (int d = 0; d < r.rank; ++d) {
    if (r.shape[d] != t.shape[d])
      return InvalidArgument(w + ": region shape differs at dim " + std::to_string(d));
    if (!r.flat && (r.start[d] > r.stop[d] || r.stop[d] > t.shape[d]))
      return InvalidArgument(w + ": region dim " + std::to_string(d) + " [" +
                             std::to_string(r.start[d]) + ":" + std::to_string(r.stop[d]) +
                             "] is outside [0:" + std::to_string(t.shape[d]) + "]");
  }
  if (r.flat && (r.begin > r.end || r.end > t.NumElements()))
    return InvalidArgument(w + ": flat range is outside the tensor");
  return Status::Ok();
}

namespace {
// The global flat indices box `b`'s elements span, from its first to its last (0 when empty).
uint64_t FlatSpan(const Region& b) {
  const uint64_t n = b.Count();
  if (n == 0) return 0;
  const uint64_t run = b.RunLength();
  return b.RunBase(n / run - 1) + run - b.RunBase(0);
}

// Splits box `b` into boxes of at most `max_bytes` (halving its outermost dimension of extent
// > 1, recursively), in row-major order of their elements. by_span: measured by the flat
// indices each box spans (FlatSpan) instead of by its elements.
void SplitBox(const Region& b, size_t es, uint64_t max_bytes, std::vector<Region>* out,
              bool by_span = false) {
  int d = 0;
  while (d < b.rank && b.stop[d] - b.start[d] <= 1) ++d;
  if ((by_span ? FlatSpan(b) : b.Count()) * es <= max_bytes || d == b.rank) {
    out->push_back(b);
    return;
  }
  Region lo = b, hi = b;
  lo.stop[d] = hi.start[d] = b.start[d] + (b.stop[d] - b.start[d]) / 2;
  SplitBox(lo, es, max_bytes, out, by_span);
  SplitBox(hi, es, max_bytes, out, by_span);
}
}  // namespace

Result<Fingerprint> Catalog::FingerprintRegion(size_t i, const Region& r, CpuOptions o) const {
  const TensorRecord& t = tensors().at(i);
  if (t.lazy) return t.lazy->FingerprintRegion(r, o);
  return FingerprintBySlabs(*this, i, r, o, uint64_t{64} << 20);
}

Result<Fingerprint> FingerprintBySlabs(const Catalog& c, size_t i, const Region& r, CpuOptions o,
                                       uint64_t slab_bytes, const TensorRecord* frame) {
  const TensorRecord& t = frame ? *frame : c.tensors().at(i);
  const size_t es = DTypeSize(t.dtype);
  const uint64_t kSlabBytes = std::max<uint64_t>(slab_bytes, es);
  std::vector<Region> slabs;
  if (r.flat) {
    const uint64_t step = kSlabBytes / es;
    for (uint64_t b = r.begin; b < r.end; b += std::min(step, r.end - b))
      slabs.push_back(FlatRegion(t.shape, b, b + std::min(step, r.end - b)));
  } else {
    SplitBox(r, es, kSlabBytes, &slabs);
  }
  Fingerprint f;
  std::vector<unsigned char> buf;
  for (const Region& s : slabs) {
    buf.resize(s.Count() * es);
    SEEDSTORE_RETURN_IF_ERROR(c.Read(i, s, buf.data(), o));
    f.Add(FingerprintOf(t, s, buf.data(), o));
  }
  return f;
}

Result<Fingerprint> FingerprintBoxOfFlatPiece(const Catalog& c, size_t i, const Region& g,
                                              CpuOptions o, uint64_t slab_bytes) {
  const TensorRecord& t = c.tensors().at(i);
  std::string w = "'";  // (one + chain here trips GCC 12's -Wrestrict)
  w += c.origin();
  w += "' tensor ";
  w += Quoted(t.name);
  if (!t.piece || !t.piece->flat)
    return InvalidArgument(w + " is not a flat piece of a larger tensor");
  const Region& p = *t.piece;
  bool same = !g.flat && g.rank == p.rank;
  for (int d = 0; same && d < g.rank; ++d)
    same = g.shape[d] == p.shape[d] && g.start[d] <= g.stop[d] && g.stop[d] <= g.shape[d];
  if (!same)
    return InvalidArgument(w + ": " + DescribeRegion(g) + " is not a box of its global tensor");
  Fingerprint f;
  if (g.Count() == 0) return f;
  const uint64_t first = g.RunBase(0);
  if (first < p.begin || first + FlatSpan(g) > p.end)
    return InvalidArgument(w + ": the box " + DescribeRegion(g) + " is not inside its piece " +
                           DescribeRegion(p));
  const size_t es = DTypeSize(t.dtype);
  std::vector<Region> slabs;
  SplitBox(g, es, std::max<uint64_t>(slab_bytes, es), &slabs, /*by_span=*/true);
  std::vector<unsigned char> span, elems;
  for (const Region& s : slabs) {
    // The piece's elements from the slab's first to its last, then the slab's runs out of them.
    const uint64_t lo = s.RunBase(0), run = s.RunLength(), runs = s.Count() / run;
    span.resize(FlatSpan(s) * es);
    const Region local = BoxRegion({p.end - p.begin}, {lo - p.begin}, {lo - p.begin + FlatSpan(s)});
    SEEDSTORE_RETURN_IF_ERROR(c.Read(i, local, span.data(), o));
    elems.resize(s.Count() * es);
    for (uint64_t q = 0; q < runs; ++q)
      std::memcpy(elems.data() + q * run * es, span.data() + (s.RunBase(q) - lo) * es, run * es);
    f.Add(FingerprintCpu(t.dtype, s, elems.data(), t.fp_seed(), o));
  }
  return f;
}

std::vector<Region> FlatRangeToBoxes(const std::vector<uint64_t>& shape, uint64_t begin,
                                     uint64_t end) {
  std::vector<Region> out;
  const int rank = static_cast<int>(shape.size());
  const Region whole = WholeRegion(rank, shape.data());
  if (begin >= end) return out;
  if (rank == 0) {
    out.push_back(whole);
    return out;
  }
  std::vector<uint64_t> inner(rank + 1, 1);
  for (int d = rank - 1; d >= 0; --d) inner[d] = inner[d + 1] * shape[d];
  std::vector<uint64_t> prefix;
  // Emits the box: prefix fixed on dims < d, [a, b) on dim d, full after.
  auto emit = [&](int d, uint64_t a, uint64_t b) {
    Region r = whole;
    for (int k = 0; k < d; ++k) {
      r.start[k] = prefix[k];
      r.stop[k] = prefix[k] + 1;
    }
    r.start[d] = a;
    r.stop[d] = b;
    out.push_back(r);
  };
  std::function<void(int, uint64_t, uint64_t)> split = [&](int d, uint64_t lo, uint64_t hi) {
    if (lo >= hi) return;
    const uint64_t in = inner[d + 1];
    if (lo % in == 0 && hi % in == 0) {
      emit(d, lo / in, hi / in);
      return;
    }
    uint64_t a = lo / in;
    const uint64_t b = hi / in;
    if (a == b) {
      prefix.push_back(a);
      split(d + 1, lo - a * in, hi - a * in);
      prefix.pop_back();
      return;
    }
    if (lo % in != 0) {
      prefix.push_back(a);
      split(d + 1, lo % in, in);
      prefix.pop_back();
      ++a;
    }
    if (a < b) emit(d, a, b);
    if (hi % in != 0) {
      prefix.push_back(b);
      split(d + 1, 0, hi % in);
      prefix.pop_back();
    }
  };
  split(0, begin, end);
  return out;
}

Result<StorageSummary> Catalog::Storage(const std::vector<size_t>& listed) const {
  StorageSummary s;
  s.tensors.resize(listed.size());
  for (size_t k = 0; k < listed.size(); ++k) s.tensors[k].dense = !tensors().at(listed[k]).lazy;
  return s;
}

int Catalog::Find(const std::string& name) const {
  const auto& ts = tensors();
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i].name == name) return static_cast<int>(i);
  return -1;
}

Result<std::unique_ptr<SpecCatalog>> SpecCatalog::Create(const ModelSpec& spec,
                                                         std::string origin) {
  auto c = std::make_unique<SpecCatalog>();
  c->spec_ = spec;
  c->origin_ = std::move(origin);
  for (const auto& t : spec.tensors) {
    TensorRecord rec;
    rec.name = t.name;
    rec.shape = t.shape;
    rec.dtype = t.dtype;
    SEEDSTORE_ASSIGN_OR_RETURN(LazyTensor lazy, LazyTensor::Resolve(t, spec.seed));
    rec.lazy = std::make_shared<const LazyTensor>(std::move(lazy));
    c->records_.push_back(std::move(rec));
  }
  return c;
}

Status SpecCatalog::Read(size_t i, const Region& r, void* out, CpuOptions o) const {
  return records_.at(i).lazy->Materialize(r, out, o);
}

bool GlobMatch(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

Status CheckGlobMatches(const std::string& glob, std::initializer_list<const Catalog*> cats,
                        const std::string& flag) {
  if (glob == "*") return Status::Ok();
  std::string where;
  for (const Catalog* c : cats) {
    for (const TensorRecord& t : c->tensors())
      if (GlobMatch(glob, t.name)) return Status::Ok();
    where += (where.empty() ? "'" : " or '") + c->origin() + "'";
  }
  return InvalidArgument(flag + " '" + glob + "' matches no tensor of " + where);
}

}  // namespace seedstore
