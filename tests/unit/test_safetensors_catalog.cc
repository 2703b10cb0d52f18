// Safetensors files (one, or a Hugging Face index over several) as a Catalog: random boxes and
// flat ranges read back exactly (0-d, empty, one-element, prime-sized tensors), whole-tensor
// fingerprints equal to those of the same bytes in a store, and malformed indexes refused with
// the file and tensor named. (The Python side: tests/py/test_h5_interop.py, files written by
// the safetensors package.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "io/h5store.h"
#include "io/interop.h"
#include "io/open.h"
#include "tests/store_test_util.h"

namespace seedstore {
namespace {

using Shape = std::vector<uint64_t>;
using testutil::Numel;
using testutil::RandomBytes;

struct Item {
  std::string name;
  Shape shape;
  DType dtype;
  std::vector<uint8_t> bytes;
};

void WriteFile(const std::string& path, const std::vector<Item>& items) {
  SafetensorsWriter w;
  for (const Item& it : items)
    w.Add(it.name, it.dtype, it.shape, [&it](void* dst) {
      if (!it.bytes.empty())
        std::memcpy(dst, it.bytes.data(), it.bytes.size());  // empty: dst may be null
      return Status::Ok();
    });
  ASSERT_TRUE(w.Write(path, {}).ok());
}

// A safetensors file of header text `header` (exactly these bytes, no padding) and data bytes
// `data`, as another writer (or a corrupter) would make it.
void WriteRawFile(const std::string& path, const std::string& header, const std::string& data) {
  std::string len(8, '\0');
  for (int k = 0; k < 8; ++k)
    len[k] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * k));
  std::ofstream(path, std::ios::binary) << len << header << data;
}

// The header of `entries` ({name: {dtype, shape, data_offsets}}) padded with spaces to 8 bytes.
std::string Header(const nlohmann::json& entries) {
  std::string h = entries.dump();
  h.resize((h.size() + 7) / 8 * 8, ' ');
  return h;
}

nlohmann::json Entry(const char* dtype, Shape shape, uint64_t begin, uint64_t end) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

// Element q of `box` (row-major in the box) is element `flat` of the tensor.
uint64_t FlatOf(const Shape& shape, const Region& box, uint64_t q) {
  uint64_t flat = 0, stride = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    const uint64_t ext = box.stop[d] - box.start[d];
    flat += (box.start[d] + q % ext) * stride;
    q /= ext;
    stride *= shape[d];
  }
  return flat;
}

TEST(SafetensorsCatalog, BoxesAndFlatRangesReadExactlyAcrossAnIndex) {
  testutil::TempDir dir("seedstore-stcat");
  std::mt19937_64 g(3);
  const std::vector<std::pair<Shape, DType>> kinds = {
      {{}, DType::kBF16},           {{0}, DType::kF32},      {{1}, DType::kU8},
      {{3, 0, 2}, DType::kF16},     {{997}, DType::kI64},    {{31, 67}, DType::kF32},
      {{5, 6, 7, 3}, DType::kBF16}, {{2, 257}, DType::kBool}};
  std::vector<Item> items;
  for (size_t k = 0; k < kinds.size(); ++k) {
    const auto& [shape, dt] = kinds[k];
    std::vector<uint8_t> b = RandomBytes(Numel(shape) * DTypeSize(dt), g());
    if (dt == DType::kBool)
      for (auto& x : b) x &= 1;
    items.push_back({"t" + std::to_string(k), shape, dt, std::move(b)});
  }
  // Two files and the index that maps each tensor to its file.
  const std::vector<Item> first(items.begin(), items.begin() + 3),
      second(items.begin() + 3, items.end());
  WriteFile(dir / "m-00001-of-00002.safetensors", first);
  WriteFile(dir / "m-00002-of-00002.safetensors", second);
  nlohmann::json map = nlohmann::json::object();
  for (size_t k = 0; k < items.size(); ++k)
    map[items[k].name] = k < 3 ? "m-00001-of-00002.safetensors" : "m-00002-of-00002.safetensors";
  std::ofstream(dir / "m.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
  ASSERT_TRUE(IsSafetensorsSource(dir / "m.safetensors.index.json"));
  auto opened = OpenCatalog(dir / "m.safetensors.index.json");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const Catalog& c = **opened;
  ASSERT_EQ(c.tensors().size(), items.size());
  for (size_t k = 0; k < items.size(); ++k) {
    const TensorRecord& t = c.tensors()[k];
    const Item& it = items[k];
    ASSERT_EQ(t.name, it.name);
    ASSERT_EQ(t.shape, it.shape);
    ASSERT_EQ(t.dtype, it.dtype);
    ASSERT_FALSE(t.lazy);
    const size_t es = DTypeSize(it.dtype);
    for (int trial = 0; trial < 40; ++trial) {
      Region r = WholeTensor(it.shape);
      if (trial % 2 && !it.shape.empty()) {
        for (size_t d = 0; d < it.shape.size(); ++d) {
          const uint64_t a = g() % (it.shape[d] + 1), b = g() % (it.shape[d] + 1);
          r.start[d] = std::min(a, b);
          r.stop[d] = std::max(a, b);
        }
      } else if (trial % 4 == 2 && Numel(it.shape) > 0) {
        const uint64_t n = Numel(it.shape), a = g() % (n + 1), b = g() % (n + 1);
        r = FlatRegion(it.shape, std::min(a, b), std::max(a, b));
      }
      std::vector<uint8_t> got(r.Count() * es, 0xAB), want(r.Count() * es);
      for (uint64_t q = 0; q < r.Count(); ++q) {
        const uint64_t flat = r.flat ? r.begin + q : FlatOf(it.shape, r, q);
        std::memcpy(want.data() + q * es, it.bytes.data() + flat * es, es);
      }
      ASSERT_TRUE(c.Read(k, r, got.data()).ok()) << it.name << " " << DescribeRegion(r);
      ASSERT_EQ(got, want) << it.name << " " << DescribeRegion(r);
    }
    // The fingerprint is that of the same bytes as a dense tensor anywhere (docs/FORMAT.md 3);
    // read in slabs of any size, down to one element, it adds up to the same.
    const Fingerprint want = FingerprintOf(t, WholeTensor(it.shape), it.bytes.data());
    auto f = c.FingerprintRegion(k, WholeTensor(it.shape));
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(*f, want) << it.name;
    for (uint64_t slab : {uint64_t{1}, uint64_t{7}, uint64_t{100}, uint64_t{4096}}) {
      auto s = FingerprintBySlabs(c, k, WholeTensor(it.shape), CpuOptions{1}, slab);
      ASSERT_TRUE(s.ok());
      EXPECT_EQ(*s, want) << it.name << " slabs of " << slab;
      if (Numel(it.shape) > 2) {
        const Region flat = FlatRegion(it.shape, 1, Numel(it.shape) - 1);
        auto sf = FingerprintBySlabs(c, k, flat, CpuOptions{1}, slab);
        ASSERT_TRUE(sf.ok());
        EXPECT_EQ(*sf, FingerprintOf(t, flat, it.bytes.data() + DTypeSize(it.dtype))) << it.name;
      }
    }
  }
  // A region outside the tensor is refused with the file and tensor named.
  Region bad = WholeTensor(items[5].shape);
  bad.stop[0] += 1;
  std::vector<uint8_t> sink(bad.Count() * 4);
  const Status s = c.Read(5, bad, sink.data());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("m-00002-of-00002.safetensors"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("tensor 't5'"), std::string::npos) << s.ToString();
}

TEST(SafetensorsCatalog, MalformedIndexesAreNamed) {
  testutil::TempDir dir("seedstore-stcat");
  const Item a{"a", {4}, DType::kF32, std::vector<uint8_t>(16, 1)};
  const Item b{"b", {2}, DType::kF32, std::vector<uint8_t>(8, 2)};
  WriteFile(dir / "x.safetensors", {a, b});
  WriteFile(dir / "y.safetensors", {b});
  auto index = [&](const std::string& name, nlohmann::json map) {
    std::ofstream(dir / name) << nlohmann::json{{"weight_map", map}}.dump();
    return dir / name;
  };
  struct Case {
    std::string path, needle;
    Code code;
  };
  const std::vector<Case> cases = {
      {index("dup.index.json", {{"a", "x.safetensors"}, {"b", "y.safetensors"}}),
       "index file '" + (dir / "dup.index.json") + "': safetensors tensor 'b' is held by both",
       Code::kInvalidArgument},
      {index("lacks.index.json", {{"a", "y.safetensors"}}), "tensor 'a' is mapped to",
       Code::kNotFound},
      {index("far.index.json", {{"a", "../x.safetensors"}}), "must be a file in the index's folder",
       Code::kInvalidArgument},
      // A file that cannot be opened: the index and a tensor mapped to it named too.
      {index("gone.index.json", {{"a", "z.safetensors"}}),
       "index file '" + (dir / "gone.index.json") + "': tensor 'a' is mapped to '" +
           (dir / "z.safetensors") + "': safetensors file '" + (dir / "z.safetensors") +
           "': cannot open",
       Code::kNotFound},
      // Any JSON object with a weight_map is an index, and a weight_map must be an object.
      {index("list.index.json", nlohmann::json::array({"x.safetensors"})),
       "index file '" + (dir / "list.index.json") +
           "': weight_map is not an object ([\"x.safetensors\"])",
       Code::kInvalidArgument},
      {index("null.index.json", nullptr), "weight_map is not an object (null)",
       Code::kInvalidArgument},
  };
  for (const Case& k : cases) {
    EXPECT_TRUE(IsSafetensorsSource(k.path)) << k.path;
    auto c = OpenCatalog(k.path);  // as every command opens a source
    ASSERT_FALSE(c.ok()) << k.path;
    EXPECT_EQ(c.status().code(), k.code) << c.status().ToString();
    EXPECT_NE(c.status().message().find(k.needle), std::string::npos) << c.status().ToString();
  }
  // A rank's shard file: seedstore.shards must place each tensor it names inside its global
  // shape, with the tensor's own shape.
  auto shard_file = [&](const std::string& name, const std::string& meta, Shape shape = {4}) {
    SafetensorsWriter w;
    w.Add("a", DType::kF32, shape, [](void* d) {
      std::memset(d, 0, 16);  // shapes of 4 elements
      return Status::Ok();
    });
    EXPECT_TRUE(w.Write(dir / name, {{"seedstore.shards", meta}}).ok());
    return dir / name;
  };
  {
    auto ok = SafetensorsCatalog::Open(
        shard_file("s0.safetensors", R"({"a": {"global_shape": [10], "flat": [2, 6]}})"));
    ASSERT_TRUE(ok.ok()) << ok.status().ToString();
    ASSERT_TRUE((*ok)->tensors()[0].piece.has_value());
    EXPECT_EQ((*ok)->tensors()[0].piece->begin, 2u);
    EXPECT_EQ((*ok)->tensors()[0].piece->shape[0], 10u);
    auto box = SafetensorsCatalog::Open(
        shard_file("s1.safetensors",
                   R"({"a": {"global_shape": [3, 8], "start": [1, 4], "stop": [2, 8]}})", {1, 4}));
    ASSERT_TRUE(box.ok()) << box.status().ToString();
    EXPECT_EQ((*box)->tensors()[0].piece->stop[1], 8u);
  }
  const std::vector<std::pair<std::string, std::string>> bad_shards = {
      {R"({"a": {"global_shape": [10], "flat": [2, 7]}})", "does not have the tensor's shape"},
      {R"({"a": {"global_shape": [3], "flat": [0, 4]}})", "tensor 'a'"},
      {R"({"b": {"global_shape": [4], "flat": [0, 4]}})", "names tensor 'b'"},
      {R"({"a": {"flat": [0, 4]}})", "no global_shape"},
      {R"({"a": {"global_shape": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,4], "flat": [0, 4]}})",
       "rank 17 exceeds 16"},
      {R"({"a": {"global_shape": [4611686018427387904, 4], "flat": [0, 4]}})", "shape overflows"},
      {R"([1, 2])", "not a JSON object"},
      // A key repeated in the metadata's JSON is named (it said only "not a JSON object").
      {R"({"a": {"global_shape": [4], "flat": [0, 4]}, "a": {"global_shape": [8], "flat": [0, 4]}})",
       "is not a JSON object: malformed JSON: duplicate key \"a\" in the top-level object"}};
  for (size_t k = 0; k < bad_shards.size(); ++k) {
    auto c = SafetensorsCatalog::Open(
        shard_file("bad" + std::to_string(k) + ".safetensors", bad_shards[k].first));
    ASSERT_FALSE(c.ok()) << bad_shards[k].first;
    EXPECT_EQ(c.status().code(), Code::kCorrupt) << c.status().ToString();
    EXPECT_NE(c.status().message().find(bad_shards[k].second), std::string::npos)
        << c.status().ToString();
    EXPECT_NE(c.status().message().find("bad" + std::to_string(k) + ".safetensors"),
              std::string::npos);
  }
  // Headers whose shapes no tensor can have: an element count past 2^64 that wraps to the
  // (zero) bytes given -- corrupt; or more dims than seedstore's regions hold (kMaxRank): a
  // valid file seedstore cannot read, UNSUPPORTED (it said CORRUPT) -- refused, never read.
  auto raw_header = [&](const std::string& name, const nlohmann::json& header,
                        const std::string& data) {
    WriteRawFile(dir / name, Header(header), data);
    return dir / name;
  };
  const std::vector<std::tuple<std::string, std::string, Code>> bad_headers = {
      {raw_header("rank17.safetensors",
                  {{"x",
                    {{"dtype", "F32"},
                     {"shape", std::vector<uint64_t>(17, 1)},
                     {"data_offsets", {0, 4}}}}},
                  std::string(4, '\0')),
       "shape has 17 dims; seedstore reads at most 16", Code::kUnsupported},
      {raw_header("wrap.safetensors",
                  {{"x",
                    {{"dtype", "U8"},
                     {"shape", {uint64_t{1} << 62, uint64_t{1} << 62, 4}},
                     {"data_offsets", {0, 0}}}}},
                  ""),
       "shape overflows", Code::kCorrupt}};
  for (const auto& [path, needle, code] : bad_headers) {
    auto c = SafetensorsCatalog::Open(path);
    ASSERT_FALSE(c.ok()) << path;
    EXPECT_EQ(c.status().code(), code) << c.status().ToString();
    EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().ToString();
    EXPECT_NE(c.status().message().find("tensor 'x'"), std::string::npos) << c.status().ToString();
  }
  // A JSON spec is not an index; a good index opens.
  std::ofstream(dir / "spec.json") << R"({"seedstore": 1, "tensors": []})";
  EXPECT_FALSE(IsSafetensorsSource(dir / "spec.json"));
  EXPECT_TRUE(SafetensorsCatalog::Open(
                  index("ok.index.json", {{"a", "x.safetensors"}, {"b", "x.safetensors"}}))
                  .ok());
}

// Tensors' bytes must not overlap: each tensor, in offset order, starts at or after the end of
// every earlier one -- also when an empty tensor lies between two that overlap (comparing only
// neighbours would miss that overlap). Gaps and empty tensors at a boundary are fine.
TEST(SafetensorsFile, OverlapsAreRefusedEvenBehindAnEmptyTensor) {
  testutil::TempDir dir("seedstore-stfile");
  const std::string data(100, '\x5a');
  struct Case {
    nlohmann::json header;
    std::string overlap;  // "" when the file is valid
  };
  const std::vector<Case> cases = {
      {{{"A", Entry("U8", {100}, 0, 100)},
        {"E", Entry("U8", {0}, 50, 50)},
        {"C", Entry("U8", {10}, 60, 70)}},
       "tensors 'A' [0, 100) and 'E' [50, 50) overlap"},
      {{{"A", Entry("U8", {100}, 0, 100)}, {"C", Entry("U8", {10}, 60, 70)}},
       "tensors 'A' [0, 100) and 'C' [60, 70) overlap"},
      {{{"A", Entry("U8", {50}, 0, 50)},
        {"B", Entry("U8", {10}, 10, 20)},
        {"C", Entry("U8", {10}, 40, 50)}},
       "tensors 'A' [0, 50) and 'B' [10, 20) overlap"},
      {{{"A", Entry("U8", {10}, 0, 10)}, {"B", Entry("U8", {10}, 0, 10)}}, "overlap"},
      // Valid: a gap, empty tensors at the ends of others and at the same offset.
      {{{"A", Entry("U8", {10}, 0, 10)}, {"G", Entry("U8", {10}, 20, 30)}}, ""},
      {{{"E0", Entry("U8", {0}, 0, 0)},
        {"A", Entry("U8", {10}, 0, 10)},
        {"E1", Entry("U8", {0}, 10, 10)},
        {"E2", Entry("U8", {0, 3}, 10, 10)},
        {"B", Entry("U8", {90}, 10, 100)}},
       ""},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const std::string path = dir / ("overlap" + std::to_string(k) + ".safetensors");
    WriteRawFile(path, Header(cases[k].header), data);
    auto f = SafetensorsFile::Open(path);
    if (cases[k].overlap.empty()) {
      EXPECT_TRUE(f.ok()) << f.status().ToString();
      continue;
    }
    ASSERT_FALSE(f.ok()) << cases[k].header.dump();
    EXPECT_EQ(f.status().code(), Code::kCorrupt) << f.status().ToString();
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().ToString();
    EXPECT_NE(f.status().message().find(cases[k].overlap), std::string::npos)
        << f.status().ToString();
  }
}

// A tensor named "__metadata__" would become the header's metadata, making a file that neither
// seedstore nor the safetensors package can read: every writer refuses it, naming the tensor,
// before anything is written -- no output left, an existing one untouched, no part of a split
// export written.
TEST(SafetensorsWriter, TheMetadataNameIsRefusedBeforeAnythingIsWritten) {
  testutil::TempDir dir("seedstore-stwrite");
  auto spec = ModelSpec::Parse(R"({"seedstore": 1, "seed": 0, "tensors": [
      {"name": "w", "shape": [3], "dtype": "float32", "init": {"dist": "ones"}},
      {"name": "__metadata__", "shape": [2], "dtype": "float32", "init": {"dist": "ones"}}]})",
                               "spec.json");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto model = SpecCatalog::Create(*spec, "spec.json");
  ASSERT_TRUE(model.ok());
  auto layout =
      Layout::Parse(R"({"mesh": {"axes": ["d"], "shape": [1]}, "placements": []})", "lay.json");
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const std::string existing = dir / "existing.safetensors";
  std::ofstream(existing) << "previous";
  auto expect_refused = [&](const Status& s, const std::string& path) {
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("tensor '__metadata__'"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
  };
  for (const std::string& out : {dir / "new.safetensors", existing}) {
    ExportOptions whole;
    expect_refused(ExportSafetensors(**model, out, whole).status(), out);
    ExportOptions rank0;
    rank0.layout = &*layout;
    expect_refused(ExportSafetensors(**model, out, rank0).status(), out);
    expect_refused(ExportSafetensorsFiles(**model, out, whole, 1).status(),
                   out);  // "w" would go first
    SafetensorsWriter w;
    w.Add("__metadata__", DType::kU8, {1}, [](void* d) {
      *static_cast<uint8_t*>(d) = 0;
      return Status::Ok();
    });
    expect_refused(w.Write(out, {}), out);
  }
  std::ifstream in(existing);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "previous");
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir.path()))
    left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"existing.safetensors"});
}

// A tensor name holding a NUL byte (valid JSON, "x\u0000b") is refused when a file is opened --
// UNSUPPORTED, as an unknown dtype is -- with the NUL shown escaped, so the message is not cut
// there and two such names are told apart; writers refuse such a name too.
TEST(SafetensorsFile, NamesHoldingANulByteAreRefusedAndShownEscaped) {
  testutil::TempDir dir("seedstore-stnul");
  const std::string path = dir / "nul.safetensors";
  WriteRawFile(
      path,
      Header({{"x", Entry("F32", {1}, 0, 4)}, {std::string("x\0b", 3), Entry("F32", {1}, 4, 8)}}),
      std::string(8, '\0'));
  for (const Status& s :
       {SafetensorsFile::Open(path).status(), SafetensorsCatalog::Open(path).status()}) {
    EXPECT_EQ(s.code(), Code::kUnsupported) << s.ToString();
    EXPECT_NE(s.message().find("safetensors file '" + path +
                               "' tensor 'x\\0b': a tensor name holding a NUL byte"),
              std::string::npos)
        << s.ToString();
    EXPECT_EQ(s.message().find('\0'), std::string::npos);
  }
  SafetensorsWriter w;
  w.Add(std::string("a\0", 2), DType::kU8, {1}, [](void* d) {
    *static_cast<uint8_t*>(d) = 0;
    return Status::Ok();
  });
  const Status s = w.Write(dir / "w.safetensors", {});
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("tensor 'a\\0'"), std::string::npos) << s.ToString();
  EXPECT_FALSE(std::filesystem::exists(dir / "w.safetensors"));
  EXPECT_EQ(Quoted(std::string("p\0q\0", 4)), "'p\\0q\\0'");
}

// Find looks a tensor up by name in a map (it was a linear scan, which made opening an index
// of n tensors O(n^2): 40,000 tensors in one file took 2 s to open through an index, 0.2 s
// alone); every name is found, also after the file is moved, and an absent one is not.
TEST(SafetensorsFile, FindLooksUpEveryTensorByName) {
  testutil::TempDir dir("seedstore-stfind");
  const int n = 5000;
  auto name = [](int k) { return "tensor" + std::to_string(k); };
  nlohmann::json header = nlohmann::json::object();
  for (int k = 0; k < n; ++k) header[name(k)] = Entry("U8", {1}, k, k + 1);
  WriteRawFile(dir / "many.safetensors", Header(header), std::string(n, '\1'));
  auto opened = SafetensorsFile::Open(dir / "many.safetensors");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  const SafetensorsFile f = std::move(*opened);
  for (int k = 0; k < n; ++k) {
    const SafetensorsEntry* e = f.Find(name(k));
    ASSERT_NE(e, nullptr) << k;
    EXPECT_EQ(e->name, name(k));
    EXPECT_EQ(e->begin, static_cast<uint64_t>(k));
  }
  EXPECT_EQ(f.Find(name(n)), nullptr);
  EXPECT_EQ(f.Find(""), nullptr);
}

// A rank's shard file (materialize / export --layout: seedstore.shards) holds pieces, as a
// distributed save's rank file does (TensorRecord::piece): each tensor's fingerprint is taken
// in the global tensor's frame -- equal to that of the same region of the model (what
// `fingerprint MODEL --layout L --rank R` prints) -- import keeps the piece record, export
// writes it back as seedstore.shards, and what would cut it again by a layout refuses it.
TEST(SafetensorsCatalog, ARanksShardFileHoldsPiecesInTheGlobalFrame) {
  testutil::TempDir dir("seedstore-stpiece");
  auto spec = ModelSpec::Parse(R"({"seedstore": 1, "seed": 5, "tensors": [
      {"name": "w", "shape": [10, 6], "dtype": "float32", "init": {"dist": "normal"}},
      {"name": "f", "shape": [7, 13], "dtype": "bfloat16", "init": {"dist": "uniform"}},
      {"name": "r", "shape": [5], "dtype": "int32", "init": {"dist": "constant", "value": 3}}]})",
                               "spec.json");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto model = SpecCatalog::Create(*spec, "spec.json");
  ASSERT_TRUE(model.ok());
  auto layout = Layout::Parse(R"({"mesh": {"axes": ["d"], "shape": [3]}, "placements": [
      {"match": "w", "spec": ["d", null]}, {"match": "f", "flat": ["d"]}]})",
                              "lay.json");
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  for (int rank = 0; rank < 3; ++rank) {
    const std::string file = dir / ("rank" + std::to_string(rank) + ".safetensors");
    ExportOptions e;
    e.layout = &*layout;
    e.rank = rank;
    ASSERT_TRUE(ExportSafetensors(**model, file, e).ok());
    const std::string store = dir / ("rank" + std::to_string(rank) + ".h5");
    ASSERT_TRUE(ImportSafetensors(file, store, ImportOptions{}).ok());
    const std::string again = dir / ("again" + std::to_string(rank) + ".safetensors");
    auto st = H5Store::Open(store);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    ASSERT_TRUE(ExportSafetensors(**st, again, ExportOptions{}).ok());
    for (const std::string& path : {file, store, again}) {
      auto c = OpenCatalog(path);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      ASSERT_EQ((*c)->tensors().size(), 3u) << path;
      for (size_t k = 0; k < 3; ++k) {
        const TensorRecord& t = (*c)->tensors()[k];
        const int g = (*model)->Find(t.name);
        ASSERT_GE(g, 0);
        auto shard = layout->ShardOf(t.name, (*model)->tensors()[g].shape, rank);
        ASSERT_TRUE(shard.ok());
        ASSERT_TRUE(t.piece.has_value()) << path << " " << t.name;
        EXPECT_TRUE(SameRegion(*t.piece, shard->region))
            << path << " " << t.name << " " << DescribeRegion(*t.piece);
        EXPECT_EQ(t.shape, LocalShape(shard->region)) << path << " " << t.name;
        auto got = (*c)->FingerprintRegion(k, WholeTensor(t.shape));
        auto want = (*model)->FingerprintRegion(g, shard->region);
        ASSERT_TRUE(got.ok() && want.ok());
        EXPECT_EQ(*got, *want) << path << " " << t.name;
        if (t.fingerprint) {
          EXPECT_EQ(*t.fingerprint, *want) << path << " " << t.name;  // the store's record
        }
      }
      // A layout places whole tensors: a piece is not cut again.
      ExportOptions re;
      re.layout = &*layout;
      const Status s = ExportSafetensors(**c, dir / "re.safetensors", re).status();
      EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
      EXPECT_NE(s.message().find("is a piece"), std::string::npos) << s.ToString();
      EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
    }
    // An update replaces a piece with the same piece only.
    ImportOptions update;
    update.update = true;
    EXPECT_TRUE(ImportSafetensors(again, store, update).ok());
    if (rank == 0) continue;
    const Status other = ImportSafetensors(dir / "rank0.safetensors", store, update).status();
    EXPECT_EQ(other.code(), Code::kInvalidArgument) << other.ToString();
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "re.safetensors"));
}

// --max-shard-size: the whole text is a decimal number (an integer, a fraction, an exponent)
// and an optional unit, or it is refused naming the text ("1.5.5" is not 1.5, though
// std::stod stops early there, and "1e3" is a number, not the unit 'e3').
TEST(ParseByteSize, TheWholeTextIsANumberAndAnOptionalUnit) {
  const std::pair<const char*, uint64_t> good[] = {{"1", 1},
                                                   {"1048576", 1048576},
                                                   {"5GB", 5000000000},
                                                   {"5gb", 5000000000},
                                                   {"2GiB", 2147483648},
                                                   {"1.5KB", 1500},
                                                   {".5KB", 500},
                                                   {"5.", 5},
                                                   {"1e3", 1000},
                                                   {"1E3", 1000},
                                                   {"1.5e3", 1500},
                                                   {"1e+3KB", 1000000},
                                                   {"2e-3MB", 2000},
                                                   {"1.9", 1},
                                                   {"500B", 500},
                                                   {"1TiB", 1099511627776}};
  for (const auto& [text, bytes] : good) {
    auto r = ParseByteSize(text);
    ASSERT_TRUE(r.ok()) << text << ": " << r.status().ToString();
    EXPECT_EQ(*r, bytes) << text;
  }
  const std::pair<const char*, const char*> bad[] = {
      {"1.5.5", "expected a number"}, {"5 GB", "expected a number"}, {" 5", "expected a number"},
      {"5GB ", "expected a number"},  {"-1", "expected a number"},   {"+1", "expected a number"},
      {"", "expected a number"},      {".", "expected a number"},    {"e3", "expected a number"},
      {"0x10", "expected a number"},  {"5GB!", "expected a number"}, {"1e", "unknown unit 'e'"},
      {"1EB", "unknown unit 'EB'"},   {"5XB", "unknown unit 'XB'"},  {"nan", "expected a number"},
      {"inf", "expected a number"},   {"0", "out of range"},         {"0.5", "out of range"},
      {"1e-3", "out of range"},       {"1e999", "out of range"},     {"10000PB", "unknown unit"},
      {"1e19", "out of range"}};
  for (const auto& [text, needle] : bad) {
    auto r = ParseByteSize(text);
    ASSERT_FALSE(r.ok()) << text << " accepted as " << *r;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << text;
    EXPECT_NE(r.status().message().find("size '" + std::string(text) + "'"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(needle), std::string::npos)
        << text << ": " << r.status().message();
  }
}

}  // namespace
}  // namespace seedstore
