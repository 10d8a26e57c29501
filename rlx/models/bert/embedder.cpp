#include "rlx/models/bert/embedder.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <numeric>
#include <set>

#include "rlx/core/env.h"
#include "rlx/core/log.h"
#include "rlx/formats/gguf.h"
#include "rlx/models/llm/embedder.h"
#include "rlx/models/tokenizers/wordpiece.h"

namespace rlx::bert {

// Elements of dense attention bias one batch may take (256 MB in f32).
constexpr int64_t kBiasElementBudget = int64_t{1} << 26;

// Batch length: the longest sequence rounded up to a multiple of `step`.
int64_t length_bucket(int64_t n, int64_t max, int64_t step) {
  return std::min(max, std::max<int64_t>(step, (n + step - 1) / step * step));
}

ModelFiles ModelFiles::load(const std::string& path) {
  if (is_gguf_file(path)) {
    const GgufFile f = GgufFile::open(path);
    BertConfig config = BertConfig::from_gguf(f);
    auto weights = load_weights(config, f);
    return ModelFiles{config, sentence_tokenizer_from_gguf(f), std::move(weights)};
  }
  BertConfig config = BertConfig::from_dir(path);
  return ModelFiles{config, load_sentence_tokenizer(path), load_weights(config, path)};
}

std::unique_ptr<TextEmbedder> open_text_embedder(const std::string& model, EmbedOptions options) {
  if (llm::is_decoder_gguf(model)) return std::make_unique<llm::LlmEmbedder>(model, std::move(options));
  RLX_CHECK(options.pooling.empty(), "embed: a pooling choice applies to decoder LLM GGUF files; ", model,
            " takes its pooling from its own files");
  return std::make_unique<SentenceEmbedder>(model, std::move(options));
}

SentenceEmbedder::SentenceEmbedder(const std::string& model, EmbedOptions options)
    : SentenceEmbedder(ModelFiles::load(model), std::move(options)) {}

SentenceEmbedder::SentenceEmbedder(ModelFiles files, EmbedOptions options)
    : options_(std::move(options)), config_(std::move(files.config)), tokenizer_(std::move(files.tokenizer)) {
  session_ = std::make_unique<Session>(options_.device);
  const bool gpu = session_->device().backend != "cpu";
  if (options_.dtype == DType::Count_) options_.dtype = gpu ? DType::F16 : DType::F32;
  RLX_CHECK(options_.dtype == DType::F32 || options_.dtype == DType::F16 || options_.dtype == DType::BF16,
            "embed: dtype must be f32, f16 or bf16, got ", options_.dtype);
  if (options_.batch <= 0) {
    options_.batch = gpu ? 256 : 32;
    // Without --batch, RLX_EMBED_BATCH_TOKENS > 0 gives short batches more
    // texts: up to that many padded tokens a batch (at least `batch` texts).
    // A GPU's short batches leave it idle between launches; on the CPU larger
    // batches ran slower (f32, 2 cores: 188-192 against 314-335 texts/s).
    const int64_t tokens = env_int("RLX_EMBED_BATCH_TOKENS");
    batch_tokens_ = tokens < 0 ? (gpu ? 256 * 128 : 0) : tokens;
  }
  // On a GPU, lengths in steps of 8 keep the number of captured CUDA graphs
  // small; on the CPU a new length costs only a re-specialization, and exact
  // lengths pad 5.7% instead of 21.5% of the tokens on realistic text.
  length_step_ = gpu ? 8 : 1;
  max_length_ = std::min(tokenizer_->default_max_length(), config_.max_position);
  if (options_.max_length > 0) {
    RLX_CHECK(options_.max_length >= 2 && options_.max_length <= config_.max_position, "embed: max length ",
              options_.max_length, " must be in [2, ", config_.max_position, "] for this model");
    max_length_ = options_.max_length;
  }
  CompileOptions co;
  co.precision = options_.dtype;
  exe_ = session_->compile(build_graph(config_), co);
  for (auto& [name, t] : files.weights) exe_->set_param(name, t);
  log_verbose("embedder: ", config_.layers, " layers, hidden ", config_.hidden, ", ", dtype_name(options_.dtype),
              " on ", session_->device().name);
}

Tensor SentenceEmbedder::embed(const std::vector<std::string>& texts) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t n = texts.size();
  Tensor out = Tensor::empty(DType::F32, {static_cast<int64_t>(n), config_.output_dim()});
  stats_ = EmbedStats{n, 0, 0};
  if (n == 0) return out;
  const auto enc = tokenizer_->encode_batch(texts, max_length_, options_.threads);
  const double tokenize_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Longest first, so the first batch compiles the largest bucket and memory
  // use is highest up front; ties keep input order.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return enc[a].input_ids.size() > enc[b].input_ids.size(); });

  // The batches: up to B texts of one length bucket each, longest first.
  struct Batch {
    size_t start, count;
    int64_t L;
  };
  std::vector<Batch> batches;
  const auto B = static_cast<size_t>(options_.batch);
  for (size_t start = 0, count = 0; start < n; start += count) {
    const int64_t L = length_bucket(static_cast<int64_t>(enc[order[start]].input_ids.size()), max_length_, length_step_);
    // Models with a dense attention bias (MPNet, ModernBERT) take batch·bias
    // elements for it: long sequences run in smaller batches.
    const int64_t bias = attention_bias_elements(config_, L);
    const size_t by_tokens = std::max<size_t>(B, static_cast<size_t>(batch_tokens_ / L));
    const size_t fit = bias > 0 ? static_cast<size_t>(std::max<int64_t>(1, kBiasElementBudget / bias)) : by_tokens;
    count = std::min({by_tokens, fit, n - start});
    batches.push_back({start, count, L});
  }
  const auto same_shape = [&](size_t i, size_t j) {
    return batches[i].count == batches[j].count && batches[i].L == batches[j].L;
  };

  const auto inputs_of = [&](const Batch& bt) {
    const int64_t b = static_cast<int64_t>(bt.count), L = bt.L;
    Tensor ids = Tensor::zeros(DType::I32, {b, L}), types = Tensor::zeros(DType::I32, {b, L}),
           mask = Tensor::zeros(DType::I32, {b, L}), pos = Tensor::empty(DType::I32, {L});
    for (int64_t l = 0; l < L; ++l) pos.data<int32_t>()[l] = static_cast<int32_t>(l);
    for (size_t r = 0; r < bt.count; ++r) {
      const Encoding& e = enc[order[bt.start + r]];
      const size_t len = e.input_ids.size();
      stats_.tokens += len;
      std::copy(e.input_ids.begin(), e.input_ids.end(), ids.data<int32_t>() + r * static_cast<size_t>(L));
      std::fill_n(ids.data<int32_t>() + r * static_cast<size_t>(L) + len, static_cast<size_t>(L) - len,
                  tokenizer_->pad_id());
      std::copy(e.token_type_ids.begin(), e.token_type_ids.end(), types.data<int32_t>() + r * static_cast<size_t>(L));
      std::copy(e.attention_mask.begin(), e.attention_mask.end(), mask.data<int32_t>() + r * static_cast<size_t>(L));
    }
    std::vector<Tensor> inputs{ids, types, mask, pos};
    if (L != extra_length_) {
      extra_ = extra_inputs(config_, L);
      extra_length_ = L;
    }
    inputs.insert(inputs.end(), extra_.begin(), extra_.end());
    return inputs;
  };

  float* dst = out.data<float>();
  const auto scatter = [&](const Tensor& emb, const Batch& bt) {
    const float* src = emb.data<float>();
    for (size_t r = 0; r < bt.count; ++r)
      std::memcpy(dst + order[bt.start + r] * static_cast<size_t>(dim()), src + r * static_cast<size_t>(dim()),
                  sizeof(float) * static_cast<size_t>(dim()));
    if (options_.progress) options_.progress(bt.start + bt.count, n);
  };

  // Where the backend queues runs (CUDA), a stretch of batches of one shape
  // runs queued: the host fills and stages the next batch, and copies out the
  // last one's embeddings, while the device runs. A queue slot captures its
  // own CUDA graphs on its first run, so a stretch queues only from
  // RLX_EMBED_QUEUE_MIN_BATCHES batches on (0: never); the others use run().
  const int64_t min_queued = env_int("RLX_EMBED_QUEUE_MIN_BATCHES");
  const size_t depth = exe_->queue_depth();
  std::deque<size_t> in_flight;
  const auto collect = [&] {
    const Tensor emb = exe_->finish()[0];
    scatter(emb, batches[in_flight.front()]);
    in_flight.pop_front();
  };
  // Whether batch i is the first of its shape in this call (it compiles the
  // shape, unless an earlier call did, and captures its graphs).
  std::set<std::pair<size_t, int64_t>> shapes_seen;
  const auto first_of_shape = [&](size_t i) { return shapes_seen.insert({batches[i].count, batches[i].L}).second; };
  double first_batches_s = 0;
  size_t stretches = 0, queued_batches = 0;
  try {
    bool queue = false;
    for (size_t i = 0, stretch_end = 0; i < batches.size(); ++i) {
      if (i == stretch_end) {
        while (stretch_end < batches.size() && same_shape(i, stretch_end)) ++stretch_end;
        queue = depth > 0 && min_queued > 0 && static_cast<int64_t>(stretch_end - i) >= min_queued;
        ++stretches;
      }
      const std::vector<Tensor> inputs = inputs_of(batches[i]);
      const auto b0 = std::chrono::steady_clock::now();
      if (queue) {
        if (in_flight.size() == depth) collect();
        exe_->launch(inputs);
        in_flight.push_back(i);
        ++queued_batches;
        if (i + 1 == stretch_end)
          while (!in_flight.empty()) collect();
      } else {
        scatter(exe_->run(inputs)[0], batches[i]);
      }
      if (first_of_shape(i))
        first_batches_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - b0).count();
    }
  } catch (...) {
    exe_->discard_queued();
    throw;
  }
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log_verbose("embed: tokenized in ", tokenize_s, " s; ", batches.size(), " batches in ", stretches,
              " stretches of one shape, ", queued_batches, " of them queued; ", stats_.seconds - tokenize_s,
              " s of batches, of which ", first_batches_s, " s in the first batch of each of ", shapes_seen.size(),
              " shapes (compile, graph capture)");
  return out;
}

}  // namespace rlx::bert
