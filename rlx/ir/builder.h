// Graph builder: `Value` is a handle to a node of a Graph; the free functions
// below append ops and return new handles.
//
//   rlx::Graph g;
//   auto x = rlx::input(g, "x", rlx::DType::F32, {"B", 384});
//   auto w = rlx::param(g, "w", rlx::DType::F32, {384, 384});
//   g.set_output("y", rlx::gelu(rlx::matmul(x, w)).id);
#pragma once
#include <string>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx {

struct Value {
  Graph* graph = nullptr;
  NodeId id = -1;
  const TensorType& type() const { return graph->node(id).type; }
  const Shape& shape() const { return type().shape; }
  DType dtype() const { return type().dtype; }
  int rank() const { return type().rank(); }
};

// Leaves
Value input(Graph& g, const std::string& name, DType dtype, Shape shape);
Value param(Graph& g, const std::string& name, DType dtype, Shape shape);
Value state(Graph& g, const std::string& name, DType dtype, Shape shape);
Value constant(Graph& g, Tensor value, const std::string& name = {});
Value scalar(Graph& g, float v, DType dtype = DType::F32);
void output(const std::string& name, Value v);

// Generic append, named
Value op(OpKind kind, Attrs attrs, const std::vector<Value>& inputs, const std::string& name = {});

// Elementwise
Value unary(UnaryFn fn, Value x);
inline Value gelu(Value x) { return unary(UnaryFn::GeluErf, x); }
inline Value gelu_tanh(Value x) { return unary(UnaryFn::GeluTanh, x); }
inline Value silu(Value x) { return unary(UnaryFn::Silu, x); }
inline Value relu(Value x) { return unary(UnaryFn::Relu, x); }
inline Value exp(Value x) { return unary(UnaryFn::Exp, x); }
inline Value sqrt(Value x) { return unary(UnaryFn::Sqrt, x); }
Value binary(BinaryFn fn, Value a, Value b);
Value operator+(Value a, Value b);
Value operator-(Value a, Value b);
Value operator*(Value a, Value b);
Value operator/(Value a, Value b);
Value compare(CompareFn fn, Value a, Value b);
Value where(Value cond, Value a, Value b);
Value cast(Value x, DType to);

// Linear algebra
Value matmul(Value a, Value b, MatMulAttrs attrs = {});
Value matmul_bias_act(Value a, Value b, Value bias, Activation act, bool transpose_b = false);
Value dequant_matmul(Value x, Value w);
// FP8 matmul (ScaledMatMul in ops.h): a [..., K], b [N, K] in fp8, f32 scales; `bias` optional.
Value scaled_matmul(Value a, Value b, Value scale_a, Value scale_b, DType out, Value bias = {});
// Dynamic FP8 quantization of a float x for scaled_matmul: the scale maps the
// largest |x| (of each row with `per_row`, else of the whole tensor) to the
// type's largest finite value (448 for e4m3, 57344 for e5m2), and q = x ·
// (largest / max|x|) rounded to the fp8 type; x ≈ q · scale. Built from
// Reduce, Max, Div, Mul and Cast (one kernel on CUDA for per-row scales).
struct Fp8Quantized {
  Value q;      // x's shape, in `fp8`
  Value scale;  // f32: x's shape with the last dim 1 (per row), or all dims 1
};
Fp8Quantized quantize_fp8(Value x, DType fp8 = DType::F8E4M3, bool per_row = true);

// Norms
Value layer_norm(Value x, Value gamma, Value beta, float eps = 1e-5f);
Value rms_norm(Value x, Value gamma, float eps = 1e-6f);
Value residual_layer_norm(Value x, Value residual, Value gamma, Value beta, float eps = 1e-5f);
Value residual_rms_norm(Value x, Value residual, Value gamma, float eps = 1e-6f);
// Post-norm residual: x + rms_norm(a, w).
Value post_rms_norm(Value x, Value a, Value w, float eps = 1e-6f);
struct PostNormPair {
  Value sum;   // x + rms_norm(a, w1)
  Value norm;  // rms_norm(sum, w2)
};
// Both from one FusedPostRmsNorm node; `sum` and `norm` are views of its halves.
PostNormPair post_rms_norm_pair(Value x, Value a, Value w1, Value w2, float eps = 1e-6f);

// Reductions and selection
Value softmax(Value x, int axis = -1);
Value reduce(ReduceFn fn, Value x, std::vector<int> axes, bool keepdims = false);
Value argmax(Value x, int axis = -1, bool keepdims = false);
Value topk(Value x, int k, bool indices = false);
Value sample(Value logits, SampleAttrs attrs, Value step = {});

// Data movement
Value gather(Value table, Value indices);
Value reshape(Value x, Shape shape);
Value transpose(Value x, std::vector<int> perm);
// start < 0 counts from the end: narrow(x, 0, -1, 1) is the last row, also of a symbolic axis.
Value narrow(Value x, int axis, int64_t start, int64_t length);
Value concat(const std::vector<Value>& xs, int axis);
Value expand(Value x, Shape shape);
Value write_slice(Value state, Value update, Value offset, int axis);
// Writes rope(update, positions, attrs [, head_norm_weight]) into `state`
// along axis 1 at `offset` (WriteSliceAttrs::rope): K into a KV cache, one op.
Value rope_write_slice(Value state, Value update, Value offset, Value positions, RopeAttrs attrs,
                       Value head_norm_weight = {});

// Transformer blocks
// `kv_len` (i32 [1] or [B]) sets attrs.kv_len_input: only the first kv_len keys count.
Value attention(Value q, Value k, Value v, AttentionAttrs attrs, Value mask_or_bias = {}, Value kv_len = {});
// With `head_norm_weight` ([head_dim]) each head is RMS-normalized first
// (sets attrs.head_norm; attrs.norm_eps is the epsilon).
Value rope(Value x, Value positions, RopeAttrs attrs, Value head_norm_weight = {});
Value swiglu(Value x);
Value geglu(Value x, bool tanh_approx = false);

// Signal: Fourier transforms along the last axis, numpy.fft's conventions
// (see FftAttrs). fft/ifft: c64 → c64; rfft: real → c64 [..., n/2 + 1];
// irfft: c64 [..., m] → f32 [..., n], n = 2(m − 1) unless given.
Value fft(Value x, FftNorm norm = FftNorm::Backward);
Value ifft(Value x, FftNorm norm = FftNorm::Backward);
Value rfft(Value x, FftNorm norm = FftNorm::Backward);
Value irfft(Value x, int64_t n = 0, FftNorm norm = FftNorm::Backward);
// The same bytes as another scalar type (see Bitcast in ops.h).
Value bitcast(Value x, DType to);
// c64 [..., n] ↔ f32 [..., n, 2] (real, imaginary), as torch's views.
inline Value view_as_real(Value x) { return bitcast(x, DType::F32); }
inline Value view_as_complex(Value x) { return bitcast(x, DType::C64); }

// Graphics: an RGB image [height, width, 3] of N Gaussians (see SplatAttrs).
Value gaussian_splat(Value means, Value scales, Value rotations, Value opacities, Value colors, Value view,
                     Value intrinsics, Value background, SplatAttrs attrs);

// User ops (see rlx/ir/custom_op.h)
Value custom(const std::string& name, const std::vector<Value>& inputs,
             std::map<std::string, CustomAttrValue> values = {});

}  // namespace rlx
