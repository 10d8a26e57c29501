#include "rlx/models/llm/model.h"

#include <algorithm>
#include <cstring>

#include "rlx/formats/quant.h"
#include "rlx/models/llm/blocks.h"

namespace rlx::llm {

std::string names::blk(int64_t layer, const char* suffix) { return str("blk.", layer, ".", suffix); }

const std::vector<LayerWeight>& layer_weights(Arch arch) {
  switch (arch) {
    case Arch::Gemma2: return detail::kGemma2Weights;
    case Arch::Gemma3: return detail::kGemma3Weights;
    case Arch::Qwen3: return detail::kQwen3Weights;
    case Arch::Qwen2:
    case Arch::Llama:
    case Arch::Granite:
    case Arch::SmolLM3: return detail::kLlamaWeights;
    case Arch::Olmo2: return detail::kOlmo2Weights;
    case Arch::Phi3: return detail::kPhi3Weights;
  }
  RLX_ASSERT(false);
}

Graph build_graph(const LlmConfig& cfg, const GgufFile& f, const BuildOptions& options) {
  switch (cfg.arch) {
    case Arch::Gemma2:
    case Arch::Gemma3: return detail::build_gemma(cfg, f, options);
    case Arch::Qwen3: return detail::build_qwen3(cfg, f, options);
    case Arch::Qwen2:
    case Arch::Llama:
    case Arch::Granite:
    case Arch::SmolLM3: return detail::build_llama(cfg, f, options);
    case Arch::Olmo2: return detail::build_olmo2(cfg, f, options);
    case Arch::Phi3: return detail::build_phi3(cfg, f, options);
  }
  RLX_ASSERT(false);
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Builder params stacked from several file tensors, rows in this order.
struct Stacked {
  const char* suffix;
  std::vector<const char*> parts;
};
const std::vector<Stacked>& stacked_params() {
  static const std::vector<Stacked> table = {
      {names::kGateUpSuffix, {"ffn_gate.weight", "ffn_up.weight"}},
      {names::kQkvSuffix, {"attn_q.weight", "attn_k.weight", "attn_v.weight"}},
      {names::kQkvBiasSuffix, {"attn_q.bias", "attn_k.bias", "attn_v.bias"}},
      {names::kQkSuffix, {"attn_q.weight", "attn_k.weight"}},
      {names::kQkBiasSuffix, {"attn_q.bias", "attn_k.bias"}},
  };
  return table;
}

// The parts' rows as one tensor in stacked_dtype (block rows are
// independent, so stacking rows of one type is concatenating bytes).
Tensor stack_rows(const GgufFile& f, const std::string& prefix, const Stacked& s) {
  std::vector<Tensor> parts;
  std::vector<DType> types;
  for (const char* p : s.parts) {
    parts.push_back(f.view(prefix + p));
    types.push_back(parts.back().dtype());
  }
  const std::optional<DType> stacked = stacked_dtype(types);
  RLX_FORMAT_CHECK(stacked.has_value(), f.source(), ": ", prefix, s.suffix, " stacks parts of types (",
                   types[0], ", ", types.back(), ") that have no common stacked form");
  const DType dt = *stacked;
  int64_t rows = 0;
  for (const Tensor& t : parts) {
    RLX_FORMAT_CHECK(t.shape().size() == parts[0].shape().size() &&
                         std::equal(t.shape().begin() + 1, t.shape().end(), parts[0].shape().begin() + 1),
                     f.source(), ": ", prefix, s.suffix, " stacks parts of different row shapes");
    rows += t.shape()[0];
  }
  std::vector<int64_t> shape = parts[0].shape();
  shape[0] = rows;
  Tensor out = Tensor::empty(dt, shape);
  auto* dst = static_cast<char*>(out.raw_mut());
  for (const Tensor& t : parts) {
    if (t.dtype() == dt) {
      std::memcpy(dst, t.raw(), t.nbytes());
      dst += t.nbytes();
    } else if (dt == DType::Q8_0) {
      convert_to_q8_0(t.dtype(), t.raw(), dst, t.numel());
      dst += dtype_bytes(DType::Q8_0, t.numel());
    } else {
      const Tensor c = t.to(dt);
      std::memcpy(dst, c.raw(), c.nbytes());
      dst += c.nbytes();
    }
  }
  return out;
}

}  // namespace

std::optional<DType> stacked_dtype(const std::vector<DType>& types) {
  if (types.empty()) return std::nullopt;
  if (std::all_of(types.begin(), types.end(), [&](DType t) { return t == types[0]; })) return types[0];
  if (std::all_of(types.begin(), types.end(), [](DType t) { return is_float(t); })) return DType::F32;
  if (std::all_of(types.begin(), types.end(), [](DType t) { return converts_to_q8_0(t); })) return DType::Q8_0;
  return std::nullopt;
}

void load_weights(Executable& exe, const GgufFile& f) {
  for (const std::string& name : exe.param_names()) {
    const Stacked* stacked = nullptr;
    for (const Stacked& s : stacked_params())
      if (ends_with(name, s.suffix)) stacked = &s;
    if (stacked)
      exe.set_param(name, stack_rows(f, name.substr(0, name.size() - std::string(stacked->suffix).size()), *stacked));
    else
      exe.set_param(name, f.view(name));
  }
  const auto missing = exe.missing_params();
  RLX_ASSERT(missing.empty());
}

int64_t cache_rows(const LlmConfig& cfg, int64_t requested, int64_t cap, const char* what) {
  RLX_CHECK(requested >= 0, what, " must be >= 0, got ", requested);
  const int64_t rows = requested > 0 ? requested : std::min<int64_t>(cfg.context_length, cap);
  RLX_CHECK(rows <= cfg.context_length, what, " ", rows, " exceeds the model's ", cfg.context_length, " tokens");
  return rows;
}

int64_t weight_bytes_per_token(const LlmConfig& cfg, const GgufFile& f) {
  int64_t total = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name == names::kTokenEmbd) {
      total += static_cast<int64_t>(t.nbytes) / cfg.vocab;                 // the embedding row
      if (cfg.tied_output) total += static_cast<int64_t>(t.nbytes);        // and the whole head
    } else {
      total += static_cast<int64_t>(t.nbytes);
    }
  }
  return total;
}

}  // namespace rlx::llm
