#include "rlx/models/llm/embedder.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "rlx/models/llm/model.h"

namespace rlx::llm {

bool is_decoder_gguf(const std::string& path) {
  if (!bert::is_gguf_file(path)) return false;
  const GgufFile f = GgufFile::open(path);
  return f.contains("general.architecture") && arch_from_name(f.get<std::string>("general.architecture")).has_value();
}

namespace {

constexpr int64_t kLengthStep = 32;  // sequences are padded to multiples of this (causal: exact)

Pooling pooling_for(const GgufFile& f, const LlmConfig& c, const std::string& requested) {
  if (requested == "last") return Pooling::Last;
  if (requested == "mean") return Pooling::Mean;
  if (requested == "cls") return Pooling::Cls;
  RLX_CHECK(requested.empty(), "embed: pooling '", requested, "' is not one of last, mean, cls");
  const std::string key = c.arch_key + ".pooling_type";
  RLX_CHECK(f.contains(key), "embed: ", f.source(), " is a ", c.arch_key, " model without ", key,
            " (not converted as an embedding model); choose a pooling (--pooling last, mean or cls) to embed with it");
  const int64_t t = f.get_int(key);
  if (t == 1) return Pooling::Mean;
  if (t == 2) return Pooling::Cls;
  if (t == 3) return Pooling::Last;
  throw Unsupported(str("embed: ", f.source(), ": ", key, " = ", t,
                        t == 4 ? " (a reranker) is not an embedding model" : " is not supported (mean, cls, last)"));
}

}  // namespace

LlmEmbedder::LlmEmbedder(const std::string& path, bert::EmbedOptions options)
    : options_(std::move(options)), file_(GgufFile::open(path)), config_(LlmConfig::from_gguf(file_)) {
  pooling_ = pooling_for(file_, config_, options_.pooling);
  if (file_.contains("tokenizer.ggml.model")) {
    tokenizer_ = LlmTokenizer::from_gguf(file_);
    add_eos_ = file_.get_or<bool>("tokenizer.ggml.add_eos_token", false) && tokenizer_->eos() >= 0;
  }
  if (file_.contains("tokenizer.ggml.padding_token_id")) pad_ = static_cast<int32_t>(file_.get_int("tokenizer.ggml.padding_token_id"));
  else if (tokenizer_ && tokenizer_->eos() >= 0) pad_ = tokenizer_->eos();
  RLX_CHECK(pad_ >= 0 && pad_ < config_.vocab, "embed: ", file_.source(), ": padding token ", pad_,
            " is outside the vocabulary");
  session_ = std::make_unique<Session>(options_.device);
  const bool gpu = session_->device().backend != "cpu";
  // LLM activations can exceed f16's range; bf16 keeps f32's.
  if (options_.dtype == DType::Count_) options_.dtype = gpu ? DType::BF16 : DType::F32;
  RLX_CHECK(is_compute_float(options_.dtype), "embed: dtype must be f32, f16 or bf16, got ", options_.dtype);
  max_length_ = cache_rows(config_, options_.max_length, 2048, "embed: max length");
  BuildOptions bo;
  bo.ctx = max_length_;
  bo.kv_dtype = options_.dtype;  // the cache in the compute precision: no extra rounding
  bo.compute = options_.dtype;
  bo.logits = false;
  bo.token = false;
  bo.hidden = true;
  CompileOptions co;
  co.precision = options_.dtype;
  exe_ = session_->compile(build_graph(config_, file_, bo), co);
  load_weights(*exe_, file_);
}

std::vector<int32_t> LlmEmbedder::tokenize(const std::string& text) const {
  RLX_CHECK(tokenizer_, "embed: ", file_.source(), " has no tokenizer (tokenizer.ggml.*); embed token ids instead");
  std::vector<int32_t> ids = tokenizer_->encode(text, tokenizer_->add_bos_default());
  if (add_eos_) ids.push_back(tokenizer_->eos());
  if (static_cast<int64_t>(ids.size()) > max_length_) {
    ids.resize(static_cast<size_t>(max_length_));
    if (add_eos_) ids.back() = tokenizer_->eos();  // as sentence-transformers truncates: the end token stays
  }
  return ids;
}

Tensor LlmEmbedder::embed(const std::vector<std::string>& texts) {
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(texts.size());
  for (const std::string& t : texts) ids.push_back(tokenize(t));
  return embed_ids(ids);
}

Tensor LlmEmbedder::embed_ids(const std::vector<std::vector<int32_t>>& ids) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t H = config_.hidden;
  Tensor out = Tensor::empty(DType::F32, {static_cast<int64_t>(ids.size()), H});
  stats_ = {};
  auto one = [](int64_t v) { return Tensor::from(std::vector<int32_t>{static_cast<int32_t>(v)}, {1}); };
  for (size_t r = 0; r < ids.size(); ++r) {
    const auto n = static_cast<int64_t>(ids[r].size());
    RLX_CHECK(n >= 1, "embed: text ", r, " has no tokens (the model adds no BOS or EOS to an empty text)");
    RLX_CHECK(n <= max_length_, "embed: text ", r, " has ", n, " tokens, more than the max length ", max_length_);
    for (int32_t id : ids[r])
      RLX_CHECK(id >= 0 && id < config_.vocab, "embed: token id ", id, " is outside the vocabulary [0, ",
                config_.vocab, ")");
    const int64_t L = std::min(max_length_, (n + kLengthStep - 1) / kLengthStep * kLengthStep);
    std::vector<int32_t> tokens(ids[r]);
    tokens.resize(static_cast<size_t>(L), pad_);
    std::vector<int32_t> positions(static_cast<size_t>(L));
    for (int64_t i = 0; i < L; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    const Tensor hidden =
        exe_->run({Tensor::from(tokens, {1, L}), Tensor::from(positions, {L}), one(0), one(L), one(0)})[0];
    const float* h = hidden.data<float>();
    std::vector<double> v(static_cast<size_t>(H), 0.0);
    const int64_t first = pooling_ == Pooling::Last ? n - 1 : 0, last = pooling_ == Pooling::Mean ? n - 1 : first;
    for (int64_t i = first; i <= last; ++i)
      for (int64_t j = 0; j < H; ++j) v[static_cast<size_t>(j)] += h[i * H + j];
    double ss = 0;
    for (double x : v) ss += x * x;
    const double scale = ss > 0 ? 1.0 / std::sqrt(ss) : 0.0;  // the mean's 1/n cancels in the normalization
    float* o = out.data<float>() + static_cast<int64_t>(r) * H;
    for (int64_t j = 0; j < H; ++j) o[j] = static_cast<float>(v[static_cast<size_t>(j)] * scale);
    stats_.tokens += static_cast<size_t>(n);
  }
  stats_.texts = ids.size();
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace rlx::llm
