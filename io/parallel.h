// A generic parallel for over numbered items on a few threads (plain std::thread, no pool kept
// between calls), an in-order variant whose commits run in item order whatever the thread
// count, and a pool of per-thread work buffers kept between calls.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "store/status.h"

namespace seedstore {

/// Per-thread work buffers kept between calls: fresh multi-MiB buffers would be page-faulted
/// and zeroed by the kernel on every call (measured: ~15% of a dense write's time). Take(n)
/// hands out n objects (pooled, else new T), Return puts them back. Thread-safe.
template <class T>
class ScratchPool {
 public:
  std::vector<std::unique_ptr<T>> Take(int n) {
    std::vector<std::unique_ptr<T>> out(static_cast<size_t>(n));
    std::lock_guard<std::mutex> l(mu_);
    for (auto& x : out) {
      if (free_.empty()) {
        x = std::make_unique<T>();
      } else {
        x = std::move(free_.back());
        free_.pop_back();
      }
    }
    return out;
  }
  void Return(std::vector<std::unique_ptr<T>> v) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& x : v) free_.push_back(std::move(x));
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<T>> free_;
};

/// Threads for `work_items` items: `requested` (0: all cores), at most kMaxCpuThreads and at
/// most the items.
int ThreadCount(int requested, uint64_t work_items);

/// Runs f(item, thread) for items 0..n-1 on `threads` threads (thread = 0..threads-1; the
/// calling thread alone when threads <= 1); stops handing out items after the first error
/// unless `keep_going`. Returns the first error; an exception f throws (std::bad_alloc
/// included) is that item's error (kInternal), never std::terminate in a worker thread.
Status ParallelFor(uint64_t n, int threads, bool keep_going,
                   const std::function<Status(uint64_t, int)>& f);

/// Like ParallelFor (keep_going false), with each item in two steps: work(item, slot) runs on
/// `threads` threads in parallel; commit(item, slot) then runs for the items in order 0, 1, 2,
/// ..., one at a time, on whichever thread finds the item next to commit finished -- work done
/// in parallel, its results written in one order whatever the thread count (what makes a
/// writer's files byte-reproducible). `slot`, 0 <= slot < InOrderSlots(threads), is the item's
/// alone from its work until its commit returns: what work leaves for commit lives in per-slot
/// state (a buffer). Each thread has two slots, so a thread whose item must wait for an earlier
/// one goes on with the next item; it waits only when both its slots hold uncommitted items.
/// After the first error (of either step) no further item is committed; that error is
/// returned.
Status ParallelForInOrder(uint64_t n, int threads, const std::function<Status(uint64_t, int)>& work,
                          const std::function<Status(uint64_t, int)>& commit);

/// The slots ParallelForInOrder hands out on `threads` threads: 2 x threads (1 for one thread).
int InOrderSlots(int threads);

}  // namespace seedstore
