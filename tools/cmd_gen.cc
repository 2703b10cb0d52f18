// seedstore gen: one lazily described tensor, one box, to a file or stdout.
#include <cstdio>
#include <vector>

#include "io/device.h"
#include "io/interop.h"
#include "store/catalog.h"
#include "store/tensor_flags.h"
#include "tools/cli.h"
#include "tools/output.h"

namespace seedstore::cli {
namespace {

struct GenOptions {
  TensorFlags tensor;
  std::string box, format = "raw", out, device = "auto";
  int threads = 0;
};

int Run(const GenOptions& o) {
  auto spec = TensorSpecFromFlags(o.tensor);
  if (!spec.ok()) return Fail(spec.status());
  const TensorSpec& t = *spec;
  auto device = ResolveDevice(o.device);
  if (!device.ok()) return Fail(device.status());
  ModelSpec m;
  m.tensors.push_back(t);
  auto cat = SpecCatalog::Create(m, "--init");
  if (!cat.ok()) return Fail(cat.status());
  auto region = ParseBox(o.box, t.shape);
  if (!region.ok()) return Fail(region.status().WithContext("--box"));
  const uint64_t bytes = (*cat)->tensors()[0].lazy->RegionBytes(*region);
  if (Status fit =
          CheckFitsInMemory(bytes, "tensor " + Quoted(t.name) + " box " + DescribeRegion(*region));
      !fit.ok())
    return Fail(fit);
  std::vector<unsigned char> buf(bytes);
  if (auto st = ReadOnDevice(*device, **cat, 0, *region, buf.data(), CpuOptions{o.threads});
      !st.ok())
    return Fail(st);
  std::vector<uint64_t> box_shape;
  for (int d = 0; d < region->rank; ++d) box_shape.push_back(region->stop[d] - region->start[d]);
  if (auto st = WriteArray(o.out, o.format, t.dtype, box_shape, buf.data(), buf.size()); !st.ok())
    return Fail(st);
  return 0;
}

Register reg(
    {"gen", "Generate one lazily described tensor (or one box of it)", [](CLI::App& app) {
       auto o = std::make_shared<GenOptions>();
       app.add_option("--shape", o->tensor.shape, "Global shape, e.g. 32,8192,4096 (empty: scalar)")
           ->required();
       app.add_option("--dtype", o->tensor.dtype, DTypeNameList() + " (default float32)");
       app.add_option("--init", o->tensor.init,
                      R"(Init rule as JSON, e.g. {"dist":"normal","scale":0.05})");
       auto* seed =
           AddInteger(app, "--seed", &o->tensor.seed,
                      "jax.random.key(seed): a 64-bit signed integer, as JAX takes a Python "
                      "int (32-bit mode unless --x64)");
       auto* key =
           app.add_option("--key", o->tensor.key, "Raw key words K0,K1 (jax.random.key_data)");
       seed->excludes(key);
       app.add_flag("--x64", o->tensor.x64, "Seed with jax_enable_x64 semantics (64-bit seeds)");
       app.add_option("--generator", o->tensor.generator,
                      "threefry (JAX-exact) or philox (native)");
       app.add_option("--flavour", o->tensor.flavour,
                      "threefry: jit (default; what jax.jit compiles) or eager (op by op)");
       app.add_option("--box", o->box,
                      "Box start:stop per dim, e.g. 0:2,100:104,0:8 (default all)");
       app.add_option("--format", o->format, "raw (little-endian elements), npy or text")
           ->check(CLI::IsMember({"raw", "npy", "text"}));
       app.add_option("-o,--output", o->out, "Output file (default: stdout)");
       app.add_option("--name", o->tensor.name, "Tensor name (only affects fingerprints)");
       AddThreadsAndDeviceOptions(app, &o->threads, &o->device);
       return [o] { return Run(*o); };
     }});

}  // namespace
}  // namespace seedstore::cli
