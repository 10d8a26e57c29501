// The fused quantized GEMV on int8 activations (gemv_q8.h).
//
// Why: Nsight Compute put gemv.cu's unit kernel at 9.3 instructions per
// weight (Q4_0, 4096², m = 1): a float multiply-add, a byte permute and a
// subtract per weight, plus the activations' shared-memory loads. It was
// bound by instructions at 12% of DRAM bandwidth. With the activations as
// int8, four weights cost one __dp4a per level, and the 16 bytes of
// activations a load brings feed 16 weights instead of 4.
//
// Why two levels (x̃ = dx·(250·a + b), dev::kQ8Ratio): one int8 level per 32
// elements (llama.cpp's q8_1) keeps 8 bits of the block's largest value.
// Measured on the H200 with one level, the tiny random-weight models' CUDA
// logits moved 2% of the largest logit away from the CPU's (f32
// activations; the tests allow 1%), and greedy Gemma 3 270M left the CPU's
// tokens after 11 and 14 of 32 on two of three prompts. The second level
// keeps about 15 bits for a second __dp4a per four weights.
//
// Layout: as gemv.cu's unit kernel (gemv_common.cuh: row groups, GLU pairs,
// the reduction). Each CTA first fetches its first weight units (before
// griddepcontrol.wait: no kernel writes weights), then quantizes all of x
// into shared memory (planes xa and xb int8 [m, k], then dx f32 [m, k / 32])
// and walks its rows' units: per unit and x row it loads the runs' packed
// int8 words and scales, and per weight row calls the unit's dot_q8. Every
// CTA quantizes x itself: x is a few KB that every CTA reads anyway, and a
// separate quantize kernel would add a launch to each decode GEMV. What it
// measured, and which types it serves: docs/performance.md (tenth session)
// and quant_gemv_q8_applies below.
#include "rlx/backends/cuda/kernels/gemv_q8.h"

#include <string>
#include <type_traits>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device/pdl.cuh"
#include "rlx/backends/cuda/device/quant_blocks.cuh"
#include "rlx/backends/cuda/kernels/gemv_common.cuh"
#include "rlx/backends/cuda/kernels/quant.h"
#include "rlx/core/env.h"

namespace rlx::cuda {
namespace {

using namespace quant_detail;
using dev::IqTables;

constexpr size_t kQ8SmemMax = 40 * 1024;  // + the static reduction scratch: within the 48 KB of a plain launch
// Two int8 planes and a float scale per 32 elements.
size_t q8_smem_bytes(int64_t m, int64_t k) {
  return static_cast<size_t>(2 * m * k) + static_cast<size_t>(m * k / 32) * sizeof(float);
}

// kAhead: weight units fetched ahead of the one in use (1 or 2). With 2, a
// thread with at most two units per row has all its weight loads issued
// before griddepcontrol.wait, so none of their DRAM latency follows the
// quantization of x (decode's short rows: K = 640 … 2048).
template <class U, int M, int R, int kAhead>
__global__ void __launch_bounds__(kGemvMaxThreads)
    gemv_q8_kernel(const uint8_t* __restrict__ w, const void* __restrict__ x, void* __restrict__ y, int m, int64_t n,
                   int64_t k, int64_t row_bytes, int tpr, int rpg, bool x_vec, FloatKind io, IqTables t, int glu) {
  static_assert(R >= 2, "GLU pairs two rows per group");
  extern __shared__ int4 q8_smem[];
  auto* xa = reinterpret_cast<int8_t*>(q8_smem);
  int8_t* xb = xa + m * k;
  float* dx = reinterpret_cast<float*>(xb + m * k);  // m·k is a multiple of 32
  const UnitRows<R> rows(w, n, row_bytes, tpr, rpg, glu);
  const int gt = rows.gt;
  const int64_t units = k / U::kBlockElems * U::kUnits;
  const typename U::Ctx ctx = U::context(t);

  float acc[R][M];
  zero(acc);

  using Raw = typename U::Raw;
  static_assert(kAhead == 1 || kAhead == 2, "one or two units ahead");
  Raw cur[R], ahead[R];
  if (gt < units) rows.template fetch<U>(gt, cur);
  if (kAhead == 2 && gt + tpr < units) rows.template fetch<U>(gt + tpr, ahead);
  dev::pdl_begin();
  quantize_x(x, m, k, io, x_vec, xa, xb, dx);
  __syncthreads();

#pragma unroll 1
  for (int64_t u = gt; u < units; u += tpr) {
    Raw next[R];
    if (u + kAhead * tpr < units) rows.template fetch<U>(u + kAhead * tpr, next);
    const int64_t e0 = u / U::kUnits * U::kBlockElems;
    const int j = static_cast<int>(u % U::kUnits);
#pragma unroll
    for (int i = 0; i < M; ++i) {
      if (i >= m) break;
      const Q8Runs<U> xr(xa, xb, dx, i * k + e0, j);
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (rows.live[r]) acc[r][i] += xr.dot(cur[r], ctx);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if constexpr (kAhead == 2) cur[r] = ahead[r], ahead[r] = next[r];
      else cur[r] = next[r];
    }
  }
  unit_gemv_store<M, R>(acc, rows, y, m, n, tpr, rpg, glu, io);
}

}  // namespace

// RLX_CUDA_GEMV_Q8=auto takes the types whose unit has kQ8Default: those
// where it measured faster than f32 activations (H200, CUDA graphs, 4096²
// and 1024 × 3072, m = 1): Q8_0 8.5 against 9.8 µs, Q4_K 9.0 / 10.9,
// Q5_K 9.8 / 12.1, IQ4_XS 8.7 / 14.7 at 4096². Q4_0 (12.5 / 13.1 µs, and
// slower at 1024 × 3072), Q5_0 (8.9 / 9.6 µs but 4.34 / 4.22 at 1024 ×
// 3072, and no faster in Gemma's decode) and Q6_K (12.1 / 11.7) did not
// gain: their units are 16 and 32 weights behind 2-byte-aligned loads, whose
// unpacking and addressing, not the dot products, dominate.
namespace {
std::string q8_mode() {
  std::string mode = env_string("RLX_CUDA_GEMV_Q8");
  RLX_CHECK_AS(InvalidArgument, mode == "auto" || mode == "1" || mode == "0", "RLX_CUDA_GEMV_Q8='", mode,
               "' must be auto, 1 or 0");
  return mode;
}
}  // namespace

bool quant_gemv_q8_allowed() { return q8_mode() != "0"; }

bool quant_gemv_q8_applies(DType w_type, int64_t m, int64_t k) {
  const std::string mode = q8_mode();
  if (mode == "0" || q8_smem_bytes(m, k) > kQ8SmemMax) return false;
  bool on = false;
  dev::visit_gemv_unit(w_type, [&](auto u) { on = mode == "1" || decltype(u)::kQ8Default; });
  return on;
}

void launch_quant_gemv_q8(DType w_type, const void* w, DType x_dtype, const void* x, void* y, int64_t m, int64_t n,
                          int64_t k, cudaStream_t stream, const GluKind* glu) {
  const size_t smem = q8_smem_bytes(m, k);
  RLX_CHECK(smem <= kQ8SmemMax, "quantized gemv (int8 x): m·k = ", m * k, " activations exceed its shared memory");
  const FloatKind io = float_kind(x_dtype, "quantized gemv");
  const IqTables t = tables_for_current_device();
  const int64_t row_bytes = dtype_bytes(w_type, k);
  const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const bool known = dev::visit_gemv_unit(w_type, [&](auto u) {
    using U = decltype(u);
    auto go = [&](auto rows_tag) {
      constexpr int M = decltype(rows_tag)::value;
      // Rows per group as in gemv.cu: every row's unit is held in registers twice.
      constexpr int R = M == 1 && sizeof(typename U::Raw) <= 20 ? 4 : 2;
      const int64_t units = k / U::kBlockElems * U::kUnits;
      const UnitGemvPlan plan =
          plan_unit_gemv(units, n, glu != nullptr, R, unit_gemv_warps_per_sm(m, n * row_bytes));
      // Two units ahead where that puts every weight load of a thread before
      // griddepcontrol.wait and W is decode-sized: Gemma 3 270M decoded at
      // 1,540 / 1,544 tok/s against 1,532 / 1,515 with one ahead (same call),
      // but 4096² GEMVs (9.4 MB of Q4_K) took 5-10% longer, their extra
      // registers costing occupancy where the bandwidth, not the wait, matters.
      const bool two_ahead = units <= 2 * plan.tpr && n * row_bytes <= (int64_t{4} << 20);
      auto kernel = two_ahead ? gemv_q8_kernel<U, M, R, 2> : gemv_q8_kernel<U, M, R, 1>;
      kernel<<<plan.blocks, kGemvMaxThreads, smem, stream>>>(static_cast<const uint8_t*>(w), x, y, static_cast<int>(m),
                                                             n, k, row_bytes, plan.tpr, plan.rpg, x_vec, io, t,
                                                             glu ? static_cast<int>(*glu) : -1);
    };
    if (m == 1) go(std::integral_constant<int, 1>{});
    else go(std::integral_constant<int, kMaxGemvRows>{});
  });
  RLX_CHECK_AS(Unsupported, known, "quantized gemv (int8 x): no unit decoder for ", dtype_name(w_type));
}

}  // namespace rlx::cuda
