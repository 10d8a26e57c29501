// DequantMatMul and Gather from a quantized table on the CPU. Weights stay in
// their GGUF block format; rows are decoded just before use (to the reference
// dequantizers' values, rlx/formats/quant.h), so no full f32 copy of W ever
// exists.
// - Few rows of x (decode, short prompts): on an AVX2 + FMA CPU the W rows
//   are decoded in registers once for up to 8 rows of x (quant_dot.cpp,
//   every type; 9-16 rows take two passes); otherwise each task dequantizes
//   one W row into a thread-local buffer and dots it with every x row.
// - Many rows (prefill): W is dequantized a tile of rows at a time (by
//   quant_dot's layouts where it takes the type: the reference's bits; at 64
//   rows of x and 4096 × 4096 the whole matmul took 1.2-1.5× less time for
//   k-quants and IQ4_XS, 4.3× for IQ2_XXS) and the tile goes through the f32
//   GEMM (OpenBLAS when available).
#include <algorithm>
#include <vector>

#include "rlx/backends/cpu/kernel.h"
#include "rlx/backends/cpu/kernels/gemm.h"
#include "rlx/backends/cpu/kernels/quant_dot.h"
#include "rlx/core/error.h"
#include "rlx/formats/quant.h"

namespace rlx::cpu {
namespace {

constexpr int64_t kGemvMaxRows = 16;  // up to here the per-row dot beats a GEMM on dequantized tiles
constexpr int64_t kTileRows = 256;    // W rows dequantized per GEMM tile

// Rows [n0, n1) of the decode path with several rows of x: each W row
// dequantized into `row`, then dotted with the M rows of x. Compiled per ISA
// (the dot's eight lanes fill one AVX2 register).
RLX_CPU_MULTIVERSION
void gemv_rows(DType wt, const uint8_t* w, int64_t row_bytes, const float* x, int64_t M, int64_t N, int64_t K,
               int64_t n0, int64_t n1, float* row, float* y) {
  for (int64_t n = n0; n < n1; ++n) {
    dequantize_row(wt, w + n * row_bytes, row, K);
    for (int64_t m = 0; m < M; ++m) y[m * N + n] = dot8(x + m * K, row, K);
  }
}

void dequant_matmul_kernel(KernelArgs& a) {
  const DType wt = a.in_dtype(1);
  const auto& wd = a.in_dims(1);
  const int64_t N = wd[0], K = wd[1];
  const int64_t M = K == 0 ? 0 : a.in_numel(0) / K;
  const int64_t row_bytes = dtype_bytes(wt, K);
  const float* x = a.in_f32(0);
  const auto* w = static_cast<const uint8_t*>(a.in_raw(1));
  float* y = a.out_f32();
  if (M == 0 || N == 0) return;
  if (K == 0) {
    std::fill(y, y + M * N, 0.0f);
    return;
  }

  if (M <= kGemvMaxRows && quant_dot_supported(wt)) {  // weights decoded in registers, x prepared once
    // More than 8 rows of x: in equal chunks of at most 8, each pass reading W
    // again (at 12 rows, Q4_K 4096 × 4096: 4.4-5.4 ms instead of 16.8 ms row by row).
    const int64_t chunks = (M + QuantDotX::kMaxRows - 1) / QuantDotX::kMaxRows, rows = (M + chunks - 1) / chunks;
    for (int64_t m0 = 0; m0 < M; m0 += rows) {
      const QuantDotX qx(wt, x + m0 * K, std::min(rows, M - m0), K);
      a.pool.parallel_for(N, 16, [&](int64_t b, int64_t e) {
        quant_dot_rows(wt, w + b * row_bytes, row_bytes, qx, e - b, y + m0 * N + b, N);
      });
    }
    return;
  }
  if (M <= kGemvMaxRows) {
    a.pool.parallel_for(N, 16, [&](int64_t b, int64_t e) {
      std::vector<float> row(static_cast<size_t>(K));
      gemv_rows(wt, w, row_bytes, x, M, N, K, b, e, row.data(), y);
    });
    return;
  }

  std::vector<float> tile(static_cast<size_t>(std::min(N, kTileRows) * K));
  std::vector<float> part(static_cast<size_t>(M * std::min(N, kTileRows)));
  for (int64_t n0 = 0; n0 < N; n0 += kTileRows) {
    const int64_t nt = std::min(kTileRows, N - n0);
    a.pool.parallel_for(nt, 4, [&](int64_t b, int64_t e) {
      dequantize_rows(wt, w + (n0 + b) * row_bytes, row_bytes, e - b, K, tile.data() + b * K);
    });
    GemmProblem p;
    p.M = M;
    p.N = nt;
    p.K = K;
    p.trans_b = true;
    p.a = x;
    p.b = tile.data();
    p.c = nt == N ? y : part.data();
    gemm_f32(a.pool, p);
    if (nt != N)
      for (int64_t m = 0; m < M; ++m) std::copy(part.data() + m * nt, part.data() + (m + 1) * nt, y + m * N + n0);
  }
}

template <typename I>
void gather_quant_rows(KernelArgs& a) {
  const DType tt = a.in_dtype(0);
  const auto& td = a.in_dims(0);
  const int64_t vocab = td[0];
  int64_t row = 1;
  for (size_t i = 1; i < td.size(); ++i) row *= td[i];
  const int64_t row_bytes = dtype_bytes(tt, row);
  const int64_t n = a.in_numel(1);
  const I* idx = a.in<I>(1);
  check_row_indices(a, idx, n, vocab);
  const auto* t = static_cast<const uint8_t*>(a.in_raw(0));
  float* y = a.out<float>();
  a.pool.parallel_for(n, 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      dequantize_rows(tt, t + static_cast<int64_t>(idx[i]) * row_bytes, row_bytes, 1, row, y + i * row);
  });
}

void gather_quant_kernel(KernelArgs& a) {
  if (a.in_dtype(1) == DType::I32) gather_quant_rows<int32_t>(a);
  else gather_quant_rows<int64_t>(a);
}

}  // namespace

void register_quant_kernels() {
  const DType floats[] = {DType::F32, DType::F16, DType::BF16};
  for (int i = 0; i < static_cast<int>(DType::Count_); ++i) {
    const auto wt = static_cast<DType>(i);
    if (!has_cpu_dequant(wt)) continue;
    const bool packed = is_quant(wt) || wt == DType::F8E4M3 || wt == DType::F8E5M2;
    if (!packed && !is_float(wt)) continue;
    const std::string name(dtype_name(wt));
    for (DType x : floats)
      register_cpu_kernel(OpKind::DequantMatMul, {x, wt, x}, dequant_matmul_kernel,
                          str("cpu dequant_matmul [", name, "]"));
    if (is_quant(wt)) {
      register_cpu_kernel(OpKind::Gather, {wt, DType::I32, DType::F32}, gather_quant_kernel,
                          str("cpu gather [", name, " rows → f32]"));
      register_cpu_kernel(OpKind::Gather, {wt, DType::I64, DType::F32}, gather_quant_kernel,
                          str("cpu gather [", name, " rows → f32]"));
    }
  }
}

}  // namespace rlx::cpu
