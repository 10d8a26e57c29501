// CPU conversion between f32 and every GGUF storage type: the reference that
// the GPU kernels are tested against. Block layouts and formulas follow ggml
// (ggml-common.h, ggml-quants.c) and produce the same floats bit for bit.
#pragma once
#include <cstdint>

#include "rlx/core/dtype.h"
#include "rlx/core/tensor.h"

namespace rlx {

// Dequantization exists for every float, integer and GGUF block type (not c64).
bool has_cpu_dequant(DType type);
// Converts `n` elements (a multiple of the type's block size) at `src` to f32.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);
// A new f32 tensor of the same shape.
Tensor dequantize(const Tensor& t);

// Round-to-nearest quantizers for f32, f16, bf16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
// (byte-identical to ggml's reference quantizers), Q4_K and Q6_K (plain
// round-to-nearest scales, not ggml's searched ones: for tests and benchmarks).
bool has_cpu_quantize(DType type);
// `n` must be a multiple of the type's block size; writes dtype_bytes(type, n) bytes.
void quantize_row(DType type, const float* src, void* dst, int64_t n);
// Quantizes an f32 tensor; the element count must be a multiple of the block size.
Tensor quantize(const Tensor& f32, DType type);

// Q4_0, Q5_0 and Q8_0 share 32-element blocks with one f16 scale d and no
// offset (x = c·d with integer c in [-16, 15] or [-128, 127]), so their rows
// convert to Q8_0 exactly: same d, c as int8. dequantize_row gives the same
// floats bit for bit before and after. Lets rows of these types be stacked
// into one Q8_0 matrix (one GEMV where there were two).
bool converts_to_q8_0(DType type);
// `n` elements (whole blocks) of `type` at src → dtype_bytes(Q8_0, n) bytes at dst.
void convert_to_q8_0(DType type, const void* src, void* dst, int64_t n);

}  // namespace rlx
