// Op semantics: the OpKind list and one typed attribute struct per op.
// An op says what is computed (and, in infer.cpp, the result type); kernels
// live in backends and are registered per (op, backend, dtypes).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "rlx/core/tensor.h"
#include "rlx/ir/shape.h"

namespace rlx {

enum class OpKind : uint8_t {
  // Leaves
  Input, Param, Constant, State,
  // Elementwise
  Unary, Binary, Compare, Where, Cast,
  // Linear algebra
  MatMul, FusedMatMulBiasAct, DequantMatMul, ScaledMatMul,
  // Normalization
  LayerNorm, RmsNorm, FusedResidualLayerNorm, FusedResidualRmsNorm, FusedPostRmsNorm,
  // Reductions and selection
  Softmax, Reduce, ArgMax, TopK, Sample,
  // Data movement
  Gather, Reshape, Transpose, Narrow, Concat, Expand, WriteSlice, Bitcast,
  // Transformer blocks
  Attention, Rope, FusedSwiGLU, FusedGeGLU,
  // Signal and graphics
  Fft, GaussianSplatRender,
  // User-registered (see runtime/custom_op.h)
  Custom,
  Count_,
};

const char* op_name(OpKind op);

enum class UnaryFn : uint8_t {
  GeluErf, GeluTanh, Silu, Relu, Sigmoid, Tanh, Exp, Log, Sqrt, Rsqrt, Neg, Abs, Sin, Cos,
};
enum class BinaryFn : uint8_t { Add, Sub, Mul, Div, Max, Min, Pow };
enum class CompareFn : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };
enum class ReduceFn : uint8_t { Sum, Mean, Max, Min };
// Activation fused into a matmul epilogue.
enum class Activation : uint8_t { None, GeluErf, GeluTanh, Relu, Silu };
// Which attention scores are visible. Causal is bottom-right aligned: query i
// (of Lq) sits at absolute position i + Lk - Lq, so decode over a cache works.
enum class MaskKind : uint8_t { None, Causal, SlidingWindow, Custom, Bias };
// NeoX rotates halves (x[i], x[i + n_rot/2]); Interleaved rotates pairs
// (x[2i], x[2i+1]) as GPT-J and llama.cpp's "normal" mode.
enum class RopePairing : uint8_t { NeoX, Interleaved };

const char* unary_name(UnaryFn f);
const char* binary_name(BinaryFn f);
const char* compare_name(CompareFn f);
const char* reduce_name(ReduceFn f);
const char* activation_name(Activation a);
// The unary function an activation applies (throws for None).
UnaryFn activation_unary(Activation a);
const char* mask_name(MaskKind m);
const char* rope_pairing_name(RopePairing p);

struct NoAttrs { bool operator==(const NoAttrs&) const = default; };
// Input, Param and State are named leaves; State is a persistent, writable
// buffer (KV cache) that keeps its contents across runs and starts zeroed.
struct LeafAttrs { std::string name; bool operator==(const LeafAttrs&) const = default; };
struct ConstantAttrs {
  Tensor value;  // host data, shape and dtype equal the node's type
  bool operator==(const ConstantAttrs& o) const;
};
struct UnaryAttrs { UnaryFn fn; bool operator==(const UnaryAttrs&) const = default; };
struct BinaryAttrs { BinaryFn fn; bool operator==(const BinaryAttrs&) const = default; };
struct CompareAttrs { CompareFn fn; bool operator==(const CompareAttrs&) const = default; };
struct CastAttrs { DType to; bool operator==(const CastAttrs&) const = default; };
// A [..., M, K] x B [..., K, N] (after optional transposes), batch dims broadcast.
struct MatMulAttrs {
  bool transpose_a = false;
  bool transpose_b = false;
  bool operator==(const MatMulAttrs&) const = default;
};
// act(A·B + bias); inputs A, B, bias [N].
struct FusedMatMulBiasActAttrs {
  bool transpose_b = false;
  Activation act = Activation::None;
  bool operator==(const FusedMatMulBiasActAttrs&) const = default;
};
// x [..., K] · Wᵀ with W [N, K] stored in a packed quant (or fp8) dtype.
struct DequantMatMulAttrs { bool operator==(const DequantMatMulAttrs&) const = default; };
// FP8 matmul (torch._scaled_mm's contract, B stored [N, K] as a linear layer's
// weight): inputs a [..., K] and b [N, K] in f8e4m3 or f8e5m2, f32 scales
// scale_a (one value, or a's shape with K → 1: one per row) and scale_b (one
// value, or [N, 1]: one per row of b), optional bias [N] in the result dtype.
//   y[m, n] = scale_a[m] · scale_b[n] · Σ_k a[m, k] · b[n, k] + bias[n]
// summed in f32 (each fp8 product is exact in f32), rounded once to `out`.
struct ScaledMatMulAttrs {
  DType out = DType::F32;  // f32, f16 or bf16
  bool operator==(const ScaledMatMulAttrs&) const = default;
};
// LayerNorm: inputs x, gamma, beta. RmsNorm: x, gamma. The fused residual
// forms take a residual as second input and normalize (x + residual).
// FusedPostRmsNorm (post-norm residual, Gemma): inputs x, a, w1 [, w2];
//   y = x + rms_norm(a, w1) (rounded to x's dtype), result y.
//   With w2 the result is [2, ...x's shape]: [0] = y, [1] = rms_norm(y, w2),
//   so the residual stream and the next layer's normed input come from one
//   pass (read them with a contiguous Narrow on axis 0, which is a view).
struct NormAttrs { float eps = 1e-5f; bool operator==(const NormAttrs&) const = default; };
struct AxisAttrs { int axis = -1; bool operator==(const AxisAttrs&) const = default; };
struct ReduceAttrs {
  ReduceFn fn = ReduceFn::Sum;
  std::vector<int> axes;
  bool keepdims = false;
  bool operator==(const ReduceAttrs&) const = default;
};
struct ArgMaxAttrs { int axis = -1; bool keepdims = false; bool operator==(const ArgMaxAttrs&) const = default; };
// Largest k along the last axis, sorted descending; values, or i32 indices.
struct TopKAttrs { int k = 1; bool indices = false; bool operator==(const TopKAttrs&) const = default; };
// Draws one i32 token per row of logits [B, V]. temperature 0 = greedy.
// Optional second input: i32 [1] step counter mixed into the seed, so a
// replayed graph draws fresh numbers without re-capture.
struct SampleAttrs {
  float temperature = 1.0f;
  int top_k = 0;        // 0 = all
  float top_p = 1.0f;   // 1 = all
  uint64_t seed = 0;
  bool operator==(const SampleAttrs&) const = default;
};
struct ShapeAttrs { Shape shape; bool operator==(const ShapeAttrs&) const = default; };
// Bitcast (CastAttrs): the same bytes read as another scalar type, a view.
// Equal sizes keep the shape; to a type k times smaller the result gains a
// last axis of k (c64 [..., n] → f32 [..., n, 2], torch's view_as_real); to a
// type k times larger the input's last axis must be k and is dropped.

struct TransposeAttrs { std::vector<int> perm; bool operator==(const TransposeAttrs&) const = default; };
// start < 0 counts from the end of the axis (start + size), so a symbolic axis
// can be narrowed to its last elements; specialize() makes it non-negative,
// so backends only ever see start ≥ 0.
struct NarrowAttrs {
  int axis = 0;
  int64_t start = 0;
  int64_t length = 0;
  bool operator==(const NarrowAttrs&) const = default;
};
// Q [B, Lq, H·D], K and V [B, Lk, Hkv·D]; query head h reads kv head h/(H/Hkv).
// Extra inputs by mask: Custom → keep mask [B, Lk] (nonzero = keep);
// Bias → additive scores [B|1, H|1, Lq, Lk].
// kv_len_input: one more (last) input, i32 [1] or [B], the number of valid
// keys; keys at index ≥ kv_len are ignored and query i sits at position
// kv_len − Lq + i for Causal/SlidingWindow. One graph then serves prefill and
// decode over a fixed-size KV cache, with the length read on the device.
struct AttentionAttrs {
  int num_heads = 1;
  int num_kv_heads = 1;
  int head_dim = 64;
  float scale = 0.0f;    // 0 → 1/√head_dim
  float softcap = 0.0f;  // 0 → off; else softcap·tanh(s/softcap)
  MaskKind mask = MaskKind::None;
  int64_t window = 0;    // SlidingWindow: key visible when 0 ≤ q_pos − k_pos < window
  bool kv_len_input = false;
  bool operator==(const AttentionAttrs&) const = default;
  float effective_scale() const;
};
// Rotary embedding. Inputs: x [B, L, W], positions i32 [L] or [B, L].
// Head h of the result reads x[b, l, src_offset + h·head_dim + d]; W may be
// wider than num_heads·head_dim (e.g. a fused QKV row). Output [B, L, H·D].
// Only the first n_rot dims of each head rotate; the rest pass through.
// head_norm: a third input w [head_dim] (any float dtype); each head is first
// RMS-normalized, x·rsqrt(mean(x²) + norm_eps)·w over its head_dim values
// (QK-norm of Gemma 3 / Qwen3), in f32, and rotated without rounding between.
// Pair i (i < n_rot/2) turns by θ_i = pos · freq_scale · rope_inv_freq(a)[i].
struct RopeAttrs {
  int num_heads = 1;
  int head_dim = 64;
  int n_rot = 64;
  RopePairing pairing = RopePairing::NeoX;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // positions are multiplied by this (linear scaling); 0: no rotation (NoPE)
  int64_t src_offset = 0;
  bool head_norm = false;
  float norm_eps = 1e-6f;
  // Empty, or n_rot/2 positive divisors of the pairs' frequencies (Llama 3.1+
  // files' rope_freqs.weight, llama.cpp's "freq factors").
  std::vector<float> freq_factors;
  bool operator==(const RopeAttrs&) const = default;
};
// freq_base^(−2i/n_rot) / freq_factors[i] for i < n_rot/2, in f64: the one
// table every backend's rope uses.
std::vector<double> rope_inv_freq(const RopeAttrs& a);
// Writes `update` into `state` at offset (i32 [1] input) along `axis`; the
// result is the whole state (aliasing it). Inputs: state, update, offset.
// A float update (f32/f16/bf16) is converted to the state's float type.
// rope: the KV-cache write of a rotated K in one op. Inputs state [B, ctx,
//   H·D], update [B, L, W], offset, positions [, head norm weight]; the rows
//   written are Rope(update, positions, rope_attrs [, weight]) (axis 1 only),
//   computed in f32 and rounded once to the state's type.
struct WriteSliceAttrs {
  int axis = 1;
  bool rope = false;
  RopeAttrs rope_attrs{};
  bool operator==(const WriteSliceAttrs&) const = default;
};
// FusedSwiGLU / FusedGeGLU: x [..., 2N] → act(x[..., :N]) · x[..., N:].
// The gate is the FIRST half (one convention, everywhere).
struct GluAttrs { bool tanh_approx = false; bool operator==(const GluAttrs&) const = default; };
// Fft: the discrete Fourier transform along the last axis, with numpy.fft's
// conventions (forward exp(−2πi·jk/n), result bins in natural order):
//   complex:     c64 [..., n] → c64 [..., n]              (inverse chooses the sign)
//   real_input:  float [..., n] → c64 [..., n/2 + 1]      (forward only, numpy rfft)
//   real_output: c64 [..., n/2 + 1] → f32 [..., n]        (inverse only, numpy irfft;
//                n = attrs.n; the imaginary parts of bin 0 and, n even, bin n/2 are ignored)
// norm scales as numpy's `norm`: Backward (inverse × 1/n), Ortho (both × 1/√n),
// Forward (forward × 1/n).
enum class FftNorm : uint8_t { Backward, Ortho, Forward };
const char* fft_norm_name(FftNorm n);
struct FftAttrs {
  bool inverse = false;
  bool real_input = false;
  bool real_output = false;
  int64_t n = 0;  // real_output: the signal length (its input has n/2 + 1 bins)
  FftNorm norm = FftNorm::Backward;
  bool operator==(const FftAttrs&) const = default;
};
// GaussianSplatRender: 3D Gaussian splatting's forward rasterization (Kerbl
// et al. 2023) of N Gaussians into an RGB image [height, width, 3], f32.
// Inputs (f32): means [N, 3] (world), scales [N, 3] (standard deviations
// along the Gaussian's axes), rotations [N, 4] (quaternions w, x, y, z;
// normalized here), opacities [N] in [0, 1], colors [N, 3], view [4, 4]
// (world → camera, row-major, OpenCV axes: x right, y down, z forward),
// intrinsics [4] (fx, fy, cx, cy in pixels) and background [3].
//   Each Gaussian with camera depth z > near_plane is projected: mean
//   (fx·x/z + cx, fy·y/z + cy), covariance J·Rv·Σ·Rvᵀ·Jᵀ + eps2d·I with
//   Σ = R·S²·Rᵀ and J the projection's Jacobian at the mean, with x/z
//   clamped to [−cx/fx − m, (width − cx)/fx + m], m = 0.15·width/fx (and y/z
//   likewise: the reference code's 1.3× the half field of view); one whose 2D
//   covariance is singular is dropped. Non-finite values, a zero quaternion
//   or fx, fy ≤ 0 are errors.
//   Pixel (u, v) has its centre at (u + ½, v + ½). Front to back (depth,
//   then index), α = min(0.99, opacity·exp(−½·dᵀΣ₂⁻¹d)); α < 1/255 is skipped;
//   a Gaussian that would take the transmittance T below 1e-4 ends the pixel
//   unblended; colour = Σ T·α·c + T·background.
// The result does not depend on any tiling an implementation uses.
struct SplatAttrs {
  int width = 0;
  int height = 0;
  float near_plane = 0.01f;
  float eps2d = 0.3f;
  bool operator==(const SplatAttrs&) const = default;
};
// Custom op: registered name plus free-form scalar attributes.
using CustomAttrValue = std::variant<int64_t, double, std::string>;
struct CustomAttrs {
  std::string name;
  std::map<std::string, CustomAttrValue> values;
  bool operator==(const CustomAttrs&) const = default;
};

using Attrs = std::variant<NoAttrs, LeafAttrs, ConstantAttrs, UnaryAttrs, BinaryAttrs, CompareAttrs, CastAttrs,
                           MatMulAttrs, FusedMatMulBiasActAttrs, DequantMatMulAttrs, ScaledMatMulAttrs, NormAttrs,
                           AxisAttrs, ReduceAttrs, ArgMaxAttrs, TopKAttrs, SampleAttrs, ShapeAttrs, TransposeAttrs,
                           NarrowAttrs, WriteSliceAttrs, AttentionAttrs, RopeAttrs, GluAttrs, FftAttrs,
                           SplatAttrs, CustomAttrs>;

// One line describing the attributes (for the printer and fingerprints).
std::string attrs_to_string(const Attrs& a);

}  // namespace rlx
