// The per-device cache of the CUDA launchers (kernels/device_cache.h), on the CPU: a device
// attribute or a kernel's occupancy is queried once per device however many launches and
// threads ask, a failed query is not kept, and the grid size arithmetic.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "kernels/device_cache.h"

namespace seedstore {
namespace {

TEST(DeviceCache, QueriesOncePerDeviceAcrossThreads) {
  PerDeviceCache<8> cache;
  std::atomic<int> queries[8] = {};
  auto query = [&](int dev, int* v) {
    if (dev < 0 || dev >= 8) return 1;
    queries[dev].fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(200));  // widen the race
    *v = 100 + dev;
    return 0;
  };
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 1000; ++k) {
        const int dev = (t + k) % 3;
        int v = -1;
        if (cache.Get<int>(dev, &v, query) != 0 || v != 100 + dev) wrong.fetch_add(1);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  for (int d = 0; d < 3; ++d) EXPECT_EQ(queries[d].load(), 1) << "device " << d;
  for (int d = 3; d < 8; ++d) EXPECT_EQ(queries[d].load(), 0) << "device " << d;
}

TEST(DeviceCache, FailedQueryIsRetriedNotKept) {
  PerDeviceCache<4> cache;
  int calls = 0;
  int v = -1;
  EXPECT_EQ(cache.Get<int>(1, &v,
                           [&](int, int* out) {
                             ++calls;
                             *out = 5;
                             return 7;
                           }),
            7);
  EXPECT_EQ(cache.Get<int>(1, &v,
                           [&](int, int* out) {
                             ++calls;
                             *out = 9;
                             return 0;
                           }),
            0);
  EXPECT_EQ(v, 9);
  EXPECT_EQ(cache.Get<int>(1, &v,
                           [&](int, int* out) {
                             ++calls;
                             *out = 11;
                             return 0;
                           }),
            0);
  EXPECT_EQ(v, 9);  // cached
  EXPECT_EQ(calls, 2);
}

TEST(DeviceCache, DevicesBeyondTheCacheAreQueriedEachTime) {
  PerDeviceCache<2> cache;
  int calls = 0;
  int v = 0;
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(cache.Get<int>(5, &v,
                             [&](int d, int* out) {
                               ++calls;
                               *out = d;
                               return 0;
                             }),
              0);
  EXPECT_EQ(v, 5);
  EXPECT_EQ(calls, 3);
}

TEST(DeviceCache, GridBlocksFillsTheDeviceButNoMoreThanTheWork) {
  EXPECT_EQ(GridBlocks(0, 256, 132, 8), 1);  // empty work: one block
  EXPECT_EQ(GridBlocks(1, 256, 132, 8), 1);
  EXPECT_EQ(GridBlocks(256 * 10 + 1, 256, 132, 8), 11);  // less work than the device holds
  EXPECT_EQ(GridBlocks(uint64_t{1} << 40, 256, 132, 8), 132 * 8);  // full: SMs x occupancy
  EXPECT_EQ(GridBlocks(uint64_t{1} << 40, 256, 132, 0), 132);      // occupancy 0 read as 1
}

}  // namespace
}  // namespace seedstore
