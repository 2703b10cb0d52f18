// Random models and layouts for the property tests of multi-rank operations
// (test_reshard_random.cc, test_verify_random.cc): shapes that make boundaries likely (0-d,
// empty, one-element, prime, up to 4-d), every dtype, dense (random bytes) and lazy tensors;
// meshes of 1-3 axes with PartitionSpec (nested axes), DTensor, flat and replicated
// placements, uneven and empty shards.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/h5store.h"
#include "store/spec.h"
#include "tests/rank_test_util.h"

namespace seedstore {
namespace ranktest {

inline uint64_t EnvU64(const char* name, uint64_t dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : dflt;
}

struct Model {
  uint64_t seed = 0;               // root seed of the lazy tensors
  std::vector<TensorSpec> lazy;    // lazy tensors (from a spec)
  std::vector<std::string> names;  // every tensor, in store order
  std::map<std::string, std::vector<uint64_t>> shapes;
  std::map<std::string, DType> dtypes;
  std::map<std::string, std::vector<unsigned char>> values;  // every tensor, whole, row-major
};

// A shape of 0-4 dims drawn from sizes that make boundaries likely (0, 1, primes), at most
// ~6000 elements.
inline std::vector<uint64_t> RandomShape(std::mt19937_64& rng) {
  static const uint64_t sizes[] = {0, 1, 1, 2, 3, 5, 7, 8, 11, 13, 16, 17, 31, 37, 64};
  for (;;) {
    const int rank = static_cast<int>(rng() % 5);
    std::vector<uint64_t> s(rank);
    uint64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= (s[d] = sizes[rng() % (sizeof sizes / sizeof *sizes)]);
    if (n <= 6000) return s;
  }
}

inline Model RandomModel(std::mt19937_64& rng, uint64_t seed) {
  static const DType dtypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kU8,
                                 DType::kU16, DType::kU32, DType::kU64,  DType::kI8,  DType::kI16,
                                 DType::kI32, DType::kI64, DType::kBool};
  static const char* lazy_dtypes[] = {"float32", "bfloat16", "float16", "float64"};
  Model m;
  m.seed = seed % 1000;
  const int n = 3 + static_cast<int>(rng() % 5);
  nlohmann::json spec = {{"seedstore", 1}, {"seed", m.seed}, {"tensors", nlohmann::json::array()}};
  for (int k = 0; k < n; ++k) {
    std::string name = std::to_string(k);
    name.insert(name.begin(), 't');
    const std::vector<uint64_t> shape = RandomShape(rng);
    m.names.push_back(name);
    m.shapes[name] = shape;
    if (rng() % 4 == 0) {
      spec["tensors"].push_back({{"name", name},
                                 {"shape", shape},
                                 {"dtype", lazy_dtypes[rng() % 4]},
                                 {"init", {{"dist", "normal"}}}});
      continue;
    }
    const DType dt = dtypes[rng() % (sizeof dtypes / sizeof *dtypes)];
    m.dtypes[name] = dt;
    uint64_t elems = 1;
    for (uint64_t s : shape) elems *= s;
    std::vector<unsigned char> v(elems * DTypeSize(dt));
    for (auto& b : v) b = static_cast<unsigned char>(rng());
    if (dt == DType::kBool)
      for (auto& b : v) b &= 1;
    m.values[name] = std::move(v);
  }
  auto parsed = ModelSpec::Parse(spec.dump(), "random model");
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  for (const TensorSpec& t : parsed->tensors) {
    m.lazy.push_back(t);
    m.dtypes[t.name] = t.dtype;
    auto l = LazyTensor::Resolve(t, parsed->seed);
    EXPECT_TRUE(l.ok());
    std::vector<unsigned char> v(l->RegionBytes(WholeTensor(t.shape)));
    EXPECT_TRUE(l->Materialize(WholeTensor(t.shape), v.data(), CpuOptions{1}).ok());
    m.values[t.name] = std::move(v);
  }
  return m;
}

// The bytes of region r of a whole row-major tensor.
inline std::vector<unsigned char> Slice(const std::vector<unsigned char>& whole, const Region& r,
                                        size_t es) {
  if (r.flat) return {whole.begin() + r.begin * es, whole.begin() + r.end * es};
  std::vector<unsigned char> out;
  if (r.Count() == 0) return out;
  const uint64_t run = r.RunLength(), runs = r.Count() / run;
  for (uint64_t q = 0; q < runs; ++q)
    out.insert(out.end(), whole.begin() + r.RunBase(q) * es,
               whole.begin() + (r.RunBase(q) + run) * es);
  return out;
}

// A random box (mostly non-empty) or flat range of a tensor of `shape`, one time in two each.
inline Region RandomRegion(const std::vector<uint64_t>& shape, std::mt19937_64& rng) {
  Region r = WholeTensor(shape);
  if (rng() % 2) {
    uint64_t n = 1;
    for (uint64_t s : shape) n *= s;
    uint64_t x = rng() % (n + 1), y = rng() % (n + 1);
    if (x > y) std::swap(x, y);
    r.flat = true, r.begin = x, r.end = y;
    return r;
  }
  for (int d = 0; d < r.rank; ++d) {
    uint64_t x = rng() % (shape[d] + 1), y = rng() % (shape[d] + 1);
    if (x > y) std::swap(x, y);
    if (rng() % 4) {  // mostly non-empty
      y = std::max(y, std::min<uint64_t>(x + 1, shape[d]));
      x = std::min(x, y == 0 ? 0 : y - 1);
    }
    r.start[d] = x, r.stop[d] = y;
  }
  return r;
}

// A random mesh of 1-3 axes (world <= 8) and a random placement for each tensor.
inline std::string RandomLayout(std::mt19937_64& rng, const Model& m, const std::string& file) {
  static const char* axis_names[] = {"a", "b", "c"};
  int axes = 1 + static_cast<int>(rng() % 3);
  std::vector<int> sizes;
  int world = 1;
  for (int k = 0; k < axes; ++k) {
    int s = 1 + static_cast<int>(rng() % 3);
    if (world * s > 8) s = 1;
    sizes.push_back(s);
    world *= s;
  }
  nlohmann::json names = nlohmann::json::array();
  for (int k = 0; k < axes; ++k) names.push_back(axis_names[k]);
  nlohmann::json placements = nlohmann::json::array();
  for (const std::string& name : m.names) {
    const std::vector<uint64_t>& shape = m.shapes.at(name);
    const int rank = static_cast<int>(shape.size());
    std::vector<int> order(axes);
    for (int k = 0; k < axes; ++k) order[k] = k;
    std::shuffle(order.begin(), order.end(), rng);
    switch (rng() % 4) {
      case 0:  // replicated (no rule)
        break;
      case 1: {  // PartitionSpec: each axis shards at most one dim, several may nest on one
        if (rank == 0) break;
        nlohmann::json spec = nlohmann::json::array();
        for (int d = 0; d < rank; ++d) spec.push_back(nlohmann::json::array());
        for (int a : order)
          if (rng() % 3 != 0) spec[rng() % rank].push_back(axis_names[a]);
        for (auto& e : spec)
          if (e.empty()) e = nullptr;
          else if (e.size() == 1) e = e[0];
        placements.push_back({{"match", name}, {"spec", spec}});
        break;
      }
      case 2: {  // DTensor: one entry per mesh axis
        if (rank == 0) break;
        nlohmann::json dt = nlohmann::json::array();
        for (int k = 0; k < axes; ++k)
          dt.push_back(rng() % 3 == 0
                           ? std::string("Replicate()")
                           : "Shard(" + std::to_string(static_cast<int>(rng() % rank)) + ")");
        placements.push_back({{"match", name}, {"dtensor", dt}});
        break;
      }
      default: {  // flat over a random subset of the axes, in a random order
        nlohmann::json fl = nlohmann::json::array();
        for (int a : order)
          if (rng() % 2) fl.push_back(axis_names[a]);
        placements.push_back({{"match", name}, {"flat", fl}});
      }
    }
  }
  const nlohmann::json layout = {{"mesh", {{"axes", names}, {"shape", sizes}}},
                                 {"placements", placements}};
  return ranktest::Write(file, layout.dump(1));
}

// Writes the model as one store at `path` (lazy tensors lazy, the others dense, in order).
inline void WriteModelStore(const Model& m, const std::string& path, const WriteOptions& wo) {
  auto w = StoreWriter::Create(path, m.seed, Generator::kThreefry, wo);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  for (const std::string& name : m.names) {
    const TensorSpec* lazy = nullptr;
    for (const TensorSpec& l : m.lazy)
      if (l.name == name) lazy = &l;
    Status st = lazy ? (*w)->AddLazy(*lazy)
                     : (*w)->AddDense(name, m.shapes.at(name), m.dtypes.at(name),
                                      static_cast<const void*>(m.values.at(name).data()));
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  ASSERT_TRUE((*w)->Commit().ok());
}

}  // namespace ranktest
}  // namespace seedstore
