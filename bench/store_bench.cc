// Store throughput and compression (docs/PERF.md, "Store"): dense write and read of the HDF5 store
// against writing/reading the same bytes as one raw file, per data kind, with compression
// ratios. Prints one JSON object (bench/store_bench.py adds the safetensors package and the
// lazy Llama-3-70B numbers and writes the table of docs/PERF.md).
//
//   seedstore_store_bench [--mib 256] [--threads 2] [--level 1] [--reps 3] [--dir /tmp]
//                         [--kind bf16-normal|bf16-init|f32-normal|bf16-trained (default: all)]
//                         [--profile-reads N (N extra hot reads per rep, untimed: for perf)]
//                         [--chunk-kib 1024 (WriteOptions::chunk_bytes)]
//                         [--fresh 1 (remove both files, untimed, before each write)]
//                         [--codec zstd|none (none: WriteOptions::uncompressed = {"*"})]
//
// By default each write replaces the previous rep's file, as a job re-saving a checkpoint
// does: the raw write's open(O_TRUNC) frees the old file's blocks and pages inside its timing;
// the store's Commit leaves that to a thread of its own (io/atomic_file.h), and the bench
// waits 0.3 s after the write so that it does not overlap the reads that follow. With
// --fresh 1 neither write has an old file to free.
//
// zstd_decode_floor_gbs is zstd alone decoding the file's chunks from memory on the same
// threads, each into its place in a destination of all the decoded bytes: the most any
// zstd-encoded store can read hot, whatever else it does (0 with --codec none: nothing to
// decode); zstd_decode_scratch_gbs the same into one reused buffer per thread (cache-resident:
// no memory written).
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <zstd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io/h5store.h"

namespace seedstore {
namespace {

// Process CPU seconds (all threads): the rate per CPU-second is stable on a shared machine.
double Cpu() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Tensor {
  std::string name;
  std::vector<uint64_t> shape;
  DType dtype;
  std::vector<uint8_t> bytes;
};

// Kinds (N(0, 0.02), 4096 x 4096 tensors):
//   "bf16-normal":  float32 normal rounded to bfloat16 (a bf16 copy of f32 weights; entropy
//                   bound ~1.5x);
//   "bf16-init":    seedstore's own bfloat16 normal (threefry computes in bf16 as JAX does:
//                   fewer distinct values, more compressible);
//   "f32-normal":   float32 normal;
//   "bf16-trained": bf16-normal with per-row log-normal scales (sigma 0.5), 1% outliers x8
//                   and a uniform drift of 1e-3: heavier-tailed, like trained weights.
std::vector<Tensor> MakeData(const std::string& kind, uint64_t mib) {
  const DType dt = kind == "f32-normal" ? DType::kF32 : DType::kBF16;
  const uint64_t rows = 4096, cols = 4096;
  const uint64_t per = rows * cols * DTypeSize(dt);
  const uint64_t n = std::max<uint64_t>(1, (mib << 20) / per);
  std::vector<Tensor> out;
  for (uint64_t k = 0; k < n; ++k) {
    TensorSpec s;
    s.name = "layers." + std::to_string(k) + ".weight";
    s.shape = {rows, cols};
    s.dtype = kind == "bf16-init" ? DType::kBF16 : DType::kF32;
    s.init.dist = Dist::kNormal;
    s.init.scale = 0.02;
    auto l = LazyTensor::Resolve(s, 7);
    Tensor t{s.name, s.shape, dt, {}};
    std::vector<uint8_t> buf(rows * cols * DTypeSize(s.dtype));
    (void)l->Materialize(WholeTensor(s.shape), buf.data());
    if (dt == DType::kBF16 && s.dtype == DType::kF32) {
      std::mt19937_64 g(k);
      std::normal_distribution<float> lg(0.f, 0.5f);
      std::uniform_real_distribution<float> u(-1e-3f, 1e-3f);
      const bool trained = kind == "bf16-trained";
      const float* f = reinterpret_cast<const float*>(buf.data());
      t.bytes.resize(rows * cols * 2);
      auto* o = reinterpret_cast<uint16_t*>(t.bytes.data());
      for (uint64_t r = 0; r < rows; ++r) {
        const float sc = trained ? std::exp(lg(g)) : 1.f;
        for (uint64_t c = 0; c < cols; ++c) {
          float x = f[r * cols + c];
          if (trained) {
            x = x * sc + u(g);
            if (g() % 100 == 0) x *= 8.f;
          }
          o[r * cols + c] = F32ToBF16(x);
        }
      }
    } else {
      t.bytes = std::move(buf);
    }
    out.push_back(std::move(t));
  }
  return out;
}

// Drops a file's pages from the page cache (clean pages: no root needed), so the next read
// comes from the disk.
void DropCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

double ReadRaw(const std::string& path, uint8_t* dst, uint64_t total) {
  const double t0 = Now();
  const int fd = ::open(path.c_str(), O_RDONLY);
  size_t off = 0;
  while (off < total) {
    const ssize_t r = ::read(fd, dst + off, total - off);
    if (r <= 0) break;
    off += r;
  }
  ::close(fd);
  return Now() - t0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The hot read's floor: zstd alone decoding every stored chunk from memory with `threads`
// threads (no I/O, checksum, unshuffle or copy). Returns GB/s of decoded bytes (median of 5)
// {into the destination, into one scratch buffer}: each frame decoded to its own place in a
// buffer of all the decoded bytes (allocated and touched first), as a read must leave them; and
// each into one reused buffer per thread, which stays in the core's cache (what a reader that
// hands on each chunk and never writes memory would pay).
std::pair<double, double> ZstdDecodeFloorGbs(const std::string& path, int threads) {
  auto st = H5Store::Open(path);
  std::vector<std::vector<uint8_t>> frames;
  std::vector<uint64_t> at;  // each frame's offset in the destination
  uint64_t decoded = 0;
  for (size_t i = 0; i < (*st)->tensors().size(); ++i)
    for (uint64_t j = 0; j < (*st)->stored(i).num_chunks; ++j) {
      StoredChunk c;
      if (!(*st)->ReadStoredChunk(i, j, &c, false).ok()) std::exit(1);
      const unsigned long long n = ZSTD_getFrameContentSize(c.bytes.data(), c.bytes.size());
      if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN) continue;  // stored raw
      at.push_back(decoded);
      decoded += n;
      frames.push_back(std::move(c.bytes));
    }
  std::vector<uint8_t> dest(decoded, 1);
  auto run = [&](bool to_dest) {
    std::vector<double> t;
    for (int rep = 0; rep < 5; ++rep) {
      const double t0 = Now();
      std::atomic<size_t> next{0};
      std::vector<std::thread> pool;
      for (int th = 0; th < threads; ++th)
        pool.emplace_back([&] {
          ZSTD_DCtx* d = ZSTD_createDCtx();
          std::vector<uint8_t> scratch;
          for (size_t k; (k = next.fetch_add(1)) < frames.size();) {
            const size_t n = ZSTD_getFrameContentSize(frames[k].data(), frames[k].size());
            if (!to_dest) scratch.resize(n);
            uint8_t* out = to_dest ? dest.data() + at[k] : scratch.data();
            if (ZSTD_isError(ZSTD_decompressDCtx(d, out, n, frames[k].data(), frames[k].size())))
              std::exit(1);
          }
          ZSTD_freeDCtx(d);
        });
      for (auto& th : pool) th.join();
      t.push_back(Now() - t0);
    }
    return decoded / 1e9 / Median(t);
  };
  const double into_dest = run(true);
  return {into_dest, run(false)};
}

}  // namespace
}  // namespace seedstore

int main(int argc, char** argv) {
  using namespace seedstore;
  uint64_t mib = 256;
  int threads = 2, level = 1, reps = 3, profile_reads = 0;
  bool fresh = false;
  uint64_t chunk_kib = 1024;
  std::string dir = "/tmp", codec = "zstd";
  std::vector<std::string> kinds = {"bf16-normal", "bf16-init", "f32-normal", "bf16-trained"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--mib") mib = std::stoull(v);
    else if (a == "--threads") threads = std::stoi(v);
    else if (a == "--level") level = std::stoi(v);
    else if (a == "--reps") reps = std::stoi(v);
    else if (a == "--dir") dir = v;
    else if (a == "--kind") kinds = {v};
    else if (a == "--profile-reads") profile_reads = std::stoi(v);
    else if (a == "--chunk-kib") chunk_kib = std::stoull(v);
    else if (a == "--fresh") fresh = std::stoi(v) != 0;
    else if (a == "--codec") codec = v;
  }
  nlohmann::json results = nlohmann::json::array();
  const std::string raw_path = dir + "/store_bench.raw", h5_path = dir + "/store_bench.h5";
  for (const std::string& kind : kinds) {
    std::vector<Tensor> data = MakeData(kind, mib);
    uint64_t total = 0;
    for (const auto& t : data) total += t.bytes.size();
    std::vector<uint8_t> back(total);
    std::vector<double> raw_w, raw_r, h5_w, h5_r, raw_rc, h5_rc;
    std::vector<double> raw_w_cpu, raw_r_cpu, h5_w_cpu, h5_r_cpu;  // CPU seconds
    uint64_t file_bytes = 0;
    for (int rep = 0; rep < reps; ++rep) {
      // Raw file: write + fsync, then read back (page cache, as the store's read below).
      if (fresh) ::unlink(raw_path.c_str());
      double t0 = Now(), c0 = Cpu();
      int fd = ::open(raw_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      for (const auto& t : data) {
        size_t off = 0;
        while (off < t.bytes.size()) off += ::write(fd, t.bytes.data() + off, t.bytes.size() - off);
      }
      ::fsync(fd);
      ::close(fd);
      raw_w.push_back(Now() - t0);
      raw_w_cpu.push_back(Cpu() - c0);
      c0 = Cpu();
      raw_r.push_back(ReadRaw(raw_path, back.data(), total));
      raw_r_cpu.push_back(Cpu() - c0);
      DropCache(raw_path);
      raw_rc.push_back(ReadRaw(raw_path, back.data(), total));
      // Store: chunked, shuffle + zstd, checksums, fingerprints, atomic commit (fsync).
      WriteOptions wo;
      wo.threads = threads;
      wo.zstd_level = level;
      wo.chunk_bytes = chunk_kib << 10;
      if (codec == "none") wo.uncompressed = {"*"};
      if (fresh) ::unlink(h5_path.c_str());
      t0 = Now();
      c0 = Cpu();
      auto w = StoreWriter::Create(h5_path, 0, Generator::kThreefry, wo);
      for (const auto& t : data) {  // from memory, as a job saves its tensors
        Status s =
            (*w)->AddDense(t.name, t.shape, t.dtype, static_cast<const void*>(t.bytes.data()));
        if (!s.ok()) {
          std::fprintf(stderr, "%s\n", s.ToString().c_str());
          return 1;
        }
      }
      if (auto s = (*w)->Commit(); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return 1;
      }
      h5_w.push_back(Now() - t0);
      ::usleep(300000);  // the replaced file is freed meanwhile (counted in the CPU time)
      h5_w_cpu.push_back(Cpu() - c0);
      c0 = Cpu();
      auto read_store = [&]() -> double {
        const double t1 = Now();
        auto st = H5Store::Open(h5_path);
        uint8_t* p = back.data();
        for (size_t i = 0; i < data.size(); ++i) {
          if (auto s = (*st)->Read(i, WholeTensor(data[i].shape), p, CpuOptions{threads});
              !s.ok()) {
            std::fprintf(stderr, "%s\n", s.ToString().c_str());
            std::exit(1);
          }
          p += data[i].bytes.size();
        }
        return Now() - t1;
      };
      h5_r.push_back(read_store());
      for (int k = 0; k < profile_reads; ++k) read_store();  // hot reads only, for perf
      h5_r_cpu.push_back(Cpu() - c0);
      DropCache(h5_path);
      h5_rc.push_back(read_store());
      auto st = H5Store::Open(h5_path);
      file_bytes = (*st)->file_bytes();
      const uint8_t* p = back.data();
      for (const auto& t : data) {
        if (std::memcmp(p, t.bytes.data(), t.bytes.size()) != 0) {
          std::fprintf(stderr, "read-back mismatch in %s\n", t.name.c_str());
          return 1;
        }
        p += t.bytes.size();
      }
    }
    const double gb = total / 1e9;
    // The file of the last rep is still there (each rep rewrites it).
    const auto decode_floor =
        codec == "none" ? std::pair<double, double>{} : ZstdDecodeFloorGbs(h5_path, threads);
    nlohmann::json r = {{"kind", kind},
                        {"bytes", total},
                        {"tensors", data.size()},
                        {"file_bytes", file_bytes},
                        {"ratio", static_cast<double>(total) / file_bytes},
                        {"raw_write_gbs", gb / Median(raw_w)},
                        {"raw_read_gbs", gb / Median(raw_r)},
                        {"store_write_gbs", gb / Median(h5_w)},
                        {"store_read_gbs", gb / Median(h5_r)},
                        {"raw_write_gb_per_cpus", gb / Median(raw_w_cpu)},
                        {"raw_read_gb_per_cpus", gb / Median(raw_r_cpu)},
                        {"store_write_gb_per_cpus", gb / Median(h5_w_cpu)},
                        {"store_read_gb_per_cpus", gb / Median(h5_r_cpu)},
                        {"raw_read_cold_gbs", gb / Median(raw_rc)},
                        {"store_read_cold_gbs", gb / Median(h5_rc)},
                        {"zstd_decode_floor_gbs", decode_floor.first},
                        {"zstd_decode_scratch_gbs", decode_floor.second}};
    results.push_back(r);
    std::fprintf(stderr, "%s\n", r.dump().c_str());
  }
  ::unlink(raw_path.c_str());
  ::unlink(h5_path.c_str());
  nlohmann::json out = {{"threads", threads}, {"level", level}, {"chunk_kib", chunk_kib},
                        {"mib", mib},         {"reps", reps},   {"codec", codec},
                        {"results", results}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
