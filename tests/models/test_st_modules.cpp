// sentence-transformers modules after the encoder (modules.json): Pooling,
// Dense (LaBSE, distiluse: y = tanh(x·Wᵀ + b)), Normalize, against a float64
// reference; and the module lists rlx refuses rather than run differently
// (several pooling modes, unknown module types, Dense weights only as a pickle).
#include <gtest/gtest.h>

#include <filesystem>

#include <unistd.h>

#include "rlx/models/bert/embedder.h"
#include "tests/models/tiny_hf.h"

using namespace rlx;
namespace fs = std::filesystem;
using test::Mat;
using test::Weights;

namespace {

constexpr double kEps = 1e-12;
constexpr int64_t kDenseOut = 48;

const std::vector<std::string> kVocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown",
                                         "fox",   "jumps", "over",  "lazy",  "dog",    "a",   "cat",   "sat",
                                         "on",    "mat",   ".",     ",",     "!",      "?"};
const std::vector<std::string> kSentences = {"the quick brown fox jumps over the lazy dog.", "a cat!",
                                             "the cat sat on the mat, the dog sat on the cat.", ""};

test::TinyBert tiny() {
  test::TinyBert t;
  t.vocab = static_cast<int64_t>(kVocab.size());
  return t;
}

// Transformer → Pooling(mode) → Dense(64 → 48, tanh) → Normalize, as LaBSE's
// folder (CLS pooling there) lays them out.
fs::path write_model_dir(const Weights& w, const Weights& dense, const std::string& mode, const std::string& tag) {
  const test::TinyBert t = tiny();
  const fs::path dir = fs::temp_directory_path() / ("rlx_st_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir / "1_Pooling");
  fs::create_directories(dir / "2_Dense");
  const nlohmann::json cfg = {{"model_type", "bert"},          {"hidden_size", t.hidden},
                              {"num_hidden_layers", t.layers}, {"num_attention_heads", t.heads},
                              {"intermediate_size", t.inner},  {"max_position_embeddings", t.positions},
                              {"type_vocab_size", t.types},    {"vocab_size", t.vocab},
                              {"layer_norm_eps", kEps},        {"hidden_act", "gelu"}};
  test::write_text(dir / "config.json", cfg.dump());
  std::string vocab;
  for (const auto& v : kVocab) vocab += v + "\n";
  test::write_text(dir / "vocab.txt", vocab);
  test::write_safetensors(dir / "model.safetensors", w);
  test::write_text(dir / "modules.json",
                   R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
                       {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
                       {"idx":2,"name":"2","path":"2_Dense","type":"sentence_transformers.models.Dense"},
                       {"idx":3,"name":"3","path":"3_Normalize","type":"sentence_transformers.models.Normalize"}])");
  test::write_text(dir / "1_Pooling" / "config.json",
                   nlohmann::json{{"word_embedding_dimension", t.hidden}, {mode, true}}.dump());
  test::write_text(dir / "2_Dense" / "config.json",
                   nlohmann::json{{"in_features", t.hidden},
                                  {"out_features", kDenseOut},
                                  {"bias", true},
                                  {"activation_function", "torch.nn.modules.activation.Tanh"}}
                       .dump());
  test::write_safetensors(dir / "2_Dense" / "model.safetensors", dense);
  return dir;
}

Weights dense_weights() {
  test::RandomWeights rw(99);
  Weights d;
  rw.add(d, "linear.weight", {kDenseOut, tiny().hidden}, 0, 0.4f);
  rw.add(d, "linear.bias", {kDenseOut}, 0, 0.3f);
  return d;
}

std::vector<double> reference(const Weights& w, const Weights& dense, const std::vector<int32_t>& ids, bool cls,
                              bool with_dense) {
  const test::TinyBert t = tiny();
  const auto L = static_cast<int64_t>(ids.size());
  const Mat x = test::bert_encode(t, w, ids, 0, kEps);
  std::vector<double> pooled = cls ? std::vector<double>(x.begin(), x.begin() + t.hidden) : test::mean_pool(x, L, t.hidden);
  if (!with_dense) return test::l2_normalized(pooled);
  Mat y = test::linear(pooled, dense.at("linear.weight"), 1, &dense.at("linear.bias"));
  for (double& e : y) e = std::tanh(e);
  return test::l2_normalized(y);
}

class StModules : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(StModules, DenseAfterPoolingMatchesFloat64Reference) {
  const std::string mode = GetParam();
  const bool cls = mode == "pooling_mode_cls_token";
  const Weights w = test::random_bert_weights(tiny(), 5), d = dense_weights();
  const fs::path dir = write_model_dir(w, d, mode, cls ? "cls" : "mean");
  bert::EmbedOptions o;
  o.device = "cpu";
  o.batch = 2;  // mixed lengths: padding must not reach the mean
  bert::SentenceEmbedder e(dir.string(), o);
  ASSERT_EQ(e.dim(), kDenseOut);
  const Tensor out = e.embed(kSentences);
  ASSERT_EQ(out.shape(), (std::vector<int64_t>{static_cast<int64_t>(kSentences.size()), kDenseOut}));
  for (size_t i = 0; i < kSentences.size(); ++i) {
    const auto ids = e.tokenizer().encode(kSentences[i]).input_ids;
    const double cs = test::cosine(out.data<float>() + i * kDenseOut, reference(w, d, ids, cls, true));
    EXPECT_GE(cs, 0.99999) << mode << ", sentence " << i;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Pooling, StModules, ::testing::Values("pooling_mode_mean_tokens", "pooling_mode_cls_token"));

TEST(StModulesReference, DenseIsDetected) {
  // Guards the comparison: skipping the Dense module (the old behaviour) must be far off.
  const Weights w = test::random_bert_weights(tiny(), 5), d = dense_weights();
  const std::vector<int32_t> ids = {2, 5, 6, 7, 8, 9, 3};
  const auto with = reference(w, d, ids, false, true), without = reference(w, d, ids, false, false);
  // Different widths: compare the without-Dense vector's first kDenseOut entries.
  std::vector<float> f(with.begin(), with.end());
  EXPECT_LT(test::cosine(f.data(), std::vector<double>(without.begin(), without.begin() + kDenseOut)), 0.9);
}

TEST(StModules, RefusesWhatItWouldRunDifferently) {
  const Weights w = test::random_bert_weights(tiny(), 5), d = dense_weights();
  const fs::path dir = write_model_dir(w, d, "pooling_mode_mean_tokens", "errors");
  auto expect = [&](const std::string& needle) {
    try {
      bert::BertConfig::from_dir(dir.string());
      ADD_FAILURE() << "accepted; expected an error with '" << needle << "'";
    } catch (const Unsupported& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // Two pooling modes (sentence-transformers concatenates them).
  test::write_text(dir / "1_Pooling" / "config.json",
                   R"({"pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": true})");
  expect("2 pooling modes are on");
  test::write_text(dir / "1_Pooling" / "config.json", R"({"pooling_mode_max_tokens": true})");
  expect("pooling_mode_max_tokens is not supported");
  // The string form of the mode is read too.
  test::write_text(dir / "1_Pooling" / "config.json", R"({"pooling_mode": "cls"})");
  EXPECT_EQ(bert::BertConfig::from_dir(dir.string()).pooling, bert::Pooling::Cls);
  test::write_text(dir / "1_Pooling" / "config.json", R"({"pooling_mode": "max"})");
  expect("pooling_mode 'max' is not supported");
  test::write_text(dir / "1_Pooling" / "config.json", R"({"pooling_mode_mean_tokens": true})");
  // An unknown module type.
  const std::string modules = R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
      {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
      {"idx":2,"name":"2","path":"2_LayerNorm","type":"sentence_transformers.models.LayerNorm"}])";
  test::write_text(dir / "modules.json", modules);
  expect("module type 'sentence_transformers.models.LayerNorm' is not supported");
  fs::remove_all(dir);

  // Dense weights only as pytorch_model.bin.
  const fs::path pickled = write_model_dir(w, d, "pooling_mode_mean_tokens", "pickle");
  fs::rename(pickled / "2_Dense" / "model.safetensors", pickled / "2_Dense" / "pytorch_model.bin");
  try {
    bert::SentenceEmbedder e(pickled.string(), {"cpu"});
    ADD_FAILURE() << "Dense weights in a pickle were accepted";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("pytorch_model.bin"), std::string::npos) << e.what();
  }
  fs::remove_all(pickled);
}
