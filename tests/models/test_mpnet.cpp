// MPNet (all-mpnet-base-v2's architecture) against a float64 forward pass
// written here in plain loops from transformers' modeling_mpnet.py. No MPNet
// weights are available offline, so the test writes a tiny random-weight model
// in the HF layout: config.json (model_type "mpnet"), model.safetensors with
// HF names, a tokenizer.json with MPNet's RobertaProcessing (<s> … </s>) and
// tokenizer_config.json's "<pad>", and sentence-transformers' modules.
//
// The relative position bias is checked three ways: bucket ids picked by hand
// from the formula, rlx against the reference, and the reference without the
// bias far from rlx (so the comparison can tell it is there).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include <unistd.h>

#include "rlx/models/bert/embedder.h"
#include "rlx/runtime/backend_registry.h"
#include "tests/models/tiny_hf.h"

using namespace rlx;
namespace fs = std::filesystem;
using test::Mat;
using test::Weight;
using test::Weights;

namespace {

constexpr int64_t kHidden = 64, kHeads = 4, kLayers = 2, kInner = 128, kBuckets = 32, kPositions = 130;
constexpr double kEps = 1e-5;

// MPNet's vocabulary opens with <s> <pad> </s> <unk>, then BERT's specials.
const std::vector<std::string> kVocab = {
    "<s>", "<pad>", "</s>", "<unk>", "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox",
    "jumps", "over", "lazy", "dog", "a", "cat", "sat", "on", "mat", "hello", "world", "##s", "##ing", ".", ",", "!",
    "?", "run", "sun", "is", "out"};

const std::vector<std::string> kSentences = {
    "the quick brown fox jumps over the lazy dog.",
    "hello world!",
    "a cat sat on the mat, the sun is out.",
    "dogs running?",
    "",
    // 21 words: keys up to 22 positions away, past the 8 exact buckets.
    "the the the the the the the the the the the the the the the the the the the the cat",
};

std::string layer(int64_t i, const char* s) { return "encoder.layer." + std::to_string(i) + "." + s; }

Weights make_weights() {
  test::RandomWeights rw(4321);
  Weights w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float center, float spread) {
    rw.add(w, name, std::move(shape), center, spread);
  };
  const float lin = 1.0f / std::sqrt(static_cast<float>(kHidden));
  add("embeddings.word_embeddings.weight", {static_cast<int64_t>(kVocab.size()), kHidden}, 0, 1);
  add("embeddings.position_embeddings.weight", {kPositions, kHidden}, 0, 0.5f);
  add("embeddings.LayerNorm.weight", {kHidden}, 1, 0.2f);
  add("embeddings.LayerNorm.bias", {kHidden}, 0, 0.2f);
  add("encoder.relative_attention_bias.weight", {kBuckets, kHeads}, 0, 1.5f);
  for (int64_t i = 0; i < kLayers; ++i) {
    for (const char* p : {"q", "k", "v", "o"}) {
      add(layer(i, str("attention.attn.", p, ".weight").c_str()), {kHidden, kHidden}, 0, 2 * lin);
      add(layer(i, str("attention.attn.", p, ".bias").c_str()), {kHidden}, 0, 0.2f);
    }
    add(layer(i, "intermediate.dense.weight"), {kInner, kHidden}, 0, 2 * lin);
    add(layer(i, "intermediate.dense.bias"), {kInner}, 0, 0.2f);
    add(layer(i, "output.dense.weight"), {kHidden, kInner}, 0, lin);
    add(layer(i, "output.dense.bias"), {kHidden}, 0, 0.2f);
    for (const char* n : {"attention.LayerNorm", "output.LayerNorm"}) {
      add(layer(i, str(n, ".weight").c_str()), {kHidden}, 1, 0.2f);
      add(layer(i, str(n, ".bias").c_str()), {kHidden}, 0, 0.2f);
    }
  }
  return w;
}

// ---- float64 reference (one sentence at a time, no padding) ----

// MPNetEncoder.relative_position_bucket(memory − context) as torch evaluates
// it: the logarithm and its scaling in float32, then truncated.
int64_t bucket(int64_t context, int64_t memory) {
  int64_t n = context - memory, ret = 0;
  const int64_t half = kBuckets / 2, exact = half / 2;
  if (n < 0) ret += half;
  n = std::abs(n);
  if (n < exact) return ret + n;
  const float scaled = std::log(static_cast<float>(n) / static_cast<float>(exact)) /
                       static_cast<float>(std::log(128.0 / static_cast<double>(exact))) * static_cast<float>(half - exact);
  return ret + std::min<int64_t>(exact + static_cast<int64_t>(scaled), half - 1);
}

std::vector<double> reference(const Weights& w, const std::vector<int32_t>& ids, bool with_bias) {
  const auto L = static_cast<int64_t>(ids.size());
  const int64_t H = kHidden;
  Mat x(static_cast<size_t>(L * H));
  for (int64_t l = 0; l < L; ++l)  // create_position_ids_from_input_ids: 2, 3, … for an unpadded row
    for (int64_t j = 0; j < H; ++j)
      x[l * H + j] = w.at("embeddings.word_embeddings.weight").data[ids[l] * H + j] +
                     w.at("embeddings.position_embeddings.weight").data[(l + 2) * H + j];
  test::layer_norm(x, w.at("embeddings.LayerNorm.weight"), w.at("embeddings.LayerNorm.bias"), H, kEps);
  const Weight& rel = w.at("encoder.relative_attention_bias.weight");
  auto names = [](int64_t i) {
    return test::PostLnLayerNames{layer(i, "attention.attn.q"),   layer(i, "attention.attn.k"),
                                  layer(i, "attention.attn.v"),   layer(i, "attention.attn.o"),
                                  layer(i, "attention.LayerNorm"), layer(i, "intermediate.dense"),
                                  layer(i, "output.dense"),        layer(i, "output.LayerNorm")};
  };
  auto bias = [&](int64_t h, int64_t q, int64_t k) { return static_cast<double>(rel.data[bucket(q, k) * kHeads + h]); };
  x = test::post_ln_encoder(std::move(x), L, H, kHeads, kLayers, kEps, w, names,
                            with_bias ? std::function<double(int64_t, int64_t, int64_t)>(bias) : nullptr);
  return test::mean_pool_normalized(x, L, H);
}

// ---- model folder ----

// As all-mpnet-base-v2 ships it: config keys of its config.json, a WordPiece
// tokenizer.json with RobertaProcessing and no padding section, the pad token
// in tokenizer_config.json.
fs::path write_model_dir(const Weights& w, const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("rlx_mpnet_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const nlohmann::json cfg = {{"model_type", "mpnet"},
                              {"architectures", {"MPNetModel"}},
                              {"hidden_act", "gelu"},
                              {"hidden_size", kHidden},
                              {"num_attention_heads", kHeads},
                              {"num_hidden_layers", kLayers},
                              {"intermediate_size", kInner},
                              {"max_position_embeddings", kPositions},
                              {"relative_attention_num_buckets", kBuckets},
                              {"layer_norm_eps", kEps},
                              {"pad_token_id", 1},
                              {"bos_token_id", 0},
                              {"eos_token_id", 2},
                              {"vocab_size", kVocab.size()}};
  test::write_text(dir / "config.json", cfg.dump(2));
  test::write_mean_pooling_modules(dir, kHidden);
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < kVocab.size(); ++i) vocab[kVocab[i]] = i;
  nlohmann::json added = nlohmann::json::array();
  for (int i : {0, 1, 2, 3, 8})
    added.push_back({{"id", i}, {"content", kVocab[static_cast<size_t>(i)]}, {"special", true}, {"normalized", false}});
  const nlohmann::json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true}, {"strip_accents", nullptr},
        {"lowercase", true}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor",
       {{"type", "RobertaProcessing"}, {"sep", {"</s>", 2}}, {"cls", {"<s>", 0}}, {"trim_offsets", true},
        {"add_prefix_space", false}}},
      {"model",
       {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
        {"max_input_chars_per_word", 100}, {"vocab", vocab}}}};
  test::write_text(dir / "tokenizer.json", tok.dump());
  test::write_text(dir / "tokenizer_config.json",
                   R"({"bos_token":"<s>","eos_token":"</s>","pad_token":"<pad>","unk_token":"[UNK]",)"
                   R"("cls_token":"<s>","sep_token":"</s>","mask_token":"<mask>","model_max_length":128})");
  test::write_safetensors(dir / "model.safetensors", w);
  return dir;
}

using Case = test::DeviceCase;

class MPNet : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST(MPNetConfig, ReadsConfigTokenizerAndBuckets) {
  const fs::path dir = write_model_dir(make_weights(), "cfg");
  const auto c = bert::BertConfig::from_dir(dir.string());
  EXPECT_EQ(c.arch, bert::Arch::MPNet);
  EXPECT_EQ(c.position_offset, 2);
  EXPECT_EQ(c.max_position, kPositions - 2);
  EXPECT_EQ(c.type_vocab, 0);
  EXPECT_FLOAT_EQ(c.layer_norm_eps, 1e-5f);
  EXPECT_EQ(c.pooling, bert::Pooling::Mean);
  EXPECT_TRUE(c.normalize);

  // Buckets by hand (32 buckets, max distance 128): i − j = 0..7 exact, then
  // 8 + ⌊8·log(n/8)/log 16⌋ up to 15; keys after the query add 16.
  const Tensor b = bert::extra_inputs(c, 200).at(0);
  ASSERT_EQ(b.shape(), (std::vector<int64_t>{200, 200}));
  auto at = [&](int64_t i, int64_t j) { return b.data<int32_t>()[i * 200 + j]; };
  const std::vector<std::pair<int64_t, int32_t>> expect = {{0, 0},   {1, 1},   {7, 7},   {8, 8},    {15, 9},
                                                           {16, 10}, {31, 11}, {32, 12}, {127, 15}, {199, 15},
                                                           {-1, 17}, {-8, 24}, {-16, 26}, {-199, 31}};
  for (const auto& [d, want] : expect) {
    const int64_t i = d >= 0 ? d : 0, j = d >= 0 ? 0 : -d;
    EXPECT_EQ(at(i, j), want) << "i - j = " << d;
  }

  // RobertaProcessing's <s> … </s>, and tokenizer_config.json's <pad>.
  bert::SentenceEmbedder e(dir.string(), {});
  const auto enc = e.tokenizer().encode("Hello world!");
  EXPECT_EQ(enc.input_ids, (std::vector<int32_t>{0, 22, 23, 28, 2}));
  EXPECT_EQ(e.tokenizer().pad_id(), 1);
  fs::remove_all(dir);
}

TEST(MPNetReference, PositionBiasIsDetected) {
  // Guards the comparison itself: without the bias the output must be far
  // off, against the 0.99999 the f32 comparison asks for.
  const Weights w = make_weights();
  std::vector<int32_t> ids = {0};
  for (int i = 0; i < 20; ++i) ids.push_back(9 + i % 20);
  ids.push_back(2);
  const auto with = reference(w, ids, true), without = reference(w, ids, false);
  std::vector<float> f(with.begin(), with.end());
  EXPECT_LT(test::cosine(f.data(), without), 0.999);
}

TEST_P(MPNet, EmbeddingsMatchFloat64Reference) {
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
  ASSERT_EQ(e.config().arch, bert::Arch::MPNet);
  const Tensor out = e.embed(kSentences);
  ASSERT_EQ(out.shape(), (std::vector<int64_t>{static_cast<int64_t>(kSentences.size()), kHidden}));
  double worst = 1;
  for (size_t i = 0; i < kSentences.size(); ++i) {
    const auto ids = e.tokenizer().encode(kSentences[i]).input_ids;
    const double cs = test::cosine(out.data<float>() + i * kHidden, reference(w, ids, true));
    worst = std::min(worst, cs);
    EXPECT_GE(cs, c.min_cos) << "sentence " << i << " ('" << kSentences[i] << "', " << ids.size() << " tokens)";
  }
  std::printf("[ mpnet ] %s %s worst cosine %.7f\n", c.device.c_str(), dtype_name(c.dtype).data(), worst);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Devices, MPNet,
                         ::testing::Values(Case{"cpu", DType::F32, 0.99999}, Case{"cpu", DType::F16, 0.999},
                                           Case{"cuda", DType::F32, 0.99999}, Case{"cuda", DType::F16, 0.999},
                                           Case{"cuda", DType::BF16, 0.995}),
                         [](const auto& info) { return test::device_case_name(info.param); });
