// GPU benchmark for tools/gpu-check.sh: throughput of the materialize and fingerprint
// kernels, the device's copy/write bandwidth, and the whole Llama-3-8B preset in bf16.
// Prints a table and (with --json PATH) machine-readable records that gpu-check.sh joins
// with the jax/torch timings and the SASS operation counts to compute each kernel's floor.
//
// Usage: seedstore_gpu_bench [--json PATH] [--elements N] [--reps R] [--quick]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gen/dtype.h"
#include "kernels/materialize.h"

namespace {

using namespace seedstore;

#define CHECK_CUDA(expr)                                                                          \
  do {                                                                                            \
    const cudaError_t e_ = (expr);                                                                \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(2);                                                                               \
    }                                                                                             \
  } while (0)
#define CHECK_K(expr)                                                                         \
  do {                                                                                        \
    const KernelStatus s_ = (expr);                                                           \
    if (!s_.ok()) {                                                                           \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, s_.message.c_str()); \
      std::exit(2);                                                                           \
    }                                                                                         \
  } while (0)

struct Record {
  std::string name, kind, kernel;  // kernel: how gpu-check.sh finds it in the SASS
  uint64_t elements = 0, bytes = 0;
  double seconds = 0;
  uint64_t peak_bytes = 0, output_bytes = 0;
};
std::vector<Record> g_records;

/// Median time in seconds of `reps` runs of f() on the default stream (after one warm-up).
template <class F>
double TimeIt(int reps, F&& f) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  f();
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    CHECK_CUDA(cudaEventRecord(a));
    f();
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e-3);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void Add(Record r) {
  std::printf("%-44s %12.3f ms %10.2f Gelem/s %9.1f GB/s\n", r.name.c_str(), r.seconds * 1e3,
              r.elements / r.seconds * 1e-9, r.bytes / r.seconds * 1e-9);
  std::fflush(stdout);
  g_records.push_back(std::move(r));
}

SamplerParams Normal(Generator g, DType d, float stddev) {
  SamplerParams p;
  p.generator = g;
  p.dist = Dist::kNormal;
  p.dtype = d;
  p.key = Key{0u, 42u};
  // jax.random.normal's uniform range (-1, 1) in the dtype: lo = nextafter(-1, 0).
  const float lo = d == DType::kBF16 ? -0.99609375f : -0.99999994f;
  p.lo_f = lo;
  p.range_f = d == DType::kBF16 ? BF16ToF32(F32ToBF16(1.0f - lo)) : 1.0f - lo;
  p.has_scale = stddev != 1.0f;
  p.scale_f = d == DType::kBF16 ? BF16ToF32(F32ToBF16(stddev)) : stddev;
  return p;
}

SamplerParams Ones(DType d) {
  SamplerParams p;
  p.dist = Dist::kOnes;
  p.dtype = d;
  p.const_bits = d == DType::kBF16 ? 0x3F80u : 0x3F800000u;
  return p;
}

Region Flat(uint64_t n) {
  Region r;
  r.flat = true;
  r.begin = 0;
  r.end = n;
  return r;
}

const char* GenName(Generator g) { return g == Generator::kThreefry ? "threefry" : "philox"; }
const char* DTypeName(DType d) { return d == DType::kBF16 ? "bf16" : "f32"; }
std::string KernelId(Generator g, Dist x, DType d, bool aligned, bool hash) {
  return "MaterializeKernel:" + std::to_string(static_cast<int>(g)) + ":" +
         std::to_string(static_cast<int>(x)) + ":" + std::to_string(static_cast<int>(d)) + ":" +
         (aligned ? "1" : "0") + ":" + (hash ? "1" : "0");
}

struct Tensor {
  std::string name;
  std::vector<uint64_t> shape;
  bool norm;
};

/// Llama-3-8B parameter shapes (HF layout: [out_features, in_features]).
std::vector<Tensor> Llama3_8B() {
  std::vector<Tensor> t;
  t.push_back({"embed_tokens", {128256, 4096}, false});
  for (int l = 0; l < 32; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    t.push_back({p + "q_proj", {4096, 4096}, false});
    t.push_back({p + "k_proj", {1024, 4096}, false});
    t.push_back({p + "v_proj", {1024, 4096}, false});
    t.push_back({p + "o_proj", {4096, 4096}, false});
    t.push_back({p + "gate_proj", {14336, 4096}, false});
    t.push_back({p + "up_proj", {14336, 4096}, false});
    t.push_back({p + "down_proj", {4096, 14336}, false});
    t.push_back({p + "input_layernorm", {4096}, true});
    t.push_back({p + "post_attention_layernorm", {4096}, true});
  }
  t.push_back({"norm", {4096}, true});
  t.push_back({"lm_head", {128256, 4096}, false});
  return t;
}

void WriteJson(const char* path, const cudaDeviceProp& prop, int clock_khz, int sms) {
  FILE* f = std::fopen(path, "w");
  if (!f) {
    std::perror(path);
    return;
  }
  std::fprintf(f, "{\"device\": \"%s\", \"sms\": %d, \"sm_clock_khz\": %d, \"cc\": \"%d.%d\",\n",
               prop.name, sms, clock_khz, prop.major, prop.minor);
  std::fprintf(f, " \"records\": [\n");
  for (size_t k = 0; k < g_records.size(); ++k) {
    const Record& r = g_records[k];
    std::fprintf(
        f,
        "  {\"name\": \"%s\", \"kind\": \"%s\", \"kernel\": \"%s\", \"elements\": %llu, "
        "\"bytes\": %llu, \"seconds\": %.9g, \"peak_bytes\": %llu, "
        "\"output_bytes\": %llu}%s\n",
        r.name.c_str(), r.kind.c_str(), r.kernel.c_str(),
        static_cast<unsigned long long>(r.elements), static_cast<unsigned long long>(r.bytes),
        r.seconds, static_cast<unsigned long long>(r.peak_bytes),
        static_cast<unsigned long long>(r.output_bytes), k + 1 < g_records.size() ? "," : "");
  }
  std::fprintf(f, " ]}\n");
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  const char* json = nullptr;
  uint64_t n = uint64_t{1} << 30;
  int reps = 7;
  bool quick = false;
  for (int k = 1; k < argc; ++k) {
    if (!std::strcmp(argv[k], "--json") && k + 1 < argc) json = argv[++k];
    else if (!std::strcmp(argv[k], "--elements") && k + 1 < argc)
      n = std::strtoull(argv[++k], nullptr, 0);
    else if (!std::strcmp(argv[k], "--reps") && k + 1 < argc) reps = std::atoi(argv[++k]);
    else if (!std::strcmp(argv[k], "--quick")) quick = true;
    else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--elements N] [--reps R] [--quick]\n",
                   argv[0]);
      return 1;
    }
  }
  if (quick) {
    n = uint64_t{1} << 24;
    reps = 3;
  }
  std::string why;
  if (!CudaAvailable(&why)) {
    std::fprintf(stderr, "seedstore_gpu_bench: no CUDA device: %s\n", why.c_str());
    return 77;  // "skipped"
  }
  int dev = 0, sms = 0, clock_khz = 0;
  CHECK_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  std::printf("device: %s (sm_%d%d), %d SMs, SM clock %.0f MHz, %.1f GiB\n", prop.name, prop.major,
              prop.minor, sms, clock_khz * 1e-3, prop.totalGlobalMem / 1073741824.0);
  std::printf("elements per kernel run: %llu, median of %d runs\n\n",
              static_cast<unsigned long long>(n), reps);

  // Output buffer large enough for n f32 elements; input buffer for copies/fingerprints.
  DeviceBuffer out, in;
  CHECK_K(DeviceBuffer::Allocate(n * 4, &out));
  CHECK_K(DeviceBuffer::Allocate(n * 4, &in));
  CHECK_K(in.Fill(0x5A));

  // ---- bandwidth references --------------------------------------------------------------
  {
    Record r{"d2d copy (cudaMemcpy, read+write bytes)", "copy", ""};
    r.elements = n;
    r.bytes = 2 * n * 4;
    r.seconds = TimeIt(reps, [&] {
      CHECK_CUDA(cudaMemcpyAsync(out.data(), in.data(), n * 4, cudaMemcpyDeviceToDevice));
    });
    Add(r);
    Record w{"write (cudaMemset)", "write", ""};
    w.elements = n;
    w.bytes = n * 4;
    w.seconds = TimeIt(reps, [&] { CHECK_CUDA(cudaMemsetAsync(out.data(), 0, n * 4)); });
    Add(w);
  }

  // ---- materialize -----------------------------------------------------------------------
  const Region flat = Flat(n);
  for (Generator g : {Generator::kThreefry, Generator::kPhilox}) {
    for (DType d : {DType::kBF16, DType::kF32}) {
      const SamplerParams p = Normal(g, d, 1.0f);
      Record r{std::string(GenName(g)) + " normal " + DTypeName(d), "materialize",
               KernelId(g, Dist::kNormal, d, g == Generator::kPhilox, false)};
      r.elements = n;
      r.bytes = n * DTypeSize(d);
      r.seconds = TimeIt(reps, [&] { CHECK_K(MaterializeCuda(p, flat, out.data())); });
      Add(r);
    }
  }
  {
    const SamplerParams p = Ones(DType::kBF16);
    Record r{"ones bf16 (pure store)", "materialize",
             KernelId(Generator::kThreefry, Dist::kOnes, DType::kBF16, false, false)};
    r.elements = n;
    r.bytes = n * 2;
    r.seconds = TimeIt(reps, [&] { CHECK_K(MaterializeCuda(p, flat, out.data())); });
    Add(r);
  }

  // ---- fingerprint -----------------------------------------------------------------------
  uint64_t* d_acc = nullptr;
  CHECK_CUDA(cudaMalloc(&d_acc, 16));
  for (DType d : {DType::kBF16, DType::kF32}) {
    Record r{
        std::string("fingerprint ") + DTypeName(d), "fingerprint",
        d == DType::kBF16 ? "FingerprintKernel:unsigned short" : "FingerprintKernel:unsigned int"};
    r.elements = n;
    r.bytes = n * DTypeSize(d);
    r.seconds =
        TimeIt(reps, [&] { CHECK_K(FingerprintCudaAsync(d, flat, in.data(), 7, nullptr, d_acc)); });
    Add(r);
  }
  for (Generator g : {Generator::kThreefry, Generator::kPhilox}) {
    const SamplerParams p = Normal(g, DType::kBF16, 0.02f);
    Record r{std::string("fused ") + GenName(g) + " normal bf16 + fingerprint", "fused",
             KernelId(g, Dist::kNormal, DType::kBF16, g == Generator::kPhilox, true)};
    r.elements = n;
    r.bytes = n * 2;
    r.seconds = TimeIt(reps, [&] {
      CHECK_K(MaterializeFingerprintCudaAsync(p, flat, out.data(), 7, nullptr, d_acc));
    });
    Add(r);
  }
  out = DeviceBuffer();
  in = DeviceBuffer();

  // ---- Llama-3-8B, bf16, every tensor in its own allocation ------------------------------
  std::printf("\n");
  const std::vector<Tensor> model = Llama3_8B();
  for (Generator g : {Generator::kPhilox, Generator::kThreefry}) {
    CHECK_CUDA(cudaDeviceSynchronize());
    size_t free0 = 0, total = 0;
    CHECK_CUDA(cudaMemGetInfo(&free0, &total));
    std::vector<DeviceBuffer> bufs(model.size());
    std::vector<Region> regions(model.size());
    uint64_t params = 0, out_bytes = 0;
    for (size_t k = 0; k < model.size(); ++k) {
      const auto& s = model[k].shape;
      regions[k] = WholeRegion(static_cast<int>(s.size()), s.data());
      params += regions[k].Count();
      CHECK_K(DeviceBuffer::Allocate(regions[k].Count() * 2, &bufs[k]));
      out_bytes += regions[k].Count() * 2;
    }
    const SamplerParams mat = Normal(g, DType::kBF16, 0.02f), ones = Ones(DType::kBF16);
    size_t min_free = free0;
    auto materialize_all = [&] {
      for (size_t k = 0; k < model.size(); ++k)
        CHECK_K(MaterializeCuda(model[k].norm ? ones : mat, regions[k], bufs[k].data()));
    };
    Record r{std::string("llama3-8b materialize bf16 (") + GenName(g) + ")", "model", ""};
    r.elements = params;
    r.bytes = out_bytes;
    r.seconds = TimeIt(quick ? 1 : 3, materialize_all);
    size_t free1 = 0;
    CHECK_CUDA(cudaMemGetInfo(&free1, &total));
    min_free = std::min(min_free, free1);
    r.peak_bytes = free0 - min_free;
    r.output_bytes = out_bytes;
    Add(r);
    std::printf(
        "  %llu parameters, outputs %.3f GB, device memory in use %.3f GB "
        "(outputs + %.1f MiB)\n",
        static_cast<unsigned long long>(params), out_bytes * 1e-9, r.peak_bytes * 1e-9,
        (static_cast<double>(r.peak_bytes) - static_cast<double>(out_bytes)) / 1048576.0);
    if (g == Generator::kPhilox) {
      Record f{"llama3-8b fingerprint bf16 (all tensors)", "model_fingerprint", ""};
      f.elements = params;
      f.bytes = out_bytes;
      f.seconds = TimeIt(quick ? 1 : 3, [&] {
        CHECK_CUDA(cudaMemsetAsync(d_acc, 0, 16));
        for (size_t k = 0; k < model.size(); ++k)
          CHECK_K(
              FingerprintCudaAsync(DType::kBF16, regions[k], bufs[k].data(), 7, nullptr, d_acc));
      });
      Add(f);
    }
  }
  CHECK_CUDA(cudaFree(d_acc));
  if (json) WriteJson(json, prop, clock_khz, sms);
  return 0;
}
