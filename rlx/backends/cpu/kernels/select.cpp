// Selection CPU kernels: ArgMax, TopK, Sample.
//
// Ordering used by all three: NaN ranks above every number (so a NaN is never
// silently skipped), and among equal values the lower index comes first.
//
// Sample, per row of logits [B, V] (step = the optional i32 input, else 0):
//   1. temperature 0, or a top logit that is not finite (NaN, +inf, or −inf
//      for an all-masked row) → the ArgMax index.
//   2. Kept tokens: the first K = top_k (0 = all V) in the selection order.
//      w_j = exp((l_j − l_max) / temperature) in double; total = Σ w_j over
//      the kept tokens, summed in index order.
//   3. top_p < 1: the nucleus is the shortest prefix of the kept tokens in
//      selection order whose cumulative w reaches top_p · total (at least one
//      token; all K if rounding leaves it short); mass = its cumulative w.
//      Otherwise the nucleus is all K and mass = total.
//   4. u = sample_uniform(seed, step, row) (kernels/sampling_rng.h); the draw
//      is the first nucleus token, in selection order, whose cumulative w
//      exceeds u · mass (if rounding leaves none, the last one with w > 0).
// Only as much of the row is sorted as the draw needs (nth_element on a
// growing prefix), so a peaked distribution over a large vocabulary is O(V).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>

#include "rlx/backends/cpu/kernel.h"
#include "rlx/backends/cpu/kernels/sampling_rng.h"
#include "rlx/backends/cpu/kernels/strided.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace rlx::cpu {
namespace {

// v strictly ahead of w in the selection order (NaN above every number).
template <typename T>
bool ranks_above(T v, T w) {
  if constexpr (std::is_floating_point_v<T>) {
    if (w != w) return false;
    if (v != v) return true;
  }
  return v > w;
}


int normalize_axis(int axis, size_t rank) { return axis < 0 ? axis + static_cast<int>(rank) : axis; }

void check_index_range(const KernelArgs& a, int64_t n) {
  RLX_CHECK(n <= std::numeric_limits<int32_t>::max(), a.where(), ": axis of ", n, " elements overflows i32 indices");
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// argmax_strided of a contiguous f32 row without NaN, eight lanes at a time
// (a decode step's greedy pick over a 262,144-token vocabulary): the largest
// value, then the first index that holds it. -1 when the row has a NaN, which
// the scalar order ranks first.
__attribute__((target("avx2"))) int64_t argmax_contiguous_avx2(const float* x, int64_t n) {
  __m256 mx = _mm256_set1_ps(-INFINITY), nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    mx = _mm256_max_ps(mx, v);
  }
  if (_mm256_movemask_ps(nan)) return -1;
  float lanes[8];
  _mm256_storeu_ps(lanes, mx);
  float best = lanes[0];
  for (float l : lanes) best = std::max(best, l);
  for (int64_t j = i; j < n; ++j) {
    if (x[j] != x[j]) return -1;
    best = std::max(best, x[j]);
  }
  for (int64_t j = 0; j < n; ++j)  // ±0 compare equal, as ranks_above leaves the first of them
    if (x[j] == best) return j;
  return 0;
}
#endif

// Index of the first maximum of x[0], x[stride], ..., x[(n-1)·stride].
template <typename T>
int32_t argmax_strided(const T* x, int64_t n, int64_t stride) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if constexpr (std::is_same_v<T, float>) {
    static const bool avx2 = __builtin_cpu_supports("avx2");
    if (stride == 1 && n >= 64 && avx2) {
      const int64_t i = argmax_contiguous_avx2(x, n);
      if (i >= 0) return static_cast<int32_t>(i);
    }
  }
#endif
  int64_t best = 0;
  for (int64_t k = 1; k < n; ++k)
    if (ranks_above(x[k * stride], x[best * stride])) best = k;
  return static_cast<int32_t>(best);
}

// T: float (f32/f16/bf16 via f32, exact), double, int32_t or int64_t.
template <typename T>
void argmax_kernel(KernelArgs& a) {
  const auto& at = a.attrs<ArgMaxAttrs>();
  const auto& d = a.in_dims(0);
  const auto ax = static_cast<size_t>(normalize_axis(at.axis, d.size()));
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < ax; ++i) outer *= d[i];
  for (size_t i = ax + 1; i < d.size(); ++i) inner *= d[i];
  const int64_t len = d[ax];
  if (outer * inner == 0) return;
  RLX_CHECK(len > 0, a.where(), ": argmax over an empty axis");
  check_index_range(a, len);
  const T* x = a.in_as<T>(0);
  auto* y = a.out<int32_t>();
  if (inner == 1) {
    a.pool.parallel_for(outer, std::max<int64_t>(1, kGrainElems / len), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) y[o] = argmax_strided(x + o * len, len, 1);
    });
    return;
  }
  // Strided axis: sweep it once per block of up to 64 adjacent columns, so
  // every read is a contiguous run.
  constexpr int64_t kLanes = 64;
  const int64_t blocks = (inner + kLanes - 1) / kLanes;
  a.pool.parallel_for(outer * blocks, std::max<int64_t>(1, kGrainElems / (len * kLanes)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / blocks, c0 = (t % blocks) * kLanes, lanes = std::min(kLanes, inner - c0);
      const T* base = x + o * len * inner + c0;
      T best[kLanes];
      int32_t idx[kLanes];
      for (int64_t j = 0; j < lanes; ++j) {
        best[j] = base[j];
        idx[j] = 0;
      }
      for (int64_t k = 1; k < len; ++k) {
        const T* r = base + k * inner;
        for (int64_t j = 0; j < lanes; ++j)
          if (ranks_above(r[j], best[j])) {
            best[j] = r[j];
            idx[j] = static_cast<int32_t>(k);
          }
      }
      for (int64_t j = 0; j < lanes; ++j) y[o * inner + c0 + j] = idx[j];
    }
  });
}

// The selection order on indices of `row`: descending, NaN first, ties by
// lower index. A strict total order, so every sort of it has one result.
struct SelectionOrder {
  const float* row;
  bool operator()(int32_t i, int32_t j) const {
    if (ranks_above(row[i], row[j])) return true;
    if (ranks_above(row[j], row[i])) return false;
    return i < j;
  }
};

// Puts the first k of the selection order of row into idx[0..k), sorted:
// O(n + k log k) via nth_element, then a sort of k.
void sort_top(const float* row, int32_t* idx, int64_t n, int64_t k) {
  std::iota(idx, idx + n, 0);
  const SelectionOrder before{row};
  if (k < n) std::nth_element(idx, idx + k, idx + n, before);
  std::sort(idx, idx + k, before);
}

// Below this top_k, sample_row keeps the candidates in a heap.
constexpr int64_t kHeapTopK = 1024;

// sample_row for k ≤ kHeapTopK: the first k of the selection order found in
// one pass with a heap of k (most tokens are rejected by one comparison with
// the heap's worst), then the same sums and picks as sample_row's general
// path, in the same orders, so the token is the same: total in index order,
// cumulative sums in selection order. O(n) with no scratch of n entries, where
// the general path's iota + nth_element over 262,144 logits took milliseconds.
int32_t sample_row_small_k(const float* row, int64_t n, int64_t k, const SampleAttrs& at, float u, double top) {
  thread_local std::vector<int32_t> kept;
  thread_local std::vector<double> cum;
  const SelectionOrder before{row};
  kept.clear();
  for (int32_t j = 0; j < static_cast<int32_t>(n); ++j) {
    if (static_cast<int64_t>(kept.size()) < k) {
      kept.push_back(j);
      std::push_heap(kept.begin(), kept.end(), before);  // front: the kept token that comes last
      continue;
    }
    const int32_t worst = kept.front();
    if (row[j] < row[worst] || !before(j, worst)) continue;  // the < is only a shortcut (false for NaN)
    std::pop_heap(kept.begin(), kept.end(), before);
    kept.back() = j;
    std::push_heap(kept.begin(), kept.end(), before);
  }
  const double temperature = at.temperature;
  auto weight = [&](int32_t j) { return std::exp((static_cast<double>(row[j]) - top) / temperature); };
  std::sort(kept.begin(), kept.end());
  double total = 0.0;
  for (int32_t j : kept) total += weight(j);
  std::sort(kept.begin(), kept.end(), before);
  cum.resize(static_cast<size_t>(k));
  double c = 0.0;
  for (int64_t i = 0; i < k; ++i) cum[i] = c += weight(kept[i]);

  int64_t keep = k;
  double mass = total;
  if (at.top_p < 1.0f) {
    const double* it = std::lower_bound(cum.data(), cum.data() + k, static_cast<double>(at.top_p) * total);
    keep = it != cum.data() + k ? (it - cum.data()) + 1 : k;
    mass = cum[keep - 1];
  }
  const double* it = std::upper_bound(cum.data(), cum.data() + keep, static_cast<double>(u) * mass);
  if (it != cum.data() + keep) return kept[it - cum.data()];
  for (int64_t j = keep - 1; j > 0; --j)
    if (cum[j] > cum[j - 1]) return kept[j];
  return kept[0];
}

// One row of Sample with temperature > 0 (algorithm in the header comment).
// idx, w and cum are scratch of n entries each (unused when top_k ≤ kHeapTopK).
int32_t sample_row(const float* row, int64_t n, const SampleAttrs& at, float u, int32_t* idx, double* w,
                   double* cum) {
  const int32_t best = argmax_strided(row, n, 1);
  const double top = row[best];
  if (!std::isfinite(top)) return best;
  const int64_t k = at.top_k == 0 ? n : std::min<int64_t>(at.top_k, n);
  if (k <= kHeapTopK) return sample_row_small_k(row, n, k, at, u, top);
  const double temperature = at.temperature;
  auto weight = [&](int32_t j) { return w[j] = std::exp((static_cast<double>(row[j]) - top) / temperature); };
  const SelectionOrder before{row};

  std::iota(idx, idx + n, 0);
  double total = 0.0;
  if (k < n) {
    std::nth_element(idx, idx + (k - 1), idx + n, before);  // idx[0..k) = kept, unordered
    const int32_t kth = idx[k - 1];
    for (int32_t j = 0; j < static_cast<int32_t>(n); ++j)
      if (j == kth || before(j, kth)) total += weight(j);
  } else {
    for (int32_t j = 0; j < static_cast<int32_t>(n); ++j) total += weight(j);
  }

  // idx[0..sorted) is in selection order with cum[] its running sums; every
  // kept token after it comes later in the order.
  int64_t sorted = 0;
  auto extend = [&](int64_t m) {
    if (m < k) std::nth_element(idx + sorted, idx + m, idx + k, before);
    std::sort(idx + sorted, idx + m, before);
    double c = sorted ? cum[sorted - 1] : 0.0;
    for (int64_t j = sorted; j < m; ++j) {
      c += w[idx[j]];
      cum[j] = c;
    }
    sorted = m;
  };
  // Grow 4x at a time; once a quarter of the kept tokens are needed, sort them all.
  auto grow = [&](int64_t limit) {
    const int64_t m = std::max<int64_t>(256, sorted * 4);
    extend(m * 4 > limit ? limit : m);
  };

  int64_t keep = k;
  double mass = total;
  if (at.top_p < 1.0f) {
    const double need = static_cast<double>(at.top_p) * total;
    for (;;) {
      grow(k);
      const double* it = std::lower_bound(cum, cum + sorted, need);
      if (it != cum + sorted || sorted == k) {
        keep = it != cum + sorted ? (it - cum) + 1 : k;
        break;
      }
    }
    mass = cum[keep - 1];
  }
  const double target = static_cast<double>(u) * mass;
  for (;;) {
    const int64_t end = std::min(sorted, keep);
    const double* it = std::upper_bound(cum, cum + end, target);
    if (it != cum + end) return idx[it - cum];
    if (sorted >= keep) break;
    grow(keep);
  }
  for (int64_t j = keep - 1; j > 0; --j)
    if (cum[j] > cum[j - 1]) return idx[j];
  return idx[0];
}

// Per-chunk scratch, allocated before the parallel loop: rows are split into
// `chunks` contiguous ranges and chunk c uses scratch[c·per ...].
struct RowChunks {
  int64_t rows, chunks;
  RowChunks(int64_t r, const ThreadPool& pool) : rows(r), chunks(std::min<int64_t>(r, int64_t{pool.size()} * 4)) {}
  int64_t begin(int64_t c) const { return rows * c / chunks; }
};

void topk_kernel(KernelArgs& a) {
  const auto& at = a.attrs<TopKAttrs>();
  const auto& d = a.in_dims(0);
  const int64_t n = d.back(), k = at.k;
  const int64_t rows = n == 0 ? 0 : a.in_numel(0) / n;
  if (rows == 0) return;
  RLX_CHECK(k >= 1 && k <= n, a.where(), ": k=", k, " is outside [1, ", n, "]");
  check_index_range(a, n);
  const float* x = a.in_f32(0);
  int32_t* yi = at.indices ? a.out<int32_t>() : nullptr;
  float* yv = at.indices ? nullptr : a.out_f32();
  const RowChunks rc(rows, a.pool);
  std::vector<int32_t> scratch(static_cast<size_t>(rc.chunks * n));
  a.pool.parallel_for(rc.chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      int32_t* idx = scratch.data() + c * n;
      for (int64_t r = rc.begin(c); r < rc.begin(c + 1); ++r) {
        const float* row = x + r * n;
        sort_top(row, idx, n, k);
        for (int64_t j = 0; j < k; ++j) {
          if (yi) yi[r * k + j] = idx[j];
          else yv[r * k + j] = row[idx[j]];
        }
      }
    }
  });
}

void sample_kernel(KernelArgs& a) {
  const auto& at = a.attrs<SampleAttrs>();
  const auto& d = a.in_dims(0);
  const int64_t rows = d[0], n = d[1];
  if (rows == 0) return;
  RLX_CHECK(n > 0, a.where(), ": cannot sample from an empty vocabulary");
  check_index_range(a, n);
  RLX_CHECK(at.temperature >= 0.0f && at.top_k >= 0 && at.top_p > 0.0f && at.top_p <= 1.0f, a.where(),
            ": invalid sampling attributes");
  uint32_t step = 0;
  if (a.num_inputs() == 2) {
    RLX_CHECK(a.in_numel(1) >= 1, a.where(), ": the step input is empty");
    step = static_cast<uint32_t>(a.in<int32_t>(1)[0]);
  }
  const float* x = a.in_f32(0);
  auto* y = a.out<int32_t>();
  if (at.temperature == 0.0f) {
    a.pool.parallel_for(rows, std::max<int64_t>(1, kGrainElems / n), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) y[r] = argmax_strided(x + r * n, n, 1);
    });
    return;
  }
  const RowChunks rc(rows, a.pool);
  const int64_t k = at.top_k == 0 ? n : std::min<int64_t>(at.top_k, n);
  const int64_t per = k <= kHeapTopK ? 0 : n;  // scratch entries per chunk
  std::vector<int32_t> idx(static_cast<size_t>(rc.chunks * per));
  std::vector<double> w(idx.size()), cum(idx.size());
  a.pool.parallel_for(rc.chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c)
      for (int64_t r = rc.begin(c); r < rc.begin(c + 1); ++r)
        y[r] = sample_row(x + r * n, n, at, sample_uniform(at.seed, step, static_cast<uint32_t>(r)),
                          per ? idx.data() + c * per : nullptr, per ? w.data() + c * per : nullptr,
                          per ? cum.data() + c * per : nullptr);
  });
}

}  // namespace

void register_select_kernels() {
  register_cpu_float_kernel(OpKind::ArgMax, {DType::F32, DType::I32}, argmax_kernel<float>, "cpu argmax");
  register_cpu_kernel(OpKind::ArgMax, {DType::F64, DType::I32}, argmax_kernel<double>, "cpu argmax [f64]");
  register_cpu_kernel(OpKind::ArgMax, {DType::I32, DType::I32}, argmax_kernel<int32_t>, "cpu argmax [i32]");
  register_cpu_kernel(OpKind::ArgMax, {DType::I64, DType::I32}, argmax_kernel<int64_t>, "cpu argmax [i64]");
  register_cpu_float_kernel(OpKind::TopK, {DType::F32, DType::F32}, topk_kernel, "cpu topk values");
  register_cpu_float_kernel(OpKind::TopK, {DType::F32, DType::I32}, topk_kernel, "cpu topk indices");
  register_cpu_float_kernel(OpKind::Sample, {DType::F32, DType::I32}, sample_kernel, "cpu sample");
  register_cpu_float_kernel(OpKind::Sample, {DType::F32, DType::I32, DType::I32}, sample_kernel,
                            "cpu sample (step input)");
}

}  // namespace rlx::cpu
