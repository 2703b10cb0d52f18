#include "io/store_writer.h"

#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <nlohmann/json.hpp>
#include <set>

#include "gen/checksum.h"
#include "io/atomic_file.h"
#include "io/chunk_grid.h"
#include "io/h5_handle.h"
#include "io/parallel.h"
#include "io/store_chunks.h"
#include "io/zstd_filter.h"
#include "store/json_text.h"

namespace seedstore {

namespace {

using json = nlohmann::json;

// A dense tensor's index record (docs/FORMAT.md 4.1) as compact JSON text, keys in sorted
// order (what nlohmann's dump of the record gives): a rank file of many pieces writes one per
// piece.
std::string DenseRecordText(const std::string& name, const std::vector<uint64_t>& shape,
                            DType dtype, const Fingerprint& fp, uint64_t stored_bytes,
                            const std::optional<Region>& piece, const PieceCells* cells = nullptr) {
  std::string out = "{";
  if (cells)
    out += "\"cells\":{\"first\":" + std::to_string(cells->first) +
           ",\"set\":" + std::to_string(cells->set) + "},";
  out += "\"dtype\":\"" + std::string(DTypeName(dtype)) + "\",\"fingerprint\":\"" +
         FingerprintHex(fp) + "\",\"kind\":\"dense\",\"name\":" + json(name).dump();
  if (piece) {
    out += ",\"piece\":{\"region\":";
    AppendRegionJson(out, *piece);
    out += ",\"shape\":[";
    AppendJsonIntegers(out, piece->shape, static_cast<size_t>(piece->rank));
    out += "]}";
  }
  out += ",\"shape\":[";
  AppendJsonIntegers(out, shape.data(), shape.size());
  out += "],\"stored_bytes\":" + std::to_string(stored_bytes) + "}";
  return out;
}

std::string LazyRecordText(const LazyTensor& l, const std::optional<Fingerprint>& fp) {
  json j = TensorSpecToJson(l.spec);
  j["kind"] = "lazy";
  j["key_words"] = {l.key.k0, l.key.k1};
  if (fp) j["fingerprint"] = FingerprintHex(*fp);
  return j.dump();
}

}  // namespace

// A writer thread's buffers: the box from the source, the padded edge chunk, the shuffled
// bytes, the zstd frame.
struct WriteScratch {
  std::vector<uint8_t> box, chunk, shuf, comp;
  StoredChunk raw;  // a chunk copied as stored
};

// Chunk-encoding buffers, shared by every open writer as ReadScratch is by every open store: a
// reshard keeps dozens of rank files open at once (io/rank_file_writer.cc, WriteRankFiles).
static ScratchPool<WriteScratch>& WriteScratchPool() {
  static ScratchPool<WriteScratch>* pool = new ScratchPool<WriteScratch>();  // never destroyed
  return *pool;
}

struct StoreWriter::Impl {
  std::unique_ptr<AtomicFile> file;
  hid_t h5 = -1, g_tensors = -1, g_sums = -1, g_info = -1, g_meta = -1;
  hid_t g_cells = -1, g_cellsums = -1, g_cellinfo = -1;  // WriteOptions::cells
  // A version 2 rank file's cell sets (docs/FORMAT.md 11), in first-use order: set k is
  // /cells/<k>, its tables written by Commit.
  struct CellSet {
    DType dtype;
    std::vector<uint64_t> chunk;
    std::vector<int> filters;
    Hid dset;
    uint64_t cells = 0;     // written (the set's extent once committed)
    uint64_t capacity = 0;  // its extent meanwhile: grown by doubling, cut to `cells` at Finish
    std::vector<uint64_t> sums;
    std::vector<ChunkInfo> infos;
  };
  std::vector<CellSet> sets;
  std::optional<PieceCells> last_cells;
  uint64_t seed = 0;
  Generator generator = Generator::kThreefry;
  std::optional<int> rank;
  WriteOptions opt;
  std::vector<std::string> records;  // each record's compact JSON text
  std::set<std::string> names;
  bool committed = false;
  int fd = -1;  // the temporary's descriptor (sec2 driver), for early writeback
  std::atomic<uint64_t> unflushed{0};

  // Starts the kernel writing back what the chunks wrote so far, every 8 MiB, so the disk
  // works while the next chunks compress and Commit()'s fsync finds little left to do (by
  // default the kernel holds up to 10% of memory dirty before it starts). A hint. Every 8
  // MiB rather than 32: 256 MiB stores are written 5-9% faster.
  void StartWriteback(uint64_t bytes) {
#if defined(__linux__)
    constexpr uint64_t kEvery = 8u << 20;
    if (fd >= 0 && unflushed.fetch_add(bytes) + bytes >= kEvery) {
      unflushed = 0;
      (void)::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    }
#else
    (void)bytes;
#endif
  }
  StoreWriter::ChunkCounts counts;
  Fingerprint last_dense;  // last_dense_fingerprint()

  // Closes the HDF5 file: kept (flushed by Commit before) or abandoned (AbandonH5File: an
  // error or a writer dropped uncommitted, whose temporary is removed next). Kept: false when
  // HDF5 cannot close it.
  bool CloseH5(bool keep) {
    H5Guard g;
    bool ok = true;
    sets.clear();  // their datasets, before the file
    for (hid_t* id : {&g_tensors, &g_sums, &g_info, &g_meta, &g_cells, &g_cellsums, &g_cellinfo})
      if (*id >= 0) {
        H5Gclose(*id);
        *id = -1;
      }
    if (h5 >= 0) {
      if (keep) ok = H5Fclose(h5) >= 0;
      else AbandonH5File(h5);
      h5 = -1;
    }
    return ok;
  }
  // The cell set of chunks of `dtype`, g's chunk shape and `filters`: the first such set, else
  // a new one (docs/FORMAT.md 11).
  Result<CellSet*> CellSetFor(DType dtype, const Grid& g, const std::vector<int>& filters,
                              const std::string& tw);
  Status CheckName(const std::string& name) {
    if (name.empty()) return InvalidArgument("tensor name is empty");
    if (committed) return Internal("store '" + file->path() + "' was already committed");
    if (!names.insert(name).second)
      return InvalidArgument("tensor '" + name + "' is added twice to '" + file->path() + "'");
    return Status::Ok();
  }
};

StoreWriter::~StoreWriter() {
  if (impl_) impl_->CloseH5(/*keep=*/false);  // after Commit, nothing is open
}

const std::string& StoreWriter::path() const { return impl_->file->path(); }

Result<std::unique_ptr<StoreWriter>> StoreWriter::Create(const std::string& path,
                                                         uint64_t root_seed, Generator generator,
                                                         WriteOptions options) {
  std::unique_ptr<StoreWriter> w(new StoreWriter());
  w->impl_ = std::make_unique<Impl>();
  Impl& m = *w->impl_;
  m.seed = root_seed;
  m.generator = generator;
  m.opt = options;
  m.opt.zstd_level = std::clamp(m.opt.zstd_level, kMinZstdLevel, kMaxZstdLevel);
  SEEDSTORE_ASSIGN_OR_RETURN(
      AtomicFile af, AtomicFile::Create(path, m.opt.file_mode, m.opt.remove_stale_temporaries));
  m.file = std::make_unique<AtomicFile>(std::move(af));
  SEEDSTORE_RETURN_IF_ERROR(m.file->CloseFd());
  H5Guard g;
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_LATEST);
  // No data sieve buffer: a contiguous dataset's H5Dwrite then writes to the file at once and
  // fails there when the disk is full. Buffered (up to 64 KiB: small tensors, the checksum and
  // chunk-info tables), the bytes were written by H5Dclose, whose failure went unseen, and
  // a full disk committed a store that lacked them (and reported success).
  H5Pset_sieve_buf_size(fapl.get(), 0);
  // HDF5 creates the temporary again by its name: a signal handled meanwhile waits for it
  // (else the file could reappear after the handler removed it; signal_cleanup::BeginChange).
  if (!signal_cleanup::BeginChange())
    return IoError("creating '" + m.file->temp_path() + "': the process is ending on a signal");
  Hid fcpl(UntimedCreationList(H5P_FILE_CREATE), H5Pclose);
  const bool fcpl_ok =
      fcpl.ok() && (m.opt.user_block == 0 || H5Pset_userblock(fcpl.get(), m.opt.user_block) >= 0);
  m.h5 =
      fcpl_ok ? H5Fcreate(m.file->temp_path().c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()) : -1;
  signal_cleanup::EndChange();
  if (m.h5 < 0) return SEEDSTORE_H5_ERROR("creating '" + m.file->temp_path() + "'");
  SEEDSTORE_RETURN_IF_ERROR(WriteStringAttr(m.h5, "seedstore.format", "seedstore"));
  SEEDSTORE_RETURN_IF_ERROR(WriteI32Attr(m.h5, "seedstore.version",
                                         m.opt.cells ? kCellsFormatVersion : kStoreFormatVersion));
  Hid gcpl(UntimedCreationList(H5P_GROUP_CREATE), H5Pclose);
  m.g_meta = H5Gcreate2(m.h5, "seedstore", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT);
  m.g_tensors = H5Gcreate2(m.h5, "tensors", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT);
  m.g_sums = H5Gcreate2(m.h5, "checksums", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT);
  m.g_info = H5Gcreate2(m.h5, "chunkinfo", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT);
  if (m.g_meta < 0 || m.g_tensors < 0 || m.g_sums < 0 || m.g_info < 0)
    return SEEDSTORE_H5_ERROR("creating groups");
  if (m.opt.cells) {
    m.g_cells = H5Gcreate2(m.h5, kCellsGroup, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT);
    m.g_cellsums = H5Gcreate2(m.h5, kCellSumsGroup, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT);
    m.g_cellinfo = H5Gcreate2(m.h5, kCellInfoGroup, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT);
    if (m.g_cells < 0 || m.g_cellsums < 0 || m.g_cellinfo < 0)
      return SEEDSTORE_H5_ERROR("creating the cell groups");
  }
  void* handle = nullptr;
  if (H5Fget_vfd_handle(m.h5, fapl.get(), &handle) >= 0 && handle)
    m.fd = *static_cast<int*>(handle);
  H5ErrorText();
  return w;
}

Status StoreWriter::AddLazy(const TensorSpec& t, const Fingerprint* fingerprint,
                            bool compute_fingerprint, CpuOptions o) {
  Impl& m = *impl_;
  SEEDSTORE_RETURN_IF_ERROR(m.CheckName(t.name));
  SEEDSTORE_RETURN_IF_ERROR(ValidateShape(t.shape, t.dtype, "tensor '" + t.name + "' shape"));
  SEEDSTORE_ASSIGN_OR_RETURN(LazyTensor l, LazyTensor::Resolve(t, m.seed));
  std::optional<Fingerprint> fp;
  if (fingerprint) {
    fp = *fingerprint;
  } else if (compute_fingerprint) {
    SEEDSTORE_ASSIGN_OR_RETURN(fp, l.FingerprintWhole(o));
  }
  m.records.push_back(LazyRecordText(l, fp));
  return Status::Ok();
}

Status StoreWriter::AddDense(const std::string& name, const std::vector<uint64_t>& shape,
                             DType dtype, const BoxSource& source,
                             std::function<void(uint64_t)> progress,
                             const DenseChunking& chunking) {
  return AddDenseFrom(name, shape, dtype, source, nullptr, std::move(progress), chunking);
}

Status StoreWriter::AddDense(const std::string& name, const std::vector<uint64_t>& shape,
                             DType dtype, const void* data, std::function<void(uint64_t)> progress,
                             const DenseChunking& chunking) {
  const auto* whole = static_cast<const uint8_t*>(data);
  if (whole == nullptr && std::find(shape.begin(), shape.end(), 0) == shape.end())
    return InvalidArgument("tensor '" + name + "': no data (a null pointer)");
  const BoxSource copy = [whole, shape, es = DTypeSize(dtype)](const Region& box, void* out) {
    const int rank = static_cast<int>(shape.size());
    uint64_t origin[kMaxRank] = {}, ext[kMaxRank];
    for (int d = 0; d < rank; ++d) ext[d] = box.stop[d] - box.start[d];
    CopyIntersection(whole, origin, shape.data(), static_cast<uint8_t*>(out), box.start, ext,
                     box.start, box.stop, rank, es);
    return Status::Ok();
  };
  return AddDenseFrom(name, shape, dtype, copy, whole, std::move(progress), chunking);
}

namespace {

// The chunk shape of a dense tensor of `shape` (elements of `es` bytes): `requested` when
// given (DenseChunking::chunk; it must fit the shape and hold less than 4 GiB), else the
// writer's rule (ChooseChunk). Empty for a tensor stored contiguously.
Result<std::vector<uint64_t>> ChunkShapeFor(const std::vector<uint64_t>& shape, int es,
                                            uint64_t chunk_bytes,
                                            const std::vector<uint64_t>& requested,
                                            const std::string& tw) {
  std::vector<uint64_t> chunk_shape = ChooseChunk(shape, es, chunk_bytes);
  if (chunk_shape.empty() || requested.empty()) return chunk_shape;
  bool fits = requested.size() == shape.size();
  unsigned __int128 bytes = es;
  for (size_t d = 0; fits && d < shape.size(); ++d) {
    fits = requested[d] >= 1 && requested[d] <= shape[d];
    bytes *= requested[d];
  }
  if (!fits || bytes >= (static_cast<unsigned __int128>(1) << 32))
    return InvalidArgument(tw + ": chunk shape " + ShapeText(requested) +
                           " does not fit the shape " + ShapeText(shape) +
                           " (or is 4 GiB or more)");
  return requested;
}

// The record of a dense tensor as readers will see it, whose frame its fingerprints are taken
// in: a piece of a larger tensor when `piece` is given (it must lie in its global tensor and
// have the tensor's shape).
Result<TensorRecord> FrameOf(const std::string& name, const std::vector<uint64_t>& shape,
                             DType dtype, const std::optional<Region>& piece,
                             const std::string& tw) {
  TensorRecord frame;
  frame.name = name;
  frame.shape = shape;
  frame.dtype = dtype;
  if (piece) {
    const Region& p = *piece;
    bool in = p.rank >= 0 && p.rank <= kMaxRank;
    unsigned __int128 n = 1;
    for (int d = 0; in && d < p.rank; ++d) {
      n *= p.shape[d];
      in = p.flat || (p.start[d] <= p.stop[d] && p.stop[d] <= p.shape[d]);
    }
    if (in && p.flat) in = p.begin <= p.end && p.end <= n;
    if (!in || LocalShape(p) != shape)
      return InvalidArgument(tw + ": piece " + DescribeRegion(p) +
                             " does not lie in its global tensor or has not the shape " +
                             ShapeText(shape));
    frame.piece = p;
  }
  return frame;
}

// Creates dataset `esc` in group `group` for a dense tensor of dtype `dtype` on grid `g`:
// chunked with the filter pipeline `filters` (FilterPipeline; zstd at options.zstd_level),
// never filled, no times. *dset: the dataset, *type: its file type. With `cells`, the dataset
// is instead an empty cell set of g's chunk shape (docs/FORMAT.md 11): [0, c0, ..., c(r-1)],
// growing along its first dim, one chunk per cell.
Status CreateDenseDataset(hid_t group, const std::string& esc, DType dtype, const Grid& g,
                          const std::vector<int>& filters, const WriteOptions& options,
                          const std::string& tw, Hid* dset, Hid* type, bool cells = false) {
  H5Guard gl;
  *type = StorageType(dtype);
  std::vector<hsize_t> dims(g.shape.begin(), g.shape.end());
  std::vector<hsize_t> cd(g.chunk.begin(), g.chunk.end());
  std::vector<hsize_t> most = dims;
  if (cells) {
    dims = cd;
    dims.insert(dims.begin(), 0);
    most = dims;
    most[0] = H5S_UNLIMITED;
    cd.insert(cd.begin(), 1);
  }
  const int rank = static_cast<int>(dims.size());
  Hid space(rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims.data(), most.data()),
            H5Sclose);
  Hid dcpl(UntimedCreationList(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
  if (g.chunked()) {
    H5Pset_chunk(dcpl.get(), rank, cd.data());
    for (int id : filters) {
      if (id == kH5FilterShuffle) {
        H5Pset_shuffle(dcpl.get());
        continue;
      }
      const unsigned level = static_cast<unsigned>(options.zstd_level);
      if (H5Pset_filter(dcpl.get(), kH5FilterZstd, H5Z_FLAG_MANDATORY, 1, &level) < 0)
        return SEEDSTORE_H5_ERROR(tw + ": adding the zstd filter");
    }
  }
  *dset = Hid(H5Dcreate2(group, esc.c_str(), type->get(), space.get(), H5P_DEFAULT, dcpl.get(),
                         H5P_DEFAULT),
              H5Dclose);
  if (!dset->ok()) return SEEDSTORE_H5_ERROR(tw + ": creating dataset");
  return Status::Ok();
}

// What an item leaves in its slot for its commit, which writes it: chunks are written in
// index order, so that they lie in the file in that order whatever the thread count.
struct Pending {
  const uint8_t* bytes = nullptr;
  size_t size = 0;
  unsigned filter_mask = 0;
  bool copied = false;  // as stored in the source (raw)
};

// Chunk j's elements `elems` (the chunk's box `box` clipped to the tensor, row-major) as the
// bytes to store, in `s`'s buffers: zero-padded to a full chunk at an edge, *checksum the
// XXH3-64 of that full chunk; chunked, shuffled (`shuffle`) and compressed at `level` (0: not
// compressed: codec none, stored as is), else stored as is; *stored_hash the XXH3-64 of the
// bytes stored.
Result<Pending> EncodeChunk(const uint8_t* elems, const Region& box, const Grid& g, size_t es,
                            bool shuffle, int level, const std::string& tw, WriteScratch& s,
                            uint64_t* checksum, uint64_t* stored_hash) {
  const size_t chunk_bytes = g.ChunkElems() * es;
  const uint8_t* chunk = elems;
  if (g.chunked() && box.Count() != g.ChunkElems()) {
    s.chunk.assign(chunk_bytes, 0);  // edge chunk: zero outside the tensor
    uint64_t ext[kMaxRank];
    for (int d = 0; d < g.rank; ++d) ext[d] = box.stop[d] - box.start[d];
    CopyIntersection(elems, box.start, ext, s.chunk.data(), box.start, g.chunk.data(), box.start,
                     box.stop, g.rank, es);
    chunk = s.chunk.data();
  }
  *checksum = Checksum64(chunk, chunk_bytes);
  *stored_hash = *checksum;  // contiguous data is stored as is
  if (!g.chunked() || level == 0) return Pending{chunk, chunk_bytes, 0, false};
  const uint8_t* src = chunk;
  if (shuffle) {
    s.shuf.resize(chunk_bytes);
    Shuffle(src, s.shuf.data(), chunk_bytes, es);
    src = s.shuf.data();
  }
  s.comp.resize(ZSTD_compressBound(chunk_bytes));
  const size_t c = CompressChunk(s.comp.data(), s.comp.size(), src, chunk_bytes, level);
  if (ZSTD_isError(c)) return Internal(tw + ": zstd: " + ZSTD_getErrorName(c));
  *stored_hash = Checksum64(s.comp.data(), c);
  return Pending{s.comp.data(), c, 0, false};
}

// Writes a dense tensor's checksum table (group `g_sums`) and chunk-info table (`g_info`),
// each with its own hash (docs/FORMAT.md 4.3). Call holding the HDF5 lock.
Status WriteChunkTables(hid_t g_sums, hid_t g_info, const std::string& esc,
                        const std::vector<uint64_t>& sums, const std::vector<ChunkInfo>& infos,
                        const std::string& tw) {
  const uint64_t num = sums.size();
  Hid untimed(UntimedCreationList(H5P_DATASET_CREATE), H5Pclose);
  {
    const hsize_t n = num;
    Hid space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    Hid cs(H5Dcreate2(g_sums, esc.c_str(), H5T_STD_U64LE, space.get(), H5P_DEFAULT, untimed.get(),
                      H5P_DEFAULT),
           H5Dclose);
    if (!cs.ok() ||
        H5Dwrite(cs.get(), H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, sums.data()) < 0)
      return SEEDSTORE_H5_ERROR(tw + ": writing the checksum table");
    SEEDSTORE_RETURN_IF_ERROR(WriteU64Attr(cs.get(), kTableHashAttr, {TableHash(sums)}, true));
  }
  const hsize_t dims[2] = {num, 3};
  std::vector<uint64_t> rows(num * 3);
  for (uint64_t j = 0; j < num; ++j) {
    rows[3 * j] = infos[j].stored_hash;
    rows[3 * j + 1] = infos[j].fingerprint.lane0;
    rows[3 * j + 2] = infos[j].fingerprint.lane1;
  }
  Hid space(H5Screate_simple(2, dims, nullptr), H5Sclose);
  Hid ci(H5Dcreate2(g_info, esc.c_str(), H5T_STD_U64LE, space.get(), H5P_DEFAULT, untimed.get(),
                    H5P_DEFAULT),
         H5Dclose);
  if (!ci.ok() ||
      H5Dwrite(ci.get(), H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0)
    return SEEDSTORE_H5_ERROR(tw + ": writing the chunk-info table");
  SEEDSTORE_RETURN_IF_ERROR(WriteU64Attr(ci.get(), kTableHashAttr, {TableHash(rows)}, true));
  return Status::Ok();
}

}  // namespace

Result<StoreWriter::Impl::CellSet*> StoreWriter::Impl::CellSetFor(DType dtype, const Grid& g,
                                                                  const std::vector<int>& filters,
                                                                  const std::string& tw) {
  for (CellSet& c : sets)
    if (c.dtype == dtype && c.chunk == g.chunk && c.filters == filters) return &c;
  CellSet c;
  c.dtype = dtype;
  c.chunk = g.chunk;
  c.filters = filters;
  const std::string k = std::to_string(sets.size());
  Hid type;
  SEEDSTORE_RETURN_IF_ERROR(CreateDenseDataset(
      g_cells, k, dtype, g, filters, opt, tw + ": cell set " + k, &c.dset, &type, /*cells=*/true));
  {
    H5Guard gl;
    SEEDSTORE_RETURN_IF_ERROR(WriteStringAttr(c.dset.get(), "seedstore.dtype", DTypeName(dtype)));
  }
  sets.push_back(std::move(c));
  return &sets.back();
}

// A bool is stored as byte 0 or 1 (docs/FORMAT.md 4.2): h5py, numpy and torch disagree on
// what any other byte means, so the writer refuses one, naming the element (tensor indices)
// of the box `b` whose row-major bytes are `p`.
static Status CheckBoolBytes(const uint8_t* p, const Region& b, const std::string& tw) {
  const uint64_t n = b.Count();
  const uint8_t* bad = std::find_if(p, p + n, [](uint8_t x) { return x > 1; });
  if (bad == p + n) return Status::Ok();
  uint64_t q = static_cast<uint64_t>(bad - p);
  std::vector<uint64_t> at(b.rank);
  for (int d = b.rank - 1; d >= 0; --d) {
    const uint64_t ext = b.stop[d] - b.start[d];
    at[d] = b.start[d] + q % ext;
    q /= ext;
  }
  return InvalidArgument(tw + ": bool element " + ShapeText(at) + " holds byte " +
                         std::to_string(*bad) +
                         "; a bool is stored as 0 or 1 (readers disagree on other bytes)");
}

Status StoreWriter::AddDenseFrom(const std::string& name, const std::vector<uint64_t>& shape,
                                 DType dtype, const BoxSource& source, const uint8_t* whole,
                                 std::function<void(uint64_t)> progress,
                                 const DenseChunking& chunking) {
  Impl& m = *impl_;
  SEEDSTORE_RETURN_IF_ERROR(m.CheckName(name));
  const std::string tw = "tensor '" + name + "'";
  SEEDSTORE_RETURN_IF_ERROR(ValidateShape(shape, dtype, tw + " shape"));
  const int es = DTypeSize(dtype);
  const int rank = static_cast<int>(shape.size());
  SEEDSTORE_ASSIGN_OR_RETURN(const std::vector<uint64_t> chunk_shape,
                             ChunkShapeFor(shape, es, m.opt.chunk_bytes, chunking.chunk, tw));
  const Grid g = Grid::Make(shape, chunk_shape);
  const std::vector<int> filters = FilterPipeline(m.opt, name, dtype);
  const std::string esc = EscapeH5Name(name);
  // The record as readers will see it: its fingerprints are taken in its frame.
  SEEDSTORE_ASSIGN_OR_RETURN(const TensorRecord frame,
                             FrameOf(name, shape, dtype, chunking.piece, tw));
  Hid dset, type;
  // A version 2 rank file's piece: chunk j is cell first + j of its set (docs/FORMAT.md 11).
  Impl::CellSet* set = nullptr;
  uint64_t first = 0;
  if (m.opt.cells && chunking.piece && g.chunked()) {
    SEEDSTORE_ASSIGN_OR_RETURN(set, m.CellSetFor(dtype, g, filters, tw));
    first = set->cells;
    set->cells = first + g.num;
    if (set->cells > set->capacity) {
      H5Guard gl;
      std::vector<hsize_t> dims(g.chunk.begin(), g.chunk.end());
      dims.insert(dims.begin(), std::max(set->cells, 2 * set->capacity));
      if (H5Dset_extent(set->dset.get(), dims.data()) < 0)
        return SEEDSTORE_H5_ERROR(tw + ": growing cell set " + std::to_string(set - m.sets.data()));
      set->capacity = dims[0];
    }
  } else {
    SEEDSTORE_RETURN_IF_ERROR(
        CreateDenseDataset(m.g_tensors, esc, dtype, g, filters, m.opt, tw, &dset, &type));
  }
  const hid_t target = set ? set->dset.get() : dset.get();
  std::vector<uint64_t> sums(g.num);
  std::vector<ChunkInfo> infos(g.num);
  std::atomic<uint64_t> stored{0}, copied{0};
  const int threads = ThreadCount(m.opt.threads, g.num);
  const int slots = InOrderSlots(threads);
  std::vector<Fingerprint> parts(slots);
  const bool compress = !filters.empty();
  const bool do_shuffle = compress && filters.front() == kH5FilterShuffle;
  std::vector<std::unique_ptr<WriteScratch>> scratch = WriteScratchPool().Take(slots);
  std::vector<Pending> pending(slots);
  auto work = [&](uint64_t j, int th) -> Status {
    std::vector<uint8_t>& box_buf = scratch[th]->box;
    StoredChunk& raw = scratch[th]->raw;
    Pending& out = pending[th];
    out = Pending{};
    const Region box = g.Box(j);
    const uint64_t n = box.Count();
    bool have_raw = false;
    if (g.chunked() && chunking.raw) {
      auto r = chunking.raw(j, box, &raw);
      if (!r.ok()) return r.status();
      have_raw = *r;
    }
    if (have_raw) {  // copied as stored: bytes, checksum and (given or computed) fingerprint
      if (!raw.fingerprint && raw.data.size() != n * es)
        return Internal(tw + ": the raw chunk " + std::to_string(j) + " holds " +
                        std::to_string(raw.data.size()) + " bytes of data, not " +
                        std::to_string(n * es));
      infos[j].fingerprint = raw.fingerprint
                                 ? *raw.fingerprint
                                 : FingerprintOf(frame, box, raw.data.data(), CpuOptions{1});
      infos[j].stored_hash = raw.stored_hash;
      parts[th].Add(infos[j].fingerprint);
      sums[j] = raw.checksum;
      out = Pending{raw.bytes.data(), raw.bytes.size(), raw.filter_mask, true};
      return Status::Ok();
    }
    // The box's elements, row-major: where they lie in `whole` when contiguous there.
    const uint8_t* elems;
    if (whole && n > 0 && IsContiguous(box)) {
      elems = whole + box.RunBase(0) * es;
    } else {
      box_buf.resize(n * es);
      if (n > 0) SEEDSTORE_RETURN_IF_ERROR(source(box, box_buf.data()).WithContext(tw));
      elems = box_buf.data();
    }
    if (dtype == DType::kBool) SEEDSTORE_RETURN_IF_ERROR(CheckBoolBytes(elems, box, tw));
    infos[j].fingerprint = FingerprintOf(frame, box, elems, CpuOptions{1});
    parts[th].Add(infos[j].fingerprint);
    SEEDSTORE_ASSIGN_OR_RETURN(
        out, EncodeChunk(elems, box, g, es, do_shuffle, compress ? m.opt.zstd_level : 0, tw,
                         *scratch[th], &sums[j], &infos[j].stored_hash));
    return Status::Ok();
  };
  auto commit = [&](uint64_t j, int th) -> Status {
    const Pending& p = pending[th];
    if (g.chunked()) {
      hsize_t off[kMaxRank + 1] = {};
      if (set) {
        off[0] = first + j;
      } else {
        const Region box = g.Box(j);
        for (int d = 0; d < rank; ++d) off[d] = box.start[d];
      }
      {
        H5Guard gl;
        if (H5Dwrite_chunk(target, H5P_DEFAULT, p.filter_mask, off, p.size, p.bytes) < 0)
          return SEEDSTORE_H5_ERROR(tw + ": writing chunk " + std::to_string(j) +
                                    (p.copied ? " (copied as stored)" : ""));
      }
      m.StartWriteback(p.size);
    } else if (p.size > 0) {
      H5Guard gl;
      if (H5Dwrite(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, p.bytes) < 0)
        return SEEDSTORE_H5_ERROR(tw + ": writing data");
    }
    stored += p.size;
    if (p.copied) ++copied;
    if (progress) progress(g.Box(j).Count() * es);  // commits run one at a time
    return Status::Ok();
  };
  Status st = ParallelForInOrder(g.num, threads, work, commit);
  WriteScratchPool().Return(std::move(scratch));
  if (!st.ok()) return st;
  m.counts.copied += copied.load();
  m.counts.encoded += g.num - copied.load();
  Fingerprint fp;
  for (const auto& p : parts) fp.Add(p);
  m.last_cells.reset();
  if (set) {  // the set's tables are written by Commit
    set->sums.insert(set->sums.end(), sums.begin(), sums.end());
    set->infos.insert(set->infos.end(), infos.begin(), infos.end());
    m.last_cells = PieceCells{static_cast<int>(set - m.sets.data()), first, g.chunk};
  } else {
    H5Guard gl;
    SEEDSTORE_RETURN_IF_ERROR(WriteChunkTables(m.g_sums, m.g_info, esc, sums, infos, tw));
    SEEDSTORE_RETURN_IF_ERROR(WriteStringAttr(dset.get(), "seedstore.name", name));
    SEEDSTORE_RETURN_IF_ERROR(WriteStringAttr(dset.get(), "seedstore.dtype", DTypeName(dtype)));
    SEEDSTORE_RETURN_IF_ERROR(
        WriteU64Attr(dset.get(), "seedstore.fingerprint", {fp.lane0, fp.lane1}, false));
  }
  m.counts.stored_bytes += stored.load() + g.num * 32;
  m.records.push_back(DenseRecordText(name, shape, dtype, fp, stored.load() + g.num * 32,
                                      frame.piece, m.last_cells ? &*m.last_cells : nullptr));
  m.last_dense = fp;
  return Status::Ok();
}

Status StoreWriter::CopyFrom(const H5Store& src, size_t i) {
  Impl& m = *impl_;
  const TensorRecord& t = src.tensors().at(i);
  SEEDSTORE_RETURN_IF_ERROR(src.Damage(i));
  SEEDSTORE_RETURN_IF_ERROR(m.CheckName(t.name));
  if (t.lazy) {
    LazyTensor l = *t.lazy;
    if (l.spec.key.kind == KeySpec::Kind::kDerived && src.root_seed() != m.seed) {
      l.spec.key.kind = KeySpec::Kind::kRaw;  // keep the very same key under another root seed
      l.spec.key.raw = l.key;
    }
    m.records.push_back(LazyRecordText(l, t.fingerprint));
    return Status::Ok();
  }
  const StoredTensor& st = src.stored(i);
  if (st.cell_set >= 0 || (m.opt.cells && t.piece && !st.chunk.empty())) {
    // A cell of a set, or one to become one: copied chunk by chunk, as stored where the
    // pipelines agree (docs/FORMAT.md 11).
    m.names.erase(t.name);  // AddDense checks it again
    DenseChunking c;
    c.chunk = st.chunk;
    c.piece = t.piece;
    const bool same = CopiesChunksOf(st, t.name, t.dtype);
    c.raw = [&src, i, same](uint64_t j, const Region&, StoredChunk* out) -> Result<bool> {
      if (!same) return false;
      SEEDSTORE_RETURN_IF_ERROR(
          src.ReadStoredChunk(i, j, out, /*decode=*/src.chunk_info(i).empty()));
      return true;
    };
    BoxSource read = [&src, i](const Region& box, void* out) {
      return src.Read(i, box, out, CpuOptions{1});
    };
    return AddDense(t.name, t.shape, t.dtype, read, {}, c);
  }
  const std::string esc = EscapeH5Name(t.name);
  H5Guard gl;
  if (H5Ocopy(src.h5_file(), ("/tensors/" + esc).c_str(), m.g_tensors, esc.c_str(), H5P_DEFAULT,
              H5P_DEFAULT) < 0 ||
      H5Ocopy(src.h5_file(), ("/checksums/" + esc).c_str(), m.g_sums, esc.c_str(), H5P_DEFAULT,
              H5P_DEFAULT) < 0 ||
      (!src.chunk_info(i).empty() && H5Ocopy(src.h5_file(), ("/chunkinfo/" + esc).c_str(), m.g_info,
                                             esc.c_str(), H5P_DEFAULT, H5P_DEFAULT) < 0))
    return SEEDSTORE_H5_ERROR("copying tensor '" + t.name + "' from '" + src.origin() + "'");
  m.counts.copied += src.stored(i).num_chunks;
  m.counts.stored_bytes += src.stored(i).stored_bytes;
  m.records.push_back(DenseRecordText(t.name, t.shape, t.dtype, *t.fingerprint,
                                      src.stored(i).stored_bytes, t.piece));
  m.last_dense = *t.fingerprint;
  return Status::Ok();
}

bool StoreWriter::CopiesChunksOf(const StoredTensor& s, const std::string& name, DType dtype,
                                 const WriteOptions& o) {
  const std::vector<int> mine = FilterPipeline(o, name, dtype);
  return s.dense && !s.chunk.empty() && s.filters == mine &&
         // as Create clamps it
         (mine.empty() || s.zstd_level == std::clamp(o.zstd_level, kMinZstdLevel, kMaxZstdLevel));
}

bool StoreWriter::CopiesChunksOf(const StoredTensor& s, const std::string& name,
                                 DType dtype) const {
  return CopiesChunksOf(s, name, dtype, impl_->opt);
}

StoreWriter::ChunkCounts StoreWriter::chunk_counts() const { return impl_->counts; }
Fingerprint StoreWriter::last_dense_fingerprint() const { return impl_->last_dense; }
std::optional<PieceCells> StoreWriter::last_dense_cells() const { return impl_->last_cells; }
const WriteOptions& StoreWriter::options() const { return impl_->opt; }

void StoreWriter::SetShardRank(std::optional<int> rank) { impl_->rank = rank; }

Status StoreWriter::Commit(const std::function<Status(const std::string& temp)>& before_rename) {
  Impl& m = *impl_;
  SEEDSTORE_RETURN_IF_ERROR(Finish());
  if (before_rename) SEEDSTORE_RETURN_IF_ERROR(before_rename(m.file->temp_path()));
  SEEDSTORE_RETURN_IF_ERROR(m.file->Commit());
  m.committed = true;
  return Status::Ok();
}

Status StoreWriter::CommitAll(const std::vector<std::unique_ptr<StoreWriter>>& writers) {
  std::vector<AtomicFile*> files;
  for (const auto& w : writers) {
    SEEDSTORE_RETURN_IF_ERROR(w->Finish());
    files.push_back(w->impl_->file.get());
  }
  SEEDSTORE_RETURN_IF_ERROR(AtomicFile::CommitAll(files));
  for (const auto& w : writers) w->impl_->committed = true;
  return Status::Ok();
}

Status StoreWriter::Finish() {
  Impl& m = *impl_;
  if (m.committed) return Internal("store '" + m.file->path() + "' committed twice");
  for (size_t k = 0; k < m.sets.size(); ++k) {
    H5Guard gl;
    const std::string name = std::to_string(k);
    Impl::CellSet& c = m.sets[k];
    if (c.capacity != c.cells) {  // no chunk lies beyond `cells`: the cut drops none
      std::vector<hsize_t> dims(c.chunk.begin(), c.chunk.end());
      dims.insert(dims.begin(), c.cells);
      if (H5Dset_extent(c.dset.get(), dims.data()) < 0)
        return SEEDSTORE_H5_ERROR("cutting cell set " + name + " to its " +
                                  std::to_string(c.cells) + " cells");
      c.capacity = c.cells;
    }
    SEEDSTORE_RETURN_IF_ERROR(WriteChunkTables(m.g_cellsums, m.g_cellinfo, name, m.sets[k].sums,
                                               m.sets[k].infos, "cell set " + name));
  }
  // The index's compact JSON text, keys in sorted order, the records as written.
  std::string text =
      "{\"format\":\"seedstore\",\"generator\":\"" + std::string(GeneratorName(m.generator)) + "\"";
  if (m.rank) text += ",\"rank\":" + std::to_string(*m.rank);
  text += ",\"seed\":" + std::to_string(m.seed) + ",\"tensors\":[";
  for (size_t k = 0; k < m.records.size(); ++k) {
    if (k) text += ',';
    text += m.records[k];
  }
  text +=
      "],\"version\":" + std::to_string(m.opt.cells ? kCellsFormatVersion : kStoreFormatVersion) +
      "}";
  {
    H5Guard gl;
    const hsize_t n = text.size();
    const hsize_t chunk = std::min<hsize_t>(n, 4u << 20);
    Hid space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    Hid dcpl(UntimedCreationList(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(dcpl.get(), 1, &chunk);
    const unsigned level = 3;
    H5Pset_filter(dcpl.get(), kH5FilterZstd, H5Z_FLAG_MANDATORY, 1, &level);
    // No chunk cache, for the reason the file has no sieve buffer (Create): H5Dwrite writes
    // the index's chunks, and fails, itself -- cached, H5Dclose wrote them, and a full disk
    // committed a store whose index was all zeros ("index checksum mismatch").
    Hid d(H5Dcreate2(m.g_meta, "index", H5T_STD_U8LE, space.get(), H5P_DEFAULT, dcpl.get(),
                     NoChunkCache()),
          H5Dclose);
    if (!d.ok() ||
        H5Dwrite(d.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) < 0)
      return SEEDSTORE_H5_ERROR("writing /seedstore/index");
    SEEDSTORE_RETURN_IF_ERROR(
        WriteU64Attr(d.get(), "seedstore.xxh3", {Checksum64(text.data(), text.size())}, true));
  }
  {
    H5Guard gl;
    if (H5Fflush(m.h5, H5F_SCOPE_GLOBAL) < 0) return SEEDSTORE_H5_ERROR("flushing the store");
  }
  if (!m.CloseH5(/*keep=*/true)) return IoError("closing '" + m.file->temp_path() + "' failed");
  return Status::Ok();
}

}  // namespace seedstore
