// Helpers of the HDF5 store's unit tests (test_h5store_*.cc): temp folders, boxes of whole
// row-major tensors as sources, random boxes, every dtype.
#pragma once
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>
#include "io/h5store.h"
#include "io/open.h"
#include "tests/store_test_util.h"

namespace seedstore::h5storetest {

namespace fs = std::filesystem;
using Shape = std::vector<uint64_t>;

using testutil::FlipChunkByte;
using testutil::Numel;
using testutil::RandomBytes;

// A temporary folder for this file's stores.
struct TempDir : testutil::TempDir {
  TempDir() : testutil::TempDir("seedstore-h5test") {}
};

// Copies `box` of a whole row-major tensor into out.
inline void Extract(const std::vector<uint8_t>& whole, const Shape& shape, const Region& box,
                    size_t es, uint8_t* out) {
  const int rank = static_cast<int>(shape.size());
  const uint64_t n = box.Count();
  std::vector<uint64_t> idx(rank);
  for (uint64_t q = 0; q < n; ++q) {
    uint64_t r = q, flat = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const uint64_t ext = box.stop[d] - box.start[d];
      idx[d] = box.start[d] + r % ext;
      r /= ext;
    }
    for (int d = 0; d < rank; ++d) flat = flat * shape[d] + idx[d];
    std::memcpy(out + q * es, whole.data() + flat * es, es);
  }
}

inline BoxSource FromWhole(const std::vector<uint8_t>* whole, Shape shape, size_t es) {
  return [whole, shape, es](const Region& box, void* out) {
    Extract(*whole, shape, box, es, static_cast<uint8_t*>(out));
    return Status::Ok();
  };
}

inline Region RandomBox(const Shape& shape, std::mt19937_64& g) {
  Region r = WholeRegion(static_cast<int>(shape.size()), shape.data());
  for (size_t d = 0; d < shape.size(); ++d) {
    const uint64_t a = g() % (shape[d] + 1), b = g() % (shape[d] + 1);
    r.start[d] = std::min(a, b);
    r.stop[d] = std::max(a, b);
  }
  return r;
}

inline const DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kU8,
                                   DType::kU16, DType::kU32, DType::kU64,  DType::kI8,  DType::kI16,
                                   DType::kI32, DType::kI64, DType::kBool};

inline TensorSpec Spec(const std::string& name, Shape shape, DType dt, Dist dist,
                       double scale = 1.0) {
  TensorSpec t;
  t.name = name;
  t.shape = std::move(shape);
  t.dtype = dt;
  t.init.dist = dist;
  t.init.scale = scale;
  return t;
}

}  // namespace seedstore::h5storetest
