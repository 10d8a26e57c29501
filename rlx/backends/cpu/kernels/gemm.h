// Private to the CPU backend: the f32 GEMM behind MatMul and
// FusedMatMulBiasAct, and small vector helpers shared by the kernels in this
// folder (norm, attention). Not a public header.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "rlx/backends/cpu/thread_pool.h"
#include "rlx/ir/ops.h"

// Hot loops are compiled for AVX-512, AVX2 and the baseline ISA and picked at
// load time (GCC/Clang function multiversioning). Clones may differ in the
// last bits (FMA contraction where the ISA has it); each is deterministic.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(RLX_NO_MULTIVERSION)
#define RLX_CPU_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define RLX_CPU_MULTIVERSION
#endif

namespace rlx::cpu {

// C_i = act(A_i · B_i + bias) for i in [0, batch), f32, row-major.
// A_i(m, k) = trans_a ? a[a_off[i] + k·M + m] : a[a_off[i] + m·K + k]
// B_i(k, n) = trans_b ? b[b_off[i] + n·K + k] : b[b_off[i] + k·N + n]
// C_i is c + i·M·N, contiguous [M, N]. Null offsets mean 0 for every batch.
struct GemmProblem {
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  int64_t batch = 1;
  const float* a = nullptr;
  const int64_t* a_off = nullptr;
  const float* b = nullptr;
  const int64_t* b_off = nullptr;
  float* c = nullptr;
  const float* bias = nullptr;  // [N] or null
  Activation act = Activation::None;
  bool rounds_to_bf16 = false;  // c is rounded to bf16 after: the activation may take its bf16 form
  // B as gemm_pack_b packs it for this K, N and trans_b, or null: packed by the call. Read only where
  // gemm_packs_b(p) holds; b may then be null.
  const float* b_packed = nullptr;
};

enum class GemmPath { Auto, Blas, Builtin };

// Runs the problem and returns the path taken. Auto uses OpenBLAS when rlx
// was built with it, RLX_CPU_BLAS is on, the machine lacks AVX-512 (where it
// has it the built-in kernel is as fast) and M·N·K ≥ 64³ (≥ 256³ for each
// GEMM of a batch); asking for Blas
// without BLAS built in falls back to Builtin. Sums over K in f32, in order
// (fused multiply-adds on the AVX-512 path).
GemmPath gemm_f32(ThreadPool& pool, const GemmProblem& p, GemmPath want = GemmPath::Auto);
bool blas_built_in();
// Whether gemm_f32(pool, p) (Auto) packs all of B before it runs (one built-in GEMM of M ≥ 4 rows),
// so that a B packed once by gemm_pack_b can stand in for it.
bool gemm_packs_b(const GemmProblem& p);
// p.b packed as that path packs it (for p.b_packed: weights packed once and kept).
std::vector<float> gemm_pack_b(ThreadPool& pool, const GemmProblem& p);

// Packing buffers of the built-in kernel; reuse one per thread across calls.
struct GemmScratch {
  GemmScratch();
  std::vector<float> a, b;
};

// Single-threaded built-in GEMM on strided views, for use inside a parallel
// task: C[M, N] (row stride ldc) = A·B with A(m, k) = a[m·a_rs + k·a_cs] and
// B(k, n) = b[k·b_rs + n·b_cs]. Same kernel and summation order as gemm_f32.
void gemm_serial(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs, int64_t a_cs, const float* b,
                 int64_t b_rs, int64_t b_cs, float* c, int64_t ldc, GemmScratch& scratch);

// C[M, N] (bf16, contiguous) = act(A · B + bias) rounded once, A bf16 [M, K]
// with row stride lda, B bf16 [K, N], or [N, K] when trans_b; bf16 as raw bits.
struct GemmBf16Problem {
  int64_t M = 0, N = 0, K = 0, lda = 0;
  bool trans_b = false;
  const uint16_t* a = nullptr;
  const uint16_t* b = nullptr;
  uint16_t* c = nullptr;
  const float* bias = nullptr;  // [N] or null
  Activation act = Activation::None;
  const uint16_t* b_packed = nullptr;  // B as bf16_pack_b packs it, or null: packed by the call
};

// Whether gemm_bf16_amx can run: RLX_CPU_AMX is on, the CPU has AMX-TILE and
// AMX-BF16, and Linux granted this process the tile state.
bool amx_bf16_available();
// On AMX tiles (gemm_bf16.cpp), f32 accumulation; throws if not available.
void gemm_bf16_amx(ThreadPool& pool, const GemmBf16Problem& p);
// Whether gemm_bf16_avx512 can run: RLX_CPU_AVX512_BF16 is not 0 and the CPU
// has AVX512F and AVX512_BF16.
bool avx512_bf16_available();
// Whether this CPU's VDPBF16PS runs at its f32 FMA's rate (AMD), so that it
// outruns the staged f32 kernel at every row count.
bool avx512_bf16_full_rate();
// The bf16 kernel for a matmul of M rows under RLX_CPU_AMX and
// RLX_CPU_AVX512_BF16 (None: stage to f32).
enum class Bf16Gemm { None, Amx, Avx512 };
Bf16Gemm bf16_gemm_for(int64_t M);
// On VDPBF16PS (gemm_bf16.cpp), f32 accumulation; throws if not available.
void gemm_bf16_avx512(ThreadPool& pool, const GemmBf16Problem& p);
// p.b in the layout both kernels read, for p.b_packed (weights packed once and kept).
std::vector<uint16_t> bf16_pack_b(ThreadPool& pool, const GemmBf16Problem& p);

// bf16 (raw bits) ↔ f32, n elements; round to nearest even, NaN kept quiet
// (the bits of bf16_to_f32 / f32_to_bf16 in rlx/core/half.h), vectorized.
void bf16_to_f32_n(const uint16_t* s, float* dst, int64_t n);
void f32_to_bf16_n(const float* s, uint16_t* dst, int64_t n);
// f32 → f16 bits, n elements, as rlx::f32_to_f16 rounds (F16C where present).
void f32_to_f16_n(const float* s, uint16_t* dst, int64_t n);

// c[j] = act(c[j] + bias[j]) for j in [0, n); bias may be null.
void bias_act_row(float* c, const float* bias, int64_t n, Activation act);
// The same for values about to be rounded to bf16: GELU-erf by the cheaper
// gelu_erf_for_bf16 (vmath.h).
void bias_act_row_for_bf16(float* c, const float* bias, int64_t n, Activation act);

// Dot product with eight interleaved partial sums (vectorizes without
// -ffast-math); the summation order is fixed, so results are deterministic.
inline float dot8(const float* __restrict a, const float* __restrict b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

// y[i] += alpha · x[i]
inline void axpy(float* __restrict y, float alpha, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace rlx::cpu
