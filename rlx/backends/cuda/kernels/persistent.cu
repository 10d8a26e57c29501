// The persistent decode kernel (kernels/persistent.h): one CTA per SM walks
// the op table in order; grid barriers (a counter in global memory) separate
// ops whose data depend on each other across CTAs.
//
// Critical path per op. A distributed op first issues what does not depend on
// the op before it — its weight units into registers (GEMV), its earlier
// cache rows into shared memory (attention) — then waits at the barrier, then
// reads its activations (from a shared-memory slot, or one L2 round trip) and
// works. The op table itself is copied into a three-entry shared ring two ops
// ahead (cp.async by the last warp), so it is not fetched on the critical path.
//
// Memory ordering. Every value an op reads that another CTA wrote in this
// launch is read with plain (coherent) loads after a barrier; only weights,
// the op table and cache rows of earlier steps use the read-only path. The
// barrier is the cooperative-groups pattern: __syncthreads, thread 0 fences
// and adds to the counter with release semantics, spins with acquire loads,
// fences, __syncthreads. A barrier that waits past ~2^31 cycles (CTAs that
// are not all resident, e.g. another process holding SMs) gives up, flags
// kPersistentTimeout and lets the launch finish with garbage, which the
// program reports as an error instead of hanging.
#include "rlx/backends/cuda/kernels/persistent.h"

#include <algorithm>
#include <cstdio>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/cp_async.cuh"
#include "rlx/backends/cuda/device/glu_act.cuh"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/quant_blocks.cuh"
#include "rlx/backends/cuda/device/smem.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/kernels/quant_common.cuh"
#include "rlx/core/dtype.h"

namespace rlx::cuda {
namespace {

using dev::IqTables;

constexpr int kThreads = kPersistentThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadDim = 256;

struct Ctx {
  float* slots;
  int slot_elems;
  unsigned char* scratch;
  float* red;           // 64 floats
  uint32_t* sync;
  int32_t* error_flag;
  uint32_t epoch;
  bool timed_out;       // thread 0: a barrier of this launch gave up; later ones do not wait
  bool profiling;       // CTA 0 with RLX_CUDA_PERSISTENT_PROFILE (read by its thread 0)
  unsigned long long waited;  // profiling: ns spent spinning in barriers during the current op
  IqTables tables;
};

// ---------------------------------------------------------------- memory access

__device__ __forceinline__ float ld_act(const void* p, int64_t i, PFloat t) {
  switch (t) {
    case PFloat::F16: return __half2float(static_cast<const __half*>(p)[i]);
    case PFloat::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}
__device__ __forceinline__ void st_act(void* p, int64_t i, float v, PFloat t) {
  switch (t) {
    case PFloat::F16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    case PFloat::BF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<float*>(p)[i] = v;
  }
}
// v as a reader of the stored tensor sees it.
__device__ __forceinline__ float rounded(float v, PFloat t) {
  switch (t) {
    case PFloat::F16: return __half2float(__float2half_rn(v));
    case PFloat::BF16: return __bfloat162float(__float2bfloat16_rn(v));
    default: return v;
  }
}
// Read-only (weights, norm weights): the non-coherent path is fine.
__device__ __forceinline__ float ld_param(const void* p, int64_t i, PFloat t) {
  switch (t) {
    case PFloat::F16: return __half2float(__ldg(static_cast<const __half*>(p) + i));
    case PFloat::BF16: return __bfloat162float(__ldg(static_cast<const __nv_bfloat16*>(p) + i));
    default: return __ldg(static_cast<const float*>(p) + i);
  }
}

__device__ __forceinline__ const float* slot(const Ctx& c, int s) { return c.slots + static_cast<size_t>(s) * c.slot_elems; }
__device__ __forceinline__ float* slot_mut(const Ctx& c, int s) { return c.slots + static_cast<size_t>(s) * c.slot_elems; }

__device__ __forceinline__ float ld_in(const Ctx& c, const PIn& in, int64_t i) {
  return in.slot >= 0 ? slot(c, in.slot)[i] : ld_act(in.ptr, i, in.dtype);
}
// A local op's output element: into its slot (every CTA), and global memory (CTA 0).
__device__ __forceinline__ void st_local(const Ctx& c, const POut& o, int64_t i, float v) {
  slot_mut(c, o.slot)[i] = rounded(v, o.dtype);
  if (blockIdx.x == 0) st_act(o.ptr, i, v, o.dtype);
}

// Typed forms for ops whose activations are all of one storage type T (the
// host guarantees it): no per-element dtype switch in their loops. (Meant to
// keep each op's executed code small; it measured no clear change in the op
// times, docs/performance.md, nineteenth session.)
template <typename T>
__device__ __forceinline__ float ld_t(const void* p, int64_t i) {
  return dev::to_f32(static_cast<const T*>(p)[i]);
}
template <typename T>
__device__ __forceinline__ void st_t(void* p, int64_t i, float v) {
  static_cast<T*>(p)[i] = dev::from_f32<T>(v);
}
template <typename T>
__device__ __forceinline__ float round_t(float v) {
  return dev::to_f32(dev::from_f32<T>(v));
}
template <typename T>
__device__ __forceinline__ float ld_in_t(const Ctx& c, const PIn& in, int64_t i) {
  return in.slot >= 0 ? slot(c, in.slot)[i] : ld_t<T>(in.ptr, i);
}
template <typename T>
__device__ __forceinline__ void st_local_t(const Ctx& c, const POut& o, int64_t i, float v) {
  slot_mut(c, o.slot)[i] = round_t<T>(v);
  if (blockIdx.x == 0) st_t<T>(o.ptr, i, v);
}
// Calls f(T{}) for the storage type t.
template <typename F>
__device__ __forceinline__ void by_dtype(PFloat t, F&& f) {
  switch (t) {
    case PFloat::F16: f(__half{}); break;
    case PFloat::BF16: f(__nv_bfloat16{}); break;
    default: f(float{});
  }
}

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---------------------------------------------------------------- grid barrier

__device__ __forceinline__ uint32_t ld_relaxed(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_add(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_acquire() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// Release: the CTA's writes are ordered before thread 0's release-add by the
// __syncthreads (cumulativity), so no full fence is needed before it. Acquire:
// the spin reads relaxed (an acquire load invalidates L1 on every iteration)
// and one acquire fence after it orders the CTA's later reads, through the
// closing __syncthreads. __threadfence() (fence.sc, twice per barrier) was the
// version this replaces.
__device__ void grid_barrier(Ctx& c) {
  __syncthreads();
  if (threadIdx.x == 0) {
    ++c.epoch;
    red_release_add(c.sync, 1);
    const uint32_t target = c.epoch * gridDim.x;
    const unsigned long long w0 = c.profiling ? globaltimer() : 0;
    const long long t0 = clock64();
    while (!c.timed_out && ld_relaxed(c.sync) < target) {
      if (clock64() - t0 > (1ll << 31)) {
        if (c.error_flag) atomicOr(c.error_flag, kPersistentTimeout);
        c.timed_out = true;
      }
    }
    fence_acquire();
    if (c.profiling) c.waited += globaltimer() - w0;
  }
  __syncthreads();
}

// The last CTA to leave resets the counter for the next launch.
__device__ void grid_finish(const Ctx& c) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(c.sync + 1, 1u) == gridDim.x - 1) {
      atomicExch(c.sync, 0u);
      atomicExch(c.sync + 1, 0u);
    }
  }
}

// This CTA's output items [i0, i1) of a GEMV.
__device__ __forceinline__ void gemv_items(const PGemv& g, int64_t& i0, int64_t& i1) {
  const int64_t items = g.glu >= 0 ? g.n / 2 : g.n;
  i0 = min(items, static_cast<int64_t>(blockIdx.x) * g.items_per_cta);
  i1 = min(items, i0 + g.items_per_cta);
}

// GEMV x as f32: its slot, or staged from global memory into scratch.
__device__ const float* gemv_x(Ctx& c, const POp& o) {
  if (o.in[0].slot >= 0) return slot(c, o.in[0].slot);
  auto* xs = reinterpret_cast<float*>(c.scratch);
  for (int64_t e = threadIdx.x; e < o.gemv.k; e += kThreads) xs[e] = ld_act(o.in[0].ptr, e, o.in[0].dtype);
  __syncthreads();
  return xs;
}

__device__ __forceinline__ void gemv_store(const POp& o, int64_t item, float g, float u) {
  const float v = o.gemv.glu >= 0 ? dev::glu_act(static_cast<GluKind>(o.gemv.glu), g) * u : g;
  st_act(o.out[0].ptr, item, v, o.out[0].dtype);
}

// ---------------------------------------------------------------- GEMV, unit decoders

// A warp per output item (GLU: its gate and up rows); lanes stride over the
// rows' units. Lane l's first unit of the warp's first item is fetched
// before the barrier, each later one a unit ahead of its use.
// Not inlined: each decoder's loop gets the kernel's registers to itself (all
// of them inlined into one switch needed more than 255 and spilled).
template <class U>
__device__ __noinline__ void gemv_unit(Ctx& c, const POp& o) {
  using Raw = typename U::Raw;
  const PGemv g = o.gemv;  // in registers: the loop below writes shared memory, where o lives
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool glu = g.glu >= 0;
  const int64_t half = g.n / 2;
  const int64_t units = g.k / U::kBlockElems * U::kUnits;
  int64_t i0, i1;
  gemv_items(g, i0, i1);
  const auto fetch = [&](int64_t item, int64_t u, Raw (&r)[2]) {
    const int64_t boff = (u / U::kUnits) * U::kBlockBytes;
    const int j = static_cast<int>(u % U::kUnits);
    r[0] = U::load(g.w + item * g.row_bytes + boff, j);
    if (glu) r[1] = U::load(g.w + (half + item) * g.row_bytes + boff, j);
  };
  Raw cur[2];
  int64_t it = i0 + warp;
  if (it < i1 && lane < units) fetch(it, lane, cur);
  if (o.barrier) grid_barrier(c);
  const float* x = gemv_x(c, o);
  const typename U::Ctx uctx = U::context(c.tables);
  for (; it < i1; it += kWarps) {
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int64_t u = lane; u < units; u += 32) {
      int64_t nu = u + 32, nit = it;
      if (nu >= units) nu = lane, nit = it + kWarps;
      Raw nxt[2];
      const bool more = nit < i1;
      if (more) fetch(nit, nu, nxt);
      const int64_t e0 = u / U::kUnits * U::kBlockElems;
      const int j = static_cast<int>(u % U::kUnits);
      float xv[U::kRuns][U::kRunLen], xsum[U::kRuns];
#pragma unroll
      for (int q = 0; q < U::kRuns; ++q) {
        const float* xp = x + e0 + U::run_start(j, q);
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < U::kRunLen; e += 4) {
          const float4 v4 = *reinterpret_cast<const float4*>(xp + e);
          xv[q][e] = v4.x, xv[q][e + 1] = v4.y, xv[q][e + 2] = v4.z, xv[q][e + 3] = v4.w;
          s += (v4.x + v4.y) + (v4.z + v4.w);
        }
        xsum[q] = s;
      }
      acc0 += U::dot(cur[0], uctx, xv, xsum);
      if (glu) acc1 += U::dot(cur[1], uctx, xv, xsum);
      if (more) cur[0] = nxt[0], cur[1] = nxt[1];
    }
    acc0 = dev::warp_sum(acc0);
    if (glu) acc1 = dev::warp_sum(acc1);
    if (lane == 0) gemv_store(o, it, acc0, acc1);
  }
}

// Float weights (f32/f16/bf16 rows): eight elements per lane and step.
template <typename W>
__device__ __forceinline__ void load8(const W* p, float (&v)[8]) {
  if constexpr (sizeof(W) == 4) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    const uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
    const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = dev::unpack2<W>(w[i]);
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  }
}

template <typename W>
__device__ __noinline__ void gemv_float(Ctx& c, const POp& o) {
  const PGemv g = o.gemv;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool glu = g.glu >= 0;
  const int64_t half = g.n / 2, units = g.k / 8;  // the host requires k % 8 == 0 and 16-byte rows
  int64_t i0, i1;
  gemv_items(g, i0, i1);
  float cur[2][8];
  int64_t it = i0 + warp;
  const auto row = [&](int64_t item, int r) {
    return reinterpret_cast<const W*>(g.w + (r ? half + item : item) * g.row_bytes);
  };
  if (it < i1 && lane < units) {
    load8(row(it, 0) + 8 * lane, cur[0]);
    if (glu) load8(row(it, 1) + 8 * lane, cur[1]);
  }
  if (o.barrier) grid_barrier(c);
  const float* x = gemv_x(c, o);
  for (; it < i1; it += kWarps) {
    float acc0 = 0.0f, acc1 = 0.0f;
    for (int64_t u = lane; u < units; u += 32) {
      int64_t nu = u + 32, nit = it;
      if (nu >= units) nu = lane, nit = it + kWarps;
      float nxt[2][8];
      const bool more = nit < i1;
      if (more) {
        load8(row(nit, 0) + 8 * nu, nxt[0]);
        if (glu) load8(row(nit, 1) + 8 * nu, nxt[1]);
      }
      const float4 xa = *reinterpret_cast<const float4*>(x + 8 * u), xb = *reinterpret_cast<const float4*>(x + 8 * u + 4);
      const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        acc0 = fmaf(cur[0][e], xv[e], acc0);
        if (glu) acc1 = fmaf(cur[1][e], xv[e], acc1);
      }
      if (more) {
#pragma unroll
        for (int e = 0; e < 8; ++e) cur[0][e] = nxt[0][e], cur[1][e] = nxt[1][e];
      }
    }
    acc0 = dev::warp_sum(acc0);
    if (glu) acc1 = dev::warp_sum(acc1);
    if (lane == 0) gemv_store(o, it, acc0, acc1);
  }
}

__device__ __noinline__ void run_gemv(Ctx& c, const POp& o) {
  switch (static_cast<DType>(o.gemv.wtype)) {
#define RLX_PG(X) \
  case DType::X: gemv_unit<dev::GemvUnit<DType::X>>(c, o); break;
    RLX_PG(Q4_0) RLX_PG(Q5_0) RLX_PG(Q8_0) RLX_PG(Q4_K) RLX_PG(Q5_K) RLX_PG(Q6_K) RLX_PG(IQ4_XS)
#undef RLX_PG
    case DType::F32: gemv_float<float>(c, o); break;
    case DType::F16: gemv_float<__half>(c, o); break;
    case DType::BF16: gemv_float<__nv_bfloat16>(c, o); break;
    default: break;  // the host never emits another type (persistent_gemv_type)
  }
}

// ---------------------------------------------------------------- local ops

// PostNorm: y = x + a·rsqrt(mean(a²) + eps)·w1 (rounded), then with w2
// h = y·rsqrt(mean(y²) + eps)·w2 — as post_rms_norm_reg_kernel computes it.
// Passes over the row re-read x and a (L1 / shared memory) and the rounded y
// from its slot instead of holding up to kPersistentMaxLocal values in registers.
template <typename T>
__device__ __noinline__ void run_post_norm(Ctx& c, const POp& o) {
  if (o.barrier) grid_barrier(c);
  const PNorm& p = o.norm;
  const int cols = p.cols;
  float q = 0.0f;
  for (int col = threadIdx.x; col < cols; col += kThreads) {
    const float a = ld_in_t<T>(c, o.in[1], col);
    q = fmaf(a, a, q);
  }
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const float rstd = rsqrtf(dev::block_sum(q, c.red) * inv_cols + p.eps);
  float q2 = 0.0f;
  for (int col = threadIdx.x; col < cols; col += kThreads) {
    const float y = ld_in_t<T>(c, o.in[0], col) + ld_in_t<T>(c, o.in[1], col) * rstd * ld_param(p.w1, col, p.wdt);
    st_local_t<T>(c, o.out[0], col, y);
    const float yr = round_t<T>(y);
    q2 = fmaf(yr, yr, q2);
  }
  if (p.w2) {
    const float rstd2 = rsqrtf(dev::block_sum(q2, c.red + 32) * inv_cols + p.eps);
    const float* y = slot(c, o.out[0].slot);  // each thread reads back the columns it wrote
    for (int col = threadIdx.x; col < cols; col += kThreads)
      st_local_t<T>(c, o.out[1], col, y[col] * rstd2 * ld_param(p.w2, col, p.wdt));
  }
  __syncthreads();
}

// RmsNorm: s = x (+ r), f32 and not rounded; y = s·rsqrt(mean(s²) + eps)·w.
template <typename T>
__device__ __noinline__ void run_rms_norm(Ctx& c, const POp& o) {
  if (o.barrier) grid_barrier(c);
  const PNorm& p = o.norm;
  const int cols = p.cols;
  const bool res = o.in[1].ptr != nullptr;
  float q = 0.0f;
  for (int col = threadIdx.x; col < cols; col += kThreads) {
    const float v = ld_in_t<T>(c, o.in[0], col) + (res ? ld_in_t<T>(c, o.in[1], col) : 0.0f);
    q = fmaf(v, v, q);
  }
  const float rstd = rsqrtf(dev::block_sum(q, c.red) / static_cast<float>(cols) + p.eps);
  for (int col = threadIdx.x; col < cols; col += kThreads) {
    const float v = ld_in_t<T>(c, o.in[0], col) + (res ? ld_in_t<T>(c, o.in[1], col) : 0.0f);
    st_local_t<T>(c, o.out[0], col, v * rstd * ld_param(p.w1, col, p.wdt));
  }
  __syncthreads();
}

template <typename T>
__device__ __noinline__ void run_binary(Ctx& c, const POp& o) {
  if (o.barrier) grid_barrier(c);
  const PBinary& b = o.bin;
  for (int64_t i = threadIdx.x; i < b.n; i += kThreads) {
    const float x = ld_in_t<T>(c, o.in[0], i), y = ld_in_t<T>(c, o.in[1], i % b.b_period);
    float v;
    switch (b.fn) {
      case PBinFn::Add: v = x + y; break;
      case PBinFn::Sub: v = x - y; break;
      case PBinFn::Mul: v = x * y; break;
      default: v = __fdiv_rn(x, y);
    }
    st_local_t<T>(c, o.out[0], i, v);
  }
  __syncthreads();
}

template <typename T>
__device__ __noinline__ void run_glu(Ctx& c, const POp& o) {
  if (o.barrier) grid_barrier(c);
  const auto kind = static_cast<GluKind>(o.glu.kind);
  for (int64_t i = threadIdx.x; i < o.glu.n; i += kThreads)
    st_local_t<T>(c, o.out[0], i, dev::glu_act(kind, ld_in_t<T>(c, o.in[0], i)) * ld_in_t<T>(c, o.in[0], o.glu.n + i));
  __syncthreads();
}

__device__ __noinline__ void run_cast(Ctx& c, const POp& o) {
  if (o.barrier) grid_barrier(c);
  for (int64_t i = threadIdx.x; i < o.bin.n; i += kThreads) st_local(c, o.out[0], i, ld_in(c, o.in[0], i));
  __syncthreads();
}

// ---------------------------------------------------------------- rope + cache writes

// One head per work item: q heads → y, k heads → the k cache row at the
// cache offset, v heads → the v cache row. As rope_qkv_kernel: the head's
// row staged as f32, the head norm over it, angles in f64 rounded once.
template <typename T>
__device__ __noinline__ void run_rope(Ctx& c, const POp& o) {
  const PRope& r = o.rope;
  if (o.barrier) grid_barrier(c);
  const int D = r.head_dim, items = r.q_heads + 2 * r.kv_heads;
  auto* xs = reinterpret_cast<float*>(c.scratch);
  float* cs = xs + kMaxHeadDim;
  float* sn = cs + kMaxHeadDim / 2;
  const int64_t start = *r.cache_pos;
  const bool cache_ok = start >= 0 && start + 1 <= r.capacity;
  if (!cache_ok && blockIdx.x == 0 && threadIdx.x == 0 && o.error_flag) atomicOr(o.error_flag, 2);
  const int64_t width = int64_t{r.kv_heads} * D;
  bool angles_done = false;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int kind = item < r.q_heads ? 0 : item < r.q_heads + r.kv_heads ? 1 : 2;
    const int h = kind == 0 ? item : kind == 1 ? item - r.q_heads : item - r.q_heads - r.kv_heads;
    if (kind > 0 && !cache_ok) continue;
    if (kind == 2) {
      const int64_t src = r.v_off + int64_t{h} * D;
      for (int d = threadIdx.x; d < D; d += kThreads)
        st_act(o.out[2].ptr, start * width + int64_t{h} * D + d, ld_in_t<T>(c, o.in[2], src + d), r.cache_dt);
      continue;
    }
    if (!angles_done) {
      const double pd = static_cast<double>(*r.position) * r.freq_scale;
      for (int i = threadIdx.x; i < r.n_rot / 2; i += kThreads) {
        double s, co;
        sincos(pd * r.inv_freq[i], &s, &co);
        cs[i] = static_cast<float>(co);
        sn[i] = static_cast<float>(s);
      }
      angles_done = true;
    }
    const PIn& in = kind == 0 ? o.in[0] : o.in[1];
    const int64_t src = (kind == 0 ? r.q_off : r.k_off) + int64_t{h} * D;
    __syncthreads();  // xs free (a previous item), angles published
    float q = 0.0f;
    for (int d = threadIdx.x; d < D; d += kThreads) {
      const float v = ld_in_t<T>(c, in, src + d);
      xs[d] = v;
      q = fmaf(v, v, q);
    }
    const void* nw = kind == 0 ? r.q_norm : r.k_norm;
    float rstd = 1.0f;
    if (nw) rstd = rsqrtf(dev::block_sum(q, c.red) / static_cast<float>(D) + (kind == 0 ? r.q_eps : r.k_eps));
    else __syncthreads();
    const PFloat ndt = kind == 0 ? r.q_norm_dt : r.k_norm_dt;
    const int half = r.n_rot / 2;
    for (int d = threadIdx.x; d < D; d += kThreads) {
      auto val = [&](int e) { return nw ? xs[e] * rstd * ld_param(nw, e, ndt) : xs[e]; };
      float out;
      if (d >= r.n_rot) {
        out = val(d);
      } else {
        int i, partner;
        bool first;
        if (r.neox) {
          first = d < half;
          i = first ? d : d - half;
          partner = first ? d + half : d - half;
        } else {
          first = (d & 1) == 0;
          i = d >> 1;
          partner = first ? d + 1 : d - 1;
        }
        const float a = val(d), b = val(partner);
        out = first ? fmaf(a, cs[i], -b * sn[i]) : fmaf(a, cs[i], b * sn[i]);
      }
      if (kind == 0) st_t<T>(o.out[0].ptr, int64_t{h} * D + d, out);
      else st_act(o.out[1].ptr, start * width + int64_t{h} * D + d, out, r.cache_dt);
    }
  }
  __syncthreads();
}

// ---------------------------------------------------------------- attention

// The visible key range [lo, hi) of the one query (at position kv_len − 1)
// and the number of chunk work items per kv head.
struct KeyRange {
  int lo, hi, chunks;
};
__device__ __forceinline__ KeyRange key_range(const PAttn& a) {
  int kv = *a.kv_len;
  kv = kv < 0 ? 0 : kv;
  int64_t lo = 0, hi = kv;
  if (a.causal && a.window > 0) lo = max(int64_t{0}, int64_t{kv} - a.window);
  KeyRange r{static_cast<int>(lo), static_cast<int>(hi), 0};
  r.chunks = hi > lo ? static_cast<int>((hi - lo + a.chunk - 1) / a.chunk) : 0;
  r.chunks = min(r.chunks, a.max_chunks);
  return r;
}

// Split-KV partials: item (kv head g, chunk s) → for the G query heads of g,
// m = max logit (log2 units), l = Σ 2^(x − m), o = Σ 2^(x − m)·v over the
// chunk's keys. The chunk's K and V rows go to shared memory by 16-byte
// cp.async; rows below the cache offset (written by earlier steps) are
// requested before the barrier, the step's own row after it. Scores by a warp
// per key, the weighted V sum by a thread per (head, dim).
struct AttnTiles {
  float* qs;           // [G][D]
  float* ps;           // [G][C] scores, then probabilities
  float* ml;           // [G][2]
  unsigned char* ks;   // [C][D] in the cache dtype
  unsigned char* vs;
};
__device__ __forceinline__ AttnTiles attn_tiles(const Ctx& c, const PAttn& a) {
  const int G = a.H / a.Hkv;
  AttnTiles t;
  t.qs = reinterpret_cast<float*>(c.scratch);
  t.ps = t.qs + G * a.D;
  t.ml = t.ps + G * a.chunk;
  const size_t f = (static_cast<size_t>(G) * a.D + static_cast<size_t>(G) * a.chunk + 2 * G) * sizeof(float);
  t.ks = c.scratch + (f + 15) / 16 * 16;
  t.vs = t.ks + static_cast<size_t>(a.chunk) * a.D * (a.kv_dt == PFloat::F32 ? 4 : 2);
  return t;
}

__device__ __forceinline__ int kv_bytes(PFloat t) { return t == PFloat::F32 ? 4 : 2; }

// cp.async of rows [k0 + j0, k0 + j1) of kv head g's K and V into the tiles.
__device__ void attn_load_rows(const POp& o, const AttnTiles& t, int g, int k0, int j0, int j1) {
  const PAttn& a = o.attn;
  const int es = kv_bytes(a.kv_dt), row_chunks = a.D * es / 16, n = (j1 - j0) * row_chunks;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const int j = j0 + i / row_chunks, ch = i % row_chunks;
    const int64_t key = k0 + j;
    const auto* kp = static_cast<const unsigned char*>(o.in[1].ptr) + (key * a.k_stride + int64_t{g} * a.D) * es + 16 * ch;
    const auto* vp = static_cast<const unsigned char*>(o.in[2].ptr) + (key * a.v_stride + int64_t{g} * a.D) * es + 16 * ch;
    const size_t at = (static_cast<size_t>(j) * a.D * es) + 16 * ch;
    dev::cp_async_16(dev::smem_u32(t.ks + at), kp, true);
    dev::cp_async_16(dev::smem_u32(t.vs + at), vp, true);
  }
  dev::cp_async_commit();
}

template <typename T>
__device__ __forceinline__ float kv_elem(const unsigned char* tile, int64_t i) {
  return dev::to_f32(reinterpret_cast<const T*>(tile)[i]);
}

template <typename T>
__device__ __noinline__ void run_attention(Ctx& c, const POp& o) {
  const PAttn& a = o.attn;
  const int D = a.D, G = a.H / a.Hkv, C = a.chunk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // kv_len and the cache offset are program inputs (the host checks): the
  // key ranges and the earlier steps' rows need nothing from the barrier.
  const KeyRange kr = key_range(a);
  const AttnTiles t = attn_tiles(c, a);
  const int stable = a.kv_stable ? *a.kv_stable : 0;
  const int items = a.Hkv * kr.chunks;
  int item = blockIdx.x;
  int pre = 0;  // rows of the first item requested before the barrier
  if (item < items) {
    const int g = item / kr.chunks, s = item % kr.chunks;
    const int k0 = kr.lo + s * C, nk = min(kr.hi, k0 + C) - k0;
    pre = max(0, min(nk, stable - k0));
    if (pre > 0) attn_load_rows(o, t, g, k0, 0, pre);
  }
  if (o.barrier) grid_barrier(c);
  for (; item < items; item += gridDim.x) {
    const int g = item / kr.chunks, s = item % kr.chunks;
    const int k0 = kr.lo + s * C, k1 = min(kr.hi, k0 + C), nk = k1 - k0;
    if (item != static_cast<int>(blockIdx.x)) {
      __syncthreads();  // the tiles are free
      pre = 0;
    }
    if (pre < nk) attn_load_rows(o, t, g, k0, pre, nk);
    for (int e = threadIdx.x; e < G * D; e += kThreads) t.qs[e] = ld_in_t<T>(c, o.in[0], int64_t{g} * G * D + e);
    dev::cp_async_wait<0>();
    __syncthreads();
    // Scores: warp w takes keys w, w + 16, ...; lane holds D/32 dims.
    const int per = D / 32;
    for (int j = warp; j < nk; j += kWarps) {
      float kv[kMaxHeadDim / 32];
#pragma unroll
      for (int i = 0; i < kMaxHeadDim / 32; ++i)
        if (i < per) kv[i] = kv_elem<T>(t.ks, static_cast<int64_t>(j) * D + lane * per + i);
      for (int h = 0; h < G; ++h) {
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kMaxHeadDim / 32; ++i)
          if (i < per) dot = fmaf(t.qs[h * D + lane * per + i], kv[i], dot);
        dot = dev::warp_sum(dot);
        if (lane == 0) {
          float x;
          if (a.softcap > 0.0f) {
            const float y = fminf(fmaxf(dot * a.scale / a.softcap, -15.0f), 15.0f);
            const float e2 = exp2f(2.0f * 1.4426950408889634f * y);
            x = a.softcap_log2 * (1.0f - 2.0f / (e2 + 1.0f));
          } else {
            x = dot * a.scale_log2;
          }
          t.ps[h * C + j] = x;
        }
      }
    }
    __syncthreads();
    for (int h = warp; h < G; h += kWarps) {
      float m = -INFINITY;
      for (int j = lane; j < nk; j += 32) m = fmaxf(m, t.ps[h * C + j]);
      m = dev::warp_max(m);
      float l = 0.0f;
      for (int j = lane; j < nk; j += 32) {
        const float p = exp2f(t.ps[h * C + j] - m);
        t.ps[h * C + j] = p;
        l += p;
      }
      l = dev::warp_sum(l);
      if (lane == 0) t.ml[2 * h] = m, t.ml[2 * h + 1] = l;
    }
    __syncthreads();
    const int64_t base = (int64_t{g} * a.max_chunks + s) * G;
    for (int e = threadIdx.x; e < G * D; e += kThreads) {
      const int h = e / D, d = e - h * D;
      float acc = 0.0f;
      for (int j = 0; j < nk; ++j) acc = fmaf(t.ps[h * C + j], kv_elem<T>(t.vs, static_cast<int64_t>(j) * D + d), acc);
      a.part_o[(base + h) * D + d] = acc;
    }
    if (threadIdx.x < G) {
      a.part_ml[(base + threadIdx.x) * 2] = t.ml[2 * threadIdx.x];
      a.part_ml[(base + threadIdx.x) * 2 + 1] = t.ml[2 * threadIdx.x + 1];
    }
  }
  dev::cp_async_wait<0>();  // a CTA without items committed nothing; one whose item ended early waits here
  __syncthreads();
}

// Every CTA merges all partials: out[h·D + d] = Σ_s o_s·2^(m_s − M) / Σ_s l_s·2^(m_s − M).
template <typename T>
__device__ __noinline__ void run_attn_merge(Ctx& c, const POp& o) {
  const PAttn& a = o.attn;
  if (o.barrier) grid_barrier(c);
  const KeyRange kr = key_range(a);
  const int D = a.D, G = a.H / a.Hkv;
  for (int e = threadIdx.x; e < a.H * D; e += kThreads) {
    const int h = e / D, d = e - h * D, g = h / G, hh = h - g * G;
    float M = -INFINITY;
    for (int s = 0; s < kr.chunks; ++s) M = fmaxf(M, a.part_ml[((int64_t{g} * a.max_chunks + s) * G + hh) * 2]);
    float L = 0.0f, acc = 0.0f;
    for (int s = 0; s < kr.chunks; ++s) {
      const int64_t at = (int64_t{g} * a.max_chunks + s) * G + hh;
      const float m = a.part_ml[at * 2];
      const float f = m == -INFINITY ? 0.0f : exp2f(m - M);
      L = fmaf(a.part_ml[at * 2 + 1], f, L);
      acc = fmaf(a.part_o[at * D + d], f, acc);
    }
    st_local_t<T>(c, o.out[0], e, L > 0.0f ? acc / L : 0.0f);
  }
  __syncthreads();
}

// ---------------------------------------------------------------- the kernel

// The last warp copies an op's table entry into the shared ring with 16-byte
// cp.async, so no warp stalls on its L2 round trip; it waits for the copy at
// the end of the op (cp_async_wait in the loop).
__device__ __forceinline__ void copy_op(POp* dst, const POp* src) {
  constexpr int kWords = sizeof(POp) / 16;
  static_assert(sizeof(POp) % 16 == 0, "POp is copied in 16-byte words");
  for (int i = threadIdx.x - (kThreads - 32); i >= 0 && i < kWords; i += 32)
    dev::cp_async_16(dev::smem_u32(reinterpret_cast<int4*>(dst) + i), reinterpret_cast<const int4*>(src) + i, true);
  dev::cp_async_commit();
}

__global__ void __launch_bounds__(kThreads, 1) persistent_kernel(PersistentLaunch l, IqTables tables) {
  extern __shared__ int4 smem_dyn[];
  __shared__ float red[64];
  // In shared memory, not the stack: the op functions take it by reference,
  // and a stack object would live in local memory, whose L1 lines every
  // barrier's acquire invalidates.
  __shared__ Ctx c;
  POp* ring = reinterpret_cast<POp*>(smem_dyn);
  if (threadIdx.x == 0) {
    c.slots = reinterpret_cast<float*>(ring + 3);
    c.slot_elems = l.slot_elems;
    c.scratch = reinterpret_cast<unsigned char*>(c.slots + static_cast<size_t>(kPersistentSlots) * l.slot_elems);
    c.red = red;
    c.sync = l.sync;
    c.error_flag = l.error_flag;
    c.epoch = 0;
    c.timed_out = false;
    c.profiling = l.profile && blockIdx.x == 0;
    c.waited = 0;
    c.tables = tables;
  }
  // The table is written by no kernel: the first two ops arrive before the wait.
  copy_op(&ring[0], &l.ops[0]);
  if (l.n_ops > 1) copy_op(&ring[1], &l.ops[1]);
  dev::cp_async_wait<0>();
  __syncthreads();
  dev::pdl_wait();
  const bool prof = l.profile && blockIdx.x == 0 && threadIdx.x == 0;
  for (int i = 0; i < l.n_ops; ++i) {
    const unsigned long long t0 = prof ? globaltimer() : 0;
    const POp& op = ring[i % 3];
    if (i + 2 < l.n_ops) copy_op(&ring[(i + 2) % 3], &l.ops[i + 2]);
    if (i + 1 == l.n_ops) dev::pdl_trigger();
    switch (op.kind) {
      case PKind::Gemv: run_gemv(c, op); break;
      case PKind::PostNorm: by_dtype(op.out[0].dtype, [&](auto t) { run_post_norm<decltype(t)>(c, op); }); break;
      case PKind::RmsNorm: by_dtype(op.out[0].dtype, [&](auto t) { run_rms_norm<decltype(t)>(c, op); }); break;
      case PKind::Binary: by_dtype(op.out[0].dtype, [&](auto t) { run_binary<decltype(t)>(c, op); }); break;
      case PKind::Cast: run_cast(c, op); break;
      case PKind::Glu: by_dtype(op.out[0].dtype, [&](auto t) { run_glu<decltype(t)>(c, op); }); break;
      case PKind::RopeQkv: by_dtype(op.in[0].dtype, [&](auto t) { run_rope<decltype(t)>(c, op); }); break;
      case PKind::Attention: by_dtype(op.in[0].dtype, [&](auto t) { run_attention<decltype(t)>(c, op); }); break;
      case PKind::AttnMerge: by_dtype(op.out[0].dtype, [&](auto t) { run_attn_merge<decltype(t)>(c, op); }); break;
    }
    dev::cp_async_wait<0>();  // the op two ahead is in the ring
    __syncthreads();          // the ring entry and scratch are reused
    if (prof) {
      atomicAdd(l.profile + i, globaltimer() - t0);
      atomicAdd(l.profile + l.n_ops + i, c.waited);
      c.waited = 0;
    }
  }
  if (prof) atomicAdd(l.profile + 2 * l.n_ops, 1ull);
  grid_finish(c);
}

}  // namespace

size_t persistent_scratch_bytes(const POp& op) {
  switch (op.kind) {
    case PKind::Gemv: return op.in[0].slot >= 0 ? 0 : static_cast<size_t>(op.gemv.k) * sizeof(float);
    case PKind::RopeQkv: return (kMaxHeadDim + kMaxHeadDim) * sizeof(float);
    case PKind::Attention: {
      const size_t G = static_cast<size_t>(op.attn.H / op.attn.Hkv);
      const size_t f = (G * op.attn.D + G * op.attn.chunk + 2 * G) * sizeof(float);
      const size_t es = op.attn.kv_dt == PFloat::F32 ? 4 : 2;
      return (f + 15) / 16 * 16 + 2 * static_cast<size_t>(op.attn.chunk) * op.attn.D * es;
    }
    default: return 0;
  }
}

size_t persistent_smem_bytes(const PersistentLaunch& l) {
  return 3 * sizeof(POp) + static_cast<size_t>(kPersistentSlots) * l.slot_elems * sizeof(float) + l.scratch_bytes;
}

const char* persistent_unsupported() {
  static thread_local char why[160];
  int device = 0;
  RLX_CUDA_CHECK(cudaGetDevice(&device));
  const DeviceProps& p = device_props(device);
  if (p.cc_major < 9) return "needs compute capability 9.0 or newer";
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, persistent_kernel);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    std::snprintf(why, sizeof why, "the kernel does not load: %s", cudaGetErrorString(e));
    return why;
  }
  if (attr.binaryVersion < 90) {
    std::snprintf(why, sizeof why, "this build has no sm_90 image of the kernel (binary version %d)", attr.binaryVersion);
    return why;
  }
  return nullptr;
}

bool persistent_gemv_takes(DType wtype, const void* w, int64_t n, int64_t k) {
  const int64_t row_bytes = dtype_bytes(wtype, k);
  const auto a = reinterpret_cast<uintptr_t>(w);
  if (wtype == DType::F32 || wtype == DType::F16 || wtype == DType::BF16)
    return k % 8 == 0 && a % 16 == 0 && row_bytes % 16 == 0;
  bool ok = false;
  dev::visit_gemv_unit(wtype, [&](auto u) {
    using U = decltype(u);
    ok = a % U::kAlign == 0 && row_bytes % U::kAlign == 0 && dev::units_stay_inside(w, n * row_bytes);
  });
  return ok;
}

void launch_persistent(const PersistentLaunch& l, cudaStream_t stream) {
  const size_t smem = persistent_smem_bytes(l);
  RLX_CUDA_CHECK(
      cudaFuncSetAttribute(persistent_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  persistent_kernel<<<l.grid, kThreads, smem, stream>>>(l, quant_detail::tables_for_current_device());
  RLX_CUDA_CHECK_LAUNCH("persistent decode kernel");
}

}  // namespace rlx::cuda
