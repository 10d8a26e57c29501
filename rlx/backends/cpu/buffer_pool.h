// Private to the CPU backend: free buffers kept for reuse, so that memory
// reused run after run (programs' arenas, f16/bf16 staging) is allocated and
// first touched once, not on every use.
#pragma once
#include <algorithm>
#include <cstddef>
#include <limits>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace rlx::cpu {

// Buffers owned as std::unique_ptr<T>, each with its size. take() hands out
// the smallest free one that fits; give() keeps at most max_free of them and
// max_bytes in all, dropping the smallest first. Thread-safe.
template <class T>
class BufferPool {
 public:
  using Owned = std::unique_ptr<T>;
  BufferPool(size_t max_free, size_t max_bytes = std::numeric_limits<size_t>::max())
      : max_free_(max_free), max_bytes_(max_bytes) {}

  // The smallest free buffer of at least `bytes`, with its size; {nullptr, 0} if none fits.
  std::pair<Owned, size_t> take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= bytes && (best == free_.end() || it->second < best->second)) best = it;
    if (best == free_.end()) return {nullptr, 0};
    std::pair<Owned, size_t> b = std::move(*best);
    free_bytes_ -= b.second;
    free_.erase(best);
    return b;
  }
  void give(Owned b, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.emplace_back(std::move(b), bytes);
    free_bytes_ += bytes;
    while (free_.size() > max_free_ || free_bytes_ > max_bytes_) {
      const auto smallest = std::min_element(free_.begin(), free_.end(),
                                             [](const auto& x, const auto& y) { return x.second < y.second; });
      free_bytes_ -= smallest->second;
      free_.erase(smallest);
    }
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    free_.clear();
    free_bytes_ = 0;
  }

 private:
  const size_t max_free_, max_bytes_;
  std::mutex mu_;
  size_t free_bytes_ = 0;
  std::vector<std::pair<Owned, size_t>> free_;
};

}  // namespace rlx::cpu
