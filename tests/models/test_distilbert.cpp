// DistilBERT (msmarco-distilbert-*, multi-qa-distilbert-*, distiluse-*):
// BERT's post-LN layers without token types, under transformers' DistilBERT
// weight names, against the float64 BERT reference (tiny_hf.h) given the same
// weights under BERT's names.
#include <gtest/gtest.h>

#include <filesystem>

#include <unistd.h>

#include "rlx/models/bert/embedder.h"
#include "tests/models/tiny_hf.h"

using namespace rlx;
namespace fs = std::filesystem;
using test::Weights;

namespace {

const std::vector<std::string>& kVocab = test::tiny_wordpiece_vocab();
const std::vector<std::string> kSentences = {"the quick brown fox jumps over the lazy dog.", "a cat.", ""};

test::TinyBert tiny() {
  test::TinyBert t;
  t.vocab = static_cast<int64_t>(kVocab.size());
  t.types = 1;  // the reference's type row is zeroed: DistilBERT has none
  return t;
}

// BERT's layer names → DistilBERT's, written independently of rlx's mapping.
std::string distil(const std::string& bert) {
  static const std::vector<std::pair<std::string, std::string>> kMap = {
      {"attention.self.query", "attention.q_lin"},      {"attention.self.key", "attention.k_lin"},
      {"attention.self.value", "attention.v_lin"},      {"attention.output.dense", "attention.out_lin"},
      {"attention.output.LayerNorm", "sa_layer_norm"}, {"intermediate.dense", "ffn.lin1"},
      {"output.dense", "ffn.lin2"},                     {"output.LayerNorm", "output_layer_norm"}};
  std::string s = bert;
  if (s.rfind("encoder.layer.", 0) == 0) {
    s = "transformer.layer." + s.substr(14);
    for (const auto& [from, to] : kMap)
      if (const size_t at = s.find("." + from + "."); at != std::string::npos) return s.replace(at + 1, from.size(), to);
  }
  return s;
}

fs::path write_model_dir(const Weights& bert_named, const std::string& tag) {
  const test::TinyBert t = tiny();
  const fs::path dir = fs::temp_directory_path() / ("rlx_distilbert_" + tag + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const nlohmann::json cfg = {{"model_type", "distilbert"}, {"dim", t.hidden},       {"n_layers", t.layers},
                              {"n_heads", t.heads},         {"hidden_dim", t.inner}, {"activation", "gelu"},
                              {"max_position_embeddings", t.positions},            {"vocab_size", t.vocab},
                              {"sinusoidal_pos_embds", false}};
  test::write_text(dir / "config.json", cfg.dump());
  std::string vocab;
  for (const auto& v : kVocab) vocab += v + "\n";
  test::write_text(dir / "vocab.txt", vocab);
  test::write_mean_pooling_modules(dir, t.hidden);
  Weights stored;  // as DistilBertForMaskedLM checkpoints keep them: a "distilbert." prefix
  for (const auto& [name, w] : bert_named)
    if (name != "embeddings.token_type_embeddings.weight") stored["distilbert." + distil(name)] = w;
  test::write_safetensors(dir / "model.safetensors", stored);
  return dir;
}

}  // namespace

TEST(DistilBert, EmbeddingsMatchFloat64Reference) {
  Weights w = test::random_bert_weights(tiny(), 11);
  for (float& v : w.at("embeddings.token_type_embeddings.weight").data) v = 0;
  const fs::path dir = write_model_dir(w, "ref");
  const auto c = bert::BertConfig::from_dir(dir.string());
  EXPECT_EQ(c.arch, bert::Arch::DistilBert);
  EXPECT_EQ(c.type_vocab, 0);
  bert::EmbedOptions o;
  o.device = "cpu";
  o.batch = 2;
  bert::SentenceEmbedder e(dir.string(), o);
  const Tensor out = e.embed(kSentences);
  for (size_t i = 0; i < kSentences.size(); ++i) {
    const auto ids = e.tokenizer().encode(kSentences[i]).input_ids;
    const auto x = test::bert_encode(tiny(), w, ids, 0, 1e-12);
    const auto ref = test::mean_pool_normalized(x, static_cast<int64_t>(ids.size()), tiny().hidden);
    EXPECT_GE(test::cosine(out.data<float>() + i * tiny().hidden, ref), 0.99999) << "sentence " << i;
  }
  fs::remove_all(dir);
}

TEST(DistilBert, MissingWeightIsNamedUnderItsOwnName) {
  const Weights w = test::random_bert_weights(tiny(), 11);
  const fs::path dir = write_model_dir(w, "missing");
  Weights stored;
  for (const auto& [name, t] : w)
    if (name != "embeddings.token_type_embeddings.weight" && name != "encoder.layer.1.output.dense.bias")
      stored["distilbert." + distil(name)] = t;
  test::write_safetensors(dir / "model.safetensors", stored);
  try {
    bert::SentenceEmbedder e(dir.string(), {"cpu"});
    ADD_FAILURE() << "a model missing a weight loaded";
  } catch (const FormatError& err) {
    EXPECT_NE(std::string(err.what()).find("'distilbert.transformer.layer.1.ffn.lin2.bias' is missing"),
              std::string::npos)
        << err.what();
  }
  fs::remove_all(dir);
}
