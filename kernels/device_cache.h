// A per-device cache of one int (a device attribute, a kernel's occupancy), filled by its
// first successful query and read lock-free afterwards, so launchers do not query the driver
// on every launch. No CUDA syntax: the launchers (kernels/cuda_util.cuh) pass the query, the
// host tests (tests/unit/test_device_cache.cc) pass a counting one.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>

namespace seedstore {

/// Blocks of `threads` for a grid-stride kernel over `work` items: enough to fill `sms`
/// multiprocessors at `per_sm` resident blocks each (at least 1), never more than the work
/// needs, at least 1.
inline int GridBlocks(uint64_t work, int threads, int sms, int per_sm) {
  const uint64_t full =
      static_cast<uint64_t>(sms > 0 ? sms : 1) * static_cast<uint64_t>(per_sm > 0 ? per_sm : 1);
  const uint64_t need =
      (work + static_cast<uint64_t>(threads) - 1) / static_cast<uint64_t>(threads);
  const uint64_t b = need < full ? need : full;
  return b < 1 ? 1 : static_cast<int>(b);
}

/// Devices 0 .. kMaxDevices-1 are cached; a higher index is queried every time (correct,
/// only slower). A value is stored only after its query succeeded: a failed query is
/// retried by the next call. Concurrent first calls for one device query it once (the others
/// wait on a mutex taken only while a device is unfilled).
template <int kMaxDevices = 64>
class PerDeviceCache {
 public:
  /// *out = the cached value of `device`, or query(device, out) when there is none (then the
  /// value is kept if the query returned `Err{}`, the success value, e.g. cudaSuccess).
  template <class Err, class Query>
  Err Get(int device, int* out, Query&& query) {
    if (device < 0 || device >= kMaxDevices) return query(device, out);
    Slot& s = slots_[device];
    if (s.filled.load(std::memory_order_acquire)) {
      *out = s.value;
      return Err{};
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.filled.load(std::memory_order_relaxed)) {
      int v = 0;
      const Err e = query(device, &v);
      if (e != Err{}) return e;
      s.value = v;
      s.filled.store(true, std::memory_order_release);
    }
    *out = s.value;
    return Err{};
  }

 private:
  struct Slot {
    std::atomic<bool> filled{false};
    int value = 0;
  };
  Slot slots_[kMaxDevices];
  std::mutex mu_;
};

}  // namespace seedstore
