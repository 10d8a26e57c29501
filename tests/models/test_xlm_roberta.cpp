// XLM-RoBERTa (the multilingual sentence-transformers models' architecture)
// against a float64 forward pass: BERT's layers with learned positions counted
// from pad_token_id + 1 and one token type. The folder the test writes is laid
// out as paraphrase-multilingual-* ships: config.json (model_type
// "xlm-roberta"), model.safetensors under a "roberta." prefix, a SentencePiece
// Unigram tokenizer.json (<s> … </s>), sentence-transformers' modules. The
// tokenizer's own parity with Hugging Face is test_unigram.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "rlx/models/bert/embedder.h"
#include "rlx/runtime/backend_registry.h"
#include "tests/models/tiny_hf.h"

using namespace rlx;
namespace fs = std::filesystem;
using test::Mat;
using test::Weights;

namespace {

constexpr int64_t kHidden = 64, kHeads = 4, kLayers = 2, kInner = 128, kPositions = 40;
constexpr double kEps = 1e-5;

// Pieces with SentencePiece-style log probabilities; every letter alone so
// any lowercase word can be segmented.
std::vector<std::pair<std::string, double>> vocabulary() {
  std::vector<std::pair<std::string, double>> v = {{"<s>", 0}, {"<pad>", 0}, {"</s>", 0}, {"<unk>", 0}};
  for (const char* w : {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "hello", "world", "cat"})
    v.push_back({std::string("\u2581") + w, -4.0});
  v.push_back({"\u2581", -3.0});
  for (char c = 'a'; c <= 'z'; ++c) v.push_back({std::string(1, c), -6.0});
  for (const char* p : {".", ",", "!", "?", "\u00e9", "\u4e16", "\u754c"}) v.push_back({p, -5.0});
  v.push_back({"<mask>", 0});
  return v;
}

const std::vector<std::string> kSentences = {
    "the quick brown fox jumps over the lazy dog.",
    "Hello world!",
    "a cat, a dog.",
    "héllo 世界",
    "",
    "the cat the cat the cat the cat the cat the cat the cat the cat the dog",
};

test::TinyBert tiny() {
  test::TinyBert t;
  t.vocab = static_cast<int64_t>(vocabulary().size());
  t.positions = kPositions;
  t.types = 1;
  t.hidden = kHidden;
  t.heads = kHeads;
  t.inner = kInner;
  t.layers = kLayers;
  return t;
}

Weights make_weights() { return test::random_bert_weights(tiny(), 777); }

// One sentence, no padding: positions from `first_position` (pad_token_id 1 + 1 = 2).
std::vector<double> reference(const Weights& w, const std::vector<int32_t>& ids, int64_t first_position) {
  const Mat x = test::bert_encode(tiny(), w, ids, first_position, kEps);
  return test::mean_pool_normalized(x, static_cast<int64_t>(ids.size()), kHidden);
}

fs::path write_model_dir(const Weights& w, const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("rlx_xlmr_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto vocab = vocabulary();
  const nlohmann::json cfg = {{"model_type", "xlm-roberta"},
                              {"architectures", {"XLMRobertaModel"}},
                              {"hidden_act", "gelu"},
                              {"hidden_size", kHidden},
                              {"num_attention_heads", kHeads},
                              {"num_hidden_layers", kLayers},
                              {"intermediate_size", kInner},
                              {"max_position_embeddings", kPositions},
                              {"type_vocab_size", 1},
                              {"layer_norm_eps", kEps},
                              {"pad_token_id", 1},
                              {"bos_token_id", 0},
                              {"eos_token_id", 2},
                              {"position_embedding_type", "absolute"},
                              {"vocab_size", vocab.size()}};
  test::write_text(dir / "config.json", cfg.dump(2));
  test::write_mean_pooling_modules(dir, kHidden);
  nlohmann::json pieces = nlohmann::json::array();
  for (const auto& [p, score] : vocab) pieces.push_back({p, score});
  nlohmann::json added = nlohmann::json::array();
  for (int i : {0, 1, 2, 3}) added.push_back({{"id", i}, {"content", vocab[static_cast<size_t>(i)].first},
                                              {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                                              {"normalized", false}, {"special", true}});
  const auto special = [](const char* t, int id) {
    return nlohmann::json{{"id", t}, {"ids", {id}}, {"tokens", {t}}};
  };
  const nlohmann::json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
        {"pair", nlohmann::json::array()},
        {"special_tokens", {{"<s>", special("<s>", 0)}, {"</s>", special("</s>", 2)}}}}},
      {"decoder", nullptr},
      {"model", {{"type", "Unigram"}, {"unk_id", 3}, {"vocab", pieces}, {"byte_fallback", false}}}};
  test::write_text(dir / "tokenizer.json", tok.dump());
  test::write_text(dir / "tokenizer_config.json", R"({"model_max_length": 38})");
  Weights prefixed;  // as XLMRobertaModel checkpoints with a task head store them
  for (const auto& [name, t] : w) prefixed["roberta." + name] = t;
  test::write_safetensors(dir / "model.safetensors", prefixed);
  return dir;
}

using Case = test::DeviceCase;

class XlmRoberta : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST(XlmRobertaConfig, RobertaAndCamembertAreTheSameModel) {
  // Only the tokenizer differs between them, and tokenizer.json says which.
  const Weights w = make_weights();
  const fs::path dir = write_model_dir(w, "types");
  const std::vector<std::string> texts = {"the quick brown fox.", "a cat"};
  bert::EmbedOptions o;
  o.device = "cpu";
  const Tensor want = bert::SentenceEmbedder(dir.string(), o).embed(texts);
  auto cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  for (const char* type : {"roberta", "camembert"}) {
    cfg["model_type"] = type;
    test::write_text(dir / "config.json", cfg.dump());
    const Tensor got = bert::SentenceEmbedder(dir.string(), o).embed(texts);
    ASSERT_EQ(got.numel(), want.numel());
    for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(got.data<float>()[i], want.data<float>()[i]) << type;
  }
  fs::remove_all(dir);
}

TEST(XlmRoberta, RobertaWithItsByteLevelBpeTokenizer) {
  // all-distilroberta-v1's shape: model_type roberta, a byte-level BPE
  // tokenizer.json (the byte-level BPE test's fixture, trained by tokenizers).
  const auto fixture = nlohmann::json::parse(std::ifstream(std::string(RLX_SOURCE_DIR) +
                                                           "/tests/data/byte_level_bpe_cases.json"));
  const nlohmann::json& tok = fixture.at("base");
  test::TinyBert t = tiny();
  t.vocab = static_cast<int64_t>(tok.at("model").at("vocab").size());
  const Weights w = test::random_bert_weights(t, 778);
  const fs::path dir = write_model_dir(w, "roberta");
  auto cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  cfg["model_type"] = "roberta";
  cfg["vocab_size"] = t.vocab;
  test::write_text(dir / "config.json", cfg.dump());
  test::write_text(dir / "tokenizer.json", tok.dump());
  bert::EmbedOptions o;
  o.device = "cpu";
  o.batch = 2;
  bert::SentenceEmbedder e(dir.string(), o);
  const std::vector<std::string> texts = {"The quick brown fox jumps over the lazy dog.", "Hello, world!", ""};
  const Tensor out = e.embed(texts);
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto ids = e.tokenizer().encode(texts[i]).input_ids;
    ASSERT_EQ(ids.front(), 0) << "<s>";
    ASSERT_EQ(ids.back(), 2) << "</s>";
    const Mat x = test::bert_encode(t, w, ids, 2, kEps);
    const auto ref = test::mean_pool_normalized(x, static_cast<int64_t>(ids.size()), kHidden);
    EXPECT_GE(test::cosine(out.data<float>() + i * kHidden, ref), 0.99999) << "text " << i;
  }
  fs::remove_all(dir);
}

TEST(XlmRobertaConfig, PositionsStartAfterThePadId) {
  const Weights w = make_weights();
  const fs::path dir = write_model_dir(w, "cfg");
  const auto c = bert::BertConfig::from_dir(dir.string());
  EXPECT_EQ(c.arch, bert::Arch::Bert);
  EXPECT_EQ(c.position_offset, 2);
  EXPECT_EQ(c.max_position, kPositions - 2);
  EXPECT_EQ(c.type_vocab, 1);
  bert::SentenceEmbedder e(dir.string(), {});
  // <s> ▁the ▁cat </s>
  EXPECT_EQ(e.tokenizer().encode("the cat").input_ids, (std::vector<int32_t>{0, 4, 14, 2}));
  EXPECT_EQ(e.tokenizer().pad_id(), 1);
  EXPECT_EQ(e.max_length(), 38);
  fs::remove_all(dir);
}

TEST(XlmRobertaReference, PositionOffsetIsDetected) {
  // Guards the comparison: positions from 0 instead of 2 must be far off.
  const Weights w = make_weights();
  const std::vector<int32_t> ids = {0, 4, 5, 6, 7, 8, 9, 4, 10, 11, 2};
  const auto good = reference(w, ids, 2), shifted = reference(w, ids, 0);
  std::vector<float> f(good.begin(), good.end());
  EXPECT_LT(test::cosine(f.data(), shifted), 0.999);
}

TEST_P(XlmRoberta, EmbeddingsMatchFloat64Reference) {
  const Case c = GetParam();
  register_builtin_backends();
  if (!backend_available(c.device)) GTEST_SKIP() << "no " << c.device << " device";
  const Weights w = make_weights();
  const fs::path dir = write_model_dir(w, c.device + "_" + std::string(dtype_name(c.dtype)));
  bert::EmbedOptions o;
  o.device = c.device;
  o.dtype = c.dtype;
  o.batch = 4;  // two batches of mixed lengths, so padding and the key mask matter
  bert::SentenceEmbedder e(dir.string(), o);
  const Tensor out = e.embed(kSentences);
  double worst = 1;
  for (size_t i = 0; i < kSentences.size(); ++i) {
    const auto ids = e.tokenizer().encode(kSentences[i]).input_ids;
    const double cs = test::cosine(out.data<float>() + i * kHidden, reference(w, ids, 2));
    worst = std::min(worst, cs);
    EXPECT_GE(cs, c.min_cos) << "sentence " << i << " ('" << kSentences[i] << "', " << ids.size() << " tokens)";
  }
  std::printf("[ xlm-roberta ] %s %s worst cosine %.7f\n", c.device.c_str(), dtype_name(c.dtype).data(), worst);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Devices, XlmRoberta,
                         ::testing::Values(Case{"cpu", DType::F32, 0.99999}, Case{"cpu", DType::F16, 0.999},
                                           Case{"cuda", DType::F32, 0.99999}, Case{"cuda", DType::F16, 0.999}),
                         [](const auto& info) { return test::device_case_name(info.param); });
