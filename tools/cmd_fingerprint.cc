// seedstore fingerprint: per-tensor layout-independent fingerprints (whole, or a rank's shard).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "io/device.h"
#include "io/open.h"
#include "store/layout.h"
#include "tools/cli.h"

namespace seedstore::cli {
namespace {

struct Options {
  std::string source, layout, tensors = "*", device = "auto";
  int rank = -1, threads = 0;
  bool json = false;
};

int Run(const Options& o) {
  auto device = ResolveDevice(o.device);
  if (!device.ok()) return Fail(device.status());
  auto cat = OpenCatalog(o.source);
  if (!cat.ok()) return Fail(cat.status());
  auto l = LayoutForRank(o.layout, o.rank);
  if (!l.ok()) return Fail(l.status());
  const std::optional<Layout>& layout = *l;
  if (Status g = CheckGlobMatches(o.tensors, {cat->get()}); !g.ok()) return Fail(g);
  nlohmann::json out = nlohmann::json::array();
  const auto& ts = (*cat)->tensors();
  Progress bar("fingerprint", ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    if (!GlobMatch(o.tensors, ts[i].name)) continue;
    Region r = WholeTensor(ts[i].shape);
    if (layout) {
      if (Status w = CheckWholeTensor(**cat, ts[i], "fingerprint --layout"); !w.ok())
        return Fail(w);
      auto s = layout->ShardOf(ts[i].name, ts[i].shape, o.rank);
      if (!s.ok()) return Fail(s.status());
      r = s->region;
    }
    auto f = FingerprintOnDevice(*device, **cat, i, r, CpuOptions{o.threads});
    if (!f.ok()) return Fail(f.status());
    bar.Advance();
    if (o.json) {
      nlohmann::json e = {{"name", ts[i].name}, {"fingerprint", FingerprintHex(*f)}};
      if (layout) e["region"] = DescribeRegion(r);
      out.push_back(e);
    } else {
      std::printf("%s %s\n", ShownText(ts[i].name).c_str(), FingerprintHex(*f).c_str());
    }
  }
  if (o.json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

Register reg({"fingerprint", "Print each tensor's fingerprint (or one rank's shard's)",
              [](CLI::App& app) {
                auto o = std::make_shared<Options>();
                AddSourceArg(app, &o->source);
                app.add_option("--layout", o->layout, "Layout JSON: fingerprint one rank's shards");
                AddInteger(app, "--rank", &o->rank, "Rank (with --layout)", 0);
                app.add_option("--tensors", o->tensors, "Glob of tensor names (default *)");
                app.add_flag("--json", o->json, "JSON output");
                AddThreadsAndDeviceOptions(app, &o->threads, &o->device);
                return [o] { return Run(*o); };
              }});

}  // namespace
}  // namespace seedstore::cli
