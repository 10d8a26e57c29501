// A fixed pool of worker threads for data-parallel loops. parallel_for splits
// [0, n) into contiguous chunks of at least `grain` items; the calling thread
// works too. Nested calls from inside a task run inline (no deadlock).
// `fn` must not throw: validate before the loop.
//
// Between loops a worker spins for a short while (kSpin) before it sleeps on
// a condition variable, and so does the caller waiting for the last chunk: a
// decode step runs hundreds of loops of a few microseconds each, and waking a
// sleeping thread costs about as much as the loop.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rlx::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // total threads including the caller; <= 0 → hardware
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);

  // Shared pool sized by RLX_NUM_THREADS (0 = hardware threads).
  static ThreadPool& global();

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;  // guards sleeping and waking; the job's fields are published through generation_
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0, chunk_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::mutex run_mu_;  // one parallel_for at a time
};

}  // namespace rlx::cpu
