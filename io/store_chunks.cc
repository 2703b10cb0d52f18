#include "io/store_chunks.h"

#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <string_view>
#include <unordered_map>

#include "io/h5_handle.h"
#include "io/zstd_filter.h"

namespace seedstore {

// Chunk-decoding buffers (a chunk or two each), kept between reads and shared by every open
// store: a pool per store would keep two buffers per thread per open store -- 525 MB of them
// reading a 256-rank save whole.
ScratchPool<ChunkScratch>& ReadScratch() {
  static ScratchPool<ChunkScratch>* pool = new ScratchPool<ChunkScratch>();  // never destroyed
  return *pool;
}

// Where the chunk at grid origin `off` of chunked dataset `dset` is stored; size 0 when the
// chunk is missing. Takes the HDF5 lock.
ChunkLoc LocateChunk(int64_t dset, const hsize_t* off) {
  ChunkLoc loc;
  H5Guard gl;
  haddr_t addr = HADDR_UNDEF;
  hsize_t size = 0;
  if (H5Dget_chunk_info_by_coord(dset, off, &loc.mask, &addr, &size) < 0) {
    H5ErrorText();
    size = 0;
  }
  loc.addr = addr;
  loc.size = size;
  return loc;
}
// The same for chunk j, from the locations `w` has, else from its dataset.
static ChunkLoc LocateChunk(const ChunkWhere& w, uint64_t j, const hsize_t* off) {
  return w.located ? (*w.located)[j] : LocateChunk(w.dset(), off);
}

// How many chunks per reading thread the readahead hint runs ahead of the decoding (8 x 1 MiB
// chunks: cold reads 0.66-0.85x -> 0.70-0.93x of a raw read vs 2 ahead; docs/PERF.md).
constexpr uint64_t kPrefetchAhead = 8;

int H5Store::HintFd(uint64_t chunk_bytes) const {
  // The kernel's own readahead of a sequential read keeps ahead of the decoding once its
  // window holds two chunks, and a hint then only costs: it fills the page cache with
  // single pages in the reading thread (31 ms per 180 MB here), where the kernel's readahead
  // uses large folios in the background. Measured on 1 MiB chunks, cold reads vs a raw read:
  // window 8 MiB 0.74-0.87x with hints, 0.98-1.07x without; 2 MiB 0.70-0.79x / 0.95x;
  // 512 KiB 0.77-0.83x / 0.62-0.71x; 128 KiB 0.73-0.85x / 0.59-0.74x (docs/PERF.md).
  return kernel_readahead_ >= 2 * chunk_bytes ? -1 : fd_;
}

// Asks the kernel to start reading chunk j's stored bytes now (a cold read then overlaps
// the disk with the decoding of the chunks before it); `fd` < 0: no hint. A hint: errors
// are ignored.
static void PrefetchChunk(int fd, const ChunkWhere& w, const Grid& g, uint64_t j) {
  if (fd < 0 || !g.chunked() || j >= g.num) return;
  if (!w.located && w.stored->index_chunks() > H5Store::kAddressedChunks)
    return;  // no address: the kernel's readahead
  uint64_t c[kMaxRank];
  hsize_t off[kMaxRank + 1];
  g.Coords(j, c);
  ChunkOffset(*w.stored, j, c, g.rank, off);
  const ChunkLoc loc = LocateChunk(w, j, off);
  if (loc.size > 0)
    (void)::posix_fadvise(fd, static_cast<off_t>(loc.addr), static_cast<off_t>(loc.size),
                          POSIX_FADV_WILLNEED);
}

// Reads, decodes and verifies chunk j of dense tensor t into `sink` (see EmitChunk). The
// stored bytes are read with pread at the chunk's file address when `fd` >= 0, outside the
// HDF5 lock, so the threads' reads overlap each other and the decoding; else (another HDF5
// file driver) through H5Dread_chunk. Shared by reads, Verify and ReadStoredChunk, which
// relies on s.raw holding the chunk's stored bytes afterwards (decoding never writes to it).
// On error the sink's contents are unspecified.
// The chunk-corrupt error of chunk j of tensor t in file `path`.
static Status ChunkError(const std::string& path, const TensorRecord& t, const Grid& g, uint64_t j,
                         const std::string& m) {
  std::string at;
  if (g.chunked()) {
    uint64_t c[kMaxRank];
    g.Coords(j, c);
    for (int d = 0; d < g.rank; ++d) c[d] *= g.chunk[d];
    at = " at offset " + ShapeText(std::vector<uint64_t>(c, c + g.rank));
  }
  return StoreStatus(StoreError::kChunkCorrupt, "file '" + path + "' tensor '" + t.name +
                                                    "' chunk " + std::to_string(j) + at + ": " + m);
}

// Reads chunk j's stored bytes into s.raw and its filter mask into *mask: the chunk after the
// filter pipeline for a chunked dataset (pread at its address when fd >= 0, else
// H5Dread_chunk), the data bytes as stored for a contiguous one (mask 0).
static Status ReadStoredBytes(const std::string& path, const TensorRecord& t, const ChunkWhere& w,
                              int fd, const Grid& g, uint64_t j, ChunkScratch& s, unsigned* mask) {
  auto fail = [&](const std::string& m) { return ChunkError(path, t, g, j, m); };
  *mask = 0;
  if (!g.chunked()) {
    const size_t bytes = g.ChunkElems() * DTypeSize(t.dtype);
    s.raw.resize(bytes);
    if (bytes == 0) return Status::Ok();
    H5Guard gl;
    Hid ty(H5Dget_type(w.dset()), H5Tclose);
    if (H5Dread(w.dset(), ty.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, s.raw.data()) < 0)
      return fail("cannot read the data: " + H5ErrorText());
    return Status::Ok();
  }
  uint64_t cs[kMaxRank];
  g.Coords(j, cs);
  hsize_t off[kMaxRank + 1];
  ChunkOffset(*w.stored, j, cs, g.rank, off);
  if (!w.located &&
      (fd < 0 || w.stored->index_chunks() > H5Store::kAddressedChunks)) {  // by HDF5 directly
    H5Guard gl;
    hsize_t n = 0;
    if (H5Dget_chunk_storage_size(w.dset(), off, &n) < 0) {
      H5ErrorText();
      n = 0;
    }
    if (n == 0) return fail("the chunk is missing from the file");
    s.raw.resize(n);
    uint32_t m = 0;
    if (H5Dread_chunk(w.dset(), H5P_DEFAULT, off, &m, s.raw.data()) < 0)
      return fail("cannot read the stored chunk: " + H5ErrorText());
    *mask = m;
    return Status::Ok();
  }
  const ChunkLoc loc = LocateChunk(w, j, off);
  const uint64_t addr = loc.addr;
  const hsize_t n = loc.size;
  *mask = loc.mask;
  if (n == 0) return fail("the chunk is missing from the file");
  s.raw.resize(n);
  for (size_t got = 0; got < n;) {
    const ssize_t r = ::pread(fd, s.raw.data() + got, n - got, static_cast<off_t>(addr + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return fail(std::string("cannot read the stored chunk: ") + std::strerror(errno));
    if (r == 0)
      return fail("the stored chunk (" + std::to_string(n) + " bytes at file offset " +
                  std::to_string(addr) + ") extends past the end of the file");
    got += static_cast<size_t>(r);
  }
  return Status::Ok();
}

// Checks the stored bytes in s.raw against the chunk-info table's hash of chunk j.
static Status CheckStoredHash(const std::string& path, const TensorRecord& t, const Grid& g,
                              uint64_t j, const ChunkScratch& s, uint64_t expected) {
  const uint64_t h = Checksum64(s.raw.data(), s.raw.size());
  if (h == expected) return Status::Ok();
  return ChunkError(
      path, t, g, j,
      "stored bytes hash mismatch (chunk-info " + Hex64(expected) + ", computed " + Hex64(h) + ")");
}

// Reads chunk j, checks its checksum and writes its elements to the sink. With `info`, the
// stored bytes are also checked against the chunk-info table's hash. s.raw keeps the stored
// bytes and *mask their filter mask.
static Status LoadChunk(const std::string& path, const TensorRecord& t, const StoredTensor& st,
                        const ChunkWhere& w, int fd, const Grid& g, uint64_t j,
                        uint64_t expected_sum, const ChunkSink& sink, ChunkScratch& s,
                        const ChunkInfo* info = nullptr, unsigned* mask_out = nullptr) {
  const size_t es = DTypeSize(t.dtype);
  const size_t bytes = g.ChunkElems() * es;
  uint64_t cs[kMaxRank] = {};  // the chunk's origin (tensor coordinates)
  if (g.chunked()) {
    g.Coords(j, cs);
    for (int d = 0; d < g.rank; ++d) cs[d] *= g.chunk[d];
  }
  auto fail = [&](const std::string& m) { return ChunkError(path, t, g, j, m); };
  unsigned mask = 0;
  SEEDSTORE_RETURN_IF_ERROR(ReadStoredBytes(path, t, w, fd, g, j, s, &mask));
  if (mask_out) *mask_out = mask;
  if (info) SEEDSTORE_RETURN_IF_ERROR(CheckStoredHash(path, t, g, j, s, info->stored_hash));
  const uint8_t* src = s.raw.data();
  bool shuffled = false;  // src still holds shuffled bytes (undone in EmitChunk)
  if (g.chunked()) {
    // Undo the filters in reverse pipeline order, skipping those the mask says were skipped.
    // A shuffle that is the last one to undo is left to EmitChunk (fused with the checksum).
    int first = -1;  // the last filter to undo (lowest pipeline index not skipped)
    for (int k = 0; k < static_cast<int>(st.filters.size()); ++k)
      if (!(mask & (1u << k))) {
        first = k;
        break;
      }
    std::vector<uint8_t>* cur = &s.raw;
    auto next = [&] { return cur == &s.tmp ? &s.chunk : &s.tmp; };
    for (int k = static_cast<int>(st.filters.size()) - 1; k >= 0; --k) {
      if (mask & (1u << k)) continue;
      if (st.filters[k] == kH5FilterZstd) {
        const unsigned long long fn = ZSTD_getFrameContentSize(cur->data(), cur->size());
        if (fn == ZSTD_CONTENTSIZE_ERROR || fn == ZSTD_CONTENTSIZE_UNKNOWN)
          return fail("zstd: not a frame with a content size");
        if (fn != bytes)
          return fail("zstd frame holds " + std::to_string(fn) + " bytes, the chunk has " +
                      std::to_string(bytes));
        std::vector<uint8_t>* dst = next();
        dst->resize(bytes);
        const size_t r =
            ZSTD_decompressDCtx(ThreadZstdDCtx(), dst->data(), bytes, cur->data(), cur->size());
        if (ZSTD_isError(r) || r != bytes)
          return fail(std::string("zstd: ") +
                      (ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short frame"));
        cur = dst;
      } else {  // shuffle
        if (cur->size() != bytes) return fail("shuffled chunk has the wrong size");
        if (k == first) {
          shuffled = true;
          break;
        }
        std::vector<uint8_t>* dst = next();
        dst->resize(bytes);
        Unshuffle(cur->data(), dst->data(), bytes, es);
        cur = dst;
      }
    }
    if (cur->size() != bytes)
      return fail("stored chunk holds " + std::to_string(cur->size()) + " bytes, expected " +
                  std::to_string(bytes));
    src = cur->data();
  }
  const uint64_t* cext = g.chunked() ? g.chunk.data() : g.shape.data();
  const uint64_t sum = EmitChunk(src, bytes, es, shuffled, g.rank, cs, cext, sink, s);
  if (sum != expected_sum)
    return fail("checksum mismatch (stored " + Hex64(expected_sum) + ", computed " + Hex64(sum) +
                ")");
  return Status::Ok();
}

Status H5Store::Read(size_t i, const Region& r, void* out, CpuOptions o) const {
  if (i >= records_.size())
    return InvalidArgument("tensor index " + std::to_string(i) + " out of range");
  const TensorRecord& t = records_[i];
  if (t.lazy) return t.lazy->Materialize(r, out, o);
  SEEDSTORE_RETURN_IF_ERROR(damage_[i]);
  SEEDSTORE_RETURN_IF_ERROR(CheckRegionIn(t, r));
  return ReadByBoxes(t, r, out,
                     [&](const Region& b, void* dst) { return ReadDense(i, b, dst, o); });
}

Status H5Store::DecodeChunk(const ChunkWhere& w, size_t i, uint64_t j, std::vector<uint8_t>* out,
                            ChunkScratch& s, bool check_info, unsigned* mask) const {
  const TensorRecord& t = records_[i];
  const Grid g = Grid::Make(t.shape, stored_[i].chunk);
  const Region box = g.Box(j);
  uint64_t ext[kMaxRank];
  for (int d = 0; d < g.rank; ++d) ext[d] = box.stop[d] - box.start[d];
  out->resize(box.Count() * DTypeSize(t.dtype));
  const ChunkSink sink{out->data(), box.start, ext, box.start, box.stop};
  const ChunkInfo* info = check_info && !info_[i].empty() ? &info_[i][j] : nullptr;
  return LoadChunk(path_, t, stored_[i], w, fd_, g, j, checksums_[i][j], sink, s, info, mask);
}

Status H5Store::ReadStoredChunk(size_t i, uint64_t j, StoredChunk* out, bool decode) const {
  if (i < records_.size()) SEEDSTORE_RETURN_IF_ERROR(damage_[i]);
  if (i >= records_.size() || records_[i].lazy || stored_[i].chunk.empty() ||
      j >= stored_[i].num_chunks)
    return InvalidArgument(
        "file '" + path_ + "': no stored chunk " + std::to_string(j) + " of tensor " +
        (i < records_.size() ? "'" + records_[i].name + "'" : std::to_string(i)) +
        " (lazy, contiguous or out of range)");
  const TensorRecord& t = records_[i];
  const StoredTensor& st = stored_[i];
  const Grid g = Grid::Make(t.shape, st.chunk);
  const ChunkInfo* info = info_[i].empty() ? nullptr : &info_[i][j];
  SEEDSTORE_ASSIGN_OR_RETURN(const ChunkWhere w, ChunksOf(i));
  std::vector<std::unique_ptr<ChunkScratch>> scratch = ReadScratch().Take(1);
  ChunkScratch& s = *scratch[0];
  unsigned mask = 0;
  Status status;
  const bool from_table = !decode && info;
  if (from_table) {
    // The stored bytes alone, checked against the chunk-info table.
    status = ReadStoredBytes(path_, t, w, fd_, g, j, s, &mask);
    if (status.ok()) status = CheckStoredHash(path_, t, g, j, s, info->stored_hash);
    out->data.clear();
  } else {
    // One read of the stored bytes, decoded and checked against the checksum by the code
    // every read uses; the bytes handed out are those very bytes (s.raw).
    status = DecodeChunk(w, i, j, &out->data, s, true, &mask);
  }
  if (status.ok()) {
    out->stored_hash = info ? info->stored_hash : Checksum64(s.raw.data(), s.raw.size());
    out->fingerprint.reset();
    if (from_table) out->fingerprint = info->fingerprint;
    out->bytes.swap(s.raw);  // the pool keeps the other buffer
    out->filter_mask = mask;
    out->checksum = checksums_[i][j];
  }
  ReadScratch().Return(std::move(scratch));
  return status;
}

Result<Fingerprint> H5Store::ProveStored(size_t i, CpuOptions o) const {
  if (i >= records_.size() || records_[i].lazy)
    return InvalidArgument("file '" + path_ + "': tensor " + std::to_string(i) + " is not dense");
  SEEDSTORE_RETURN_IF_ERROR(damage_[i]);
  const TensorRecord& t = records_[i];
  const StoredTensor& st = stored_[i];
  const Grid g = Grid::Make(t.shape, st.chunk);
  const std::vector<ChunkInfo>& info = info_[i];
  SEEDSTORE_ASSIGN_OR_RETURN(const ChunkWhere w, ChunksOf(i));
  const int threads = ThreadCount(o.threads, g.num);
  const int hint = HintFd(g.ChunkElems() * DTypeSize(t.dtype));
  std::vector<std::unique_ptr<ChunkScratch>> scratch = ReadScratch().Take(threads);
  std::vector<std::vector<uint8_t>> bufs(threads);
  std::vector<Fingerprint> parts(threads);
  Status status = ParallelFor(g.num, threads, false, [&](uint64_t j, int th) -> Status {
    PrefetchChunk(hint, w, g, j + kPrefetchAhead * threads);
    ChunkScratch& s = *scratch[th];
    unsigned mask = 0;
    if (!info.empty()) {
      SEEDSTORE_RETURN_IF_ERROR(ReadStoredBytes(path_, t, w, fd_, g, j, s, &mask));
      SEEDSTORE_RETURN_IF_ERROR(CheckStoredHash(path_, t, g, j, s, info[j].stored_hash));
      parts[th].Add(info[j].fingerprint);
      return Status::Ok();
    }
    SEEDSTORE_RETURN_IF_ERROR(DecodeChunk(w, i, j, &bufs[th], s, false, &mask));
    parts[th].Add(FingerprintOf(t, g.Box(j), bufs[th].data(), CpuOptions{1}));
    return Status::Ok();
  });
  ReadScratch().Return(std::move(scratch));
  SEEDSTORE_RETURN_IF_ERROR(status);
  Fingerprint f;
  for (const Fingerprint& p : parts) f.Add(p);
  return f;
}

std::vector<StoredPart> H5Store::StoredParts(size_t i) const {
  const TensorRecord& t = records_.at(i);
  if (t.lazy) return {};
  return {StoredPart{WholeTensor(t.shape), WholeTensor(t.shape), -1}};
}

Result<std::pair<std::shared_ptr<const H5Store>, size_t>> H5Store::PartStore(size_t i, int) const {
  return std::make_pair(std::shared_ptr<const H5Store>(std::shared_ptr<const H5Store>(), this), i);
}

Result<std::optional<Fingerprint>> H5Store::ProveStoredPiece(size_t i, const Region&, bool,
                                                             CpuOptions o, size_t) const {
  if (chunk_info(i).empty() || records_[i].piece) return std::optional<Fingerprint>();
  SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint f, ProveStored(i, o));
  return std::optional<Fingerprint>(f);
}

Status H5Store::ForEachChunkIn(
    size_t i, const Region& box, CpuOptions o,
    const std::function<Status(const ChunkWhere& where, uint64_t j, const uint64_t* is,
                               const uint64_t* ie, ChunkScratch& s, int th)>& f) const {
  const StoredTensor& st = stored_[i];
  SEEDSTORE_ASSIGN_OR_RETURN(const ChunkWhere w, ChunksOf(i));
  const Grid g = Grid::Make(records_[i].shape, st.chunk);
  uint64_t lo[kMaxRank], n_in[kMaxRank];
  uint64_t total = 1;
  for (int d = 0; d < g.rank; ++d) {
    lo[d] = box.start[d] / g.chunk[d];
    n_in[d] = (box.stop[d] - 1) / g.chunk[d] - lo[d] + 1;
    total *= n_in[d];
  }
  // The linear index of the q-th intersecting chunk (row-major over the intersecting ones).
  auto intersecting = [&](uint64_t q, uint64_t* c) {
    for (int d = g.rank - 1; d >= 0; --d) {
      c[d] = lo[d] + q % n_in[d];
      q /= n_in[d];
    }
    return g.Linear(c);
  };
  const int threads = ThreadCount(o.threads, total);
  const int hint = HintFd(g.ChunkElems() * DTypeSize(records_[i].dtype));
  std::vector<std::unique_ptr<ChunkScratch>> scratch = ReadScratch().Take(threads);
  // The first chunks are asked for all at once; then each chunk handed out asks for the one
  // kPrefetchAhead per thread ahead of it.
  {
    uint64_t c[kMaxRank];
    for (uint64_t q = 0; q < std::min<uint64_t>(total, kPrefetchAhead * threads); ++q)
      PrefetchChunk(hint, w, g, intersecting(q, c));
  }
  Status status = ParallelFor(total, threads, false, [&](uint64_t q, int th) -> Status {
    uint64_t c[kMaxRank];
    const uint64_t ahead = q + kPrefetchAhead * threads;
    if (ahead < total) PrefetchChunk(hint, w, g, intersecting(ahead, c));
    const uint64_t j = intersecting(q, c);
    uint64_t is[kMaxRank], ie[kMaxRank];
    for (int d = 0; d < g.rank; ++d) {
      is[d] = std::max(c[d] * g.chunk[d], box.start[d]);
      ie[d] = std::min(c[d] * g.chunk[d] + g.chunk[d], box.stop[d]);
    }
    return f(w, j, is, ie, *scratch[th], th);
  });
  ReadScratch().Return(std::move(scratch));
  return status;
}

Status H5Store::ReadDense(size_t i, const Region& box, void* out, CpuOptions o) const {
  const TensorRecord& t = records_[i];
  const StoredTensor& st = stored_[i];
  const Grid g = Grid::Make(t.shape, st.chunk);
  if (box.Count() == 0) return Status::Ok();
  uint64_t b_ext[kMaxRank];
  for (int d = 0; d < g.rank; ++d) b_ext[d] = box.stop[d] - box.start[d];
  if (!g.chunked()) {
    ChunkScratch scratch;
    const ChunkSink sink{static_cast<uint8_t*>(out), box.start, b_ext, box.start, box.stop};
    SEEDSTORE_ASSIGN_OR_RETURN(const ChunkWhere w, ChunksOf(i));
    return LoadChunk(path_, t, st, w, fd_, g, 0, checksums_[i][0], sink, scratch);
  }
  // The chunks intersecting the box; each is decoded straight into its part of `out`.
  return ForEachChunkIn(
      i, box, o,
      [&](const ChunkWhere& w, uint64_t j, const uint64_t* is, const uint64_t* ie, ChunkScratch& s,
          int) {
        const ChunkSink sink{static_cast<uint8_t*>(out), box.start, b_ext, is, ie};
        return LoadChunk(path_, t, st, w, fd_, g, j, checksums_[i][j], sink, s);
      });
}

Result<Fingerprint> H5Store::FingerprintRegion(size_t i, const Region& r, CpuOptions o) const {
  if (i >= records_.size())
    return InvalidArgument("tensor index " + std::to_string(i) + " out of range");
  const TensorRecord& t = records_[i];
  if (t.lazy) return t.lazy->FingerprintRegion(r, o);
  SEEDSTORE_RETURN_IF_ERROR(damage_[i]);
  SEEDSTORE_RETURN_IF_ERROR(CheckRegionIn(t, r));
  const StoredTensor& st = stored_[i];
  const Grid g = Grid::Make(t.shape, st.chunk);
  if (!g.chunked()) return Catalog::FingerprintRegion(i, r, o);  // one small contiguous dataset
  const std::vector<Region> boxes =
      r.flat ? FlatRangeToBoxes(t.shape, r.begin, r.end) : std::vector<Region>{r};
  const int threads = std::max(1, ThreadCount(o.threads, g.num));
  std::vector<std::vector<uint8_t>> bufs(threads);
  std::vector<Fingerprint> parts(threads);
  const size_t es = DTypeSize(t.dtype);
  for (const Region& box : boxes) {
    if (box.Count() == 0) continue;
    // Each intersecting chunk's part of the box is decoded packed into the thread's buffer
    // (L2-sized, reused) and hashed there: no buffer of the region's size.
    SEEDSTORE_RETURN_IF_ERROR(
        ForEachChunkIn(i, box, o,
                       [&](const ChunkWhere& w, uint64_t j, const uint64_t* is, const uint64_t* ie,
                           ChunkScratch& s, int th) -> Status {
                         Region part = box;
                         uint64_t ext[kMaxRank];
                         for (int d = 0; d < g.rank; ++d) {
                           part.start[d] = is[d];
                           part.stop[d] = ie[d];
                           ext[d] = ie[d] - is[d];
                         }
                         bufs[th].resize(part.Count() * es);
                         const ChunkSink sink{bufs[th].data(), is, ext, is, ie};
                         SEEDSTORE_RETURN_IF_ERROR(
                             LoadChunk(path_, t, st, w, fd_, g, j, checksums_[i][j], sink, s));
                         parts[th].Add(FingerprintOf(t, part, bufs[th].data(), CpuOptions{1}));
                         return Status::Ok();
                       }));
  }
  Fingerprint f;
  for (const Fingerprint& p : parts) f.Add(p);
  return f;
}

void H5Store::VerifyReport::FinishOk(const std::vector<TensorRecord>& records) {
  ok.assign(complete.begin(), complete.end());
  ok.resize(records.size(), false);
  std::unordered_map<std::string_view, size_t> index;  // a badly damaged store: many problems
  for (size_t i = 0; i < records.size(); ++i) index.emplace(records[i].name, i);
  for (const Problem& p : problems)
    if (auto it = index.find(p.tensor); it != index.end()) ok[it->second] = false;
}

H5Store::VerifyReport H5Store::Verify(CpuOptions o, std::function<void(uint64_t)> progress) const {
  std::mutex mu;
  auto report = [&](uint64_t n) {
    if (!progress) return;
    std::lock_guard<std::mutex> l(mu);
    progress(n);
  };
  const size_t n = records_.size();
  std::vector<std::vector<Problem>> problems(n);  // per tensor; chunk problems by chunk
  std::vector<Fingerprint> totals(n);
  std::vector<bool> checked(n, false);  // recomputed (its chunks read), however they compared
  uint64_t chunks = 0, bytes = 0;
  // Dense tensors go in batches of consecutive ones, every chunk of a batch in one parallel
  // pass: a file of many one-chunk tensors (a rank file of a save over many ranks) keeps every
  // thread busy, and at most kBatchDatasets datasets are open at once. Pieces packed into one
  // cell set share its dataset, and a piece whose chunks were located at open holds none: a
  // rank file of such pieces is one pass.
  constexpr size_t kBatchDatasets = 64;
  for (size_t i = 0; i < n;) {
    std::vector<size_t> batch;
    std::vector<ChunkWhere> where;
    std::vector<Grid> grids;
    std::vector<uint64_t> first{0};  // batch[k]'s chunks are items first[k] .. first[k + 1] - 1
    std::set<const Hid*> open_datasets;
    for (; i < n && open_datasets.size() < kBatchDatasets; ++i) {
      const TensorRecord& t = records_[i];
      if (t.lazy) {
        auto f = t.lazy->FingerprintWhole(o);
        if (!f.ok()) {
          problems[i].push_back({t.name, -1, f.status()});
          continue;
        }
        totals[i] = *f;
        checked[i] = true;
        report(t.NumBytes());
        continue;
      }
      if (!damage_[i].ok()) {
        problems[i].push_back({t.name, -1, damage_[i]});
        continue;
      }
      auto ds = ChunksOf(i);
      if (!ds.ok()) {
        problems[i].push_back({t.name, -1, ds.status()});
        continue;
      }
      batch.push_back(i);
      if (ds->dataset) open_datasets.insert(ds->dataset.get());
      where.push_back(std::move(*ds));
      grids.push_back(Grid::Make(t.shape, stored_[i].chunk));
      first.push_back(first.back() + grids.back().num);
    }
    if (batch.empty()) continue;
    const int threads = ThreadCount(o.threads, first.back());
    std::vector<int> hints(batch.size());
    for (size_t k = 0; k < batch.size(); ++k)
      hints[k] = HintFd(grids[k].ChunkElems() * DTypeSize(records_[batch[k]].dtype));
    std::vector<std::unique_ptr<ChunkScratch>> scratch = ReadScratch().Take(threads);
    std::vector<std::vector<uint8_t>> bufs(threads);
    std::vector<Fingerprint> parts(batch.size() * threads);
    // Progress goes out in steps of at least kProgressStep bytes per thread (a lock per chunk
    // was most of the time of a rank file of many one-chunk pieces).
    constexpr uint64_t kProgressStep = 8u << 20;
    std::vector<uint64_t> unreported(threads, 0);
    (void)ParallelFor(first.back(), threads, true, [&](uint64_t item, int th) -> Status {
      const size_t k = std::upper_bound(first.begin(), first.end(), item) - first.begin() - 1;
      const uint64_t j = item - first[k];
      const size_t ti = batch[k];
      const TensorRecord& t = records_[ti];
      const Grid& g = grids[k];
      // The chunk clipped to the tensor, decoded packed into bufs[th] and fingerprinted.
      const Region box = g.Box(j);
      PrefetchChunk(hints[k], where[k], g, j + kPrefetchAhead * threads);
      const ChunkInfo* info = info_[ti].empty() ? nullptr : &info_[ti][j];
      Status s = DecodeChunk(where[k], ti, j, &bufs[th], *scratch[th], true, nullptr);
      if (s.ok() && t.dtype == DType::kBool) {  // docs/FORMAT.md 4.2: bool bytes are 0 or 1
        const auto* bad = std::find_if(bufs[th].data(), bufs[th].data() + bufs[th].size(),
                                       [](uint8_t b) { return b > 1; });
        if (bad != bufs[th].data() + bufs[th].size())
          s = ChunkError(path_, t, g, j,
                         "bool element " + std::to_string(bad - bufs[th].data()) +
                             " of the chunk holds byte " + std::to_string(*bad) +
                             " (a bool is stored as 0 or 1; readers disagree on others)");
      }
      const Fingerprint f =
          s.ok() ? FingerprintOf(t, box, bufs[th].data(), CpuOptions{1}) : Fingerprint{};
      if (s.ok() && info && f != info->fingerprint)
        s = StoreStatus(StoreError::kFingerprintMismatch,
                        "file '" + path_ + "' tensor '" + t.name + "' chunk " + std::to_string(j) +
                            ": chunk-info fingerprint " + FingerprintHex(info->fingerprint) +
                            ", recomputed " + FingerprintHex(f));
      if (!s.ok()) {
        std::lock_guard<std::mutex> l(mu);
        problems[ti].push_back({t.name, static_cast<int64_t>(j), s});
        return s;
      }
      parts[k * threads + th].Add(f);
      unreported[th] += box.Count() * DTypeSize(t.dtype);
      if (unreported[th] >= kProgressStep) {
        report(unreported[th]);
        unreported[th] = 0;
      }
      return Status::Ok();
    });
    for (const uint64_t b : unreported)
      if (b) report(b);
    ReadScratch().Return(std::move(scratch));
    for (size_t k = 0; k < batch.size(); ++k) {
      const size_t ti = batch[k];
      for (int th = 0; th < threads; ++th) totals[ti].Add(parts[k * threads + th]);
      std::sort(problems[ti].begin(), problems[ti].end(),
                [](const Problem& a, const Problem& b) { return a.chunk < b.chunk; });
      checked[ti] = true;
      chunks += grids[k].num;
      bytes += records_[ti].NumBytes();
    }
  }
  VerifyReport rep;
  rep.tensors = n;
  rep.chunks = chunks;
  rep.bytes = bytes;
  for (size_t i = 0; i < n; ++i) {
    const TensorRecord& t = records_[i];
    const bool chunk_problem = !problems[i].empty();
    for (Problem& p : problems[i]) rep.problems.push_back(std::move(p));
    rep.fingerprints.push_back(checked[i] ? totals[i] : Fingerprint{});
    rep.complete.push_back(checked[i] && !chunk_problem);
    if (checked[i] && !chunk_problem && t.fingerprint && *t.fingerprint != totals[i])
      rep.problems.push_back(
          {t.name, -1,
           StoreStatus(StoreError::kFingerprintMismatch,
                       "file '" + path_ + "' tensor '" + t.name + "': recorded fingerprint " +
                           FingerprintHex(*t.fingerprint) + ", recomputed " +
                           FingerprintHex(totals[i]))});
  }
  rep.FinishOk(records_);
  return rep;
}

// ---- StoreWriter ---------------------------------------------------------------------------

}  // namespace seedstore
