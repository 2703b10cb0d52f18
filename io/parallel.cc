#include "io/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <thread>

#include "gen/materialize_cpu.h"

namespace seedstore {

int ThreadCount(int requested, uint64_t work_items) {
  int t = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
  t = std::max(1, std::min(t, kMaxCpuThreads));
  return static_cast<int>(std::min<uint64_t>(t, std::max<uint64_t>(work_items, 1)));
}

namespace {

// ParallelFor (no `commit`: items are independent; slot = thread) and ParallelForInOrder.
Status RunItems(uint64_t n, int threads, bool keep_going,
                const std::function<Status(uint64_t, int)>& work,
                const std::function<Status(uint64_t, int)>* commit) {
  const int per_thread = commit ? InOrderSlots(threads) / std::max(threads, 1) : 1;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable freed;
  // Under mu, for ParallelForInOrder: items 0..committed-1 are committed; ready[j] is the slot
  // of finished item j, uncommitted; busy[slot]: the slot holds an uncommitted item.
  uint64_t committed = 0;
  bool committing = false;
  std::map<uint64_t, int> ready;
  std::vector<char> busy(static_cast<size_t>(std::max(threads, 1)) * per_thread, 0);
  Status first;
  auto fail = [&](Status st) {  // under mu
    if (first.ok()) first = std::move(st);
    failed = true;
  };
  auto guarded = [](const std::function<Status(uint64_t, int)>& g, uint64_t j, int slot) {
    try {  // an exception must not leave a worker thread: that is std::terminate
      return g(j, slot);
    } catch (const std::bad_alloc&) {
      return Status(Code::kInternal, "out of memory");
    } catch (const std::exception& e) {
      return Internal(e.what());
    }
  };
  auto run = [&](int t) {
    for (int slot = t * per_thread;;) {
      if (commit) {  // a slot's item must be committed before the slot is used again
        std::unique_lock<std::mutex> l(mu);
        // The slot used last when it is free (its buffers are warm in the cache), else another.
        freed.wait(l, [&] {
          for (int k = 0; k < per_thread && busy[slot]; ++k)
            slot = t * per_thread + (slot - t * per_thread + 1) % per_thread;
          return !busy[slot] || failed.load();
        });
      }
      if (failed.load() && !keep_going) return;
      const uint64_t j = next.fetch_add(1);
      if (j >= n) return;
      Status st = guarded(work, j, slot);
      if (!commit && st.ok()) continue;
      std::unique_lock<std::mutex> l(mu);
      if (!st.ok()) {
        fail(std::move(st));
        freed.notify_all();
        if (commit) return;
        continue;
      }
      busy[slot] = 1;
      ready[j] = slot;
      // Whoever finds the next item to commit ready commits it, and the ones ready after it:
      // one committer at a time, so commits run in item order. Progress: a thread waits only
      // for its own slot, holding no item in work, so the lowest uncommitted item is in work on
      // a thread that is not waiting, or ready -- and then being committed.
      while (!committing && !failed.load() && !ready.empty() && ready.begin()->first == committed) {
        const uint64_t c = committed;
        const int s = ready.begin()->second;
        ready.erase(ready.begin());
        committing = true;
        l.unlock();
        st = guarded(*commit, c, s);
        l.lock();
        committing = false;
        busy[s] = 0;
        ++committed;
        if (!st.ok()) fail(std::move(st));
        freed.notify_all();
      }
    }
  };
  if (threads <= 1) {
    run(0);
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(run, t);
    for (auto& th : pool) th.join();
  }
  return first;
}

}  // namespace

Status ParallelFor(uint64_t n, int threads, bool keep_going,
                   const std::function<Status(uint64_t, int)>& f) {
  return RunItems(n, threads, keep_going, f, nullptr);
}

int InOrderSlots(int threads) { return threads > 1 ? 2 * threads : 1; }

Status ParallelForInOrder(uint64_t n, int threads, const std::function<Status(uint64_t, int)>& work,
                          const std::function<Status(uint64_t, int)>& commit) {
  return RunItems(n, threads, false, work, &commit);
}

}  // namespace seedstore
