// Quantized-weight launchers (kernels in quant.cu): dequantization of every
// GGUF block type (and f32/f16/bf16 storage), the fused quantized GEMV for
// small m, and the gather of rows from a quantized table. Asynchronous on
// `stream`, no allocation (after stage_quant_tables); launch failures throw
// rlx::DeviceError naming the op; unsupported dtypes throw rlx::Unsupported.
//
// Weights are GGUF rows: W [N, K] with K fastest, each row K / block_elems
// whole blocks (row_bytes = dtype_bytes(type, K)). Results equal the CPU
// reference (rlx/formats/quant.h) bit for bit for dequantization and gather;
// the GEMV accumulates in f32 (order differs from a float64 dot product).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "rlx/backends/cuda/kernels/glu.h"
#include "rlx/core/dtype.h"

namespace rlx::cuda {

// Whether CUDA decodes `type`: every GGUF quant type with a CPU dequantizer
// (Q4_0 … NVFP4) plus f32, f16 and bf16 storage.
bool has_cuda_dequant_kernel(DType type);

// Copies the IQ grid / sign / value tables to the current device, once per
// device (host-synchronous: call it outside CUDA-graph capture, e.g. when a
// program is lowered). The launchers call it too; after the first call per
// device it does no CUDA work.
void stage_quant_tables();

// out[0..n) = dequantize(src) converted to `out_dtype` (f32, f16 or bf16),
// n a multiple of the block. `out` should be 16-byte aligned for full speed.
void launch_dequantize(DType type, const void* src, DType out_dtype, void* out, int64_t n, cudaStream_t stream);

inline constexpr int kMaxGemvRows = 8;

// y [m, n] = x [m, k] · W [n, k]ᵀ for 1 ≤ m ≤ kMaxGemvRows; x and y in
// x_dtype (f32, f16 or bf16), accumulation in f32 (int32 for the int8 path,
// quant_gemv_uses_q8). Reads each weight byte once for all m rows; W is
// never expanded to floats in memory.
//
// With `glu` (only where quant_gemv_fuses_glu: the common GGUF types
// with aligned rows), W stacks [gate; up] (n = 2F rows) and y [m, F] =
// act(x·gateᵀ) · (x·upᵀ) as FusedSwiGLU / FusedGeGLU (kernels/glu.h)
// compute it, from the f32 sums.
void launch_quant_gemv(DType w_type, const void* w, DType x_dtype, const void* x, void* y, int64_t m, int64_t n,
                       int64_t k, cudaStream_t stream, const GluKind* glu = nullptr);
bool quant_gemv_fuses_glu(DType w_type, const void* w, int64_t n, int64_t k);  // W [n, k]
// Whether launch_quant_gemv re-quantizes x to two int8 levels for these
// operands (gemv_q8.h: the GGUF types RLX_CUDA_GEMV_Q8 selects, with aligned
// rows, m·k ≤ 19,275); its error is then |y − x·Wᵀ| ≤ Σ_k |W[n, k]|·dx(k)/2
// plus f32 rounding, dx = max|x| / 31750 over each 32 elements of x.
bool quant_gemv_uses_q8(DType w_type, const void* w, int64_t m, int64_t n, int64_t k);

// The streaming m = 1 GEMV (gemv_stream.cu): same contract as
// launch_quant_gemv for m = 1 without GLU, activations as two int8 levels
// (the error bound of quant_gemv_uses_q8). launch_quant_gemv takes it where
// quant_gemv_stream_applies (RLX_CUDA_GEMV_STREAM); _unsupported says why it
// cannot run (nullptr: it can): m ≠ 1, a type without a chunk decoder (it
// has Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_XS), K not a multiple of 256
// (Q6_K: 2048, IQ4_XS: 512, for 16-byte-aligned rows), rows or W not 16-byte
// aligned.
const char* quant_gemv_stream_unsupported(DType w_type, const void* w, int64_t m, int64_t n, int64_t k);
bool quant_gemv_stream_applies(DType w_type, const void* w, int64_t m, int64_t n, int64_t k);
void launch_quant_gemv_stream(DType w_type, const void* w, DType x_dtype, const void* x, void* y, int64_t n, int64_t k,
                              cudaStream_t stream);

// Large-matrix GEMV: weights streamed through shared memory by bulk async copies (sm_90+).
// Same contract as launch_quant_gemv without GLU: y [m, n] = x [m, k] ·
// W [n, k]ᵀ, 1 ≤ m ≤ kMaxGemvRows, f32 accumulation. A persistent grid (one
// or two CTAs per SM) streams each CTA's rows through a ring of shared-memory
// stages filled by cp.async.bulk (gemv_staged.cu). Meant for weights of
// megabytes and more; never reads outside the weights' bytes. When m·k f32
// activations fit neither in shared memory nor read as aligned f32 from
// global memory, it hands the call to launch_quant_gemv.
bool quant_gemv_staged_supported(DType w_type);   // a device decoder exists and the device is sm_90+
// Whether launch_quant_gemv_staged takes the activations as int8 (m = 1;
// RLX_CUDA_GEMV_STAGED_Q8), where x fits its shared memory and the weights
// take the unit decoder; its error bound is then quant_gemv_uses_q8's.
bool quant_gemv_staged_uses_q8(DType w_type, int64_t m, int64_t k);
void launch_quant_gemv_staged(DType w_type, const void* w, DType x_dtype, const void* x, void* y, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

// Prefill (m > kMaxGemvRows) on Hopper: y [m, n] = x [m, k] · W [n, k]ᵀ for
// f16/bf16 x and y and the GGUF types Q4_0, Q5_0, Q8_0, Q4_K and Q6_K, by a wgmma GEMM
// whose A operand is W decoded straight into registers (qgemm_sm90.cu): W is
// never expanded in memory. Each weight is formed as (c − zero)·s + o in x's
// dtype with s and o rounded to it (bit-identical to launch_dequantize for
// Q4_0, Q5_0 and Q8_0 in f16, within a few units in the last place of |c·s| + |o|
// for Q4_K and Q6_K); f32 accumulation.
// quant_gemm_sm90_unsupported says why it cannot run (nullptr: it can): x not
// f16/bf16, another weight type, k not a multiple of 64, n not a multiple of
// 8, x or y not 16-byte aligned, W's rows not 4-byte aligned, or a device
// other than compute capability 9.0 with this build's sm_90a image. The
// launcher throws Unsupported with that reason.
// quant_gemm_sm90_preferred: whether it was measured faster than dequantize +
// cuBLASLt for this type and shape on a GPU of `sms` SMs (Q4_0/Q5_0/Q8_0, and
// Q4_K above 128 rows; 32 rows or more; its CTAs filling half the SMs with
// 128-token tiles, or nearly all with whole 256-token tiles; 8 or more chunks
// of K, 2048 elements, each), which is what DequantMatMul follows under
// RLX_CUDA_QGEMM=auto (the default). Host arithmetic only.
const char* quant_gemm_sm90_unsupported(DType w_type, DType x_dtype, const void* w, const void* x, const void* y,
                                        int64_t m, int64_t n, int64_t k);
bool quant_gemm_sm90_preferred(DType w_type, int64_t m, int64_t n, int64_t k, int sms);
void launch_quant_gemm_sm90(DType w_type, const void* w, DType x_dtype, const void* x, void* y, int64_t m, int64_t n,
                            int64_t k, cudaStream_t stream);

// y [n_idx, row_elems] = dequantize(table [rows, row_elems])[idx[j]], idx
// i32 or i64, y f32, f16 or bf16: a 16-bit y is the f32 row rounded (a Cast
// folded in). `scale` (nullable, one element of y's dtype) multiplies the row
// after that rounding, rounding again: a Mul by a scalar folded in. An index
// outside [0, rows) writes a zero row and sets kErrIndexOutOfRange
// (kernels/movement.h) in `error_flag` (nullable).
void launch_quant_gather(DType type, const void* table, int64_t rows, int64_t row_elems, DType index_dtype,
                         const void* idx, int64_t n_idx, DType y_dtype, void* y, const void* scale,
                         int32_t* error_flag, cudaStream_t stream);

}  // namespace rlx::cuda
