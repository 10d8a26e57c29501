// The fused quantized GEMV for small m (launch_quant_gemv in quant.h):
// groups of threads share a few weight rows and stride over their units;
// activations come straight from L1/L2 (see gemv_kernel and gemv_unit_kernel).
#include <algorithm>
#include <type_traits>

#include "rlx/backends/cuda/kernels/quant.h"

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/quant_blocks.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/kernels/gemv_common.cuh"
#include "rlx/backends/cuda/kernels/gemv_q8.h"
#include "rlx/core/env.h"
#include "rlx/core/error.h"

namespace rlx::cuda {
namespace {

using namespace quant_detail;
using dev::IqTables;

// ---- GEMV ------------------------------------------------------------------------

constexpr int kGemvMaxRowsPerGroup = 4;

// y[r, row] = Σ_k x[r, k] · W[row, k] for r < m ≤ M.
//
// Layout: a block is `groups` groups of `tpr` threads (tpr a multiple of 32);
// group g owns rows [row0, row0 + rpg), taken one after another, and its
// threads stride over a row's kChunk-element units, so one weight row is read
// by up to 256 threads at once (short rows: K = 640 has 20 units of Q8_0 →
// one warp per group, eight groups per block). Each thread decodes its units
// into registers and accumulates Σ w·x in f32 for every x row; warps reduce by
// shuffles and a group's warps through shared memory. Weights are read once,
// straight from global memory; activations come through L1/L2. The row loop
// is deliberately not unrolled: one copy of each decoder per kernel keeps
// the 28 types × 4 row counts of this file compiling in reasonable time.
template <class Q, int M>
__global__ void __launch_bounds__(kGemvMaxThreads)
    gemv_kernel(const uint8_t* __restrict__ w, const void* __restrict__ x, void* __restrict__ y, int m, int64_t n,
                int64_t k, int64_t row_bytes, int tpr, int rpg, bool x_vec, FloatKind io, IqTables t) {
  dev::pdl_begin();
  constexpr int kPer = Q::kBlockElems / Q::kChunk;
  __shared__ float red[kGemvMaxThreads / 32][M];
  const int group = threadIdx.x / tpr, gt = threadIdx.x % tpr;
  const int groups = blockDim.x / tpr;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * groups + group) * rpg;
  const int64_t units = k / Q::kChunk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wpg = tpr / 32;

#pragma unroll 1
  for (int q = 0; q < rpg; ++q) {
    const int64_t row = row0 + q;
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.0f;
    if (row < n) {
      const uint8_t* wr = w + row * row_bytes;
      for (int64_t u = gt; u < units; u += tpr) {
        float v[Q::kChunk];
        Q::decode(wr + (u / kPer) * Q::kBlockBytes, static_cast<int>(u % kPer), t, v);
        const int64_t e = u * Q::kChunk;
#pragma unroll
        for (int r = 0; r < M; ++r) {
          if (r >= m) break;
          float xm[Q::kChunk];
          load_x(x, r * k + e, io, x_vec, xm);
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < Q::kChunk; ++i) s = fmaf(v[i], xm[i], s);
          acc[r] += s;
        }
      }
    }
#pragma unroll
    for (int r = 0; r < M; ++r) {
      const float s = dev::warp_sum(acc[r]);
      if (lane == 0) red[warp][r] = s;
    }
    __syncthreads();
    if (gt < M && gt < m && row < n) {
      float s = 0.0f;
      for (int j = 0; j < wpg; ++j) s += red[group * wpg + j][gt];
      store_from_f32(y, gt * n + row, s, io);
    }
    __syncthreads();  // red is reused by the next row
  }
}

// The GEMV of the types with a dev::GemvUnit (the common GGUF types).
//
// Layout: a block of 256 threads is 256 / tpr groups of tpr threads (tpr a
// power of two, 8..256); group g owns rows [row0, row0 + rpg), rpg ≤ R, and
// its threads stride over the row's units, so the weights are read by the
// whole group at once and each thread works on all rpg rows together: it
// issues the loads of every row before using any (rpg loads in flight, more
// with the unrolled loop), and loads each run of activations once for rpg
// rows. Sums are reduced once per group of rows: by shuffles within a warp
// (tpr ≤ 32: short rows, e.g. the 262144 × 640 output head, take 8 or 16
// threads per row and 128 rows per block), and through shared memory with one
// __syncthreads for tpr > 32.
//
// Activations: with x_smem (m·K floats fit in the launch's dynamic shared
// memory), the block first copies x into shared memory as f32, so the loop's
// activation reads cost a shared-memory access instead of an L2 round trip
// per unit; decode GEMVs are short enough that those round trips, not the
// weight bytes, set their time.
//
// GLU (glu ≥ 0, a GluKind): W stacks [gate; up] (n = 2F rows) and y is
// act(x·gateᵀ) · (x·upᵀ), [m, F]: each group owns one output column j and
// works on rows j and F + j together, so the gated product leaves the
// kernel directly (no [m, 2F] intermediate, no GLU launch).
template <class U, int M, int R>
__global__ void __launch_bounds__(kGemvMaxThreads)
    gemv_unit_kernel(const uint8_t* __restrict__ w, const void* __restrict__ x, void* __restrict__ y, int m,
                     int64_t n, int64_t k, int64_t row_bytes, int tpr, int rpg, bool x_vec, FloatKind io,
                     IqTables t, bool x_smem, int glu) {
  static_assert(R >= 2, "GLU pairs two rows per group");
  extern __shared__ float4 xs_dyn[];
  float* xs_f = reinterpret_cast<float*>(xs_dyn);
  constexpr int kRuns = U::kRuns, kLen = U::kRunLen;
  const UnitRows<R> rows(w, n, row_bytes, tpr, rpg, glu);
  const int gt = rows.gt;
  const int64_t units = k / U::kBlockElems * U::kUnits;
  const typename U::Ctx ctx = U::context(t);
  const bool(&live)[R] = rows.live;
  float acc[R][M];
  zero(acc);

  // Software pipeline: unit u + tpr is loaded while unit u is used. The first
  // unit's weights are fetched before pdl_wait(): no kernel writes weights, so
  // with programmatic launch their DRAM latency overlaps the kernel before.
  using Raw = typename U::Raw;
  Raw cur[R];
  if (gt < units) rows.template fetch<U>(gt, cur);
  dev::pdl_begin();
  if (x_smem) {  // x_vec holds here: 16-byte aligned, K a multiple of 32
    const int64_t n8 = m * k / 8;
    for (int64_t i = threadIdx.x; i < n8; i += blockDim.x) {
      float v[8];
      load_x(x, 8 * i, io, true, v);
      xs_dyn[2 * i] = make_float4(v[0], v[1], v[2], v[3]);
      xs_dyn[2 * i + 1] = make_float4(v[4], v[5], v[6], v[7]);
    }
    __syncthreads();
  }

#pragma unroll 1
  for (int64_t u = gt; u < units; u += tpr) {
    Raw next[R];
    if (u + tpr < units) rows.template fetch<U>(u + tpr, next);
    const int64_t b = u / U::kUnits;
    const int j = static_cast<int>(u % U::kUnits);
    const int64_t e0 = b * U::kBlockElems;
#pragma unroll
    for (int i = 0; i < M; ++i) {
      if (i >= m) break;
      float xv[kRuns][kLen], xs[kRuns];
#pragma unroll
      for (int q = 0; q < kRuns; ++q) {
        const int64_t at = i * k + e0 + U::run_start(j, q);
        if (x_smem) {
#pragma unroll
          for (int e = 0; e < kLen; e += 4) {
            const float4 v4 = *reinterpret_cast<const float4*>(xs_f + at + e);
            xv[q][e] = v4.x, xv[q][e + 1] = v4.y, xv[q][e + 2] = v4.z, xv[q][e + 3] = v4.w;
          }
        } else {
          load_x(x, at, io, x_vec, xv[q]);
        }
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < kLen; ++e) s += xv[q][e];
        xs[q] = s;  // unused (and not computed) by units without "− min" terms
      }
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (live[r]) acc[r][i] += U::dot(cur[r], ctx, xv, xs);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) cur[r] = next[r];
  }

  unit_gemv_store<M, R>(acc, rows, y, m, n, tpr, rpg, glu, io);
}

// Whether the unit kernel (wide loads) takes these weights: blocks aligned
// for its loads, and no load past the end of W (dev::units_stay_inside).
bool unit_kernel_takes(DType w_type, const void* w, int64_t n, int64_t k) {
  bool ok = false;
  dev::visit_gemv_unit(w_type, [&](auto u) {
    using U = decltype(u);
    const int64_t row_bytes = dtype_bytes(w_type, k);
    ok = reinterpret_cast<uintptr_t>(w) % U::kAlign == 0 && row_bytes % U::kAlign == 0 &&
         dev::units_stay_inside(w, n * row_bytes);
  });
  return ok;
}

}  // namespace

bool quant_gemv_fuses_glu(DType w_type, const void* w, int64_t n, int64_t k) {
  return unit_kernel_takes(w_type, w, n, k);
}

bool quant_gemv_uses_q8(DType w_type, const void* w, int64_t m, int64_t n, int64_t k) {
  return quant_gemv_stream_applies(w_type, w, m, n, k) ||
         (unit_kernel_takes(w_type, w, n, k) && quant_gemv_q8_applies(w_type, m, k));
}

void launch_quant_gemv(DType w_type, const void* w, DType x_dtype, const void* x, void* y, int64_t m, int64_t n,
                       int64_t k, cudaStream_t stream, const GluKind* glu) {
  RLX_CHECK(m >= 1 && m <= kMaxGemvRows, "quantized gemv: m = ", m, " rows, the fused kernel takes 1..",
            kMaxGemvRows);
  const int64_t block = dtype_info(w_type).block_elems;
  RLX_CHECK(n >= 0 && k > 0 && k % block == 0, "quantized gemv: K = ", k, " is not a positive multiple of ",
            dtype_name(w_type), "'s block of ", block);
  RLX_CHECK(n < (int64_t{1} << 31), "quantized gemv: N = ", n, " rows is too many");
  if (n == 0) return;
  if (!glu && quant_gemv_stream_applies(w_type, w, m, n, k)) return launch_quant_gemv_stream(w_type, w, x_dtype, x, y, n, k, stream);
  const FloatKind io = float_kind(x_dtype, "quantized gemv");
  const IqTables t = tables_for_current_device();
  const int64_t row_bytes = dtype_bytes(w_type, k);
  const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  RLX_CHECK(!glu || (n % 2 == 0 && quant_gemv_fuses_glu(w_type, w, n, k)), "quantized gemv: no GLU-fused kernel for ",
            dtype_name(w_type), " with ", n, " rows (quant_gemv_fuses_glu)");
  auto launch = [&](auto q, auto rows_tag) {
    using Q = decltype(q);
    constexpr int M = decltype(rows_tag)::value;
    // Threads per row group: enough to cover a row's units in one pass, at
    // most 256; rows per group: as many as keep ≥ 32 warps per SM busy.
    const int64_t units = k / Q::kChunk;
    const int tpr = static_cast<int>(std::min<int64_t>(kGemvMaxThreads, (units + 31) / 32 * 32));
    const int64_t want_warps = int64_t{32} * sm_count();
    int rpg = kGemvMaxRowsPerGroup;
    while (rpg > 1 && (n + rpg - 1) / rpg * (tpr / 32) < want_warps) rpg /= 2;
    const int groups = std::max(1, kGemvMaxThreads / tpr);
    const int64_t rows_per_block = int64_t{groups} * rpg;
    const auto blocks = static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block);
    gemv_kernel<Q, M><<<blocks, groups * tpr, 0, stream>>>(static_cast<const uint8_t*>(w), x, y, static_cast<int>(m),
                                                          n, k, row_bytes, tpr, rpg, x_vec, io, t);
  };
  // The common types take the unit kernel when their blocks are aligned for
  // its wide loads and W ends on an 8-byte boundary (unit_kernel_takes;
  // weights from a GGUF file on the device always qualify).
  auto launch_unit = [&](auto u, auto rows_tag) {
    using U = decltype(u);
    constexpr int M = decltype(rows_tag)::value;
    // Rows per group: more share each x load, but every row's unit is held
    // in registers (twice, with the unrolled loop); large units get 2.
    constexpr int R = M == 1 && sizeof(typename U::Raw) <= 20 ? 4 : 2;
    const UnitGemvPlan plan = plan_unit_gemv(k / U::kBlockElems * U::kUnits, n, glu != nullptr, R,
                                             unit_gemv_warps_per_sm(m, n * row_bytes));
    // x in shared memory when it fits (see the kernel): 40 KB of dynamic
    // memory leaves the static reduction scratch within the 48 KB a launch
    // gets without opting in.
    static const bool x_smem_on = env_bool("RLX_CUDA_GEMV_X_SMEM");
    const size_t x_bytes = static_cast<size_t>(m * k) * sizeof(float);
    const bool x_smem = x_smem_on && x_vec && x_bytes <= 40 * 1024;
    gemv_unit_kernel<U, M, R><<<plan.blocks, kGemvMaxThreads, x_smem ? x_bytes : 0, stream>>>(
        static_cast<const uint8_t*>(w), x, y, static_cast<int>(m), n, k, row_bytes, plan.tpr, plan.rpg, x_vec, io, t,
        x_smem, glu ? static_cast<int>(*glu) : -1);
  };
  bool done = false;
  dev::visit_gemv_unit(w_type, [&](auto u) {
    using U = decltype(u);
    if (!unit_kernel_takes(w_type, w, n, k)) return;
    done = true;
    if (quant_gemv_q8_applies(w_type, m, k)) return launch_quant_gemv_q8(w_type, w, x_dtype, x, y, m, n, k, stream, glu);
    if (m == 1) launch_unit(u, std::integral_constant<int, 1>{});
    else launch_unit(u, std::integral_constant<int, kMaxGemvRows>{});
  });
  if (!done) {
    visit_or_throw(w_type, "quantized gemv", [&](auto q) {
      // Two row counts only (1, and up to 8 with the rows past m skipped):
      // 28 types × 2 row counts already make this file the slowest to compile.
      if (m == 1) launch(q, std::integral_constant<int, 1>{});
      else launch(q, std::integral_constant<int, kMaxGemvRows>{});
    });
  }
  RLX_CUDA_CHECK_LAUNCH("DequantMatMul (gemv)");
}

}  // namespace rlx::cuda
