// The shipped binary run as a user would (label cli): output bytes and exit codes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "io/safetensors.h"
#include "store/spec.h"
#include "tests/store_test_util.h"

namespace seedstore {
namespace {

struct Proc {
  int code = -1;
  std::string out, err;
};

std::string Bin() {
  const char* b = std::getenv("SEEDSTORE_BIN");
  return b ? b : "seedstore";
}

// This process's folder, removed when it exits (SEEDSTORE_KEEP_TMP=1 keeps it).
std::string TempDir() {
  static const testutil::TempDir dir("seedstore-cli");
  return dir.path();
}

// Runs `seedstore <args>`, capturing stdout and stderr.
Proc Exec(const std::string& args) {
  const std::string err_path = TempDir() + "/stderr.txt";
  const std::string cmd = Bin() + " " + args + " 2>" + err_path;
  Proc r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  return r;
}

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

const char* kSpec = R"({"seedstore": 1, "seed": 7, "tensors": [
  {"name": "act", "shape": [8, 6, 10], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.05}, "key": {"seed": 43}},
  {"name": "norm", "shape": [10], "dtype": "float32", "init": {"dist": "ones"}},
  {"name": "flat.w", "shape": [7, 13], "dtype": "float32", "init": {"dist": "uniform"}, "generator": "philox"},
  {"name": "layers.0.w", "shape": [9, 5], "dtype": "float16", "init": {"dist": "truncated_normal"}}]})";
const char* kLayout = R"J({"mesh": {"axes": ["data", "pipeline", "tensor"], "shape": [2, 2, 2]},
  "placements": [{"match": "act", "spec": [["data", "pipeline"], null, "tensor"]},
                 {"match": "layers.*.w", "dtensor": ["Shard(0)", "Replicate()", "Shard(1)"]},
                 {"match": "flat.*", "flat": ["data", "pipeline"]}]})J";

TEST(Cli, GenRawMatchesJax) {
  // jax.random.uniform(jax.random.key(0), (3,)) -> bits 1064475214 1064993846 1051337244.
  const Proc r = Exec("gen --shape 3 --dtype float32 --init '{\"dist\":\"uniform\"}' --seed 0 --format raw");
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_EQ(r.out.size(), 12u);
  uint32_t v[3];
  std::memcpy(v, r.out.data(), 12);
  EXPECT_EQ(v[0], 1064475214u);
  EXPECT_EQ(v[1], 1064993846u);
  EXPECT_EQ(v[2], 1051337244u);
}

TEST(Cli, GenBoxEqualsSliceOfWhole) {
  const Proc whole = Exec("gen --shape 4,5,6 --dtype bfloat16 --init '{\"dist\":\"normal\"}' --seed 3");
  const Proc box = Exec("gen --shape 4,5,6 --dtype bfloat16 --init '{\"dist\":\"normal\"}' --seed 3 --box 1:3,2:5,0:6");
  ASSERT_EQ(whole.code, 0);
  ASSERT_EQ(box.code, 0);
  ASSERT_EQ(box.out.size(), 2u * 3 * 6 * 2);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(box.out.substr((i * 3 + j) * 12, 12), whole.out.substr((((1 + i) * 5) + 2 + j) * 12, 12));
}

TEST(Cli, GenFormats) {
  const Proc t = Exec("gen --shape 2 --dtype uint32 --init '{\"dist\":\"bits\"}' --seed 1701 --format text");
  ASSERT_EQ(t.code, 0);
  EXPECT_EQ(t.out, "1111271205\n2679469115\n");
  const std::string npy = TempDir() + "/x.npy";
  const Proc n = Exec("gen --shape 2,3 --dtype float32 --init '{\"dist\":\"zeros\"}' --format npy -o " + npy);
  ASSERT_EQ(n.code, 0) << n.err;
  std::ifstream f(npy, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(f)), {});
  ASSERT_GE(data.size(), 64u + 24u);
  EXPECT_EQ(data.substr(0, 6), "\x93NUMPY");
  EXPECT_NE(data.find("'shape': (2, 3)"), std::string::npos);
  EXPECT_EQ(data.size() % 16, (64u + 24u) % 16);
}

TEST(Cli, BadInputGivesNamedErrorAndExitCode) {
  struct Case {
    std::string args, needle;
    int code;
  };
  const std::string spec = Write("spec.json", kSpec);
  const std::string layout = Write("layout.json", kLayout);
  const std::string twice = Write("twice.json", R"({"mesh": {"axes": ["a"], "shape": [2]}, "placements": [{"match": "*", "spec": ["a", "a"]}]})");
  const Case cases[] = {
      {"gen --shape 3 --dtype float99", "unknown dtype 'float99'", 2},
      {"gen --shape 3 --init '{\"dist\":\"cauchy\"}'", "unknown distribution 'cauchy'", 2},
      {"gen --shape 3 --init '{\"dist\":'", "--init: malformed JSON", 2},
      {"gen --shape -3", "--shape", 2},
      {"gen --shape 4294967296,4294967296", "overflows", 2},
      {"gen --shape 3 --init '{\"dist\":\"truncated_normal\",\"lower\":2,\"upper\":1}'", "lower (2", 2},
      {"gen --shape 3 --box 0:4", "outside the tensor", 2},
      {"gen --shape 3 --key 1", "--key '1'", 2},
      {"fingerprint /nonexistent/spec.json", "cannot open", 3},
      {"fingerprint " + spec + " --layout " + layout + " --rank 8", "--rank 8 is outside the mesh", 2},
      {"fingerprint " + spec + " --layout " + twice + " --rank 0", "used twice", 2},
      {"materialize " + spec + " --layout " + layout + " --rank -1 -o /tmp/x.safetensors", "--rank: -1 is out of range", 2},
  };
  for (const auto& c : cases) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.find("terminate"), std::string::npos) << r.err;  // never a crash
  }
}

// Shard fingerprints from every rank sum (over distinct shards) to the whole tensor's, and
// the materialized shards reassemble into the whole tensor.
TEST(Cli, FingerprintsOfRanksComposeAndShardsReassemble) {
  const std::string spec = Write("spec.json", kSpec);
  const std::string layout = Write("layout.json", kLayout);
  const Proc whole = Exec("fingerprint " + spec + " --json");
  ASSERT_EQ(whole.code, 0) << whole.err;
  std::map<std::string, Fingerprint> want, got;
  for (const auto& e : nlohmann::json::parse(whole.out))
    want[e["name"]] = *ParseFingerprintHex(e["fingerprint"].get<std::string>());
  std::map<std::string, std::set<std::string>> seen;  // tensor -> regions counted
  for (int rank = 0; rank < 8; ++rank) {
    const Proc r = Exec("fingerprint " + spec + " --layout " + layout + " --rank " + std::to_string(rank) + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    for (const auto& e : nlohmann::json::parse(r.out)) {
      if (!seen[e["name"]].insert(e["region"]).second) continue;  // replicas count once
      got[e["name"]].Add(*ParseFingerprintHex(e["fingerprint"].get<std::string>()));
    }
    const std::string out = TempDir() + "/rank" + std::to_string(rank) + ".safetensors";
    const Proc m = Exec("materialize " + spec + " --layout " + layout + " --rank " + std::to_string(rank) + " -o " + out);
    ASSERT_EQ(m.code, 0) << m.err;
    auto f = SafetensorsFile::Open(out);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const auto shards = nlohmann::json::parse(f->metadata().at("seedstore.shards"));
    ASSERT_TRUE(shards.contains("act"));
    // Each act shard equals the corresponding box from `gen`.
    const auto& a = shards["act"];
    std::string box;
    for (int d = 0; d < 3; ++d)
      box += std::string(d ? "," : "") + std::to_string(a["start"][d].get<uint64_t>()) + ":" + std::to_string(a["stop"][d].get<uint64_t>());
    const Proc g = Exec("gen --shape 8,6,10 --dtype bfloat16 --init '{\"dist\":\"normal\",\"scale\":0.05}' --seed 43 --box " + box);
    ASSERT_EQ(g.code, 0);
    const SafetensorsEntry* e = f->Find("act");
    ASSERT_NE(e, nullptr);
    std::string bytes(e->end - e->begin, '\0');
    ASSERT_TRUE(f->Read(*e, bytes.data()).ok());
    EXPECT_EQ(bytes, g.out) << "rank " << rank;
  }
  for (const auto& [name, fp] : want) EXPECT_EQ(FingerprintHex(got[name]), FingerprintHex(fp)) << name;
}

// `diff --json`'s rows by tensor name (copied out of the parsed document).
std::map<std::string, nlohmann::json> DiffRows(const std::string& json_out) {
  const auto j = nlohmann::json::parse(json_out);
  std::map<std::string, nlohmann::json> rows;
  for (const auto& t : j["tensors"]) rows[t["name"]] = t;
  return rows;
}

// `diff` across every kind of source holding the same weights: the spec, its safetensors
// export, that file imported as a dense store, the store and the file each resharded into a
// distributed save under the 8-rank layout (pieces in rank files); with and without --recorded.
// Then ranks' shard files (materialize) against the whole model and against each other.
TEST(Cli, DiffProvesTheSameWeightsAcrossFormatsAndLayouts) {
  const std::string spec = Write("spec.json", kSpec);
  const std::string layout = Write("layout.json", kLayout);
  const std::string dir = TempDir();
  const std::string st = dir + "/all.safetensors", dense = dir + "/dense.h5", save = dir + "/save.h5";
  ASSERT_EQ(Exec("export " + spec + " -o " + st).code, 0);
  ASSERT_EQ(Exec("import " + st + " -o " + dense + " --chunk-bytes 64").code, 0);
  const Proc rs = Exec("reshard " + dense + " --layout " + layout + " -o " + save);
  ASSERT_EQ(rs.code, 0) << rs.err;
  const std::string from_st = dir + "/from_st.h5";  // a safetensors file resharded straight away
  const Proc rs2 = Exec("reshard " + st + " --layout " + layout + " -o " + from_st);
  ASSERT_EQ(rs2.code, 0) << rs2.err;
  for (const std::string& pair : {spec + " " + st, st + " " + dense, dense + " " + save, spec + " " + save,
                                  save + " " + spec + " --recorded", dense + " " + save + " --recorded",
                                  from_st + " " + save + " --recorded"}) {
    const Proc d = Exec("diff " + pair + " --json");
    ASSERT_EQ(d.code, 0) << pair << "\n" << d.out << d.err;
    const auto j = nlohmann::json::parse(d.out);
    EXPECT_TRUE(j["identical"].get<bool>()) << pair;
    EXPECT_EQ(j["counts"]["identical"].get<int>(), 4) << pair;
  }
  // Lazy on both sides with the same resolved spec: identical by the spec, nothing generated.
  // Another key for one tensor: that one is generated on both sides, and differs.
  const std::string lazy = dir + "/lazy.h5";
  ASSERT_EQ(Exec("init --spec " + spec + " -o " + lazy).code, 0);
  {
    const Proc d = Exec("diff " + spec + " " + lazy + " --json");
    ASSERT_EQ(d.code, 0) << d.err;
    const auto j = nlohmann::json::parse(d.out);
    for (const auto& t : j["tensors"]) EXPECT_EQ(t["by"], "spec") << t.dump();
    std::string other = kSpec;
    const std::string key43 = "\"seed\": 43";
    other.replace(other.find(key43), key43.size(), "\"seed\": 44");
    const Proc e = Exec("diff " + lazy + " " + Write("spec44.json", other) + " --json");
    EXPECT_EQ(e.code, 7) << e.err;
    const auto je = nlohmann::json::parse(e.out);
    for (const auto& t : je["tensors"]) {
      EXPECT_EQ(t["by"], t["name"] == "act" ? "fingerprint" : "spec") << t.dump();
      EXPECT_EQ(t["result"], t["name"] == "act" ? "values-differ" : "identical") << t.dump();
    }
  }
  // A rank's shard file (materialize) is compared with the same region of the other side: all
  // 4 identical. Rank 1 differs from rank 0 only along "tensor": it holds other shards of `act`
  // and `layers.0.w`, and the same `norm` (replicated) and `flat.w` (flat over data x pipeline).
  // One flipped bit in rank 0's file names exactly the tensor it lies in.
  const std::string r0 = dir + "/rank0.safetensors", r1 = dir + "/rank1.safetensors";
  ASSERT_EQ(Exec("materialize " + spec + " --layout " + layout + " --rank 0 -o " + r0).code, 0);
  ASSERT_EQ(Exec("materialize " + spec + " --layout " + layout + " --rank 1 -o " + r1).code, 0);
  for (const std::string& other : {spec, save, st}) {
    const Proc d = Exec("diff " + r0 + " " + other + " --json");
    ASSERT_EQ(d.code, 0) << other << "\n" << d.out << d.err;
    const auto j = nlohmann::json::parse(d.out);
    for (const auto& t : j["tensors"]) {
      EXPECT_EQ(t["result"], "identical") << t.dump();
      EXPECT_FALSE(t["shard"].is_null()) << t.dump();
    }
  }
  // Disjoint shards are not compared and are no difference (they were counted as differing).
  {
    const Proc d = Exec("diff " + r0 + " " + r1 + " --json");
    EXPECT_EQ(d.code, 0) << d.out << d.err;
    const auto j = nlohmann::json::parse(d.out);
    for (const auto& t : j["tensors"])
      EXPECT_EQ(t["result"], t["name"] == "norm" || t["name"] == "flat.w" ? "identical" : "other-shards") << t.dump();
    EXPECT_EQ(j["compared"], 2);
    EXPECT_EQ(j["counts"]["other-shards"], 2);
    const Proc text = Exec("diff " + r0 + " " + r1);
    EXPECT_EQ(text.code, 0) << text.out << text.err;
    EXPECT_NE(text.out.find("2 compared: 2 identical"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("2 not compared: the two sides hold disjoint shards"), std::string::npos) << text.out;
  }
  // Two ranks' files of other layouts are compared on the overlap of their shards. Under L3
  // (3 ranks, uneven: act rows 0:3, 3:6, 6:8; flat.w 0:31, 31:62, 62:91), rank 1 and rank 2
  // of the 8-rank layout (act rows 0:2 cols 5:10 / rows 2:4 cols 0:5; flat.w 23:46) overlap in
  // part on both sides. The overlap equals the whole model's same elements; a model with
  // another key for act differs there, and only there.
  {
    const std::string l3 = Write("layout3.json", R"({"mesh": {"axes": ["x"], "shape": [3]},
      "placements": [{"match": "act", "spec": ["x"]}, {"match": "layers.*.w", "spec": [null, "x"]},
                     {"match": "flat.*", "flat": ["x"]}]})");
    std::string other = kSpec;
    const std::string key43 = "\"seed\": 43";
    other.replace(other.find(key43), key43.size(), "\"seed\": 44");
    const std::string spec44 = Write("spec44b.json", other);
    const std::string q1 = dir + "/l3_rank1.safetensors", q1b = dir + "/l3_rank1_44.safetensors",
                      p2 = dir + "/rank2.safetensors";
    ASSERT_EQ(Exec("materialize " + spec + " --layout " + l3 + " --rank 1 -o " + q1).code, 0);
    ASSERT_EQ(Exec("materialize " + spec44 + " --layout " + l3 + " --rank 1 -o " + q1b).code, 0);
    ASSERT_EQ(Exec("materialize " + spec + " --layout " + layout + " --rank 2 -o " + p2).code, 0);
    const Proc d = Exec("diff " + q1 + " " + p2 + " --json");
    ASSERT_EQ(d.code, 0) << d.out << d.err;
    auto rows = DiffRows(d.out);
    EXPECT_EQ(rows["act"]["result"], "identical") << rows["act"].dump();
    EXPECT_EQ(rows["act"]["by"], "overlap") << rows["act"].dump();
    EXPECT_EQ(rows["act"]["shard"], "[3:4, 0:6, 0:5]") << rows["act"].dump();
    EXPECT_EQ(rows["flat.w"]["by"], "overlap") << rows["flat.w"].dump();
    EXPECT_EQ(rows["flat.w"]["shard"], "flat[31:46]") << rows["flat.w"].dump();
    EXPECT_EQ(rows["flat.w"]["result"], "identical");
    EXPECT_EQ(rows["norm"]["result"], "identical");
    // layers.0.w: [9, 5]; L3 rank 1 holds cols 2:4 (uneven 2,2,1), rank 2 of the 8-rank layout
    // rows 0:5 cols 0:3 (Shard(0) over data, Shard(1) over tensor: 3,2): overlap rows 0:5 cols 2:3.
    EXPECT_EQ(rows["layers.0.w"]["result"], "identical") << rows["layers.0.w"].dump();
    const Proc e = Exec("diff " + q1b + " " + p2 + " --json");
    EXPECT_EQ(e.code, 7) << e.out << e.err;
    const auto je = nlohmann::json::parse(e.out);  // kept: a range over a temporary's member dangles
    for (const auto& t : je["tensors"])
      EXPECT_EQ(t["result"], t["name"] == "act" ? "values-differ" : "identical") << t.dump();
    const Proc text = Exec("diff " + q1 + " " + p2);
    EXPECT_NE(text.out.find("compared on the overlap of two rank files' shards"), std::string::npos) << text.out;
  }
  {
    auto f = SafetensorsFile::Open(r0);
    ASSERT_TRUE(f.ok());
    std::string last;
    uint64_t end = 0;
    for (const auto& e : f->entries())
      if (e.end > end) end = e.end, last = e.name;
    std::fstream io(r0, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(-1, std::ios::end);
    char c = 0;
    io.read(&c, 1);
    c ^= 0x10;
    io.seekp(-1, std::ios::end);
    io.write(&c, 1);
    io.close();
    const Proc d = Exec("diff " + r0 + " " + spec);
    EXPECT_EQ(d.code, 7) << d.err;
    EXPECT_NE(d.out.find("values-differ " + last + " "), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("4 compared: 3 identical, 1 values differ"), std::string::npos) << d.out;
    EXPECT_NE(d.err.find("differ in 1 of 4 tensors"), std::string::npos) << d.err;
  }
  // --tensors narrows the comparison to what agrees.
  EXPECT_EQ(Exec("diff " + r0 + " " + r1 + " --tensors norm").code, 0);
  // A missing source is named.
  const Proc m = Exec("diff " + spec + " " + dir + "/nope.safetensors");
  EXPECT_EQ(m.code, 3) << m.err;
  EXPECT_NE(m.err.find("nope.safetensors"), std::string::npos) << m.err;
}

// A flat (FSDP-style) shard of one layout against a box (TP/DTensor-style) shard of another:
// compared on the elements they share (they were "other-shards", not compared). Under LF every
// tensor is flat over 3 ranks; rank 1 holds act flat[160:320] (act is [8, 6, 10]), rank 2 of
// the 8-rank layout act rows 2:4, columns 0:5 of the last dim: they share [2:3, 4:6, 0:5] +
// [3:4, 0:6, 0:5]. Checked against the whole model's fingerprint of those boxes, in both
// orders, for safetensors shard files and for distributed saves' rank files; a model with
// another key for act differs there; disjoint shards stay other-shards.
TEST(Cli, DiffComparesAFlatShardWithABoxShardOnTheirOverlap) {
  const std::string spec = Write("mix_spec.json", kSpec);
  const std::string l8 = Write("mix_layout8.json", kLayout);
  const std::string lf = Write("mix_flat3.json", R"({"mesh": {"axes": ["x"], "shape": [3]},
    "placements": [{"match": "*", "flat": ["x"]}]})");
  std::string other = kSpec;
  const std::string key43 = "\"seed\": 43";
  other.replace(other.find(key43), key43.size(), "\"seed\": 44");
  const std::string spec44 = Write("mix_spec44.json", other);
  const std::string dir = TempDir() + "/mix";
  std::filesystem::create_directories(dir);
  const std::string f1 = dir + "/f1.safetensors", f1b = dir + "/f1_44.safetensors", f0 = dir + "/f0.safetensors",
                    b2 = dir + "/b2.safetensors", b6 = dir + "/b6.safetensors";
  ASSERT_EQ(Exec("materialize " + spec + " --layout " + lf + " --rank 1 -o " + f1).code, 0);
  ASSERT_EQ(Exec("materialize " + spec44 + " --layout " + lf + " --rank 1 -o " + f1b).code, 0);
  ASSERT_EQ(Exec("materialize " + spec + " --layout " + lf + " --rank 0 -o " + f0).code, 0);
  ASSERT_EQ(Exec("materialize " + spec + " --layout " + l8 + " --rank 2 -o " + b2).code, 0);
  ASSERT_EQ(Exec("materialize " + spec + " --layout " + l8 + " --rank 6 -o " + b6).code, 0);
  // The whole model's fingerprint of act's shared boxes, and of layers.0.w's ([9, 5]: flat
  // [15:30] = rows 3:6 against rows 0:5, columns 0:3 -> [3:5, 0:3]).
  auto model = ModelSpec::Load(spec);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto whole = SpecCatalog::Create(*model, spec);
  ASSERT_TRUE(whole.ok());
  Fingerprint act;
  for (const Region& q : {BoxRegion({8, 6, 10}, {2, 4, 0}, {3, 6, 5}), BoxRegion({8, 6, 10}, {3, 0, 0}, {4, 6, 5})}) {
    auto f = (*whole)->FingerprintRegion((*whole)->Find("act"), q);
    ASSERT_TRUE(f.ok());
    act.Add(*f);
  }
  auto lw = (*whole)->FingerprintRegion((*whole)->Find("layers.0.w"), BoxRegion({9, 5}, {3, 0}, {5, 3}));
  ASSERT_TRUE(lw.ok());
  // Distributed saves of the same model under both layouts: their rank files hold the same pieces.
  const std::string dense = dir + "/dense.h5", sf = dir + "/sf.h5", s8 = dir + "/s8.h5";
  ASSERT_EQ(Exec("export " + spec + " -o " + dir + "/all.safetensors").code, 0);
  ASSERT_EQ(Exec("import " + dir + "/all.safetensors -o " + dense + " --chunk-bytes 64").code, 0);
  // (--max-padding 0: each rank file holds its shard exactly, not a box padded to the chunk grid)
  ASSERT_EQ(Exec("reshard " + dense + " --layout " + lf + " -o " + sf + " --max-padding 0").code, 0);
  ASSERT_EQ(Exec("reshard " + dense + " --layout " + l8 + " -o " + s8 + " --max-padding 0").code, 0);
  auto rank_file = [&](const std::string& save, int r) {
    const std::string base = std::filesystem::path(save).filename().string() + ".",
                      tail = ".rank" + std::to_string(r) + ".h5";
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (n.size() > base.size() + tail.size() && n.rfind(base, 0) == 0 &&
          n.compare(n.size() - tail.size(), tail.size(), tail) == 0)
        return e.path().string();
    }
    return std::string();
  };
  const std::string rf1 = rank_file(sf, 1), rb2 = rank_file(s8, 2);
  ASSERT_FALSE(rf1.empty());
  ASSERT_FALSE(rb2.empty());
  for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
           {f1, b2}, {b2, f1}, {rf1, rb2}, {rb2, rf1}, {f1, rb2}, {rf1, b2}}) {
    const Proc d = Exec("diff " + a + " " + b + " --json");
    ASSERT_EQ(d.code, 0) << a << " " << b << "\n" << d.out << d.err;
    const auto j = nlohmann::json::parse(d.out);
    auto rows = DiffRows(d.out);
    EXPECT_EQ(rows["act"]["result"], "identical") << rows["act"].dump();
    EXPECT_EQ(rows["act"]["by"], "overlap") << rows["act"].dump();
    EXPECT_EQ(rows["act"]["shard"], "[2:3, 4:6, 0:5] + [3:4, 0:6, 0:5]") << rows["act"].dump();
    EXPECT_EQ(rows["act"]["a"]["fingerprint"], FingerprintHex(act)) << rows["act"].dump();
    EXPECT_EQ(rows["act"]["b"]["fingerprint"], FingerprintHex(act)) << rows["act"].dump();
    // In the 8-rank save, rank 0's file holds layers.0.w's shard that rank 2 replicates, and
    // norm (replicated): rank 2's file holds neither (not compared: no difference).
    const bool save8 = a == rb2 || b == rb2;
    if (save8) {
      EXPECT_EQ(rows["layers.0.w"]["result"], "not-compared") << rows["layers.0.w"].dump();
    } else {
      EXPECT_EQ(rows["layers.0.w"]["shard"], "[3:5, 0:3]") << rows["layers.0.w"].dump();
      EXPECT_EQ(rows["layers.0.w"]["a"]["fingerprint"], FingerprintHex(*lw)) << rows["layers.0.w"].dump();
    }
    // norm (whole against flat) and flat.w (flat against flat).
    EXPECT_EQ(rows["norm"]["result"], save8 ? "not-compared" : "identical") << rows["norm"].dump();
    EXPECT_EQ(rows["flat.w"]["result"], "identical") << rows["flat.w"].dump();
    EXPECT_TRUE(j["identical"].get<bool>()) << d.out;
  }
  {
    const Proc d = Exec("diff " + f1b + " " + rb2 + " --json");
    EXPECT_EQ(d.code, 7) << d.out << d.err;
    const auto j = nlohmann::json::parse(d.out);
    const std::map<std::string, std::string> want = {
        {"act", "values-differ"}, {"flat.w", "identical"}, {"norm", "not-compared"}, {"layers.0.w", "not-compared"}};
    for (const auto& t : j["tensors"]) EXPECT_EQ(t["result"], want.at(t["name"])) << t.dump();
    const Proc text = Exec("diff " + f1b + " " + b2);
    EXPECT_EQ(text.code, 7);
    EXPECT_NE(text.out.find("values-differ act  a "), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("(the overlap [2:3, 4:6, 0:5] + [3:4, 0:6, 0:5] of the two shards of [8, 6, 10])"),
              std::string::npos) << text.out;
  }
  {
    // LF rank 0 holds act flat[0:160] (rows 0:2 and part of row 2); rank 6 of the 8-rank layout
    // rows 6:8: nothing shared.
    const Proc d = Exec("diff " + f0 + " " + b6 + " --json");
    EXPECT_EQ(d.code, 0) << d.out << d.err;
    const auto j = nlohmann::json::parse(d.out);
    for (const auto& t : j["tensors"]) {
      if (t["name"] == "act") {
        EXPECT_EQ(t["result"], "other-shards") << t.dump();
      }
    }
  }
}

// Three tensors flat over 8 ranks: rank 5 holds no element of f (4 elements) nor of z (none).
const char* kEmptyShardsSpec = R"({"seedstore": 1, "seed": 3, "tensors": [
    {"name": "f", "shape": [4], "dtype": "float32", "init": {"dist": "normal"}},
    {"name": "z", "shape": [0, 5], "dtype": "bfloat16", "init": {"dist": "normal"}},
    {"name": "w", "shape": [16, 2], "dtype": "float32", "init": {"dist": "uniform"}}]})";
const char* kFlatOver8 = R"({"mesh": {"axes": ["data"], "shape": [8]}, "placements": [{"match": "*", "flat": ["data"]}]})";

// A rank whose shard of a tensor is empty (torch.chunk of 4 elements over 8 flat ranks: ranks
// 4-7 hold none of `f`; a tensor with no elements) leaves it out of its shard file and names it
// in seedstore.empty_shards: diff against the model is identical (it was "only in b", exit 7).
// Against a model where that tensor has another shape, it differs.
TEST(Cli, DiffOfARankFileWithEmptyShardsIsIdentical) {
  const std::string spec = Write("empty_spec.json", kEmptyShardsSpec);
  const std::string layout = Write("empty_layout.json", kFlatOver8);
  const std::string r5 = TempDir() + "/empty_r5.safetensors";
  ASSERT_EQ(Exec("materialize " + spec + " --layout " + layout + " --rank 5 -o " + r5).code, 0);
  auto f = SafetensorsFile::Open(r5);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->entries().size(), 1u);  // only w
  const auto empty = nlohmann::json::parse(f->metadata().at("seedstore.empty_shards"));
  EXPECT_EQ(empty["f"]["global_shape"], nlohmann::json({4}));
  EXPECT_EQ(empty["z"]["dtype"], "bfloat16");
  for (const std::string& order : {r5 + " " + spec, spec + " " + r5}) {
    const Proc d = Exec("diff " + order + " --json --all");
    ASSERT_EQ(d.code, 0) << order << "\n" << d.out << d.err;
    const auto j = nlohmann::json::parse(d.out);
    EXPECT_EQ(j["counts"]["identical"].get<int>(), 3) << d.out;
    for (const auto& t : j["tensors"])
      EXPECT_EQ(t["by"], t["name"] == "w" ? "fingerprint" : "empty shard") << t.dump();
  }
  std::string other = R"({"seedstore": 1, "seed": 3, "tensors": [
    {"name": "f", "shape": [5], "dtype": "float32", "init": {"dist": "normal"}},
    {"name": "z", "shape": [0, 5], "dtype": "bfloat16", "init": {"dist": "normal"}},
    {"name": "w", "shape": [16, 2], "dtype": "float32", "init": {"dist": "uniform"}}]})";
  const Proc d = Exec("diff " + r5 + " " + Write("empty_other.json", other));
  EXPECT_EQ(d.code, 7) << d.out << d.err;
  EXPECT_NE(d.out.find("shape-differs f  [5] float32 against an empty shard of another shape or dtype"),
            std::string::npos)
      << d.out;
}

// A distributed save's rank file holds only the dense pieces its rank owns: a lazy tensor (in
// the master), a replica another rank owns and an empty shard are not in it, and it does not
// know the save's tensor list. diff reports those as not-compared, exits 0 when everything it
// holds is identical, and 7 when anything it holds differs (never "only in b", exit 7, for a
// correct rank file). Only a file named as rank files are is read so.
TEST(Cli, DiffOfADistributedSavesRankFileComparesWhatItHolds) {
  const std::string dir = TempDir() + "/rankdiff";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  const std::string spec = Write("rankdiff/spec.json", R"({"seedstore": 1, "seed": 7, "tensors": [
    {"name": "d", "shape": [4, 6], "dtype": "float32", "init": {"dist": "zeros"}},
    {"name": "lz", "shape": [4, 6], "dtype": "float32", "init": {"dist": "normal"}}]})");
  const std::string ones = Write("rankdiff/ones.json", R"({"seedstore": 1, "seed": 7, "tensors": [
    {"name": "d", "shape": [4, 6], "dtype": "float32", "init": {"dist": "ones"}}]})");
  const std::string m = dir + "/m.h5", st = dir + "/d.safetensors";
  ASSERT_EQ(Exec("init --spec " + spec + " -o " + m).code, 0);
  ASSERT_EQ(Exec("export " + ones + " -o " + st).code, 0);
  ASSERT_EQ(Exec("import " + st + " --update -o " + m).code, 0);  // d dense (ones), lz lazy
  const std::string sharded = Write("rankdiff/L2.json", R"({"mesh": {"axes": ["x"], "shape": [2]}, "placements": [{"match": "*", "spec": ["x"]}]})");
  const std::string replicated = Write("rankdiff/R2.json", R"({"mesh": {"axes": ["x"], "shape": [2]}})");
  ASSERT_EQ(Exec("reshard " + m + " --layout " + sharded + " -o " + dir + "/p2.h5 -q").code, 0);
  ASSERT_EQ(Exec("reshard " + m + " --layout " + replicated + " -o " + dir + "/r2.h5 -q").code, 0);
  std::string p2_rank0, r2_rank1;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string n = e.path().filename();
    if (n.rfind("p2.h5.", 0) == 0 && n.find(".rank0.h5") != std::string::npos) p2_rank0 = e.path();
    if (n.rfind("r2.h5.", 0) == 0 && n.find(".rank1.h5") != std::string::npos) r2_rank1 = e.path();
  }
  ASSERT_FALSE(p2_rank0.empty() || r2_rank1.empty());
  auto results = [](const Proc& d) {
    std::map<std::string, std::string> r;
    const auto j = nlohmann::json::parse(d.out);
    for (const auto& t : j["tensors"]) r[t["name"].get<std::string>()] = t["result"].get<std::string>();
    return r;
  };
  using Results = std::map<std::string, std::string>;
  // Rank 0 of the sharded save holds rows 0:2 of d; lz is lazy (in the master only).
  for (const std::string& pair : {p2_rank0 + " " + m, m + " " + p2_rank0}) {
    const Proc d = Exec("diff " + pair + " --json");
    ASSERT_EQ(d.code, 0) << pair << "\n" << d.out << d.err;
    EXPECT_EQ(results(d), (Results{{"d", "identical"}, {"lz", "not-compared"}})) << d.out;
    EXPECT_EQ(nlohmann::json::parse(d.out)["counts"]["not-compared"], 1) << d.out;
  }
  {
    const Proc d = Exec("diff " + p2_rank0 + " " + m);
    EXPECT_EQ(d.code, 0) << d.out << d.err;
    EXPECT_NE(d.out.find("not-compared  lz  [4, 6] float32  (absent from the rank file a)"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("1 compared: 1 identical"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("1 not compared: absent from a distributed save's rank file"), std::string::npos) << d.out;
  }
  // Rank 1 of the replicated save owns nothing (rank 0 owns the replica): nothing compared.
  {
    const Proc d = Exec("diff " + r2_rank1 + " " + m + " --json");
    ASSERT_EQ(d.code, 0) << d.out << d.err;
    EXPECT_EQ(results(d), (Results{{"d", "not-compared"}, {"lz", "not-compared"}})) << d.out;
  }
  // What the rank file holds still counts: against the spec, where d is zeros, it differs.
  {
    const Proc d = Exec("diff " + p2_rank0 + " " + spec + " --json");
    EXPECT_EQ(d.code, 7) << d.out << d.err;
    EXPECT_EQ(results(d), (Results{{"d", "values-differ"}, {"lz", "not-compared"}})) << d.out;
  }
  // The same file under another name is an ordinary store: lz is only in b.
  ASSERT_EQ(std::system(("cp " + p2_rank0 + " " + dir + "/copy.h5").c_str()), 0);
  const Proc c = Exec("diff " + dir + "/copy.h5 " + m + " --json");
  EXPECT_EQ(c.code, 7) << c.out << c.err;
  EXPECT_EQ(results(c), (Results{{"d", "identical"}, {"lz", "only-in-b"}})) << c.out;
}

// import keeps a rank's shard file whole: its empty shards become empty pieces (shape [0],
// piece flat [0, 0) of the global shape) and seedstore.rank the index's "rank", so export
// writes the same metadata back, and the store and its export diff clean against the model
// (an import that dropped both would make the export's empty shards "only in b", exit 7).
TEST(Cli, ImportOfARankShardFileKeepsItsEmptyShardsAndRank) {
  const std::string spec = Write("keep_spec.json", kEmptyShardsSpec);
  const std::string layout = Write("keep_layout.json", kFlatOver8);
  const std::string dir = TempDir(), r5 = dir + "/keep_r5.safetensors", store = dir + "/keep_r5.h5";
  const std::string back = dir + "/keep_back.safetensors";
  ASSERT_EQ(Exec("export " + spec + " --layout " + layout + " --rank 5 -o " + r5).code, 0);
  const Proc im = Exec("import " + r5 + " -o " + store);
  ASSERT_EQ(im.code, 0) << im.err;
  const Proc in = Exec("inspect " + store + " --json");
  ASSERT_EQ(in.code, 0) << in.err;
  const auto ij = nlohmann::json::parse(in.out);
  EXPECT_EQ(ij.value("rank", -1), 5) << in.out;
  std::map<std::string, nlohmann::json> pieces;
  for (const auto& t : ij["tensors"]) pieces[t["name"]] = t["piece"];
  EXPECT_EQ(pieces["f"], nlohmann::json::parse(R"({"shape": [4], "region": {"flat": [0, 0]}})")) << in.out;
  EXPECT_EQ(pieces["z"], nlohmann::json::parse(R"({"shape": [0, 5], "region": {"flat": [0, 0]}})")) << in.out;
  ASSERT_EQ(Exec("export " + store + " -o " + back).code, 0);
  auto a = SafetensorsFile::Open(r5), b = SafetensorsFile::Open(back);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->metadata(), a->metadata());
  EXPECT_EQ(b->entries().size(), 1u);  // w; the empty shards are named, not written
  for (const std::string& source : {store, back, r5}) {
    const Proc d = Exec("diff " + source + " " + spec + " --json --all");
    ASSERT_EQ(d.code, 0) << source << "\n" << d.out << d.err;
    const auto j = nlohmann::json::parse(d.out);
    for (const auto& t : j["tensors"]) {
      EXPECT_EQ(t["result"], "identical") << source << " " << t.dump();
      EXPECT_EQ(t["by"], t["name"] == "w" ? "fingerprint" : "empty shard") << source << " " << t.dump();
    }
    auto lines = [](const std::string& text) {
      std::set<std::string> l;
      for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) l.insert(text.substr(at, nl - at));
      return l;
    };
    EXPECT_EQ(lines(Exec("fingerprint " + source).out),
              lines(Exec("fingerprint " + spec + " --layout " + layout + " --rank 5").out))
        << source;
  }
  EXPECT_EQ(Exec("verify " + store).code, 0);
  ASSERT_EQ(Exec("import " + r5 + " -o " + store + " --update").code, 0);  // keeps the store's rank
  EXPECT_EQ(nlohmann::json::parse(Exec("inspect " + store + " --json").out).value("rank", -1), 5);
  // Rank 0 (f and w non-empty, z empty) split into one file per tensor: the rank is in each
  // file and in the index's metadata, the empty shard named in the first file.
  const std::string r0 = dir + "/keep_r0.safetensors", store0 = dir + "/keep_r0.h5", split = dir + "/keep_split.safetensors";
  ASSERT_EQ(Exec("export " + spec + " --layout " + layout + " --rank 0 -o " + r0).code, 0);
  ASSERT_EQ(Exec("import " + r0 + " -o " + store0).code, 0);
  const Proc sp = Exec("export " + store0 + " -o " + split + " --max-shard-size 1");
  ASSERT_EQ(sp.code, 0) << sp.err;
  const std::string index = ReadFile(split + ".index.json");
  EXPECT_NE(index.find("\"seedstore.rank\": \"0\""), std::string::npos) << index;
  const Proc d = Exec("diff " + split + ".index.json " + spec + " --json");
  EXPECT_EQ(d.code, 0) << d.out << d.err;
  EXPECT_EQ(nlohmann::json::parse(d.out)["counts"]["identical"], 3) << d.out;
  EXPECT_EQ(nlohmann::json::parse(Exec("inspect " + split + ".index.json --json").out).value("rank", -1), 0);
}

// A --tensors glob that matches nothing is an error naming it (a typo wrote an empty file or
// printed nothing, exit 0); one that matches is fine.
TEST(Cli, TensorsGlobMatchingNothingIsAnError) {
  const std::string spec = Write("glob_spec.json", kSpec);
  const std::string layout = Write("glob_layout.json", kLayout);
  const std::string out = TempDir() + "/glob.safetensors";
  for (const std::string& cmd : {"inspect " + spec, "fingerprint " + spec, "export " + spec + " -o " + out,
                                 "materialize " + spec + " --layout " + layout + " --rank 0 -o " + out,
                                 "diff " + spec + " " + spec}) {
    const Proc p = Exec(cmd + " --tensors 'layer.*'");
    EXPECT_EQ(p.code, 2) << cmd << "\n" << p.err;
    EXPECT_NE(p.err.find("--tensors 'layer.*' matches no tensor of '" + spec + "'"), std::string::npos)
        << cmd << "\n" << p.err;
    EXPECT_EQ(Exec(cmd + " --tensors 'layers.*'").code, 0) << cmd;
  }
}

// `verify` of safetensors (a file or an index): not "corrupt" -- the input is valid, it just
// records no checksums or fingerprints -- but UNSUPPORTED (exit 6), pointing to `diff`.
TEST(Cli, VerifyOfSafetensorsPointsToDiff) {
  const std::string spec = Write("spec.json", kSpec);
  const std::string st = TempDir() + "/verify.safetensors";
  ASSERT_EQ(Exec("export " + spec + " -o " + st).code, 0);
  const std::string index = Write("verify.safetensors.index.json", R"({"weight_map": {"norm": "verify.safetensors"}})");
  for (const std::string& source : {st, index}) {
    for (const std::string& flags : {std::string(), std::string(" --json")}) {
      const Proc v = Exec("verify " + source + flags);
      EXPECT_EQ(v.code, 6) << v.err;
      EXPECT_NE(v.err.find("UNSUPPORTED: '" + source + "' is safetensors, not a seedstore store"), std::string::npos)
          << v.err;
      EXPECT_NE(v.err.find("records no checksums or fingerprints"), std::string::npos) << v.err;
      EXPECT_NE(v.err.find("seedstore diff " + source + " OTHER"), std::string::npos) << v.err;
      EXPECT_EQ(v.err.find("corrupt"), std::string::npos) << v.err;
    }
  }
}

TEST(Cli, SelfTestPasses) {
  const Proc r = Exec("selftest");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(" passed, 0 failed"), std::string::npos) << r.out;
}

// Runs bash `script` in a private user and mount namespace (`unshare -rm`: it may mount a
// tmpfs), its stdout and stderr into *out; returns pclose's status.
int RunUnshared(const std::string& script, std::string* out) {
  FILE* p = popen(("unshare -rm bash " + script + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out->append(buf, n);
  return pclose(p);
}

// A full disk (invariant I5): every command that writes a store, a distributed save or a
// safetensors file fails with exit 5 (IO_ERROR) and a message naming the tensor and "No space
// left on device" -- no crash, no hang -- leaves no temporary or rank file behind, and the
// previous checkpoint at the path stays byte for byte intact and verifies. The full disk is a
// real one: a tmpfs just large enough for the previous checkpoint plus 3 MiB (HDF5 1.10
// crashed at exit after such a failure, before AbandonH5File), mounted in a
// private mount namespace (unshare; root or unprivileged user namespaces). Skipped, saying so,
// where neither is allowed.
TEST(Cli, FullDiskFailsCleanlyAndKeepsThePreviousCheckpoint) {
  if (std::system("unshare -rm true >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "not run: cannot create a mount namespace here (unshare -rm), so no full "
                    "filesystem can be made for the test";
  // A 6.5 MB dense store of uniform floats (hardly compressible) in 16 tensors, whose
  // metadata is still to be written when the disk fills, and its safetensors twin.
  nlohmann::json tensors = nlohmann::json::array();
  for (int k = 0; k < 16; ++k) {
    std::string name = std::to_string(k);
    name.insert(name.begin(), 't');
    tensors.push_back({{"name", name}, {"shape", {256, 400}}, {"dtype", "float32"}, {"init", {{"dist", "uniform"}}}});
  }
  const std::string spec = Write("full.json", nlohmann::json{{"seedstore", 1}, {"seed", 5}, {"tensors", tensors}}.dump());
  const std::string st = TempDir() + "/full.safetensors", src = TempDir() + "/full_src.h5";
  ASSERT_EQ(Exec("export " + spec + " --format safetensors -o " + st).code, 0);
  ASSERT_EQ(Exec("import " + st + " -o " + src).code, 0);
  const std::string layout = Write("full_layout.json", R"({"mesh": {"axes": ["d"], "shape": [2]},
      "placements": [{"match": "*", "spec": ["d", null]}]})");
  const std::string mnt = TempDir() + "/full_mnt";
  ASSERT_EQ(std::system(("mkdir -p " + mnt).c_str()), 0);
  const std::string b = Bin();
  const std::string script = Write("full.sh", "set -u\n"
      "size=$(( $(stat -c %s " + src + ") + 3 * 1048576 ))\n"
      "mount -t tmpfs -o size=$size tmpfs " + mnt + " || exit 90\n"
      "cp " + src + " " + mnt + "/out.h5 || exit 91\n"
      "try() { echo \"== $1\"; shift; \"$@\" 2>&1 >/dev/null; echo \"rc=$?\"; }\n"
      "try reshard " + b + " reshard " + src + " --consolidate --threads 2 -q -o " + mnt + "/out.h5\n"
      "try import " + b + " import " + st + " -o " + mnt + "/out.h5\n"
      "try save " + b + " reshard " + src + " --layout " + layout + " --threads 2 -q -o " + mnt + "/save.h5\n"
      "try export " + b + " export " + src + " --format safetensors -o " + mnt + "/out.safetensors\n"
      "try export-split " + b + " export " + src + " --max-shard-size 1MB -o " + mnt + "/split.safetensors\n"
      "cmp " + src + " " + mnt + "/out.h5 && echo intact\n"
      "" + b + " verify " + mnt + "/out.h5 >/dev/null && echo verified\n"
      "echo \"left: $(ls -A " + mnt + " | tr '\\n' ' ')\"\n");
  std::string out;
  const int status = RunUnshared(script, &out);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 90)
    GTEST_SKIP() << "not run: tmpfs cannot be mounted in the namespace: " << out;
  ASSERT_TRUE(WIFEXITED(status)) << out;
  for (const char* cmd : {"reshard", "import", "save", "export", "export-split"}) {
    const size_t at = out.find(std::string("== ") + cmd + "\n");
    ASSERT_NE(at, std::string::npos) << out;
    const size_t end = out.find("\n== ", at + 3);
    const std::string part = out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    SCOPED_TRACE(part);
    EXPECT_NE(part.find("rc=5"), std::string::npos) << cmd << ": not exit 5 (IO_ERROR)";
    EXPECT_NE(part.find("No space left on device"), std::string::npos) << cmd;
    if (std::string(cmd).rfind("export", 0) != 0) {
      EXPECT_NE(part.find("tensor '"), std::string::npos) << cmd;
    }
  }
  EXPECT_NE(out.find("\nintact\n"), std::string::npos) << out;
  EXPECT_NE(out.find("\nverified\n"), std::string::npos) << out;
  EXPECT_NE(out.find("left: out.h5 \n"), std::string::npos)
      << "temporaries, rank files or split files left:\n" << out;
}

// The same, at every fill level of the disk rather than one: the disk fills at each step of
// writing -- a rank file's chunks, tables, index or final flush, the master's index or its
// flush, a store's tables, index or flush -- and every one fails with exit 5, never a crash
// (HDF5 1.10 left the file half-closed after a failed H5Fflush: SIGSEGV at exit, exit 139,
// after "cannot flush master" and "flushing the store") and never a success that committed
// a store missing what a buffered write had lost at H5Dclose (an index of zeros: verify
// failed after import --update exited 0). The previous save and store stay byte for byte as
// they were and verify, and no temporary is left. Each command runs with the disk filled
// (a filler file) in 1000-byte steps down until it succeeds; the steps where the master's
// flush fails are among them (asserted: the test reaches that failure).
TEST(Cli, FullDiskAtEveryFillLevelFailsCleanly) {
  if (std::system("unshare -rm true >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "not run: cannot create a mount namespace here (unshare -rm), so no full "
                    "filesystem can be made for the test";
  // 134 KB of normal floats in 1 KB chunks (132 chunks), and a small tensor. Seed 3 lays the
  // files out so that a store's index is the only write that needs a page more (tmpfs): with
  // the index buffered, update and consolidate then committed a store without it.
  const std::string spec = Write("fill.json", R"({"seedstore": 1, "seed": 3, "tensors": [
      {"name": "w.big", "shape": [257, 131], "dtype": "float32", "init": {"dist": "normal"}},
      {"name": "w.prime", "shape": [13, 7], "dtype": "float32", "init": {"dist": "normal"}}]})");
  const std::string st = TempDir() + "/fill.safetensors", src = TempDir() + "/fill_src.h5";
  ASSERT_EQ(Exec("export " + spec + " --format safetensors -o " + st).code, 0);
  ASSERT_EQ(Exec("import " + st + " -o " + src + " --chunk-bytes 1024").code, 0);
  const std::string l3 = Write("fill_l3.json", R"({"mesh": {"axes": ["d"], "shape": [3]},
      "placements": [{"match": "*", "flat": ["d"]}]})");
  const std::string l4 = Write("fill_l4.json", R"({"mesh": {"axes": ["d", "t"], "shape": [2, 2]},
      "placements": [{"match": "*", "spec": ["d", "t"]}]})");
  const std::string mnt = TempDir() + "/fill_mnt", keep = TempDir() + "/fill_keep";
  ASSERT_EQ(std::system(("mkdir -p " + mnt + " " + keep).c_str()), 0);
  const std::string b = Bin();
  // sweep NAME CMD...: runs CMD with the filler in 1000-byte steps down until CMD succeeds,
  // from where the free space left is 32 KiB less than the source's size (every output is
  // about that size: the last 32 KiB written and what follows them -- the last chunks, the
  // tables, indexes, flushes and the master -- fail in turn; earlier failures are the other
  // test's). Prints "NAME <filler> rc=<rc> <error>", and BROKEN / CHANGED / LEFT lines for a
  // save or store that no longer verifies, one changed by a failed CMD, and files left behind.
  const std::string script = Write("fill.sh", "set -u\n"
      "mount -t tmpfs -o size=420k tmpfs " + mnt + " || exit 90\n"
      "cd " + mnt + " || exit 91\n"
      "check() {\n"  // the save or store as a checksum of its files' bytes; verified when new
      "  for f in p.h5 out.h5; do\n"
      "    [ -e " + keep + "/$f.sum ] || continue\n"
      "    sum=$(cat $f $f.*.rank*.h5 2>/dev/null | cksum)\n"
      "    [ \"$sum\" = \"$(cat " + keep + "/$f.sum)\" ] && continue\n"
      "    [ $2 = 0 ] || echo \"CHANGED $f by $1\"\n"
      "    " + b + " verify $f >/dev/null 2>&1 || echo \"BROKEN $f after $1\"\n"
      "    echo \"$sum\" > " + keep + "/$f.sum\n"
      "  done\n"
      "  left=$(ls -A | grep -vxE 'filler|out\\.h5|p\\.h5(\\.[0-9a-f]{8}\\.rank[0-9]\\.h5)?')\n"
      "  [ -z \"$left\" ] || { echo \"LEFT by $1: $left\"; rm -f $left; }\n"
      "}\n"
      "sweep() {\n"
      "  name=$1; shift\n"
      "  rm -f filler; s=$(( $(stat -f -c '%a * %S' .) - $(stat -c %s " + src + ") + 32768 ))\n"
      "  while [ $s -ge 0 ]; do\n"
      "    rm -f filler; head -c $s /dev/zero > filler 2>/dev/null\n"
      "    \"$@\" >/dev/null 2>" + keep + "/err; rc=$?\n"
      "    echo \"$name $s rc=$rc $(head -n 1 " + keep + "/err)\"\n"
      "    check \"$name at $s\" $rc\n"
      "    [ $rc = 0 ] && break\n"
      "    s=$(( s - 1000 ))\n"
      "  done\n"
      "  rm -f filler\n"
      "}\n"
      "" + b + " reshard " + src + " --layout " + l4 + " -q -o p.h5 || exit 92\n"
      "echo new > " + keep + "/p.h5.sum && check start 0\n"
      "sweep save " + b + " reshard " + src + " --layout " + l3 + " -q -o p.h5\n"
      "rm -f p.h5* " + keep + "/p.h5.sum\n"  // room for two stores
      "cp " + src + " out.h5 && echo new > " + keep + "/out.h5.sum && check copy 0\n"
      "sweep update " + b + " import " + st + " -o out.h5 --update --chunk-bytes 1024\n"
      "sweep consolidate " + b + " reshard " + src + " --consolidate -q -o out.h5\n"
      "sweep import " + b + " import " + st + " -o out.h5\n"
      "echo done\n");
  std::string out;
  const int status = RunUnshared(script, &out);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 90)
    GTEST_SKIP() << "not run: tmpfs cannot be mounted in the namespace: " << out;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  ASSERT_NE(out.find("\ndone\n"), std::string::npos) << out;
  std::map<std::string, int> steps, successes;
  int master_flush = 0;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    SCOPED_TRACE(line);
    EXPECT_NE(line.rfind("BROKEN ", 0), 0u);
    EXPECT_NE(line.rfind("CHANGED ", 0), 0u);
    EXPECT_NE(line.rfind("LEFT ", 0), 0u);
    const size_t rc = line.find(" rc=");
    if (rc == std::string::npos) continue;
    const std::string name = line.substr(0, line.find(' '));
    const std::string code = line.substr(rc + 4, line.find(' ', rc + 4) - rc - 4);
    ++steps[name];
    if (code == "0") {
      ++successes[name];
    } else {
      EXPECT_EQ(code, "5") << "not exit 5 (IO_ERROR; 139: SIGSEGV)";
      EXPECT_NE(line.find("IO_ERROR: "), std::string::npos);
    }
    // The master is staged under its own name, P.<id>.new, before the commit (FORMAT.md 10).
    if (line.find("IO_ERROR: cannot flush master 'p.h5.") != std::string::npos &&
        line.find(".new.tmp-") != std::string::npos) {
      ++master_flush;
      EXPECT_NE(line.find("No space left on device"), std::string::npos);
    }
  }
  for (const char* name : {"save", "update", "consolidate", "import"}) {
    EXPECT_GT(steps[name], 3) << name << ": the sweep did not run\n" << out;
    EXPECT_EQ(successes[name], 1) << name << ": never succeeded, even with the disk empty\n" << out;
  }
  EXPECT_GT(master_flush, 0) << "no step failed at the master's flush\n" << out;
}

// No command writes its output over one of its inputs: -o naming the source (by another
// spelling, a symbolic or a hard link), a shard file of a Hugging Face index, a rank file of a
// distributed save, the layout or the spec is refused (exit 2) before anything is written, and
// the input stays byte for byte as it was (materialize model.h5 ... -o model.h5 must not
// replace the store by one rank's shard, nor init --spec s.json -o s.json the spec).
// reshard and import --update may rewrite the store they read (atomically, same weights).
TEST(Cli, OutputThatIsAnInputIsRefusedAndTheInputKept) {
  const std::string d = TempDir() + "/same";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = d + "/spec.json", layout = d + "/layout.json", st = d + "/w.safetensors";
  std::ofstream(spec) << kSpec;
  std::ofstream(layout) << kLayout;
  const std::string model = d + "/model.h5", save = d + "/save.h5";
  ASSERT_EQ(Exec("export " + spec + " -o " + st).code, 0);
  ASSERT_EQ(Exec("import " + st + " -o " + model).code, 0);
  ASSERT_EQ(Exec("export " + spec + " -o " + d + "/m.safetensors --max-shard-size 1KB").code, 0);
  const std::string index = d + "/m.safetensors.index.json";
  ASSERT_EQ(Exec("reshard " + model + " --layout " + layout + " -q -o " + save).code, 0);
  std::string shard, shard2, rank0;  // the index's two shard files, the save's rank 0 file
  for (const auto& e : std::filesystem::directory_iterator(d)) {
    const std::string n = e.path().filename();
    if (n.rfind("m-00001-of-", 0) == 0) shard = e.path();
    if (n == "m-00002-of-00002.safetensors") shard2 = e.path();  // norm, flat.w, layers.0.w
    if (n.rfind("save.h5.", 0) == 0 && n.size() > 9 && n.substr(n.size() - 9) == ".rank0.h5") rank0 = e.path();
  }
  ASSERT_FALSE(shard.empty());
  ASSERT_FALSE(shard2.empty());
  ASSERT_FALSE(rank0.empty());
  ASSERT_EQ(::symlink("model.h5", (d + "/link.h5").c_str()), 0);
  ASSERT_EQ(::link(model.c_str(), (d + "/hard.h5").c_str()), 0);
  const std::vector<std::string> inputs = {spec, layout, st, model, index, shard, shard2, save, rank0};
  std::map<std::string, std::string> before;
  for (const auto& f : inputs) before[f] = ReadFile(f);
  struct Case {
    std::string args, needle;
  };
  const std::string lr = " --layout " + layout + " --rank 0";
  const Case cases[] = {
      {"materialize " + model + lr + " -o " + model, "-o '" + model + "' is the input '" + model + "'; write to another path"},
      {"materialize " + model + lr + " -o " + d + "/link.h5", "is the input '" + model + "'"},
      {"materialize " + spec + lr + " -o " + layout, "-o '" + layout + "' is the input '" + layout + "'"},
      {"export " + model + " -o " + d + "/./model.h5", "is the input '" + model + "'"},
      {"export " + d + "/hard.h5 -o " + model, "is the input '" + d + "/hard.h5'"},
      {"export " + index + " -o " + shard, "-o '" + shard + "' is a file of the input '" + index + "'"},
      {"export " + index + " -o " + d + "/m.safetensors --max-shard-size 1KB", "-o '" + shard + "' is a file of the input '" + index + "'"},
      {"export " + index + " -o " + d + "/m.safetensors --max-shard-size 1", "-o '" + index + "' is the input '" + index + "'"},
      // Split, the files written are named after -o: d/m -> d/m-00001-of-00002.safetensors, ...
      // (flat.w, then layers.0.w), the index's own files, and a file named like one of them.
      {"export " + index + " -o " + d + "/m --tensors '*.w' --max-shard-size 100", "-o '" + shard + "' is a file of the input '" + index + "'"},
      {"export " + shard2 + " -o " + d + "/m --tensors '*.w' --max-shard-size 100", "-o '" + shard2 + "' is the input '" + shard2 + "'"},
      {"export " + save + " -o " + rank0, "is a file of the input '" + save + "'"},
      {"export " + spec + lr + " -o " + layout, "is the input '" + layout + "'"},
      {"import " + st + " -o " + st, "-o '" + st + "' is the input '" + st + "'"},
      {"import " + st + " -o " + st + " --update", "is the input '" + st + "'"},
      {"import " + index + " -o " + shard, "is a file of the input '" + index + "'"},
      {"import " + index + " -o " + index, "is the input '" + index + "'"},
      {"init --spec " + spec + " -o " + spec, "-o '" + spec + "' is the input '" + spec + "'"},
      {"reshard " + spec + " --consolidate -q -o " + spec, "is the input '" + spec + "'"},
      {"reshard " + st + " --consolidate -q -o " + st, "is the input '" + st + "'"},
      {"reshard " + save + " --consolidate -q -o " + rank0, "is a file of the input '" + save + "'"},
      {"reshard " + model + " --layout " + layout + " -q -o " + layout, "is the input '" + layout + "'"},
  };
  for (const auto& c : cases) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
  }
  for (const auto& f : inputs) EXPECT_TRUE(ReadFile(f) == before[f]) << f << " changed";
  for (const auto& e : std::filesystem::directory_iterator(d))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  // A store rewritten in place (atomically, the same weights) stays allowed.
  const Proc a = Exec("reshard " + model + " --consolidate -q -o " + model);
  EXPECT_EQ(a.code, 0) << a.err;
  const Proc b = Exec("reshard " + save + " --layout " + layout + " -q -o " + save);
  EXPECT_EQ(b.code, 0) << b.err;
  const Proc u = Exec("import " + st + " -o " + model + " --update");
  EXPECT_EQ(u.code, 0) << u.err;
  EXPECT_EQ(Exec("verify " + model).code, 0);
  EXPECT_EQ(Exec("verify " + save).code, 0);
  EXPECT_EQ(Exec("diff " + model + " " + spec).code, 0);
}

// Every entry of folder `d`: name -> bytes (a folder's: "").
std::map<std::string, std::string> Folder(const std::string& d) {
  std::map<std::string, std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(d))
    files[e.path().filename()] = e.is_regular_file() ? ReadFile(e.path()) : "";
  return files;
}

// A spec of 4 float32 tensors t0..t3 of 16 KiB each (uniform, root seed `seed`).
std::string FourTensorSpec(const std::string& name, int seed) {
  nlohmann::json tensors = nlohmann::json::array();
  for (int k = 0; k < 4; ++k) {
    std::string t = std::to_string(k);
    t.insert(t.begin(), 't');
    tensors.push_back({{"name", t}, {"shape", {64, 64}}, {"dtype", "float32"}, {"init", {{"dist", "uniform"}}}});
  }
  return Write(name, nlohmann::json{{"seedstore", 1}, {"seed", seed}, {"tensors", tensors}}.dump());
}

// A split export is all or nothing: every shard file and the index are written to temporaries
// first and renamed only once all are complete, so an error part-way -- here a corrupt chunk
// of t2, which lands in the third of four files -- leaves the previous export byte for byte,
// and no temporary (not files 1 and 2 replaced, with the old index loading the mix). A
// successful export then replaces them all.
TEST(Cli, SplitExportThatFailsPartWayKeepsThePreviousExport) {
  const std::string d = TempDir() + "/split_fail", out = d + "/m.safetensors";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string old_spec = FourTensorSpec("split_old.json", 5), new_spec = FourTensorSpec("split_new.json", 6);
  const std::string st = TempDir() + "/split_new.safetensors", good = TempDir() + "/split_new.h5",
                    bad = TempDir() + "/split_bad.h5";
  ASSERT_EQ(Exec("export " + new_spec + " -o " + st).code, 0);
  ASSERT_EQ(Exec("import " + st + " -o " + good).code, 0);
  ASSERT_EQ(std::system(("cp " + good + " " + bad).c_str()), 0);
  ASSERT_TRUE(testutil::FlipChunkByte(bad, "t2", {0, 0}));
  const Proc prev = Exec("export " + old_spec + " -o " + out + " --max-shard-size 16KiB");
  ASSERT_EQ(prev.code, 0) << prev.err;
  const std::map<std::string, std::string> before = Folder(d);
  ASSERT_EQ(before.size(), 5u);  // m-0000k-of-00004.safetensors, m.safetensors.index.json
  ASSERT_EQ(before.count("m-00004-of-00004.safetensors"), 1u);
  const Proc r = Exec("export " + bad + " -o " + out + " --max-shard-size 16KiB");
  EXPECT_EQ(r.code, 4) << r.err;
  EXPECT_NE(r.err.find("chunk-corrupt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'t2'"), std::string::npos) << r.err;
  const std::map<std::string, std::string> after = Folder(d);
  for (const auto& [name, bytes] : before) {
    EXPECT_TRUE(after.count(name) && after.at(name) == bytes) << name << " changed";
  }
  for (const auto& [name, bytes] : after) EXPECT_EQ(before.count(name), 1u) << name << " left behind";
  EXPECT_EQ(Exec("diff " + out + ".index.json " + old_spec).code, 0);
  // The good store replaces every file.
  const Proc ok = Exec("export " + good + " -o " + out + " --max-shard-size 16KiB");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.err.find("warning"), std::string::npos) << ok.err;
  const std::map<std::string, std::string> now = Folder(d);
  EXPECT_EQ(now.size(), 5u);
  for (const auto& [name, bytes] : now) {
    if (name != "m.safetensors.index.json") {
      EXPECT_NE(before.at(name), bytes) << name << " not replaced";
    }
  }
  EXPECT_EQ(Exec("diff " + out + ".index.json " + new_spec).code, 0);
}

// An export to a path that an earlier export split otherwise (or not at all) leaves that
// export's other files, which still load (an old index names its old shards): the command
// names them on stderr and removes nothing -- they may be another tool's, or wanted. Files
// that are the export's own input (consolidating an index into one file) are not named.
TEST(Cli, ExportNamesTheFilesLeftFromAnEarlierExportSplitOtherwise) {
  const std::string d = TempDir() + "/leftover", out = d + "/m.safetensors";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = FourTensorSpec("leftover.json", 3);
  const std::string warning = "left from an earlier export to '" + out + "' (split otherwise)";
  auto q = [&d](const std::string& f) { return "'" + d + "/" + f + "'"; };
  ASSERT_EQ(Exec("export " + spec + " -o " + out + " --max-shard-size 32KiB").code, 0);  // 2 files
  const std::map<std::string, std::string> split2 = Folder(d);
  {  // Unsplit over split: the index and its shards remain, untouched.
    const Proc r = Exec("export " + spec + " -o " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("warning: " + q("m.safetensors.index.json") + ", " + q("m-00001-of-00002.safetensors") +
                         ", " + q("m-00002-of-00002.safetensors") + ": " + warning),
              std::string::npos)
        << r.err;
    for (const auto& [name, bytes] : split2) EXPECT_EQ(ReadFile(d + "/" + name), bytes) << name;
  }
  {  // Split in 4 over split in 2 and a single file: the single file and the 2 shards.
    const Proc r = Exec("export " + spec + " -o " + out + " --max-shard-size 16KiB");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.err.find("warning: " + q("m.safetensors") + ", " + q("m-00001-of-00002.safetensors") + ", " +
                         q("m-00002-of-00002.safetensors") + ": " + warning),
              std::string::npos)
        << r.err;
    EXPECT_TRUE(std::filesystem::exists(out));
  }
  ASSERT_EQ(std::system(("rm " + out + " " + d + "/m-0000?-of-00002.safetensors").c_str()), 0);
  {  // The same split again: nothing left over.
    const Proc r = Exec("export " + spec + " -o " + out + " --max-shard-size 16KiB");
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  }
  {  // Consolidating the index into one file: its files are the input, not named.
    const Proc r = Exec("export " + out + ".index.json -o " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
    EXPECT_EQ(Exec("diff " + out + " " + spec).code, 0);
  }
}

// -o must name a file: a folder ("out/", an existing directory, ".") is refused (exit 2) split
// or not (split, "out/" would write out/.index.json and out/-00001-of-00004.safetensors), as
// is split output with no name to call its files by (".safetensors"), and "-" (stdout) for
// every command that writes a file by name (not a file called "-").
// Nothing is written.
TEST(Cli, OutputMustNameAFile) {
  const std::string d = TempDir() + "/out_file";
  ASSERT_EQ(std::system(("mkdir -p " + d + "/dir").c_str()), 0);
  const std::string spec = Write("out_file/spec.json", kSpec), layout = Write("out_file/layout.json", kLayout);
  const std::map<std::string, std::string> before = Folder(d);
  struct Case {
    std::string args, needle;
  };
  const std::string e = "export " + spec + " -o ", split = " --max-shard-size 100";
  const std::string stdout_refused = " output must be a file; '-' (stdout) is not supported";
  const Case cases[] = {
      {e + d + "/dir" + split, "'" + d + "/dir' is a directory; give a file to write"},
      {e + d + "/dir/" + split, "'" + d + "/dir/' is a directory; give a file to write"},
      {e + d + "/new/" + split, "'" + d + "/new/' names a folder, not a file; give a file to write"},
      {e + d + "/new/", "'" + d + "/new/' names a folder, not a file"},
      {e + d + "/.safetensors" + split, "'" + d + "/.safetensors' has no name to call the split files by"},
      {e + "-", "safetensors" + stdout_refused},
      {e + "-" + split, "safetensors" + stdout_refused},
      {"materialize " + spec + " --layout " + layout + " --rank 0 -o -", "safetensors" + stdout_refused},
      {"init --spec " + spec + " -o -", "store" + stdout_refused},
      {"init --preset gpt2 -o -", "store" + stdout_refused},
      {"reshard " + spec + " --consolidate -q -o -", "store" + stdout_refused},
  };
  const std::string cwd = std::filesystem::current_path();
  std::filesystem::current_path(d);  // where a file "-" would appear
  for (const auto& c : cases) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
  }
  std::filesystem::current_path(cwd);
  EXPECT_TRUE(Folder(d) == before) << "a file was written";
  EXPECT_TRUE(std::filesystem::is_empty(d + "/dir"));
}

// Every integer option is parsed by one strict parser: a value outside the option's range, a
// negative value for an unsigned one, and anything but a decimal integer are refused (exit 2)
// naming the option and the value -- never clamped or wrapped (--seed 2^64-1 --x64 is not
// what 2^63-1 gives, init --seed -1 does not record 2^64-1, --seed 010 is not octal 8).
TEST(Cli, IntegerOptionsAreParsedStrictly) {
  const std::string st = TempDir() + "/int.safetensors", store = TempDir() + "/int.h5";
  ASSERT_EQ(Exec("export " + Write("int.json", kSpec) + " -o " + st).code, 0);
  const std::string spec = TempDir() + "/int.json";
  const std::string g = "gen --shape 2 --dtype uint32 --init '{\"dist\":\"bits\"}' --format text ";
  struct Case {
    std::string args, needle;
  };
  const Case cases[] = {
      // gen --seed is jax.random.key's seed: an int64 (JAX takes np.int64(seed)), either mode.
      {g + "--seed 18446744073709551615 --x64", "--seed: 18446744073709551615 is out of range (-9223372036854775808..9223372036854775807)"},
      {g + "--seed 9223372036854775808", "--seed: 9223372036854775808 is out of range"},
      {g + "--seed 99999999999999999999999", "--seed: 99999999999999999999999 is out of range"},
      {g + "--seed -9223372036854775809", "--seed: -9223372036854775809 is out of range"},
      {g + "--seed 1.5", "--seed: '1.5' is not an integer"},
      {g + "--seed 0x10", "--seed: '0x10' is not an integer"},
      {g + "--seed 1e3", "--seed: '1e3' is not an integer"},
      {g + "--seed ''", "--seed: '' is not an integer"},
      {g + "--seed ' 5'", "--seed: ' 5' is not an integer"},
      {g + "--seed +5", "--seed: '+5' is not an integer"},
      // init's root seed is a uint64.
      {"init --preset gpt2 --no-fingerprints --seed -1 -o " + store, "--seed: -1 is out of range (0..18446744073709551615)"},
      {"init --preset gpt2 --no-fingerprints --seed 18446744073709551616 -o " + store, "--seed: 18446744073709551616 is out of range"},
      {"import " + st + " -o " + store + " --seed -1", "--seed: -1 is out of range"},
      {"import " + st + " -o " + store + " --chunk-bytes -1", "--chunk-bytes: -1 is out of range (1..2147483648)"},
      {"import " + st + " -o " + store + " --chunk-bytes 0", "--chunk-bytes: 0 is out of range"},
      {"import " + st + " -o " + store + " --chunk-bytes 2147483649", "--chunk-bytes: 2147483649 is out of range"},
      {"import " + st + " -o " + store + " --threads -1", "--threads: -1 is out of range (0..256)"},
      {g + "--threads 257", "--threads: 257 is out of range (0..256)"},
      {"fingerprint " + spec + " --threads 4294967297", "--threads: 4294967297 is out of range"},
      {"fingerprint " + spec + " --rank -1", "--rank: -1 is out of range (0..2147483647)"},
      {"fingerprint " + spec + " --rank 2147483648", "--rank: 2147483648 is out of range"},
      {"verify " + st + " --threads x", "--threads: 'x' is not an integer"},
      {"reshard " + spec + " --consolidate -o " + store + " --simulate-rank -1", "--simulate-rank: -1 is out of range"},
      {"reshard " + spec + " --consolidate -o " + store + " --threads 1.0", "--threads: '1.0' is not an integer"},
      {"verify-ranks " + spec + " --layout x.json --simulate-rank 4294967296", "--simulate-rank: 4294967296 is out of range"},
      {"demo --ranks 0,-1", "--ranks: -1 is out of range (0..2147483647)"},
      {"demo --seed -1", "--seed: -1 is out of range"},
      // Integers inside option values go through the same parser.
      {"gen --shape 3,18446744073709551616", "--shape '3,18446744073709551616': 18446744073709551616 is out of range"},
      {"gen --shape 3,x", "--shape '3,x': 'x' is not an integer"},
      {"gen --shape 3 --key 1,4294967296", "--key '1,4294967296': 4294967296 is out of range (0..4294967295)"},
      {"gen --shape 3 --key -1,0", "--key '-1,0': -1 is out of range"},
      {"gen --shape 3 --key 1,2,3", "--key '1,2,3': expected K0,K1"},
  };
  for (const auto& c : cases) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << c.args;
  }
  // The ends of each range are accepted, with JAX's meaning: key(seed) in 32-bit mode is
  // [0, seed mod 2^32], with x64 [seed >> 32, seed & 0xffffffff] (two's complement).
  auto same = [&](const std::string& a, const std::string& b) {
    const Proc x = Exec(g + a), y = Exec(g + b);
    ASSERT_EQ(x.code, 0) << a << "\n" << x.err;
    ASSERT_EQ(y.code, 0) << b << "\n" << y.err;
    EXPECT_EQ(x.out, y.out) << a << " vs " << b;
    EXPECT_EQ(x.out.size() > 0, true);
  };
  same("--seed 9223372036854775807 --x64", "--key 2147483647,4294967295");
  same("--seed -9223372036854775808 --x64", "--key 2147483648,0");
  same("--seed -1 --x64", "--key 4294967295,4294967295");
  same("--seed -1", "--key 0,4294967295");
  same("--seed 9223372036854775807", "--key 0,4294967295");
  same("--seed 010", "--seed 10");  // decimal, not octal
  EXPECT_NE(Exec(g + "--seed 9223372036854775807 --x64").out, Exec(g + "--seed 18446744073709551615 --x64").out);
  const Proc i = Exec("init --preset gpt2 --no-fingerprints --seed 18446744073709551615 --json -o " + store);
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_EQ(nlohmann::json::parse(i.out)["seed"].get<uint64_t>(), 18446744073709551615ull);
  const Proc c = Exec("import " + st + " -o " + store + " --chunk-bytes 2147483648 --threads 256");
  EXPECT_EQ(c.code, 0) << c.err;
}

// --zstd-level accepts exactly the documented 1..22 (zstd's negative fast levels are not
// used: the writer clamped them to 1), and the floating-point options only finite numbers in
// range (0, -5, 23 and 1000000 are refused, not clamped; so is --max-padding nan).
TEST(Cli, ZstdLevelAndNumberOptionsAcceptOnlyTheirRange) {
  const std::string st = TempDir() + "/z.safetensors", store = TempDir() + "/z.h5";
  ASSERT_EQ(Exec("export " + Write("z.json", kSpec) + " -o " + st).code, 0);
  for (const std::string level : {"0", "-5", "23", "1000000"}) {
    for (const std::string& cmd : {"import " + st + " -o " + store, "reshard " + st + " --consolidate -q -o " + store}) {
      const Proc r = Exec(cmd + " --zstd-level " + level);
      EXPECT_EQ(r.code, 2) << cmd << " " << level << "\n" << r.err;
      EXPECT_NE(r.err.find("--zstd-level: " + level + " is out of range (1..22)"), std::string::npos) << r.err;
    }
  }
  EXPECT_FALSE(std::ifstream(store).good());  // nothing was written
  for (const std::string level : {"1", "22"}) {
    const Proc r = Exec("import " + st + " -o " + store + " --zstd-level " + level + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    const Proc j = Exec("reshard " + st + " --consolidate -q -o " + store + " --zstd-level " + level);
    ASSERT_EQ(j.code, 0) << j.err;
  }
  const std::string rs = "reshard " + st + " --consolidate -q -o " + store;
  for (const auto& [args, needle] : {std::pair<std::string, std::string>{" --max-padding nan", "--max-padding: 'nan' is not a finite number"},
                                     {" --max-padding inf", "--max-padding: 'inf' is not a finite number"},
                                     {" --max-padding -0.5", "--max-padding: -0.5 is below the minimum 0"},
                                     {" --max-padding 0.25x", "--max-padding: '0.25x' is not a finite number"},
                                     {" --timeout nan", "--timeout: 'nan' is not a finite number"},
                                     {" --timeout -inf", "--timeout: '-inf' is not a finite number"}}) {
    const Proc r = Exec(rs + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
  }
  EXPECT_EQ(Exec(rs + " --max-padding 0 --timeout -1").code, 0);
  EXPECT_EQ(Exec(rs + " --max-padding 0.5 --timeout 30").code, 0);
}

// --layout and --rank go together: each alone is named as such (not as "--rank -1 is outside
// the mesh", an option the user never gave).
TEST(Cli, LayoutAndRankAreGivenTogether) {
  const std::string spec = Write("lr.json", kSpec), layout = Write("lr_layout.json", kLayout);
  const std::string out = TempDir() + "/lr.safetensors";
  struct Case {
    std::string args, needle;
  };
  const Case cases[] = {
      {"fingerprint " + spec + " --layout " + layout, "--layout needs --rank"},
      {"export " + spec + " --layout " + layout + " -o " + out, "--layout needs --rank"},
      {"fingerprint " + spec + " --rank 0", "--rank needs --layout"},
      {"export " + spec + " --rank 0 -o " + out, "--rank needs --layout"},
      {"fingerprint " + spec + " --layout " + layout + " --rank 8", "--rank 8 is outside the mesh of '" + layout + "' (8 ranks)"},
      {"export " + spec + " --layout " + layout + " --rank 8 -o " + out, "--rank 8 is outside the mesh"},
      {"materialize " + spec + " --layout " + layout + " --rank 8 -o " + out, "--rank 8 is outside the mesh"},
  };
  for (const auto& c : cases) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    // Not "-1" alone: the temporary folder's random name may hold it ("seedstore-cli-1...").
    EXPECT_EQ(r.err.find("--rank -1"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(std::ifstream(out).good());
  EXPECT_EQ(Exec("export " + spec + " --layout " + layout + " --rank 7 -o " + out).code, 0);
  EXPECT_EQ(Exec("fingerprint " + spec + " --layout " + layout + " --rank 0").code, 0);
}

// Runs a shell command line, returning its stdout and stderr together.
std::string Shell(const std::string& cmd) {
  std::string out;
  FILE* p = popen(("(" + cmd + ") 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

// gen reports an output it cannot write, naming it (not exit 5 without a word), and
// replaces a regular file atomically: a failure mid-write leaves the previous file whole
// (fopen("wb") would truncate it first). stdout and devices are written in place.
TEST(Cli, GenOutputErrorsAreNamedAndFilesReplacedAtomically) {
  const std::string dir = TempDir() + "/gen_out";
  ASSERT_EQ(std::system(("mkdir -p " + dir + "/folder").c_str()), 0);
  const std::string g = "gen --shape 4 --init '{\"dist\":\"ones\"}' ";
  {
    const Proc r = Exec(g + "-o " + dir + "/folder");
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("'" + dir + "/folder' is a directory"), std::string::npos) << r.err;
  }
  {
    const Proc r = Exec(g + "-o " + dir + "/nodir/x.bin");
    EXPECT_EQ(r.code, 5) << r.err;
    EXPECT_NE(r.err.find(dir + "/nodir/x.bin"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("No such file or directory"), std::string::npos) << r.err;
  }
  struct stat full;
  if (::stat("/dev/full", &full) == 0 && S_ISCHR(full.st_mode)) {
    const Proc r = Exec(g + "-o /dev/full");
    EXPECT_EQ(r.code, 5) << r.err;
    EXPECT_NE(r.err.find("writing output '/dev/full' failed: No space left on device"), std::string::npos) << r.err;
    ASSERT_EQ(::stat("/dev/full", &full), 0);
    EXPECT_TRUE(S_ISCHR(full.st_mode)) << "/dev/full is no longer a device";
  }
  // A write that fails half-way (over the file size limit: EFBIG, with SIGXFSZ ignored)
  // leaves the previous file as it was, and no temporary.
  const std::string out = dir + "/out.bin";
  std::ofstream(out) << "previous";
  const std::string log = Shell("bash -c \"trap '' XFSZ; ulimit -f 8; exec " + Bin() +
                                " gen --shape 100000 --init '{\\\"dist\\\":\\\"ones\\\"}' -o " + out +
                                "\"; echo rc=$?");
  EXPECT_NE(log.find("rc=5"), std::string::npos) << log;
  EXPECT_NE(log.find("File too large"), std::string::npos) << log;
  EXPECT_EQ(ReadFile(out), "previous");
  // A successful write replaces the file (a new inode: a hard link keeps the old bytes).
  ASSERT_EQ(::link(out.c_str(), (dir + "/keep.bin").c_str()), 0);
  const Proc ok = Exec(g + "--format text -o " + out);
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ReadFile(out), "1\n1\n1\n1\n");
  EXPECT_EQ(ReadFile(dir + "/keep.bin"), "previous");
  EXPECT_EQ(Shell("ls -A " + dir), "folder\nkeep.bin\nout.bin\n");
  // stdout, by default, "-" or /dev/stdout.
  for (const std::string o : {"", "-o - ", "-o /dev/stdout "}) {
    const Proc s = Exec(g + "--format text " + o);
    EXPECT_EQ(s.code, 0) << o << s.err;
    EXPECT_EQ(s.out, "1\n1\n1\n1\n") << o;
  }
}

// A report that cannot be written to standard output fails the command: exit 5 with "cannot
// write standard output: <reason>" (`fingerprint X --json > /dev/full` and `inspect X >&-`
// must not exit 0). A closed descriptor is never the next file opened.
TEST(Cli, ReportsThatCannotReachStandardOutputFail) {
  struct stat full;
  if (::stat("/dev/full", &full) != 0 || !S_ISCHR(full.st_mode))
    GTEST_SKIP() << "not run: no /dev/full here";
  const std::string spec = Write("out_spec.json", kSpec), store = TempDir() + "/out.h5";
  ASSERT_EQ(Exec("init --spec " + spec + " -o " + store).code, 0);
  for (const std::string& cmd : {"fingerprint " + store + " --json", "fingerprint " + store, "inspect " + store,
                                 "diff " + store + " " + spec + " --all", "verify " + store,
                                 std::string("gen --shape 4"), std::string("--help")}) {
    for (const auto& [redirect, reason] : {std::pair<std::string, std::string>{" >/dev/full", "No space left on device"},
                                           {" >&-", "Bad file descriptor"}}) {
      const std::string log = Shell(Bin() + " " + cmd + redirect + "; echo rc=$?");
      EXPECT_NE(log.find("error: IO_ERROR: cannot write standard output: " + reason + "\nrc=5\n"), std::string::npos)
          << cmd << redirect << "\n" << log;
    }
  }
  // Standard output closed while a store is written: the store is whole, and verifies.
  const std::string copy = TempDir() + "/out_copy.h5";
  const std::string log = Shell(Bin() + " reshard " + store + " --consolidate -o " + copy + " >&-; echo rc=$?");
  EXPECT_NE(log.find("rc=5"), std::string::npos) << log;
  EXPECT_EQ(Exec("verify " + copy).code, 0);
}

// An input that exists but cannot be read -- a safetensors file, an index, a spec, a layout, a
// store -- is IO_ERROR (exit 5) naming the file and the reason; NOT_FOUND (exit 3) only when it
// does not exist (not "NOT_FOUND: ... cannot open", no reason, for a file mode 600 read by
// another user). Run as user nobody (setpriv), since root reads any file.
TEST(Cli, UnreadableInputsAreIoErrorsAndMissingOnesNotFound) {
  const std::string nobody = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  if (Shell(nobody + "true && echo ok") != "ok\n")
    GTEST_SKIP() << "not run: cannot run a command as another user here (setpriv missing or not root)";
  const std::string d = TempDir() + "/unreadable";
  ASSERT_EQ(std::system(("mkdir -p " + d + " && chmod 711 " + TempDir() + " && chmod 755 " + d).c_str()), 0);
  const std::string spec = d + "/spec.json", layout = d + "/layout.json", st = d + "/w.safetensors";
  std::ofstream(spec) << kSpec;
  std::ofstream(layout) << kLayout;
  ASSERT_EQ(Exec("export " + spec + " -o " + st).code, 0);
  ASSERT_EQ(Exec("init --spec " + spec + " -o " + d + "/m.h5").code, 0);
  std::ofstream(d + "/i.index.json") << R"({"weight_map": {"norm": "w.safetensors"}})";
  const std::string ok_spec = d + "/ok.json";  // readable, for the unreadable layout
  std::ofstream(ok_spec) << kSpec;
  std::ofstream(d + "/ok.index.json") << R"({"weight_map": {"norm": "w.safetensors"}})";
  ASSERT_EQ(std::system(("chmod 600 " + spec + " " + layout + " " + st + " " + d + "/m.h5 " + d + "/i.index.json && chmod 644 " +
                         ok_spec + " " + d + "/ok.index.json").c_str()), 0);
  if (Shell(nobody + "cat " + spec + " >/dev/null 2>&1 && echo readable").find("readable") != std::string::npos)
    GTEST_SKIP() << "not run: user nobody can read a file of mode 600 here";
  struct Case {
    std::string args, needle;
  };
  const std::string denied = "': cannot open: Permission denied";
  const Case cases[] = {
      {"fingerprint " + st, "IO_ERROR: safetensors file '" + st + denied},
      {"fingerprint " + d + "/i.index.json", "IO_ERROR: file '" + d + "/i.index.json" + denied},
      {"fingerprint " + d + "/ok.index.json", "safetensors file '" + st + denied},
      {"import " + st + " -o " + d + "/out.h5", "safetensors file '" + st + denied},
      {"fingerprint " + spec, "IO_ERROR: file '" + spec + denied},
      {"init --spec " + spec + " -o " + d + "/out.h5", "IO_ERROR: spec file '" + spec + denied},
      {"fingerprint " + ok_spec + " --layout " + layout + " --rank 0", "IO_ERROR: layout file '" + layout + denied},
      {"inspect " + d + "/m.h5", "IO_ERROR: file '" + d + "/m.h5" + denied},
  };
  for (const auto& c : cases) {
    const std::string log = Shell(nobody + Bin() + " " + c.args + "; echo rc=$?");
    EXPECT_NE(log.find(c.needle), std::string::npos) << c.args << "\n" << log;
    EXPECT_NE(log.find("rc=5"), std::string::npos) << c.args << "\n" << log;
  }
  const std::string none = "': cannot open: No such file or directory";
  const Case missing[] = {
      {"fingerprint " + d + "/no.safetensors", "NOT_FOUND: safetensors file '" + d + "/no.safetensors" + none},
      {"fingerprint " + d + "/no.json", "NOT_FOUND: file '" + d + "/no.json" + none},
      {"init --spec " + d + "/no.json -o " + d + "/out.h5", "NOT_FOUND: spec file '" + d + "/no.json" + none},
      {"fingerprint " + ok_spec + " --layout " + d + "/no.json --rank 0", "NOT_FOUND: layout file '" + d + "/no.json" + none},
      {"inspect " + d + "/no.h5", "NOT_FOUND: file '" + d + "/no.h5" + none},
  };
  for (const auto& c : missing) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, 3) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
  }
}

// A spec or a layout may come from a pipe (`<(...)`, /dev/stdin, a named FIFO): read once,
// as a spec (`inspect <(cat spec.json)` must not say "not an HDF5 file" by reading the pipe
// while guessing its kind). What is read by seeking -- a store, a distributed save, a
// safetensors file, an index naming files next to it -- given as a pipe is refused at once,
// naming it (a FIFO with no writer yet would hang the command in HDF5's open).
TEST(Cli, ASpecOrALayoutMayComeFromAPipeAndNothingElseHangsOnOne) {
  const std::string d = TempDir() + "/pipes";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = Write("pipes/spec.json", kSpec), layout = Write("pipes/layout.json", kLayout);
  const Proc want = Exec("fingerprint " + spec + " --layout " + layout + " --rank 3 --json");
  ASSERT_EQ(want.code, 0) << want.err;
  const std::string b = Bin();
  EXPECT_EQ(Shell("bash -c '" + b + " fingerprint <(cat " + spec + ") --layout <(cat " + layout +
                  ") --rank 3 --json 2>/dev/null'"),
            want.out);
  EXPECT_EQ(Shell("cat " + spec + " | " + b + " fingerprint /dev/stdin --layout " + layout + " --rank 3 --json"),
            want.out);
  const Proc inspect = Exec("inspect " + spec);
  ASSERT_EQ(inspect.code, 0);
  const std::string fifo = d + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(Shell("cat " + spec + " > " + fifo + " & " + b + " inspect " + fifo).find("norm"), std::string::npos);
  // Not a spec: named as a pipe.
  const std::string junk = Shell("bash -c '" + b + " inspect <(echo junk); echo rc=$?'");
  EXPECT_NE(junk.find("is a pipe (FIFO): of the model sources only a spec (JSON) can be read from one"),
            std::string::npos) << junk;
  EXPECT_NE(junk.find("malformed JSON"), std::string::npos) << junk;
  EXPECT_NE(junk.find("rc=2"), std::string::npos) << junk;
  // What must be seeked: refused at once, though the FIFO has no writer (each under `timeout`:
  // a hang fails the case with rc=124 rather than the suite).
  const std::string fifo_st = d + "/fifo.safetensors", fifo_index = d + "/fifo.index.json";
  ASSERT_EQ(::mkfifo(fifo_st.c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(fifo_index.c_str(), 0600), 0);
  struct Case {
    std::string args, needle;
  };
  const Case cases[] = {
      {"verify " + fifo, "file '" + fifo + "': is a pipe (FIFO), not a store: a store is read by seeking"},
      {"import " + fifo_st + " -o " + d + "/out.h5",
       "safetensors file '" + fifo_st + "' is a pipe (FIFO), not a regular file: safetensors files are read by seeking"},
      {"import " + fifo_index + " -o " + d + "/out.h5",
       "index file '" + fifo_index + "' is a pipe (FIFO), not a regular file: an index names the files next to it"},
      {"fingerprint " + fifo_st, "safetensors file '" + fifo_st + "' is a pipe (FIFO)"},
  };
  for (const auto& c : cases) {
    const std::string log = Shell("timeout 20 " + b + " " + c.args + "; echo rc=$?");
    EXPECT_NE(log.find(c.needle), std::string::npos) << c.args << "\n" << log;
    EXPECT_NE(log.find("rc=2"), std::string::npos) << c.args << "\n" << log;
  }
}

// Names near NAME_MAX (255 bytes): a store gets a temporary that fits; a distributed save whose
// rank files' names ("<P>.<8 hex>.rank<r>.h5") or commit files ("<P>.<8 hex>.commit",
// docs/FORMAT.md 10) would not fit is refused before any work, naming the limit (not at the
// last rename, "File name too long").
TEST(Cli, LongOutputNamesWorkOrAreRefusedFirst) {
  const std::string d = TempDir() + "/long_names";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = Write("long_names/spec.json", kSpec), layout = Write("long_names/layout.json", kLayout);
  const std::string store = d + "/" + std::string(252, 's') + ".h5";  // 255 bytes
  const Proc init = Exec("init --spec " + spec + " -o " + store);
  ASSERT_EQ(init.code, 0) << init.err;
  EXPECT_EQ(Exec("verify " + store).code, 0);
  const Proc save = Exec("reshard " + store + " --layout " + layout + " -q -o " + d + "/" + std::string(240, 'p') + ".h5");
  EXPECT_EQ(save.code, 2) << save.err;
  EXPECT_NE(save.err.find("the name is too long for its rank files"), std::string::npos) << save.err;
  EXPECT_NE(save.err.find("a file name has at most 255"), std::string::npos) << save.err;
  const Proc one = Exec("reshard " + store + " --consolidate -q -o " + d + "/" + std::string(252, 'c') + ".h5");
  EXPECT_EQ(one.code, 2) << one.err;
  EXPECT_NE(one.err.find("the name is too long for its commit files (as '" + std::string(252, 'c') + ".h5.ffffffff.commit'"),
            std::string::npos)
      << one.err;
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(d)) files += e.is_regular_file();
  EXPECT_EQ(files, 3u) << "only the spec, the layout and the store";
  // Names that fit save as usual.
  const Proc ok = Exec("reshard " + store + " --layout " + layout + " -q -o " + d + "/" + std::string(200, 'p') + ".h5");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// Inputs of the wrong kind, or beyond what seedstore reads, are named as such -- not CORRUPT, a
// damaged file's error (not `import m.h5`: "header length ... exceeds the limit", nor
// `verify spec.json`: not-hdf5) -- and options that would be ignored are refused.
TEST(Cli, WrongKindsOfInputAreNamedNotCorrupt) {
  const std::string d = TempDir() + "/kinds";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = Write("kinds/spec.json", kSpec), store = d + "/m.h5", st = d + "/m.safetensors";
  ASSERT_EQ(Exec("init --spec " + spec + " -o " + store).code, 0);
  ASSERT_EQ(Exec("export " + spec + " -o " + st).code, 0);
  struct Case {
    std::string args, needle;
    int code;
  };
  const Case cases[] = {
      {"import " + store + " -o " + d + "/out.h5", "is an HDF5 file (a seedstore store or distributed save?), not safetensors", 2},
      {"verify " + spec, "is a spec (JSON), not a seedstore store: it stores no data", 6},
      {"export " + spec + " -o " + d + "/o.safetensors --max-shard-size ''", "--max-shard-size: empty: give a size such as 5GB", 2},
      {"import " + st + " -o " + store + " --update --seed 3", "--update excludes --seed", 2},
  };
  for (const auto& c : cases) {
    const Proc r = Exec(c.args);
    EXPECT_EQ(r.code, c.code) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(d + "/out.h5"));
  EXPECT_FALSE(std::filesystem::exists(d + "/o.safetensors"));
  // --update names both shapes and dtypes when they differ.
  const std::string other = Write("kinds/other.json", R"({"seedstore": 1, "tensors": [
    {"name": "norm", "shape": [11], "dtype": "float32", "init": {"dist": "ones"}}]})");
  ASSERT_EQ(Exec("export " + other + " -o " + d + "/norm.safetensors").code, 0);
  const std::string before = ReadFile(store);
  const Proc u = Exec("import " + d + "/norm.safetensors -o " + store + " --update");
  EXPECT_EQ(u.code, 2) << u.err;
  EXPECT_NE(u.err.find("tensor 'norm' is [11] float32; the store's is [10] float32"), std::string::npos) << u.err;
  EXPECT_EQ(ReadFile(store), before);
  // safetensors by any name (export -o writes any) is read as safetensors, by its first bytes
  // (not CORRUPT not-hdf5 from inspect and diff of export's own output).
  ASSERT_EQ(Exec("export " + spec + " -o " + d + "/odd.h5").code, 0);
  const Proc i = Exec("inspect " + d + "/odd.h5");
  EXPECT_EQ(i.code, 0) << i.err;
  EXPECT_NE(i.out.find("safetensors in 1 file"), std::string::npos) << i.out;
  EXPECT_EQ(Exec("diff " + d + "/odd.h5 " + spec).code, 0);
  EXPECT_EQ(Exec("verify " + d + "/odd.h5").code, 6);
}

// A distributed save whose master was renamed keeps its rank files' names; a later save to
// the old name replaces its own save only (removing every "<old name>.<id>.rank<r>.h5" would
// lose the renamed save). The replaced save's own rank files are still removed.
TEST(Cli, ASaveToTheNameOfARenamedMasterKeepsTheRenamedSave) {
  const std::string d = TempDir() + "/renamed";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = Write("renamed/spec.json", kSpec), layout = Write("renamed/layout.json", kLayout);
  const std::string store = d + "/m.h5";
  ASSERT_EQ(Exec("init --spec " + spec + " -o " + store).code, 0);
  ASSERT_EQ(Exec("export " + store + " -o " + d + "/m.safetensors").code, 0);
  ASSERT_EQ(Exec("import " + d + "/m.safetensors -o " + d + "/dense.h5").code, 0);  // dense: rank files
  auto rank_files = [&d](const std::string& master) {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(d)) {
      const std::string f = e.path().filename();
      n += f.rfind(master + ".", 0) == 0 && f.size() > 3 && f.compare(f.size() - 3, 3, ".h5") == 0;
    }
    return n;
  };
  const std::string a = d + "/a.h5", keep = d + "/keep.h5";
  ASSERT_EQ(Exec("reshard " + d + "/dense.h5 --layout " + layout + " -q -o " + a).code, 0);
  const size_t per_save = rank_files("a.h5");
  ASSERT_GT(per_save, 0u);
  ASSERT_EQ(std::rename(a.c_str(), keep.c_str()), 0);
  ASSERT_EQ(Exec("verify " + keep).code, 0);
  ASSERT_EQ(Exec("reshard " + d + "/dense.h5 --layout " + layout + " -q -o " + a).code, 0);
  const Proc v = Exec("verify " + keep);
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  EXPECT_EQ(Exec("diff " + keep + " " + spec).code, 0);
  EXPECT_EQ(rank_files("a.h5"), 2 * per_save);  // keep.h5's and the new a.h5's
  // Replacing a.h5 again removes a.h5's replaced rank files, not keep.h5's.
  ASSERT_EQ(Exec("reshard " + d + "/dense.h5 --layout " + layout + " -q -o " + a).code, 0);
  EXPECT_EQ(rank_files("a.h5"), 2 * per_save);
  EXPECT_EQ(Exec("verify " + keep).code, 0);
  EXPECT_EQ(Exec("verify " + a).code, 0);
}

// One-file writers (import, init, export, reshard --consolidate) honour a distributed save's
// writer lock "<P>.lock": while another live process holds it, writing P is refused, named,
// and P is untouched (an import renamed over P mid-save would make the save fail as
// "bad-index" and leave its rank files). A lock file nobody holds (its writer was killed) does
// not stop them, whatever it records.
TEST(Cli, OneFileWritersHonourASavesWriterLock) {
  const std::string d = TempDir() + "/locked";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = Write("locked/spec.json", kSpec), p = d + "/p.h5", st = d + "/m.safetensors";
  ASSERT_EQ(Exec("export " + spec + " -o " + st).code, 0);
  ASSERT_EQ(Exec("init --spec " + spec + " -o " + p).code, 0);
  const std::string before = ReadFile(p);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string live = "pid " + std::to_string(::getpid()) + " on " + host;  // this test: alive
  for (const std::string& holder : {live, std::string("pid 4242 on another-host.example")}) {
    testutil::HeldWriterLock held(p + ".lock", holder);  // this test process holds it
    ASSERT_TRUE(held.ok());
    for (const std::string& cmd : {"import " + st + " -o " + p, "init --spec " + spec + " -o " + p,
                                   "export " + spec + " --format safetensors -o " + p,
                                   "reshard " + spec + " --consolidate -q -o " + p}) {
      const Proc r = Exec(cmd);
      EXPECT_EQ(r.code, 5) << cmd << "\n" << r.err;
      EXPECT_NE(r.err.find("writer-locked: '" + p + "'"), std::string::npos) << cmd << "\n" << r.err;
      EXPECT_NE(r.err.find(holder), std::string::npos) << cmd << "\n" << r.err;
      EXPECT_EQ(ReadFile(p), before) << cmd;
    }
  }
  // A lock file its holder left (released: the holder ended), even one that names a live
  // process: an interrupted save's; the one-file write goes ahead.
  ASSERT_TRUE(std::filesystem::exists(p + ".lock"));
  ASSERT_NE(ReadFile(p + ".lock").find("another-host"), std::string::npos);
  const Proc ok = Exec("import " + st + " -o " + p);
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(Exec("diff " + p + " " + spec).code, 0);
  std::filesystem::remove(p + ".lock");
}

// A save whose rank file has become a directory or a pipe is damaged: CORRUPT
// (rank-file-corrupt, exit 4), named, and read at once (not INVALID_ARGUMENT, exit 2, as if
// the user had given a bad argument).
TEST(Cli, ARankFileThatIsNotAFileIsCorruptNotAnArgument) {
  const std::string d = TempDir() + "/rank_kinds";
  ASSERT_EQ(std::system(("mkdir -p " + d).c_str()), 0);
  const std::string spec = Write("rank_kinds/spec.json", kSpec), layout = Write("rank_kinds/layout.json", kLayout);
  ASSERT_EQ(Exec("export " + spec + " -o " + d + "/m.safetensors").code, 0);
  ASSERT_EQ(Exec("import " + d + "/m.safetensors -o " + d + "/dense.h5").code, 0);
  const std::string p = d + "/p.h5";
  ASSERT_EQ(Exec("reshard " + d + "/dense.h5 --layout " + layout + " -q -o " + p).code, 0);
  std::string rank1;
  for (const auto& e : std::filesystem::directory_iterator(d)) {
    const std::string n = e.path().filename();
    if (n.rfind("p.h5.", 0) == 0 && n.size() > 9 && n.substr(n.size() - 9) == ".rank1.h5") rank1 = e.path();
  }
  ASSERT_FALSE(rank1.empty());
  ASSERT_EQ(std::rename(rank1.c_str(), (d + "/rank1.bak").c_str()), 0);
  ASSERT_TRUE(std::filesystem::create_directory(rank1));
  for (const std::string& cmd : {"verify " + p, "export " + p + " -o " + d + "/e.safetensors"}) {
    const Proc r = Exec(cmd);
    EXPECT_EQ(r.code, 4) << cmd << "\n" << r.err;
    const std::string all = r.out + r.err;  // verify lists its problems on stdout
    EXPECT_NE(all.find("rank-file-corrupt"), std::string::npos) << cmd << "\n" << all;
    EXPECT_NE(all.find("is a directory"), std::string::npos) << cmd << "\n" << all;
  }
  std::filesystem::remove(rank1);
  ASSERT_EQ(::mkfifo(rank1.c_str(), 0600), 0);
  const std::string log = Shell("timeout 20 " + Bin() + " export " + p + " -o " + d + "/e.safetensors; echo rc=$?");
  EXPECT_NE(log.find("rank-file-corrupt"), std::string::npos) << log;
  EXPECT_NE(log.find("rc=4"), std::string::npos) << log;
  std::filesystem::remove(rank1);
  ASSERT_EQ(std::rename((d + "/rank1.bak").c_str(), rank1.c_str()), 0);
  EXPECT_EQ(Exec("verify " + p).code, 0);
}

// gen --help lists every dtype it accepts, from the dtype table (int8..int64 and bool
// included).
TEST(Cli, GenHelpListsEveryDtype) {
  const Proc h = Exec("gen --help");
  ASSERT_EQ(h.code, 0);
  for (const char* dt : {"float32", "float64", "bfloat16", "float16", "uint8", "uint64", "int8", "int16", "int32",
                         "int64", "bool"}) {
    EXPECT_NE(h.out.find(dt), std::string::npos) << dt << "\n" << h.out;
  }
  EXPECT_EQ(Exec("gen --shape 3 --dtype int8 --init '{\"dist\":\"constant\",\"value\":-2}' --format text").out, "-2\n-2\n-2\n");
}

// inspect pads names by UTF-8 code points, not bytes: the columns after a non-ASCII name line
// up ('größe' takes 5 columns, not 7).
TEST(Cli, InspectAlignsNonAsciiNames) {
  const std::string spec = Write("utf8.json", R"({"seedstore": 1, "seed": 0, "tensors": [
    {"name": "größe", "shape": [2], "dtype": "float32", "init": {"dist": "zeros"}},
    {"name": "weight", "shape": [3], "dtype": "float32", "init": {"dist": "zeros"}}]})");
  const Proc r = Exec("inspect " + spec);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\ngröße   [2]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nweight  [3]"), std::string::npos) << r.out;
}

// A safetensors file holding one tensor 't' of `shape` ("[0, 5]") and no bytes.
std::string EmptyTensorFile(const std::string& name, const std::string& shape) {
  std::string header = R"({"t": {"dtype": "F32", "shape": )" + shape + R"(, "data_offsets": [0, 0]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  for (int k = 0; k < 8; ++k) bytes[k] = static_cast<char>((header.size() >> (8 * k)) & 0xFF);
  return Write(name, bytes + header);
}

// One rule for a dimension, wherever a shape is read, whether the tensor has elements or not:
// at most 2^63 - 1, refused otherwise naming the tensor, the dim and the limit (so [0, 2^63]
// does not pass fingerprint/diff and fail import inside HDF5, [2^64 - 1, 0] is not "more than
// 2^62 bytes", a spec dim 2^63 is not "expected a non-negative integer").
TEST(Cli, DimensionsOf2To63OrMoreAreRefusedEverywhere) {
  const std::string big = EmptyTensorFile("dim63.safetensors", "[0, 9223372036854775808]");
  const std::string huge = EmptyTensorFile("dim64.safetensors", "[18446744073709551615, 0]");
  const std::string ok = EmptyTensorFile("dimok.safetensors", "[0, 9223372036854775807]");
  const std::string store = TempDir() + "/dim.h5";
  for (const std::string& cmd : {"fingerprint " + big, "diff " + big + " " + ok, "import " + big + " -o " + store}) {
    const Proc r = Exec(cmd);
    EXPECT_EQ(r.code, 4) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find("tensor 't': shape: dim 1 is 9223372036854775808, more than the limit 2^63 - 1"),
              std::string::npos) << cmd << "\n" << r.err;
  }
  const Proc h = Exec("import " + huge + " -o " + store);
  EXPECT_EQ(h.code, 4) << h.err;
  EXPECT_NE(h.err.find("dim 0 is 18446744073709551615, more than the limit 2^63 - 1"), std::string::npos) << h.err;
  const Proc spec = Exec("fingerprint " + Write("dim.json", R"({"seedstore": 1, "tensors": [
    {"name": "e", "shape": [0, 9223372036854775808], "dtype": "float32", "init": {"dist": "zeros"}}]})"));
  EXPECT_EQ(spec.code, 2) << spec.err;
  EXPECT_NE(spec.err.find("('e').shape: dim 1 is 9223372036854775808, more than the limit 2^63 - 1"), std::string::npos)
      << spec.err;
  const Proc g = Exec("gen --shape 0,9223372036854775808");
  EXPECT_EQ(g.code, 2) << g.err;
  EXPECT_NE(g.err.find("--shape: dim 1 is 9223372036854775808, more than the limit 2^63 - 1"), std::string::npos) << g.err;
  // The limit itself is a valid (empty) tensor, end to end.
  const Proc i = Exec("import " + ok + " -o " + store);
  ASSERT_EQ(i.code, 0) << i.err;
  EXPECT_EQ(Exec("verify " + store).code, 0);
  EXPECT_EQ(Exec("diff " + store + " " + ok).code, 0);
}

// A directory given where a model source is expected is named as the wrong kind of path
// (exit 2), not reported as a corrupt HDF5 file (exit 4).
TEST(Cli, DirectoryAsSourceIsTheWrongKindOfPath) {
  const std::string d = TempDir() + "/adir";
  ASSERT_EQ(std::system(("mkdir -p " + d + " " + d + ".json " + d + ".safetensors").c_str()), 0);
  for (const std::string& src : {d, d + ".json", d + ".safetensors"}) {
    for (const std::string& cmd : {std::string("inspect "), std::string("fingerprint "),
                                   "export -o " + TempDir() + "/adir.out.safetensors "}) {
      const Proc r = Exec(cmd + src);
      EXPECT_EQ(r.code, 2) << cmd << src << "\n" << r.err;
      EXPECT_NE(r.err.find("'" + src + "' is a directory, not a model source"), std::string::npos) << r.err;
    }
  }
  const Proc v = Exec("verify " + d);
  EXPECT_EQ(v.code, 2) << v.err;
  EXPECT_NE(v.err.find("file '" + d + "': is a directory, not a store"), std::string::npos) << v.err;
  const Proc diff = Exec("diff " + d + " " + d + ".json");
  EXPECT_EQ(diff.code, 2) << diff.err;
  EXPECT_NE(diff.err.find("is a directory"), std::string::npos) << diff.err;
}

// ---- Bad input: named, never INTERNAL ---------------------------------------------------------

TEST(BadInput, AShardTooLargeForMemoryIsRefusedUpFront) {
  // 2^60 float32 elements: 4 EiB, refused before any is allocated, naming tensor and bytes.
  const std::string spec = Write("huge.json", R"({"seedstore": 1, "seed": 1, "tensors": [
      {"name": "huge.w", "shape": [1152921504606846976], "dtype": "float32", "init": {"dist": "normal"}}]})");
  const std::string layout = Write("one.json", R"({"mesh": {"axes": ["d"], "shape": [1]}, "placements": []})");
  const std::string out = TempDir() + "/huge.safetensors";
  for (const std::string& args : {"export " + spec + " -o " + out,
                                  "materialize " + spec + " --layout " + layout + " --rank 0 -o " + out,
                                  std::string("gen --shape 1152921504606846976")}) {
    const Proc r = Exec(args);
    EXPECT_EQ(r.code, 6) << args << ": " << r.err;  // UNSUPPORTED
    EXPECT_NE(r.err.find("needs 4611686018427387904 bytes in memory"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(args[0] == 'g' ? "tensor 'tensor'" : "tensor 'huge.w'"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("INTERNAL"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

TEST(BadInput, ASpecOrLayoutFromAPipeHasASizeLimit) {
  // 64 MiB + 1 byte of JSON whitespace from a pipe: refused at the limit, naming the file.
  const std::string big = "<(head -c 67108865 /dev/zero | tr '\\0' ' ')";
  for (const std::string& args : {"inspect " + big, "materialize " + Write("s2.json", kSpec) + " --layout " + big +
                                                        " --rank 0 -o " + TempDir() + "/p.safetensors"}) {
    const std::string cmd = "bash -c \"'" + Bin() + "' " + args + "\" 2>" + TempDir() + "/pipe.err";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[4096];
    while (fread(buf, 1, sizeof buf, p) > 0) {
    }
    const int st = pclose(p);
    const std::string err = ReadFile(TempDir() + "/pipe.err");
    EXPECT_EQ(WIFEXITED(st) ? WEXITSTATUS(st) : -1, 2) << args << ": " << err;  // INVALID_ARGUMENT
    EXPECT_NE(err.find("longer than 67108864 bytes (64 MiB)"), std::string::npos) << err;
    EXPECT_NE(err.find("/dev/fd/"), std::string::npos) << "names the file: " << err;
  }
}

TEST(BadInput, AnEmptyTensorNameIsRefusedByEveryCommand) {
  // A valid safetensors file (the reference reads it) holding a tensor named "".
  const std::string header = R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  std::string bytes(8, '\0');
  for (int k = 0; k < 8; ++k) bytes[k] = static_cast<char>((header.size() >> (8 * k)) & 0xff);
  bytes += header + std::string(8, '\0');
  const std::string st = Write("empty-name.safetensors", bytes);
  const std::string layout = Write("one3.json", R"({"mesh": {"axes": ["d"], "shape": [1]}, "placements": []})");
  const std::string o = TempDir() + "/empty-out";
  for (const std::string& args :
       {"inspect " + st, "fingerprint " + st, "export " + st + " -o " + o + ".safetensors", "import " + st + " -o " + o + ".h5",
        "materialize " + st + " --layout " + layout + " --rank 0 -o " + o + ".safetensors",
        "reshard " + st + " --layout " + layout + " -o " + o + ".h5", "diff " + st + " " + st}) {
    const Proc r = Exec(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find("empty name"), std::string::npos) << args << ": " << r.err;
  }
}

TEST(BadInput, ReshardOfLazyTensorsChecksTheLayoutAgainstThem) {
  // A placement with more entries than a lazy tensor's rank: refused as for a dense one.
  const std::string spec = Write("lazy-only.json", kSpec);
  const std::string layout = Write("too-long.json", R"({"mesh": {"axes": ["d"], "shape": [2]},
      "placements": [{"match": "norm", "spec": ["d", null]}]})");
  const std::string out = TempDir() + "/lazy-resharded.h5";
  const Proc r = Exec("reshard " + spec + " --layout " + layout + " -o " + out);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("tensor 'norm' of shape [10]: spec has 2 entries"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace seedstore
