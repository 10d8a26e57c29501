// Pieces of the tiny Hugging Face model folders the BERT-family tests write
// (random f32 weights under HF names, model.safetensors, text files) and of
// their float64 reference forward passes (row-major matrices in plain loops).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "rlx/core/tensor.h"

namespace rlx::test {

struct Weight {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
using Weights = std::map<std::string, Weight>;

// Adds uniform(center ± spread) tensors to a Weights map from one generator.
class RandomWeights {
 public:
  explicit RandomWeights(uint32_t seed) : rng_(seed) {}
  void add(Weights& w, const std::string& name, std::vector<int64_t> shape, float center, float spread) {
    std::uniform_real_distribution<float> u(center - spread, center + spread);
    Weight t{shape, std::vector<float>(static_cast<size_t>(shape_numel(shape)))};
    for (auto& v : t.data) v = u(rng_);
    w[name] = std::move(t);
  }

 private:
  std::mt19937 rng_;
};

using Mat = std::vector<double>;  // row-major [rows, cols]

// y[L, out] = x[L, in] · Wᵀ (+ b), W [out, in]
inline Mat linear(const Mat& x, const Weight& w, int64_t L, const Weight* b = nullptr) {
  const int64_t out = w.shape[0], in = w.shape[1];
  Mat y(static_cast<size_t>(L * out));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? b->data[static_cast<size_t>(o)] : 0.0;
      for (int64_t k = 0; k < in; ++k) s += x[static_cast<size_t>(l * in + k)] * w.data[static_cast<size_t>(o * in + k)];
      y[static_cast<size_t>(l * out + o)] = s;
    }
  return y;
}

// LayerNorm over rows of width n, in place.
inline void layer_norm(Mat& x, const Weight& g, const Weight& b, int64_t n, double eps) {
  for (size_t r = 0; r + static_cast<size_t>(n) <= x.size(); r += static_cast<size_t>(n)) {
    double* v = &x[r];
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j) mean += v[j];
    mean /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) var += (v[j] - mean) * (v[j] - mean);
    var /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) v[j] = (v[j] - mean) / std::sqrt(var + eps) * g.data[static_cast<size_t>(j)] + b.data[static_cast<size_t>(j)];
  }
}

// Weight-name prefixes (without ".weight"/".bias") of a post-LN encoder layer.
struct PostLnLayerNames {
  std::string q, k, v, o, attn_norm, up, down, out_norm;
};

// BERT's post-LN layers over x [L, hidden] (the embeddings after their norm):
// x = LN(x + attention·Wo), x = LN(x + gelu_erf(x·W1)·W2), full attention with
// scores·D^-½ + bias(head, query, key) when `bias` is given.
inline Mat post_ln_encoder(Mat x, int64_t L, int64_t hidden, int64_t heads, int64_t layers, double eps,
                           const Weights& w, const std::function<PostLnLayerNames(int64_t)>& names,
                           const std::function<double(int64_t, int64_t, int64_t)>& bias = {}) {
  const int64_t H = hidden, D = hidden / heads;
  auto at = [&](size_t i) { return static_cast<size_t>(i); };
  for (int64_t i = 0; i < layers; ++i) {
    const PostLnLayerNames n = names(i);
    auto lin = [&](const Mat& v, const std::string& p, int64_t rows) {
      return linear(v, w.at(p + ".weight"), rows, &w.at(p + ".bias"));
    };
    auto ln = [&](Mat& v, const std::string& p) { layer_norm(v, w.at(p + ".weight"), w.at(p + ".bias"), H, eps); };
    const Mat q = lin(x, n.q, L), k = lin(x, n.k, L), v = lin(x, n.v, L);
    Mat ctx(at(L * H), 0.0);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t a = 0; a < L; ++a) {
        std::vector<double> p(at(L));
        double mx = -1e300, sum = 0;
        for (int64_t b = 0; b < L; ++b) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += q[at(a * H + h * D + d)] * k[at(b * H + h * D + d)];
          p[at(b)] = s / std::sqrt(static_cast<double>(D)) + (bias ? bias(h, a, b) : 0.0);
          mx = std::max(mx, p[at(b)]);
        }
        for (auto& e : p) sum += (e = std::exp(e - mx));
        for (int64_t b = 0; b < L; ++b)
          for (int64_t d = 0; d < D; ++d) ctx[at(a * H + h * D + d)] += p[at(b)] / sum * v[at(b * H + h * D + d)];
      }
    const Mat o = lin(ctx, n.o, L);
    for (size_t j = 0; j < x.size(); ++j) x[j] += o[j];
    ln(x, n.attn_norm);
    Mat up = lin(x, n.up, L);
    for (double& e : up) e = 0.5 * e * (1.0 + std::erf(e / std::sqrt(2.0)));
    const Mat y = lin(up, n.down, L);
    for (size_t j = 0; j < x.size(); ++j) x[j] += y[j];
    ln(x, n.out_norm);
  }
  return x;
}

// BERT's weight names (BertModel, XLMRobertaModel), layer i.
inline std::string bert_layer(int64_t i, const std::string& s) { return "encoder.layer." + std::to_string(i) + "." + s; }
inline PostLnLayerNames bert_layer_names(int64_t i) {
  return {bert_layer(i, "attention.self.query"),       bert_layer(i, "attention.self.key"),
          bert_layer(i, "attention.self.value"),       bert_layer(i, "attention.output.dense"),
          bert_layer(i, "attention.output.LayerNorm"), bert_layer(i, "intermediate.dense"),
          bert_layer(i, "output.dense"),               bert_layer(i, "output.LayerNorm")};
}

// A WordPiece vocabulary of whole words for tiny models' vocab.txt.
inline const std::vector<std::string>& tiny_wordpiece_vocab() {
  static const std::vector<std::string> v = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown",
                                             "fox",   "jumps", "over",  "lazy",  "dog",    "a",   "cat",   "."};
  return v;
}

// A tiny random BERT under HF names.
struct TinyBert {
  int64_t vocab = 0, positions = 40, types = 2, hidden = 64, heads = 4, inner = 128, layers = 2;
};
inline Weights random_bert_weights(const TinyBert& t, uint32_t seed) {
  RandomWeights rw(seed);
  Weights w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float center, float spread) {
    rw.add(w, name, std::move(shape), center, spread);
  };
  const float lin = 1.0f / std::sqrt(static_cast<float>(t.hidden));
  add("embeddings.word_embeddings.weight", {t.vocab, t.hidden}, 0, 1);
  add("embeddings.position_embeddings.weight", {t.positions, t.hidden}, 0, 1);
  add("embeddings.token_type_embeddings.weight", {t.types, t.hidden}, 0, 0.5f);
  add("embeddings.LayerNorm.weight", {t.hidden}, 1, 0.2f);
  add("embeddings.LayerNorm.bias", {t.hidden}, 0, 0.2f);
  for (int64_t i = 0; i < t.layers; ++i) {
    const PostLnLayerNames n = bert_layer_names(i);
    for (const std::string& p : {n.q, n.k, n.v, n.o}) {
      add(p + ".weight", {t.hidden, t.hidden}, 0, 2 * lin);
      add(p + ".bias", {t.hidden}, 0, 0.2f);
    }
    add(n.up + ".weight", {t.inner, t.hidden}, 0, 2 * lin);
    add(n.up + ".bias", {t.inner}, 0, 0.2f);
    add(n.down + ".weight", {t.hidden, t.inner}, 0, lin);
    add(n.down + ".bias", {t.hidden}, 0, 0.2f);
    for (const std::string& p : {n.attn_norm, n.out_norm}) {
      add(p + ".weight", {t.hidden}, 1, 0.2f);
      add(p + ".bias", {t.hidden}, 0, 0.2f);
    }
  }
  return w;
}

// Token rows [L, hidden] of one unpadded sentence through BERT's embeddings
// (positions from `first_position`, token type 0) and the encoder.
inline Mat bert_encode(const TinyBert& t, const Weights& w, const std::vector<int32_t>& ids, int64_t first_position,
                       double eps) {
  const auto L = static_cast<int64_t>(ids.size());
  const int64_t H = t.hidden;
  Mat x(static_cast<size_t>(L * H));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t j = 0; j < H; ++j)
      x[static_cast<size_t>(l * H + j)] =
          w.at("embeddings.word_embeddings.weight").data[static_cast<size_t>(ids[static_cast<size_t>(l)] * H + j)] +
          w.at("embeddings.position_embeddings.weight").data[static_cast<size_t>((l + first_position) * H + j)] +
          w.at("embeddings.token_type_embeddings.weight").data[static_cast<size_t>(j)];
  layer_norm(x, w.at("embeddings.LayerNorm.weight"), w.at("embeddings.LayerNorm.bias"), H, eps);
  return post_ln_encoder(std::move(x), L, H, t.heads, t.layers, eps, w, bert_layer_names);
}

// Mean of the L rows of x [L, n], L2-normalized (sentence-transformers' Pooling + Normalize).
inline std::vector<double> mean_pool(const Mat& x, int64_t L, int64_t n) {
  std::vector<double> pooled(static_cast<size_t>(n), 0.0);
  for (int64_t l = 0; l < L; ++l)
    for (int64_t j = 0; j < n; ++j) pooled[static_cast<size_t>(j)] += x[static_cast<size_t>(l * n + j)] / static_cast<double>(L);
  return pooled;
}
inline std::vector<double> l2_normalized(std::vector<double> v) {
  double norm = 0;
  for (double e : v) norm += e * e;
  for (double& e : v) e /= std::sqrt(norm);
  return v;
}
inline std::vector<double> mean_pool_normalized(const Mat& x, int64_t L, int64_t n) {
  return l2_normalized(mean_pool(x, L, n));
}

inline double cosine(const float* a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    ab += a[i] * b[i];
    aa += double(a[i]) * a[i];
    bb += b[i] * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

inline void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

inline void write_safetensors(const std::filesystem::path& p, const Weights& w) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : w) {
    const uint64_t bytes = t.data.size() * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string h = header.dump();
  h.resize((h.size() + 7) / 8 * 8, ' ');
  std::ofstream f(p, std::ios::binary);
  const uint64_t n = h.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, t] : w)
    f.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size() * sizeof(float)));
}

// sentence-transformers' modules: Transformer, mean Pooling, Normalize.
inline void write_mean_pooling_modules(const std::filesystem::path& dir, int64_t hidden) {
  std::filesystem::create_directories(dir / "1_Pooling");
  write_text(dir / "modules.json",
             R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
                 {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
                 {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}])");
  write_text(dir / "1_Pooling" / "config.json",
             nlohmann::json{{"word_embedding_dimension", hidden}, {"pooling_mode_mean_tokens", true}}.dump());
}

// A device, a compute dtype and the cosine an embedding test asks of them.
struct DeviceCase {
  std::string device;
  DType dtype;
  double min_cos;
};
inline void PrintTo(const DeviceCase& c, std::ostream* os) { *os << c.device << " " << dtype_name(c.dtype); }
inline std::string device_case_name(const DeviceCase& c) { return c.device + "_" + std::string(dtype_name(c.dtype)); }

}  // namespace rlx::test
