// seedstore materialize: one rank's shards of a spec or store, to a safetensors file.
#include <cstdio>

#include "io/export.h"
#include "io/open.h"
#include "tools/cli.h"

namespace seedstore::cli {
namespace {

struct Options {
  std::string source, layout, tensors = "*", out, device = "auto";
  int rank = -1, threads = 0;
};

int Run(const Options& o) {
  auto device = ResolveDevice(o.device);
  if (!device.ok()) return Fail(device.status());
  auto cat = OpenCatalog(o.source);
  if (!cat.ok()) return Fail(cat.status());
  auto layout = LayoutForRank(o.layout, o.rank);
  if (!layout.ok()) return Fail(layout.status());
  for (auto st :
       {CheckOutputIsNotInput(o.out, o.source, cat->get()), CheckOutputIsNotInput(o.out, o.layout)})
    if (!st.ok()) return Fail(st);
  if (Status g = CheckGlobMatches(o.tensors, {cat->get()}); !g.ok()) return Fail(g);
  ExportOptions e;
  e.tensors_glob = o.tensors;
  e.layout = &**layout;
  e.rank = o.rank;
  e.cpu.threads = o.threads;
  e.device = *device;
  auto n = ExportSafetensors(**cat, o.out, e);
  if (!n.ok()) return Fail(n.status());
  std::fprintf(stderr, "wrote %d shard(s) of rank %d to %s\n", *n, o.rank, o.out.c_str());
  return 0;
}

Register reg(
    {"materialize", "Write one rank's shards to a safetensors file", [](CLI::App& app) {
       auto o = std::make_shared<Options>();
       AddSourceArg(app, &o->source);
       app.add_option("--layout", o->layout, "Layout JSON (mesh + placements)")->required();
       AddInteger(app, "--rank", &o->rank, "Rank whose shards to write", 0)->required();
       app.add_option("--tensors", o->tensors, "Glob of tensor names (default *)");
       app.add_option("-o,--output", o->out, "Output .safetensors file")
           ->required()
           ->check(FileOutput("safetensors"));
       AddThreadsAndDeviceOptions(app, &o->threads, &o->device);
       return [o] { return Run(*o); };
     }});

}  // namespace
}  // namespace seedstore::cli
