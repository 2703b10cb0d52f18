#include "io/interop.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/path.h"
#include "io/safetensors.h"
#include "store/json_text.h"
#include "store/layout.h"

namespace seedstore {
namespace {

using json = nlohmann::json;

bool EndsWith(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

struct Item {
  size_t index;
  Region region;  // what is read, in the tensor's own indices
  std::vector<uint64_t> shape;
  std::optional<Region> placed;  // where the written tensor lies in a global one (seedstore.shards)
  uint64_t bytes;
};

}  // namespace

Result<uint64_t> ParseByteSize(const std::string& text) {
  static const char* kUnitNames = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB";
  const Status not_a_size = InvalidArgument("size '" + text +
                                            "': expected a number (such as 5, 1.5 or 1e3) "
                                            "and an optional unit (" +
                                            kUnitNames + "), nothing else");
  // A decimal number -- digits, optionally a fraction and an exponent (1e3) -- then letters.
  auto digits = [&text](size_t i) {
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    return i;
  };
  size_t i = digits(0);
  const bool whole = i > 0;
  if (i < text.size() && text[i] == '.') i = digits(i + 1);
  if (!whole && i < 2) return not_a_size;  // no digit before the unit
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    const size_t sign =
        i + 1 < text.size() && (text[i + 1] == '+' || text[i + 1] == '-') ? i + 2 : i + 1;
    if (digits(sign) > sign) i = digits(sign);  // else the 'e' begins the unit (and is refused)
  }
  std::string unit = text.substr(i);
  for (auto& c : unit) {
    if (!std::isalpha(static_cast<unsigned char>(c))) return not_a_size;  // 1.5.5, 5 GB, 5GB!
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  static const std::map<std::string, double> kUnits = {{"", 1},
                                                       {"B", 1},
                                                       {"KB", 1e3},
                                                       {"MB", 1e6},
                                                       {"GB", 1e9},
                                                       {"TB", 1e12},
                                                       {"KIB", 1024.0},
                                                       {"MIB", 1048576.0},
                                                       {"GIB", 1073741824.0},
                                                       {"TIB", 1099511627776.0}};
  auto it = kUnits.find(unit);
  if (it == kUnits.end())
    return InvalidArgument("size '" + text + "': unknown unit '" + text.substr(i) + "' (" +
                           kUnitNames + ")");
  const double bytes = std::strtod(text.substr(0, i).c_str(), nullptr) * it->second;
  if (!(bytes >= 1) || bytes > 9.2e18)
    return InvalidArgument("size '" + text + "' is out of range (1 byte to 9.2e18 bytes)");
  return static_cast<uint64_t>(bytes);  // whole bytes, rounded down
}

namespace {

// The name of the output's split files, without "-00001-of-0000N.safetensors".
std::string SplitStem(const std::string& path) {
  std::string stem = BaseName(path);
  if (EndsWith(stem, ".safetensors")) stem.resize(stem.size() - 12);
  return stem;
}

// The k-th (from 1) of n split files of an export to `path`, as Hugging Face names them.
std::string SplitFileName(const std::string& path, size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.safetensors", k, n);
  return DirPrefix(path) + SplitStem(path) + buf;
}

// An export's output names a file: not a folder ("out/", ".", an existing directory) and,
// when split, one with a stem to name the split files by.
Status CheckExportPath(const std::string& path, bool split) {
  const std::string base = BaseName(path);
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return InvalidArgument("'" + path + "' is a directory; give a file to write");
  if (base.empty() || base == "." || base == "..")
    return InvalidArgument("'" + path + "' names a folder, not a file; give a file to write");
  if (split && SplitStem(path).empty())
    return InvalidArgument("'" + path +
                           "' has no name to call the split files by (<name>-00001-of-0000N"
                           ".safetensors); give a file such as model.safetensors");
  return Status::Ok();
}

// What an export writes: the selected tensors (or regions), packed into files, and the files.
struct ExportPlan {
  std::vector<Item> items;
  json empty = json::object();  // tensors whose shard on this rank is empty: name -> shape, dtype
  uint64_t total = 0;
  std::optional<int> rank;                 // the layout rank whose shards these are, if any
  std::vector<std::vector<size_t>> files;  // per file, its items
  std::vector<std::string> names;          // per file, then (split) the index
};

}  // namespace

Status CheckFitsInMemory(uint64_t bytes, const std::string& what) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  unsigned __int128 limit =
      pages > 0 && page > 0 ? static_cast<unsigned __int128>(pages) * page : ~0ull;
  struct rlimit as;
  if (::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    limit = std::min<unsigned __int128>(limit, as.rlim_cur);
  if (bytes <= limit) return Status::Ok();
  return Unsupported(
      what + " needs " + std::to_string(bytes) + " bytes in memory at once; this machine has " +
      std::to_string(static_cast<uint64_t>(limit)) + " bytes of memory (shard it smaller)");
}

namespace {

// Plans an export from the catalog's records alone (nothing is read or written).
Result<ExportPlan> PlanExport(const Catalog& c, const std::string& path, const ExportOptions& o,
                              uint64_t max_file_bytes) {
  ExportPlan p;
  // Select tensors and regions, in catalog order.
  const auto& ts = c.tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    const TensorRecord& t = ts[i];
    if (!GlobMatch(o.tensors_glob, t.name)) continue;
    Item it{i, WholeTensor(t.shape), t.shape, t.piece, 0};  // a piece stays one
    if (o.layout) {
      SEEDSTORE_RETURN_IF_ERROR(CheckWholeTensor(c, t, "--layout"));
      SEEDSTORE_ASSIGN_OR_RETURN(Shard s, o.layout->ShardOf(t.name, t.shape, o.rank));
      it.region = s.region;
      it.shape = LocalShape(s.region);
      it.placed = s.region;
    }
    if (it.placed && it.placed->Count() == 0) {  // an empty shard: named, not written
      const Region& pl = *it.placed;
      p.empty[t.name] = {{"global_shape", std::vector<uint64_t>(pl.shape, pl.shape + pl.rank)},
                         {"dtype", DTypeName(t.dtype)}};
      continue;
    }
    SEEDSTORE_RETURN_IF_ERROR(CheckSafetensorsName(t.name, path));  // before any file is written
    it.bytes = it.region.Count() * DTypeSize(t.dtype);
    SEEDSTORE_RETURN_IF_ERROR(CheckFitsInMemory(
        it.bytes, "tensor " + Quoted(t.name) +
                      (o.layout ? " shard " + DescribeRegion(it.region) : std::string())));
    p.total += it.bytes;
    p.items.push_back(std::move(it));
  }
  // The rank whose shards these are: --rank, or the one the source records.
  p.rank = o.layout ? std::optional<int>(o.rank) : c.shard_rank();
  // Pack into files.
  p.files.resize(1);
  uint64_t in_file = 0;
  for (size_t k = 0; k < p.items.size(); ++k) {
    if (max_file_bytes > 0 && !p.files.back().empty() &&
        in_file + p.items[k].bytes > max_file_bytes) {
      p.files.emplace_back();
      in_file = 0;
    }
    p.files.back().push_back(k);
    in_file += p.items[k].bytes;
  }
  const size_t n = p.files.size();
  SEEDSTORE_RETURN_IF_ERROR(CheckExportPath(path, n > 1));
  if (n == 1) {
    p.names.push_back(path);
  } else {
    for (size_t f = 0; f < n; ++f) p.names.push_back(SplitFileName(path, f + 1, n));
    p.names.push_back(path + ".index.json");
  }
  if (o.check_output)
    for (const std::string& f : p.names) SEEDSTORE_RETURN_IF_ERROR(o.check_output(f));
  return p;
}

// ExportSafetensorsFiles, which also counts the tensors written into `*tensors`. Every file is
// written to a synced temporary first; only when all are complete are they renamed into place,
// the index last (docs/FORMAT.md 8).
Result<std::vector<std::string>> ExportFiles(const Catalog& c, const std::string& path,
                                             const ExportOptions& o, uint64_t max_file_bytes,
                                             std::function<void(uint64_t)> progress, int* tensors) {
  SEEDSTORE_ASSIGN_OR_RETURN(const ExportPlan p, PlanExport(c, path, o, max_file_bytes));
  const auto& ts = c.tensors();
  std::vector<AtomicFile> written;  // temporaries, until CommitAll renames them
  json weight_map = json::object();
  for (size_t f = 0; f < p.files.size(); ++f) {
    SafetensorsWriter w;
    json shards = json::object();
    for (size_t k : p.files[f]) {
      const Item& it = p.items[k];
      const TensorRecord& t = ts[it.index];
      if (const std::optional<Region>& pl = it.placed) {
        shards[t.name] = RegionToJson(*pl);
        shards[t.name]["global_shape"] = std::vector<uint64_t>(pl->shape, pl->shape + pl->rank);
      }
      weight_map[t.name] = BaseName(p.names[f]);
      const size_t idx = it.index;
      const Region r = it.region;
      const uint64_t bytes = it.bytes;
      w.Add(t.name, t.dtype, it.shape, [&c, &o, idx, r, bytes, &progress](void* dst) {
        Status s = ReadOnDevice(o.device, c, idx, r, dst, o.cpu);
        if (s.ok() && progress) progress(bytes);
        return s;
      });
    }
    std::map<std::string, std::string> meta = {{"format", "pt"}, {"seedstore.version", "1"}};
    if (o.layout || !shards.empty() || !p.empty.empty()) meta["seedstore.shards"] = shards.dump();
    if (p.rank) meta["seedstore.rank"] = std::to_string(*p.rank);
    if (f == 0 && !p.empty.empty()) meta["seedstore.empty_shards"] = p.empty.dump();
    SEEDSTORE_ASSIGN_OR_RETURN(AtomicFile file, w.WriteTemporary(p.names[f], meta));
    written.push_back(std::move(file));
  }
  if (p.files.size() > 1) {
    json idx = {{"metadata", {{"total_size", p.total}}}, {"weight_map", weight_map}};
    if (p.rank) idx["metadata"]["seedstore.rank"] = std::to_string(*p.rank);
    const std::string text = idx.dump(2) + "\n";
    SEEDSTORE_ASSIGN_OR_RETURN(AtomicFile af, AtomicFile::Create(p.names.back()));
    SEEDSTORE_RETURN_IF_ERROR(af.Append(text.data(), text.size()));
    SEEDSTORE_RETURN_IF_ERROR(af.Sync());
    written.push_back(std::move(af));
  }
  SEEDSTORE_RETURN_IF_ERROR(AtomicFile::CommitAll(written));
  *tensors = static_cast<int>(p.items.size());
  return p.names;
}

}  // namespace

Result<std::vector<std::string>> ExportSafetensorsFiles(const Catalog& c, const std::string& path,
                                                        const ExportOptions& o,
                                                        uint64_t max_file_bytes,
                                                        std::function<void(uint64_t)> progress) {
  int tensors = 0;
  return ExportFiles(c, path, o, max_file_bytes, std::move(progress), &tensors);
}

Result<int> ExportSafetensors(const Catalog& c, const std::string& path, const ExportOptions& o) {
  int tensors = 0;
  SEEDSTORE_RETURN_IF_ERROR(ExportFiles(c, path, o, 0, {}, &tensors).status());
  return tensors;
}

std::vector<std::string> LeftoverExportFiles(const std::string& path,
                                             const std::vector<std::string>& written) {
  std::vector<std::string> left;
  auto consider = [&](const std::string& f) {
    struct stat st;
    if (std::find(written.begin(), written.end(), f) == written.end() &&
        ::stat(f.c_str(), &st) == 0 && S_ISREG(st.st_mode))
      left.push_back(f);
  };
  consider(path);
  consider(path + ".index.json");
  const std::string dir = DirPrefix(path), stem = SplitStem(path);
  const size_t tail = std::string("-00001-of-00002.safetensors").size();
  DIR* d = ::opendir(dir.empty() ? "." : dir.c_str());
  if (!d) return left;
  std::vector<std::string> split;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() != stem.size() + tail || name.compare(0, stem.size(), stem) != 0) continue;
    const std::string digits = name.substr(stem.size());  // "-00001-of-00002.safetensors"
    const size_t k = std::strtoul(digits.substr(1, 5).c_str(), nullptr, 10);
    const size_t n = std::strtoul(digits.substr(10, 5).c_str(), nullptr, 10);
    if (SplitFileName(path, k, n) == dir + name) split.push_back(dir + name);  // exactly that form
  }
  ::closedir(d);
  std::sort(split.begin(), split.end());
  for (const std::string& f : split) consider(f);
  return left;
}

namespace {

// The safetensors files `path` stands for: itself, or those its index names.
Result<SafetensorsIndex> ListSafetensorsFiles(const std::string& path) {
  if (!EndsWith(path, ".json")) return SafetensorsIndex{{path}, {}};
  if (const std::string kind = NotARegularFile(path); !kind.empty())
    return InvalidArgument("index file " + Quoted(path) + " is " + kind +
                           ", not a regular file: an index names the files next to it");
  SEEDSTORE_ASSIGN_OR_RETURN(const std::string text,
                             ReadTextFile(path, "index file " + Quoted(path)));
  return ParseSafetensorsIndex(text, path);
}

// The "global_shape" array of a rank file's metadata entry `m` (seedstore.shards or
// seedstore.empty_shards), checked as a shape of `dtype`; errors (kCorrupt) start with `w`.
Result<std::vector<uint64_t>> GlobalShapeOf(const json& m, DType dtype, const std::string& w) {
  std::vector<uint64_t> global;
  for (const json& d : m["global_shape"]) {
    if (!d.is_number_unsigned()) return Corrupt(w + ": global_shape holds a non-integer");
    global.push_back(d.get<uint64_t>());
  }
  if (Status vs = ValidateShape(global, dtype, "global_shape"); !vs.ok())
    return Corrupt(w + ": " + vs.message());
  return global;
}

}  // namespace

bool IsSafetensorsSource(const std::string& path) {
  if (EndsWith(path, ".safetensors")) return true;
  if (!EndsWith(path, ".json")) {  // by its first bytes
    if (!NotARegularFile(path).empty() || LooksLikeHdf5(path)) return false;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    unsigned char head[9];
    struct stat st;
    const bool read = ::pread(fd, head, sizeof head, 0) == static_cast<ssize_t>(sizeof head) &&
                      ::fstat(fd, &st) == 0;
    ::close(fd);
    if (!read) return false;
    uint64_t n = 0;
    for (int k = 7; k >= 0; --k) n = (n << 8) | head[k];
    return head[8] == '{' && n >= 2 && n <= static_cast<uint64_t>(st.st_size) - 8;
  }
  if (!NotARegularFile(path).empty()) return false;  // read once, by whoever opens it as a spec
  const Result<std::string> text = ReadTextFile(path, path);
  if (!text.ok()) return false;  // OpenCatalog reports it
  const json j = ParseJson(*text, nullptr);
  return j.is_object() && j.contains("weight_map");  // ParseSafetensorsIndex checks the rest
}

Result<std::unique_ptr<SafetensorsCatalog>> SafetensorsCatalog::Open(const std::string& path) {
  SEEDSTORE_ASSIGN_OR_RETURN(SafetensorsIndex index, ListSafetensorsFiles(path));
  auto c = std::unique_ptr<SafetensorsCatalog>(new SafetensorsCatalog());
  c->origin_ = path;
  std::map<std::string, size_t> seen;  // tensor name -> file index
  for (const std::string& f : index.files) {
    const std::vector<std::string>& mapped = index.tensors[f];  // empty: `path` is no index
    Result<SafetensorsFile> opened = SafetensorsFile::Open(f);
    if (!opened.ok() && !mapped.empty())
      return opened.status().WithContext("index file '" + path + "': tensor " + Quoted(mapped[0]) +
                                         " is mapped to '" + f + "'");
    SEEDSTORE_RETURN_IF_ERROR(opened.status());
    SafetensorsFile file = std::move(*opened);
    for (const std::string& name : mapped)
      if (!file.Find(name))
        return NotFound("index file '" + path + "': tensor " + Quoted(name) + " is mapped to '" +
                        f + "', which does not hold it");
    // A rank's shard file says where each tensor lies in the global one.
    json shard_meta = json::object();
    if (auto m = file.metadata().find("seedstore.shards"); m != file.metadata().end()) {
      std::string why;
      shard_meta = ParseJson(m->second, &why);
      if (shard_meta.is_discarded() || !shard_meta.is_object())
        return Corrupt("safetensors file '" + f +
                       "': __metadata__['seedstore.shards'] is not a JSON object" +
                       (why.empty() ? std::string() : ": " + why));
      for (auto it = shard_meta.begin(); it != shard_meta.end(); ++it)
        if (!file.Find(it.key()))
          return Corrupt("safetensors file '" + f + "': seedstore.shards names tensor " +
                         Quoted(it.key()) + ", which the file does not hold");
    }
    if (auto m = file.metadata().find("seedstore.rank"); m != file.metadata().end()) {
      const std::string& text = m->second;
      const std::string w =
          "safetensors file '" + f + "': __metadata__['seedstore.rank'] is " + Quoted(text);
      int r = -1;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), r);
      if (ec != std::errc() || end != text.data() + text.size() || r < 0)
        return Corrupt(w + ", not a rank (0..2147483647)");
      if (c->rank_ && *c->rank_ != r)
        return Corrupt(w + ", another file's is '" + std::to_string(*c->rank_) + "'");
      c->rank_ = r;
    }
    // Its tensors in file-offset order, each with where it lies in the global tensor.
    std::vector<SafetensorsEntry> v = file.entries();
    std::stable_sort(v.begin(), v.end(),
                     [](const auto& a, const auto& b) { return a.begin < b.begin; });
    std::vector<std::pair<SafetensorsEntry, std::optional<Region>>> held;
    for (SafetensorsEntry& e : v) {
      std::optional<Region> shard;
      if (shard_meta.contains(e.name)) {
        const json& m = shard_meta[e.name];
        const std::string w =
            "safetensors file '" + f + "' tensor '" + e.name + "': seedstore.shards";
        if (!m.is_object() || !m.contains("global_shape") || !m["global_shape"].is_array())
          return Corrupt(w + " has no global_shape");
        SEEDSTORE_ASSIGN_OR_RETURN(const std::vector<uint64_t> global,
                                   GlobalShapeOf(m, e.dtype, w));
        auto r = RegionFromJson(m, global);
        if (!r.ok()) return Corrupt(w + ": " + r.status().message());
        if (LocalShape(*r) != e.shape)
          return Corrupt(w + ": the region " + DescribeRegion(*r) +
                         " does not have the tensor's shape");
        shard = *r;
      }
      held.emplace_back(std::move(e), shard);
    }
    // Then the tensors it holds no elements of (their shard on its rank is empty), in name
    // order: each an empty piece, the flat range [0, 0) of its global shape (docs/FORMAT.md 8).
    if (auto m = file.metadata().find("seedstore.empty_shards"); m != file.metadata().end()) {
      const std::string w = "safetensors file '" + f + "': __metadata__['seedstore.empty_shards']";
      std::string why;
      const json e = ParseJson(m->second, &why);
      if (!e.is_object())
        return Corrupt(w + " is not a JSON object" + (why.empty() ? std::string() : ": " + why));
      for (auto it = e.begin(); it != e.end(); ++it) {
        const std::string tw = w + " tensor " + Quoted(it.key());
        const json& v = *it;
        if (!v.is_object() || !v.contains("global_shape") || !v["global_shape"].is_array() ||
            !v.contains("dtype") || !v["dtype"].is_string())
          return Corrupt(tw + ": needs global_shape and dtype");
        SafetensorsEntry entry;  // no bytes
        entry.name = it.key();
        entry.shape = {0};
        auto dt = ParseDType(v["dtype"].get<std::string>());
        if (!dt.ok()) return Corrupt(tw + ": " + dt.status().message());
        entry.dtype = *dt;
        SEEDSTORE_ASSIGN_OR_RETURN(const std::vector<uint64_t> global,
                                   GlobalShapeOf(v, entry.dtype, tw));
        if (file.Find(entry.name)) return Corrupt(tw + ": the file holds that tensor");
        held.emplace_back(std::move(entry), FlatRegion(global, 0, 0));
      }
    }
    const size_t k = c->files_.size();
    for (auto& [e, shard] : held) {
      if (e.name.empty())  // valid safetensors, but every seedstore command names tensors
        return InvalidArgument("safetensors file '" + f +
                               "': a tensor has an empty name; seedstore reads "
                               "only named tensors (rename it)");
      if (auto it = seen.find(e.name); it != seen.end())
        return InvalidArgument(
            (EndsWith(path, ".json") ? "index file '" + path + "': " : std::string()) +
            "safetensors tensor '" + e.name + "' is held by both '" + c->files_[it->second].path() +
            "' and '" + f + "'");
      seen[e.name] = k;
      TensorRecord t;
      t.name = e.name;
      t.shape = e.shape;
      t.dtype = e.dtype;
      t.piece = shard;  // fingerprints in the global tensor's frame, as a store's rank file
      c->records_.push_back(std::move(t));
      c->where_.emplace_back(k, std::move(e));
    }
    c->files_.push_back(std::move(file));
  }
  return c;
}

std::vector<std::string> SafetensorsCatalog::other_files() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < records_.size(); ++i)
    if (std::find(out.begin(), out.end(), file_of(i)) == out.end()) out.push_back(file_of(i));
  return out;
}

Result<StorageSummary> SafetensorsCatalog::Storage(const std::vector<size_t>& listed) const {
  StorageSummary s;
  s.kind = StorageKind::kSafetensors;
  s.files = num_files();
  for (size_t i : listed) {
    TensorStorage t;
    t.dense = !records_.at(i).lazy;
    t.bytes_on_disk = records_.at(i).NumBytes();
    s.tensors.push_back(std::move(t));
  }
  return s;
}

Status SafetensorsCatalog::Read(size_t i, const Region& r, void* out, CpuOptions) const {
  if (i >= records_.size())
    return InvalidArgument("'" + origin_ + "': tensor index " + std::to_string(i) +
                           " out of range");
  const TensorRecord& t = records_[i];
  SEEDSTORE_RETURN_IF_ERROR(CheckRegionIn(t, r).WithContext("'" + file_of(i) + "'"));
  const auto& [k, e] = where_[i];
  return ReadByBoxes(t, r, out,
                     [&](const Region& b, void* dst) { return files_[k].ReadBox(e, b, dst); });
}

Result<int> ImportSafetensors(const std::string& source, const std::string& store,
                              const ImportOptions& o, std::function<void(uint64_t)> progress) {
  if (LooksLikeHdf5(source))  // not a damaged safetensors file: the wrong kind of input
    return InvalidArgument(
        "'" + source +
        "' is an HDF5 file (a seedstore store or distributed save?), not "
        "safetensors: import reads .safetensors files and model.safetensors.index.json "
        "(a store is copied or consolidated with: seedstore reshard SRC --consolidate -o OUT)");
  SEEDSTORE_ASSIGN_OR_RETURN(std::shared_ptr<SafetensorsCatalog> src,
                             SafetensorsCatalog::Open(source));
  const std::vector<TensorRecord>& ts = src->tensors();
  auto source_of = [src](size_t i) {
    return BoxSource([src, i](const Region& box, void* out) { return src->Read(i, box, out); });
  };
  // A rank's shard file's tensors are pieces, and stay pieces (TensorRecord::piece).
  auto placed = [&](const std::optional<Region>& piece) {
    DenseChunking c;
    c.piece = piece;
    return c;
  };
  if (!o.update) {
    SEEDSTORE_ASSIGN_OR_RETURN(auto w,
                               StoreWriter::Create(store, o.seed, Generator::kThreefry, o.write));
    w->SetShardRank(src->shard_rank());
    for (size_t i = 0; i < ts.size(); ++i)
      SEEDSTORE_RETURN_IF_ERROR(w->AddDense(ts[i].name, ts[i].shape, ts[i].dtype, source_of(i),
                                            progress, placed(ts[i].piece))
                                    .WithContext("importing '" + src->file_of(i) + "'"));
    SEEDSTORE_RETURN_IF_ERROR(w->Commit());
    return static_cast<int>(ts.size());
  }
  // Update: check shapes and dtypes against the store, then rewrite it.
  SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<H5Store> st, H5Store::Open(store));
  SEEDSTORE_RETURN_IF_ERROR(CheckRewritableAsStore(*st, store));
  std::map<std::string, BoxSource> values;
  for (size_t i = 0; i < ts.size(); ++i) {
    const int k = st->Find(ts[i].name);
    const std::string w = "'" + src->file_of(i) + "' tensor '" + ts[i].name + "'";
    if (k < 0) return NotFound(w + ": the store '" + store + "' has no such tensor");
    const TensorRecord& t = st->tensors()[k];
    if (t.shape != ts[i].shape || t.dtype != ts[i].dtype)
      return InvalidArgument(w + " is " + ShapeText(ts[i].shape) + " " + DTypeName(ts[i].dtype) +
                             "; the store's is " + ShapeText(t.shape) + " " + DTypeName(t.dtype) +
                             " (--update keeps shapes and dtypes)");
    if (t.piece.has_value() != ts[i].piece.has_value() ||
        (t.piece && !SameRegion(*t.piece, *ts[i].piece)))
      return InvalidArgument(
          w + ": " +
          (ts[i].piece ? "the piece " + DescribeRegion(*ts[i].piece)
                       : std::string("the whole tensor")) +
          " cannot replace the store's " +
          (t.piece ? "piece " + DescribeRegion(*t.piece) : std::string("whole tensor")));
    values[ts[i].name] = source_of(i);
  }
  st.reset();
  SEEDSTORE_RETURN_IF_ERROR(ReplaceWithDense(store, values, o.write, progress));
  return static_cast<int>(ts.size());
}

}  // namespace seedstore
