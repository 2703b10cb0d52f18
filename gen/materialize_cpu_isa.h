// Private to the CPU materializer: the per-instruction-set inner loops (see
// materialize_cpu_kernels.inc, checksum_kernels.inc) and what the run-time dispatcher picks from.
#pragma once
#include "gen/fingerprint.h"
#include "gen/sampler.h"

namespace seedstore {

/// Fills elements [i, i+n) (global flat indices) of the sampler's tensor into out, which holds
/// n elements of the sampler's dtype.
using FillFn = void (*)(const SamplerParams& p, uint64_t i, uint64_t n, void* out);
/// Fingerprint of n elements at global flat indices [i, i+n) stored in data.
using HashFn = Fingerprint (*)(uint64_t i, uint64_t n, const void* data, uint64_t seed);

/// XXH3-64 (gen/checksum.h) compiled for one instruction set; the stream functions take a
/// Checksum64Stream's state bytes.
struct ChecksumFns {
  uint64_t (*one_shot)(const void* data, size_t n);
  void (*reset)(void* state);
  void (*update)(void* state, const void* data, size_t n);
  uint64_t (*digest)(const void* state);
};

#define SEEDSTORE_DECLARE_CPU_ISA(NS)      \
  namespace NS {                           \
  FillFn PickFill(const SamplerParams& p); \
  HashFn PickHash(int element_size);       \
  ChecksumFns PickChecksum();              \
  }
SEEDSTORE_DECLARE_CPU_ISA(cpu_generic)
SEEDSTORE_DECLARE_CPU_ISA(cpu_avx2)
SEEDSTORE_DECLARE_CPU_ISA(cpu_avx512)
#undef SEEDSTORE_DECLARE_CPU_ISA

}  // namespace seedstore
