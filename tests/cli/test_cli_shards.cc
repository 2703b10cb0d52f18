// Ranks' shards through the CLI (I4): fingerprints of every rank's shards compose to the
// whole tensor's and materialized shards reassemble it; import keeps a rank's shard file whole
// (empty shards, its rank).
#include "tests/cli/cli_test_util.h"

namespace seedstore {
namespace {

using namespace clitest;  // NOLINT

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
    const Proc r = Exec("fingerprint " + spec + " --layout " + layout + " --rank " +
                        std::to_string(rank) + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    for (const auto& e : nlohmann::json::parse(r.out)) {
      if (!seen[e["name"]].insert(e["region"]).second) continue;  // replicas count once
      got[e["name"]].Add(*ParseFingerprintHex(e["fingerprint"].get<std::string>()));
    }
    const std::string out = TempDir() + "/rank" + std::to_string(rank) + ".safetensors";
    const Proc m = Exec("materialize " + spec + " --layout " + layout + " --rank " +
                        std::to_string(rank) + " -o " + out);
    ASSERT_EQ(m.code, 0) << m.err;
    auto f = SafetensorsFile::Open(out);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const auto shards = nlohmann::json::parse(f->metadata().at("seedstore.shards"));
    ASSERT_TRUE(shards.contains("act"));
    // Each act shard equals the corresponding box from `gen`.
    const auto& a = shards["act"];
    std::string box;
    for (int d = 0; d < 3; ++d)
      box += std::string(d ? "," : "") + std::to_string(a["start"][d].get<uint64_t>()) + ":" +
             std::to_string(a["stop"][d].get<uint64_t>());
    const Proc g = Exec(
        "gen --shape 8,6,10 --dtype bfloat16 --init '{\"dist\":\"normal\",\"scale\":0.05}' --seed "
        "43 --box " +
        box);
    ASSERT_EQ(g.code, 0);
    const SafetensorsEntry* e = f->Find("act");
    ASSERT_NE(e, nullptr);
    std::string bytes(e->end - e->begin, '\0');
    ASSERT_TRUE(f->Read(*e, bytes.data()).ok());
    EXPECT_EQ(bytes, g.out) << "rank " << rank;
  }
  for (const auto& [name, fp] : want)
    EXPECT_EQ(FingerprintHex(got[name]), FingerprintHex(fp)) << name;
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
  EXPECT_EQ(pieces["f"], nlohmann::json::parse(R"({"shape": [4], "region": {"flat": [0, 0]}})"))
      << in.out;
  EXPECT_EQ(pieces["z"], nlohmann::json::parse(R"({"shape": [0, 5], "region": {"flat": [0, 0]}})"))
      << in.out;
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
      EXPECT_EQ(t["by"], t["name"] == "w" ? "fingerprint" : "empty shard")
          << source << " " << t.dump();
    }
    auto lines = [](const std::string& text) {
      std::set<std::string> l;
      for (size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1)
        l.insert(text.substr(at, nl - at));
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
  const std::string r0 = dir + "/keep_r0.safetensors", store0 = dir + "/keep_r0.h5",
                    split = dir + "/keep_split.safetensors";
  ASSERT_EQ(Exec("export " + spec + " --layout " + layout + " --rank 0 -o " + r0).code, 0);
  ASSERT_EQ(Exec("import " + r0 + " -o " + store0).code, 0);
  const Proc sp = Exec("export " + store0 + " -o " + split + " --max-shard-size 1");
  ASSERT_EQ(sp.code, 0) << sp.err;
  const std::string index = ReadFile(split + ".index.json");
  EXPECT_NE(index.find("\"seedstore.rank\": \"0\""), std::string::npos) << index;
  const Proc d = Exec("diff " + split + ".index.json " + spec + " --json");
  EXPECT_EQ(d.code, 0) << d.out << d.err;
  EXPECT_EQ(nlohmann::json::parse(d.out)["counts"]["identical"], 3) << d.out;
  EXPECT_EQ(
      nlohmann::json::parse(Exec("inspect " + split + ".index.json --json").out).value("rank", -1),
      0);
}

}  // namespace
}  // namespace seedstore
