// The chunk checksum (gen/checksum.h) against libxxhash itself: every instruction-set copy
// this CPU can run, one-shot and streaming, on xxHash's length classes (0, 1-3, 4-8, 9-16,
// 17-128, 129-240, and longer inputs through whole and partial stripes and blocks), on
// random bytes, at unaligned addresses, and a stream cut at random points.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <random>
#include <string>
#include <vector>

#include "gen/checksum.h"
#include "gen/materialize_cpu.h"
#include "gen/materialize_cpu_isa.h"

namespace seedstore {
namespace {

struct Isa {
  const char* name;
  bool runs;
  ChecksumFns fns;
};

std::vector<Isa> Isas() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("bmi2");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  return {{"generic", true, cpu_generic::PickChecksum()},
          {"avx2", avx2, cpu_avx2::PickChecksum()},
          {"avx512", avx512, cpu_avx512::PickChecksum()}};
}

// Lengths around every boundary of XXH3's code paths: 0; 1-3; 4-8; 9-16; 17-128; 129-240;
// then 64-byte stripes, 1024-byte blocks (16 stripes with the default secret) and the
// streaming state's 256-byte internal buffer.
std::vector<size_t> Lengths() {
  std::vector<size_t> n;
  for (size_t i = 0; i <= 260; ++i) n.push_back(i);
  for (size_t b : {511, 512, 513, 1023, 1024, 1025, 1087, 1088, 1089, 4095, 4096, 4097, 16384,
                   65537, 1 << 20, (1 << 20) + 7, 3 * (1 << 20) + 13})
    n.push_back(b);
  return n;
}

TEST(Checksum, EveryInstructionSetEqualsLibxxhashOnEveryLengthClass) {
  std::mt19937_64 rng(20261201);
  std::vector<unsigned char> buf((3 << 20) + 64);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  int ran = 0;
  for (const Isa& isa : Isas()) {
    if (!isa.runs) {
      std::printf("[  SKIP    ] checksum: this CPU cannot run the %s copy\n", isa.name);
      continue;
    }
    ++ran;
    for (size_t n : Lengths()) {
      for (size_t off : {size_t{0}, size_t{1}, size_t{13}}) {  // unaligned starts too
        const unsigned char* p = buf.data() + off;
        const uint64_t want = XXH3_64bits(p, n);
        ASSERT_EQ(isa.fns.one_shot(p, n), want) << isa.name << " n=" << n << " off=" << off;
      }
    }
  }
  EXPECT_GE(ran, 1);
  EXPECT_EQ(Checksum64(nullptr, 0), XXH3_64bits(nullptr, 0));
  EXPECT_EQ(Checksum64(buf.data(), 1 << 20), XXH3_64bits(buf.data(), 1 << 20));
}

TEST(Checksum, StreamsCutAnywhereEqualTheOneShotHash) {
  std::mt19937_64 rng(7);
  std::vector<unsigned char> buf(200000);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (const Isa& isa : Isas()) {
    if (!isa.runs) continue;
    for (int trial = 0; trial < 200; ++trial) {
      const size_t n = trial < 20 ? static_cast<size_t>(trial) : rng() % buf.size();
      alignas(64) unsigned char state[Checksum64Stream::kStateBytes];
      isa.fns.reset(state);
      size_t at = 0;
      while (at < n) {  // pieces of 0 to ~2 KiB, so the 256-byte buffer fills at every phase
        const size_t k = std::min(n - at, static_cast<size_t>(rng() % 2100));
        isa.fns.update(state, buf.data() + at, k);
        at += k;
      }
      ASSERT_EQ(isa.fns.digest(state), XXH3_64bits(buf.data(), n)) << isa.name << " n=" << n;
    }
  }
  // The public class, copied mid-stream: both copies go on independently.
  Checksum64Stream a;
  a.Update(buf.data(), 1000);
  Checksum64Stream b = a;
  a.Update(buf.data() + 1000, 5000);
  b.Update(buf.data() + 1000, 7);
  EXPECT_EQ(a.Digest(), XXH3_64bits(buf.data(), 6000));
  EXPECT_EQ(b.Digest(), XXH3_64bits(buf.data(), 1007));
  a.Reset();
  EXPECT_EQ(a.Digest(), XXH3_64bits(nullptr, 0));
  std::printf("checksum: dispatcher picked the %s copy\n", CpuIsaName());
}

}  // namespace
}  // namespace seedstore
