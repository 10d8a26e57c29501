#include "rlx/models/llm/blocks.h"

#include <cmath>

namespace rlx::llm::detail {

Blocks::Blocks(Graph& g, const LlmConfig& cfg, const GgufFile& f, const BuildOptions& o)
    : g_(g), c_(cfg), f_(f), o_(o) {
  RLX_CHECK(o.ctx >= 1, "llm: context size must be at least 1, got ", o.ctx);
  RLX_CHECK(o.kv_dtype == DType::F16 || o.kv_dtype == DType::BF16 || o.kv_dtype == DType::F32,
            "llm: KV cache dtype must be f16, bf16 or f32, got ", o.kv_dtype);
  RLX_CHECK(o.logits || o.token || o.hidden, "llm: the graph needs at least one output (logits, token or hidden)");
  tokens_ = input(g, kInputNames[0], DType::I32, {1, "L"});
  positions_ = input(g, kInputNames[1], DType::I32, {"L"});
  offset_ = input(g, kInputNames[2], DType::I32, {1});
  kv_len_ = input(g, kInputNames[3], DType::I32, {1});
  step_ = input(g, kInputNames[4], DType::I32, {1});
}

void Blocks::check_weights() const {
  std::string missing;
  auto need = [&](const std::string& name, std::vector<int64_t> shape) {
    const GgufTensorInfo* t = f_.find_tensor(name);
    if (!t) missing += str("\n  ", name, " is missing");
    else if (t->shape() != shape)
      missing += str("\n  ", name, " has shape ", shape_str(t->shape()), ", expected ", shape_str(shape));
  };
  const int64_t H = c_.hidden, D = c_.head_dim;
  need(names::kTokenEmbd, {c_.vocab, H});
  need(names::kOutputNorm, {H});
  if (!c_.tied_output) need(names::kOutput, {c_.vocab, H});
  for (int64_t i = 0; i < c_.n_layers; ++i)
    for (const LayerWeight& w : layer_weights(c_.arch)) {
      const std::string s = w.suffix;
      const std::string name = names::blk(i, w.suffix);
      if (!w.required && !has(name)) continue;
      std::vector<int64_t> shape;
      if (s == "attn_qkv.weight") shape = {(c_.n_heads + 2 * c_.n_kv_heads) * D, H};
      else if (s == "attn_q.weight") shape = {c_.n_heads * D, H};
      else if (s == "attn_k.weight" || s == "attn_v.weight") shape = {c_.n_kv_heads * D, H};
      else if (s == "attn_q.bias") shape = {c_.n_heads * D};
      else if (s == "attn_k.bias" || s == "attn_v.bias") shape = {c_.n_kv_heads * D};
      else if (s == "attn_output.weight") shape = {H, c_.n_heads * D};
      else if (c_.arch == Arch::Olmo2 && s == "attn_q_norm.weight") shape = {c_.n_heads * D};  // whole rows
      else if (c_.arch == Arch::Olmo2 && s == "attn_k_norm.weight") shape = {c_.n_kv_heads * D};
      else if (s == "attn_q_norm.weight" || s == "attn_k_norm.weight") shape = {D};
      else if (s == "ffn_up.weight" && c_.arch == Arch::Phi3) shape = {2 * c_.ffn, H};  // [gate | up]
      else if (s == "ffn_gate.weight" || s == "ffn_up.weight") shape = {c_.ffn, H};
      else if (s == "ffn_down.weight") shape = {H, c_.ffn};
      else shape = {H};  // the per-layer norms
      need(name, shape);
    }
  RLX_FORMAT_CHECK(missing.empty(), f_.source(), ": tensors missing or mis-shaped for ", c_.arch_key, ":", missing);
}

Value Blocks::weight(const std::string& name, std::vector<int64_t> shape) {
  if (NodeId id = g_.find_leaf(OpKind::Param, name); id >= 0) return Value{&g_, id};  // tied head
  const GgufTensorInfo& t = f_.tensor(name);
  // Packed and fp8 weights stay as stored; float ones compute in f32 (the
  // precision policy may store them in half).
  const DType dt = is_float(t.type) ? DType::F32 : t.type;
  Shape s(shape.begin(), shape.end());
  return param(g_, name, dt, s);
}

Value Blocks::embed() {
  return gather(weight(names::kTokenEmbd, {c_.vocab, c_.hidden}), tokens_);
}

Value Blocks::linear(Value x, const std::string& name, int64_t out, int64_t in) {
  Value w = weight(name, {out, in});
  Value y = is_float(w.dtype()) ? matmul(x, w, MatMulAttrs{false, true}) : dequant_matmul(x, w);
  const std::string bias = name.substr(0, name.size() - std::string(".weight").size()) + ".bias";
  if (has(bias)) y = y + weight(bias, {out});
  return y;
}

Value Blocks::gated_ffn(Value x, int64_t layer, bool gelu_tanh) {
  const std::string gate = names::blk(layer, "ffn_gate.weight"), up = names::blk(layer, "ffn_up.weight");
  Value h;
  if (const auto gu_type = stacked_dtype({f_.tensor(gate).type, f_.tensor(up).type})) {
    // One projection to [gate | up] and one fused GLU instead of two
    // matmuls, an activation and a multiply.
    Value gu = linear_fused(x, names::blk(layer, names::kGateUpSuffix), *gu_type, 2 * c_.ffn);
    h = gelu_tanh ? geglu(gu, true) : swiglu(gu);
  } else {
    Value g = linear(x, gate, c_.ffn, c_.hidden);
    h = (gelu_tanh ? rlx::gelu_tanh(g) : silu(g)) * linear(x, up, c_.ffn, c_.hidden);
  }
  return linear(h, names::blk(layer, "ffn_down.weight"), c_.hidden, c_.ffn);
}

Value Blocks::stacked_swiglu_ffn(Value x, int64_t layer) {
  Value h = swiglu(linear(x, names::blk(layer, "ffn_up.weight"), 2 * c_.ffn, c_.hidden));
  return linear(h, names::blk(layer, "ffn_down.weight"), c_.hidden, c_.ffn);
}

Value Blocks::linear_fused(Value x, const std::string& name, DType stored, int64_t rows) {
  const DType dt = is_float(stored) ? DType::F32 : stored;
  Value w = param(g_, name, dt, {rows, c_.hidden});
  return is_float(dt) ? matmul(x, w, MatMulAttrs{false, true}) : dequant_matmul(x, w);
}

Blocks::Qkv Blocks::qkv(Value x, int64_t layer) {
  auto w = [&](const char* s) { return names::blk(layer, s); };
  const int64_t H = c_.hidden, QW = c_.n_heads * c_.head_dim, KW = c_.n_kv_heads * c_.head_dim;
  if (has(w("attn_qkv.weight"))) {  // stacked in the file (Phi-3)
    Value y = linear(x, w("attn_qkv.weight"), QW + 2 * KW, H);
    return {y, y, narrow(y, 2, QW + KW, KW), 0, QW};
  }
  const DType tq = f_.tensor(w("attn_q.weight")).type, tk = f_.tensor(w("attn_k.weight")).type,
              tv = f_.tensor(w("attn_v.weight")).type;
  const int nb = has(w("attn_q.bias")) + has(w("attn_k.bias")) + has(w("attn_v.bias"));
  const std::optional<DType> all3 = stacked_dtype({tq, tk, tv}), qk = stacked_dtype({tq, tk});
  // Biases are stacked too, so stack only parts that all have one or none.
  if (all3 && (nb == 0 || nb == 3)) {
    Value y = linear_fused(x, w(names::kQkvSuffix), *all3, QW + 2 * KW);
    if (nb == 3) y = y + param(g_, w(names::kQkvBiasSuffix), DType::F32, {QW + 2 * KW});
    return {y, y, narrow(y, 2, QW + KW, KW), 0, QW};
  }
  if (qk && has(w("attn_q.bias")) == has(w("attn_k.bias"))) {
    Value y = linear_fused(x, w(names::kQkSuffix), *qk, QW + KW);
    if (has(w("attn_q.bias"))) y = y + param(g_, w(names::kQkBiasSuffix), DType::F32, {QW + KW});
    return {y, y, linear(x, w("attn_v.weight"), KW, H), 0, QW};
  }
  return {linear(x, w("attn_q.weight"), QW, H), linear(x, w("attn_k.weight"), KW, H),
          linear(x, w("attn_v.weight"), KW, H)};
}

Value Blocks::rms(Value x, const std::string& name, int64_t width) {
  return rms_norm(x, weight(name, {width}), c_.rms_eps);
}

Value Blocks::post_norm(Value x, Value a, const std::string& w, int64_t width) {
  return post_rms_norm(x, a, weight(w, {width}), c_.rms_eps);
}

PostNormPair Blocks::post_norm_pair(Value x, Value a, const std::string& w1, const std::string& w2, int64_t width) {
  return post_rms_norm_pair(x, a, weight(w1, {width}), weight(w2, {width}), c_.rms_eps);
}

RopeAttrs Blocks::rope_attrs(int64_t heads, float base, RopePairing pairing, int64_t col, bool local) const {
  RopeAttrs a;
  a.src_offset = col;
  a.num_heads = static_cast<int>(heads);
  a.head_dim = static_cast<int>(c_.head_dim);
  a.n_rot = static_cast<int>(c_.n_rot);
  a.pairing = pairing;
  a.freq_base = base;
  // Gemma 3's sliding-window layers rotate unscaled (as llama.cpp and
  // transformers do); every other layer takes the file's scaling.
  if (!local) {
    a.freq_scale = c_.rope_freq_scale;
    a.freq_factors = c_.rope_freq_factors;
  }
  a.norm_eps = c_.rms_eps;
  return a;
}

Value Blocks::attend(int64_t layer, const Qkv& p, const RopeSpec& r, bool local, float scale) {
  const DType kv = o_.kv_dtype == o_.compute ? DType::F32 : o_.kv_dtype;
  const int64_t width = c_.n_kv_heads * c_.head_dim;
  auto norm = [&](const std::string& name) { return name.empty() ? Value{} : weight(name, {c_.head_dim}); };
  auto attrs = [&](int64_t heads, int64_t col) {
    RopeAttrs a = rope_attrs(heads, r.base, r.pairing, col, local);
    if (!r.rotate) a.freq_scale = 0.0f;  // every angle 0: the values pass unrotated
    return a;
  };
  Value q = rlx::rope(p.q, positions_, attrs(c_.n_heads, p.q_col), norm(r.q_norm));
  Value kc = state(g_, str("cache.", layer, ".k"), kv, {1, o_.ctx, width});
  Value vc = state(g_, str("cache.", layer, ".v"), kv, {1, o_.ctx, width});
  // k is rotated as it is written; both writes convert to the cache dtype
  // themselves (no Rope or Cast nodes between the projection and the cache).
  kc = rope_write_slice(kc, p.k, offset_, positions_, attrs(c_.n_kv_heads, p.k_col), norm(r.k_norm));
  vc = write_slice(vc, p.v, offset_, 1);
  AttentionAttrs a;
  a.num_heads = static_cast<int>(c_.n_heads);
  a.num_kv_heads = static_cast<int>(c_.n_kv_heads);
  a.head_dim = static_cast<int>(c_.head_dim);
  a.scale = scale;
  a.softcap = c_.attn_softcap;
  a.mask = local ? MaskKind::SlidingWindow : MaskKind::Causal;
  a.window = local ? c_.sliding_window : 0;
  a.kv_len_input = true;  // keys past kv_len are not yet written
  Value o = op(OpKind::Attention, a, {as(q, kv), kc, vc, kv_len_}, str("blk.", layer, ".attention"));
  return as(o, DType::F32);
}

void Blocks::head(Value x) { head_normed(rms(x, names::kOutputNorm, c_.hidden)); }

void Blocks::head_normed(Value normed) {
  if (o_.hidden) output("hidden", reshape(normed, {"L", c_.hidden}));
  if (!o_.logits && !o_.token) return;
  // Row L - 1, the last position: a view once L is bound, so no kernel.
  Value h = narrow(reshape(normed, {"L", c_.hidden}), 0, -1, 1);  // [1, hidden]
  Value logits = linear(h, c_.tied_output ? names::kTokenEmbd : names::kOutput, c_.vocab, c_.hidden);
  if (c_.logit_scale > 0) logits = logits / scalar(g_, c_.logit_scale);  // Granite
  if (c_.final_softcap > 0) {
    Value cap = scalar(g_, c_.final_softcap);
    logits = unary(UnaryFn::Tanh, logits / cap) * cap;
  }
  if (o_.logits) output("logits", logits);
  if (o_.token) output("token", sample(logits, o_.sampling, step_));
}

}  // namespace rlx::llm::detail
