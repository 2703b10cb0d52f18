// The store's chunk checksum: XXH3-64 with seed 0 (docs/FORMAT.md), the same bits as
// libxxhash's XXH3_64bits, compiled for the widest vector unit of this CPU.
//
// Why not call libxxhash: Debian's libxxhash.so is built for baseline x86-64 (SSE2) and ran
// at 21 GB/s per core on 1 MiB chunks; xxHash's own header compiled with -mavx512f ran at
// 95 GB/s (docs/PERF.md, "Store"). Every chunk is hashed once on write and once on read, so
// this is a measurable share of both. The header is xxHash's (XXH_INLINE_ALL), compiled once
// per instruction set next to the materializer's loops (gen/checksum_kernels.inc) and picked
// at run time by the same dispatcher (SEEDSTORE_CPU_ISA caps it the same way).
#pragma once
#include <cstddef>
#include <cstdint>

namespace seedstore {

/// XXH3_64bits(data, n) (seed 0). data may be null when n == 0.
uint64_t Checksum64(const void* data, size_t n);

/// Streaming form: after Reset, Update over consecutive pieces, Digest equals Checksum64 of
/// their concatenation. Copyable; no heap memory.
class Checksum64Stream {
 public:
  Checksum64Stream() { Reset(); }
  void Reset();
  void Update(const void* data, size_t n);
  uint64_t Digest() const;

  /// Bytes of XXH3_state_t this object holds (checked against xxHash's header where it is
  /// compiled).
  static constexpr size_t kStateBytes = 640;

 private:
  alignas(64) unsigned char state_[kStateBytes];
};

}  // namespace seedstore
