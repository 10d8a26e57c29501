#include "rlx/models/llm/model.h"

#include <cstring>

#include "rlx/models/llm/blocks.h"

namespace rlx::llm {

std::string names::blk(int64_t layer, const char* suffix) { return str("blk.", layer, ".", suffix); }

const std::vector<LayerWeight>& layer_weights(Arch arch) {
  switch (arch) {
    case Arch::Gemma3: return detail::kGemma3Weights;
    case Arch::Qwen3: return detail::kQwen3Weights;
    case Arch::Qwen2:
    case Arch::Llama: return detail::kLlamaWeights;
  }
  RLX_ASSERT(false);
}

Graph build_graph(const LlmConfig& cfg, const GgufFile& f, const BuildOptions& options) {
  switch (cfg.arch) {
    case Arch::Gemma3: return detail::build_gemma3(cfg, f, options);
    case Arch::Qwen3: return detail::build_qwen3(cfg, f, options);
    case Arch::Qwen2:
    case Arch::Llama: return detail::build_llama(cfg, f, options);
  }
  RLX_ASSERT(false);
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// [gate; up] rows as one tensor of their common dtype (block rows are
// independent, so stacking rows is concatenating bytes).
Tensor stack_rows(const Tensor& a, const Tensor& b) {
  std::vector<int64_t> shape = a.shape();
  shape[0] += b.shape()[0];
  Tensor out = Tensor::empty(a.dtype(), shape);
  auto* dst = static_cast<char*>(out.raw_mut());
  std::memcpy(dst, a.raw(), a.nbytes());
  std::memcpy(dst + a.nbytes(), b.raw(), b.nbytes());
  return out;
}

}  // namespace

void load_weights(Executable& exe, const GgufFile& f) {
  for (const std::string& name : exe.param_names()) {
    const std::string fused = names::kGateUpSuffix;
    if (ends_with(name, fused)) {
      const std::string prefix = name.substr(0, name.size() - fused.size());
      Tensor gate = f.view(prefix + "ffn_gate.weight"), up = f.view(prefix + "ffn_up.weight");
      RLX_FORMAT_CHECK(gate.dtype() == up.dtype() && gate.shape() == up.shape(), f.source(), ": ", prefix,
                       "ffn_gate.weight and ffn_up.weight differ in dtype or shape");
      exe.set_param(name, stack_rows(gate, up));
    } else {
      exe.set_param(name, f.view(name));
    }
  }
  const auto missing = exe.missing_params();
  RLX_ASSERT(missing.empty());
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
