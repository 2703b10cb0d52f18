// seedstore gen: one lazily described tensor, one box, to a file or stdout.
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "io/device.h"
#include "io/interop.h"
#include "store/catalog.h"
#include "store/json_text.h"
#include "tools/cli.h"
#include "tools/output.h"

namespace seedstore::cli {
namespace {

struct GenOptions {
  std::string shape, dtype = "float32", init = R"({"dist":"normal"})", key, box, format = "raw",
                     out, name = "tensor", generator = "threefry", device = "auto",
                     flavour = FlavourName(kDefaultFlavour);
  int64_t seed = 0;
  bool x64 = false, has_seed = false;
  int threads = 0;
};

Result<std::vector<uint64_t>> ParseShape(const std::string& s) {
  std::vector<uint64_t> shape;
  if (s.empty()) return shape;  // scalar
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = s.find(',', pos);
    const std::string part = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    SEEDSTORE_ASSIGN_OR_RETURN(const uint64_t n,
                               ParseInteger<uint64_t>(part, "--shape '" + s + "'"));
    shape.push_back(n);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return shape;
}

int Run(const GenOptions& o) {
  TensorSpec t;
  t.name = o.name;
  auto shape = ParseShape(o.shape);
  if (!shape.ok()) return Fail(shape.status());
  t.shape = *shape;
  auto dt = ParseDType(o.dtype);
  if (!dt.ok()) return Fail(dt.status().WithContext("--dtype"));
  t.dtype = *dt;
  if (auto st = ValidateShape(t.shape, t.dtype, "--shape"); !st.ok()) return Fail(st);
  auto g = ParseGenerator(o.generator);
  if (!g.ok()) return Fail(g.status().WithContext("--generator"));
  t.generator = *g;
  auto f = ParseFlavour(o.flavour);
  if (!f.ok()) return Fail(f.status().WithContext("--flavour"));
  t.flavour = *f;
  std::string err;
  const nlohmann::json ij = ParseJson(o.init, &err);
  if (ij.is_discarded()) return Fail(InvalidArgument("--init: " + err));
  auto init = InitSpec::FromJson(ij, "--init");
  if (!init.ok()) return Fail(init.status());
  t.init = *init;
  if (!Supported(t.init.dist, t.dtype))
    return Fail(InvalidArgument(std::string("--init: distribution '") + DistName(t.init.dist) +
                                "' does not support dtype " + DTypeName(t.dtype)));
  if (!o.key.empty()) {
    const size_t comma = o.key.find(',');
    if (comma == std::string::npos || o.key.find(',', comma + 1) != std::string::npos)
      return Fail(InvalidArgument("--key '" + o.key + "': expected K0,K1 (two uint32 words)"));
    const std::string what = "--key '" + o.key + "'";
    auto k0 = ParseInteger<uint32_t>(o.key.substr(0, comma), what);
    auto k1 = ParseInteger<uint32_t>(o.key.substr(comma + 1), what);
    if (!k0.ok()) return Fail(k0.status());
    if (!k1.ok()) return Fail(k1.status());
    t.key.kind = KeySpec::Kind::kRaw;
    t.key.raw = Key{*k0, *k1};
  } else {
    t.key.kind = KeySpec::Kind::kSeed;
    t.key.seed = o.seed;
    t.key.x64 = o.x64;
  }
  auto device = ResolveDevice(o.device);
  if (!device.ok()) return Fail(device.status());
  ModelSpec m;
  m.tensors.push_back(t);
  auto cat = SpecCatalog::Create(m, "--init");
  if (!cat.ok()) return Fail(cat.status());
  auto region = ParseBox(o.box, t.shape);
  if (!region.ok()) return Fail(region.status().WithContext("--box"));
  const uint64_t bytes = (*cat)->tensors()[0].lazy->RegionBytes(*region);
  if (Status fit = CheckFitsInMemory(bytes, "tensor " + Quoted(t.name) + " box " + DescribeRegion(*region)); !fit.ok())
    return Fail(fit);
  std::vector<unsigned char> buf(bytes);
  if (auto st = ReadOnDevice(*device, **cat, 0, *region, buf.data(), CpuOptions{o.threads}); !st.ok())
    return Fail(st);
  std::vector<uint64_t> box_shape;
  for (int d = 0; d < region->rank; ++d) box_shape.push_back(region->stop[d] - region->start[d]);
  if (auto st = WriteArray(o.out, o.format, t.dtype, box_shape, buf.data(), buf.size()); !st.ok())
    return Fail(st);
  return 0;
}

Register reg({"gen", "Generate one lazily described tensor (or one box of it)", [](CLI::App& app) {
  auto o = std::make_shared<GenOptions>();
  app.add_option("--shape", o->shape, "Global shape, e.g. 32,8192,4096 (empty: scalar)")->required();
  app.add_option("--dtype", o->dtype, DTypeNameList() + " (default float32)");
  app.add_option("--init", o->init, R"(Init rule as JSON, e.g. {"dist":"normal","scale":0.05})");
  auto* seed = AddInteger(app, "--seed", &o->seed,
                          "jax.random.key(seed): a 64-bit signed integer, as JAX takes a Python "
                          "int (32-bit mode unless --x64)");
  auto* key = app.add_option("--key", o->key, "Raw key words K0,K1 (jax.random.key_data)");
  seed->excludes(key);
  app.add_flag("--x64", o->x64, "Seed with jax_enable_x64 semantics (64-bit seeds)");
  app.add_option("--generator", o->generator, "threefry (JAX-exact) or philox (native)");
  app.add_option("--flavour", o->flavour,
                 "threefry: jit (default; what jax.jit compiles) or eager (op by op)");
  app.add_option("--box", o->box, "Box start:stop per dim, e.g. 0:2,100:104,0:8 (default all)");
  app.add_option("--format", o->format, "raw (little-endian elements), npy or text")
      ->check(CLI::IsMember({"raw", "npy", "text"}));
  app.add_option("-o,--output", o->out, "Output file (default: stdout)");
  app.add_option("--name", o->name, "Tensor name (only affects fingerprints)");
  AddThreadsAndDeviceOptions(app, &o->threads, &o->device);
  return [o] { return Run(*o); };
}});

}  // namespace
}  // namespace seedstore::cli
