// Nomic BERT (rotary + SwiGLU, no biases) against a float64 forward pass
// written here in plain loops from nomic-ai's modeling_hf_nomic_bert.py. No
// Nomic weights are available offline, so the test writes a tiny random-weight
// model in the HF layout (config.json, model.safetensors with HF names,
// vocab.txt, sentence-transformers modules) and the same model as a
// llama.cpp-style "nomic-bert" GGUF (F32 and Q8_0 linear weights).
//
// The SwiGLU half order (fc12 is the gate: y = fc11(x) · silu(fc12(x))) is
// checked twice: rlx must match the reference, and the reference with the
// halves swapped must NOT match (so the comparison can tell the two apart).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "rlx/formats/gguf.h"
#include "rlx/formats/quant.h"
#include "rlx/models/bert/embedder.h"
#include "rlx/runtime/backend_registry.h"
#include "tests/models/tiny_hf.h"

using namespace rlx;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kHidden = 64, kHeads = 4, kLayers = 2, kInner = 96, kTypes = 2, kPadMultiple = 8;
constexpr double kRopeBase = 1000.0, kEps = 1e-12;

const std::vector<std::string> kVocab = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox", "jumps", "over", "lazy",
    "dog",   "a",     "cat",   "sat",   "on",     "mat", "hello", "world", "##s", "##ing", ".",   ",",
    "!",     "?",     "run",   "sun",   "is",     "out"};
const int64_t kVocabRows = (static_cast<int64_t>(kVocab.size()) + kPadMultiple - 1) / kPadMultiple * kPadMultiple;

const std::vector<std::string> kSentences = {
    "the quick brown fox jumps over the lazy dog.",
    "hello world!",
    "a cat sat on the mat, the sun is out.",
    "dogs running?",
    "",
    "the the the the the the the the the the the the the the the the the the the the cat",
};

using test::Mat;
using test::Weight;
using test::Weights;

std::string layer(int64_t i, const char* s) { return "encoder.layers." + std::to_string(i) + "." + s; }

Weights make_weights() {
  test::RandomWeights rw(1234);
  Weights w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float center, float spread) {
    rw.add(w, name, std::move(shape), center, spread);
  };
  const float lin = 1.0f / std::sqrt(static_cast<float>(kHidden));
  add("embeddings.word_embeddings.weight", {kVocabRows, kHidden}, 0, 1);
  add("embeddings.token_type_embeddings.weight", {kTypes, kHidden}, 0, 0.5f);
  add("emb_ln.weight", {kHidden}, 1, 0.2f);
  add("emb_ln.bias", {kHidden}, 0, 0.2f);
  for (int64_t i = 0; i < kLayers; ++i) {
    add(layer(i, "attn.Wqkv.weight"), {3 * kHidden, kHidden}, 0, 2 * lin);
    add(layer(i, "attn.out_proj.weight"), {kHidden, kHidden}, 0, lin);
    add(layer(i, "mlp.fc11.weight"), {kInner, kHidden}, 0, 2 * lin);
    add(layer(i, "mlp.fc12.weight"), {kInner, kHidden}, 0, 2 * lin);
    add(layer(i, "mlp.fc2.weight"), {kHidden, kInner}, 0, lin);
    for (const char* n : {"norm1", "norm2"}) {
      add(layer(i, (std::string(n) + ".weight").c_str()), {kHidden}, 1, 0.2f);
      add(layer(i, (std::string(n) + ".bias").c_str()), {kHidden}, 0, 0.2f);
    }
  }
  return w;
}

// ---- float64 reference (one sentence at a time, no padding) ----

// LayerNorm of rows of kHidden with the model's epsilon.
void layer_norm(Mat& x, const Weight& g, const Weight& b) { test::layer_norm(x, g, b, kHidden, kEps); }

// Rotate-half (NeoX) rotary embedding over whole heads, in place.
void rotary(double* head, int64_t pos) {
  const int64_t D = kHidden / kHeads, half = D / 2;
  for (int64_t j = 0; j < half; ++j) {
    const double inv_freq = 1.0 / std::pow(kRopeBase, static_cast<double>(2 * j) / static_cast<double>(D));
    const double a = static_cast<double>(pos) * inv_freq, c = std::cos(a), s = std::sin(a);
    const double x1 = head[j], x2 = head[j + half];
    head[j] = x1 * c - x2 * s;
    head[j + half] = x2 * c + x1 * s;
  }
}

std::vector<double> reference(const Weights& w, const std::vector<int32_t>& ids, bool swap_gate) {
  const auto L = static_cast<int64_t>(ids.size());
  const int64_t H = kHidden, D = kHidden / kHeads;
  Mat x(static_cast<size_t>(L * H));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t j = 0; j < H; ++j)
      x[l * H + j] = w.at("embeddings.word_embeddings.weight").data[ids[l] * H + j] +
                     w.at("embeddings.token_type_embeddings.weight").data[j];
  layer_norm(x, w.at("emb_ln.weight"), w.at("emb_ln.bias"));
  for (int64_t i = 0; i < kLayers; ++i) {
    Mat qkv = test::linear(x, w.at(layer(i, "attn.Wqkv.weight")), L);  // per row: (three, heads, D)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t part = 0; part < 2; ++part)
        for (int64_t h = 0; h < kHeads; ++h) rotary(&qkv[l * 3 * H + part * H + h * D], l);
    Mat ctx(static_cast<size_t>(L * H), 0.0);
    for (int64_t h = 0; h < kHeads; ++h)
      for (int64_t q = 0; q < L; ++q) {
        std::vector<double> p(static_cast<size_t>(L));
        double mx = -1e300, sum = 0;
        for (int64_t k = 0; k < L; ++k) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += qkv[q * 3 * H + h * D + d] * qkv[k * 3 * H + H + h * D + d];
          p[k] = s / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, p[k]);
        }
        for (auto& v : p) sum += (v = std::exp(v - mx));
        for (int64_t k = 0; k < L; ++k)
          for (int64_t d = 0; d < D; ++d) ctx[q * H + h * D + d] += p[k] / sum * qkv[k * 3 * H + 2 * H + h * D + d];
      }
    Mat attn = test::linear(ctx, w.at(layer(i, "attn.out_proj.weight")), L);
    for (size_t j = 0; j < x.size(); ++j) x[j] += attn[j];
    layer_norm(x, w.at(layer(i, "norm1.weight")), w.at(layer(i, "norm1.bias")));
    Mat up = test::linear(x, w.at(layer(i, "mlp.fc11.weight")), L);
    Mat gate = test::linear(x, w.at(layer(i, "mlp.fc12.weight")), L);
    if (swap_gate) std::swap(up, gate);
    for (size_t j = 0; j < up.size(); ++j) up[j] *= gate[j] / (1.0 + std::exp(-gate[j]));
    Mat y = test::linear(up, w.at(layer(i, "mlp.fc2.weight")), L);
    for (size_t j = 0; j < x.size(); ++j) x[j] += y[j];
    layer_norm(x, w.at(layer(i, "norm2.weight")), w.at(layer(i, "norm2.bias")));
  }
  return test::mean_pool_normalized(x, L, H);
}

// ---- model files ----

// The folder nomic-embed-text-v1.5 ships (config keys as in its config.json).
fs::path write_model_dir(const Weights& w, const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("rlx_nomic_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  nlohmann::json cfg = {{"model_type", "nomic_bert"},
                        {"architectures", {"NomicBertModel"}},
                        {"activation_function", "swiglu"},
                        {"n_embd", kHidden},
                        {"n_head", kHeads},
                        {"n_layer", kLayers},
                        {"n_inner", kInner},
                        {"n_positions", 128},
                        {"vocab_size", kVocab.size()},
                        {"pad_vocab_size_multiple", kPadMultiple},
                        {"type_vocab_size", kTypes},
                        {"layer_norm_epsilon", kEps},
                        {"rotary_emb_base", 1000},
                        {"rotary_emb_fraction", 1.0},
                        {"rotary_emb_interleaved", false},
                        {"rotary_emb_scale_base", nullptr},
                        {"rotary_scaling_factor", nullptr},
                        {"max_trained_positions", 2048},
                        {"prenorm", false},
                        {"causal", false},
                        {"qkv_proj_bias", false},
                        {"mlp_fc1_bias", false},
                        {"mlp_fc2_bias", false}};
  test::write_text(dir / "config.json", cfg.dump(2));
  test::write_mean_pooling_modules(dir, kHidden);
  std::string vocab;
  for (const auto& t : kVocab) vocab += t + "\n";
  test::write_text(dir / "vocab.txt", vocab);
  test::write_safetensors(dir / "model.safetensors", w);
  return dir;
}

// The same model as llama.cpp's converter writes it ("nomic-bert"): fc11 is
// ffn_up, fc12 ffn_gate; the vocabulary in its phantom-space spelling.
fs::path write_gguf(const Weights& w, DType linear, const std::string& tag) {
  GgufWriter g;
  const std::string a = "nomic-bert";
  g.set("general.architecture", GgufValue(a));
  g.set(a + ".context_length", GgufValue(uint32_t{128}));
  g.set(a + ".embedding_length", GgufValue(static_cast<uint32_t>(kHidden)));
  g.set(a + ".feed_forward_length", GgufValue(static_cast<uint32_t>(kInner)));
  g.set(a + ".block_count", GgufValue(static_cast<uint32_t>(kLayers)));
  g.set(a + ".attention.head_count", GgufValue(static_cast<uint32_t>(kHeads)));
  g.set(a + ".attention.layer_norm_epsilon", GgufValue(static_cast<float>(kEps)));
  g.set(a + ".attention.causal", GgufValue(false));
  g.set(a + ".rope.freq_base", GgufValue(static_cast<float>(kRopeBase)));
  g.set(a + ".pooling_type", GgufValue(uint32_t{1}));
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int64_t i = 0; i < kVocabRows; ++i) {
    const std::string t = i < static_cast<int64_t>(kVocab.size()) ? kVocab[i] : "[PAD" + std::to_string(i) + "]";
    const bool control = i < 5;
    types.push_back(control ? 3 : 1);
    tokens.push_back(control ? t : t.starts_with("##") ? t.substr(2) : "\u2581" + t);
  }
  g.set("tokenizer.ggml.model", GgufValue(std::string("bert")));
  g.set("tokenizer.ggml.tokens", GgufValue(GgufArray{tokens}));
  g.set("tokenizer.ggml.token_type", GgufValue(GgufArray{types}));
  g.set("tokenizer.ggml.unknown_token_id", GgufValue(uint32_t{1}));
  g.set("tokenizer.ggml.padding_token_id", GgufValue(uint32_t{0}));
  g.set("tokenizer.ggml.bos_token_id", GgufValue(uint32_t{2}));
  g.set("tokenizer.ggml.eos_token_id", GgufValue(uint32_t{3}));
  auto add = [&](const std::string& name, const std::string& hf, bool is_linear) {
    const Weight& t = w.at(hf);
    Tensor f = Tensor::from(t.data, t.shape);
    g.add_tensor(name, is_linear && linear != DType::F32 ? quantize(f, linear) : f);
  };
  add("token_embd.weight", "embeddings.word_embeddings.weight", false);
  add("token_types.weight", "embeddings.token_type_embeddings.weight", false);
  add("token_embd_norm.weight", "emb_ln.weight", false);
  add("token_embd_norm.bias", "emb_ln.bias", false);
  for (int64_t i = 0; i < kLayers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    add(b + "attn_qkv.weight", layer(i, "attn.Wqkv.weight"), true);
    add(b + "attn_output.weight", layer(i, "attn.out_proj.weight"), true);
    add(b + "ffn_up.weight", layer(i, "mlp.fc11.weight"), true);
    add(b + "ffn_gate.weight", layer(i, "mlp.fc12.weight"), true);
    add(b + "ffn_down.weight", layer(i, "mlp.fc2.weight"), true);
    add(b + "attn_output_norm.weight", layer(i, "norm1.weight"), false);
    add(b + "attn_output_norm.bias", layer(i, "norm1.bias"), false);
    add(b + "layer_output_norm.weight", layer(i, "norm2.weight"), false);
    add(b + "layer_output_norm.bias", layer(i, "norm2.bias"), false);
  }
  const fs::path p = fs::temp_directory_path() / ("rlx_nomic_" + tag + "_" + std::to_string(::getpid()) + ".gguf");
  g.write(p.string());
  return p;
}

using test::cosine;

struct Case {
  std::string device;
  DType dtype;
  std::string format;  // dir | gguf_f32 | gguf_q8_0
  double min_cos;
};

class NomicBert : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST(NomicBertConfig, ReadsNomicConfigAndRejectsOtherModelTypes) {
  const Weights w = make_weights();
  const fs::path dir = write_model_dir(w, "cfg");
  const auto c = bert::BertConfig::from_dir(dir.string());
  EXPECT_EQ(c.arch, bert::Arch::NomicBert);
  EXPECT_EQ(c.vocab_size, kVocabRows);  // padded to pad_vocab_size_multiple
  EXPECT_EQ(c.rope_dims, kHidden / kHeads);
  EXPECT_FLOAT_EQ(c.rope_base, 1000.0f);
  EXPECT_EQ(c.pooling, bert::Pooling::Mean);
  EXPECT_TRUE(c.normalize);

  auto j = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  j["model_type"] = "t5";
  test::write_text(dir / "config.json", j.dump());
  try {
    bert::BertConfig::from_dir(dir.string());
    ADD_FAILURE() << "model_type t5 was accepted";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("model_type 't5' is not supported"), std::string::npos) << e.what();
  }
  j["model_type"] = "nomic_bert";
  j["activation_function"] = "gelu";
  test::write_text(dir / "config.json", j.dump());
  EXPECT_THROW(bert::BertConfig::from_dir(dir.string()), Unsupported);
  fs::remove_all(dir);
}

TEST(NomicBertConfig, GgufOfAnotherArchitectureIsUnsupported) {
  GgufWriter g;
  g.set("general.architecture", GgufValue(std::string("llama")));
  const fs::path p = fs::temp_directory_path() / ("rlx_llama_" + std::to_string(::getpid()) + ".gguf");
  g.write(p.string());
  try {
    bert::SentenceEmbedder e(p.string(), {});
    ADD_FAILURE() << "a llama GGUF was accepted as an embedding model";
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("general.architecture 'llama'"), std::string::npos) << e.what();
  }
  fs::remove(p);
}

TEST(NomicBertReference, SwappedSwiGLUHalvesAreDetected) {
  // Guards the comparison itself: gate/up swapped must be far from the real output.
  const Weights w = make_weights();
  const std::vector<int32_t> ids = {2, 5, 6, 7, 8, 9, 10, 5, 11, 12, 22, 3};
  const auto good = reference(w, ids, false), swapped = reference(w, ids, true);
  std::vector<float> g(good.begin(), good.end());
  EXPECT_LT(cosine(g.data(), swapped), 0.99);
}

TEST_P(NomicBert, EmbeddingsMatchFloat64Reference) {
  const Case c = GetParam();
  register_builtin_backends();
  if (!backend_available(c.device.substr(0, c.device.find(':')))) GTEST_SKIP() << "no " << c.device << " device";
  const Weights w = make_weights();
  const std::string tag = c.device + "_" + c.format;
  const fs::path path = c.format == "dir"        ? write_model_dir(w, tag)
                        : c.format == "gguf_f32" ? write_gguf(w, DType::F32, tag)
                                                 : write_gguf(w, DType::Q8_0, tag);
  bert::EmbedOptions o;
  o.device = c.device;
  o.dtype = c.dtype;
  o.batch = 4;  // two batches of mixed lengths, so padding and the mask matter
  bert::SentenceEmbedder e(path.string(), o);
  ASSERT_EQ(e.config().arch, bert::Arch::NomicBert);
  const Tensor out = e.embed(kSentences);
  ASSERT_EQ(out.shape(), (std::vector<int64_t>{static_cast<int64_t>(kSentences.size()), kHidden}));
  double worst = 1;
  for (size_t i = 0; i < kSentences.size(); ++i) {
    const auto ids = e.tokenizer().encode(kSentences[i]).input_ids;
    const auto ref = reference(w, ids, false);
    const double cs = cosine(out.data<float>() + i * kHidden, ref);
    worst = std::min(worst, cs);
    EXPECT_GE(cs, c.min_cos) << "sentence " << i << " ('" << kSentences[i] << "', " << ids.size() << " tokens)";
  }
  std::printf("[ nomic ] %s %s %s worst cosine %.7f\n", c.device.c_str(), c.format.c_str(),
              dtype_name(c.dtype).data(), worst);
  fs::remove_all(path);
}

INSTANTIATE_TEST_SUITE_P(
    Devices, NomicBert,
    ::testing::Values(Case{"cpu", DType::F32, "dir", 0.99999}, Case{"cpu", DType::F16, "dir", 0.999},
                      Case{"cpu", DType::F32, "gguf_f32", 0.99999}, Case{"cpu", DType::F32, "gguf_q8_0", 0.999},
                      Case{"cuda", DType::F32, "dir", 0.99999}, Case{"cuda", DType::F16, "dir", 0.999},
                      Case{"cuda", DType::BF16, "dir", 0.995}, Case{"cuda", DType::F16, "gguf_q8_0", 0.998}),
    [](const auto& info) {
      return info.param.device + "_" + info.param.format + "_" + std::string(dtype_name(info.param.dtype));
    });
