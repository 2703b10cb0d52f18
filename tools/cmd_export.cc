// seedstore export: a store's tensors (whole, or one rank's shards) to safetensors, optionally
// split into several files with a Hugging Face model.safetensors.index.json.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "io/interop.h"
#include "io/open.h"
#include "tools/cli.h"

namespace seedstore::cli {
namespace {

struct Options {
  std::string source, format = "safetensors", out, layout, tensors = "*", max_size;
  int rank = -1, threads = 0;
  bool json = false;
};

int Run(const Options& o) {
  auto cat = OpenCatalog(o.source);
  if (!cat.ok()) return Fail(cat.status());
  if (Status g = CheckGlobMatches(o.tensors, {cat->get()}); !g.ok()) return Fail(g);
  ExportOptions e;
  e.tensors_glob = o.tensors;
  e.cpu.threads = o.threads;
  auto layout = LayoutForRank(o.layout, o.rank);
  if (!layout.ok()) return Fail(layout.status());
  if (*layout) {
    e.layout = &**layout;
    e.rank = o.rank;
  }
  uint64_t max_bytes = 0;
  if (!o.max_size.empty()) {
    auto m = ParseByteSize(o.max_size);
    if (!m.ok()) return Fail(m.status().WithContext("--max-shard-size"));
    max_bytes = *m;
  }
  // No file written -- the output, or (split) each shard file and the index, as planned -- may
  // be the source, one of its files or the layout.
  auto is_input = [&o, &cat](const std::string& file) {
    Status st = CheckOutputIsNotInput(file, o.source, cat->get());
    return st.ok() ? CheckOutputIsNotInput(file, o.layout) : st;
  };
  e.check_output = is_input;
  uint64_t total = 0;
  for (const auto& t : (*cat)->tensors())
    if (GlobMatch(o.tensors, t.name)) total += t.NumBytes();
  Result<std::vector<std::string>> files = std::vector<std::string>();
  {
    Progress p("exporting", e.layout ? 0 : total);
    files = ExportSafetensorsFiles(**cat, o.out, e, max_bytes, [&p](uint64_t n) { p.Advance(n); });
  }
  if (!files.ok()) return Fail(files.status());
  // Files of an earlier export to this path, split otherwise, still load: named, never removed.
  std::string left;
  for (const std::string& f : LeftoverExportFiles(o.out, *files))
    if (is_input(f).ok()) left += (left.empty() ? "'" : ", '") + f + "'";
  if (!left.empty())
    std::fprintf(stderr,
                 "%s: warning: %s: left from an earlier export to '%s' (split otherwise) and not "
                 "replaced by this one; remove them if they are stale\n",
                 g_command.c_str(), left.c_str(), o.out.c_str());
  if (o.json) {
    std::printf("%s\n", nlohmann::json({{"files", *files}}).dump(2).c_str());
  } else {
    for (const auto& f : *files) std::printf("wrote %s\n", f.c_str());
  }
  return 0;
}

Register reg(
    {"export", "Write a store's tensors (or one rank's shards) as safetensors", [](CLI::App& app) {
       auto o = std::make_shared<Options>();
       AddSourceArg(app, &o->source);
       app.add_option("--format", o->format, "Output format")
           ->check(CLI::IsMember({"safetensors"}));
       app.add_option("-o,--output", o->out, "Output file, e.g. model.safetensors")
           ->required()
           ->check(FileOutput("safetensors"));
       app.add_option("--layout", o->layout, "Layout JSON: write only --rank's shards");
       AddInteger(app, "--rank", &o->rank, "Rank whose shards to write (with --layout)", 0);
       app.add_option("--tensors", o->tensors, "Glob of tensor names (default *)");
       app.add_option(
              "--max-shard-size", o->max_size,
              "Split into files of at most this much tensor data (e.g. 5GB, 1.5GiB, 1e9), "
              "named <stem>-00001-of-0000N.safetensors, with <output>.index.json as Hugging "
              "Face does; all are renamed into place only once every one is written")
           ->check(CLI::Validator(
               [](std::string& v) {
                 return v.empty() ? std::string("empty: give a size such as 5GB") : std::string();
               },
               ""));
       AddThreadsOption(app, &o->threads, "CPU threads", "all cores");
       app.add_flag("--json", o->json, "JSON output");
       return [o] { return Run(*o); };
     }});

}  // namespace
}  // namespace seedstore::cli
