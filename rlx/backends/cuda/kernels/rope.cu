// Rotary position embedding (RopeAttrs semantics) and the fused rope + KV-cache
// writes used by LLM decode (WriteSlice with rope: K only, optionally
// head-normed, converting to the cache type; launch_rope_kv_write: K and V).
//
// Algorithm: one block per (b, l) row. The host computes the inverse
// frequencies freq_base^(−2i/n_rot) in f64 exactly as the CPU kernel does and
// passes them by value in the kernel parameters (≤ 256 doubles). The block's
// first threads form θ_i = (pos · freq_scale) · inv_freq_i in f64 and evaluate
// cos/sin in f64 (libdevice, exact to < 1 ulp; --use_fast_math does not touch
// f64), rounded once to f32 into shared memory — so long positions keep their
// precision and GPU and CPU angles agree. Then every thread produces output
// elements e = (h, d) of the row: partner element, cos/sin from shared memory,
// rotation in f32 (or a plain copy for d ≥ n_rot).
//
// Memory plan: consecutive threads write consecutive output elements (h·D + d)
// and read the same positions of the source row (offset by src_offset), so
// reads and writes coalesce; the partner read hits the same or a neighbouring
// L1 line. The row of positions is read once per block from device memory.
//
// Head norm (QK-norm, RopeAttrs::head_norm): before the angles, warp w sums
// x² over heads w, w + nwarps, ... and stores rsqrt(mean + eps) per head in
// shared memory; each element is then x·rstd·weight in f32, rotated with no
// rounding in between. The weight is staged in shared memory before
// pdl_wait(), so its load overlaps the kernel before (device/pdl.cuh).
#include "rlx/backends/cuda/kernels/rope.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/kernels/dispatch.cuh"
#include "rlx/backends/cuda/kernels/movement.h"

namespace rlx::cuda {
namespace {

using dev::from_f32;
using dev::to_f32;

struct RopeParams {
  double inv_freq[kMaxRopeDims / 2];
  double freq_scale;
  int heads, head_dim, n_rot;
  bool neox;
  bool pos_batched;
  int64_t L;
  int64_t x_stride, x_offset;  // source row stride and column offset (elements)
  const void* norm_w;          // head norm weight [head_dim], or null = no norm
  DType norm_wtype;
  float norm_eps;
};

__device__ __forceinline__ float norm_weight(const RopeParams& p, int d) {
  switch (p.norm_wtype) {
    case DType::F16: return to_f32(static_cast<const __half*>(p.norm_w)[d]);
    case DType::BF16: return to_f32(static_cast<const __nv_bfloat16*>(p.norm_w)[d]);
    default: return static_cast<const float*>(p.norm_w)[d];
  }
}

// rstd[h] = rsqrt(mean(x_h²) + eps) for every head of the row; one warp per head.
// The caller syncs (angles() does) before reading rstd.
template <typename T>
__device__ __forceinline__ void head_norms(const RopeParams& p, const T* xr, float* rstd) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int h = warp; h < p.heads; h += nwarps) {
    const T* xs = xr + static_cast<int64_t>(h) * p.head_dim;
    float q = 0.0f;
    for (int d = lane; d < p.head_dim; d += 32) {
      const float v = to_f32(xs[d]);
      q = fmaf(v, v, q);
    }
    q = dev::warp_sum(q);
    if (lane == 0) rstd[h] = rsqrtf(q / static_cast<float>(p.head_dim) + p.norm_eps);
  }
}

// Source element d of a head, normalized when the params carry a head norm.
// nw: the norm weight staged in shared memory (stage_norm_weight).
template <typename T>
__device__ __forceinline__ float src(const RopeParams& p, const T* xs, int d, float rstd, const float* nw) {
  const float v = to_f32(xs[d]);
  return p.norm_w ? v * rstd * nw[d] : v;
}

// Copies the head-norm weight to shared memory. Called before pdl_wait(): no
// kernel writes weights, so in a decode step this load overlaps the kernel
// before; the __syncthreads in angles() publishes it.
__device__ __forceinline__ void stage_norm_weight(const RopeParams& p, float* nw) {
  if (!p.norm_w) return;
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) nw[d] = norm_weight(p, d);
}

// Fills cs/sn for the row's position (threads 0 .. n_rot/2 − 1), then syncs.
__device__ __forceinline__ void angles(const RopeParams& p, int64_t pos, float* cs, float* sn) {
  const double pd = static_cast<double>(pos) * p.freq_scale;
  for (int i = threadIdx.x; i < p.n_rot / 2; i += blockDim.x) {
    double s, c;
    sincos(pd * p.inv_freq[i], &s, &c);
    cs[i] = static_cast<float>(c);
    sn[i] = static_cast<float>(s);
  }
  __syncthreads();
}

// Output element d (< head_dim) of one head whose source starts at xs, in
// f32 (rstd: the head's norm factor, unused without a head norm).
template <typename T>
__device__ __forceinline__ float rope_f32(const RopeParams& p, const T* xs, int d, const float* cs, const float* sn,
                                          float rstd, const float* nw) {
  if (d >= p.n_rot) return src(p, xs, d, rstd, nw);
  const int half = p.n_rot / 2;
  int i, partner;
  bool first;
  if (p.neox) {
    first = d < half;
    i = first ? d : d - half;
    partner = first ? d + half : d - half;
  } else {
    first = (d & 1) == 0;
    i = d >> 1;
    partner = first ? d + 1 : d - 1;
  }
  const float a = src(p, xs, d, rstd, nw), b = src(p, xs, partner, rstd, nw);
  const float c = cs[i], s = sn[i];
  // first of the pair: a·c − b·s; second: a·c + b·s (b is the first element)
  return first ? fmaf(a, c, -b * s) : fmaf(a, c, b * s);
}

template <typename T>
__device__ __forceinline__ T rope_elem(const RopeParams& p, const T* xs, int d, const float* cs, const float* sn,
                                       float rstd, const float* nw) {
  if (d >= p.n_rot && !p.norm_w) return xs[d];
  return from_f32<T>(rope_f32(p, xs, d, cs, sn, rstd, nw));
}

template <typename T>
__global__ void __launch_bounds__(256) rope_kernel(const T* x, const int32_t* positions, T* y, RopeParams p) {
  __shared__ float cs[kMaxRopeDims / 2], sn[kMaxRopeDims / 2];
  extern __shared__ float rstd[];  // p.heads floats, then the norm weight, when p.norm_w
  float* nw = rstd + p.heads;
  stage_norm_weight(p, nw);
  dev::pdl_begin();
  const int64_t row = blockIdx.x;
  const int64_t l = row % p.L;
  const T* xr = x + row * p.x_stride + p.x_offset;
  if (p.norm_w) head_norms(p, xr, rstd);
  angles(p, positions[p.pos_batched ? row : l], cs, sn);
  const int width = p.heads * p.head_dim;
  T* yr = y + row * width;
  for (int e = threadIdx.x; e < width; e += blockDim.x) {
    const int h = e / p.head_dim, d = e - h * p.head_dim;
    yr[e] = rope_elem(p, xr + h * p.head_dim, d, cs, sn, p.norm_w ? rstd[h] : 1.0f, nw);
  }
}

// K (rotated, optionally head-normed) and, when v is given, V rows stored
// into caches of type C at slot *cache_pos + l; one rounding, to C.
template <typename T, typename C>
__global__ void __launch_bounds__(256)
    rope_kv_kernel(const T* k, const T* v, int64_t v_stride, int64_t v_offset, const int32_t* positions,
                   const int32_t* cache_pos, C* k_cache, C* v_cache, int64_t capacity, RopeParams p, int32_t* err) {
  __shared__ float cs[kMaxRopeDims / 2], sn[kMaxRopeDims / 2];
  extern __shared__ float rstd[];  // p.heads floats, then the norm weight, when p.norm_w
  float* nw = rstd + p.heads;
  stage_norm_weight(p, nw);
  dev::pdl_begin();
  const int64_t start = *cache_pos;
  if (start < 0 || start + p.L > capacity) {
    if (err && blockIdx.x == 0 && threadIdx.x == 0) atomicOr(err, kErrSliceOutOfRange);
    return;
  }
  const int64_t row = blockIdx.x;
  const int64_t b = row / p.L, l = row - b * p.L;
  const int64_t pos = positions ? positions[p.pos_batched ? row : l] : start + l;
  const T* kr = k + row * p.x_stride + p.x_offset;
  if (p.norm_w) head_norms(p, kr, rstd);
  angles(p, pos, cs, sn);
  const int width = p.heads * p.head_dim;
  const int64_t slot = (b * capacity + start + l) * width;
  for (int e = threadIdx.x; e < width; e += blockDim.x) {
    const int h = e / p.head_dim, d = e - h * p.head_dim;
    k_cache[slot + e] = from_f32<C>(rope_f32(p, kr + h * p.head_dim, d, cs, sn, p.norm_w ? rstd[h] : 1.0f, nw));
  }
  if (!v) return;
  const T* vr = v + row * v_stride + v_offset;
  for (int e = threadIdx.x; e < width; e += blockDim.x) v_cache[slot + e] = from_f32<C>(to_f32(vr[e]));
}

// blockIdx.y: 0 → Q rotated into y, 1 → K rotated into its cache, 2 → V
// copied into its cache; blockIdx.x: the (b, l) row. The three parts run side
// by side, so a decode step pays one launch for them.
//
// A Q or K row is first staged in shared memory as f32, all its loads issued
// before any is used: the head norms and the rotation then read shared
// memory, so the step after griddepcontrol.wait costs one L2 round trip
// instead of one per pass over the row (this kernel sits on the decode
// step's critical path).
//
// Angle table (RopeAngles): the layers of a model share their positions and,
// per rope base, their angles, so the first launch of each (`write`) stores
// its rows' cos/sin in a table the program owns, and the later ones (`read`)
// load them after the wait with their row instead of evaluating sincos in
// f64 before it. Their head-norm weight is requested before the wait and
// stored to shared memory after it, so no load latency precedes the wait.
// In a decode step the pre-wait sincos outlasted the GEMV before the rope
// (session 37's probe: +3% decode with neither it nor the weight load).
template <typename T, typename C>
__global__ void __launch_bounds__(256)
    rope_qkv_kernel(const T* q, const T* k, const T* v, int64_t v_stride, int64_t v_offset,
                    const int32_t* positions, const int32_t* cache_pos, void* y, bool y_cache, C* k_cache,
                    C* v_cache, int64_t capacity, RopeParams qp, RopeParams kp, int32_t* err, bool inputs_ready,
                    RopeAngles table) {
  __shared__ float cs[kMaxRopeDims / 2], sn[kMaxRopeDims / 2];
  // rstd [max heads], the norm weight [max head_dim], the staged row [max width]
  extern __shared__ float rstd[];
  const int part = blockIdx.y;
  const RopeParams& p = part == 0 ? qp : kp;
  float* nw = rstd + max(qp.heads, kp.heads);
  float* xs = nw + max(qp.head_dim, kp.head_dim);
  const bool read_table = table.read && part < 2;
  // One weight element per thread held in a register across the wait.
  const bool nw_late = read_table && p.norm_w && p.head_dim <= static_cast<int>(blockDim.x);
  float nw_val = 0.0f;
  if (nw_late) {
    if (static_cast<int>(threadIdx.x) < p.head_dim) nw_val = norm_weight(p, static_cast<int>(threadIdx.x));
  } else if (part < 2) {
    stage_norm_weight(p, nw);
  }
  const int64_t row = blockIdx.x;
  const int64_t b = row / p.L, l = row - b * p.L;
  const int64_t pidx = p.pos_batched ? row : l;  // the row of positions (and of the angle table)
  const int width = p.heads * p.head_dim;
  const int half = p.n_rot / 2;
  // Positions and the cache offset that are program inputs (filled by the
  // run's input copy, written by no kernel) are read, and the angles formed,
  // before pdl_wait: off the decode step's critical path.
  int64_t start = 0;
  if (inputs_ready) {
    start = *cache_pos;
    if (part < 2 && !read_table) angles(p, positions[pidx], cs, sn);
  }
  dev::pdl_begin();
  if (read_table) {  // published by the __syncthreads after the row is staged
    if (nw_late && static_cast<int>(threadIdx.x) < p.head_dim) nw[threadIdx.x] = nw_val;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      const float2 a = __ldcg(table.cs + pidx * half + i);
      cs[i] = a.x;
      sn[i] = a.y;
    }
  }
  if (!inputs_ready) start = *cache_pos;
  const int64_t slot = (b * capacity + start + l) * width;
  if (part > 0 && (start < 0 || start + p.L > capacity)) {
    if (err && blockIdx.x == 0 && threadIdx.x == 0) atomicOr(err, kErrSliceOutOfRange);
    return;
  }
  if (part == 2) {
    const T* vr = v + row * v_stride + v_offset;
    for (int e = threadIdx.x; e < width; e += blockDim.x) v_cache[slot + e] = from_f32<C>(to_f32(vr[e]));
    return;
  }
  const T* xr = (part == 0 ? q : k) + row * p.x_stride + p.x_offset;
  constexpr int kBatch = 4;
  for (int e0 = threadIdx.x; e0 < width; e0 += kBatch * blockDim.x) {
    float vals[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int e = e0 + j * blockDim.x;
      vals[j] = e < width ? to_f32(xr[e]) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j)
      if (e0 + j * blockDim.x < width) xs[e0 + j * blockDim.x] = vals[j];
  }
  __syncthreads();
  if (p.norm_w) head_norms(p, xs, rstd);
  if (inputs_ready || read_table) {
    __syncthreads();  // publishes rstd (angles() or the row's sync did it for cs, sn)
  } else {
    angles(p, positions[pidx], cs, sn);
  }
  if (table.write && part == 0)
    for (int i = threadIdx.x; i < half; i += blockDim.x) table.cs[pidx * half + i] = make_float2(cs[i], sn[i]);
  for (int e = threadIdx.x; e < width; e += blockDim.x) {
    const int h = e / p.head_dim, d = e - h * p.head_dim;
    const float o = rope_f32(p, xs + h * p.head_dim, d, cs, sn, p.norm_w ? rstd[h] : 1.0f, nw);
    if (part != 0) k_cache[slot + e] = from_f32<C>(o);
    else if (y_cache) static_cast<C*>(y)[row * width + e] = from_f32<C>(to_f32(from_f32<T>(o)));  // the folded Cast
    else static_cast<T*>(y)[row * width + e] = from_f32<T>(o);
  }
}

RopeParams make_params(const RopeAttrs& a, bool pos_batched, int64_t L, int64_t x_stride, const char* op) {
  RLX_CHECK(a.num_heads > 0 && a.head_dim > 0, op, ": num_heads and head_dim must be positive");
  RLX_CHECK(a.n_rot >= 0 && a.n_rot % 2 == 0 && a.n_rot <= a.head_dim && a.n_rot <= kMaxRopeDims, op, ": n_rot ",
            a.n_rot, " must be even, ≤ head_dim (", a.head_dim, ") and ≤ ", kMaxRopeDims);
  RLX_CHECK(a.src_offset >= 0 && a.src_offset + int64_t{a.num_heads} * a.head_dim <= x_stride, op, ": heads at column ",
            a.src_offset, " overrun a row of ", x_stride);
  RopeParams p{};
  const std::vector<double> inv_freq = rope_inv_freq(a);
  std::copy(inv_freq.begin(), inv_freq.end(), p.inv_freq);
  p.freq_scale = a.freq_scale;
  p.heads = a.num_heads;
  p.head_dim = a.head_dim;
  p.n_rot = a.n_rot;
  p.neox = a.pairing == RopePairing::NeoX;
  p.pos_batched = pos_batched;
  p.L = L;
  p.x_stride = x_stride;
  p.x_offset = a.src_offset;
  return p;
}

int threads_for(int width) { return width >= 256 ? 256 : (width + 31) / 32 * 32; }

}  // namespace

void launch_rope(DType dtype, const void* x, int64_t W, const int32_t* positions, bool positions_batched, void* y,
                 int64_t B, int64_t L, const RopeAttrs& attrs, cudaStream_t stream, const void* norm_weight,
                 DType norm_dtype) {
  RopeParams p = make_params(attrs, positions_batched, L, W, "Rope");
  RLX_CHECK(attrs.head_norm == (norm_weight != nullptr), "Rope: head_norm is ", attrs.head_norm,
            " but the norm weight is ", norm_weight ? "given" : "missing");
  RLX_CHECK_AS(Unsupported, !norm_weight || is_compute_float(norm_dtype), "Rope: head norm weight of dtype ",
               dtype_name(norm_dtype));
  RLX_CHECK(!norm_weight || attrs.num_heads <= kMaxRopeNormHeads, "Rope: head norm over ", attrs.num_heads,
            " heads exceeds ", kMaxRopeNormHeads);
  p.norm_w = norm_weight;
  p.norm_wtype = norm_dtype;
  p.norm_eps = attrs.norm_eps;
  if (B * L == 0) return;
  RLX_CHECK(B * L < (int64_t{1} << 31), "Rope: ", B * L, " rows exceed the grid limit");
  const size_t smem = norm_weight ? sizeof(float) * static_cast<size_t>(p.heads + p.head_dim) : 0;
  dispatch_float(dtype, "Rope", [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<static_cast<unsigned>(B * L), threads_for(p.heads * p.head_dim), smem, stream>>>(
        static_cast<const T*>(x), positions, static_cast<T*>(y), p);
    RLX_CUDA_CHECK_LAUNCH("Rope");
  });
}

void launch_rope_kv_write(DType dtype, const void* k, int64_t k_stride, const void* v, int64_t v_stride,
                          int64_t v_offset, const int32_t* positions, bool positions_batched,
                          const int32_t* cache_pos, void* k_cache, void* v_cache, int64_t B, int64_t L,
                          int64_t capacity, const RopeAttrs& attrs, int32_t* error_flag, cudaStream_t stream) {
  const RopeParams p = make_params(attrs, positions_batched, L, k_stride, "RopeKvWrite");
  RLX_CHECK(v_offset >= 0 && v_offset + int64_t{attrs.num_heads} * attrs.head_dim <= v_stride,
            "RopeKvWrite: V at column ", v_offset, " overruns a row of ", v_stride);
  if (B * L == 0) return;
  RLX_CHECK(B * L < (int64_t{1} << 31), "RopeKvWrite: ", B * L, " rows exceed the grid limit");
  dispatch_float(dtype, "RopeKvWrite", [&](auto tag) {
    using T = decltype(tag);
    rope_kv_kernel<T, T><<<static_cast<unsigned>(B * L), threads_for(p.heads * p.head_dim), 0, stream>>>(
        static_cast<const T*>(k), static_cast<const T*>(v), v_stride, v_offset, positions, cache_pos,
        static_cast<T*>(k_cache), static_cast<T*>(v_cache), capacity, p, error_flag);
    RLX_CUDA_CHECK_LAUNCH("RopeKvWrite");
  });
}

void launch_rope_write(DType k_dtype, const void* k, int64_t k_stride, const int32_t* positions,
                       bool positions_batched, const int32_t* cache_pos, DType cache_dtype, void* k_cache, int64_t B,
                       int64_t L, int64_t capacity, const RopeAttrs& attrs, const void* norm_weight, DType norm_dtype,
                       int32_t* error_flag, cudaStream_t stream) {
  const char* op = "WriteSlice (rope)";
  RopeParams p = make_params(attrs, positions_batched, L, k_stride, op);
  RLX_CHECK(attrs.head_norm == (norm_weight != nullptr), op, ": head_norm is ", attrs.head_norm,
            " but the norm weight is ", norm_weight ? "given" : "missing");
  RLX_CHECK_AS(Unsupported, !norm_weight || is_compute_float(norm_dtype), op, ": head norm weight of dtype ",
               dtype_name(norm_dtype));
  RLX_CHECK(!norm_weight || attrs.num_heads <= kMaxRopeNormHeads, op, ": head norm over ", attrs.num_heads,
            " heads exceeds ", kMaxRopeNormHeads);
  p.norm_w = norm_weight;
  p.norm_wtype = norm_dtype;
  p.norm_eps = attrs.norm_eps;
  if (B * L == 0) return;
  RLX_CHECK(B * L < (int64_t{1} << 31), op, ": ", B * L, " rows exceed the grid limit");
  const size_t smem = norm_weight ? sizeof(float) * static_cast<size_t>(p.heads + p.head_dim) : 0;
  dispatch_float(k_dtype, op, [&](auto ktag) {
    using T = decltype(ktag);
    dispatch_float(cache_dtype, op, [&](auto ctag) {
      using C = decltype(ctag);
      rope_kv_kernel<T, C><<<static_cast<unsigned>(B * L), threads_for(p.heads * p.head_dim), smem, stream>>>(
          static_cast<const T*>(k), nullptr, 0, 0, positions, cache_pos, static_cast<C*>(k_cache), nullptr, capacity,
          p, error_flag);
      RLX_CUDA_CHECK_LAUNCH("WriteSlice (rope)");
    });
  });
}

void launch_rope_qkv_write(const RopeQkvWrite& w, cudaStream_t stream) {
  const char* op = "Rope + WriteSlice (q, k, v)";
  RopeParams qp = make_params(w.q_attrs, w.positions_batched, w.L, w.q_stride, op);
  RopeParams kp = make_params(w.k_attrs, w.positions_batched, w.L, w.k_stride, op);
  RLX_CHECK(w.q_attrs.head_norm == (w.q_norm != nullptr) && w.k_attrs.head_norm == (w.k_norm != nullptr), op,
            ": head_norm flags and norm weights disagree");
  RLX_CHECK(w.q_attrs.num_heads <= kMaxRopeNormHeads && w.k_attrs.num_heads <= kMaxRopeNormHeads, op,
            ": too many heads for the head norm");
  RLX_CHECK(w.v_offset >= 0 && w.v_offset + int64_t{w.k_attrs.num_heads} * w.k_attrs.head_dim <= w.v_stride, op,
            ": V at column ", w.v_offset, " overruns a row of ", w.v_stride);
  RLX_CHECK(w.positions && w.cache_pos, op, ": positions and the cache offset are required");
  RLX_CHECK(!(w.angles.read && w.angles.write) && ((w.angles.read || w.angles.write) == (w.angles.cs != nullptr)), op,
            ": an angle table is read or written, not both, and only where one is given");
  qp.norm_w = w.q_norm;
  qp.norm_wtype = w.q_norm_dtype;
  qp.norm_eps = w.q_attrs.norm_eps;
  kp.norm_w = w.k_norm;
  kp.norm_wtype = w.k_norm_dtype;
  kp.norm_eps = w.k_attrs.norm_eps;
  if (w.B * w.L == 0) return;
  RLX_CHECK(w.B * w.L < (int64_t{1} << 31), op, ": ", w.B * w.L, " rows exceed the grid limit");
  const int max_width = std::max(qp.heads * qp.head_dim, kp.heads * kp.head_dim);
  const size_t smem = sizeof(float) * static_cast<size_t>(std::max(qp.heads, kp.heads) +
                                                          std::max(qp.head_dim, kp.head_dim) + max_width);
  RLX_CHECK(smem <= 200 * 1024, op, ": rows of ", max_width, " elements exceed the kernel's shared memory");
  const int threads = threads_for(max_width);
  const dim3 grid(static_cast<unsigned>(w.B * w.L), 3);
  dispatch_float(w.dtype, op, [&](auto ttag) {
    using T = decltype(ttag);
    dispatch_float(w.cache_dtype, op, [&](auto ctag) {
      using C = decltype(ctag);
      if (smem > 48 * 1024)
        RLX_CUDA_CHECK(cudaFuncSetAttribute(rope_qkv_kernel<T, C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(smem)));
      rope_qkv_kernel<T, C><<<grid, threads, smem, stream>>>(
          static_cast<const T*>(w.q), static_cast<const T*>(w.k), static_cast<const T*>(w.v), w.v_stride, w.v_offset,
          w.positions, w.cache_pos, w.y, w.y_in_cache_dtype, static_cast<C*>(w.k_cache),
          static_cast<C*>(w.v_cache), w.capacity, qp, kp, w.error_flag, w.inputs_ready, w.angles);
      RLX_CUDA_CHECK_LAUNCH(op);
    });
  });
}

bool rope_angles_shared(const RopeQkvWrite& w) {
  const RopeAttrs& q = w.q_attrs;
  const RopeAttrs& k = w.k_attrs;
  return q.n_rot == k.n_rot && q.freq_scale == k.freq_scale && rope_inv_freq(q) == rope_inv_freq(k);
}

// The angles' parameters by their bits: a printed double would round, and two
// bases that print alike must not share a table.
std::string rope_angles_key(const RopeQkvWrite& w) {
  auto bits = [](double v) {
    uint64_t u = 0;
    std::memcpy(&u, &v, sizeof u);
    return u;
  };
  std::string key = str("rope angles ", reinterpret_cast<uintptr_t>(w.positions), " ", w.positions_batched, " ", w.B,
                        " ", w.L, " ", w.q_attrs.n_rot, " ", bits(static_cast<double>(w.q_attrs.freq_scale)));
  for (double f : rope_inv_freq(w.q_attrs)) key += str(" ", bits(f));
  return key;
}

size_t rope_angles_bytes(const RopeQkvWrite& w) {
  const int64_t rows = w.positions_batched ? w.B * w.L : w.L;
  return static_cast<size_t>(rows) * static_cast<size_t>(w.q_attrs.n_rot / 2) * sizeof(float2);
}

}  // namespace rlx::cuda
