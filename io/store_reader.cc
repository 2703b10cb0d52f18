#include "io/store_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "gen/checksum.h"
#include "io/atomic_file.h"
#include "io/chunk_grid.h"
#include "io/h5_handle.h"
#include "io/master_seal.h"
#include "io/rank_files.h"
#include "io/store_chunks.h"
#include "io/zstd_filter.h"
#include "store/json_text.h"

namespace seedstore {

namespace {

using json = nlohmann::json;

// Checks a table read at open against its hash attribute (table-corrupt); tables written
// before the attribute existed have none and pass.
Status CheckTableHash(hid_t table, const std::vector<uint64_t>& entries, const std::string& what) {
  const htri_t has = H5Aexists(table, kTableHashAttr);
  if (has < 0)
    return StoreStatus(StoreError::kTableCorrupt, what + ": its attributes cannot be read");
  if (has == 0) return Status::Ok();
  SEEDSTORE_ASSIGN_OR_RETURN(std::vector<uint64_t> h, ReadU64Attr(table, kTableHashAttr, what));
  const uint64_t computed = TableHash(entries);
  if (h.size() != 1 || h[0] != computed)
    return StoreStatus(StoreError::kTableCorrupt,
                       what + " does not match its hash (" + kTableHashAttr + " " +
                           (h.size() == 1 ? Hex64(h[0]) : std::string("?")) + ", computed " +
                           Hex64(computed) + "): an entry is damaged, the chunks may be intact");
  return Status::Ok();
}

// The kernel's readahead window for the device holding the file open as `fd`, in bytes (0
// when unknown): the backing device's read_ahead_kb in sysfs, found by the file's st_dev
// (a whole disk or a filesystem's own bdi under /sys/class/bdi, else a partition's disk).
static uint64_t KernelReadaheadBytes(int fd) {
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0) return 0;
  // Read once per device: a save of 1,024 rank files opens them all on one.
  static std::mutex mu;
  static std::map<dev_t, uint64_t> known;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(st.st_dev); it != known.end()) return it->second;
  const std::string dev = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  uint64_t bytes = 0;
  for (const std::string& p : {"/sys/class/bdi/" + dev + "/read_ahead_kb",
                               "/sys/dev/block/" + dev + "/../queue/read_ahead_kb"}) {
    std::ifstream in(p);
    uint64_t kb = 0;
    if (in >> kb) {
      bytes = kb << 10;
      break;
    }
  }
  known[st.st_dev] = bytes;
  return bytes;
}

}  // namespace

H5Store::~H5Store() {
  H5Guard g;
  open_.clear();  // the store's users are done: these are the last references
  if (file_ >= 0) H5Fclose(file_);
}

int64_t ChunkWhere::dset() const { return dataset ? dataset->get() : -1; }

Result<std::shared_ptr<const Hid>> H5Store::Dataset(size_t i) const {
  SEEDSTORE_RETURN_IF_ERROR(damage_[i]);
  H5Guard g;
  // Keyed by dataset: a version 2 rank file's pieces share their cell set's.
  const std::string& name = stored_[i].dataset;
  for (size_t k = 0; k < open_.size(); ++k)
    if (open_[k].first == name) {
      if (k + 1 != open_.size()) std::rotate(open_.begin() + k, open_.begin() + k + 1, open_.end());
      return open_.back().second;
    }
  Hid id(H5Dopen2(file_, stored_[i].dataset.c_str(), NoChunkCache()), H5Dclose);
  if (!id.ok())
    return H5ReadFailure("file '" + path_ + "' tensor '" + records_[i].name + "': opening " +
                         stored_[i].dataset);
  std::shared_ptr<const Hid> h = ShareHid(std::move(id));
  if (open_.size() == kOpenDatasets) open_.erase(open_.begin());
  open_.emplace_back(name, h);
  return h;
}

Result<ChunkWhere> H5Store::ChunksOf(size_t i) const {
  ChunkWhere w;
  w.stored = &stored_[i];
  if (fd_ >= 0 && i < located_.size() && !located_[i].empty()) {
    w.located = &located_[i];
    return w;
  }
  SEEDSTORE_ASSIGN_OR_RETURN(w.dataset, Dataset(i));
  return w;
}

// ---- H5Store::Open, step by step ----------------------------------------------------------

namespace {

// What Open checks before HDF5 reads a byte: the path is a regular file this process may open,
// a distributed save's master has an intact seal (docs/FORMAT.md 10), and the file starts with
// HDF5's signature. *st: the file's status. Errors name the file `w`.
Status CheckOpenable(const std::string& path, const std::string& w, struct stat* st) {
  if (::stat(path.c_str(), st) != 0) return OpenFailure(w, errno);
  if (S_ISDIR(st->st_mode)) return InvalidArgument(w + ": is a directory, not a store");
  if (!S_ISREG(st->st_mode))
    return InvalidArgument(w + ": is " + NotARegularFile(path) +
                           ", not a store: a store is read by seeking; give a regular file");
  if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd < 0)
    return OpenFailure(w, errno);
  else ::close(fd);
  // A distributed save's master: its seal before HDF5 parses a byte (docs/FORMAT.md 10).
  SEEDSTORE_RETURN_IF_ERROR(CheckMasterSeal(path, /*is_master=*/false, nullptr));
  if (!LooksLikeHdf5(path))
    return StoreStatus(StoreError::kNotHdf5, w + ": not an HDF5 file (no superblock signature)");
  return Status::Ok();
}

// The root attributes: magic (bad-magic) and version (unsupported-version), *version.
Status CheckRootAttributes(hid_t f, const std::string& w, int* version) {
  SEEDSTORE_ASSIGN_OR_RETURN(std::string magic, ReadStringAttr(f, "seedstore.format", w));
  if (magic != "seedstore")
    return StoreStatus(StoreError::kBadMagic,
                       w + ": seedstore.format is '" + magic + "', expected 'seedstore'");
  SEEDSTORE_ASSIGN_OR_RETURN(std::vector<uint64_t> ver, ReadU64Attr(f, "seedstore.version", w));
  if (ver.size() != 1 || (ver[0] != static_cast<uint64_t>(kStoreFormatVersion) &&
                          ver[0] != static_cast<uint64_t>(kCellsFormatVersion)))
    return StoreStatus(StoreError::kUnsupportedVersion,
                       w + ": format version " + (ver.empty() ? "?" : std::to_string(ver[0])) +
                           " (this build reads versions " + std::to_string(kStoreFormatVersion) +
                           " and " + std::to_string(kCellsFormatVersion) + ")");
  *version = static_cast<int>(ver[0]);
  return Status::Ok();
}

// The text of /seedstore/index, its checksum verified (bad-index, missing-object).
Result<std::string> ReadIndexText(hid_t f, const std::string& w) {
  SEEDSTORE_ASSIGN_OR_RETURN(bool has_index, StoredLinkExists(f, "/seedstore/index", w));
  if (!has_index)
    return StoreStatus(StoreError::kMissingObject, w + ": dataset '/seedstore/index' is missing");
  std::string text;
  Hid d(H5Dopen2(f, "/seedstore/index", H5P_DEFAULT), H5Dclose);
  if (!d.ok()) return H5ReadFailure(w + ": opening /seedstore/index");
  Hid sp(H5Dget_space(d.get()), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(sp.get());
  if (n <= 0 || H5Sget_simple_extent_ndims(sp.get()) != 1)
    return StoreStatus(StoreError::kBadIndex, w + ": /seedstore/index is not a 1-D byte array");
  text.resize(static_cast<size_t>(n));
  if (H5Dread(d.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) < 0)
    return StoreStatus(StoreError::kBadIndex,
                       w + ": /seedstore/index cannot be read: " + H5ErrorText());
  SEEDSTORE_ASSIGN_OR_RETURN(std::vector<uint64_t> sum,
                             ReadU64Attr(d.get(), "seedstore.xxh3", w + " /seedstore/index"));
  const uint64_t computed = Checksum64(text.data(), text.size());
  if (sum.size() != 1 || sum[0] != computed)
    return StoreStatus(StoreError::kBadIndex, w + ": /seedstore/index checksum mismatch (stored " +
                                                  (sum.empty() ? "?" : Hex64(sum[0])) +
                                                  ", computed " + Hex64(computed) + ")");
  return text;
}

// bad-index of file `w`: "<w>: index <m>".
Status BadIndex(const std::string& w, const std::string& m) {
  return StoreStatus(StoreError::kBadIndex, w + ": index " + m);
}

// What the index says of the whole store.
struct IndexHeader {
  uint64_t seed = 0;
  Generator generator = Generator::kThreefry;
  std::optional<int> rank;
};

// The index's own fields, which must agree with the file's attributes (checked before).
Result<IndexHeader> ParseIndexHeader(json& idx, int version, const std::string& w) {
  auto bad = [&](const std::string& m) { return BadIndex(w, m); };
  IndexHeader h;
  if (idx.is_discarded() || !idx.is_object()) return bad("is not a JSON object");
  if (idx.contains("format") && idx["format"] != "seedstore")
    return bad("field 'format' is " + JsonPreview(idx["format"]) + ", not \"seedstore\"");
  if (idx.contains("version") && idx["version"] != version)
    return bad("field 'version' is " + JsonPreview(idx["version"]) + ", the file's is " +
               std::to_string(version));
  if (!idx.contains("seed") || !idx["seed"].is_number_unsigned())
    return bad("field 'seed' missing or not an unsigned integer");
  h.seed = idx["seed"].get<uint64_t>();
  if (!idx.contains("generator") || !idx["generator"].is_string())
    return bad("field 'generator' missing");
  {
    auto gen = ParseGenerator(idx["generator"].get<std::string>());
    if (!gen.ok()) return bad(gen.status().message());
    h.generator = *gen;
  }
  if (idx.contains("rank")) {
    if (!idx["rank"].is_number_unsigned() || idx["rank"].get<uint64_t>() > INT32_MAX)
      return bad("field 'rank' is " + JsonPreview(idx["rank"]) + ", not a rank (0..2147483647)");
    h.rank = static_cast<int>(idx["rank"].get<uint64_t>());
  }
  if (!idx.contains("tensors") || !idx["tensors"].is_array()) return bad("field 'tensors' missing");
  return h;
}

// A lazy record (docs/FORMAT.md 4.1): its spec, resolved under the store's seed, must derive
// the key the record holds. `where`: "tensors[k]".
Result<TensorRecord> ParseLazyRecord(json rec, const std::string& where, const IndexHeader& h,
                                     const std::string& w) {
  auto bad = [&](const std::string& m) { return BadIndex(w, m); };
  TensorRecord tr;
  if (!rec.contains("key_words") || !rec["key_words"].is_array() || rec["key_words"].size() != 2 ||
      !rec["key_words"][0].is_number_unsigned() || !rec["key_words"][1].is_number_unsigned())
    return bad(where + ": 'key_words' missing or not two uint32 words");
  const Key key{rec["key_words"][0].get<uint32_t>(), rec["key_words"][1].get<uint32_t>()};
  rec.erase("kind");
  rec.erase("key_words");
  rec.erase("fingerprint");
  // A record without "flavour" was written before flavours existed: eager (FORMAT.md 4.1).
  auto t = TensorSpecFromJson(rec, h.generator, where, Flavour::kEager);
  if (!t.ok()) return bad(t.status().message());
  auto l = LazyTensor::Resolve(*t, h.seed);
  if (!l.ok()) return bad(l.status().message());
  if (!(l->key == key))
    return bad(where + " ('" + t->name +
               "'): key_words do not match the key derived from the spec");
  tr.name = t->name;
  tr.shape = t->shape;
  tr.dtype = t->dtype;
  tr.lazy = std::make_shared<const LazyTensor>(std::move(*l));
  return tr;
}

// A dense record's name, shape, dtype and piece (docs/FORMAT.md 4.1); *stored_bytes from
// its "stored_bytes" when present.
Result<TensorRecord> ParseDenseRecord(const json& rec, const std::string& where,
                                      const std::string& w, uint64_t* stored_bytes) {
  auto bad = [&](const std::string& m) { return BadIndex(w, m); };
  TensorRecord tr;
  if (!rec.contains("name") || !rec["name"].is_string() || !rec.contains("shape") ||
      !rec["shape"].is_array() || !rec.contains("dtype") || !rec["dtype"].is_string())
    return bad(where + ": dense record needs name, shape and dtype");
  tr.name = rec["name"].get<std::string>();
  if (tr.name.empty()) return bad(where + ": empty tensor name");
  for (const auto& d : rec["shape"]) {
    if (!d.is_number_unsigned()) return bad(where + ": bad shape");
    tr.shape.push_back(d.get<uint64_t>());
  }
  auto dt = ParseDType(rec["dtype"].get<std::string>());
  if (!dt.ok()) return bad(where + ": " + dt.status().message());
  tr.dtype = *dt;
  if (auto v = ValidateShape(tr.shape, tr.dtype, where); !v.ok()) return bad(v.message());
  if (rec.contains("piece")) {  // a piece of a larger tensor (docs/FORMAT.md 4.1)
    const json& pc = rec["piece"];
    std::vector<uint64_t> gshape;
    bool ok = pc.is_object() && pc.contains("shape") && pc["shape"].is_array() &&
              pc.contains("region") && pc["shape"].size() <= static_cast<size_t>(kMaxRank);
    for (size_t d = 0; ok && d < pc["shape"].size(); ++d) {
      ok = pc["shape"][d].is_number_unsigned();
      if (ok) gshape.push_back(pc["shape"][d].get<uint64_t>());
    }
    if (!ok) return bad(where + " ('" + tr.name + "'): 'piece' needs 'shape' and 'region'");
    if (auto v = ValidateShape(gshape, tr.dtype, where + " piece"); !v.ok())
      return bad(v.message());
    auto reg = RegionFromJson(pc["region"], gshape);
    if (!reg.ok()) return bad(where + " ('" + tr.name + "'): piece: " + reg.status().message());
    if (LocalShape(*reg) != tr.shape)
      return bad(where + " ('" + tr.name + "'): piece " + DescribeRegion(*reg) +
                 " does not have the tensor's shape " + ShapeText(tr.shape));
    tr.piece = *reg;
  }
  if (rec.contains("stored_bytes") && rec["stored_bytes"].is_number_unsigned())
    *stored_bytes = rec["stored_bytes"].get<uint64_t>();
  return tr;
}

// What Open learns from a dense tensor's own objects.
struct DenseObjects {
  StoredTensor stored;
  std::vector<uint64_t> checksums;
  std::vector<ChunkInfo> info;
  std::vector<ChunkLoc> located;
};

// The dataset's attributes (seedstore.name, .dtype, .fingerprint), shape and HDF5 type
// against its record (whose recorded fingerprint is `fp`). `tw` names file and tensor.
Status CheckDatasetAgainstRecord(hid_t d, const TensorRecord& tr,
                                 const std::optional<Fingerprint>& fp, const std::string& dataset,
                                 const std::string& where, const std::string& w,
                                 const std::string& tw) {
  SEEDSTORE_ASSIGN_OR_RETURN(std::string aname, ReadStringAttr(d, "seedstore.name", tw));
  if (aname != tr.name)
    return BadIndex(w, where + ": dataset '" + dataset + "' says its name is '" + aname + "'");
  SEEDSTORE_ASSIGN_OR_RETURN(std::string adt, ReadStringAttr(d, "seedstore.dtype", tw));
  if (adt != DTypeName(tr.dtype))
    return StoreStatus(
        StoreError::kDtypeMismatch,
        tw + ": seedstore.dtype is '" + adt + "', the index says '" + DTypeName(tr.dtype) + "'");
  SEEDSTORE_ASSIGN_OR_RETURN(std::vector<uint64_t> afp,
                             ReadU64Attr(d, "seedstore.fingerprint", tw));
  if (afp.size() != 2) return Corrupt(tw + ": seedstore.fingerprint must hold 2 words");
  if (!fp) return BadIndex(w, where + ": dense record without fingerprint");
  if (afp[0] != fp->lane0 || afp[1] != fp->lane1)
    return StoreStatus(StoreError::kFingerprintMismatch,
                       tw + ": seedstore.fingerprint differs from the index");
  Hid sp(H5Dget_space(d), H5Sclose);
  const int nd = H5Sget_simple_extent_ndims(sp.get());
  std::vector<hsize_t> dims(std::max(nd, 0));
  if (nd > 0) H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr);
  std::vector<uint64_t> dshape(dims.begin(), dims.end());
  if (nd < 0 || dshape != tr.shape)
    return StoreStatus(StoreError::kShapeMismatch, tw + ": dataset shape " + ShapeText(dshape) +
                                                       " differs from the record's " +
                                                       ShapeText(tr.shape));
  Hid ty(H5Dget_type(d), H5Tclose);
  if (!TypeMatches(ty.get(), tr.dtype))
    return StoreStatus(StoreError::kDtypeMismatch,
                       tw + ": HDF5 type does not store " + DTypeName(tr.dtype));
  return Status::Ok();
}

// The dataset's storage layout (chunked; contiguous or compact only for a scalar or an empty
// tensor, docs/FORMAT.md 4.2) and filter pipeline (shuffle and zstd only): *chunk (empty when
// not chunked), stt->filters and stt->zstd_level.
Status ReadPipeline(hid_t d, const TensorRecord& tr, const std::string& tw,
                    std::vector<uint64_t>* chunk, StoredTensor* stt) {
  const int nd = static_cast<int>(tr.shape.size());
  Hid pl(H5Dget_create_plist(d), H5Pclose);
  const H5D_layout_t lay = H5Pget_layout(pl.get());
  if (lay == H5D_CHUNKED) {
    std::vector<hsize_t> c(std::max(nd, 1));
    if (H5Pget_chunk(pl.get(), nd, c.data()) != nd)
      return Corrupt(tw + ": cannot read the chunk shape");
    chunk->assign(c.begin(), c.begin() + nd);
  } else if (lay != H5D_CONTIGUOUS && lay != H5D_COMPACT) {
    return StoreStatus(StoreError::kBadLayout, tw + ": unsupported dataset layout");
  } else if (tr.NumElements() > 1) {  // docs/FORMAT.md 4.2: only scalars and empty tensors
    return StoreStatus(
        StoreError::kBadLayout,
        tw + ": a tensor of " + std::to_string(tr.NumElements()) +
            " elements stored without chunks (only a scalar or an empty tensor may be)");
  }
  const int nf = H5Pget_nfilters(pl.get());
  for (int k2 = 0; k2 < nf; ++k2) {
    unsigned flags = 0;
    size_t ncd = 8;
    unsigned cd[8];
    char fname[64];
    unsigned fcfg = 0;
    const H5Z_filter_t id =
        H5Pget_filter2(pl.get(), k2, &flags, &ncd, cd, sizeof fname, fname, &fcfg);
    if (id != kH5FilterShuffle && id != kH5FilterZstd)
      return StoreStatus(
          StoreError::kUnknownFilter,
          tw + ": filter id " + std::to_string(id) + " (" + FilterName(id) +
              ") in the pipeline; seedstore reads only shuffle (2) and zstd (32015)");
    if (id == kH5FilterShuffle && ncd >= 1 && cd[0] != static_cast<unsigned>(DTypeSize(tr.dtype)))
      return Corrupt(tw + ": shuffle element size " + std::to_string(cd[0]) +
                     " is not the dtype's");
    if (id == kH5FilterZstd) stt->zstd_level = ncd >= 1 ? static_cast<int>(cd[0]) : 0;
    stt->filters.push_back(id);
  }
  return Status::Ok();
}

// Where the chunks of a tensor of few chunks (H5Store::kLocatedChunks) are, so that its reads
// open no dataset (ChunksOf); empty when it has more, or when a chunk is missing (the reads
// find and name that).
std::vector<ChunkLoc> LocateFewChunks(hid_t d, const Grid& grid, const StoredTensor& st) {
  std::vector<ChunkLoc> located;
  if (!grid.chunked() || grid.num > H5Store::kLocatedChunks ||
      st.index_chunks() > H5Store::kAddressedChunks)  // a walk of the chunk index per lookup
    return located;
  for (uint64_t j = 0; j < grid.num; ++j) {
    uint64_t c[kMaxRank];
    hsize_t off[kMaxRank + 1];
    grid.Coords(j, c);
    ChunkOffset(st, j, c, grid.rank, off);
    located.push_back(LocateChunk(d, off));
    if (located.back().size == 0) return {};
  }
  return located;
}

// The checksum table at `sums_path`: one entry per chunk, its own hash checked.
Result<std::vector<uint64_t>> ReadChecksumTable(hid_t f, const std::string& sums_path,
                                                const Grid& grid, const std::string& tw) {
  Hid cs(H5Dopen2(f, sums_path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!cs.ok()) return H5ReadFailure(tw + ": opening " + sums_path);
  Hid csp(H5Dget_space(cs.get()), H5Sclose);
  if (H5Sget_simple_extent_ndims(csp.get()) != 1 ||
      static_cast<uint64_t>(H5Sget_simple_extent_npoints(csp.get())) != grid.num)
    return StoreStatus(StoreError::kShapeMismatch, tw + ": checksum table " + sums_path +
                                                       " does not have one entry per chunk (" +
                                                       std::to_string(grid.num) + ")");
  std::vector<uint64_t> checks(grid.num);
  if (H5Dread(cs.get(), H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, checks.data()) < 0)
    return H5ReadFailure(tw + ": reading " + sums_path);
  SEEDSTORE_RETURN_IF_ERROR(CheckTableHash(cs.get(), checks, tw + ": checksum table " + sums_path));
  return checks;
}

// The chunk-info table at `info_path` (optional: files written before it existed have none;
// then empty): one row per chunk, its own hash checked, its fingerprints adding up to `fp`.
Result<std::vector<ChunkInfo>> ReadChunkInfoTable(hid_t f, const std::string& info_path,
                                                  const Grid& grid, const Fingerprint* fp,
                                                  const std::string& tw) {
  std::vector<ChunkInfo> infos;
  SEEDSTORE_ASSIGN_OR_RETURN(bool has_info, StoredLinkExists(f, info_path, tw));
  if (!has_info) return infos;
  Hid ci(H5Dopen2(f, info_path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ci.ok()) return H5ReadFailure(tw + ": opening " + info_path);
  Hid isp(H5Dget_space(ci.get()), H5Sclose);
  hsize_t idims[2] = {0, 0};
  if (H5Sget_simple_extent_ndims(isp.get()) != 2 ||
      H5Sget_simple_extent_dims(isp.get(), idims, nullptr) != 2 || idims[0] != grid.num ||
      idims[1] != 3)
    return StoreStatus(StoreError::kShapeMismatch, tw + ": chunk-info table " + info_path +
                                                       " is not [" + std::to_string(grid.num) +
                                                       ", 3] (one row per chunk)");
  std::vector<uint64_t> rows(grid.num * 3);
  if (H5Dread(ci.get(), H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0)
    return H5ReadFailure(tw + ": reading " + info_path);
  SEEDSTORE_RETURN_IF_ERROR(CheckTableHash(ci.get(), rows, tw + ": chunk-info table " + info_path));
  Fingerprint total;
  infos.resize(grid.num);
  for (uint64_t j = 0; j < grid.num; ++j) {
    infos[j].stored_hash = rows[3 * j];
    infos[j].fingerprint = Fingerprint{rows[3 * j + 1], rows[3 * j + 2]};
    total.Add(infos[j].fingerprint);
  }
  if (fp && total != *fp)
    return StoreStatus(StoreError::kFingerprintMismatch,
                       tw + ": the chunk fingerprints of " + info_path + " add up to " +
                           FingerprintHex(total) + ", the record says " + FingerprintHex(*fp));
  return infos;
}

// A dense tensor's own objects -- its dataset and tables -- checked against its record: what
// fails here damages this tensor alone (H5Store::Damage). out->stored holds `dense`,
// `stored_bytes` and `dataset` already.
Status CheckDenseObjects(hid_t f, const TensorRecord& tr, const std::optional<Fingerprint>& fp,
                         const std::string& where, const std::string& w, DenseObjects* out) {
  const std::string tw = w + " tensor '" + tr.name + "'";
  const std::string esc = EscapeH5Name(tr.name);
  StoredTensor& stt = out->stored;
  const std::string sums_path = "/checksums/" + esc;
  for (const std::string& p : {stt.dataset, sums_path}) {
    SEEDSTORE_ASSIGN_OR_RETURN(bool exists, StoredLinkExists(f, p, tw));
    if (!exists)
      return StoreStatus(StoreError::kMissingObject, tw + ": dataset '" + p + "' is missing");
  }
  // Closed once checked, as are its tables: reads open it again when they need its chunk
  // addresses (H5Store::Dataset; a few are kept open). Chunks never go through HDF5's
  // chunk cache -- they are read with pread and decoded here -- so it gets none: 20,000
  // tiny dense tensors, `inspect` peak RSS 642 -> 349 MB; closing it: 349 -> 116 MB.
  Hid d(H5Dopen2(f, stt.dataset.c_str(), NoChunkCache()), H5Dclose);
  if (!d.ok()) return H5ReadFailure(tw + ": opening " + stt.dataset);
  SEEDSTORE_RETURN_IF_ERROR(CheckDatasetAgainstRecord(d.get(), tr, fp, stt.dataset, where, w, tw));
  std::vector<uint64_t> chunk;
  SEEDSTORE_RETURN_IF_ERROR(ReadPipeline(d.get(), tr, tw, &chunk, &stt));
  const Grid grid = Grid::Make(tr.shape, chunk);
  stt.chunk = chunk;
  stt.num_chunks = grid.num;
  out->located = LocateFewChunks(d.get(), grid, stt);
  SEEDSTORE_ASSIGN_OR_RETURN(out->checksums, ReadChecksumTable(f, sums_path, grid, tw));
  SEEDSTORE_ASSIGN_OR_RETURN(out->info, ReadChunkInfoTable(f, "/chunkinfo/" + esc, grid, &*fp, tw));
  return Status::Ok();
}

// A version 2 rank file's cell set (docs/FORMAT.md 11) as Open checked it: its dataset's
// dtype, cell shape and pipeline, its tables, and which cells the records claimed so far.
struct CellSetObjects {
  Status status;  // why the set cannot be read (every tensor in it is then damaged)
  DType dtype = DType::kF32;
  std::vector<uint64_t> chunk;  // the cell shape: the chunk shape of its tensors
  StoredTensor pipeline;        // filters and zstd_level
  uint64_t cells = 0;
  std::vector<uint64_t> sums;
  std::vector<ChunkInfo> infos;
  std::vector<bool> taken;
  Hid dataset;  // open while Open checks the records in it (their chunk locations)
};

// Opens cell set k of file `w` and checks it: a chunked dataset [n, c0, ..., c(r-1)] of one
// cell per chunk, its dtype attribute and HDF5 type, its pipeline, and its checksum and
// chunk-info tables (one entry per cell, each table's own hash).
Status LoadCellSet(hid_t f, int k, const std::string& w, CellSetObjects* out) {
  const std::string name = std::to_string(k);
  const std::string path = std::string(kCellsGroup) + "/" + name;
  const std::string sw = w + " cell set " + path;
  out->status = Status::Ok();
  for (const std::string& p :
       {path, std::string(kCellSumsGroup) + "/" + name, std::string(kCellInfoGroup) + "/" + name}) {
    SEEDSTORE_ASSIGN_OR_RETURN(bool exists, StoredLinkExists(f, p, sw));
    if (!exists)
      return StoreStatus(StoreError::kMissingObject, sw + ": dataset '" + p + "' is missing");
  }
  Hid d(H5Dopen2(f, path.c_str(), NoChunkCache()), H5Dclose);
  if (!d.ok()) return H5ReadFailure(sw + ": opening it");
  SEEDSTORE_ASSIGN_OR_RETURN(std::string adt, ReadStringAttr(d.get(), "seedstore.dtype", sw));
  auto dt = ParseDType(adt);
  if (!dt.ok())
    return StoreStatus(StoreError::kDtypeMismatch, sw + ": seedstore.dtype is '" + adt + "'");
  out->dtype = *dt;
  Hid ty(H5Dget_type(d.get()), H5Tclose);
  if (!TypeMatches(ty.get(), out->dtype))
    return StoreStatus(StoreError::kDtypeMismatch, sw + ": HDF5 type does not store " + adt);
  Hid sp(H5Dget_space(d.get()), H5Sclose);
  const int nd = H5Sget_simple_extent_ndims(sp.get());
  if (nd < 2 || nd > kMaxRank + 1)
    return StoreStatus(StoreError::kShapeMismatch, sw + ": a cell set has 2 to " +
                                                       std::to_string(kMaxRank + 1) +
                                                       " dims, not " + std::to_string(nd));
  std::vector<hsize_t> dims(nd);
  H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr);
  TensorRecord whole;  // the set as a tensor, for its pipeline
  whole.name = path;
  whole.shape.assign(dims.begin(), dims.end());
  whole.dtype = out->dtype;
  std::vector<uint64_t> chunk;
  SEEDSTORE_RETURN_IF_ERROR(ReadPipeline(d.get(), whole, sw, &chunk, &out->pipeline));
  if (chunk.empty() || chunk[0] != 1 ||
      !std::equal(chunk.begin() + 1, chunk.end(), whole.shape.begin() + 1))
    return StoreStatus(StoreError::kBadLayout, sw + ": chunks " + ShapeText(chunk) +
                                                   " are not one cell each (" +
                                                   ShapeText(whole.shape) + ")");
  out->chunk.assign(chunk.begin() + 1, chunk.end());
  out->cells = dims[0];
  const Grid cells = Grid::Make({out->cells}, {1});
  SEEDSTORE_ASSIGN_OR_RETURN(
      out->sums, ReadChecksumTable(f, std::string(kCellSumsGroup) + "/" + name, cells, sw));
  SEEDSTORE_ASSIGN_OR_RETURN(
      out->infos,
      ReadChunkInfoTable(f, std::string(kCellInfoGroup) + "/" + name, cells, nullptr, sw));
  out->taken.assign(out->cells, false);
  out->dataset = std::move(d);
  return Status::Ok();
}

// A record's cells -- set k from `first` -- checked against the set (its dtype, rank and
// chunk shape, cells inside it and claimed by no other record, their chunk fingerprints adding
// up to the record's `fp`); fills `out` (the tensor's storage and its slices of the tables).
Status CheckCellObjects(const TensorRecord& tr, const std::optional<Fingerprint>& fp, int k,
                        uint64_t first, const std::string& where, const std::string& w,
                        CellSetObjects& set, DenseObjects* out) {
  const std::string tw = w + " tensor '" + tr.name + "'";
  const std::string sn = "cell set " + std::to_string(k);
  if (!fp) return BadIndex(w, where + ": dense record without fingerprint");
  if (tr.dtype != set.dtype)
    return StoreStatus(StoreError::kDtypeMismatch, tw + ": " + sn + " holds " +
                                                       DTypeName(set.dtype) + ", the index says " +
                                                       DTypeName(tr.dtype));
  bool fits = tr.shape.size() == set.chunk.size() && tr.NumElements() > 0;
  for (size_t d = 0; fits && d < tr.shape.size(); ++d) fits = set.chunk[d] <= tr.shape[d];
  if (!fits)
    return StoreStatus(StoreError::kShapeMismatch,
                       tw + ": " + sn + "'s cells " + ShapeText(set.chunk) +
                           " are no chunk shape of its shape " + ShapeText(tr.shape));
  const Grid grid = Grid::Make(tr.shape, set.chunk);
  if (first > set.cells || grid.num > set.cells - first)
    return StoreStatus(StoreError::kShapeMismatch, tw + ": cells " + std::to_string(first) + ".." +
                                                       std::to_string(first + grid.num) +
                                                       " lie beyond " + sn + "'s " +
                                                       std::to_string(set.cells));
  for (uint64_t j = first; j < first + grid.num; ++j)
    if (set.taken[j])
      return BadIndex(w, where + " ('" + tr.name + "'): cell " + std::to_string(j) + " of " + sn +
                             " belongs to another tensor too");
  Fingerprint total;
  for (uint64_t j = first; j < first + grid.num; ++j) total.Add(set.infos[j].fingerprint);
  if (total != *fp)
    return StoreStatus(StoreError::kFingerprintMismatch,
                       tw + ": the chunk fingerprints of its cells in " + sn + " add up to " +
                           FingerprintHex(total) + ", the record says " + FingerprintHex(*fp));
  for (uint64_t j = first; j < first + grid.num; ++j) set.taken[j] = true;
  StoredTensor& st = out->stored;
  st.chunk = set.chunk;
  st.num_chunks = grid.num;
  st.filters = set.pipeline.filters;
  st.zstd_level = set.pipeline.zstd_level;
  st.cell_set = k;
  st.first_cell = first;
  st.set_cells = set.cells;
  out->checksums.assign(set.sums.begin() + first, set.sums.begin() + first + grid.num);
  out->info.assign(set.infos.begin() + first, set.infos.begin() + first + grid.num);
  // A piece of few cells in a set of not too many: where they are, as for a tensor of few
  // chunks, so that its reads (and a save's proof) open no dataset.
  if (set.dataset.ok()) out->located = LocateFewChunks(set.dataset.get(), grid, st);
  return Status::Ok();
}
}  // namespace

Result<std::unique_ptr<H5Store>> H5Store::Open(const std::string& path, OpenFor use) {
  const std::string w = "file '" + path + "'";
  struct stat st;
  SEEDSTORE_RETURN_IF_ERROR(CheckOpenable(path, w, &st));
  std::unique_ptr<H5Store> s(new H5Store());
  s->path_ = path;
  s->file_bytes_ = static_cast<uint64_t>(st.st_size);
  std::string text;
  {
    H5Guard g;
    s->file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (s->file_ < 0) {
      Status e = H5ReadFailure(w + ": opening it");
      if (e.message().find("truncated") != std::string::npos)
        return StoreStatus(StoreError::kTruncated, w + ": the file is truncated (" +
                                                       std::to_string(st.st_size) +
                                                       " bytes): " + e.message());
      return e;
    }
    s->AttachDescriptor();
    SEEDSTORE_RETURN_IF_ERROR(CheckRootAttributes(s->file_, w, &s->version_));
    SEEDSTORE_ASSIGN_OR_RETURN(text, ReadIndexText(s->file_, w));
  }
  // The index is parsed and its records checked without the HDF5 lock (other threads' HDF5
  // calls go on meanwhile); only the records' objects are then looked at under it.
  json idx = ParseJson(text, nullptr);
  text = std::string();
  SEEDSTORE_ASSIGN_OR_RETURN(const IndexHeader h, ParseIndexHeader(idx, s->version_, w));
  s->seed_ = h.seed;
  s->generator_ = h.generator;
  s->rank_ = h.rank;
  auto bad = [&](const std::string& m) { return BadIndex(w, m); };
  // A dense record's objects, checked in the second pass: its cells (set, first) in a version
  // 2 rank file, else its own datasets.
  struct Pending {
    size_t k = 0;
    int set = -1;
    uint64_t first = 0;
  };
  std::vector<Pending> dense;
  std::set<std::string> names;
  for (size_t k = 0; k < idx["tensors"].size(); ++k) {
    json rec = std::move(idx["tensors"][k]);  // taken, not copied: a record is read once
    const std::string where = "tensors[" + std::to_string(k) + "]";
    if (!rec.is_object() || !rec.contains("kind") || !rec["kind"].is_string())
      return bad(where + ": missing 'kind'");
    const std::string kind = rec["kind"].get<std::string>();
    std::optional<Fingerprint> fp;
    if (rec.contains("fingerprint")) {
      if (!rec["fingerprint"].is_string()) return bad(where + ": bad fingerprint");
      auto f2 = ParseFingerprintHex(rec["fingerprint"].get<std::string>());
      if (!f2.ok()) return bad(where + ": " + f2.status().message());
      fp = *f2;
    }
    TensorRecord tr;
    StoredTensor stored;
    if (kind == "lazy") {
      SEEDSTORE_ASSIGN_OR_RETURN(tr, ParseLazyRecord(std::move(rec), where, h, w));
    } else if (kind == "dense") {
      uint64_t stored_bytes = 0;
      SEEDSTORE_ASSIGN_OR_RETURN(tr, ParseDenseRecord(rec, where, w, &stored_bytes));
      stored.stored_bytes = stored_bytes;
      stored.dense = true;
      stored.dataset = "/tensors/" + EscapeH5Name(tr.name);
      Pending d{k, -1, 0};
      if (rec.contains("cells")) {  // a piece packed into a cell set (docs/FORMAT.md 11)
        const json& c = rec["cells"];
        if (s->version_ != kCellsFormatVersion || !tr.piece || !c.is_object() ||
            !c.contains("set") || !c["set"].is_number_unsigned() ||
            c["set"].get<uint64_t>() > 1u << 30 || !c.contains("first") ||
            !c["first"].is_number_unsigned())
          return bad(where + " ('" + tr.name + "'): 'cells' needs a piece of a version " +
                     std::to_string(kCellsFormatVersion) +
                     " file, 'set' and 'first' (unsigned integers)");
        d.set = c["set"].get<int>();
        d.first = c["first"].get<uint64_t>();
        stored.dataset = std::string(kCellsGroup) + "/" + std::to_string(d.set);
      }
      dense.push_back(d);
    } else {
      return bad(where + ": unknown kind '" + kind + "'");
    }
    if (!names.insert(tr.name).second) return bad(where + ": duplicate tensor '" + tr.name + "'");
    tr.fingerprint = fp;
    s->records_.push_back(std::move(tr));
    s->stored_.push_back(std::move(stored));
  }
  const size_t n = s->records_.size();
  s->checksums_.resize(n);
  s->info_.resize(n);
  s->located_.resize(n);
  s->damage_.resize(n);
  H5Guard g;
  const hid_t f = s->file_;
  std::map<int, CellSetObjects> sets;  // a version 2 rank file's cell sets, loaded when named
  for (const Pending& d : dense) {
    const TensorRecord& tr = s->records_[d.k];
    const std::string where = "tensors[" + std::to_string(d.k) + "]";
    DenseObjects obj;
    obj.stored = s->stored_[d.k];
    Status damage;  // of a dense tensor's own objects (Damage)
    if (d.set >= 0) {
      auto it = sets.find(d.set);
      if (it == sets.end()) {
        CellSetObjects cs;
        cs.status = LoadCellSet(f, d.set, w + " tensor '" + tr.name + "'", &cs);
        it = sets.emplace(d.set, std::move(cs)).first;
      } else if (!it->second.status.ok()) {  // named again for this tensor
        CellSetObjects again;
        it->second.status = LoadCellSet(f, d.set, w + " tensor '" + tr.name + "'", &again);
      }
      damage = it->second.status.ok() ? CheckCellObjects(tr, tr.fingerprint, d.set, d.first, where,
                                                         w, it->second, &obj)
                                      : it->second.status;
    } else {
      damage = CheckDenseObjects(f, tr, tr.fingerprint, where, w, &obj);
    }
    if (!damage.ok()) {  // the record stands; its reads fail with `damage`
      const StoredTensor& was = s->stored_[d.k];
      obj =
          DenseObjects{StoredTensor{true, was.stored_bytes, {}, 0, {}, 0, was.dataset}, {}, {}, {}};
      H5ErrorText();  // what the checks left on HDF5's error stack
    }
    s->stored_[d.k] = std::move(obj.stored);
    s->checksums_[d.k] = std::move(obj.checksums);
    s->info_[d.k] = std::move(obj.info);
    s->located_[d.k] = std::move(obj.located);
    s->damage_[d.k] = std::move(damage);
  }
  sets.clear();  // their datasets closed: an object left open would keep the file open
  if (use == OpenFor::kReads) SEEDSTORE_RETURN_IF_ERROR(s->DropCachedMetadata());
  return s;
}

void H5Store::AttachDescriptor() {
  // Chunks are read with pread at their file addresses (io/store_chunks.cc, LoadChunk) when the
  // file uses the default sec2 driver and has no user block (addresses are then offsets).
  fd_ = -1;
  Hid fapl(H5Fget_access_plist(file_), H5Pclose), fcpl(H5Fget_create_plist(file_), H5Pclose);
  hsize_t userblock = 1;
  void* handle = nullptr;
  if (fapl.ok() && fcpl.ok() && H5Pget_driver(fapl.get()) == H5FD_SEC2 &&
      H5Pget_userblock(fcpl.get(), &userblock) >= 0 && userblock == 0 &&
      H5Fget_vfd_handle(file_, fapl.get(), &handle) >= 0 && handle != nullptr)
    fd_ = *static_cast<int*>(handle);
  kernel_readahead_ = KernelReadaheadBytes(fd_);
  H5ErrorText();
}

Status H5Store::DropCachedMetadata() {
  // HDF5 keeps the object header of every dataset Open checked in the file's metadata cache
  // (its size limits do not let them go): ~2.3 MB for a rank file of GPT-2's 148 tensors, on
  // top of the 0.5 MB every open file costs. Closing the file and opening the very same one
  // again (the descriptor's /proc/self/fd link: a file renamed over the path meanwhile is not
  // picked up) leaves only the headers reads then use. Stores with no dense tensor (a
  // distributed save's master, whose virtual datasets name their sources relative to its
  // path) are left as they are; so is one whose descriptor cannot be duplicated.
  if (fd_ < 0 ||
      std::none_of(stored_.begin(), stored_.end(), [](const StoredTensor& t) { return t.dense; }))
    return Status::Ok();
  const int keep = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (keep < 0 || ::access(("/proc/self/fd/" + std::to_string(keep)).c_str(), R_OK) != 0) {
    if (keep >= 0) ::close(keep);
    return Status::Ok();
  }
  const std::string same = "/proc/self/fd/" + std::to_string(keep);
  // Closed first: HDF5 would hand back the open file itself, cache and all.
  H5Fclose(file_);
  file_ = H5Fopen(same.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const std::string e = file_ < 0 ? H5ErrorText() : "";
  ::close(keep);
  if (file_ < 0)
    return Corrupt("file '" + path_ + "': HDF5 cannot open it again after checking it: " + e);
  AttachDescriptor();
  return Status::Ok();
}

Result<StorageSummary> H5Store::Storage(const std::vector<size_t>& listed) const {
  StorageSummary s;
  s.kind = StorageKind::kStore;
  s.file_bytes = file_bytes();
  for (size_t i : listed) {
    SEEDSTORE_RETURN_IF_ERROR(Damage(i));
    const StoredTensor& st = stored(i);
    TensorStorage t;
    t.dense = st.dense;
    t.bytes_on_disk = st.stored_bytes;
    if (t.dense) {
      t.chunks = st.num_chunks;
      t.chunk = st.chunk;
      t.chunk_info = !chunk_info(i).empty();
      for (int id : st.filters) {
        if (!t.codec.empty()) t.codec += '+';
        if (id == kH5FilterZstd) {
          t.codec += "zstd-";
          t.codec += std::to_string(st.zstd_level);
        } else {
          t.codec += "shuffle";
        }
      }
      if (t.codec.empty()) t.codec = "none";
    }
    s.tensors.push_back(std::move(t));
  }
  return s;
}

bool H5Store::distributed_master() const {
  // Probed when asked, not at Open: HDF5 walking a damaged root group's links there once
  // changed what Open then read (tests/golden/test_flip_sweep.cc).
  auto lock = LockH5();
  return FileIsDistributedMaster(file_, path_);
}

}  // namespace seedstore
