// seedstore inspect: the tensors of a store (or spec): name, shape, dtype, lazy/dense, bytes on
// disk, fingerprint.
#include <cstdio>

#include "io/inspect.h"
#include "io/open.h"
#include "tools/cli.h"
#include "tools/output.h"

namespace seedstore::cli {
namespace {

struct Options {
  std::string source, tensors = "*";
  bool json = false;
};

std::string ShapeStr(const std::vector<uint64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? "," : "") + std::to_string(s[i]);
  return t + "]";
}

void PrintText(const InspectReport& r) {
  size_t wname = 4, wshape = 5;
  for (const InspectRow& row : r.rows) {
    wname = std::max(wname, TextWidth(row.record->name));
    wshape = std::max(wshape, ShapeStr(row.record->shape).size());
  }
  std::printf("%s  %-*s  %-8s  %-5s  %14s  %s\n", PadRight("name", wname).c_str(),
              static_cast<int>(wshape), "shape", "dtype", "kind", "bytes_on_disk", "fingerprint");
  for (const InspectRow& row : r.rows) {
    const TensorRecord& t = *row.record;
    const std::string fp = t.fingerprint ? FingerprintHex(*t.fingerprint) : "-";
    std::printf("%s  %-*s  %-8s  %-5s  %14llu  %s\n", PadRight(t.name, wname).c_str(),
                static_cast<int>(wshape), ShapeStr(t.shape).c_str(), DTypeName(t.dtype),
                row.dense ? "dense" : "lazy", static_cast<unsigned long long>(row.bytes_on_disk),
                fp.c_str());
  }
  std::printf("%llu tensors (%llu lazy, %llu dense), %s parameters",
              static_cast<unsigned long long>(r.lazy + r.dense),
              static_cast<unsigned long long>(r.lazy), static_cast<unsigned long long>(r.dense),
              CountText(r.parameters).c_str());
  if (r.kind == StorageKind::kStore)
    std::printf(", file %llu bytes, seed %llu, %s", static_cast<unsigned long long>(r.file_bytes),
                static_cast<unsigned long long>(r.seed), GeneratorName(r.generator));
  if (r.kind == StorageKind::kSafetensors)
    std::printf(", safetensors in %zu file%s", r.files, r.files == 1 ? "" : "s");
  if (r.kind == StorageKind::kDistributed)
    std::printf(", distributed save over %d rank files, %llu bytes on disk in them, seed %llu, %s",
                r.world, static_cast<unsigned long long>(r.bytes_on_disk),
                static_cast<unsigned long long>(r.seed), GeneratorName(r.generator));
  std::printf("\n");
}

int Run(const Options& o) {
  auto cat = OpenCatalog(o.source);
  if (!cat.ok()) return Fail(cat.status());
  auto report = Inspect(**cat, o.source, o.tensors);
  if (!report.ok()) return Fail(report.status());
  if (o.json) std::printf("%s\n", report->ToJson().dump(2).c_str());
  else PrintText(*report);
  return 0;
}

Register reg({"inspect", "List the tensors of a store: shape, dtype, lazy/dense, size, fingerprint",
              [](CLI::App& app) {
                auto o = std::make_shared<Options>();
                AddSourceArg(app, &o->source);
                app.add_option("--tensors", o->tensors, "Glob of tensor names (default *)");
                app.add_flag("--json", o->json, "JSON output");
                return [o] { return Run(*o); };
              }});

}  // namespace
}  // namespace seedstore::cli
