#include "rlx/ir/builder.h"

#include "rlx/core/error.h"

namespace rlx {

Value input(Graph& g, const std::string& name, DType dtype, Shape shape) {
  return {&g, g.add_input(name, dtype, std::move(shape))};
}
Value param(Graph& g, const std::string& name, DType dtype, Shape shape) {
  return {&g, g.add_param(name, dtype, std::move(shape))};
}
Value state(Graph& g, const std::string& name, DType dtype, Shape shape) {
  return {&g, g.add_state(name, dtype, std::move(shape))};
}
Value constant(Graph& g, Tensor value, const std::string& name) { return {&g, g.add_constant(std::move(value), name)}; }
Value scalar(Graph& g, float v, DType dtype) {
  return constant(g, Tensor::from(std::vector<float>{v}, {1}).to(dtype));
}
void output(const std::string& name, Value v) {
  RLX_CHECK(v.graph, "output '", name, "': empty value");
  v.graph->set_output(name, v.id);
}

Value op(OpKind kind, Attrs attrs, const std::vector<Value>& inputs, const std::string& name) {
  RLX_CHECK(!inputs.empty() && inputs[0].graph, op_name(kind), ": needs at least one input value");
  Graph* g = inputs[0].graph;
  std::vector<NodeId> ids;
  for (const Value& v : inputs) {
    RLX_CHECK(v.graph == g, op_name(kind), ": inputs belong to different graphs");
    ids.push_back(v.id);
  }
  return {g, g->add(kind, std::move(attrs), std::move(ids), name)};
}

Value unary(UnaryFn fn, Value x) { return op(OpKind::Unary, UnaryAttrs{fn}, {x}); }
Value binary(BinaryFn fn, Value a, Value b) { return op(OpKind::Binary, BinaryAttrs{fn}, {a, b}); }
Value operator+(Value a, Value b) { return binary(BinaryFn::Add, a, b); }
Value operator-(Value a, Value b) { return binary(BinaryFn::Sub, a, b); }
Value operator*(Value a, Value b) { return binary(BinaryFn::Mul, a, b); }
Value operator/(Value a, Value b) { return binary(BinaryFn::Div, a, b); }
Value compare(CompareFn fn, Value a, Value b) { return op(OpKind::Compare, CompareAttrs{fn}, {a, b}); }
Value where(Value cond, Value a, Value b) { return op(OpKind::Where, NoAttrs{}, {cond, a, b}); }
Value cast(Value x, DType to) { return op(OpKind::Cast, CastAttrs{to}, {x}); }

Value matmul(Value a, Value b, MatMulAttrs attrs) { return op(OpKind::MatMul, attrs, {a, b}); }
Value matmul_bias_act(Value a, Value b, Value bias, Activation act, bool transpose_b) {
  return op(OpKind::FusedMatMulBiasAct, FusedMatMulBiasActAttrs{transpose_b, act}, {a, b, bias});
}
Value dequant_matmul(Value x, Value w) { return op(OpKind::DequantMatMul, DequantMatMulAttrs{}, {x, w}); }
Value scaled_matmul(Value a, Value b, Value scale_a, Value scale_b, DType out, Value bias) {
  if (bias.graph) return op(OpKind::ScaledMatMul, ScaledMatMulAttrs{out}, {a, b, scale_a, scale_b, bias});
  return op(OpKind::ScaledMatMul, ScaledMatMulAttrs{out}, {a, b, scale_a, scale_b});
}
Fp8Quantized quantize_fp8(Value x, DType fp8, bool per_row) {
  RLX_CHECK(fp8 == DType::F8E4M3 || fp8 == DType::F8E5M2, "quantize_fp8: ", fp8, " is not an fp8 type");
  RLX_CHECK(x.rank() >= 1, "quantize_fp8: x must have at least one dim");
  Graph& g = *x.graph;
  const Value xf = x.dtype() == DType::F32 ? x : cast(x, DType::F32);
  std::vector<int> axes{-1};
  if (!per_row)
    for (int i = 0; i + 1 < x.rank(); ++i) axes.push_back(i);
  const Value amax = reduce(ReduceFn::Max, unary(UnaryFn::Abs, xf), axes, /*keepdims=*/true);
  // An all-zero row keeps a tiny positive scale, so q = 0 rather than 0/0. x is
  // multiplied by largest / m rather than divided by the scale m / largest: a
  // multiply per element (the two differ by at most an f32 rounding).
  const Value big = scalar(g, fp8 == DType::F8E4M3 ? 448.0f : 57344.0f);
  const Value m = binary(BinaryFn::Max, amax, scalar(g, 1e-30f));
  return {cast(xf * (big / m), fp8), m / big};
}

Value layer_norm(Value x, Value gamma, Value beta, float eps) {
  return op(OpKind::LayerNorm, NormAttrs{eps}, {x, gamma, beta});
}
Value rms_norm(Value x, Value gamma, float eps) { return op(OpKind::RmsNorm, NormAttrs{eps}, {x, gamma}); }
Value residual_layer_norm(Value x, Value residual, Value gamma, Value beta, float eps) {
  return op(OpKind::FusedResidualLayerNorm, NormAttrs{eps}, {x, residual, gamma, beta});
}
Value residual_rms_norm(Value x, Value residual, Value gamma, float eps) {
  return op(OpKind::FusedResidualRmsNorm, NormAttrs{eps}, {x, residual, gamma});
}

Value post_rms_norm(Value x, Value a, Value w, float eps) {
  return op(OpKind::FusedPostRmsNorm, NormAttrs{eps}, {x, a, w});
}
PostNormPair post_rms_norm_pair(Value x, Value a, Value w1, Value w2, float eps) {
  Value both = op(OpKind::FusedPostRmsNorm, NormAttrs{eps}, {x, a, w1, w2});
  return {reshape(narrow(both, 0, 0, 1), x.shape()), reshape(narrow(both, 0, 1, 1), x.shape())};
}

Value softmax(Value x, int axis) { return op(OpKind::Softmax, AxisAttrs{axis}, {x}); }
Value reduce(ReduceFn fn, Value x, std::vector<int> axes, bool keepdims) {
  return op(OpKind::Reduce, ReduceAttrs{fn, std::move(axes), keepdims}, {x});
}
Value argmax(Value x, int axis, bool keepdims) { return op(OpKind::ArgMax, ArgMaxAttrs{axis, keepdims}, {x}); }
Value topk(Value x, int k, bool indices) { return op(OpKind::TopK, TopKAttrs{k, indices}, {x}); }
Value sample(Value logits, SampleAttrs attrs, Value step) {
  if (step.graph) return op(OpKind::Sample, attrs, {logits, step});
  return op(OpKind::Sample, attrs, {logits});
}

Value gather(Value table, Value indices) { return op(OpKind::Gather, NoAttrs{}, {table, indices}); }
Value reshape(Value x, Shape shape) { return op(OpKind::Reshape, ShapeAttrs{std::move(shape)}, {x}); }
Value transpose(Value x, std::vector<int> perm) { return op(OpKind::Transpose, TransposeAttrs{std::move(perm)}, {x}); }
Value narrow(Value x, int axis, int64_t start, int64_t length) {
  // A static axis needs no counting from the end: resolve it now.
  if (start < 0) {
    const Shape& s = x.type().shape;
    const int rank = static_cast<int>(s.size());
    const int ax = axis < 0 ? axis + rank : axis;
    if (ax >= 0 && ax < rank && s[static_cast<size_t>(ax)].is_static() && -start <= s[static_cast<size_t>(ax)].value)
      start += s[static_cast<size_t>(ax)].value;
  }
  return op(OpKind::Narrow, NarrowAttrs{axis, start, length}, {x});
}
Value concat(const std::vector<Value>& xs, int axis) { return op(OpKind::Concat, AxisAttrs{axis}, xs); }
Value expand(Value x, Shape shape) { return op(OpKind::Expand, ShapeAttrs{std::move(shape)}, {x}); }
Value write_slice(Value state, Value update, Value offset, int axis) {
  return op(OpKind::WriteSlice, WriteSliceAttrs{axis}, {state, update, offset});
}
Value rope_write_slice(Value state, Value update, Value offset, Value positions, RopeAttrs attrs,
                       Value head_norm_weight) {
  attrs.head_norm = head_norm_weight.graph != nullptr;
  WriteSliceAttrs a{1, true, attrs};
  if (attrs.head_norm) return op(OpKind::WriteSlice, a, {state, update, offset, positions, head_norm_weight});
  return op(OpKind::WriteSlice, a, {state, update, offset, positions});
}

Value attention(Value q, Value k, Value v, AttentionAttrs attrs, Value mask_or_bias, Value kv_len) {
  std::vector<Value> in{q, k, v};
  if (mask_or_bias.graph) in.push_back(mask_or_bias);
  if (kv_len.graph) {
    attrs.kv_len_input = true;
    in.push_back(kv_len);
  }
  return op(OpKind::Attention, attrs, in);
}
Value rope(Value x, Value positions, RopeAttrs attrs, Value head_norm_weight) {
  attrs.head_norm = head_norm_weight.graph != nullptr;
  if (attrs.head_norm) return op(OpKind::Rope, attrs, {x, positions, head_norm_weight});
  return op(OpKind::Rope, attrs, {x, positions});
}
Value swiglu(Value x) { return op(OpKind::FusedSwiGLU, GluAttrs{}, {x}); }
Value geglu(Value x, bool tanh_approx) { return op(OpKind::FusedGeGLU, GluAttrs{tanh_approx}, {x}); }

Value fft(Value x, FftNorm norm) { return op(OpKind::Fft, FftAttrs{.norm = norm}, {x}); }
Value ifft(Value x, FftNorm norm) { return op(OpKind::Fft, FftAttrs{.inverse = true, .norm = norm}, {x}); }
Value rfft(Value x, FftNorm norm) { return op(OpKind::Fft, FftAttrs{.real_input = true, .norm = norm}, {x}); }
Value irfft(Value x, int64_t n, FftNorm norm) {
  RLX_CHECK(x.graph, "irfft: empty value");
  if (n == 0) {
    const Shape& s = x.shape();
    RLX_CHECK(!s.empty() && s.back().is_static(), "irfft: the signal length n must be given when the bins' axis of ",
              shape_to_string(s), " is not static");
    n = 2 * (s.back().value - 1);
  }
  return op(OpKind::Fft, FftAttrs{.inverse = true, .real_output = true, .n = n, .norm = norm}, {x});
}
Value bitcast(Value x, DType to) { return op(OpKind::Bitcast, CastAttrs{to}, {x}); }

Value gaussian_splat(Value means, Value scales, Value rotations, Value opacities, Value colors, Value view,
                     Value intrinsics, Value background, SplatAttrs attrs) {
  return op(OpKind::GaussianSplatRender, attrs,
            {means, scales, rotations, opacities, colors, view, intrinsics, background});
}

Value custom(const std::string& name, const std::vector<Value>& inputs, std::map<std::string, CustomAttrValue> values) {
  return op(OpKind::Custom, CustomAttrs{name, std::move(values)}, inputs, name);
}

}  // namespace rlx
