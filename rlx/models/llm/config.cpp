#include "rlx/models/llm/config.h"

#include <cmath>

#include "rlx/core/error.h"

namespace rlx::llm {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::Gemma2: return "gemma2";
    case Arch::Gemma3: return "gemma3";
    case Arch::Qwen3: return "qwen3";
    case Arch::Qwen2: return "qwen2";
    case Arch::Llama: return "llama";
    case Arch::Phi3: return "phi3";
    case Arch::Granite: return "granite";
    case Arch::SmolLM3: return "smollm3";
    case Arch::Olmo2: return "olmo2";
  }
  return "?";
}

std::optional<Arch> arch_from_name(const std::string& name) {
  for (Arch a : {Arch::Gemma2, Arch::Gemma3, Arch::Qwen3, Arch::Qwen2, Arch::Llama, Arch::Phi3, Arch::Granite,
                 Arch::SmolLM3, Arch::Olmo2})
    if (name == arch_name(a)) return a;
  return std::nullopt;
}

namespace {

// "<arch>.<key>" with a message naming the full key when it is missing.
struct Meta {
  const GgufFile& f;
  std::string arch;
  std::string key(const char* k) const { return arch + "." + k; }
  int64_t need_int(const char* k) const {
    const std::string full = key(k);
    RLX_FORMAT_CHECK(f.contains(full), f.source(), ": metadata key '", full, "' is missing (needed for ", arch,
                     " models)");
    return f.get_int(full);
  }
  int64_t int_or(const char* k, int64_t fallback) const {
    const std::string full = key(k);
    return f.contains(full) ? f.get_int(full) : fallback;
  }
  float float_or(const char* k, double fallback) const {
    const std::string full = key(k);
    return static_cast<float>(f.contains(full) ? f.get_float(full) : fallback);
  }
};

// An optional F32 [n_rot/2] tensor of positive frequency divisors; empty when absent.
std::vector<float> read_rope_factors(const GgufFile& f, const char* name, int64_t n_rot) {
  const GgufTensorInfo* ff = f.find_tensor(name);
  if (!ff) return {};
  const auto shape = ff->shape();
  RLX_FORMAT_CHECK(ff->type == DType::F32 && shape.size() == 1 && shape[0] == n_rot / 2, f.source(), ": tensor '",
                   name, "' must be F32 [", n_rot / 2, "] (rope.dimension_count / 2)");
  const Tensor t = f.view(*ff);
  const float* v = t.data<float>();
  std::vector<float> out(v, v + shape[0]);
  for (size_t i = 0; i < out.size(); ++i)
    RLX_FORMAT_CHECK(std::isfinite(out[i]) && out[i] > 0, f.source(), ": ", name, "[", i, "] = ", out[i],
                     " (must be finite and positive)");
  return out;
}

}  // namespace

LlmConfig LlmConfig::from_gguf(const GgufFile& f) {
  RLX_FORMAT_CHECK(f.contains("general.architecture"), f.source(), ": metadata key 'general.architecture' is missing");
  const std::string arch = f.get<std::string>("general.architecture");
  LlmConfig c;
  c.arch_key = arch;
  const std::optional<Arch> known = arch_from_name(arch);
  if (!known)
    throw Unsupported(str(f.source(), ": architecture '", arch,
                          "' is not supported (rlx generates with gemma2, gemma3, qwen3, qwen2, llama, phi3, granite, "
                          "smollm3 and olmo2)"));
  c.arch = *known;
  const Meta m{f, arch};
  c.n_layers = m.need_int("block_count");
  c.hidden = m.need_int("embedding_length");
  c.ffn = m.need_int("feed_forward_length");
  c.n_heads = m.need_int("attention.head_count");
  c.n_kv_heads = m.int_or("attention.head_count_kv", c.n_heads);
  c.context_length = m.need_int("context_length");
  RLX_FORMAT_CHECK(c.n_layers > 0 && c.n_layers <= 1024 && c.hidden > 0 && c.ffn > 0 && c.n_heads > 0 &&
                       c.n_kv_heads > 0 && c.context_length > 0,
                   f.source(), ": implausible sizes (block_count ", c.n_layers, ", embedding_length ", c.hidden,
                   ", feed_forward_length ", c.ffn, ", head_count ", c.n_heads, ", head_count_kv ", c.n_kv_heads,
                   ", context_length ", c.context_length, ")");
  RLX_FORMAT_CHECK(c.n_heads % c.n_kv_heads == 0, f.source(), ": ", m.key("attention.head_count"), " ", c.n_heads,
                   " is not a multiple of ", m.key("attention.head_count_kv"), " ", c.n_kv_heads);
  c.head_dim = m.int_or("attention.key_length", c.hidden / c.n_heads);
  const int64_t value_dim = m.int_or("attention.value_length", c.head_dim);
  RLX_FORMAT_CHECK(c.head_dim > 0 && c.head_dim <= 1024 && c.head_dim % 2 == 0, f.source(), ": ",
                   m.key("attention.key_length"), " ", c.head_dim, " must be even and in [2, 1024]");
  if (value_dim != c.head_dim)
    throw Unsupported(str(f.source(), ": value_length ", value_dim, " differs from key_length ", c.head_dim,
                          " (not supported)"));
  const std::string eps_key = m.key("attention.layer_norm_rms_epsilon");
  RLX_FORMAT_CHECK(f.contains(eps_key), f.source(), ": metadata key '", eps_key, "' is missing (needed for ", arch,
                   " models)");
  c.rms_eps = static_cast<float>(f.get_float(eps_key));
  c.rope_base = m.float_or("rope.freq_base", 10000.0);
  c.rope_base_local = c.rope_base;
  c.n_rot = m.int_or("rope.dimension_count", c.head_dim);
  RLX_FORMAT_CHECK(c.n_rot >= 2 && c.n_rot <= c.head_dim && c.n_rot % 2 == 0, f.source(), ": ",
                   m.key("rope.dimension_count"), " ", c.n_rot, " must be even and at most the head size ",
                   c.head_dim);
  // Linear scaling as llama.cpp reads it: rope.scaling.factor, else the older
  // rope.scale_linear, whatever the type ("none" or "linear"); 0 or absent means none.
  const std::string scaling = f.get_or<std::string>(m.key("rope.scaling.type"), "none");
  // Phi-3's LongRoPE comes as factor tensors (read below), whatever the type says.
  const bool longrope = c.arch == Arch::Phi3 && (scaling == "longrope" || scaling == "su");
  if (scaling != "none" && scaling != "linear" && !longrope)
    throw Unsupported(str(f.source(), ": ", m.key("rope.scaling.type"), " '", scaling,
                          "' is not supported (none, linear)"));
  const float factor = longrope ? 0.0f : m.float_or("rope.scaling.factor", m.float_or("rope.scale_linear", 0.0));
  RLX_FORMAT_CHECK(std::isfinite(factor) && factor >= 0, f.source(), ": ", m.key("rope.scaling.factor"), " ", factor,
                   " must be positive (or 0: none)");
  c.rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
  c.attn_softcap = m.float_or("attn_logit_softcapping", 0.0);
  c.final_softcap = m.float_or("final_logit_softcapping", 0.0);
  RLX_FORMAT_CHECK(std::isfinite(c.rms_eps) && c.rms_eps > 0 && std::isfinite(c.rope_base) && c.rope_base > 0 &&
                       c.attn_softcap >= 0 && c.final_softcap >= 0,
                   f.source(), ": implausible epsilon, rope base or softcap");
  if (c.arch == Arch::Gemma3) {
    // llama.cpp and transformers: 5 local layers (RoPE base 10000, sliding
    // window) then 1 global layer (rope.freq_base, full causal attention).
    // The local layers keep RoPE base 10000 (or rope.freq_base_swa) and no
    // scaling; rope.scaling applies to the global ones only.
    c.sliding_window = m.int_or("attention.sliding_window", 0);
    c.swa_pattern = 6;
    c.rope_base_local = m.float_or("rope.freq_base_swa", 10000.0);
    RLX_FORMAT_CHECK(std::isfinite(c.rope_base_local) && c.rope_base_local > 0, f.source(), ": ",
                     m.key("rope.freq_base_swa"), " must be positive");
    RLX_FORMAT_CHECK(c.sliding_window >= 0, f.source(), ": negative sliding window");
  } else if (c.arch == Arch::Gemma2) {
    // Sliding-window and global layers alternate, the first one local; one
    // RoPE base for both (transformers' Gemma2, llama.cpp's swa pattern 2).
    c.sliding_window = m.int_or("attention.sliding_window", 0);
    c.swa_pattern = 2;
    RLX_FORMAT_CHECK(c.sliding_window >= 0, f.source(), ": negative sliding window");
  }
  if (c.arch == Arch::Phi3) {
    // llama.cpp turns Phi-3's sliding window off (attention.sliding_window is
    // read and ignored), so every layer attends to the whole cache here too.
    c.rope_orig_ctx = m.int_or("rope.scaling.original_context_length", c.context_length);
    c.rope_attn_factor = m.float_or("rope.scaling.attn_factor", 1.0);
    RLX_FORMAT_CHECK(c.rope_orig_ctx > 0 && std::isfinite(c.rope_attn_factor) && c.rope_attn_factor > 0, f.source(),
                     ": implausible ", m.key("rope.scaling.original_context_length"), " ", c.rope_orig_ctx, " or ",
                     m.key("rope.scaling.attn_factor"), " ", c.rope_attn_factor);
    c.rope_factors_long = read_rope_factors(f, "rope_factors_long.weight", c.n_rot);
    c.rope_factors_short = read_rope_factors(f, "rope_factors_short.weight", c.n_rot);
    RLX_FORMAT_CHECK(c.rope_factors_long.empty() == c.rope_factors_short.empty(), f.source(),
                     ": rope_factors_long.weight and rope_factors_short.weight come as a pair");
  }
  if (c.arch == Arch::Granite) {
    // llama.cpp's keys; rope.scaling.finetuned = false would mean no RoPE at all.
    c.embedding_scale = m.float_or("embedding_scale", 0.0);
    c.residual_scale = m.float_or("residual_scale", 0.0);
    c.attention_scale = m.float_or("attention.scale", 0.0);
    c.logit_scale = m.float_or("logit_scale", 0.0);
    for (float v : {c.embedding_scale, c.residual_scale, c.attention_scale, c.logit_scale})
      RLX_FORMAT_CHECK(std::isfinite(v) && v >= 0, f.source(), ": granite multipliers must be finite and >= 0 (got ",
                       c.embedding_scale, ", ", c.residual_scale, ", ", c.attention_scale, ", ", c.logit_scale, ")");
    if (!f.get_or<bool>(m.key("rope.scaling.finetuned"), true))
      throw Unsupported(str(f.source(), ": a granite model without RoPE (", m.key("rope.scaling.finetuned"),
                            " = false) is not supported"));
  }
  if (c.arch == Arch::SmolLM3) c.no_rope_step = 4;  // llama.cpp's constant: no GGUF key says it
  if (c.arch == Arch::Olmo2 && m.int_or("attention.sliding_window", 0) > 0)
    throw Unsupported(str(f.source(), ": an olmo2 file with ", m.key("attention.sliding_window"),
                          " (OLMo 3's sliding-window layers) is not supported"));
  const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  RLX_FORMAT_CHECK(emb != nullptr, f.source(), ": tensor 'token_embd.weight' is missing");
  const auto emb_shape = emb->shape();
  RLX_FORMAT_CHECK(emb_shape.size() == 2 && emb_shape[1] == c.hidden, f.source(),
                   ": tensor 'token_embd.weight' must be [vocab, ", c.hidden, "]");
  c.vocab = emb_shape[0];
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  // Llama 3.1+ files carry their RoPE scaling as per-pair frequency divisors
  // (llama.cpp's converter computes them from rope_scaling "llama3"). Gemma
  // has none: llama.cpp's gemma2 and gemma3 graphs pass no factors.
  const bool gemma = c.arch == Arch::Gemma2 || c.arch == Arch::Gemma3;
  if (!gemma) c.rope_freq_factors = read_rope_factors(f, "rope_freqs.weight", c.n_rot);
  return c;
}

std::string LlmConfig::summary() const {
  return str(arch_key, ": ", n_layers, " layers, hidden ", hidden, ", ffn ", ffn, ", heads ", n_heads, "/", n_kv_heads,
             " x ", head_dim, ", vocab ", vocab, ", context ", context_length,
             sliding_window > 0 ? str(", sliding window ", sliding_window) : std::string(),
             rope_freq_scale != 1.0f ? str(", rope scale ", rope_freq_scale) : std::string(),
             rope_freq_factors.empty() ? std::string() : ", rope frequency factors",
             rope_factors_long.empty() ? std::string() : str(", LongRoPE (original context ", rope_orig_ctx, ")"),
             no_rope_step > 0 ? str(", no RoPE every ", no_rope_step, " layers") : std::string(),
             tied_output ? ", tied output" : "");
}

}  // namespace rlx::llm
