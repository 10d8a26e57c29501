// Pieces shared by the architecture builders (gemma.cpp, qwen3.cpp,
// llama.cpp): graph inputs, weights declared with their GGUF dtype, linear
// layers (DequantMatMul for packed weights, MatMul for float ones), norms,
// RoPE, attention over the KV cache and the output head.
#pragma once
#include <string>

#include "rlx/models/llm/model.h"

namespace rlx::llm::detail {

class Blocks {
 public:
  Blocks(Graph& g, const LlmConfig& cfg, const GgufFile& f, const BuildOptions& o);

  // Fails with one FormatError listing every missing or mis-shaped tensor the
  // architecture needs.
  void check_weights() const;

  // token_embd rows for the input tokens, f32 [1, L, hidden].
  Value embed();
  // x · Wᵀ (+ bias when the file has "<name minus .weight>.bias").
  Value linear(Value x, const std::string& name, int64_t out, int64_t in);
  // The gated FFN: act(gate(x)) · up(x), then down. Gate and up share one
  // fused projection when their dtypes match.
  Value gated_ffn(Value x, int64_t layer, bool gelu_tanh);
  // The same from a file that stores [gate | up] as one ffn_up (Phi-3).
  Value stacked_swiglu_ffn(Value x, int64_t layer);
  // The attention input projections of a layer. q and k are the rows their
  // heads start in at column q_col / k_col: one stacked [q | k | v] (or
  // [q | k]) projection when the dtypes allow, so Rope reads q and k straight
  // out of it; v is a Narrow of it (a view at L = 1) or its own projection.
  // A file's own stacked attn_qkv (Phi-3) is used as it is.
  struct Qkv {
    Value q, k, v;
    int64_t q_col = 0, k_col = 0;
  };
  Qkv qkv(Value x, int64_t layer);
  Value rms(Value x, const std::string& name, int64_t width);
  // Post-norm residual x + rms(a, w) (Gemma), and the same with the next
  // norm rms(x + rms(a, w1), w2) from one node.
  Value post_norm(Value x, Value a, const std::string& w, int64_t width);
  PostNormPair post_norm_pair(Value x, Value a, const std::string& w1, const std::string& w2, int64_t width);
  // RoPE of the layer's q and k; with a norm weight name each head is
  // RMS-normalized first, in the same op (QK-norm).
  struct RopeSpec {
    float base;
    RopePairing pairing;
    std::string q_norm, k_norm;  // [head_dim] weights, or empty
    bool rotate = true;          // false: a NoPE layer (the Rope ops turn by 0)
  };
  // Ropes q; ropes k as it writes it, and writes v, at `offset` into this
  // layer's cache (one op each); attends over the first kv_len rows.
  // Returns f32 [1, L, heads·head_dim].
  Value attend(int64_t layer, const Qkv& p, const RopeSpec& r, bool local, float scale);
  // Last position → output_norm → head (token_embd when tied) → softcap → outputs.
  void head(Value x);
  // The same from `normed`, the residual stream already through output_norm
  // (e.g. by the last layer's fused post-norm pair).
  void head_normed(Value normed);

  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

 private:
  Value weight(const std::string& name, std::vector<int64_t> shape);
  // x · Wᵀ for a param stacked by load_weights from same-dtype parts.
  Value linear_fused(Value x, const std::string& name, DType stored, int64_t rows);
  Value as(Value x, DType t) const { return x.dtype() == t ? x : cast(x, t); }
  // Rope attrs for `heads` heads starting at column `col` of the source row;
  // a global layer's carry the file's scaling (linear, frequency factors).
  RopeAttrs rope_attrs(int64_t heads, float base, RopePairing pairing, int64_t col, bool local) const;

  Graph& g_;
  const LlmConfig& c_;
  const GgufFile& f_;
  const BuildOptions& o_;
  Value tokens_, positions_, offset_, kv_len_, step_;
};

// One builder and one weight table per architecture file.
Graph build_gemma(const LlmConfig& cfg, const GgufFile& f, const BuildOptions& o);  // gemma2, gemma3
Graph build_qwen3(const LlmConfig& cfg, const GgufFile& f, const BuildOptions& o);
Graph build_llama(const LlmConfig& cfg, const GgufFile& f, const BuildOptions& o);  // llama, qwen2
Graph build_phi3(const LlmConfig& cfg, const GgufFile& f, const BuildOptions& o);
Graph build_olmo2(const LlmConfig& cfg, const GgufFile& f, const BuildOptions& o);
extern const std::vector<LayerWeight> kGemma2Weights;
extern const std::vector<LayerWeight> kGemma3Weights;
extern const std::vector<LayerWeight> kQwen3Weights;
extern const std::vector<LayerWeight> kLlamaWeights;
extern const std::vector<LayerWeight> kPhi3Weights;
extern const std::vector<LayerWeight> kOlmo2Weights;

}  // namespace rlx::llm::detail
