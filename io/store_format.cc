#include "io/store_format.h"

#include <hdf5.h>

#include <type_traits>

#include "gen/checksum.h"

namespace seedstore {

std::vector<int> FilterPipeline(const WriteOptions& o, const std::string& name, DType dtype) {
  for (const std::string& glob : o.uncompressed)
    if (GlobMatch(glob, name)) return {};
  std::vector<int> f;
  if (o.shuffle && DTypeSize(dtype) > 1) f.push_back(kH5FilterShuffle);
  f.push_back(kH5FilterZstd);
  return f;
}

const char* StoreErrorName(StoreError e) {
  switch (e) {
    case StoreError::kNotHdf5:
      return "not-hdf5";
    case StoreError::kTruncated:
      return "truncated";
    case StoreError::kBadMagic:
      return "bad-magic";
    case StoreError::kUnsupportedVersion:
      return "unsupported-version";
    case StoreError::kMissingAttribute:
      return "missing-attribute";
    case StoreError::kMissingObject:
      return "missing-object";
    case StoreError::kBadIndex:
      return "bad-index";
    case StoreError::kShapeMismatch:
      return "shape-mismatch";
    case StoreError::kDtypeMismatch:
      return "dtype-mismatch";
    case StoreError::kUnknownFilter:
      return "unknown-filter";
    case StoreError::kChunkCorrupt:
      return "chunk-corrupt";
    case StoreError::kFingerprintMismatch:
      return "fingerprint-mismatch";
    case StoreError::kBadLayout:
      return "bad-layout";
    case StoreError::kTableCorrupt:
      return "table-corrupt";
    case StoreError::kMetadataCorrupt:
      return "metadata-corrupt";
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

uint64_t TableHash(const std::vector<uint64_t>& entries) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "tables are hashed as stored (little-endian)");
  return Checksum64(entries.data(), entries.size() * sizeof(uint64_t));
}

}  // namespace seedstore

namespace seedstore {

static_assert(std::is_same_v<hsize_t, unsigned long long>, "ChunkOffset writes hsize_t offsets");

int ChunkOffset(const StoredTensor& s, uint64_t j, const uint64_t* coords, int rank,
                unsigned long long* off) {
  if (s.cell_set >= 0) {
    off[0] = s.first_cell + j;
    for (int d = 0; d < rank; ++d) off[d + 1] = 0;
    return rank + 1;
  }
  for (int d = 0; d < rank; ++d) off[d] = coords[d] * s.chunk[d];
  return rank;
}

}  // namespace seedstore
