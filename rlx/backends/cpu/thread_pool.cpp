#include "rlx/backends/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "rlx/core/env.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace rlx::cpu {
namespace {

thread_local bool t_in_pool_task = false;

// How long a thread polls before it sleeps: longer than the gap between the
// loops of one decode step, short enough that an idle pool stops burning CPU
// at once.
constexpr auto kSpin = std::chrono::microseconds(100);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls done() for up to kSpin; true when it became true.
template <class F>
bool spin_until(F&& done) {
  const auto end = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= end) return false;
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_.store(true);
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(static_cast<int>(env_int("RLX_NUM_THREADS")));
  return pool;
}

void ThreadPool::run_chunks() {
  t_in_pool_task = true;
  for (;;) {
    const int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= n_) break;
    (*job_)(begin, std::min(n_, begin + chunk_));
  }
  t_in_pool_task = false;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    auto ready = [&] {
      return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(ready)) {
      std::unique_lock lock(mu_);
      cv_work_.wait(lock, ready);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    run_chunks();
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(mu_);  // the caller may be between its check and its sleep
      cv_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (workers_.empty() || n <= grain || t_in_pool_task) {
    fn(0, n);
    return;
  }
  std::lock_guard run_lock(run_mu_);
  const int64_t max_chunks = int64_t{size()} * 4;  // a few chunks per thread balances uneven rows
  job_ = &fn;
  n_ = n;
  chunk_ = std::max(grain, (n + max_chunks - 1) / max_chunks);
  next_.store(0, std::memory_order_relaxed);
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard lock(mu_);  // a worker between its check and its sleep must see the new generation
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_work_.notify_all();
  run_chunks();
  auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done)) {
    std::unique_lock lock(mu_);
    cv_done_.wait(lock, done);
  }
  job_ = nullptr;
}

}  // namespace rlx::cpu
