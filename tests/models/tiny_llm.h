// Tiny random-weight GGUF LLMs for tests (one per supported architecture),
// written with rlx's GgufWriter, and an independent float64 reference forward
// pass in plain loops (no rlx ops) to check rlx's logits against.
//
// Weights mix F32, F16, Q8_0 and Q4_K; the reference reads back the very
// values the file holds (dequantized), so the comparison measures the model
// math, not quantization error.
#pragma once
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "rlx/core/half.h"
#include "rlx/formats/gguf.h"
#include "rlx/formats/quant.h"

namespace rlx::test {

struct TinySpec {
  std::string arch;  // gemma2 | gemma3 | qwen3 | qwen2 | llama | phi3 | granite | smollm3 | olmo2
  int64_t layers = 2;
  int64_t hidden = 256;  // a multiple of 256 so matrices with K = hidden can be Q4_K
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 32;
  int64_t ffn = 512;
  int64_t vocab = 320;
  int64_t context = 256;
  int64_t window = 0;  // gemma2/3: sliding window of the local layers
  float attn_softcap = 0, final_softcap = 0;  // gemma2: score and logit soft-capping (0: none)
  float eps = 1e-6f;
  float rope_base = 10000.0f;
  float rope_linear = 0;      // > 0: rope.scaling.type linear with this factor (global layers only)
  bool rope_freqs = false;    // rope_freqs.weight: per-pair frequency divisors (Llama 3.1+)
  bool biases = false;        // Q/K/V biases (qwen2)
  // phi3: Q|K|V stored as one attn_qkv and gate|up as one ffn_up; RoPE over
  // the first n_rot dims of each head (0: all); LongRoPE factor pairs with the
  // original context (the tests run with --ctx 8-64, so 4 picks the long set
  // and 128 the short one) and the attention factor on the rotated dims.
  bool stacked_in_file = false;
  int64_t n_rot = 0;
  int64_t rope_orig_ctx = 0;  // > 0: rope_factors_long/short.weight and rope.scaling.*
  float rope_attn_factor = 1.0f;
  // granite's multipliers (0: none): embeddings, residual branches, attention scale, logits ÷.
  float embedding_scale = 0, residual_scale = 0, attention_scale = 0, logit_scale = 0;
  bool tied = true;           // no output.weight
  bool fused_ffn = true;      // gate and up share a dtype (the builder fuses them)
  DType embd_type = DType::Q8_0;
  // attn_q / attn_k / attn_v types: the builder stacks q|k|v when all three
  // match and q|k when those two do.
  DType q_type = DType::Q4_K, k_type = DType::Q8_0, v_type = DType::F16;
};

// `arch` is an architecture, or one of the variants "gemma3_scaled" (linear
// RoPE scaling, which Gemma 3 applies to its global layers only) and "llama3"
// (rope_freqs.weight frequency factors and base 500000, as Llama 3.1+ files).
//
// Phi-3 variants: "phi3" (Phi-3-mini-4k: every dim rotated, no scaling),
// "phi3_long" (Phi-4-mini-like: 24 of 32 dims rotated, LongRoPE's long set,
// attention factor 1.19, tied output) and "phi3_short" (Phi-3.5-like: all
// dims rotated, the short set, the same factor).
inline TinySpec tiny_spec(const std::string& variant) {
  const std::string arch = variant == "gemma3_scaled"                        ? "gemma3"
                           : variant == "llama3"                             ? "llama"
                           : variant == "phi3_long" || variant == "phi3_short" ? "phi3"
                                                                              : variant;
  TinySpec s;
  s.arch = arch;
  if (variant == "gemma3_scaled") s.rope_linear = 4.0f;
  if (variant == "llama3") {
    s.rope_freqs = true;
    s.rope_base = 5e5f;
  }
  if (arch == "gemma3") {
    // Six layers so that layer 5 is global (Gemma 3 interleaves 5 local : 1
    // global); a window of 3 is crossed by the tests' sequences.
    s.layers = 6;
    s.window = 3;
    s.rope_base = 1e6f;
    s.kv_heads = 1;
    s.q_type = s.k_type = DType::Q8_0;  // [q | k] stacked, v apart (as in the real file's Q8_0 v layers)
  } else if (arch == "gemma2") {
    // Layers alternate local / global; caps low enough that tanh bends the
    // tiny model's scores (|s| up to ~3) and logits (|l| up to ~10).
    s.layers = 4;
    s.window = 3;
    s.attn_softcap = 1.5f;
    s.final_softcap = 4.0f;
    s.q_type = s.k_type = s.v_type = DType::Q8_0;  // [q | k | v] stacked
  } else if (arch == "qwen3") {
    s.embd_type = DType::F16;
    s.rope_base = 1e6f;
    // [q | k | v] stacked as Q8_0: Q5_0 q and k converted exactly (llm::stacked_dtype)
    s.q_type = s.k_type = DType::Q5_0;
    s.v_type = DType::Q8_0;
  } else if (arch == "qwen2") {
    s.biases = true;
    s.tied = false;
    s.embd_type = DType::Q8_0;
    s.q_type = s.k_type = s.v_type = DType::Q4_K;  // [q | k | v] and the biases stacked
  } else if (arch == "phi3") {
    s.stacked_in_file = true;
    s.tied = variant == "phi3_long";
    s.q_type = s.k_type = s.v_type = DType::Q8_0;  // the file's attn_qkv type
    if (variant != "phi3") {
      s.rope_orig_ctx = variant == "phi3_long" ? 4 : 128;
      s.rope_attn_factor = 1.19f;
    }
    if (variant == "phi3_long") s.n_rot = 24;
  } else if (arch == "granite") {  // Granite 3's multipliers, pairwise RoPE like Llama
    s.tied = false;
    s.embedding_scale = 12.0f;
    s.residual_scale = 0.22f;
    s.attention_scale = 0.0625f;
    s.logit_scale = 6.0f;
    s.q_type = s.k_type = s.v_type = DType::Q8_0;
  } else if (arch == "olmo2") {  // post-norms only, whole-row Q/K norms
    s.tied = false;
    s.q_type = s.k_type = s.v_type = DType::Q8_0;
  } else if (arch == "smollm3") {  // Llama's layer; the fourth rotates nothing (NoPE)
    s.layers = 4;
    s.q_type = s.k_type = DType::Q8_0;
  } else if (arch == "llama") {  // q, k, v of three types: no stacking
    s.tied = false;
    s.fused_ffn = false;
    s.embd_type = DType::F32;
    s.kv_heads = 1;
  }
  return s;
}

// The frequency divisors a "llama3" tiny file holds: 1 for the fastest pair up
// to 8 for the slowest (Llama 3.1 keeps high frequencies and divides low ones by 8).
inline std::vector<float> tiny_freq_factors(const TinySpec& s) {
  std::vector<float> f;
  const int64_t half = s.head_dim / 2;
  for (int64_t i = 0; i < half; ++i) f.push_back(1.0f + 7.0f * static_cast<float>(i) / static_cast<float>(half - 1));
  return f;
}

// LongRoPE's two sets of divisors, n_rot/2 each: long from 1 to 4, short from 1 to 1.5.
inline std::vector<float> tiny_longrope_factors(const TinySpec& s, bool long_set) {
  const int64_t half = (s.n_rot > 0 ? s.n_rot : s.head_dim) / 2;
  std::vector<float> f;
  for (int64_t i = 0; i < half; ++i)
    f.push_back(1.0f + (long_set ? 3.0f : 0.5f) * static_cast<float>(i) / static_cast<float>(half - 1));
  return f;
}

// The model as the reference sees it: every tensor as f64 values.
struct TinyModel {
  TinySpec spec;
  std::map<std::string, std::vector<double>> w;
  const std::vector<double>& at(const std::string& name) const { return w.at(name); }
};

inline std::string blk(int64_t i, const std::string& s) { return "blk." + std::to_string(i) + "." + s; }

// Writes the GGUF to `path` and returns the values it holds.
inline TinyModel write_tiny_gguf(const TinySpec& s, const std::string& path, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  GgufWriter gw;
  TinyModel m{s, {}};
  const std::string a = s.arch;
  gw.set("general.architecture", GgufValue(a));
  gw.set(a + ".block_count", GgufValue(static_cast<uint32_t>(s.layers)));
  gw.set(a + ".context_length", GgufValue(static_cast<uint32_t>(s.context)));
  gw.set(a + ".embedding_length", GgufValue(static_cast<uint32_t>(s.hidden)));
  gw.set(a + ".feed_forward_length", GgufValue(static_cast<uint32_t>(s.ffn)));
  gw.set(a + ".attention.head_count", GgufValue(static_cast<uint32_t>(s.heads)));
  gw.set(a + ".attention.head_count_kv", GgufValue(static_cast<uint32_t>(s.kv_heads)));
  gw.set(a + ".attention.key_length", GgufValue(static_cast<uint32_t>(s.head_dim)));
  gw.set(a + ".attention.value_length", GgufValue(static_cast<uint32_t>(s.head_dim)));
  gw.set(a + ".attention.layer_norm_rms_epsilon", GgufValue(s.eps));
  gw.set(a + ".rope.freq_base", GgufValue(s.rope_base));
  if (s.window > 0) gw.set(a + ".attention.sliding_window", GgufValue(static_cast<uint32_t>(s.window)));
  if (s.attn_softcap > 0) gw.set(a + ".attn_logit_softcapping", GgufValue(s.attn_softcap));
  if (s.final_softcap > 0) gw.set(a + ".final_logit_softcapping", GgufValue(s.final_softcap));
  if (s.rope_linear > 0) {
    gw.set(a + ".rope.scaling.type", GgufValue(std::string("linear")));
    gw.set(a + ".rope.scaling.factor", GgufValue(s.rope_linear));
  }
  if (s.n_rot > 0) gw.set(a + ".rope.dimension_count", GgufValue(static_cast<uint32_t>(s.n_rot)));
  if (a == "granite") {
    gw.set(a + ".embedding_scale", GgufValue(s.embedding_scale));
    gw.set(a + ".residual_scale", GgufValue(s.residual_scale));
    gw.set(a + ".attention.scale", GgufValue(s.attention_scale));
    gw.set(a + ".logit_scale", GgufValue(s.logit_scale));
  }
  if (s.rope_orig_ctx > 0) {
    gw.set(a + ".rope.scaling.original_context_length", GgufValue(static_cast<uint32_t>(s.rope_orig_ctx)));
    gw.set(a + ".rope.scaling.attn_factor", GgufValue(s.rope_attn_factor));
    for (bool long_set : {true, false}) {
      const std::vector<float> f = tiny_longrope_factors(s, long_set);
      gw.add_tensor(long_set ? "rope_factors_long.weight" : "rope_factors_short.weight",
                    Tensor::from(f, {static_cast<int64_t>(f.size())}));
    }
  }
  if (s.rope_freqs) {
    const std::vector<float> f = tiny_freq_factors(s);
    gw.add_tensor("rope_freqs.weight", Tensor::from(f, {static_cast<int64_t>(f.size())}));
  }

  // `scale` sets the spread; `offset` centres norm weights near 1.
  auto add = [&](const std::string& name, std::vector<int64_t> shape, DType type, float scale, float offset = 0) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = offset + scale * uni(rng);
    Tensor f32 = Tensor::from(v, shape);
    Tensor stored = type == DType::F32 ? f32 : type == DType::F16 ? f32.to(DType::F16) : quantize(f32, type);
    gw.add_tensor(name, stored);
    Tensor back = type == DType::F32 ? f32 : dequantize(stored);
    const float* p = back.data<float>();
    m.w[name] = std::vector<double>(p, p + n);
  };
  const int64_t H = s.hidden, D = s.head_dim, QW = s.heads * D, KW = s.kv_heads * D;
  const float wh = 1.0f / std::sqrt(static_cast<float>(H));
  const bool gemma = a == "gemma2" || a == "gemma3";
  add("token_embd.weight", {s.vocab, H}, s.embd_type, gemma ? 0.1f : 1.0f);
  add("output_norm.weight", {H}, DType::F32, 0.2f, 1.0f);
  if (!s.tied) add("output.weight", {s.vocab, H}, DType::Q8_0, wh);
  const bool olmo2 = a == "olmo2";
  for (int64_t i = 0; i < s.layers; ++i) {
    if (!olmo2) add(blk(i, "attn_norm.weight"), {H}, DType::F32, 0.2f, 1.0f);
    if (s.stacked_in_file) {
      add(blk(i, "attn_qkv.weight"), {QW + 2 * KW, H}, s.q_type, 2 * wh);
    } else {
      add(blk(i, "attn_q.weight"), {QW, H}, s.q_type, 2 * wh);
      add(blk(i, "attn_k.weight"), {KW, H}, s.k_type, 2 * wh);
      add(blk(i, "attn_v.weight"), {KW, H}, s.v_type, wh);
    }
    if (s.biases) {
      add(blk(i, "attn_q.bias"), {QW}, DType::F32, 0.2f);
      add(blk(i, "attn_k.bias"), {KW}, DType::F32, 0.2f);
      add(blk(i, "attn_v.bias"), {KW}, DType::F32, 0.2f);
    }
    if (a == "gemma3" || a == "qwen3" || olmo2) {  // per head, or (olmo2) over whole rows
      add(blk(i, "attn_q_norm.weight"), {olmo2 ? QW : D}, DType::F32, 0.2f, 1.0f);
      add(blk(i, "attn_k_norm.weight"), {olmo2 ? KW : D}, DType::F32, 0.2f, 1.0f);
    }
    add(blk(i, "attn_output.weight"), {H, QW}, DType::Q8_0, 1.0f / std::sqrt(static_cast<float>(QW)));
    if (!olmo2) add(blk(i, "ffn_norm.weight"), {H}, DType::F32, 0.2f, 1.0f);
    if (s.stacked_in_file) {
      add(blk(i, "ffn_up.weight"), {2 * s.ffn, H}, DType::Q4_K, 2 * wh);  // [gate | up]
    } else {
      add(blk(i, "ffn_gate.weight"), {s.ffn, H}, s.fused_ffn ? DType::Q4_K : DType::Q8_0, 2 * wh);
      add(blk(i, "ffn_up.weight"), {s.ffn, H}, DType::Q4_K, 2 * wh);
    }
    add(blk(i, "ffn_down.weight"), {H, s.ffn}, DType::Q8_0, 1.0f / std::sqrt(static_cast<float>(s.ffn)));
    if (gemma || olmo2) {
      add(blk(i, "post_attention_norm.weight"), {H}, DType::F32, 0.2f, 1.0f);
      add(blk(i, "post_ffw_norm.weight"), {H}, DType::F32, 0.2f, 1.0f);
    }
  }
  gw.write(path);
  return m;
}

// ---- float64 reference forward ---------------------------------------------

namespace ref {

inline void rms(std::vector<double>& x, size_t off, size_t n, const std::vector<double>& w, double eps) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (size_t i = 0; i < n; ++i) x[off + i] = x[off + i] * r * w[i];
}

// y[out] = W[out, in] · x (+ bias)
inline std::vector<double> linear(const std::vector<double>& x, const std::vector<double>& W, int64_t out,
                                  int64_t in, const std::vector<double>* bias = nullptr) {
  std::vector<double> y(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    double acc = bias ? (*bias)[static_cast<size_t>(o)] : 0.0;
    for (int64_t k = 0; k < in; ++k) acc += W[static_cast<size_t>(o * in + k)] * x[static_cast<size_t>(k)];
    y[static_cast<size_t>(o)] = acc;
  }
  return y;
}

// θ_i = pos · scale · base^(−2i/R) / factors[i] (no factors: 1) for the
// first R = n_rot dims of each head (0: all D); the rotated values are
// multiplied by mscale (llama.cpp's attention factor), the others pass.
inline void rope(std::vector<double>& x, int64_t heads, int64_t D, int64_t pos, double base, bool neox,
                 double scale = 1.0, const std::vector<float>& factors = {}, int64_t n_rot = 0,
                 double mscale = 1.0) {
  const int64_t R = n_rot > 0 ? n_rot : D;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < R / 2; ++i) {
      const double divisor = factors.empty() ? 1.0 : static_cast<double>(factors[static_cast<size_t>(i)]);
      const double theta = static_cast<double>(pos) * scale *
                           std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(R)) / divisor;
      const size_t a = static_cast<size_t>(h * D + (neox ? i : 2 * i));
      const size_t b = static_cast<size_t>(h * D + (neox ? i + R / 2 : 2 * i + 1));
      const double x0 = x[a], x1 = x[b];
      x[a] = (x0 * std::cos(theta) - x1 * std::sin(theta)) * mscale;
      x[b] = (x0 * std::sin(theta) + x1 * std::cos(theta)) * mscale;
    }
}

// Rows [r0, r0 + n) of a row-major [rows, cols] matrix.
inline std::vector<double> rows_of(const std::vector<double>& W, int64_t cols, int64_t r0, int64_t n) {
  return std::vector<double>(W.begin() + r0 * cols, W.begin() + (r0 + n) * cols);
}

inline double round_f16(double v) { return f16_to_f32(f32_to_f16(static_cast<float>(v))); }

}  // namespace ref

// The residual stream of every position after the last layer (before the
// final norm), for `tokens` at positions 0..n-1. With kv_f16, Q, K, V and the
// attention output are rounded to f16 as rlx's attention over an f16 KV cache
// sees and writes them.
inline std::vector<std::vector<double>> reference_states(const TinyModel& m, const std::vector<int32_t>& tokens,
                                                         bool kv_f16 = false) {
  const TinySpec& s = m.spec;
  const bool gemma = s.arch == "gemma2" || s.arch == "gemma3", qk_norm = s.arch == "gemma3" || s.arch == "qwen3";
  const bool olmo2 = s.arch == "olmo2", post_norms = gemma || olmo2;  // olmo2: no pre-norms, whole-row Q/K norms
  const int64_t swa_pattern = s.arch == "gemma2" ? 2 : 6;
  const bool neox = s.arch != "llama" && s.arch != "granite" && s.arch != "smollm3";
  auto times = [](double scale) { return scale > 0 ? scale : 1.0; };
  const int64_t H = s.hidden, D = s.head_dim, QW = s.heads * D, KW = s.kv_heads * D, T = static_cast<int64_t>(tokens.size());
  const auto uH = static_cast<size_t>(H);
  const std::vector<double>& emb = m.at("token_embd.weight");
  std::vector<std::vector<double>> x(static_cast<size_t>(T), std::vector<double>(uH));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < H; ++j)
      x[static_cast<size_t>(t)][static_cast<size_t>(j)] =
          emb[static_cast<size_t>(tokens[static_cast<size_t>(t)] * H + j)] * (gemma ? std::sqrt(static_cast<double>(H)) : 1.0) *
          times(s.embedding_scale);
  auto bias = [&](const std::string& n) { return m.w.count(n) ? &m.at(n) : nullptr; };
  for (int64_t i = 0; i < s.layers; ++i) {
    const bool local = gemma && s.window > 0 && (i + 1) % swa_pattern != 0;
    const double base = s.arch == "gemma3" && local ? 10000.0 : s.rope_base;
    // Gemma 3's local layers rotate unscaled; the factors are Llama's.
    const double rope_scale = s.rope_linear > 0 && !local ? 1.0 / s.rope_linear : 1.0;
    // LongRoPE: the original context decides (see TinySpec).
    const std::vector<float> factors = s.rope_freqs          ? tiny_freq_factors(s)
                                       : s.rope_orig_ctx > 0 ? tiny_longrope_factors(s, s.rope_orig_ctx < 8)
                                                             : std::vector<float>{};
    std::vector<double> wq, wk, wv;
    if (s.stacked_in_file) {
      const std::vector<double>& wqkv = m.at(blk(i, "attn_qkv.weight"));
      wq = ref::rows_of(wqkv, H, 0, QW);
      wk = ref::rows_of(wqkv, H, QW, KW);
      wv = ref::rows_of(wqkv, H, QW + KW, KW);
    } else {
      wq = m.at(blk(i, "attn_q.weight"));
      wk = m.at(blk(i, "attn_k.weight"));
      wv = m.at(blk(i, "attn_v.weight"));
    }
    std::vector<std::vector<double>> q(static_cast<size_t>(T)), k(static_cast<size_t>(T)), v(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> h = x[static_cast<size_t>(t)];
      if (!olmo2) ref::rms(h, 0, uH, m.at(blk(i, "attn_norm.weight")), s.eps);
      auto& qt = q[static_cast<size_t>(t)];
      auto& kt = k[static_cast<size_t>(t)];
      auto& vt = v[static_cast<size_t>(t)];
      qt = ref::linear(h, wq, QW, H, bias(blk(i, "attn_q.bias")));
      kt = ref::linear(h, wk, KW, H, bias(blk(i, "attn_k.bias")));
      vt = ref::linear(h, wv, KW, H, bias(blk(i, "attn_v.bias")));
      if (olmo2) {
        ref::rms(qt, 0, static_cast<size_t>(QW), m.at(blk(i, "attn_q_norm.weight")), s.eps);
        ref::rms(kt, 0, static_cast<size_t>(KW), m.at(blk(i, "attn_k_norm.weight")), s.eps);
      }
      if (qk_norm) {
        for (int64_t hh = 0; hh < s.heads; ++hh) ref::rms(qt, static_cast<size_t>(hh * D), static_cast<size_t>(D), m.at(blk(i, "attn_q_norm.weight")), s.eps);
        for (int64_t hh = 0; hh < s.kv_heads; ++hh) ref::rms(kt, static_cast<size_t>(hh * D), static_cast<size_t>(D), m.at(blk(i, "attn_k_norm.weight")), s.eps);
      }
      if (s.arch != "smollm3" || (i + 1) % 4 != 0) {  // SmolLM3: no RoPE in every fourth layer
        ref::rope(qt, s.heads, D, t, base, neox, rope_scale, factors, s.n_rot, s.rope_attn_factor);
        ref::rope(kt, s.kv_heads, D, t, base, neox, rope_scale, factors, s.n_rot, s.rope_attn_factor);
      }
      if (kv_f16) {  // rlx attends in the cache dtype: Q, K and V in f16
        for (double& e : qt) e = ref::round_f16(e);
        for (double& e : kt) e = ref::round_f16(e);
        for (double& e : vt) e = ref::round_f16(e);
      }
    }
    const double scale = s.attention_scale > 0 ? s.attention_scale : 1.0 / std::sqrt(static_cast<double>(D));
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> o(static_cast<size_t>(QW), 0.0);
      for (int64_t hh = 0; hh < s.heads; ++hh) {
        const int64_t kh = hh / (s.heads / s.kv_heads);
        std::vector<double> p(static_cast<size_t>(t + 1), -INFINITY);
        double mx = -INFINITY;
        for (int64_t j = 0; j <= t; ++j) {
          if (local && t - j >= s.window) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += q[static_cast<size_t>(t)][static_cast<size_t>(hh * D + d)] * k[static_cast<size_t>(j)][static_cast<size_t>(kh * D + d)];
          p[static_cast<size_t>(j)] = s.attn_softcap > 0 ? s.attn_softcap * std::tanh(dot * scale / s.attn_softcap)
                                                         : dot * scale;
          mx = std::max(mx, p[static_cast<size_t>(j)]);
        }
        double sum = 0;
        for (double& e : p) sum += (e = std::isinf(e) ? 0.0 : std::exp(e - mx));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t d = 0; d < D; ++d)
            o[static_cast<size_t>(hh * D + d)] += p[static_cast<size_t>(j)] / sum * v[static_cast<size_t>(j)][static_cast<size_t>(kh * D + d)];
      }
      if (kv_f16)
        for (double& e : o) e = ref::round_f16(e);
      std::vector<double> a = ref::linear(o, m.at(blk(i, "attn_output.weight")), H, QW);
      if (post_norms) ref::rms(a, 0, uH, m.at(blk(i, "post_attention_norm.weight")), s.eps);
      auto& xt = x[static_cast<size_t>(t)];
      for (size_t j = 0; j < uH; ++j) xt[j] += a[j] * times(s.residual_scale);
      std::vector<double> h = xt;
      if (!olmo2) ref::rms(h, 0, uH, m.at(blk(i, "ffn_norm.weight")), s.eps);
      const std::vector<double>& wup = m.at(blk(i, "ffn_up.weight"));
      std::vector<double> g = ref::linear(h, s.stacked_in_file ? ref::rows_of(wup, H, 0, s.ffn) : m.at(blk(i, "ffn_gate.weight")), s.ffn, H);
      const std::vector<double> u = ref::linear(h, s.stacked_in_file ? ref::rows_of(wup, H, s.ffn, s.ffn) : wup, s.ffn, H);
      for (size_t j = 0; j < g.size(); ++j) {
        const double z = g[j];
        const double act = gemma ? 0.5 * z * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z)))
                                 : z / (1.0 + std::exp(-z));
        g[j] = act * u[j];
      }
      std::vector<double> dn = ref::linear(g, m.at(blk(i, "ffn_down.weight")), H, s.ffn);
      if (post_norms) ref::rms(dn, 0, uH, m.at(blk(i, "post_ffw_norm.weight")), s.eps);
      for (size_t j = 0; j < uH; ++j) xt[j] += dn[j] * times(s.residual_scale);
    }
  }
  return x;
}

// Every position's final-normed hidden state (what decoder embeddings pool).
inline std::vector<std::vector<double>> reference_hidden(const TinyModel& m, const std::vector<int32_t>& tokens) {
  std::vector<std::vector<double>> x = reference_states(m, tokens);
  for (auto& h : x) ref::rms(h, 0, h.size(), m.at("output_norm.weight"), m.spec.eps);
  return x;
}

// Logits [vocab] of the last of `tokens` (positions 0..n-1). With kv_f16,
// Q, K, V and the attention output are rounded to f16 as rlx's attention over
// an f16 KV cache sees and writes them.
inline std::vector<double> reference_logits(const TinyModel& m, const std::vector<int32_t>& tokens,
                                            bool kv_f16 = false) {
  const TinySpec& s = m.spec;
  const int64_t H = s.hidden;
  const auto uH = static_cast<size_t>(H);
  std::vector<double> h = reference_states(m, tokens, kv_f16).back();
  ref::rms(h, 0, uH, m.at("output_norm.weight"), s.eps);
  std::vector<double> logits = ref::linear(h, m.at(s.tied ? "token_embd.weight" : "output.weight"), s.vocab, H);
  if (s.logit_scale > 0)
    for (double& l : logits) l /= s.logit_scale;
  if (s.final_softcap > 0)
    for (double& l : logits) l = s.final_softcap * std::tanh(l / s.final_softcap);
  return logits;
}

}  // namespace rlx::test
