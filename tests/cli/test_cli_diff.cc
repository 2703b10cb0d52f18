// `seedstore diff` run as a user would: the same weights proven across every kind of source and
// layout; a flat shard against a box shard on their overlap; rank files with empty shards and a
// distributed save's rank file compared on what they hold.
#include "tests/cli/cli_test_util.h"

namespace seedstore {
namespace {

using namespace clitest;  // NOLINT

// `diff` across every kind of source holding the same weights: the spec, its safetensors
// export, that file imported as a dense store, the store and the file each resharded into a
// distributed save under the 8-rank layout (pieces in rank files); with and without --recorded.
// Then ranks' shard files (materialize) against the whole model and against each other.
TEST(Cli, DiffProvesTheSameWeightsAcrossFormatsAndLayouts) {
  const std::string spec = Write("spec.json", kSpec);
  const std::string layout = Write("layout.json", kLayout);
  const std::string dir = TempDir();
  const std::string st = dir + "/all.safetensors", dense = dir + "/dense.h5",
                    save = dir + "/save.h5";
  ASSERT_EQ(Exec("export " + spec + " -o " + st).code, 0);
  ASSERT_EQ(Exec("import " + st + " -o " + dense + " --chunk-bytes 64").code, 0);
  const Proc rs = Exec("reshard " + dense + " --layout " + layout + " -o " + save);
  ASSERT_EQ(rs.code, 0) << rs.err;
  const std::string from_st = dir + "/from_st.h5";  // a safetensors file resharded straight away
  const Proc rs2 = Exec("reshard " + st + " --layout " + layout + " -o " + from_st);
  ASSERT_EQ(rs2.code, 0) << rs2.err;
  for (const std::string& pair :
       {spec + " " + st, st + " " + dense, dense + " " + save, spec + " " + save,
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
      EXPECT_EQ(t["result"],
                t["name"] == "norm" || t["name"] == "flat.w" ? "identical" : "other-shards")
          << t.dump();
    EXPECT_EQ(j["compared"], 2);
    EXPECT_EQ(j["counts"]["other-shards"], 2);
    const Proc text = Exec("diff " + r0 + " " + r1);
    EXPECT_EQ(text.code, 0) << text.out << text.err;
    EXPECT_NE(text.out.find("2 compared: 2 identical"), std::string::npos) << text.out;
    EXPECT_NE(text.out.find("2 not compared: the two sides hold disjoint shards"),
              std::string::npos)
        << text.out;
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
    const auto je =
        nlohmann::json::parse(e.out);  // kept: a range over a temporary's member dangles
    for (const auto& t : je["tensors"])
      EXPECT_EQ(t["result"], t["name"] == "act" ? "values-differ" : "identical") << t.dump();
    const Proc text = Exec("diff " + q1 + " " + p2);
    EXPECT_NE(text.out.find("compared on the overlap of two rank files' shards"), std::string::npos)
        << text.out;
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
  const std::string f1 = dir + "/f1.safetensors", f1b = dir + "/f1_44.safetensors",
                    f0 = dir + "/f0.safetensors", b2 = dir + "/b2.safetensors",
                    b6 = dir + "/b6.safetensors";
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
  for (const Region& q :
       {BoxRegion({8, 6, 10}, {2, 4, 0}, {3, 6, 5}), BoxRegion({8, 6, 10}, {3, 0, 0}, {4, 6, 5})}) {
    auto f = (*whole)->FingerprintRegion((*whole)->Find("act"), q);
    ASSERT_TRUE(f.ok());
    act.Add(*f);
  }
  auto lw =
      (*whole)->FingerprintRegion((*whole)->Find("layers.0.w"), BoxRegion({9, 5}, {3, 0}, {5, 3}));
  ASSERT_TRUE(lw.ok());
  // Distributed saves of the same model under both layouts: their rank files hold the same pieces.
  const std::string dense = dir + "/dense.h5", sf = dir + "/sf.h5", s8 = dir + "/s8.h5";
  ASSERT_EQ(Exec("export " + spec + " -o " + dir + "/all.safetensors").code, 0);
  ASSERT_EQ(Exec("import " + dir + "/all.safetensors -o " + dense + " --chunk-bytes 64").code, 0);
  // (--max-padding 0: each rank file holds its shard exactly, not a box padded to the chunk grid)
  ASSERT_EQ(Exec("reshard " + dense + " --layout " + lf + " -o " + sf + " --max-padding 0").code,
            0);
  ASSERT_EQ(Exec("reshard " + dense + " --layout " + l8 + " -o " + s8 + " --max-padding 0").code,
            0);
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
      EXPECT_EQ(rows["layers.0.w"]["a"]["fingerprint"], FingerprintHex(*lw))
          << rows["layers.0.w"].dump();
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
    const std::map<std::string, std::string> want = {{"act", "values-differ"},
                                                     {"flat.w", "identical"},
                                                     {"norm", "not-compared"},
                                                     {"layers.0.w", "not-compared"}};
    for (const auto& t : j["tensors"]) EXPECT_EQ(t["result"], want.at(t["name"])) << t.dump();
    const Proc text = Exec("diff " + f1b + " " + b2);
    EXPECT_EQ(text.code, 7);
    EXPECT_NE(text.out.find("values-differ act  a "), std::string::npos) << text.out;
    EXPECT_NE(
        text.out.find(
            "(the overlap [2:3, 4:6, 0:5] + [3:4, 0:6, 0:5] of the two shards of [8, 6, 10])"),
        std::string::npos)
        << text.out;
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
  EXPECT_NE(
      d.out.find("shape-differs f  [5] float32 against an empty shard of another shape or dtype"),
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
  const std::string sharded = Write(
      "rankdiff/L2.json",
      R"({"mesh": {"axes": ["x"], "shape": [2]}, "placements": [{"match": "*", "spec": ["x"]}]})");
  const std::string replicated =
      Write("rankdiff/R2.json", R"({"mesh": {"axes": ["x"], "shape": [2]}})");
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
    for (const auto& t : j["tensors"])
      r[t["name"].get<std::string>()] = t["result"].get<std::string>();
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
    EXPECT_NE(d.out.find("not-compared  lz  [4, 6] float32  (absent from the rank file a)"),
              std::string::npos)
        << d.out;
    EXPECT_NE(d.out.find("1 compared: 1 identical"), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("1 not compared: absent from a distributed save's rank file"),
              std::string::npos)
        << d.out;
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

}  // namespace
}  // namespace seedstore
