// ModernBERT against a float64 forward pass written here in plain loops from
// transformers' modeling_modernbert.py. No ModernBERT weights are available
// offline, so the test writes a tiny random-weight model in the HF layout
// (config.json with model_type "modernbert", model.safetensors with HF names,
// with and without the masked-LM checkpoints' "model." prefix, vocab.txt and
// sentence-transformers' modules).
//
// Four layers with global attention every third: layers 0 and 3 global, 1 and
// 2 local with a window of ±3 keys, so sentences of more than 4 tokens tell
// the two apart. Guards on the comparison itself: the reference with every
// layer global, and with the GeGLU halves swapped, must NOT match rlx.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "rlx/models/bert/embedder.h"
#include "rlx/runtime/backend_registry.h"
#include "tests/models/tiny_hf.h"

using namespace rlx;
namespace fs = std::filesystem;
using test::Mat;
using test::Weight;
using test::Weights;

namespace {

constexpr int64_t kHidden = 64, kHeads = 4, kLayers = 4, kInner = 96, kGlobalEvery = 3, kLocalAttention = 6;
constexpr double kGlobalBase = 160000.0, kLocalBase = 10000.0, kEps = 1e-5;

const std::vector<std::string> kVocab = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox", "jumps", "over", "lazy",
    "dog",   "a",     "cat",   "sat",   "on",     "mat", "hello", "world", "##s", "##ing", ".",   ",",
    "!",     "?",     "run",   "sun",   "is",     "out"};

const std::vector<std::string> kSentences = {
    "the quick brown fox jumps over the lazy dog.",
    "hello world!",
    "a cat sat on the mat, the sun is out.",
    "dogs running?",
    "",
    "the the the the the the the the the the the the the the the the the the the the cat",
    "run",
};

std::string layer(int64_t i, const std::string& s) { return "layers." + std::to_string(i) + "." + s; }

struct Flags {
  bool norm_bias = false, attention_bias = false, mlp_bias = false;
};

Weights make_weights(const Flags& f) {
  test::RandomWeights rw(2468);
  Weights w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float center, float spread) {
    rw.add(w, name, std::move(shape), center, spread);
  };
  auto norm = [&](const std::string& name) {
    add(name + ".weight", {kHidden}, 1, 0.2f);
    if (f.norm_bias) add(name + ".bias", {kHidden}, 0, 0.2f);
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias) {
    add(name + ".weight", {out, in}, 0, 2.0f / std::sqrt(static_cast<float>(in)));
    if (bias) add(name + ".bias", {out}, 0, 0.2f);
  };
  add("embeddings.tok_embeddings.weight", {static_cast<int64_t>(kVocab.size()), kHidden}, 0, 1);
  norm("embeddings.norm");
  for (int64_t i = 0; i < kLayers; ++i) {
    if (i > 0) norm(layer(i, "attn_norm"));
    linear(layer(i, "attn.Wqkv"), 3 * kHidden, kHidden, f.attention_bias);
    linear(layer(i, "attn.Wo"), kHidden, kHidden, f.attention_bias);
    norm(layer(i, "mlp_norm"));
    linear(layer(i, "mlp.Wi"), 2 * kInner, kHidden, f.mlp_bias);
    linear(layer(i, "mlp.Wo"), kHidden, kInner, f.mlp_bias);
  }
  norm("final_norm");
  return w;
}

// ---- float64 reference (one sentence at a time, no padding) ----

struct RefOptions {
  bool all_global = false;  // guard: no local layers
  bool swap_glu = false;    // guard: GeGLU halves swapped
};

void norm(Mat& x, const Weights& w, const std::string& name) {
  const Weight zero{{kHidden}, std::vector<float>(kHidden, 0.0f)};
  const auto b = w.find(name + ".bias");
  test::layer_norm(x, w.at(name + ".weight"), b == w.end() ? zero : b->second, kHidden, kEps);
}

Mat linear(const Mat& x, const Weights& w, const std::string& name, int64_t L) {
  const auto b = w.find(name + ".bias");
  return test::linear(x, w.at(name + ".weight"), L, b == w.end() ? nullptr : &b->second);
}

// Rotate-half rotary embedding of one head, in place.
void rotary(double* head, int64_t pos, double base) {
  const int64_t D = kHidden / kHeads, half = D / 2;
  for (int64_t j = 0; j < half; ++j) {
    const double a = static_cast<double>(pos) / std::pow(base, static_cast<double>(2 * j) / static_cast<double>(D));
    const double x1 = head[j], x2 = head[j + half];
    head[j] = x1 * std::cos(a) - x2 * std::sin(a);
    head[j + half] = x2 * std::cos(a) + x1 * std::sin(a);
  }
}

std::vector<double> reference(const Weights& w, const std::vector<int32_t>& ids, const RefOptions& o = {}) {
  const auto L = static_cast<int64_t>(ids.size());
  const int64_t H = kHidden, D = kHidden / kHeads, window = kLocalAttention / 2;
  Mat x(static_cast<size_t>(L * H));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t j = 0; j < H; ++j) x[l * H + j] = w.at("embeddings.tok_embeddings.weight").data[ids[l] * H + j];
  norm(x, w, "embeddings.norm");
  for (int64_t i = 0; i < kLayers; ++i) {
    const bool global = o.all_global || i % kGlobalEvery == 0;
    Mat h = x;
    if (i > 0) norm(h, w, layer(i, "attn_norm"));
    Mat qkv = linear(h, w, layer(i, "attn.Wqkv"), L);  // per row: (three, heads, D)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t part = 0; part < 2; ++part)
        for (int64_t hd = 0; hd < kHeads; ++hd)
          rotary(&qkv[l * 3 * H + part * H + hd * D], l, global ? kGlobalBase : kLocalBase);
    Mat ctx(static_cast<size_t>(L * H), 0.0);
    for (int64_t hd = 0; hd < kHeads; ++hd)
      for (int64_t q = 0; q < L; ++q) {
        std::vector<double> p(static_cast<size_t>(L), 0.0);
        double mx = -1e300, sum = 0;
        for (int64_t k = 0; k < L; ++k) {
          if (!global && std::abs(q - k) > window) continue;
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += qkv[q * 3 * H + hd * D + d] * qkv[k * 3 * H + H + hd * D + d];
          p[k] = s / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, p[k]);
        }
        for (int64_t k = 0; k < L; ++k)
          sum += (p[k] = !global && std::abs(q - k) > window ? 0.0 : std::exp(p[k] - mx));
        for (int64_t k = 0; k < L; ++k)
          for (int64_t d = 0; d < D; ++d) ctx[q * H + hd * D + d] += p[k] / sum * qkv[k * 3 * H + 2 * H + hd * D + d];
      }
    const Mat attn = linear(ctx, w, layer(i, "attn.Wo"), L);
    for (size_t j = 0; j < x.size(); ++j) x[j] += attn[j];
    Mat m = x;
    norm(m, w, layer(i, "mlp_norm"));
    const Mat u = linear(m, w, layer(i, "mlp.Wi"), L);  // per row: [input; gate]
    Mat act(static_cast<size_t>(L * kInner));
    for (int64_t l = 0; l < L; ++l)
      for (int64_t j = 0; j < kInner; ++j) {
        double a = u[l * 2 * kInner + j], g = u[l * 2 * kInner + kInner + j];
        if (o.swap_glu) std::swap(a, g);
        act[l * kInner + j] = 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0))) * g;
      }
    const Mat y = linear(act, w, layer(i, "mlp.Wo"), L);
    for (size_t j = 0; j < x.size(); ++j) x[j] += y[j];
  }
  norm(x, w, "final_norm");
  return test::mean_pool_normalized(x, L, H);
}

// ---- model files ----

nlohmann::json config_json(const Flags& f) {
  return {{"model_type", "modernbert"},
          {"architectures", {"ModernBertModel"}},
          {"vocab_size", kVocab.size()},
          {"hidden_size", kHidden},
          {"intermediate_size", kInner},
          {"num_hidden_layers", kLayers},
          {"num_attention_heads", kHeads},
          {"hidden_activation", "gelu"},
          {"max_position_embeddings", 128},
          {"norm_eps", kEps},
          {"norm_bias", f.norm_bias},
          {"attention_bias", f.attention_bias},
          {"mlp_bias", f.mlp_bias},
          {"global_attn_every_n_layers", kGlobalEvery},
          {"local_attention", kLocalAttention},
          {"global_rope_theta", kGlobalBase},
          {"local_rope_theta", kLocalBase},
          {"classifier_pooling", "mean"},
          {"pad_token_id", 0},
          {"cls_token_id", 2},
          {"sep_token_id", 3}};
}

fs::path write_model_dir(const Weights& w, const Flags& f, const std::string& tag, const std::string& prefix = "") {
  const fs::path dir = fs::temp_directory_path() / ("rlx_modernbert_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  test::write_text(dir / "config.json", config_json(f).dump(2));
  test::write_mean_pooling_modules(dir, kHidden);
  std::string vocab;
  for (const auto& t : kVocab) vocab += t + "\n";
  test::write_text(dir / "vocab.txt", vocab);
  Weights stored;
  for (const auto& [name, t] : w) stored[prefix + name] = t;
  test::write_safetensors(dir / "model.safetensors", stored);
  return dir;
}

struct Case {
  std::string device;
  DType dtype;
  bool biases;         // norm, attention and MLP biases on
  std::string prefix;  // "" (ModernBertModel) or "model." (masked-LM checkpoint)
  double min_cos;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.device << " " << dtype_name(c.dtype) << (c.biases ? " biases" : "") << " prefix '" << c.prefix << "'";
}

class ModernBert : public ::testing::TestWithParam<Case> {};

void expect_unsupported(const fs::path& dir, const nlohmann::json& cfg, const std::string& words) {
  test::write_text(dir / "config.json", cfg.dump());
  try {
    bert::BertConfig::from_dir(dir.string());
    ADD_FAILURE() << "accepted: " << cfg.dump().substr(0, 200);
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(ModernBertConfig, ReadsBothConfigFormsAndNamesWhatIsUnsupported) {
  const Flags f;
  const fs::path dir = write_model_dir(make_weights(f), f, "cfg");
  auto c = bert::BertConfig::from_dir(dir.string());
  EXPECT_EQ(c.arch, bert::Arch::ModernBert);
  EXPECT_EQ(c.local_window, kLocalAttention / 2);
  EXPECT_EQ(c.global_every, kGlobalEvery);
  EXPECT_FLOAT_EQ(c.rope_base, static_cast<float>(kGlobalBase));
  EXPECT_FLOAT_EQ(c.rope_base_local, static_cast<float>(kLocalBase));
  EXPECT_EQ(c.rope_dims, kHidden / kHeads);
  EXPECT_FALSE(c.norm_bias);
  EXPECT_EQ(c.type_vocab, 0);
  EXPECT_EQ(bert::attention_bias_elements(c, 10), 100);

  // transformers 5's form: layer_types and rope_parameters instead of the thetas.
  nlohmann::json v5 = config_json(f);
  v5.erase("global_rope_theta");
  v5.erase("local_rope_theta");
  v5["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention", "full_attention"};
  v5["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 50000.0}}},
                           {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 5000.0}}}};
  test::write_text(dir / "config.json", v5.dump());
  c = bert::BertConfig::from_dir(dir.string());
  EXPECT_FLOAT_EQ(c.rope_base, 50000.0f);
  EXPECT_FLOAT_EQ(c.rope_base_local, 5000.0f);

  nlohmann::json bad = v5;
  bad["layer_types"][1] = "full_attention";
  expect_unsupported(dir, bad, "layer_types[1]");
  bad = v5;
  bad["rope_parameters"]["full_attention"]["rope_type"] = "yarn";
  expect_unsupported(dir, bad, "rope_type");
  bad = config_json(f);
  bad["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  expect_unsupported(dir, bad, "rope_scaling");
  bad = config_json(f);
  bad["hidden_activation"] = "silu";
  expect_unsupported(dir, bad, "hidden_activation = 'silu'");
  fs::remove_all(dir);
}

TEST(ModernBertConfig, MissingWeightIsNamed) {
  const Flags f;
  Weights w = make_weights(f);
  w.erase(layer(2, "mlp.Wi.weight"));
  const fs::path dir = write_model_dir(w, f, "missing");
  try {
    bert::SentenceEmbedder e(dir.string(), {});
    ADD_FAILURE() << "a model without layers.2.mlp.Wi.weight loaded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("layers.2.mlp.Wi.weight"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// global_attn_every_n_layers = 1: no local layer, the band input goes unused.
TEST(ModernBertConfig, EveryLayerGlobal) {
  register_builtin_backends();
  const Flags f;
  const Weights w = make_weights(f);
  const fs::path dir = write_model_dir(w, f, "all_global");
  nlohmann::json cfg = config_json(f);
  cfg["global_attn_every_n_layers"] = 1;
  test::write_text(dir / "config.json", cfg.dump());
  bert::SentenceEmbedder e(dir.string(), {});
  EXPECT_EQ(bert::attention_bias_elements(e.config(), 10), 0);
  const Tensor out = e.embed(kSentences);
  for (size_t i = 0; i < kSentences.size(); ++i) {
    const auto ids = e.tokenizer().encode(kSentences[i]).input_ids;
    EXPECT_GE(test::cosine(out.data<float>() + i * kHidden, reference(w, ids, {.all_global = true})), 0.99999) << i;
  }
  fs::remove_all(dir);
}

TEST(ModernBertReference, LocalAttentionAndGluOrderAreVisible) {
  const Weights w = make_weights({});
  const std::vector<int32_t> ids = {2, 5, 6, 7, 8, 9, 10, 5, 11, 12, 22, 3};
  const auto good = reference(w, ids);
  std::vector<float> g(good.begin(), good.end());
  EXPECT_LT(test::cosine(g.data(), reference(w, ids, {.all_global = true})), 0.999);
  EXPECT_LT(test::cosine(g.data(), reference(w, ids, {.swap_glu = true})), 0.99);
}

TEST_P(ModernBert, EmbeddingsMatchFloat64Reference) {
  const Case c = GetParam();
  register_builtin_backends();
  if (!backend_available(c.device.substr(0, c.device.find(':')))) GTEST_SKIP() << "no " << c.device << " device";
  const Flags f{c.biases, c.biases, c.biases};
  const Weights w = make_weights(f);
  const std::string tag = c.device + (c.biases ? "_b" : "") + (c.prefix.empty() ? "" : "_p");
  const fs::path dir = write_model_dir(w, f, tag, c.prefix);
  bert::EmbedOptions o;
  o.device = c.device;
  o.dtype = c.dtype;
  o.batch = 3;  // batches of mixed lengths, so padding and the key mask matter in local and global layers
  bert::SentenceEmbedder e(dir.string(), o);
  ASSERT_EQ(e.config().arch, bert::Arch::ModernBert);
  const Tensor out = e.embed(kSentences);
  ASSERT_EQ(out.shape(), (std::vector<int64_t>{static_cast<int64_t>(kSentences.size()), kHidden}));
  double worst = 1;
  for (size_t i = 0; i < kSentences.size(); ++i) {
    const auto ids = e.tokenizer().encode(kSentences[i]).input_ids;
    const double cs = test::cosine(out.data<float>() + i * kHidden, reference(w, ids));
    worst = std::min(worst, cs);
    EXPECT_GE(cs, c.min_cos) << "sentence " << i << " ('" << kSentences[i] << "', " << ids.size() << " tokens)";
  }
  std::printf("[ modernbert ] %s %s%s worst cosine %.7f\n", c.device.c_str(), dtype_name(c.dtype).data(),
              c.biases ? " biases" : "", worst);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Devices, ModernBert,
    ::testing::Values(Case{"cpu", DType::F32, false, "", 0.99999}, Case{"cpu", DType::F32, true, "model.", 0.99999},
                      Case{"cpu", DType::F16, false, "", 0.999}, Case{"cuda", DType::F32, false, "", 0.99999},
                      Case{"cuda", DType::F16, true, "model.", 0.999}, Case{"cuda", DType::BF16, false, "", 0.995}),
    [](const auto& info) {
      const Case& c = info.param;
      return c.device + "_" + std::string(dtype_name(c.dtype)) + (c.biases ? "_biases" : "") +
             (c.prefix.empty() ? "" : "_prefixed");
    });
