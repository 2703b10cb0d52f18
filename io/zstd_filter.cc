#include "io/zstd_filter.h"

#include <hdf5.h>
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_c_literalCompressionMode
#include <zstd.h>

#include <algorithm>
#include <mutex>

#include "io/store_format.h"

namespace seedstore {

namespace {

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

size_t ZstdFilter(unsigned flags, size_t cd_nelmts, const unsigned cd_values[], size_t nbytes,
                  size_t* buf_size, void** buf) {
  if (flags & H5Z_FLAG_REVERSE) {
    const unsigned long long n = ZSTD_getFrameContentSize(*buf, nbytes);
    if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN || n == 0) return 0;
    void* out = H5allocate_memory(n, false);
    if (!out) return 0;
    const size_t r = ZSTD_decompressDCtx(ThreadZstd().d, out, n, *buf, nbytes);
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
  // As ZSTD_compress: the level alone (the context's advanced parameters are reset), on the
  // thread's context rather than one made per call.
  const size_t r = ZSTD_compressCCtx(ThreadZstd().c, out, bound, *buf, nbytes, level);
  if (ZSTD_isError(r)) {
    H5free_memory(out);
    return 0;
  }
  H5free_memory(*buf);
  *buf = out;
  *buf_size = bound;
  return r;
}

}  // namespace

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

ZSTD_DCtx_s* ThreadZstdDCtx() { return ThreadZstd().d; }

void RegisterZstdFilter() {
  static std::once_flag once;
  std::call_once(once, [] {
    static const H5Z_class2_t cls = {H5Z_CLASS_T_VERS,
                                     static_cast<H5Z_filter_t>(kH5FilterZstd),
                                     1,
                                     1,
                                     "Zstandard (seedstore)",
                                     nullptr,
                                     nullptr,
                                     ZstdFilter};
    if (H5Zfilter_avail(kH5FilterZstd) <= 0) H5Zregister(&cls);
  });
}

const char* FilterName(int id) {
  switch (id) {
    case 1:
      return "deflate";
    case 2:
      return "shuffle";
    case 3:
      return "fletcher32";
    case 4:
      return "szip";
    case 5:
      return "nbit";
    case 6:
      return "scaleoffset";
    case 307:
      return "bzip2";
    case 32001:
      return "blosc";
    case 32004:
      return "lz4";
    case 32015:
      return "zstd";
    default:
      return "unknown";
  }
}

}  // namespace seedstore
