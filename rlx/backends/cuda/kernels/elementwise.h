// Elementwise launchers: unary, binary (numpy broadcasting), compare, where,
// cast and a fused elementwise chain. Kernels in elementwise.cu. Every launcher
// is asynchronous on `stream`, allocates nothing, throws rlx::DeviceError naming
// the op when the launch fails and rlx::Unsupported for a dtype it lacks.
//
// Float math is f32 for f32/f16/bf16 storage and IEEE-exact where the CPU is
// (division, sqrt: round-to-nearest even under --use_fast_math); exp, log, sin,
// cos, tanh, erf use libdevice's full-precision f32 routines (≤ 2 ulp), never
// the fast intrinsics, so GELU-tanh and GELU-erf are both accurate and distinct.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "rlx/core/dtype.h"
#include "rlx/ir/ops.h"

namespace rlx::cuda {

inline constexpr int kMaxRank = 6;

// An output-shaped iteration space (row-major) with, per operand, the element
// stride of each output dim (0 = broadcast along it). Up to 3 operands.
struct StridedShape {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[3][kMaxRank] = {};
  int64_t numel() const;
};

// numpy broadcasting of contiguous operands `a`, `b` (and optional `c`) whose
// dims are right-aligned against `out`. Size-1 dims are dropped and adjacent
// dims merged where every operand allows, so [R, C] + [C] becomes a rank-2
// shape with strides {C, 1} / {0, 1}. Throws rlx::ShapeError if not broadcastable.
StridedShape make_broadcast(const std::vector<int64_t>& out, const std::vector<int64_t>& a,
                            const std::vector<int64_t>& b, const std::vector<int64_t>* c = nullptr);

// y = fn(x), n elements, dtype f32/f16/bf16 (f32 math) or f64. Relu passes NaN;
// Sigmoid/Silu use the overflow-free form of the CPU kernel.
void launch_unary(UnaryFn fn, DType dtype, const void* x, void* y, int64_t n, cudaStream_t stream);

// out = fn(a, b) over `shape` (operands 0 = a, 1 = b), out contiguous.
// dtype f32/f16/bf16 (f32 math), f64, or i8/u8/i16/i32/i64. Max/Min propagate
// NaN; f32 Pow is evaluated in double and rounded (= the CPU's powf to < 1 ulp).
// Integers wrap on overflow; Div truncates toward zero, x/0 = 0 and
// INT_MIN/−1 = INT_MIN; Pow on integers is rlx::Unsupported (as on the CPU).
// Fast paths: equal shapes, and any rank ≤ 2 view with column strides 0/1
// (bias [C] over [R, C], per-row [R, 1], scalar), vectorized 16 bytes.
void launch_binary(BinaryFn fn, DType dtype, const void* a, const void* b, void* out, const StridedShape& shape,
                   cudaStream_t stream);

// out (bool as uint8 0/1) = fn(a, b); dtype f32/f16/bf16/f64/i8/u8/i16/i32/i64/bool.
// IEEE semantics: every comparison with NaN is false except Ne.
void launch_compare(CompareFn fn, DType dtype, const void* a, const void* b, uint8_t* out,
                    const StridedShape& shape, cudaStream_t stream);

// out = cond ? a : b; operands 0 = cond (uint8/bool, nonzero = true), 1 = a,
// 2 = b. Any scalar dtype of 1, 2, 4 or 8 bytes (copied bitwise).
void launch_where(DType dtype, const uint8_t* cond, const void* a, const void* b, void* out,
                  const StridedShape& shape, cudaStream_t stream);

// y = cast(x), n elements, between f32 f16 bf16 f64 i8 u8 i16 i32 i64 bool
// f8e4m3 f8e5m2. Conversions equal rlx/core/half.h bit for bit (NaN payloads
// aside) and the CPU kernel: RNE; f16/e5m2 overflow to inf; e4m3 saturates to
// ±448 (NaN → 0x7f). f64 and i64 → 16/8-bit floats round once (through a
// round-to-odd f32). float → int truncates toward zero and saturates (NaN → 0);
// int → narrower int saturates; → bool is x ≠ 0 (NaN → true); bool → 0/1.
void launch_cast(DType from, DType to, const void* x, void* y, int64_t n, cudaStream_t stream);

// ---- Fused elementwise chain -------------------------------------------
// A register program applied to every element of x [rows, cols] (contiguous):
// acc = x; for each step: acc = unary(acc) | acc ∘ operand | operand ∘ acc |
// acc ∘ scalar | scalar ∘ acc; y = acc. Up to 8 steps and 3 extra operands,
// each broadcast to [rows, cols] by (row_stride, col_stride) in elements:
// full (cols, 1), bias (0, 1), per-row (1, 0), scalar (0, 0).
inline constexpr int kMaxChainSteps = 8;
inline constexpr int kMaxChainOperands = 3;

struct ChainStep {
  enum class Kind : uint8_t { Unary, Binary, BinaryScalar };
  Kind kind = Kind::Unary;
  UnaryFn unary = UnaryFn::Relu;
  BinaryFn binary = BinaryFn::Add;
  int8_t operand = 0;     // Binary: index into ChainProgram::operands
  bool reversed = false;  // Binary/BinaryScalar: other ∘ acc instead of acc ∘ other
  float scalar = 0.0f;    // BinaryScalar
};

struct ChainOperand {
  const void* data = nullptr;
  DType dtype = DType::F32;  // f32/f16/bf16
  int64_t row_stride = 0;
  int64_t col_stride = 0;
};

struct ChainProgram {
  int num_steps = 0;
  ChainStep steps[kMaxChainSteps];
  int num_operands = 0;
  ChainOperand operands[kMaxChainOperands];
};

// x, y: [rows, cols] of `dtype` (f32/f16/bf16); y may alias x.
void launch_elementwise_chain(DType dtype, const void* x, void* y, int64_t rows, int64_t cols,
                              const ChainProgram& program, cudaStream_t stream);

}  // namespace rlx::cuda
