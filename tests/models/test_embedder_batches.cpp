// SentenceEmbedder's batching: many texts of mixed lengths in small batches,
// so that stretches of batches share a shape and run queued on CUDA
// (RLX_EMBED_QUEUE_MIN_BATCHES), against the float64 BERT reference
// (tiny_hf.h) text by text (order included), and queued against unqueued bit
// for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <utility>

#include <unistd.h>

#include "rlx/models/bert/embedder.h"
#include "rlx/runtime/backend_registry.h"
#include "tests/models/tiny_hf.h"
#include "tests/test_util.h"

using namespace rlx;
namespace fs = std::filesystem;
using test::Weights;

namespace {

const std::vector<std::string>& kVocab = test::tiny_wordpiece_vocab();

test::TinyBert tiny() {
  test::TinyBert t;
  t.vocab = static_cast<int64_t>(kVocab.size());
  return t;
}

fs::path write_model_dir(const Weights& w, const std::string& tag) {
  const test::TinyBert t = tiny();
  const fs::path dir = fs::temp_directory_path() / ("rlx_embed_batches_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const nlohmann::json cfg = {{"model_type", "bert"},
                              {"hidden_size", t.hidden},
                              {"num_hidden_layers", t.layers},
                              {"num_attention_heads", t.heads},
                              {"intermediate_size", t.inner},
                              {"hidden_act", "gelu"},
                              {"max_position_embeddings", t.positions},
                              {"type_vocab_size", t.types},
                              {"vocab_size", t.vocab},
                              {"layer_norm_eps", 1e-12}};
  test::write_text(dir / "config.json", cfg.dump());
  std::string vocab;
  for (const auto& v : kVocab) vocab += v + "\n";
  test::write_text(dir / "vocab.txt", vocab);
  test::write_mean_pooling_modules(dir, t.hidden);
  test::write_safetensors(dir / "model.safetensors", w);
  return dir;
}

// 45 texts of 1-14 words in random order: lengths 3-16 tokens, so on CUDA
// (lengths in steps of 8) two buckets of many batches each, and a last
// batch of a bucket that may be short.
std::vector<std::string> mixed_texts() {
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> word(5, kVocab.size() - 1), words(1, 14);
  std::vector<std::string> texts(45);
  for (auto& s : texts)
    for (size_t i = 0, n = words(rng); i < n; ++i) s += (i ? " " : "") + kVocab[word(rng)];
  return texts;
}

struct Case {
  std::string device;
  DType dtype;
  double min_cos;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.device << " " << dtype_name(c.dtype); }

class EmbedderBatches : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(EmbedderBatches, QueuedStretchesMatchFloat64AndUnqueuedRuns) {
  const Case c = GetParam();
  register_builtin_backends();
  if (!backend_available(c.device)) GTEST_SKIP() << "no " << c.device << " device";
  const Weights w = test::random_bert_weights(tiny(), 23);
  const fs::path dir = write_model_dir(w, c.device + std::string(dtype_name(c.dtype)));
  const std::vector<std::string> texts = mixed_texts();
  bert::EmbedOptions o;
  o.device = c.device;
  o.dtype = c.dtype;
  o.batch = 3;
  std::vector<size_t> progress;
  o.progress = [&](size_t done, size_t total) {
    EXPECT_EQ(total, texts.size());
    progress.push_back(done);
  };
  bert::SentenceEmbedder e(dir.string(), o);
  Tensor queued, alone;
  {
    test::ScopedEnv knob("RLX_EMBED_QUEUE_MIN_BATCHES", "2");
    queued = e.embed(texts);
  }
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back(), texts.size());
  for (size_t i = 1; i < progress.size(); ++i) EXPECT_GT(progress[i], progress[i - 1]);
  {
    test::ScopedEnv knob("RLX_EMBED_QUEUE_MIN_BATCHES", "0");
    alone = e.embed(texts);
  }
  const int64_t H = tiny().hidden;
  ASSERT_EQ(queued.shape(), (std::vector<int64_t>{static_cast<int64_t>(texts.size()), H}));
  ASSERT_EQ(alone.shape(), queued.shape());
  for (int64_t i = 0; i < queued.numel(); ++i)
    ASSERT_EQ(queued.data<float>()[i], alone.data<float>()[i]) << "element " << i;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto ids = e.tokenizer().encode(texts[i]).input_ids;
    const auto ref = test::mean_pool_normalized(test::bert_encode(tiny(), w, ids, 0, 1e-12),
                                                static_cast<int64_t>(ids.size()), H);
    EXPECT_GE(test::cosine(queued.data<float>() + static_cast<int64_t>(i) * H, ref), c.min_cos)
        << "text " << i << ": '" << texts[i] << "'";
  }
  fs::remove_all(dir);
}

// RLX_EMBED_BATCH_TOKENS without a given batch size: short texts run in
// fewer, larger batches (counted by the progress calls, one a batch), each
// text still its float64 reference, in input order. Its default (-1) is a
// budget on a GPU and none on the CPU.
TEST_P(EmbedderBatches, TokenBudgetTakesMoreShortTextsPerBatch) {
  const Case c = GetParam();
  register_builtin_backends();
  if (!backend_available(c.device)) GTEST_SKIP() << "no " << c.device << " device";
  const Weights w = test::random_bert_weights(tiny(), 29);
  const fs::path dir = write_model_dir(w, "budget_" + c.device + std::string(dtype_name(c.dtype)));
  std::vector<std::string> texts;
  for (int r = 0; r < 14; ++r)
    for (const std::string& t : mixed_texts()) texts.push_back(t);  // 630 texts of 3-16 tokens
  bert::EmbedOptions o;
  o.device = c.device;
  o.dtype = c.dtype;  // batch 0: the default (256 on a GPU, 32 on the CPU)
  size_t batches = 0;
  o.progress = [&](size_t, size_t) { ++batches; };
  auto embed_with = [&](const char* tokens) {
    test::ScopedEnv knob("RLX_EMBED_BATCH_TOKENS", tokens);
    return bert::SentenceEmbedder(dir.string(), o).embed(texts);
  };
  const Tensor plain = embed_with("0");
  const size_t plain_batches = std::exchange(batches, 0);
  const Tensor budget = embed_with("8192");
  EXPECT_LT(std::exchange(batches, 0), plain_batches);
  (void)embed_with(nullptr);
  if (c.device == "cpu") EXPECT_EQ(batches, plain_batches) << "the CPU's default takes no token budget";
  else EXPECT_LT(batches, plain_batches) << "a GPU's default takes a token budget";
  bert::SentenceEmbedder e(dir.string(), o);  // its tokenizer, for the references
  const int64_t H = tiny().hidden;
  ASSERT_EQ(budget.shape(), plain.shape());
  for (size_t i = 0; i < texts.size(); i += 7) {
    const auto ids = e.tokenizer().encode(texts[i]).input_ids;
    const auto ref = test::mean_pool_normalized(test::bert_encode(tiny(), w, ids, 0, 1e-12),
                                                static_cast<int64_t>(ids.size()), H);
    EXPECT_GE(test::cosine(budget.data<float>() + static_cast<int64_t>(i) * H, ref), c.min_cos)
        << "text " << i << ": '" << texts[i] << "'";
    EXPECT_GE(test::cosine(plain.data<float>() + static_cast<int64_t>(i) * H, ref), c.min_cos) << "text " << i;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Devices, EmbedderBatches,
                         ::testing::Values(Case{"cpu", DType::F32, 0.99999}, Case{"cuda", DType::F32, 0.99999},
                                           Case{"cuda", DType::F16, 0.999}),
                         [](const auto& info) {
                           return info.param.device + "_" + std::string(dtype_name(info.param.dtype));
                         });
