// The epilogue of a Hopper kernel whose CTA owns 128 whole rows of
// Y [M, N = 128·NB] in two consumer warpgroups' f32 accumulators (the GEMM +
// LayerNorm kernel, kernels/gemm_ln_sm90.cu; the fused FFN, kernels/ffn_ln_sm90.cu):
//   Y = LayerNorm(acc + bias + R)·gamma + beta
// R's rows (L2-warm: the kernels prefetch them) are copied by 16-byte
// cp.async into `stage` in the staged layout (rows of N + 8 elements), so each
// thread then reads its fragments' residuals without a register per load in
// flight; each row's mean and variance come from the four threads of a quad
// that hold it (two passes over the registers, f32); each thread writes its
// normalized values over its own residual pairs; the staged tile is stored
// with 16-byte stores. R is read before a barrier and Y written after it, by
// the same CTA for the same rows, so Y may be R.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "rlx/backends/cuda/device/cp_async.cuh"
#include "rlx/backends/cuda/device/smem.cuh"
#include "rlx/backends/cuda/device/types.cuh"
#include "rlx/backends/cuda/device/wgmma.cuh"

namespace rlx::cuda::dev {

constexpr int kResidualLnThreads = 256;  // the two consumer warpgroups

// Host side: pick(std::integral_constant<int, NB>{}) for the column-block
// count NB = nb (1, 2 or 3) of a launch, so each kernel maps nb to its
// instantiations in one place.
template <typename Pick>
auto by_column_blocks(int nb, Pick pick) {
  switch (nb) {
    case 1: return pick(std::integral_constant<int, 1>{});
    case 2: return pick(std::integral_constant<int, 2>{});
    default: return pick(std::integral_constant<int, 3>{});
  }
}

// Shared memory `stage` needs (the caller reuses its operand stages).
template <int NB>
constexpr int residual_ln_stage_bytes() {
  return 128 * (128 * NB + 8) * 2;
}

// Fragment 4j + 2h + e of acc[nb]: row 64·wg + 16·warp + g + 8h, column
// 128·nb + 8j + 2·t4 + e. `ctid` is the thread's index among the 256
// consumers; `bar` a named barrier (1..15) of exactly those threads. The
// caller has made sure no wgmma still reads `stage`.
template <typename T, int NB>
__device__ __forceinline__ void residual_ln_store(float (&acc)[NB][64], unsigned char* stage, const T* R, T* Y,
                                                  int m0, int rows, const float* s_bias, const float* s_gamma,
                                                  const float* s_beta, float eps, int ctid, int bar) {
  constexpr int N = 128 * NB, kOutStride = N + 8, kChunks = N / 8;
  const int wg = ctid >> 7, warp = (ctid >> 5) & 3, lane = ctid & 31;
  const uint32_t s_tile = smem_u32(stage);
  for (int idx = ctid; idx < 128 * kChunks; idx += kResidualLnThreads) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    const bool ok = r < rows;
    cp_async_16(s_tile + static_cast<uint32_t>((r * kOutStride + c) * 2),
                R + static_cast<int64_t>(m0 + (ok ? r : 0)) * N + c, ok);
  }
  cp_async_commit();
  cp_async_wait<0>();
  named_barrier_sync(bar, kResidualLnThreads);

  uint32_t* sY = reinterpret_cast<uint32_t*>(stage);
  const int g = lane >> 2, t4 = lane & 3;
  const int row0 = wg * 64 + warp * 16 + g;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t* srow = sY + (row0 + 8 * h) * kOutStride / 2;
    float sum = 0.0f;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int c = 128 * nb + 8 * j + 2 * t4;
        const float2 res = unpack2<T>(srow[c / 2]);
        float& x0 = acc[nb][4 * j + 2 * h];
        float& x1 = acc[nb][4 * j + 2 * h + 1];
        x0 += s_bias[c] + res.x;
        x1 += s_bias[c + 1] + res.y;
        sum += x0 + x1;
      }
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float mean = sum * (1.0f / N);
    float sq = 0.0f;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float d = acc[nb][4 * j + 2 * h + e] - mean;
          sq = fmaf(d, d, sq);
        }
    sq += __shfl_xor_sync(0xffffffffu, sq, 1);
    sq += __shfl_xor_sync(0xffffffffu, sq, 2);
    const float rstd = rsqrtf(sq * (1.0f / N) + eps);
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int c = 128 * nb + 8 * j + 2 * t4;
        const float y0 = (acc[nb][4 * j + 2 * h] - mean) * rstd * s_gamma[c] + s_beta[c];
        const float y1 = (acc[nb][4 * j + 2 * h + 1] - mean) * rstd * s_gamma[c + 1] + s_beta[c + 1];
        srow[c / 2] = pack2<T>(y0, y1);  // over this thread's own residual pair
      }
  }
  named_barrier_sync(bar, kResidualLnThreads);  // Y is staged

  const T* sYt = reinterpret_cast<const T*>(stage);
  for (int idx = ctid; idx < 128 * kChunks; idx += kResidualLnThreads) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    if (r < rows)
      *reinterpret_cast<uint4*>(Y + static_cast<int64_t>(m0 + r) * N + c) =
          *reinterpret_cast<const uint4*>(sYt + r * kOutStride + c);
  }
}

}  // namespace rlx::cuda::dev
