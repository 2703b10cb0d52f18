#include "io/h5store.h"

#include <hdf5.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_c_literalCompressionMode
#include <zstd.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <unordered_map>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "gen/checksum.h"
#include "io/atomic_file.h"
#include "io/h5_util.h"
#include "store/json_text.h"

namespace seedstore {
namespace {

using json = nlohmann::json;

// ---- HDF5 plumbing -----------------------------------------------------------------------

// All HDF5 calls of this process go through one lock: the serial library is not reentrant in
// general, and we want the chunk codecs (our threads) to run outside of it.
std::recursive_mutex& H5Mutex() {
  static std::recursive_mutex m;
  return m;
}

herr_t WalkError(unsigned, const H5E_error2_t* e, void* data) {
  auto* s = static_cast<std::string*>(data);
  if (!s->empty()) *s += "; ";
  *s += e->func_name ? e->func_name : "?";
  *s += ": ";
  *s += e->desc ? e->desc : "";
  return 0;
}

}  // namespace

// The HDF5 error stack of this thread as one line, then cleared. A system call's failure that
// HDF5's file driver reports ("... error message = 'No space left on device' ...") leads it.
std::string H5ErrorText() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, WalkError, &s);
  H5Eclear2(H5E_DEFAULT);
  if (s.empty()) return "unknown HDF5 error";
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  const std::string key = "error message = '";
  if (const size_t at = s.find(key); at != std::string::npos)
    if (const size_t end = s.find('\'', at + key.size()); end != std::string::npos)
      return s.substr(at + key.size(), end - at - key.size()) + ": " + s;
  return s;
}

namespace {

void InitH5() {
  static std::once_flag once;
  std::call_once(once, [] {
    H5open();
    RegisterZstdFilter();
  });
  // The error stack (and its automatic printing) is per thread in thread-safe builds.
  thread_local bool quiet = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)quiet;
}

// Holds the HDF5 lock and silences this thread's error printing.
struct H5Guard {
  std::lock_guard<std::recursive_mutex> lock{H5Mutex()};
  H5Guard() { InitH5(); }
};

// One macro per foreign API (house style H3): adds file:line and HDF5's own message.
#define SEEDSTORE_H5_ERROR(what)                                                         \
  ::seedstore::IoError(std::string(what) + " [" + __FILE__ + ":" + std::to_string(__LINE__) + \
                       "]: " + H5ErrorText())

// An owned HDF5 identifier.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Hid& operator=(Hid&& o) noexcept {
    Reset();
    id_ = o.id_;
    close_ = o.close_;
    o.id_ = -1;
    return *this;
  }
  ~Hid() { Reset(); }
  void Reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  hid_t release() {
    hid_t t = id_;
    id_ = -1;
    return t;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// ---- zstd filter for the HDF5 pipeline (the HDF5 Zstandard plugin's encoding) ------------

size_t ZstdFilter(unsigned flags, size_t cd_nelmts, const unsigned cd_values[], size_t nbytes,
                  size_t* buf_size, void** buf) {
  if (flags & H5Z_FLAG_REVERSE) {
    const unsigned long long n = ZSTD_getFrameContentSize(*buf, nbytes);
    if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN || n == 0) return 0;
    void* out = H5allocate_memory(n, false);
    if (!out) return 0;
    const size_t r = ZSTD_decompress(out, n, *buf, nbytes);
    if (ZSTD_isError(r) || r != n) {
      H5free_memory(out);
      return 0;
    }
    H5free_memory(*buf);
    *buf = out;
    *buf_size = n;
    return n;
  }
  int level = cd_nelmts > 0 ? static_cast<int>(cd_values[0]) : ZSTD_CLEVEL_DEFAULT;
  level = std::clamp(level, 1, ZSTD_maxCLevel());
  const size_t bound = ZSTD_compressBound(nbytes);
  void* out = H5allocate_memory(bound, false);
  if (!out) return 0;
  const size_t r = ZSTD_compress(out, bound, *buf, nbytes, level);
  if (ZSTD_isError(r)) {
    H5free_memory(out);
    return 0;
  }
  H5free_memory(*buf);
  *buf = out;
  *buf_size = bound;
  return r;
}

// ---- names, types, attributes --------------------------------------------------------------

// The HDF5 file type of a dtype (bfloat16 as uint16, bool as uint8: see seedstore.dtype).
Hid StorageType(DType d) {
  switch (d) {
    case DType::kF32: return Hid(H5Tcopy(H5T_IEEE_F32LE), H5Tclose);
    case DType::kF64: return Hid(H5Tcopy(H5T_IEEE_F64LE), H5Tclose);
    case DType::kF16: {
      // IEEE binary16 as h5py defines it (numpy float16).
      hid_t t = H5Tcopy(H5T_IEEE_F32LE);
      H5Tset_fields(t, 15, 10, 5, 0, 10);
      H5Tset_size(t, 2);
      H5Tset_ebias(t, 15);
      return Hid(t, H5Tclose);
    }
    case DType::kBF16: case DType::kU16: return Hid(H5Tcopy(H5T_STD_U16LE), H5Tclose);
    case DType::kU8: case DType::kBool: return Hid(H5Tcopy(H5T_STD_U8LE), H5Tclose);
    case DType::kU32: return Hid(H5Tcopy(H5T_STD_U32LE), H5Tclose);
    case DType::kU64: return Hid(H5Tcopy(H5T_STD_U64LE), H5Tclose);
    case DType::kI8: return Hid(H5Tcopy(H5T_STD_I8LE), H5Tclose);
    case DType::kI16: return Hid(H5Tcopy(H5T_STD_I16LE), H5Tclose);
    case DType::kI32: return Hid(H5Tcopy(H5T_STD_I32LE), H5Tclose);
    case DType::kI64: return Hid(H5Tcopy(H5T_STD_I64LE), H5Tclose);
  }
  return Hid();
}

// `path` ("/group/name") and its group are hard links: objects stored in this file. Chunks are
// read at the addresses HDF5 reports, from this file's descriptor, so an external link (whose
// chunks lie in another file) or a soft link would be read wrong; both are refused (bad-layout).
Status InThisFile(hid_t f, const std::string& path, const std::string& where) {
  for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    const std::string p = path.substr(0, end);
    H5L_info_t info;
    if (H5Lget_info(f, p.c_str(), &info, H5P_DEFAULT) < 0)
      return SEEDSTORE_H5_ERROR(where + ": reading the link '" + p + "'");
    if (info.type != H5L_TYPE_HARD)
      return StoreStatus(StoreError::kBadLayout,
                         where + ": '" + p + "' is " + (info.type == H5L_TYPE_EXTERNAL ? "an external" : "a soft") +
                             " link; seedstore reads only objects stored in the file itself");
    if (end == std::string::npos) return Status::Ok();
  }
}

// Whether an HDF5 type stores `d` bit for bit as seedstore reads it: class, size, byte order
// and sign, and every bit in use -- an IEEE float's sign, exponent and mantissa fields and
// bias (a 2-byte float with 8 exponent bits is not float16), an integer's full precision at
// offset 0 (a 16-bit integer inside 4 bytes is not an int32).
bool TypeMatches(hid_t t, DType d) {
  const H5T_class_t c = H5Tget_class(t);
  const size_t size = static_cast<size_t>(DTypeSize(d));
  if (H5Tget_size(t) != size) return false;
  if (H5Tget_order(t) != H5T_ORDER_LE && size > 1) return false;
  if (H5Tget_precision(t) != 8 * size || H5Tget_offset(t) != 0) return false;
  if (c == H5T_FLOAT) {
    // (sign position, exponent position and bits, mantissa position and bits, bias) of IEEE.
    struct Ieee { size_t spos, epos, esize, mpos, msize, ebias; };
    Ieee want;
    switch (d) {
      case DType::kF16: want = {15, 10, 5, 0, 10, 15}; break;
      case DType::kF32: want = {31, 23, 8, 0, 23, 127}; break;
      case DType::kF64: want = {63, 52, 11, 0, 52, 1023}; break;
      default: return false;
    }
    Ieee got;
    if (H5Tget_fields(t, &got.spos, &got.epos, &got.esize, &got.mpos, &got.msize) < 0) return false;
    got.ebias = H5Tget_ebias(t);
    return got.spos == want.spos && got.epos == want.epos && got.esize == want.esize &&
           got.mpos == want.mpos && got.msize == want.msize && got.ebias == want.ebias;
  }
  switch (d) {
    case DType::kF32: case DType::kF64: case DType::kF16: return false;
    case DType::kBF16: case DType::kBool: case DType::kU8: case DType::kU16: case DType::kU32:
    case DType::kU64:
      return c == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_NONE;
    default: return c == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_2;
  }
}

// A checksum or chunk-info table's own hash (docs/FORMAT.md 4.3): XXH3-64 of its entries as
// little-endian bytes, in attribute seedstore.xxh3 of the table.
constexpr const char* kTableHashAttr = "seedstore.xxh3";
uint64_t TableHash(const std::vector<uint64_t>& entries) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "tables are hashed as stored (little-endian)");
  return Checksum64(entries.data(), entries.size() * sizeof(uint64_t));
}

Status WriteU64Attr(hid_t obj, const char* name, const std::vector<uint64_t>& v, bool scalar);
Result<std::vector<uint64_t>> ReadU64Attr(hid_t obj, const char* name, const std::string& where);

// Checks a table read at open against its hash attribute (table-corrupt); tables written
// before the attribute existed have none and pass.
Status CheckTableHash(hid_t table, const std::vector<uint64_t>& entries, const std::string& what) {
  const htri_t has = H5Aexists(table, kTableHashAttr);
  if (has < 0) return StoreStatus(StoreError::kTableCorrupt, what + ": its attributes cannot be read");
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

Status WriteU64Attr(hid_t obj, const char* name, const std::vector<uint64_t>& v, bool scalar) {
  const hsize_t n = v.size();
  Hid space(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr), H5Sclose);
  Hid a(H5Acreate2(obj, name, H5T_STD_U64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.ok() || H5Awrite(a.get(), H5T_NATIVE_UINT64, v.data()) < 0)
    return SEEDSTORE_H5_ERROR(std::string("writing attribute '") + name + "'");
  return Status::Ok();
}

Status WriteI32Attr(hid_t obj, const char* name, int32_t v) {
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a(H5Acreate2(obj, name, H5T_STD_I32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.ok() || H5Awrite(a.get(), H5T_NATIVE_INT32, &v) < 0)
    return SEEDSTORE_H5_ERROR(std::string("writing attribute '") + name + "'");
  return Status::Ok();
}

// Opens an attribute; missing-attribute when absent. `where` names the object.
Result<Hid> OpenAttr(hid_t obj, const char* name, const std::string& where) {
  const htri_t e = H5Aexists(obj, name);
  if (e < 0) return SEEDSTORE_H5_ERROR(where + ": checking attribute '" + name + "'");
  if (e == 0)
    return StoreStatus(StoreError::kMissingAttribute, where + ": attribute '" + name + "' is missing");
  Hid a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.ok()) return SEEDSTORE_H5_ERROR(where + ": opening attribute '" + name + "'");
  return a;
}

Result<std::vector<uint64_t>> ReadU64Attr(hid_t obj, const char* name, const std::string& where) {
  SEEDSTORE_ASSIGN_OR_RETURN(Hid a, OpenAttr(obj, name, where));
  Hid ft(H5Aget_type(a.get()), H5Tclose);
  Hid sp(H5Aget_space(a.get()), H5Sclose);
  if (H5Tget_class(ft.get()) != H5T_INTEGER)
    return Corrupt(where + ": attribute '" + name + "' is not an integer");
  const hssize_t n = H5Sget_simple_extent_npoints(sp.get());
  if (n < 0 || n > 1024) return Corrupt(where + ": attribute '" + name + "' has a bad size");
  std::vector<uint64_t> v(static_cast<size_t>(n));
  if (n > 0 && H5Aread(a.get(), H5T_NATIVE_UINT64, v.data()) < 0)
    return SEEDSTORE_H5_ERROR(where + ": reading attribute '" + name + "'");
  return v;
}

// ---- chunk geometry -----------------------------------------------------------------------

// The chunk grid of a dense tensor. Contiguous datasets (rank 0 or an empty dim) have one
// "chunk": the whole data.
struct Grid {
  int rank = 0;
  std::vector<uint64_t> shape, chunk, count;  // chunk empty: contiguous
  uint64_t num = 1;

  bool chunked() const { return !chunk.empty(); }
  uint64_t ChunkElems() const {
    uint64_t n = 1;
    if (chunked()) for (uint64_t c : chunk) n *= c;
    else for (uint64_t s : shape) n *= s;
    return n;
  }
  void Coords(uint64_t j, uint64_t* c) const {  // chunk-grid coordinates, row-major
    for (int d = rank - 1; d >= 0; --d) {
      c[d] = j % count[d];
      j /= count[d];
    }
  }
  uint64_t Linear(const uint64_t* c) const {
    uint64_t j = 0;
    for (int d = 0; d < rank; ++d) j = j * count[d] + c[d];
    return j;
  }
  // The chunk's box clipped to the tensor.
  Region Box(uint64_t j) const {
    Region r = WholeRegion(rank, shape.data());
    if (!chunked()) return r;
    uint64_t c[kMaxRank];
    Coords(j, c);
    for (int d = 0; d < rank; ++d) {
      r.start[d] = c[d] * chunk[d];
      r.stop[d] = std::min(shape[d], r.start[d] + chunk[d]);
    }
    return r;
  }
  static Grid Make(const std::vector<uint64_t>& shape, std::vector<uint64_t> chunk) {
    Grid g;
    g.rank = static_cast<int>(shape.size());
    g.shape = shape;
    g.chunk = std::move(chunk);
    g.num = 1;
    if (g.chunked()) {
      for (int d = 0; d < g.rank; ++d) {
        g.count.push_back((shape[d] + g.chunk[d] - 1) / g.chunk[d]);
        g.num *= g.count.back();
      }
    }
    return g;
  }
};

// Writer's chunk-shape rule: start from the whole shape and halve (rounding up) the largest
// dim, outermost first among equals, until the chunk holds at most `target` bytes.
std::vector<uint64_t> ChooseChunk(const std::vector<uint64_t>& shape, int es, uint64_t target) {
  if (shape.empty()) return {};
  for (uint64_t s : shape)
    if (s == 0) return {};
  std::vector<uint64_t> c = shape;
  auto bytes = [&] {
    unsigned __int128 n = es;
    for (uint64_t x : c) n *= x;
    return n;
  };
  // HDF5 limits a chunk to < 4 GiB and each chunk dim to < 2^32.
  for (auto& x : c) x = std::min<uint64_t>(x, 0xFFFFFFFFull);
  target = std::clamp<uint64_t>(target, 1, 1ull << 31);
  while (bytes() > target) {
    size_t best = 0;
    for (size_t d = 1; d < c.size(); ++d)
      if (c[d] > c[best]) best = d;
    if (c[best] == 1) break;
    c[best] = (c[best] + 1) / 2;
  }
  return c;
}

// Copies the intersection `in` (tensor coordinates) from a buffer holding box `s` (row-major,
// extents s_ext) into a buffer holding box `d`.
void CopyIntersection(const uint8_t* src, const uint64_t* s_start, const uint64_t* s_ext,
                      uint8_t* dst, const uint64_t* d_start, const uint64_t* d_ext,
                      const uint64_t* i_start, const uint64_t* i_stop, int rank, size_t es) {
  if (rank == 0) {
    std::memcpy(dst, src, es);
    return;
  }
  for (int k = 0; k < rank; ++k)
    if (i_stop[k] <= i_start[k]) return;
  const size_t run = (i_stop[rank - 1] - i_start[rank - 1]) * es;
  uint64_t idx[kMaxRank];
  for (int k = 0; k < rank; ++k) idx[k] = i_start[k];
  for (;;) {
    uint64_t so = 0, doff = 0;
    for (int k = 0; k < rank; ++k) {
      so = so * s_ext[k] + (idx[k] - s_start[k]);
      doff = doff * d_ext[k] + (idx[k] - d_start[k]);
    }
    std::memcpy(dst + doff * es, src + so * es, run);
    int k = rank - 2;
    for (; k >= 0; --k) {
      if (++idx[k] < i_stop[k]) break;
      idx[k] = i_start[k];
    }
    if (k < 0) return;
  }
}

// HDF5's shuffle filter: byte j of element i goes to j * n + i; trailing bytes copied.
void Shuffle(const uint8_t* in, uint8_t* out, size_t nbytes, size_t es) {
  const size_t n = nbytes / es;
  if (es == 2) {
    for (size_t i = 0; i < n; ++i) {
      out[i] = in[2 * i];
      out[n + i] = in[2 * i + 1];
    }
  } else if (es == 4) {
    for (size_t i = 0; i < n; ++i) {
      out[i] = in[4 * i];
      out[n + i] = in[4 * i + 1];
      out[2 * n + i] = in[4 * i + 2];
      out[3 * n + i] = in[4 * i + 3];
    }
  } else {
    for (size_t j = 0; j < es; ++j)
      for (size_t i = 0; i < n; ++i) out[j * n + i] = in[i * es + j];
  }
  std::memcpy(out + n * es, in + n * es, nbytes - n * es);
}

struct ZstdCtx {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_DCtx* d = ZSTD_createDCtx();
  ~ZstdCtx() {
    ZSTD_freeCCtx(c);
    ZSTD_freeDCtx(d);
  }
};
ZstdCtx& ThreadZstd() {
  thread_local ZstdCtx z;
  return z;
}

// ---- chunk decoding ------------------------------------------------------------------------

}  // namespace

// Per-thread buffers of the chunk readers, reused between chunks and (H5Store's pool) reads.
struct ChunkScratch {
  std::vector<uint8_t> raw, tmp, chunk;  // stored bytes; intermediate stages; a whole chunk
  alignas(64) uint8_t block[16384];      // one L1-sized block of decoded bytes
  Checksum64Stream hash;
};

namespace {

// Where a decoded chunk goes: the elements of the chunk inside the intersection [is, ie)
// (tensor coordinates) are copied into `dst`, a row-major buffer holding the box that starts
// at `d_start` with extents `d_ext`.
struct ChunkSink {
  uint8_t* dst;
  const uint64_t* d_start;
  const uint64_t* d_ext;
  const uint64_t* is;
  const uint64_t* ie;
};

// memcpy for a run of decoded bytes into the caller's buffer. Long runs use non-temporal
// stores on x86-64 (SSE2, always present): the destination is usually far larger than the
// caches and not read again soon, and streaming stores skip reading each line before writing
// it. Callers end with StreamFence() before the data may be read by another thread.
void CopyOut(uint8_t* dst, const uint8_t* src, size_t n) {
#if defined(__x86_64__)
  if (n >= 1024) {
    const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
    std::memcpy(dst, src, head);
    dst += head, src += head, n -= head;
    size_t k = 0;
    for (; k + 64 <= n; k += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 48), d);
    }
    std::memcpy(dst + k, src + k, n - k);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

void StreamFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

// Copies decoded chunk elements [e0, e1) (row-major over the chunk's extents `cext`, chunk
// origin `cs`), held at `src`, to their places in the sink.
void ScatterElems(const uint8_t* src, uint64_t e0, uint64_t e1, int rank, const uint64_t* cs,
                  const uint64_t* cext, size_t es, const ChunkSink& k) {
  if (rank == 0) {
    std::memcpy(k.dst, src, es);
    return;
  }
  const int last = rank - 1;
  const uint64_t row_len = cext[last];
  // Columns of a row inside the intersection, chunk-relative.
  const uint64_t c_lo = k.is[last] - cs[last], c_hi = k.ie[last] - cs[last];
  for (uint64_t r = e0 / row_len; r * row_len < e1; ++r) {
    // The row's coordinates in the leading dims; skip rows outside the intersection.
    uint64_t doff = 0, q = r, idx[kMaxRank];
    bool inside = true;
    for (int d = last - 1; d >= 0; --d) {
      idx[d] = cs[d] + q % cext[d];
      q /= cext[d];
      inside = inside && idx[d] >= k.is[d] && idx[d] < k.ie[d];
    }
    if (!inside) continue;
    for (int d = 0; d < last; ++d) doff = doff * k.d_ext[d] + (idx[d] - k.d_start[d]);
    const uint64_t a = std::max(std::max(r * row_len, e0) - r * row_len, c_lo);
    const uint64_t b = std::min(std::min((r + 1) * row_len, e1) - r * row_len, c_hi);
    if (a >= b) continue;
    doff = doff * k.d_ext[last] + (cs[last] + a - k.d_start[last]);
    CopyOut(k.dst + doff * es, src + (r * row_len + a - e0) * es, (b - a) * es);
  }
}

// Unshuffles elements [e0, e1) of an HDF5-shuffled buffer of n elements into `out`.
void UnshuffleRange(const uint8_t* in, uint64_t n, uint64_t e0, uint64_t e1, size_t es, uint8_t* out) {
  const uint64_t m = e1 - e0;
  if (es == 2) {
    const uint8_t *a = in + e0, *b = in + n + e0;
    for (uint64_t i = 0; i < m; ++i) {
      out[2 * i] = a[i];
      out[2 * i + 1] = b[i];
    }
  } else if (es == 4) {
    const uint8_t *a = in + e0, *b = in + n + e0, *c = in + 2 * n + e0, *d = in + 3 * n + e0;
    for (uint64_t i = 0; i < m; ++i) {
      out[4 * i] = a[i];
      out[4 * i + 1] = b[i];
      out[4 * i + 2] = c[i];
      out[4 * i + 3] = d[i];
    }
  } else {
    for (size_t j = 0; j < es; ++j)
      for (uint64_t i = 0; i < m; ++i) out[i * es + j] = in[j * n + e0 + i];
  }
}

// HDF5's unshuffle of a whole buffer (trailing bytes copied).
void Unshuffle(const uint8_t* in, uint8_t* out, size_t nbytes, size_t es) {
  const size_t n = nbytes / es;
  UnshuffleRange(in, n, 0, n, es, out);
  std::memcpy(out + n * es, in + n * es, nbytes - n * es);
}

// The last decoding pass, fused: unshuffles (when `shuffled`) the decoded chunk at `src`
// (`bytes` bytes, row-major over extents `cext`) one L1-sized block at a time, hashes each
// block with streaming XXH3-64 (gen/checksum.h; equal to the one-shot hash of the whole
// chunk) and scatters it into the sink while it is in L1. Returns the chunk's XXH3-64.
uint64_t EmitChunk(const uint8_t* src, size_t bytes, size_t es, bool shuffled, int rank,
                   const uint64_t* cs, const uint64_t* cext, const ChunkSink& k, ChunkScratch& s) {
  s.hash.Reset();
  const uint64_t n = bytes / es, step = sizeof(s.block) / es;
  for (uint64_t e0 = 0; e0 < n; e0 += step) {
    const uint64_t e1 = std::min(n, e0 + step);
    const uint8_t* blk = src + e0 * es;
    if (shuffled) {
      UnshuffleRange(src, n, e0, e1, es, s.block);
      blk = s.block;
    }
    s.hash.Update(blk, (e1 - e0) * es);
    ScatterElems(blk, e0, e1, rank, cs, cext, es, k);
  }
  StreamFence();
  return s.hash.Digest();
}

// One zstd frame with its content size (the HDF5 Zstandard plugin's chunk encoding). At level
// 1 the match finder is narrowed (hashLog 6, minMatch 7): shuffled weights are mostly
// literals, and spurious short matches in the mantissa bytes cost time and ratio (bf16 N(0,
// 0.02): 0.5 -> 1.1 GB/s per core, ratio 1.69 -> 1.73). It also skips ahead faster where it
// finds no match (targetLength 8, zstd's "acceleration"), which alone would turn literal
// compression off, so that is forced back on: +8-10% on a shuffled bf16 or f32 chunk at the
// same ratio; long runs of exact repeats (an int64 arange) compress less well (811x -> 214x).
// Any zstd decoder reads the frames.
size_t CompressChunk(void* dst, size_t cap, const void* src, size_t n, int level) {
  ZSTD_CCtx* cc = ThreadZstd().c;
  ZSTD_CCtx_reset(cc, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, level);
  if (level == 1) {
    ZSTD_CCtx_setParameter(cc, ZSTD_c_hashLog, 6);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_minMatch, 7);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_targetLength, 8);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_literalCompressionMode, ZSTD_ps_enable);
  }
  ZSTD_CCtx_setParameter(cc, ZSTD_c_contentSizeFlag, 1);
  return ZSTD_compress2(cc, dst, cap, src, n);
}

}  // namespace

int ThreadCount(int requested, uint64_t work_items) {
  int t = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
  t = std::max(1, std::min(t, kMaxCpuThreads));
  return static_cast<int>(std::min<uint64_t>(t, std::max<uint64_t>(work_items, 1)));
}

namespace {

// ParallelFor (no `commit`: items are independent; slot = thread) and ParallelForInOrder.
Status RunItems(uint64_t n, int threads, bool keep_going, const std::function<Status(uint64_t, int)>& work,
                const std::function<Status(uint64_t, int)>* commit) {
  const int per_thread = commit ? InOrderSlots(threads) / std::max(threads, 1) : 1;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable freed;
  // Under mu, for ParallelForInOrder: items 0..committed-1 are committed; ready[j] is the slot
  // of finished item j, uncommitted; busy[slot]: the slot holds an uncommitted item.
  uint64_t committed = 0;
  bool committing = false;
  std::map<uint64_t, int> ready;
  std::vector<char> busy(static_cast<size_t>(std::max(threads, 1)) * per_thread, 0);
  Status first;
  auto fail = [&](Status st) {  // under mu
    if (first.ok()) first = std::move(st);
    failed = true;
  };
  auto guarded = [](const std::function<Status(uint64_t, int)>& g, uint64_t j, int slot) {
    try {  // an exception must not leave a worker thread: that is std::terminate
      return g(j, slot);
    } catch (const std::bad_alloc&) {
      return Status(Code::kInternal, "out of memory");
    } catch (const std::exception& e) {
      return Internal(e.what());
    }
  };
  auto run = [&](int t) {
    for (int slot = t * per_thread;;) {
      if (commit) {  // a slot's item must be committed before the slot is used again
        std::unique_lock<std::mutex> l(mu);
        // The slot used last when it is free (its buffers are warm in the cache), else another.
        freed.wait(l, [&] {
          for (int k = 0; k < per_thread && busy[slot]; ++k)
            slot = t * per_thread + (slot - t * per_thread + 1) % per_thread;
          return !busy[slot] || failed.load();
        });
      }
      if (failed.load() && !keep_going) return;
      const uint64_t j = next.fetch_add(1);
      if (j >= n) return;
      Status st = guarded(work, j, slot);
      if (!commit && st.ok()) continue;
      std::unique_lock<std::mutex> l(mu);
      if (!st.ok()) {
        fail(std::move(st));
        freed.notify_all();
        if (commit) return;
        continue;
      }
      busy[slot] = 1;
      ready[j] = slot;
      // Whoever finds the next item to commit ready commits it, and the ones ready after it:
      // one committer at a time, so commits run in item order. Progress: a thread waits only
      // for its own slot, holding no item in work, so the lowest uncommitted item is in work on
      // a thread that is not waiting, or ready -- and then being committed.
      while (!committing && !failed.load() && !ready.empty() && ready.begin()->first == committed) {
        const uint64_t c = committed;
        const int s = ready.begin()->second;
        ready.erase(ready.begin());
        committing = true;
        l.unlock();
        st = guarded(*commit, c, s);
        l.lock();
        committing = false;
        busy[s] = 0;
        ++committed;
        if (!st.ok()) fail(std::move(st));
        freed.notify_all();
      }
    }
  };
  if (threads <= 1) {
    run(0);
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(run, t);
    for (auto& th : pool) th.join();
  }
  return first;
}

}  // namespace

Status ParallelFor(uint64_t n, int threads, bool keep_going,
                   const std::function<Status(uint64_t, int)>& f) {
  return RunItems(n, threads, keep_going, f, nullptr);
}

int InOrderSlots(int threads) { return threads > 1 ? 2 * threads : 1; }

Status ParallelForInOrder(uint64_t n, int threads, const std::function<Status(uint64_t, int)>& work,
                          const std::function<Status(uint64_t, int)>& commit) {
  return RunItems(n, threads, false, work, &commit);
}

namespace {

const char* FilterName(int id) {
  switch (id) {
    case 1: return "deflate";
    case 2: return "shuffle";
    case 3: return "fletcher32";
    case 4: return "szip";
    case 5: return "nbit";
    case 6: return "scaleoffset";
    case 307: return "bzip2";
    case 32001: return "blosc";
    case 32004: return "lz4";
    case 32015: return "zstd";
    default: return "unknown";
  }
}

// A dense tensor's index record (docs/FORMAT.md 4.1).
json DenseRecordJson(const std::string& name, const std::vector<uint64_t>& shape, DType dtype,
                     const Fingerprint& fp, uint64_t stored_bytes, const std::optional<Region>& piece) {
  json rec = {{"name", name},   {"shape", shape},  {"dtype", DTypeName(dtype)},
              {"kind", "dense"}, {"fingerprint", FingerprintHex(fp)},
              {"stored_bytes", stored_bytes}};
  if (piece)
    rec["piece"] = {{"shape", std::vector<uint64_t>(piece->shape, piece->shape + piece->rank)},
                    {"region", RegionToJson(*piece)}};
  return rec;
}

json LazyRecordJson(const LazyTensor& l, const std::optional<Fingerprint>& fp) {
  json j = TensorSpecToJson(l.spec);
  j["kind"] = "lazy";
  j["key_words"] = {l.key.k0, l.key.k1};
  if (fp) j["fingerprint"] = FingerprintHex(*fp);
  return j;
}

}  // namespace

// ---- public helpers ------------------------------------------------------------------------

const char* StoreErrorName(StoreError e) {
  switch (e) {
    case StoreError::kNotHdf5: return "not-hdf5";
    case StoreError::kTruncated: return "truncated";
    case StoreError::kBadMagic: return "bad-magic";
    case StoreError::kUnsupportedVersion: return "unsupported-version";
    case StoreError::kMissingAttribute: return "missing-attribute";
    case StoreError::kMissingObject: return "missing-object";
    case StoreError::kBadIndex: return "bad-index";
    case StoreError::kShapeMismatch: return "shape-mismatch";
    case StoreError::kDtypeMismatch: return "dtype-mismatch";
    case StoreError::kUnknownFilter: return "unknown-filter";
    case StoreError::kChunkCorrupt: return "chunk-corrupt";
    case StoreError::kFingerprintMismatch: return "fingerprint-mismatch";
    case StoreError::kBadLayout: return "bad-layout";
    case StoreError::kTableCorrupt: return "table-corrupt";
  }
  return "?";
}

Status StoreStatus(StoreError e, const std::string& message) {
  const Code c = e == StoreError::kUnsupportedVersion || e == StoreError::kUnknownFilter
                     ? Code::kUnsupported
                     : Code::kCorrupt;
  return Status(c, std::string(StoreErrorName(e)) + ": " + message);
}

std::string EscapeH5Name(const std::string& name) {
  const bool dots = name.find_first_not_of('.') == std::string::npos;
  std::string out;
  for (char c : name) {
    if (c == '%') out += "%25";
    else if (c == '/') out += "%2F";
    else if (c == '.' && dots) out += "%2E";
    else out += c;
  }
  return out;
}

void RegisterZstdFilter() {
  static std::once_flag once;
  std::call_once(once, [] {
    static const H5Z_class2_t cls = {H5Z_CLASS_T_VERS, static_cast<H5Z_filter_t>(kH5FilterZstd),
                                     1, 1, "Zstandard (seedstore)", nullptr, nullptr,
                                     ZstdFilter};
    if (H5Zfilter_avail(kH5FilterZstd) <= 0) H5Zregister(&cls);
  });
}

bool LooksLikeHdf5(const std::string& path) {
  if (!NotARegularFile(path).empty()) return false;  // a pipe would block, and cannot seek
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  for (uint64_t off = 0; off < (1ull << 40); off = off ? off * 2 : 512) {
    unsigned char b[8];
    f.seekg(static_cast<std::streamoff>(off));
    if (!f.read(reinterpret_cast<char*>(b), 8)) return false;
    if (std::memcmp(b, sig, 8) == 0) return true;
  }
  return false;
}

Result<std::string> ReadStringAttr(int64_t obj, const char* name, const std::string& where) {
  SEEDSTORE_ASSIGN_OR_RETURN(Hid a, OpenAttr(obj, name, where));
  Hid ft(H5Aget_type(a.get()), H5Tclose);
  Hid sp(H5Aget_space(a.get()), H5Sclose);
  if (H5Tget_class(ft.get()) != H5T_STRING || H5Sget_simple_extent_npoints(sp.get()) != 1)
    return Corrupt(where + ": attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(ft.get()) > 0) {
    Hid mt(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mt.get(), H5T_VARIABLE);
    H5Tset_cset(mt.get(), H5Tget_cset(ft.get()));
    char* p = nullptr;
    if (H5Aread(a.get(), mt.get(), &p) < 0)
      return SEEDSTORE_H5_ERROR(where + ": reading attribute '" + name + "'");
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const size_t n = H5Tget_size(ft.get());
  std::string s(n, '\0');
  if (H5Aread(a.get(), ft.get(), s.data()) < 0)
    return SEEDSTORE_H5_ERROR(where + ": reading attribute '" + name + "'");
  s.resize(std::strlen(s.c_str()));
  return s;
}

Result<std::vector<uint64_t>> ReadU64ArrayAttr(int64_t obj, const char* name, const std::string& where) {
  H5Guard g;
  return ReadU64Attr(obj, name, where);
}

bool H5TypeStores(int64_t type, DType d) {
  H5Guard g;
  return TypeMatches(type, d);
}

std::unique_lock<std::recursive_mutex> LockH5() {
  std::unique_lock<std::recursive_mutex> l(H5Mutex());
  InitH5();
  return l;
}

void AbandonH5File(int64_t file) {
  if (file < 0) return;
#if defined(__linux__)
  Hid fapl(H5Fget_access_plist(file), H5Pclose);
  void* handle = nullptr;
  if (fapl.ok() && H5Pget_driver(fapl.get()) == H5FD_SEC2 &&
      H5Fget_vfd_handle(file, fapl.get(), &handle) >= 0 && handle != nullptr) {
    const int fd = *static_cast<int*>(handle);
    const int mem = ::memfd_create("seedstore-abandoned", MFD_CLOEXEC);
    if (mem >= 0 && ::dup2(mem, fd) >= 0) {  // HDF5's descriptor now names the memfd (close-on-exec kept off: HDF5's own)
      // A flush that failed before (H5Fflush of a full disk) leaves HDF5 1.10's metadata cache
      // with dirty entries and its flush list still on ("slist not empty"), and every later
      // flush -- H5Fclose's included -- then fails at its start ("slist already enabled?"):
      // the close fails, which frees the file but leaves its id, closed again at exit (SIGSEGV
      // in H5F__close_cb). This flush writes those entries to the memfd, where writing cannot
      // fail, and so turns the list off again; it reports that start as failed, but the
      // close after it succeeds. Never retry H5Fclose instead: a failed one already freed it.
      H5Fflush(file, H5F_SCOPE_LOCAL);
    }
    if (mem >= 0) ::close(mem);
  }
  H5ErrorText();
#endif
  H5Fclose(file);
  H5ErrorText();
}

std::string Hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016" PRIx64, v);
  return b;
}

int64_t UntimedCreationList(int64_t cls) {
  const hid_t p = H5Pcreate(cls);
  if (p >= 0 && H5Pset_obj_track_times(p, false) < 0) {
    H5Pclose(p);
    return -1;
  }
  return p;
}

bool FileIsDistributedMaster(int64_t file, const std::string& where) {
  // The root's attributes lie in its object header, which HDF5 checksums.
  auto role = H5Aexists(file, kRoleAttr) > 0 ? ReadStringAttr(file, kRoleAttr, where) : Result<std::string>("");
  const htri_t group = H5Lexists(file, "/distributed", H5P_DEFAULT);
  const bool yes = !role.ok() || *role == kMasterRole || group < 0 ||
                   (group > 0 && H5Lexists(file, kDistIndexPath, H5P_DEFAULT) != 0);
  H5ErrorText();  // what the probes left on HDF5's error stack
  return yes;
}

Status WriteStringAttr(int64_t obj, const char* name, const std::string& value) {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  const std::string v = value.empty() ? std::string(1, '\0') : value;
  H5Tset_size(type.get(), v.size());
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Hid space(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.ok() || H5Awrite(a.get(), type.get(), v.data()) < 0)
    return SEEDSTORE_H5_ERROR(std::string("writing attribute '") + name + "'");
  return Status::Ok();
}

// ---- H5Store -------------------------------------------------------------------------------

// A dataset access property list giving a dataset no raw-data chunk cache (made once; HDF5
// copies it into each dataset it opens).
hid_t NoChunkCache() {
  static const hid_t dapl = [] {
    const hid_t p = H5Pcreate(H5P_DATASET_ACCESS);
    H5Pset_chunk_cache(p, 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT);
    return p;
  }();
  return dapl;
}

// Chunk-decoding buffers (a chunk or two each), kept between reads and shared by every open
// store: a pool per store would keep two buffers per thread per open store -- 525 MB of them
// reading a 256-rank save whole.
static ScratchPool<ChunkScratch>& ReadScratch() {
  static ScratchPool<ChunkScratch>* pool = new ScratchPool<ChunkScratch>();  // never destroyed
  return *pool;
}

H5Store::~H5Store() {
  H5Guard g;
  open_.clear();  // the store's users are done: these are the last references
  if (file_ >= 0) H5Fclose(file_);
}

Result<H5Store::DatasetHandle> H5Store::Dataset(size_t i) const {
  H5Guard g;
  for (size_t k = 0; k < open_.size(); ++k)
    if (open_[k].first == i) {
      if (k + 1 != open_.size()) std::rotate(open_.begin() + k, open_.begin() + k + 1, open_.end());
      return open_.back().second;
    }
  const hid_t id = H5Dopen2(file_, stored_[i].dataset.c_str(), NoChunkCache());
  if (id < 0)
    return SEEDSTORE_H5_ERROR("file '" + path_ + "' tensor '" + records_[i].name + "': opening " +
                              stored_[i].dataset);
  DatasetHandle h(new int64_t(id), [](const int64_t* d) {
    H5Guard g2;
    H5Dclose(*d);
    delete d;
  });
  if (open_.size() == kOpenDatasets) open_.erase(open_.begin());
  open_.emplace_back(i, h);
  return h;
}

Result<ChunkWhere> H5Store::ChunksOf(size_t i) const {
  ChunkWhere w;
  if (fd_ >= 0 && i < located_.size() && !located_[i].empty()) {
    w.located = &located_[i];
    return w;
  }
  SEEDSTORE_ASSIGN_OR_RETURN(w.dataset, Dataset(i));
  return w;
}

// The kernel's readahead window for the device holding the file open as `fd`, in bytes (0
// when unknown): the backing device's read_ahead_kb in sysfs, found by the file's st_dev
// (a whole disk or a filesystem's own bdi under /sys/class/bdi, else a partition's disk).
static uint64_t KernelReadaheadBytes(int fd) {
  struct stat st;
  if (fd < 0 || ::fstat(fd, &st) != 0) return 0;
  const std::string dev = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  for (const std::string& p : {"/sys/class/bdi/" + dev + "/read_ahead_kb",
                               "/sys/dev/block/" + dev + "/../queue/read_ahead_kb"}) {
    std::ifstream in(p);
    uint64_t kb = 0;
    if (in >> kb) return kb << 10;
  }
  return 0;
}

// Where the chunk at grid origin `off` of chunked dataset `dset` is stored; size 0 when the
// chunk is missing. Takes the HDF5 lock.
static ChunkLoc LocateChunk(int64_t dset, const hsize_t* off) {
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

Result<std::unique_ptr<H5Store>> H5Store::Open(const std::string& path) {
  const std::string w = "file '" + path + "'";
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return OpenFailure(w, errno);
  if (S_ISDIR(st.st_mode)) return InvalidArgument(w + ": is a directory, not a store");
  if (!S_ISREG(st.st_mode))
    return InvalidArgument(w + ": is " + NotARegularFile(path) +
                           ", not a store: a store is read by seeking; give a regular file");
  if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd < 0)
    return OpenFailure(w, errno);
  else
    ::close(fd);
  if (!LooksLikeHdf5(path))
    return StoreStatus(StoreError::kNotHdf5, w + ": not an HDF5 file (no superblock signature)");
  H5Guard g;
  std::unique_ptr<H5Store> s(new H5Store());
  s->path_ = path;
  s->file_bytes_ = static_cast<uint64_t>(st.st_size);
  s->file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (s->file_ < 0) {
    const std::string e = H5ErrorText();
    if (e.find("truncated") != std::string::npos)
      return StoreStatus(StoreError::kTruncated, w + ": the file is truncated (" +
                                                     std::to_string(st.st_size) +
                                                     " bytes): " + e);
    return Corrupt(w + ": HDF5 cannot open it: " + e);
  }
  s->AttachDescriptor();
  const hid_t f = s->file_;
  // Root attributes: magic and version.
  SEEDSTORE_ASSIGN_OR_RETURN(std::string magic, ReadStringAttr(f, "seedstore.format", w));
  if (magic != "seedstore")
    return StoreStatus(StoreError::kBadMagic,
                       w + ": seedstore.format is '" + magic + "', expected 'seedstore'");
  SEEDSTORE_ASSIGN_OR_RETURN(std::vector<uint64_t> ver, ReadU64Attr(f, "seedstore.version", w));
  if (ver.size() != 1 || ver[0] != static_cast<uint64_t>(kStoreFormatVersion))
    return StoreStatus(StoreError::kUnsupportedVersion,
                       w + ": format version " + (ver.empty() ? "?" : std::to_string(ver[0])) +
                           " (this build reads version " + std::to_string(kStoreFormatVersion) + ")");
  // The index.
  if (H5Lexists(f, "/seedstore", H5P_DEFAULT) <= 0 ||
      H5Lexists(f, "/seedstore/index", H5P_DEFAULT) <= 0)
    return StoreStatus(StoreError::kMissingObject, w + ": dataset '/seedstore/index' is missing");
  SEEDSTORE_RETURN_IF_ERROR(InThisFile(f, "/seedstore/index", w));
  std::string text;
  {
    Hid d(H5Dopen2(f, "/seedstore/index", H5P_DEFAULT), H5Dclose);
    if (!d.ok()) return SEEDSTORE_H5_ERROR(w + ": opening /seedstore/index");
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
      return StoreStatus(StoreError::kBadIndex,
                         w + ": /seedstore/index checksum mismatch (stored " +
                             (sum.empty() ? "?" : Hex64(sum[0])) + ", computed " +
                             Hex64(computed) + ")");
  }
  json idx = ParseJson(text, nullptr);
  auto bad = [&](const std::string& m) { return StoreStatus(StoreError::kBadIndex, w + ": index " + m); };
  if (idx.is_discarded() || !idx.is_object()) return bad("is not a JSON object");
  // What the index says it is must agree with the file's attributes (checked above).
  if (idx.contains("format") && idx["format"] != "seedstore")
    return bad("field 'format' is " + JsonPreview(idx["format"]) + ", not \"seedstore\"");
  if (idx.contains("version") && idx["version"] != kStoreFormatVersion)
    return bad("field 'version' is " + JsonPreview(idx["version"]) + ", the file's is " +
               std::to_string(kStoreFormatVersion));
  if (!idx.contains("seed") || !idx["seed"].is_number_unsigned()) return bad("field 'seed' missing or not an unsigned integer");
  s->seed_ = idx["seed"].get<uint64_t>();
  if (!idx.contains("generator") || !idx["generator"].is_string()) return bad("field 'generator' missing");
  {
    auto gen = ParseGenerator(idx["generator"].get<std::string>());
    if (!gen.ok()) return bad(gen.status().message());
    s->generator_ = *gen;
  }
  if (idx.contains("rank")) {
    if (!idx["rank"].is_number_unsigned() || idx["rank"].get<uint64_t>() > INT32_MAX)
      return bad("field 'rank' is " + JsonPreview(idx["rank"]) + ", not a rank (0..2147483647)");
    s->rank_ = static_cast<int>(idx["rank"].get<uint64_t>());
  }
  if (!idx.contains("tensors") || !idx["tensors"].is_array()) return bad("field 'tensors' missing");
  std::set<std::string> names;
  for (size_t k = 0; k < idx["tensors"].size(); ++k) {
    json rec = idx["tensors"][k];
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
    StoredTensor stt;
    std::vector<uint64_t> checks;
    std::vector<ChunkInfo> infos;
    std::vector<ChunkLoc> located;
    if (kind == "lazy") {
      if (!rec.contains("key_words") || !rec["key_words"].is_array() || rec["key_words"].size() != 2 ||
          !rec["key_words"][0].is_number_unsigned() || !rec["key_words"][1].is_number_unsigned())
        return bad(where + ": 'key_words' missing or not two uint32 words");
      const Key key{rec["key_words"][0].get<uint32_t>(), rec["key_words"][1].get<uint32_t>()};
      rec.erase("kind");
      rec.erase("key_words");
      rec.erase("fingerprint");
      auto t = TensorSpecFromJson(rec, s->generator_, where);
      if (!t.ok()) return bad(t.status().message());
      auto l = LazyTensor::Resolve(*t, s->seed_);
      if (!l.ok()) return bad(l.status().message());
      if (!(l->key == key))
        return bad(where + " ('" + t->name + "'): key_words do not match the key derived from the spec");
      tr.name = t->name;
      tr.shape = t->shape;
      tr.dtype = t->dtype;
      tr.lazy = std::move(*l);
    } else if (kind == "dense") {
      if (!rec.contains("name") || !rec["name"].is_string() || !rec.contains("shape") ||
          !rec["shape"].is_array() || !rec.contains("dtype") || !rec["dtype"].is_string())
        return bad(where + ": dense record needs name, shape and dtype");
      tr.name = rec["name"].get<std::string>();
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
        if (auto v = ValidateShape(gshape, tr.dtype, where + " piece"); !v.ok()) return bad(v.message());
        auto reg = RegionFromJson(pc["region"], gshape);
        if (!reg.ok()) return bad(where + " ('" + tr.name + "'): piece: " + reg.status().message());
        if (LocalShape(*reg) != tr.shape)
          return bad(where + " ('" + tr.name + "'): piece " + DescribeRegion(*reg) +
                     " does not have the tensor's shape " + ShapeText(tr.shape));
        tr.piece = *reg;
      }
      if (rec.contains("stored_bytes") && rec["stored_bytes"].is_number_unsigned())
        stt.stored_bytes = rec["stored_bytes"].get<uint64_t>();
      const std::string tw = w + " tensor '" + tr.name + "'";
      const std::string esc = EscapeH5Name(tr.name);
      stt.dense = true;
      stt.dataset = "/tensors/" + esc;
      const std::string sums_path = "/checksums/" + esc;
      for (const std::string& p : {stt.dataset, sums_path}) {
        if (H5Lexists(f, p.substr(0, p.find('/', 1)).c_str(), H5P_DEFAULT) <= 0 ||
            H5Lexists(f, p.c_str(), H5P_DEFAULT) <= 0)
          return StoreStatus(StoreError::kMissingObject, tw + ": dataset '" + p + "' is missing");
        SEEDSTORE_RETURN_IF_ERROR(InThisFile(f, p, tw));
      }
      // Closed once checked, as are its tables: reads open it again when they need its chunk
      // addresses (H5Store::Dataset; a few are kept open). Chunks never go through HDF5's
      // chunk cache -- they are read with pread and decoded here -- so it gets none: 20,000
      // tiny dense tensors, `inspect` peak RSS 642 -> 349 MB; closing it: 349 -> 116 MB.
      Hid d(H5Dopen2(f, stt.dataset.c_str(), NoChunkCache()), H5Dclose);
      if (!d.ok()) return SEEDSTORE_H5_ERROR(tw + ": opening " + stt.dataset);
      // Attributes.
      SEEDSTORE_ASSIGN_OR_RETURN(std::string aname, ReadStringAttr(d.get(), "seedstore.name", tw));
      if (aname != tr.name)
        return bad(where + ": dataset '" + stt.dataset + "' says its name is '" + aname + "'");
      SEEDSTORE_ASSIGN_OR_RETURN(std::string adt, ReadStringAttr(d.get(), "seedstore.dtype", tw));
      if (adt != DTypeName(tr.dtype))
        return StoreStatus(StoreError::kDtypeMismatch, tw + ": seedstore.dtype is '" + adt +
                                                           "', the index says '" + DTypeName(tr.dtype) + "'");
      SEEDSTORE_ASSIGN_OR_RETURN(std::vector<uint64_t> afp,
                                 ReadU64Attr(d.get(), "seedstore.fingerprint", tw));
      if (afp.size() != 2) return Corrupt(tw + ": seedstore.fingerprint must hold 2 words");
      if (!fp) return bad(where + ": dense record without fingerprint");
      if (afp[0] != fp->lane0 || afp[1] != fp->lane1)
        return StoreStatus(StoreError::kFingerprintMismatch,
                           tw + ": seedstore.fingerprint differs from the index");
      // Shape and type.
      Hid sp(H5Dget_space(d.get()), H5Sclose);
      const int nd = H5Sget_simple_extent_ndims(sp.get());
      std::vector<hsize_t> dims(std::max(nd, 0));
      if (nd > 0) H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr);
      std::vector<uint64_t> dshape(dims.begin(), dims.end());
      if (nd < 0 || dshape != tr.shape)
        return StoreStatus(StoreError::kShapeMismatch, tw + ": dataset shape " + ShapeText(dshape) +
                                                           " differs from the record's " +
                                                           ShapeText(tr.shape));
      Hid ty(H5Dget_type(d.get()), H5Tclose);
      if (!TypeMatches(ty.get(), tr.dtype))
        return StoreStatus(StoreError::kDtypeMismatch,
                           tw + ": HDF5 type does not store " + DTypeName(tr.dtype));
      // Layout and filters.
      Hid pl(H5Dget_create_plist(d.get()), H5Pclose);
      const H5D_layout_t lay = H5Pget_layout(pl.get());
      std::vector<uint64_t> chunk;
      if (lay == H5D_CHUNKED) {
        std::vector<hsize_t> c(std::max(nd, 1));
        if (H5Pget_chunk(pl.get(), nd, c.data()) != nd)
          return Corrupt(tw + ": cannot read the chunk shape");
        chunk.assign(c.begin(), c.begin() + nd);
      } else if (lay != H5D_CONTIGUOUS && lay != H5D_COMPACT) {
        return StoreStatus(StoreError::kBadLayout, tw + ": unsupported dataset layout");
      } else if (tr.NumElements() > 1) {  // docs/FORMAT.md 4.2: only scalars and empty tensors
        return StoreStatus(StoreError::kBadLayout,
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
        const H5Z_filter_t id = H5Pget_filter2(pl.get(), k2, &flags, &ncd, cd, sizeof fname, fname, &fcfg);
        if (id != kH5FilterShuffle && id != kH5FilterZstd)
          return StoreStatus(StoreError::kUnknownFilter,
                             tw + ": filter id " + std::to_string(id) + " (" + FilterName(id) +
                                 ") in the pipeline; seedstore reads only shuffle (2) and zstd (32015)");
        if (id == kH5FilterShuffle && ncd >= 1 && cd[0] != static_cast<unsigned>(DTypeSize(tr.dtype)))
          return Corrupt(tw + ": shuffle element size " + std::to_string(cd[0]) + " is not the dtype's");
        if (id == kH5FilterZstd) stt.zstd_level = ncd >= 1 ? static_cast<int>(cd[0]) : 0;
        stt.filters.push_back(id);
      }
      Grid grid = Grid::Make(tr.shape, chunk);
      stt.chunk = chunk;
      stt.num_chunks = grid.num;
      // Where the chunks of a tensor of few chunks are (ChunksOf): its reads then open no
      // dataset. A missing chunk leaves it to the reads to find and name.
      if (grid.chunked() && grid.num <= kLocatedChunks) {
        for (uint64_t j = 0; j < grid.num; ++j) {
          uint64_t c[kMaxRank];
          hsize_t off[kMaxRank];
          grid.Coords(j, c);
          for (int q = 0; q < grid.rank; ++q) off[q] = c[q] * grid.chunk[q];
          located.push_back(LocateChunk(d.get(), off));
          if (located.back().size == 0) {
            located.clear();
            break;
          }
        }
      }
      // Checksum table.
      Hid cs(H5Dopen2(f, sums_path.c_str(), H5P_DEFAULT), H5Dclose);
      if (!cs.ok()) return SEEDSTORE_H5_ERROR(tw + ": opening " + sums_path);
      Hid csp(H5Dget_space(cs.get()), H5Sclose);
      if (H5Sget_simple_extent_ndims(csp.get()) != 1 ||
          static_cast<uint64_t>(H5Sget_simple_extent_npoints(csp.get())) != grid.num)
        return StoreStatus(StoreError::kShapeMismatch,
                           tw + ": checksum table " + sums_path + " does not have one entry per chunk (" +
                               std::to_string(grid.num) + ")");
      checks.resize(grid.num);
      if (H5Dread(cs.get(), H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, checks.data()) < 0)
        return SEEDSTORE_H5_ERROR(tw + ": reading " + sums_path);
      SEEDSTORE_RETURN_IF_ERROR(CheckTableHash(cs.get(), checks, tw + ": checksum table " + sums_path));
      // Chunk-info table (optional: files written before it existed have none).
      const std::string info_path = "/chunkinfo/" + esc;
      if (H5Lexists(f, "/chunkinfo", H5P_DEFAULT) > 0 && H5Lexists(f, info_path.c_str(), H5P_DEFAULT) > 0) {
        SEEDSTORE_RETURN_IF_ERROR(InThisFile(f, info_path, tw));
        Hid ci(H5Dopen2(f, info_path.c_str(), H5P_DEFAULT), H5Dclose);
        if (!ci.ok()) return SEEDSTORE_H5_ERROR(tw + ": opening " + info_path);
        Hid isp(H5Dget_space(ci.get()), H5Sclose);
        hsize_t idims[2] = {0, 0};
        if (H5Sget_simple_extent_ndims(isp.get()) != 2 ||
            H5Sget_simple_extent_dims(isp.get(), idims, nullptr) != 2 || idims[0] != grid.num ||
            idims[1] != 3)
          return StoreStatus(StoreError::kShapeMismatch,
                             tw + ": chunk-info table " + info_path + " is not [" +
                                 std::to_string(grid.num) + ", 3] (one row per chunk)");
        std::vector<uint64_t> rows(grid.num * 3);
        if (H5Dread(ci.get(), H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0)
          return SEEDSTORE_H5_ERROR(tw + ": reading " + info_path);
        SEEDSTORE_RETURN_IF_ERROR(CheckTableHash(ci.get(), rows, tw + ": chunk-info table " + info_path));
        Fingerprint total;
        infos.resize(grid.num);
        for (uint64_t j = 0; j < grid.num; ++j) {
          infos[j].stored_hash = rows[3 * j];
          infos[j].fingerprint = Fingerprint{rows[3 * j + 1], rows[3 * j + 2]};
          total.Add(infos[j].fingerprint);
        }
        if (total != *fp)
          return StoreStatus(StoreError::kFingerprintMismatch,
                             tw + ": the chunk fingerprints of " + info_path + " add up to " +
                                 FingerprintHex(total) + ", the record says " + FingerprintHex(*fp));
      }
    } else {
      return bad(where + ": unknown kind '" + kind + "'");
    }
    if (!names.insert(tr.name).second) return bad(where + ": duplicate tensor '" + tr.name + "'");
    tr.fingerprint = fp;
    s->records_.push_back(std::move(tr));
    s->stored_.push_back(std::move(stt));
    s->checksums_.push_back(std::move(checks));
    s->info_.push_back(std::move(infos));
    s->located_.push_back(std::move(located));
  }
  SEEDSTORE_RETURN_IF_ERROR(s->DropCachedMetadata());
  return s;
}

void H5Store::AttachDescriptor() {
  // Chunks are read with pread at their file addresses (io/h5store.cc, LoadChunk) when the
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
  if (fd_ < 0 || std::none_of(stored_.begin(), stored_.end(), [](const StoredTensor& t) { return t.dense; }))
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
  if (file_ < 0) return Corrupt("file '" + path_ + "': HDF5 cannot open it again after checking it: " + e);
  AttachDescriptor();
  return Status::Ok();
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
  if (!w.located && g.num > H5Store::kAddressedChunks) return;  // no address: the kernel's readahead
  uint64_t c[kMaxRank];
  hsize_t off[kMaxRank];
  g.Coords(j, c);
  for (int d = 0; d < g.rank; ++d) off[d] = c[d] * g.chunk[d];
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
  return StoreStatus(StoreError::kChunkCorrupt,
                     "file '" + path + "' tensor '" + t.name + "' chunk " + std::to_string(j) + at + ": " + m);
}

// Reads chunk j's stored bytes into s.raw and its filter mask into *mask: the chunk after the
// filter pipeline for a chunked dataset (pread at its address when fd >= 0, else
// H5Dread_chunk), the data bytes as stored for a contiguous one (mask 0).
static Status ReadStoredBytes(const std::string& path, const TensorRecord& t, const ChunkWhere& w, int fd,
                              const Grid& g, uint64_t j, ChunkScratch& s, unsigned* mask) {
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
  hsize_t off[kMaxRank];
  for (int d = 0; d < g.rank; ++d) off[d] = cs[d] * g.chunk[d];
  if (!w.located && (fd < 0 || g.num > H5Store::kAddressedChunks)) {  // looked up by HDF5 directly
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
static Status CheckStoredHash(const std::string& path, const TensorRecord& t, const Grid& g, uint64_t j,
                              const ChunkScratch& s, uint64_t expected) {
  const uint64_t h = Checksum64(s.raw.data(), s.raw.size());
  if (h == expected) return Status::Ok();
  return ChunkError(path, t, g, j,
                    "stored bytes hash mismatch (chunk-info " + Hex64(expected) + ", computed " + Hex64(h) + ")");
}

// Reads chunk j, checks its checksum and writes its elements to the sink. With `info`, the
// stored bytes are also checked against the chunk-info table's hash. s.raw keeps the stored
// bytes and *mask their filter mask.
static Status LoadChunk(const std::string& path, const TensorRecord& t, const StoredTensor& st,
                        const ChunkWhere& w, int fd, const Grid& g, uint64_t j, uint64_t expected_sum,
                        const ChunkSink& sink, ChunkScratch& s, const ChunkInfo* info = nullptr,
                        unsigned* mask_out = nullptr) {
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
        const size_t r = ZSTD_decompressDCtx(ThreadZstd().d, dst->data(), bytes, cur->data(), cur->size());
        if (ZSTD_isError(r) || r != bytes)
          return fail(std::string("zstd: ") + (ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short frame"));
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
    return fail("checksum mismatch (stored " + Hex64(expected_sum) + ", computed " + Hex64(sum) + ")");
  return Status::Ok();
}

Status H5Store::Read(size_t i, const Region& r, void* out, CpuOptions o) const {
  if (i >= records_.size()) return InvalidArgument("tensor index " + std::to_string(i) + " out of range");
  const TensorRecord& t = records_[i];
  if (t.lazy) return t.lazy->Materialize(r, out, o);
  SEEDSTORE_RETURN_IF_ERROR(CheckRegionIn(t, r));
  return ReadByBoxes(t, r, out, [&](const Region& b, void* dst) { return ReadDense(i, b, dst, o); });
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
  if (i >= records_.size() || records_[i].lazy || stored_[i].chunk.empty() ||
      j >= stored_[i].num_chunks)
    return InvalidArgument("file '" + path_ + "': no stored chunk " + std::to_string(j) + " of tensor " +
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

Status H5Store::ForEachChunkIn(size_t i, const Region& box, CpuOptions o,
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
  return ForEachChunkIn(i, box, o, [&](const ChunkWhere& w, uint64_t j, const uint64_t* is, const uint64_t* ie,
                                       ChunkScratch& s, int) {
    const ChunkSink sink{static_cast<uint8_t*>(out), box.start, b_ext, is, ie};
    return LoadChunk(path_, t, st, w, fd_, g, j, checksums_[i][j], sink, s);
  });
}

Result<Fingerprint> H5Store::FingerprintRegion(size_t i, const Region& r, CpuOptions o) const {
  if (i >= records_.size()) return InvalidArgument("tensor index " + std::to_string(i) + " out of range");
  const TensorRecord& t = records_[i];
  if (t.lazy) return t.lazy->FingerprintRegion(r, o);
  SEEDSTORE_RETURN_IF_ERROR(CheckRegionIn(t, r));
  const StoredTensor& st = stored_[i];
  const Grid g = Grid::Make(t.shape, st.chunk);
  if (!g.chunked()) return Catalog::FingerprintRegion(i, r, o);  // one small contiguous dataset
  const std::vector<Region> boxes = r.flat ? FlatRangeToBoxes(t.shape, r.begin, r.end) : std::vector<Region>{r};
  const int threads = std::max(1, ThreadCount(o.threads, g.num));
  std::vector<std::vector<uint8_t>> bufs(threads);
  std::vector<Fingerprint> parts(threads);
  const size_t es = DTypeSize(t.dtype);
  for (const Region& box : boxes) {
    if (box.Count() == 0) continue;
    // Each intersecting chunk's part of the box is decoded packed into the thread's buffer
    // (L2-sized, reused) and hashed there: no buffer of the region's size.
    SEEDSTORE_RETURN_IF_ERROR(ForEachChunkIn(i, box, o, [&](const ChunkWhere& w, uint64_t j, const uint64_t* is,
                                                             const uint64_t* ie, ChunkScratch& s,
                                                             int th) -> Status {
      Region part = box;
      uint64_t ext[kMaxRank];
      for (int d = 0; d < g.rank; ++d) {
        part.start[d] = is[d];
        part.stop[d] = ie[d];
        ext[d] = ie[d] - is[d];
      }
      bufs[th].resize(part.Count() * es);
      const ChunkSink sink{bufs[th].data(), is, ext, is, ie};
      SEEDSTORE_RETURN_IF_ERROR(LoadChunk(path_, t, st, w, fd_, g, j, checksums_[i][j], sink, s));
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
  VerifyReport rep;
  std::mutex mu;
  auto report = [&](uint64_t n) {
    if (!progress) return;
    std::lock_guard<std::mutex> l(mu);
    progress(n);
  };
  for (size_t i = 0; i < records_.size(); ++i) {
    const TensorRecord& t = records_[i];
    ++rep.tensors;
    Fingerprint total;
    if (t.lazy) {
      auto f = t.lazy->FingerprintWhole(o);
      if (!f.ok()) {
        rep.problems.push_back({t.name, -1, f.status()});
        rep.fingerprints.push_back({});
        rep.complete.push_back(false);
        continue;
      }
      total = *f;
      report(t.NumBytes());
      rep.complete.push_back(true);
    } else {
      const StoredTensor& st = stored_[i];
      const Grid g = Grid::Make(t.shape, st.chunk);
      const size_t es = DTypeSize(t.dtype);
      const int threads = ThreadCount(o.threads, g.num);
      const int hint = HintFd(g.ChunkElems() * es);
      auto ds = ChunksOf(i);
      if (!ds.ok()) {
        rep.problems.push_back({t.name, -1, ds.status()});
        rep.fingerprints.push_back({});
        rep.complete.push_back(false);
        continue;
      }
      const size_t problems_before = rep.problems.size();
      std::vector<std::unique_ptr<ChunkScratch>> scratch = ReadScratch().Take(threads);
      std::vector<std::vector<uint8_t>> bufs(threads);
      std::vector<Fingerprint> parts(threads);
      (void)ParallelFor(g.num, threads, true, [&](uint64_t j, int th) -> Status {
        // The chunk clipped to the tensor, decoded packed into bufs[th] and fingerprinted.
        const Region box = g.Box(j);
        PrefetchChunk(hint, *ds, g, j + kPrefetchAhead * threads);
        const ChunkInfo* info = info_[i].empty() ? nullptr : &info_[i][j];
        Status s = DecodeChunk(*ds, i, j, &bufs[th], *scratch[th], true, nullptr);
        if (s.ok() && t.dtype == DType::kBool) {  // docs/FORMAT.md 4.2: bool bytes are 0 or 1
          const auto* bad = std::find_if(bufs[th].data(), bufs[th].data() + bufs[th].size(),
                                         [](uint8_t b) { return b > 1; });
          if (bad != bufs[th].data() + bufs[th].size())
            s = ChunkError(path_, t, g, j,
                           "bool element " + std::to_string(bad - bufs[th].data()) + " of the chunk holds byte " +
                               std::to_string(*bad) + " (a bool is stored as 0 or 1; readers disagree on others)");
        }
        const Fingerprint f = s.ok() ? FingerprintOf(t, box, bufs[th].data(), CpuOptions{1}) : Fingerprint{};
        if (s.ok() && info && f != info->fingerprint)
          s = StoreStatus(StoreError::kFingerprintMismatch,
                          "file '" + path_ + "' tensor '" + t.name + "' chunk " + std::to_string(j) +
                              ": chunk-info fingerprint " + FingerprintHex(info->fingerprint) +
                              ", recomputed " + FingerprintHex(f));
        if (!s.ok()) {
          std::lock_guard<std::mutex> l(mu);
          rep.problems.push_back({t.name, static_cast<int64_t>(j), s});
          return s;
        }
        parts[th].Add(f);
        report(box.Count() * es);
        return Status::Ok();
      });
      ReadScratch().Return(std::move(scratch));
      rep.chunks += g.num;
      for (const auto& p : parts) total.Add(p);
      rep.bytes += t.NumBytes();
      rep.complete.push_back(rep.problems.size() == problems_before);
    }
    rep.fingerprints.push_back(total);
    if (t.fingerprint && *t.fingerprint != total) {
      bool chunk_problem = false;
      for (const auto& p : rep.problems) chunk_problem = chunk_problem || p.tensor == t.name;
      if (!chunk_problem)
        rep.problems.push_back(
            {t.name, -1,
             StoreStatus(StoreError::kFingerprintMismatch,
                         "file '" + path_ + "' tensor '" + t.name + "': recorded fingerprint " +
                             FingerprintHex(*t.fingerprint) + ", recomputed " + FingerprintHex(total))});
    }
  }
  rep.FinishOk(records_);
  return rep;
}

// ---- StoreWriter ---------------------------------------------------------------------------

// A writer thread's buffers: the box from the source, the padded edge chunk, the shuffled
// bytes, the zstd frame.
struct WriteScratch {
  std::vector<uint8_t> box, chunk, shuf, comp;
  StoredChunk raw;  // a chunk copied as stored
};

// Chunk-encoding buffers, shared by every open writer as ReadScratch is by every open store: a
// reshard keeps dozens of rank files open at once (io/dist_store.cc, WriteRankFiles).
static ScratchPool<WriteScratch>& WriteScratchPool() {
  static ScratchPool<WriteScratch>* pool = new ScratchPool<WriteScratch>();  // never destroyed
  return *pool;
}

struct StoreWriter::Impl {
  std::unique_ptr<AtomicFile> file;
  hid_t h5 = -1, g_tensors = -1, g_sums = -1, g_info = -1, g_meta = -1;
  uint64_t seed = 0;
  Generator generator = Generator::kThreefry;
  std::optional<int> rank;
  WriteOptions opt;
  json records = json::array();
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
    for (hid_t* id : {&g_tensors, &g_sums, &g_info, &g_meta})
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

Result<std::unique_ptr<StoreWriter>> StoreWriter::Create(const std::string& path, uint64_t root_seed,
                                                         Generator generator, WriteOptions options) {
  std::unique_ptr<StoreWriter> w(new StoreWriter());
  w->impl_ = std::make_unique<Impl>();
  Impl& m = *w->impl_;
  m.seed = root_seed;
  m.generator = generator;
  m.opt = options;
  m.opt.zstd_level = std::clamp(m.opt.zstd_level, kMinZstdLevel, kMaxZstdLevel);
  SEEDSTORE_ASSIGN_OR_RETURN(AtomicFile af, AtomicFile::Create(path, m.opt.file_mode));
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
  const bool fcpl_ok = fcpl.ok() && (m.opt.user_block == 0 || H5Pset_userblock(fcpl.get(), m.opt.user_block) >= 0);
  m.h5 = fcpl_ok ? H5Fcreate(m.file->temp_path().c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()) : -1;
  signal_cleanup::EndChange();
  if (m.h5 < 0) return SEEDSTORE_H5_ERROR("creating '" + m.file->temp_path() + "'");
  SEEDSTORE_RETURN_IF_ERROR(WriteStringAttr(m.h5, "seedstore.format", "seedstore"));
  SEEDSTORE_RETURN_IF_ERROR(WriteI32Attr(m.h5, "seedstore.version", kStoreFormatVersion));
  Hid gcpl(UntimedCreationList(H5P_GROUP_CREATE), H5Pclose);
  m.g_meta = H5Gcreate2(m.h5, "seedstore", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT);
  m.g_tensors = H5Gcreate2(m.h5, "tensors", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT);
  m.g_sums = H5Gcreate2(m.h5, "checksums", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT);
  m.g_info = H5Gcreate2(m.h5, "chunkinfo", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT);
  if (m.g_meta < 0 || m.g_tensors < 0 || m.g_sums < 0 || m.g_info < 0)
    return SEEDSTORE_H5_ERROR("creating groups");
  void* handle = nullptr;
  if (H5Fget_vfd_handle(m.h5, fapl.get(), &handle) >= 0 && handle) m.fd = *static_cast<int*>(handle);
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
  m.records.push_back(LazyRecordJson(l, fp));
  return Status::Ok();
}

Status StoreWriter::AddDense(const std::string& name, const std::vector<uint64_t>& shape, DType dtype,
                             const BoxSource& source, std::function<void(uint64_t)> progress,
                             const DenseChunking& chunking) {
  return AddDenseFrom(name, shape, dtype, source, nullptr, std::move(progress), chunking);
}

Status StoreWriter::AddDense(const std::string& name, const std::vector<uint64_t>& shape, DType dtype,
                             const void* data, std::function<void(uint64_t)> progress,
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
  return InvalidArgument(tw + ": bool element " + ShapeText(at) + " holds byte " + std::to_string(*bad) +
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
  std::vector<uint64_t> chunk_shape = ChooseChunk(shape, es, m.opt.chunk_bytes);
  if (!chunk_shape.empty() && !chunking.chunk.empty()) {
    bool fits = chunking.chunk.size() == shape.size();
    unsigned __int128 bytes = es;
    for (size_t d = 0; fits && d < shape.size(); ++d) {
      fits = chunking.chunk[d] >= 1 && chunking.chunk[d] <= shape[d];
      bytes *= chunking.chunk[d];
    }
    if (!fits || bytes >= (static_cast<unsigned __int128>(1) << 32))
      return InvalidArgument(tw + ": chunk shape " + ShapeText(chunking.chunk) +
                             " does not fit the shape " + ShapeText(shape) + " (or is 4 GiB or more)");
    chunk_shape = chunking.chunk;
  }
  const Grid g = Grid::Make(shape, chunk_shape);
  const std::string esc = EscapeH5Name(name);
  // The record as readers will see it: its fingerprints are taken in its frame.
  TensorRecord frame;
  frame.name = name;
  frame.shape = shape;
  frame.dtype = dtype;
  if (chunking.piece) {
    const Region& p = *chunking.piece;
    bool in = p.rank >= 0 && p.rank <= kMaxRank;
    unsigned __int128 n = 1;
    for (int d = 0; in && d < p.rank; ++d) {
      n *= p.shape[d];
      in = p.flat || (p.start[d] <= p.stop[d] && p.stop[d] <= p.shape[d]);
    }
    if (in && p.flat) in = p.begin <= p.end && p.end <= n;
    if (!in || LocalShape(p) != shape)
      return InvalidArgument(tw + ": piece " + DescribeRegion(p) +
                             " does not lie in its global tensor or has not the shape " + ShapeText(shape));
    frame.piece = p;
  }
  Hid dset, type;
  {
    H5Guard gl;
    type = StorageType(dtype);
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    Hid space(rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims.data(), nullptr), H5Sclose);
    Hid dcpl(UntimedCreationList(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER);
    if (g.chunked()) {
      std::vector<hsize_t> cd(g.chunk.begin(), g.chunk.end());
      H5Pset_chunk(dcpl.get(), rank, cd.data());
      if (m.opt.shuffle && es > 1) H5Pset_shuffle(dcpl.get());
      const unsigned level = static_cast<unsigned>(m.opt.zstd_level);
      if (H5Pset_filter(dcpl.get(), kH5FilterZstd, H5Z_FLAG_MANDATORY, 1, &level) < 0)
        return SEEDSTORE_H5_ERROR(tw + ": adding the zstd filter");
    }
    dset = Hid(H5Dcreate2(m.g_tensors, esc.c_str(), type.get(), space.get(), H5P_DEFAULT, dcpl.get(),
                          H5P_DEFAULT),
               H5Dclose);
    if (!dset.ok()) return SEEDSTORE_H5_ERROR(tw + ": creating dataset");
  }
  std::vector<uint64_t> sums(g.num);
  std::vector<ChunkInfo> infos(g.num);
  std::atomic<uint64_t> stored{0}, copied{0};
  const int threads = ThreadCount(m.opt.threads, g.num);
  const int slots = InOrderSlots(threads);
  std::vector<Fingerprint> parts(slots);
  const size_t chunk_bytes = g.ChunkElems() * es;
  const bool do_shuffle = m.opt.shuffle && es > 1;
  std::vector<std::unique_ptr<WriteScratch>> scratch = WriteScratchPool().Take(slots);
  // What an item leaves in its slot for its commit, which writes it: chunks are written in
  // index order, so that they lie in the file in that order whatever the thread count.
  struct Pending {
    const uint8_t* bytes = nullptr;
    size_t size = 0;
    unsigned filter_mask = 0;
    bool copied = false;  // as stored in the source (raw)
  };
  std::vector<Pending> pending(slots);
  auto work = [&](uint64_t j, int th) -> Status {
    std::vector<uint8_t>& box_buf = scratch[th]->box;
    std::vector<uint8_t>& chunk_buf = scratch[th]->chunk;
    std::vector<uint8_t>& shuf = scratch[th]->shuf;
    std::vector<uint8_t>& comp = scratch[th]->comp;
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
                        std::to_string(raw.data.size()) + " bytes of data, not " + std::to_string(n * es));
      infos[j].fingerprint =
          raw.fingerprint ? *raw.fingerprint : FingerprintOf(frame, box, raw.data.data(), CpuOptions{1});
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
    const uint8_t* chunk = elems;
    if (g.chunked() && n != g.ChunkElems()) {
      chunk_buf.assign(chunk_bytes, 0);  // edge chunk: zero outside the tensor
      uint64_t ext[kMaxRank];
      for (int d = 0; d < rank; ++d) ext[d] = box.stop[d] - box.start[d];
      CopyIntersection(elems, box.start, ext, chunk_buf.data(), box.start, g.chunk.data(),
                       box.start, box.stop, rank, es);
      chunk = chunk_buf.data();
    }
    sums[j] = Checksum64(chunk, chunk_bytes);
    infos[j].stored_hash = sums[j];  // contiguous data is stored as is (chunked: set below)
    if (!g.chunked()) {
      out = Pending{chunk, chunk_bytes, 0, false};
      return Status::Ok();
    }
    const uint8_t* src = chunk;
    if (do_shuffle) {
      shuf.resize(chunk_bytes);
      Shuffle(src, shuf.data(), chunk_bytes, es);
      src = shuf.data();
    }
    comp.resize(ZSTD_compressBound(chunk_bytes));
    const size_t c = CompressChunk(comp.data(), comp.size(), src, chunk_bytes, m.opt.zstd_level);
    if (ZSTD_isError(c)) return Internal(tw + ": zstd: " + ZSTD_getErrorName(c));
    infos[j].stored_hash = Checksum64(comp.data(), c);
    out = Pending{comp.data(), c, 0, false};
    return Status::Ok();
  };
  auto commit = [&](uint64_t j, int th) -> Status {
    const Pending& p = pending[th];
    if (g.chunked()) {
      hsize_t off[kMaxRank];
      const Region box = g.Box(j);
      for (int d = 0; d < rank; ++d) off[d] = box.start[d];
      {
        H5Guard gl;
        if (H5Dwrite_chunk(dset.get(), H5P_DEFAULT, p.filter_mask, off, p.size, p.bytes) < 0)
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
  H5Guard gl;
  Hid untimed(UntimedCreationList(H5P_DATASET_CREATE), H5Pclose);
  {
    const hsize_t n = g.num;
    Hid space(H5Screate_simple(1, &n, nullptr), H5Sclose);
    Hid cs(H5Dcreate2(m.g_sums, esc.c_str(), H5T_STD_U64LE, space.get(), H5P_DEFAULT, untimed.get(),
                      H5P_DEFAULT),
           H5Dclose);
    if (!cs.ok() || H5Dwrite(cs.get(), H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, sums.data()) < 0)
      return SEEDSTORE_H5_ERROR(tw + ": writing the checksum table");
    SEEDSTORE_RETURN_IF_ERROR(WriteU64Attr(cs.get(), kTableHashAttr, {TableHash(sums)}, true));
  }
  {
    const hsize_t dims[2] = {g.num, 3};
    std::vector<uint64_t> rows(g.num * 3);
    for (uint64_t j = 0; j < g.num; ++j) {
      rows[3 * j] = infos[j].stored_hash;
      rows[3 * j + 1] = infos[j].fingerprint.lane0;
      rows[3 * j + 2] = infos[j].fingerprint.lane1;
    }
    Hid space(H5Screate_simple(2, dims, nullptr), H5Sclose);
    Hid ci(H5Dcreate2(m.g_info, esc.c_str(), H5T_STD_U64LE, space.get(), H5P_DEFAULT, untimed.get(),
                      H5P_DEFAULT),
           H5Dclose);
    if (!ci.ok() || H5Dwrite(ci.get(), H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0)
      return SEEDSTORE_H5_ERROR(tw + ": writing the chunk-info table");
    SEEDSTORE_RETURN_IF_ERROR(WriteU64Attr(ci.get(), kTableHashAttr, {TableHash(rows)}, true));
  }
  SEEDSTORE_RETURN_IF_ERROR(WriteStringAttr(dset.get(), "seedstore.name", name));
  SEEDSTORE_RETURN_IF_ERROR(WriteStringAttr(dset.get(), "seedstore.dtype", DTypeName(dtype)));
  SEEDSTORE_RETURN_IF_ERROR(WriteU64Attr(dset.get(), "seedstore.fingerprint", {fp.lane0, fp.lane1}, false));
  m.counts.stored_bytes += stored.load() + g.num * 32;
  m.records.push_back(DenseRecordJson(name, shape, dtype, fp, stored.load() + g.num * 32, frame.piece));
  m.last_dense = fp;
  return Status::Ok();
}

Status StoreWriter::CopyFrom(const H5Store& src, size_t i) {
  Impl& m = *impl_;
  const TensorRecord& t = src.tensors().at(i);
  SEEDSTORE_RETURN_IF_ERROR(m.CheckName(t.name));
  if (t.lazy) {
    LazyTensor l = *t.lazy;
    if (l.spec.key.kind == KeySpec::Kind::kDerived && src.root_seed() != m.seed) {
      l.spec.key.kind = KeySpec::Kind::kRaw;  // keep the very same key under another root seed
      l.spec.key.raw = l.key;
    }
    m.records.push_back(LazyRecordJson(l, t.fingerprint));
    return Status::Ok();
  }
  const std::string esc = EscapeH5Name(t.name);
  H5Guard gl;
  if (H5Ocopy(src.h5_file(), ("/tensors/" + esc).c_str(), m.g_tensors, esc.c_str(), H5P_DEFAULT,
              H5P_DEFAULT) < 0 ||
      H5Ocopy(src.h5_file(), ("/checksums/" + esc).c_str(), m.g_sums, esc.c_str(), H5P_DEFAULT,
              H5P_DEFAULT) < 0 ||
      (!src.chunk_info(i).empty() &&
       H5Ocopy(src.h5_file(), ("/chunkinfo/" + esc).c_str(), m.g_info, esc.c_str(), H5P_DEFAULT,
               H5P_DEFAULT) < 0))
    return SEEDSTORE_H5_ERROR("copying tensor '" + t.name + "' from '" + src.origin() + "'");
  m.counts.copied += src.stored(i).num_chunks;
  m.counts.stored_bytes += src.stored(i).stored_bytes;
  m.records.push_back(DenseRecordJson(t.name, t.shape, t.dtype, *t.fingerprint,
                                      src.stored(i).stored_bytes, t.piece));
  m.last_dense = *t.fingerprint;
  return Status::Ok();
}

bool StoreWriter::CopiesChunksOf(const StoredTensor& s, DType dtype, const WriteOptions& o) {
  std::vector<int> mine;
  if (o.shuffle && DTypeSize(dtype) > 1) mine.push_back(kH5FilterShuffle);
  mine.push_back(kH5FilterZstd);
  return s.dense && !s.chunk.empty() && s.filters == mine &&
         // as Create clamps it
         s.zstd_level == std::clamp(o.zstd_level, kMinZstdLevel, kMaxZstdLevel);
}

bool StoreWriter::CopiesChunksOf(const StoredTensor& s, DType dtype) const {
  return CopiesChunksOf(s, dtype, impl_->opt);
}

StoreWriter::ChunkCounts StoreWriter::chunk_counts() const { return impl_->counts; }
Fingerprint StoreWriter::last_dense_fingerprint() const { return impl_->last_dense; }

void StoreWriter::SetShardRank(std::optional<int> rank) { impl_->rank = rank; }

Status StoreWriter::Commit(const std::function<Status(const std::string& temp)>& before_rename) {
  Impl& m = *impl_;
  if (m.committed) return Internal("store '" + m.file->path() + "' committed twice");
  json idx = {{"format", "seedstore"},
              {"version", kStoreFormatVersion},
              {"seed", m.seed},
              {"generator", GeneratorName(m.generator)},
              {"tensors", m.records}};
  if (m.rank) idx["rank"] = *m.rank;
  const std::string text = idx.dump();
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
    Hid d(H5Dcreate2(m.g_meta, "index", H5T_STD_U8LE, space.get(), H5P_DEFAULT, dcpl.get(), NoChunkCache()),
          H5Dclose);
    if (!d.ok() || H5Dwrite(d.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) < 0)
      return SEEDSTORE_H5_ERROR("writing /seedstore/index");
    SEEDSTORE_RETURN_IF_ERROR(
        WriteU64Attr(d.get(), "seedstore.xxh3", {Checksum64(text.data(), text.size())}, true));
  }
  {
    H5Guard gl;
    if (H5Fflush(m.h5, H5F_SCOPE_GLOBAL) < 0) return SEEDSTORE_H5_ERROR("flushing the store");
  }
  if (!m.CloseH5(/*keep=*/true)) return IoError("closing '" + m.file->temp_path() + "' failed");
  if (before_rename) SEEDSTORE_RETURN_IF_ERROR(before_rename(m.file->temp_path()));
  SEEDSTORE_RETURN_IF_ERROR(m.file->Commit());
  m.committed = true;
  return Status::Ok();
}

bool H5Store::distributed_master() const {
  // Probed when asked, not at Open: HDF5 walking a damaged root group's links there once
  // changed what Open then read (tests/golden/test_flip_sweep.cc).
  auto lock = LockH5();
  return FileIsDistributedMaster(file_, path_);
}

Status RewriteOfMasterRefused(const std::string& path) {
  return InvalidArgument("file '" + path +
                         "' is a distributed save's master: tensors are replaced in a one-file store "
                         "(`seedstore reshard " + path + " --consolidate -o STORE` makes one)");
}

Status CheckRewritableAsStore(const H5Store& store, const std::string& path) {
  if (store.distributed_master()) return RewriteOfMasterRefused(path);
  std::string save;
  uint32_t id = 0;
  int rank = 0;
  if (!ParseRankFileName(path, &save, &id, &rank)) return Status::Ok();
  bool master = false;
  if (LooksLikeHdf5(save)) {  // else no master (or a pipe, which HDF5's open would block on)
    auto lock = LockH5();
    Hid f(H5Fopen(save.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    master = f.ok() && FileIsDistributedMaster(f.get(), save);
    H5ErrorText();
  }
  if (!master) return Status::Ok();
  return InvalidArgument("file '" + path + "' is rank " + std::to_string(rank) +
                         "'s file of the distributed save '" + save +
                         "': rewritten alone it would no longer match the piece fingerprints the "
                         "save's index records, and the save would fail to verify and read; update "
                         "the save instead (`seedstore reshard " + save +
                         " --consolidate -o STORE`, update STORE, then `seedstore reshard STORE "
                         "--layout LAYOUT -o " + save + "`)");
}

Status ReplaceWithDense(const std::string& path, const std::map<std::string, BoxSource>& values,
                        WriteOptions options, std::function<void(uint64_t)> progress) {
  SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<H5Store> src, H5Store::Open(path));
  SEEDSTORE_RETURN_IF_ERROR(CheckRewritableAsStore(*src, path));
  for (const auto& [name, _] : values)
    if (src->Find(name) < 0) return NotFound("file '" + path + "': no tensor '" + name + "'");
  SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<StoreWriter> w,
                             StoreWriter::Create(path, src->root_seed(), src->generator(), options));
  w->SetShardRank(src->shard_rank());  // a rank's shard file stays that rank's
  for (size_t i = 0; i < src->tensors().size(); ++i) {
    const TensorRecord& t = src->tensors()[i];
    auto it = values.find(t.name);
    if (it == values.end()) {
      SEEDSTORE_RETURN_IF_ERROR(w->CopyFrom(*src, i));
    } else {
      DenseChunking keep;  // a piece (a rank file's tensor) stays the same piece
      keep.piece = t.piece;
      SEEDSTORE_RETURN_IF_ERROR(w->AddDense(t.name, t.shape, t.dtype, it->second, progress, keep));
    }
  }
  return w->Commit();
}

}  // namespace seedstore
