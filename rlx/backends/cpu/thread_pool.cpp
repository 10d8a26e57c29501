#include "rlx/backends/cpu/thread_pool.h"

#include <algorithm>

#include "rlx/core/env.h"

namespace rlx::cpu {
namespace {
thread_local bool t_in_pool_task = false;
}

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool(static_cast<int>(env_int("RLX_NUM_THREADS")));
  return pool;
}

void ThreadPool::worker_loop(int) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    {
      std::unique_lock lock(mu_);
      cv_work_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    t_in_pool_task = true;
    for (;;) {
      int64_t begin;
      {
        std::lock_guard lock(mu_);
        begin = next_;
        next_ += chunk_;
      }
      if (begin >= n_) break;
      (*job)(begin, std::min(n_, begin + chunk_));
    }
    t_in_pool_task = false;
    {
      std::lock_guard lock(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
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
  const int64_t chunk = std::max(grain, (n + max_chunks - 1) / max_chunks);
  {
    std::lock_guard lock(mu_);
    job_ = &fn;
    n_ = n;
    chunk_ = chunk;
    next_ = 0;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  cv_work_.notify_all();
  t_in_pool_task = true;
  for (;;) {
    int64_t begin;
    {
      std::lock_guard lock(mu_);
      begin = next_;
      next_ += chunk_;
    }
    if (begin >= n) break;
    fn(begin, std::min(n, begin + chunk));
  }
  t_in_pool_task = false;
  std::unique_lock lock(mu_);
  cv_done_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
}

}  // namespace rlx::cpu
